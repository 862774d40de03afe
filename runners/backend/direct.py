"""Direct point-to-point collectives: the backend's fallback for shapes no schedule covers.

A schedule splits equal-sized buffers into chunks, so it cannot express an
``all_to_all_single`` with uneven split sizes or an ``all_gather`` into a list
of tensors of different lengths. For those, and for any kind that has no
registered algorithm, every rank exchanges with its peers directly: all
receives and sends of one collective are posted together on the group's
point-to-point channel and then waited on (never a blocking send, so no
cycle of sends can deadlock). Reductions combine the contributions in rank
order 0..p-1, so every rank computes bitwise the same result.

Cost: each rank sends and receives its whole share once, in one round
(latency α, bandwidth p-1 messages per rank); reductions hold the p-1
received contributions in temporary memory (p-1 times the buffer).

Every function takes the inner ``ProcessGroup`` (ranks are group ranks) and
contiguous tensors; ``runners.backend.group`` prepares both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from algorithms.ir import Kind

__all__ = [
    "allgather",
    "allreduce",
    "alltoall",
    "barrier",
    "broadcast",
    "combine",
    "exchange",
    "gather",
    "reduce",
    "reduce_scatter",
    "run_kind",
    "scatter",
]

_R = dist.ReduceOp
_TAG = 0


def combine(op: dist.ReduceOp.RedOpType, acc: torch.Tensor, other: torch.Tensor) -> None:
    """acc := acc ⊕ other for one reduce op (AVG sums; the caller divides once at the end)."""
    if op in (_R.SUM, _R.AVG):
        acc.add_(other)
    elif op == _R.PRODUCT:
        acc.mul_(other)
    elif op == _R.MIN:
        torch.minimum(acc, other, out=acc)
    elif op == _R.MAX:
        torch.maximum(acc, other, out=acc)
    elif op == _R.BAND:
        acc.bitwise_and_(other)
    elif op == _R.BOR:
        acc.bitwise_or_(other)
    elif op == _R.BXOR:
        acc.bitwise_xor_(other)
    else:
        raise ValueError(f"reduce op {op} is not supported by collsched")


def _finish_avg(op: dist.ReduceOp.RedOpType, acc: torch.Tensor, ranks: int) -> None:
    if op == _R.AVG:
        acc.div_(ranks)


def exchange(
    group: dist.ProcessGroup,
    sends: Sequence[tuple[int, torch.Tensor]],
    recvs: Sequence[tuple[int, torch.Tensor]],
) -> None:
    """Post every receive, then every send, of one collective; wait for all. Empty tensors are skipped."""
    works = [group.recv([t], peer, _TAG) for peer, t in recvs if t.numel() > 0]
    works += [group.send([t], peer, _TAG) for peer, t in sends if t.numel() > 0]
    for w in works:
        w.wait()


def _reduce_in_rank_order(op: dist.ReduceOp.RedOpType, parts: Sequence[torch.Tensor], out: torch.Tensor) -> None:
    """out := parts[0] ⊕ parts[1] ⊕ ... in rank order, so every rank rounds the same way."""
    acc = parts[0].clone()
    for part in parts[1:]:
        combine(op, acc, part)
    _finish_avg(op, acc, len(parts))
    out.copy_(acc)


def allgather(group: dist.ProcessGroup, outputs: Sequence[torch.Tensor], tensor: torch.Tensor) -> None:
    """outputs[s] := rank s's ``tensor``; the outputs may differ in length from rank to rank."""
    me, p = group.rank(), group.size()
    outputs[me].copy_(tensor)
    exchange(group, [(s, tensor) for s in range(p) if s != me], [(s, outputs[s]) for s in range(p) if s != me])


def alltoall(group: dist.ProcessGroup, outputs: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor]) -> None:
    """outputs[s] := rank s's inputs[me]; pieces may be uneven (the all_to_all_single split sizes)."""
    me, p = group.rank(), group.size()
    outputs[me].copy_(inputs[me])
    exchange(group, [(s, inputs[s]) for s in range(p) if s != me], [(s, outputs[s]) for s in range(p) if s != me])


def broadcast(group: dist.ProcessGroup, tensor: torch.Tensor, root: int) -> None:
    """Every rank's ``tensor`` := root's, the root sending to each peer in turn."""
    me, p = group.rank(), group.size()
    if me == root:
        exchange(group, [(s, tensor) for s in range(p) if s != me], [])
    else:
        exchange(group, [], [(root, tensor)])


