"""The shared prologue of the backend's collectives, in one process (a one-rank group: nothing spawned).

The prologue checks the reduce op and the root before anything is queued, and the
methods keep torch's calling conventions (positional or keyword ``opts``).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from runners.backend.group import CollschedProcessGroup


@pytest.fixture
def group() -> Iterator[CollschedProcessGroup]:
    pg = CollschedProcessGroup(dist.HashStore(), 0, 1, timedelta(seconds=30))
    try:
        yield pg
    finally:
        pg.shutdown()


def _premul_sum() -> dist.AllreduceOptions:
    opts = dist.AllreduceOptions()
    opts.reduceOp = dist._make_nccl_premul_sum(2.0)
    return opts


def test_an_unsupported_op_is_refused_before_anything_is_queued(group: CollschedProcessGroup) -> None:
    t = torch.ones(4)
    with pytest.raises(ValueError, match=r"collsched allreduce: reduce op .* is not supported"):
        group.allreduce([t], _premul_sum())
    opts = dist.ReduceScatterOptions()
    opts.reduceOp = dist._make_nccl_premul_sum(2.0)
    with pytest.raises(ValueError, match=r"collsched reduce_scatter_tensor: reduce op"):
        group.reduce_scatter_single(torch.empty(4), t, opts=opts)
    assert sum(group.executed.values()) == 0


@pytest.mark.parametrize("root", [-1, 1, 5])
def test_a_root_out_of_range_is_refused(group: CollschedProcessGroup, root: int) -> None:
    opts = dist.BroadcastOptions()
    opts.rootRank = root
    with pytest.raises(ValueError, match=rf"collsched broadcast: root {root} out of range for 1 ranks"):
        group.broadcast([torch.ones(2)], opts)
    gather = dist.GatherOptions()
    gather.rootRank = root
    with pytest.raises(ValueError, match=rf"collsched gather: root {root} out of range"):
        group.gather([[torch.ones(2)]], [torch.ones(2)], gather)


def test_mixed_devices_and_wrong_arguments_are_clear_errors(group: CollschedProcessGroup) -> None:
    with pytest.raises(ValueError, match="tensors must be on one device type"):
        group.allreduce([torch.ones(1), torch.ones(1, device="meta")])
    with pytest.raises(TypeError, match="allreduce"):
        group.allreduce([torch.ones(1)], None, "extra")


def test_methods_show_torch_signatures() -> None:
    sig = inspect.signature(CollschedProcessGroup.all_to_all_single)
    assert list(sig.parameters) == ["self", "output", "input", "output_split_sizes", "input_split_sizes", "opts"]
    assert sig.parameters["opts"].default is None
    assert list(inspect.signature(CollschedProcessGroup.reduce).parameters) == ["self", "tensors", "opts"]
