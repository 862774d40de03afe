"""The backend's name and its registration with torch.distributed: what ``autoload`` and ``backend`` share.

Idempotent and cheap: it imports ``torch.distributed`` and nothing of collsched.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["BACKEND_NAME", "register_creator"]

BACKEND_NAME = "collsched"


def register_creator(creator: Callable[..., Any]) -> None:
    """Register ``collsched`` for CPU and CUDA tensors (extended creator API); a no-op when already done."""
    import torch.distributed as dist

    if not dist.is_available() or BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND_NAME, creator, extended_api=True, devices=["cpu", "cuda"])
