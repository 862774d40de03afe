"""Register the ``collsched`` backend with torch.distributed, cheaply and idempotently.

Two ways in, both ending here:

- ``import runners.backend`` calls ``register()``;
- with collsched installed, torch calls ``register()`` itself at ``import torch``:
  pyproject.toml declares it in the ``torch.backends`` entry-point group,
  which torch loads unless ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``. So a training
  script needs no import at all, only ``init_process_group("collsched")``.

Registration imports nothing of collsched: the creator imports
``runners.backend`` when the first collsched group is made, so every
``import torch`` stays as fast as before.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BACKEND_NAME", "register"]

BACKEND_NAME = "collsched"


def _create(opts: Any, backend_options: Any = None) -> Any:
    from runners import backend

    return backend.create(opts, backend_options)


def register() -> None:
    """Register ``collsched`` for CPU and CUDA tensors (extended creator API); a no-op when already done."""
    import torch.distributed as dist

    if not dist.is_available() or BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True, devices=["cpu", "cuda"])
