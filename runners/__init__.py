"""collsched on real hardware: schedules run on torch.distributed, as a runner and as a backend.

Subpackages, each building only on those above it:

- ``runners.errors``: the runner's errors and the notes a failing rank leaves for its peers;
- ``runners.execution``: one schedule on one group: the rank plan, buffers and staging, the cross-rank
  argument check, the Python and native executors, and ``run`` itself;
- ``runners.backend``: the ``collsched`` torch.distributed backend: the process group (Python and C++
  fronts), torch's collectives translated, the policy and its tuned tables, the queue and Work objects,
  registration with torch;
- ``runners.commands``: the command line: ``bench``, ``calibrate``/``validate``/``tune``, ``demo``,
  process launch, and the ``collsched`` entry point.

The C++ sources of the native executor and backend live in ``runners/csrc``.
"""
