"""The schedule IR: collectives, transfers, steps and schedules as immutable values.

A collective is ``(kind, ranks p, chunks C, root)``; every rank has the buffers
``input``, ``output`` and ``scratch``, each an array of chunks, sized by the
table in docs/design.md ("Collectives and buffers"). A transfer moves
``count`` contiguous chunks from one (rank, buffer, index) to another with op
``copy`` or ``reduce``; a step is a set of transfers that run concurrently; a
schedule is an ordered tuple of steps.

For the in-place kinds (allreduce, broadcast, reduce, barrier) the output *is*
the input: a transfer may name either buffer and both address the same slots.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from algorithms.errors import ScheduleError

__all__ = [
    "Kind",
    "Buf",
    "Op",
    "Collective",
    "Transfer",
    "Step",
    "Schedule",
    "ROOTED_KINDS",
    "IN_PLACE_KINDS",
    "MAX_RANKS",
    "MAX_SLOTS",
]


class Kind(StrEnum):
    """The nine collective kinds."""

    ALLREDUCE = "allreduce"
    ALLGATHER = "allgather"
    REDUCESCATTER = "reducescatter"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    SCATTER = "scatter"
    GATHER = "gather"
    ALLTOALL = "alltoall"
    BARRIER = "barrier"


class Buf(StrEnum):
    """The three per-rank buffers."""

    INPUT = "input"
    OUTPUT = "output"
    SCRATCH = "scratch"


class Op(StrEnum):
    """What a transfer does to its destination: overwrite, or combine with ⊕."""

    COPY = "copy"
    REDUCE = "reduce"


ROOTED_KINDS = frozenset({Kind.BROADCAST, Kind.REDUCE, Kind.SCATTER, Kind.GATHER})
IN_PLACE_KINDS = frozenset({Kind.ALLREDUCE, Kind.BROADCAST, Kind.REDUCE, Kind.BARRIER})
# Kinds whose input buffer is p·C chunks rather than C.
_WIDE_INPUT = frozenset({Kind.REDUCESCATTER, Kind.SCATTER, Kind.ALLTOALL})
_WIDE_OUTPUT = frozenset({Kind.ALLGATHER, Kind.GATHER, Kind.ALLTOALL})


MAX_RANKS = 1 << 16
"""Largest world size a schedule may have."""
MAX_SLOTS = 1 << 27
"""Largest number of chunk slots, over all ranks and buffers, that a schedule may address.
It bounds what the verifier and simulator allocate (about 1 GiB of state at the limit)."""


def _check_int(value: object, name: str, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ScheduleError(f"{name} must be an integer, got {value!r}")
    if value < low:
        raise ScheduleError(f"{name} must be >= {low}, got {value}")
    if high is not None and value > high:
        raise ScheduleError(f"{name} must be <= {high}, got {value}")
    return value


@dataclass(frozen=True, slots=True)
class Collective:
    """A collective operation: its kind, world size, chunk count and root.

    ``chunks`` is C in the buffer table; ``root`` is required for the rooted
    kinds (broadcast, reduce, scatter, gather) and must be None for the others.
    """

    kind: Kind
    ranks: int
    chunks: int = 1
    root: int | None = None

    def __post_init__(self) -> None:
        try:
            kind = Kind(self.kind)
        except ValueError:
            names = ", ".join(k.value for k in Kind)
            raise ScheduleError(f"collective.kind: unknown kind {self.kind!r} (one of {names})") from None
        object.__setattr__(self, "kind", kind)
        _check_int(self.ranks, "collective.ranks", 1, MAX_RANKS)
        _check_int(self.chunks, "collective.chunks", 1, MAX_SLOTS // self.ranks)
        if kind is Kind.BARRIER and self.chunks != 1:
            raise ScheduleError(f"collective.chunks: a barrier has exactly 1 chunk, got {self.chunks}")
        if kind in ROOTED_KINDS:
            if self.root is None:
                raise ScheduleError(f"collective.root: {kind} needs a root")
            _check_int(self.root, "collective.root", 0)
            if self.root >= self.ranks:
                raise ScheduleError(f"collective.root: root {self.root} out of range for {self.ranks} ranks")
        elif self.root is not None:
            raise ScheduleError(f"collective.root: {kind} has no root, got {self.root!r}")

    @property
    def in_place(self) -> bool:
        """True when the output buffer is the input buffer."""
        return self.kind in IN_PLACE_KINDS

    def input_chunks(self, rank: int) -> int:
        """Size of ``rank``'s input buffer in chunks."""
        if self.kind is Kind.SCATTER and rank != self.root:
            return 0
        return self.ranks * self.chunks if self.kind in _WIDE_INPUT else self.chunks

    def output_chunks(self, rank: int) -> int:
        """Size of ``rank``'s output buffer in chunks (the input's, for in-place kinds)."""
        if self.in_place:
            return self.input_chunks(rank)
        if self.kind is Kind.GATHER and rank != self.root:
            return 0
        return self.ranks * self.chunks if self.kind in _WIDE_OUTPUT else self.chunks

    def describe(self) -> str:
        """One line such as ``allreduce p=4 C=4`` or ``broadcast p=8 C=1 root=3``."""
        root = f" root={self.root}" if self.root is not None else ""
        return f"{self.kind} p={self.ranks} C={self.chunks}{root}"


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


