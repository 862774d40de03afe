"""How a schedule's switch operations run on torch: lowered to point-to-point transfers, or refused.

``on_torch(schedule)`` is what ``runners.execution.runner.run`` executes: the schedule itself when it has no switch
operations, else ``algorithms.lower.point_to_point(schedule)`` (one rank per operation acts as the switch),
which runs on gloo and on NCCL point-to-point alike and computes the same result. The lowering is a pure
Schedule -> Schedule transform, so the executors never see a switch operation. A schedule whose lowering
does not fit (its scratch grows past the IR's limits) is refused with ``SwitchError``, naming the schedule.

CUDA symmetric memory with multicast (``torch.distributed._symmetric_memory``, NVLink SHARP) is probed by
``multicast_available``; the runner does not yet execute switch operations through it, so CUDA runs use the
lowering too (docs/backend.md, "Switch operations").
"""

from __future__ import annotations

from collections import OrderedDict

import torch

from algorithms.errors import CollschedError
from algorithms.ir import Schedule
from algorithms.lower import point_to_point

__all__ = ["SwitchError", "multicast_available", "on_torch"]

_CACHE: OrderedDict[int, tuple[Schedule, Schedule]] = OrderedDict()
_CACHE_SIZE = 64


class SwitchError(CollschedError, ValueError):
    """A schedule's switch operations cannot run on this group."""


def on_torch(schedule: Schedule) -> Schedule:
    """The schedule the runner executes for ``schedule`` (cached by identity: the runner calls this every run)."""
    if not schedule.switch_ops:
        return schedule
    hit = _CACHE.get(id(schedule))
    if hit is not None and hit[0] is schedule:
        _CACHE.move_to_end(id(schedule))
        return hit[1]
    try:
        lowered = point_to_point(schedule)
    except CollschedError as e:
        first = schedule.switch_ops[0]
        raise SwitchError(f"{schedule.name} {schedule.collective.describe()}: its switch operations (step "
                          f"{first.step}: {first.describe()}) cannot run as point-to-point transfers: {e}") from None
    _CACHE[id(schedule)] = (schedule, lowered)
    if len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return lowered


def multicast_available(device: torch.device) -> bool:
    """Whether ``device`` has CUDA symmetric memory with multicast (NVLink SHARP); False wherever torch lacks it."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return False
    try:
        from torch._C._distributed_c10d import _SymmetricMemory
    except ImportError:
        return False
    probe = getattr(_SymmetricMemory, "has_multicast_support", None)
    if probe is None:
        return False
    try:
        return bool(probe(torch._C._autograd.DeviceType.CUDA, device.index or 0))
    except (RuntimeError, TypeError):
        return False
