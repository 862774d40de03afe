"""A run's working buffers (the caller's tensors or padded copies, as chunks) and the reduce ops."""

from __future__ import annotations

from collections.abc import Callable

import torch

from algorithms.ir import Buf, Kind, Schedule
from runners.execution.arguments import OP_NAMES, segments
from runners.execution.plan import RankPlan


def _sum(dst: torch.Tensor, src: torch.Tensor) -> None:
    dst.add_(src)


def _product(dst: torch.Tensor, src: torch.Tensor) -> None:
    dst.mul_(src)


def _min(dst: torch.Tensor, src: torch.Tensor) -> None:
    torch.minimum(dst, src, out=dst)


def _max(dst: torch.Tensor, src: torch.Tensor) -> None:
    torch.maximum(dst, src, out=dst)


def _band(dst: torch.Tensor, src: torch.Tensor) -> None:
    dst.bitwise_and_(src)


def _bor(dst: torch.Tensor, src: torch.Tensor) -> None:
    dst.bitwise_or_(src)


def _bxor(dst: torch.Tensor, src: torch.Tensor) -> None:
    dst.bitwise_xor_(src)


def _token(dst: torch.Tensor, src: torch.Tensor) -> None:
    """A barrier token carries no data: receiving it is the whole point."""


_COMBINE = {"SUM": _sum, "AVG": _sum, "PRODUCT": _product, "MIN": _min, "MAX": _max, "BAND": _band, "BOR": _bor,
            "BXOR": _bxor}


def combine(op: int, kind: Kind) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """dst ⊕= src for this op, in place (the barrier's token union needs no arithmetic)."""
    if kind is Kind.BARRIER:
        return _token
    return _COMBINE[OP_NAMES[op] if op >= 0 else "SUM"]


class Buffers:
    """This rank's working buffers as flat tensors of chunks of S elements, and how to copy results back."""

    def __init__(self, schedule: Schedule, plan: RankPlan, tensor: torch.Tensor | None,
                 output: torch.Tensor | None, n: int, dtype: torch.dtype, device: torch.device) -> None:
        coll = schedule.collective
        rank = plan.rank
        self.c = c = coll.chunks
        self.s = s = -(-n // c)
        self.padded = s * c != n
        self.n = n
        self._copy_back: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.bufs: dict[Buf, torch.Tensor] = {}
        if coll.kind is Kind.BARRIER:
            self.bufs[Buf.INPUT] = torch.zeros(1, dtype=torch.uint8, device=device)
        else:
            segs = segments(schedule, rank, Buf.INPUT)
            if segs:
                assert tensor is not None
                writable = coll.in_place
                initial = not (coll.kind is Kind.BROADCAST and rank != coll.root)
                copy = self.padded or (plan.writes_input and not coll.in_place)
                self.bufs[Buf.INPUT] = self._bind(tensor, segs, writable, copy, initial)
            if not coll.in_place:
                segs = segments(schedule, rank, Buf.OUTPUT)
                if segs:
                    assert output is not None
                    self.bufs[Buf.OUTPUT] = self._bind(output, segs, True, self.padded, False)
            else:
                self.bufs[Buf.OUTPUT] = self.bufs.get(Buf.INPUT, torch.empty(0, dtype=dtype, device=device))
        if schedule.scratch_chunks:
            self.bufs[Buf.SCRATCH] = torch.empty(schedule.scratch_chunks * s, dtype=dtype, device=device)

    def _bind(self, user: torch.Tensor, segs: int, writable: bool, copy: bool, initial: bool) -> torch.Tensor:
        flat = user.view(-1)
        if not copy:
            return flat
        # Zeros, not empty: padding is reduced along with real data and must hold finite values.
        work = torch.zeros(segs * self.c * self.s, dtype=user.dtype, device=user.device)
        real = work.view(segs, -1)[:, :self.n]
        if initial:
            real.copy_(flat.view(segs, self.n))
        if writable:
            self._copy_back.append((flat.view(segs, self.n), real))
        return work

    def slot(self, buf: Buf, index: int, count: int) -> torch.Tensor:
        """The elements of chunks ``index .. index+count-1`` of ``buf``."""
        return self.bufs[buf][index * self.s:(index + count) * self.s]

    def finish(self) -> None:
        """Copy padded or private working buffers back into the caller's tensors."""
        for user, work in self._copy_back:
            user.copy_(work)
