"""The backend's name and its registration with torch.distributed: what ``autoload`` and ``backend`` share.

Idempotent and cheap: it imports ``torch.distributed`` and nothing of collsched.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

__all__ = ["BACKEND_NAME", "register_creator"]

BACKEND_NAME = "collsched"


def _name_the_default(creator: Callable[..., Any]) -> Callable[..., Any]:
    """``creator``, which also names collsched the default backend of the group being made when torch did not.

    With a per-device string (``"cpu:collsched"``, ``"cpu:gloo,cuda:collsched"``) torch means to make a plugin
    the group's default backend, but compares the plugin's upper-case key with the lower-case names of the
    string, so the group keeps none and ``destroy_process_group`` warns "No backend of type 0 found". The
    group is a local of the function that calls the creator; a torch that names it otherwise is left alone.
    """

    def create(*args: Any, **kwargs: Any) -> Any:
        import torch.distributed as dist

        pg = sys._getframe(1).f_locals.get("pg")
        if type(pg) is dist.ProcessGroup and pg._get_backend_name() == dist.Backend.UNDEFINED:
            pg._set_default_backend(dist.ProcessGroup.BackendType.CUSTOM)
        return creator(*args, **kwargs)

    return create


def register_creator(creator: Callable[..., Any]) -> None:
    """Register ``collsched`` for CPU and CUDA tensors (extended creator API); a no-op when already done."""
    import torch.distributed as dist

    if not dist.is_available() or BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND_NAME, _name_the_default(creator), extended_api=True,
                                  devices=["cpu", "cuda"])
