"""Transfers and steps: a transfer moves ``count`` contiguous chunks from one (rank, buffer, index) to
another with op ``copy`` or ``reduce``; a step is a set of transfers that run concurrently.

Both are checked here for their own fields only; ranks and indices are checked against a collective
when a ``Schedule`` holds them (``algorithms.ir.schedule``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from algorithms.errors import ScheduleError
from algorithms.ir.collective import Buf, Op

__all__ = ["Transfer", "Step"]


class _TransferFields(NamedTuple):
    src: int
    dst: int
    src_buf: Buf
    src_index: int
    dst_buf: Buf
    dst_index: int
    count: int  # type: ignore[assignment]  # shadows tuple.count, as the file format names it
    op: Op


class Transfer(_TransferFields):
    """Move ``count`` chunks from ``(src, src_buf, src_index)`` to ``(dst, dst_buf, dst_index)``.

    ``op`` is ``copy`` (dst := src) or ``reduce`` (dst := dst ⊕ src). A
    transfer with ``src == dst`` is a local copy or reduce. A NamedTuple
    underneath, because schedules hold millions of them: creation stays cheap
    and the value is immutable and hashable. Ranges against a collective are
    checked when the transfer is placed in a ``Schedule``.
    """

    __slots__ = ()

    def __new__(
        cls,
        src: int,
        dst: int,
        src_buf: Buf | str = Buf.INPUT,
        src_index: int = 0,
        dst_buf: Buf | str = Buf.INPUT,
        dst_index: int = 0,
        count: int = 1,
        op: Op | str = Op.COPY,
    ) -> Transfer:
        if count.__class__ is not int or count < 1:
            raise ScheduleError(f"transfer.count must be an integer >= 1, got {count!r}")
        if src_index.__class__ is not int or dst_index.__class__ is not int:
            raise ScheduleError(f"transfer indices must be integers, got {src_index!r}, {dst_index!r}")
        if src_buf.__class__ is not Buf:
            src_buf = _as_buf(src_buf, "src_buf")
        if dst_buf.__class__ is not Buf:
            dst_buf = _as_buf(dst_buf, "dst_buf")
        if op.__class__ is not Op:
            op = _as_op(op)
        # tuple.__new__ directly: one Python frame less per transfer, millions of times.
        return tuple.__new__(cls, (src, dst, src_buf, src_index, dst_buf, dst_index, count, op))

    def __repr__(self) -> str:
        op = "+=" if self.op is Op.REDUCE else "="
        return (
            f"{self.dst}.{self.dst_buf}[{self.dst_index}:{self.dst_index + self.count}] {op} "
            f"{self.src}.{self.src_buf}[{self.src_index}:{self.src_index + self.count}]"
        )


def _as_buf(value: object, name: str) -> Buf:
    if isinstance(value, str) and value in Buf.__members__.values():
        return Buf(value)
    raise ScheduleError(f"transfer.{name}: unknown buffer {value!r} (input, output, scratch)")


def _as_op(value: object) -> Op:
    if isinstance(value, str) and value in Op.__members__.values():
        return Op(value)
    raise ScheduleError(f"transfer.op: unknown op {value!r} (copy, reduce)")


@dataclass(frozen=True, slots=True)
class Step:
    """A set of transfers that run concurrently: reads see the state at the step's start."""

    transfers: tuple[Transfer, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.transfers, tuple):
            object.__setattr__(self, "transfers", tuple(self.transfers))
        for t in self.transfers:
            if not isinstance(t, Transfer):
                raise ScheduleError(f"step holds a {type(t).__name__}, not a Transfer")

    def __len__(self) -> int:
        return len(self.transfers)

