"""The ``collsched`` torch.distributed backend: unmodified PyTorch code runs verified schedules.

- ``group``: the process group (``CollschedProcessGroup``) and torch's creator;
- ``cpp``: its C++ front (``runners/csrc``): Work objects with real futures, no GIL on a cache hit;
- ``collectives``: torch's collectives translated into schedule runs;
- ``policy`` and ``tuning/``: which algorithm serves which call, and the tuned tables;
- ``alltoallv`` and ``direct``: uneven all-to-all as a schedule, and point-to-point fallbacks;
- ``work``: what a collective returns, and the queue that runs a group's collectives;
- ``inner_groups``: the plain gloo and nccl groups underneath;
- ``settings``: the settings every rank of a group must share, compared when the group is made;
- ``registration`` and ``autoload``: registration with torch, cheap and idempotent.

Importing this package registers the backend with a creator that imports ``group`` only when the first
collsched group is made (what torch does itself at ``import torch`` through the ``torch.backends`` entry point).
"""

from runners.backend.autoload import register

register()
