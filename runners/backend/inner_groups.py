"""The plain gloo and nccl groups a collsched group runs its schedules and point-to-point calls on."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

__all__ = ["forget_inner_group", "inner_group"]


def inner_group(
    store: dist.Store, rank: int, size: int, timeout: timedelta, device: str, global_ranks: Sequence[int], label: str,
    bound_device: torch.device | None = None,
) -> dist.ProcessGroup:
    """A plain gloo (CPU) or nccl (CUDA) ProcessGroup over the same ranks, known to ``dist`` for point-to-point.

    It is made like ``_new_process_group_helper`` makes one, but registered
    only in the tables that ``dist.isend``/``dist.irecv``/``get_global_rank``
    read: not in ``pg_names``, so ``destroy_process_group`` leaves its
    shutdown to the collsched group that owns it. With ``bound_device`` (a
    CUDA device every rank of the group passes, as ``init_process_group``'s
    ``device_id``) the nccl communicator is made now, as torch's eager
    initialisation makes it, and the group is bound to that device; without
    it the communicator is made at the group's first collective (the runner
    makes one before its first point-to-point operation).
    """
    prefix = dist.PrefixStore(f"collsched/{label}/", store)
    pg = dist.ProcessGroup(prefix, rank, size)
    if device == "cpu":
        backend: Any = dist.ProcessGroupGloo(prefix, rank, size, timeout)
        backend_type, name = dist.ProcessGroup.BackendType.GLOO, "gloo"
    else:
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        options.global_ranks_in_group = list(global_ranks)
        backend = dist.ProcessGroupNCCL(prefix, rank, size, options)
        backend_type, name = dist.ProcessGroup.BackendType.NCCL, "nccl"
    backend._set_sequence_number_for_group()
    pg._set_default_backend(backend_type)
    pg._register_backend(torch.device(device), backend_type, backend)
    pg._set_group_name(f"collsched/{label}")  # type: ignore[arg-type]
    world = c10d._world
    world.pg_group_ranks[pg] = {g: i for i, g in enumerate(global_ranks)}
    world.pg_map[pg] = (name, prefix)
    world.pg_backend_config[pg] = f"{device}:{name}"
    if bound_device is not None and device == "cuda":
        pg.bound_device_id = bound_device
        if backend.supports_splitting:
            backend.eager_connect_single_device(bound_device)
    return pg


def forget_inner_group(pg: dist.ProcessGroup) -> None:
    world = c10d._world
    for table in (world.pg_group_ranks, world.pg_map, world.pg_backend_config):
        table.pop(pg, None)
    pg.shutdown()
