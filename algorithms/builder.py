"""A small builder so that an algorithm reads like its paper's pseudocode.

    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, p, p), "ring")
    for s in range(p - 1):
        with b.step():
            for r in range(p):
                b.reduce(r, (r + 1) % p, (r - s) % p)
    schedule = b.build()

Each ``with b.step()`` block is one step: its transfers run concurrently.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from algorithms.errors import ScheduleError
from algorithms.ir import Buf, Collective, Op, Schedule, Step, Transfer

__all__ = ["ScheduleBuilder"]


class ScheduleBuilder:
    """Collects transfers step by step and returns a validated ``Schedule``."""

    def __init__(self, collective: Collective, name: str, *, scratch_chunks: int = 0) -> None:
        self.collective = collective
        self.name = name
        self.scratch_chunks = scratch_chunks
        self._steps: list[list[Transfer]] = []
        self._open: list[Transfer] | None = None

    @property
    def ranks(self) -> int:
        """The world size p."""
        return self.collective.ranks

    @contextmanager
    def step(self) -> Iterator[ScheduleBuilder]:
        """Open a step; transfers added inside the block run concurrently. Empty steps are dropped."""
        if self._open is not None:
            raise ScheduleError("steps cannot nest: close the open step first")
        self._open = []
        try:
            yield self
        finally:
            if self._open:
                self._steps.append(self._open)
            self._open = None

    def add(self, transfer: Transfer) -> None:
        """Add one transfer to the open step."""
        if self._open is None:
            raise ScheduleError("add a transfer inside `with builder.step():`")
        self._open.append(transfer)

    def copy(
        self,
        src: int,
        dst: int,
        index: int,
        count: int = 1,
        *,
        buf: Buf = Buf.INPUT,
        dst_index: int | None = None,
        dst_buf: Buf | None = None,
    ) -> None:
        """dst.dst_buf[dst_index:+count] := src.buf[index:+count] (destination defaults to the same place)."""
        self.add(
            Transfer(src, dst, buf, index, buf if dst_buf is None else dst_buf,
                     index if dst_index is None else dst_index, count, Op.COPY)
        )

    def reduce(
        self,
        src: int,
        dst: int,
        index: int,
        count: int = 1,
        *,
        buf: Buf = Buf.INPUT,
        dst_index: int | None = None,
        dst_buf: Buf | None = None,
    ) -> None:
        """dst.dst_buf[dst_index:+count] ⊕= src.buf[index:+count] (destination defaults to the same place)."""
        self.add(
            Transfer(src, dst, buf, index, buf if dst_buf is None else dst_buf,
                     index if dst_index is None else dst_index, count, Op.REDUCE)
        )

    def build(self) -> Schedule:
        """The validated, immutable schedule."""
        if self._open is not None:
            raise ScheduleError("build() called inside an open step")
        return Schedule(
            self.collective,
            self.name,
            tuple(Step(tuple(s)) for s in self._steps),
            self.scratch_chunks,
        )