def gather(group: dist.ProcessGroup, outputs: Sequence[torch.Tensor] | None, tensor: torch.Tensor, root: int) -> None:
    """On the root, outputs[s] := rank s's ``tensor``; other ranks send theirs."""
    me, p = group.rank(), group.size()
    if me != root:
        exchange(group, [(root, tensor)], [])
        return
    assert outputs is not None  # checked by the backend before the job is queued
    outputs[me].copy_(tensor)
    exchange(group, [], [(s, outputs[s]) for s in range(p) if s != me])


def scatter(group: dist.ProcessGroup, output: torch.Tensor, inputs: Sequence[torch.Tensor] | None, root: int) -> None:
    """Rank r's ``output`` := the root's inputs[r]."""
    me, p = group.rank(), group.size()
    if me != root:
        exchange(group, [], [(root, output)])
        return
    assert inputs is not None  # checked by the backend before the job is queued
    output.copy_(inputs[me])
    exchange(group, [(s, inputs[s]) for s in range(p) if s != me], [])


def reduce(group: dist.ProcessGroup, tensor: torch.Tensor, root: int, op: dist.ReduceOp.RedOpType) -> None:
    """The root's ``tensor`` := ⊕ of every rank's; other ranks' tensors are left unchanged."""
    me, p = group.rank(), group.size()
    if me != root:
        exchange(group, [(root, tensor)], [])
        return
    parts = [tensor if s == me else torch.empty_like(tensor) for s in range(p)]
    exchange(group, [], [(s, parts[s]) for s in range(p) if s != me])
    _reduce_in_rank_order(op, parts, tensor)


def reduce_scatter(
    group: dist.ProcessGroup, output: torch.Tensor, inputs: Sequence[torch.Tensor], op: dist.ReduceOp.RedOpType
) -> None:
    """Rank r's ``output`` := ⊕ over ranks s of rank s's inputs[r]; pieces may be uneven."""
    me, p = group.rank(), group.size()
    parts = [inputs[me] if s == me else torch.empty_like(output) for s in range(p)]
    exchange(group, [(s, inputs[s]) for s in range(p) if s != me], [(s, parts[s]) for s in range(p) if s != me])
    _reduce_in_rank_order(op, parts, output)


def allreduce(group: dist.ProcessGroup, tensor: torch.Tensor, op: dist.ReduceOp.RedOpType) -> None:
    """Every rank's ``tensor`` := ⊕ of every rank's, each rank gathering all and reducing in rank order."""
    me, p = group.rank(), group.size()
    parts = [tensor.clone() if s == me else torch.empty_like(tensor) for s in range(p)]
    exchange(group, [(s, parts[me]) for s in range(p) if s != me], [(s, parts[s]) for s in range(p) if s != me])
    _reduce_in_rank_order(op, parts, tensor)


def barrier(group: dist.ProcessGroup) -> None:
    """Return once every rank of the group has entered: a one-byte all-gather."""
    p = group.size()
    token = torch.ones(1, dtype=torch.uint8)
    allgather(group, [torch.empty(1, dtype=torch.uint8) for _ in range(p)], token)


def _pieces(t: torch.Tensor, p: int) -> list[torch.Tensor]:
    """The p equal consecutive pieces of a 1-D tensor (also when it is empty)."""
    return list(t.view(p, -1).unbind(0))


def run_kind(
    kind: Kind,
    group: dist.ProcessGroup,
    tensor: torch.Tensor | None,
    output: torch.Tensor | None,
    *,
    op: Any,
    root: int | None,
) -> None:
    """The point-to-point implementation of one kind, with ``runners.execution.runner.run``'s tensor arguments."""
    p, root = group.size(), root or 0
    if kind is Kind.BARRIER:
        barrier(group)
    elif kind is Kind.SCATTER:
        scatter(group, _given(output), None if tensor is None else _pieces(tensor, p), root)
    elif kind is Kind.GATHER:
        gather(group, None if output is None else _pieces(output, p), _given(tensor), root)
    elif kind is Kind.ALLREDUCE:
        allreduce(group, _given(tensor), op)
    elif kind is Kind.BROADCAST:
        broadcast(group, _given(tensor), root)
    elif kind is Kind.REDUCE:
        reduce(group, _given(tensor), root, op)
    elif kind is Kind.ALLGATHER:
        allgather(group, _pieces(_given(output), p), _given(tensor))
    elif kind is Kind.REDUCESCATTER:
        reduce_scatter(group, _given(output), _pieces(_given(tensor), p), op)
    else:
        alltoall(group, _pieces(_given(output), p), _pieces(_given(tensor), p))


def _given(t: torch.Tensor | None) -> torch.Tensor:
    if t is None:
        raise ValueError("collsched: a tensor argument is missing")
    return t
