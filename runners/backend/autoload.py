"""Register the ``collsched`` backend with torch.distributed, cheaply and idempotently.

Two ways in, both ending here:

- ``import runners.backend`` (or any of its modules) registers the same creator (``runners.backend.registration``);
- with collsched installed, torch calls ``register()`` itself at ``import torch``:
  pyproject.toml declares it in the ``torch.backends`` entry-point group,
  which torch loads unless ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``. So a training
  script needs no import at all, only ``init_process_group("collsched")``.

Registration imports nothing of collsched: the creator imports
``runners.backend.group`` when the first collsched group is made, so every
``import torch`` stays as fast as before.
"""

from __future__ import annotations

from typing import Any

from runners.backend.registration import BACKEND_NAME, register_creator

__all__ = ["BACKEND_NAME", "register"]


def _create(opts: Any, backend_options: Any = None) -> Any:
    from runners.backend import group as backend

    return backend.create(opts, backend_options)


def register() -> None:
    """Register ``collsched`` with a creator that imports ``runners.backend.group`` when the first group is made."""
    register_creator(_create)