@dataclass(frozen=True, slots=True)
class Schedule:
    """A named, validated program for one collective: ordered steps of transfers."""

    collective: Collective
    name: str
    steps: tuple[Step, ...]
    scratch_chunks: int = 0
    num_transfers: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.collective, Collective):
            raise ScheduleError("schedule.collective must be a Collective")
        if not isinstance(self.name, str) or not self.name:
            raise ScheduleError(f"schedule.name must be a non-empty string, got {self.name!r}")
        _check_int(self.scratch_chunks, "schedule.scratch_chunks", 0, MAX_SLOTS)
        coll = self.collective
        slots = sum(coll.input_chunks(r) + (0 if coll.in_place else coll.output_chunks(r)) for r in range(coll.ranks))
        slots += coll.ranks * self.scratch_chunks
        if slots > MAX_SLOTS:
            raise ScheduleError(
                f"schedule addresses {slots} chunk slots over all ranks and buffers, over the limit of {MAX_SLOTS}"
            )
        steps = tuple(s if isinstance(s, Step) else Step(tuple(s)) for s in self.steps)
        object.__setattr__(self, "steps", steps)
        object.__setattr__(self, "num_transfers", sum(len(s.transfers) for s in steps))
        self._check_ranges()

    def _check_ranges(self) -> None:
        coll = self.collective
        p = coll.ranks
        in_place = coll.in_place
        sizes = {
            Buf.INPUT: [coll.input_chunks(r) for r in range(p)],
            Buf.OUTPUT: [coll.output_chunks(r) for r in range(p)],
            Buf.SCRATCH: [self.scratch_chunks] * p,
        }
        # Tight loop on purpose: schedules at p = 1024 hold millions of transfers.
        for si, step in enumerate(self.steps):
            for ti, t in enumerate(step.transfers):
                src, dst, sb, sx, db, dx, n, _op = t
                if src.__class__ is not int or not 0 <= src < p:
                    raise ScheduleError(f"step {si} transfer {ti}: src rank {src!r} out of range 0..{p - 1}")
                if dst.__class__ is not int or not 0 <= dst < p:
                    raise ScheduleError(f"step {si} transfer {ti}: dst rank {dst!r} out of range 0..{p - 1}")
                if sx < 0 or sx + n > sizes[sb][src]:
                    raise ScheduleError(
                        f"step {si} transfer {ti}: src_index {sx} count {n} out of range for "
                        f"rank {src} {sb} of {sizes[sb][src]} chunks"
                    )
                if dx < 0 or dx + n > sizes[db][dst]:
                    raise ScheduleError(
                        f"step {si} transfer {ti}: dst_index {dx} count {n} out of range for "
                        f"rank {dst} {db} of {sizes[db][dst]} chunks"
                    )
        # In-place kinds alias output to input; canonicalise so that everything
        # downstream sees one buffer name.
        if in_place and any(
            t.src_buf is Buf.OUTPUT or t.dst_buf is Buf.OUTPUT for s in self.steps for t in s.transfers
        ):
            canonical = tuple(Step(tuple(_canonical(t) for t in s.transfers)) for s in self.steps)
            object.__setattr__(self, "steps", canonical)

    @property
    def ranks(self) -> int:
        """The world size p."""
        return self.collective.ranks

    def transfers(self) -> list[tuple[int, int, Transfer]]:
        """Every transfer as ``(step, index in step, transfer)``, in program order."""
        return [(si, ti, t) for si, s in enumerate(self.steps) for ti, t in enumerate(s.transfers)]

    def buffer_chunks(self, rank: int, buf: Buf) -> int:
        """Size of one buffer of one rank, in chunks."""
        if buf is Buf.SCRATCH:
            return self.scratch_chunks
        if buf is Buf.INPUT:
            return self.collective.input_chunks(rank)
        return self.collective.output_chunks(rank)


def _canonical(t: Transfer) -> Transfer:
    return t._replace(
        src_buf=Buf.INPUT if t.src_buf is Buf.OUTPUT else t.src_buf,
        dst_buf=Buf.INPUT if t.dst_buf is Buf.OUTPUT else t.dst_buf,
    )
