"""The schedule IR: collectives, transfers, steps and schedules as immutable values.

A collective is ``(kind, ranks p, chunks C, root)`` (all-to-allv adds a traffic
matrix T, p x p chunk counts); every rank has the buffers
``input``, ``output`` and ``scratch``, each an array of chunks, sized by the
table in docs/design.md ("Collectives and buffers"). A transfer moves
``count`` contiguous chunks from one (rank, buffer, index) to another with op
``copy`` or ``reduce``; a step is a set of transfers that run concurrently; a
schedule is an ordered tuple of steps.

For the in-place kinds (allreduce, broadcast, reduce, barrier) the output *is*
the input: a transfer may name either buffer and both address the same slots.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import FrozenInstanceError, dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

import numpy as np

from algorithms.errors import ScheduleError

__all__ = [
    "Kind",
    "Buf",
    "Op",
    "Collective",
    "Transfer",
    "Step",
    "Schedule",
    "Columns",
    "BUFS",
    "OPS",
    "ROOTED_KINDS",
    "IN_PLACE_KINDS",
    "MAX_RANKS",
    "MAX_SLOTS",
    "Endpoint",
    "SwitchOpKind",
    "SwitchOp",
    "switch_ops_by_step",
    "Matrix",
    "check_matrix",
]


class Kind(StrEnum):
    """The ten collective kinds."""

    ALLREDUCE = "allreduce"
    ALLGATHER = "allgather"
    REDUCESCATTER = "reducescatter"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    SCATTER = "scatter"
    GATHER = "gather"
    ALLTOALL = "alltoall"
    BARRIER = "barrier"
    ALLTOALLV = "alltoallv"


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
Matrix = tuple[tuple[int, ...], ...]
"""An all-to-allv traffic matrix: ``T[i][j]`` chunks go from rank i to rank j (row i is rank i's input)."""


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
    """A collective operation: its kind, world size, chunk count, root and (all-to-allv) traffic matrix.

    ``chunks`` is C in the buffer table; ``root`` is required for the rooted
    kinds (broadcast, reduce, scatter, gather) and must be None for the others.
    ``matrix`` is required for all-to-allv and None for the others: a p x p
    tuple of non-negative chunk counts, ``matrix[i][j]`` chunks from rank i to
    rank j (lists are accepted and stored as tuples); all-to-allv has ``chunks == 1``.
    """

    kind: Kind
    ranks: int
    chunks: int = 1
    root: int | None = None
    matrix: Matrix | None = None
    # Exclusive prefix sums of the matrix (rows: send offsets; columns: receive offsets), kept for speed.
    _offsets: tuple[np.ndarray, np.ndarray] | None = field(default=None, init=False, repr=False, compare=False)

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
        if kind is Kind.ALLTOALLV:
            if self.chunks != 1:
                raise ScheduleError(f"collective.chunks: an alltoallv has chunks 1 (its matrix counts the chunks), "
                                    f"got {self.chunks}")
            matrix = check_matrix(self.matrix, self.ranks)
            object.__setattr__(self, "matrix", matrix)
            t = np.array(matrix, dtype=np.int64).reshape(self.ranks, self.ranks)
            send = np.zeros((self.ranks, self.ranks + 1), dtype=np.int64)
            np.cumsum(t, axis=1, out=send[:, 1:])
            recv = np.zeros((self.ranks + 1, self.ranks), dtype=np.int64)
            np.cumsum(t, axis=0, out=recv[1:, :])
            send.flags.writeable = recv.flags.writeable = False
            object.__setattr__(self, "_offsets", (send, recv))
        elif self.matrix is not None:
            raise ScheduleError(f"collective.matrix: only an alltoallv has a traffic matrix, not {kind}")

    @property
    def in_place(self) -> bool:
        """True when the output buffer is the input buffer."""
        return self.kind in IN_PLACE_KINDS

    def input_chunks(self, rank: int) -> int:
        """Size of ``rank``'s input buffer in chunks."""
        if self._offsets is not None:
            return int(self._offsets[0][rank, -1])
        if self.kind is Kind.SCATTER and rank != self.root:
            return 0
        return self.ranks * self.chunks if self.kind in _WIDE_INPUT else self.chunks

    def output_chunks(self, rank: int) -> int:
        """Size of ``rank``'s output buffer in chunks (the input's, for in-place kinds)."""
        if self._offsets is not None:
            return int(self._offsets[1][-1, rank])
        if self.in_place:
            return self.input_chunks(rank)
        if self.kind is Kind.GATHER and rank != self.root:
            return 0
        return self.ranks * self.chunks if self.kind in _WIDE_OUTPUT else self.chunks

    def traffic(self) -> np.ndarray:
        """The p x p traffic matrix in chunks (int64, read-only): alltoallv's matrix, or C everywhere for alltoall."""
        if self._offsets is not None:
            t = np.diff(self._offsets[0], axis=1)
        elif self.kind is Kind.ALLTOALL:
            t = np.full((self.ranks, self.ranks), self.chunks, dtype=np.int64)
        else:
            raise ScheduleError(f"collective: {self.kind} has no traffic matrix (alltoall and alltoallv do)")
        t.flags.writeable = False
        return t

    def block(self, src: int, dst: int) -> int:
        """Chunks that ``src`` sends to ``dst`` (alltoall: C; alltoallv: ``matrix[src][dst]``)."""
        return self.send_offset(src, dst + 1) - self.send_offset(src, dst)

    def send_offset(self, src: int, dst: int) -> int:
        """Where the block for ``dst`` starts in ``src``'s input (``dst == p``: the input's size).

        Rank i's input is its matrix row in rank order; alltoall's is p blocks of C.
        """
        if self._offsets is not None:
            return int(self._offsets[0][src, dst])
        self._exchange()
        return dst * self.chunks

    def recv_offset(self, dst: int, src: int) -> int:
        """Where the block from ``src`` starts in ``dst``'s output (``src == p``: the output's size).

        Rank j's output is its matrix column in source order; alltoall's is p blocks of C.
        """
        if self._offsets is not None:
            return int(self._offsets[1][src, dst])
        self._exchange()
        return src * self.chunks

    def _exchange(self) -> None:
        if self.kind is not Kind.ALLTOALL:
            raise ScheduleError(f"collective: {self.kind} has no per-pair blocks (alltoall and alltoallv do)")

    def describe(self) -> str:
        """One line such as ``allreduce p=4 C=4``, ``broadcast p=8 C=1 root=3`` or ``alltoallv p=4 T=24 chunks``."""
        if self._offsets is not None:
            return f"{self.kind} p={self.ranks} T={int(self._offsets[0][:, -1].sum())} chunks"
        root = f" root={self.root}" if self.root is not None else ""
        return f"{self.kind} p={self.ranks} C={self.chunks}{root}"


def check_matrix(matrix: object, ranks: int) -> Matrix:
    """``matrix`` as a tuple of ``ranks`` rows of ``ranks`` integers >= 0; ``ScheduleError`` names the bad row."""
    if matrix is None:
        raise ScheduleError("collective.matrix: an alltoallv needs a traffic matrix")
    if isinstance(matrix, np.ndarray):
        if matrix.dtype.kind not in "iu" and matrix.size:
            raise ScheduleError(f"collective.matrix: must hold integers, got an array of {matrix.dtype}")
        matrix = matrix.tolist()
    if isinstance(matrix, str | bytes) or not isinstance(matrix, Iterable):
        raise ScheduleError(f"collective.matrix: must be {ranks} rows of {ranks} integers, got {type(matrix).__name__}")
    rows = list(matrix)
    if len(rows) != ranks:
        raise ScheduleError(f"collective.matrix: has {len(rows)} rows, expected {ranks} (one per rank)")
    out: list[tuple[int, ...]] = []
    total = 0
    for i, row in enumerate(rows):
        if isinstance(row, np.ndarray):
            row = row.tolist()
        if isinstance(row, str | bytes) or not isinstance(row, Iterable):
            raise ScheduleError(f"collective.matrix row {i}: must be a list of {ranks} integers, "
                                f"got {type(row).__name__}")
        entries = tuple(row)
        if len(entries) != ranks:
            raise ScheduleError(f"collective.matrix row {i}: has {len(entries)} entries, expected {ranks} "
                                f"(one per rank)")
        for j, v in enumerate(entries):
            if isinstance(v, np.integer):
                v = int(v)
            if v.__class__ is not int or v < 0:
                raise ScheduleError(f"collective.matrix row {i}: entry {j} is {v!r}, must be an integer >= 0")
            total += v
        if total > MAX_SLOTS:
            raise ScheduleError(f"collective.matrix row {i}: the matrix holds over {MAX_SLOTS} chunks, the limit")
        out.append(tuple(int(v) for v in entries))
    return tuple(out)


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


class Columns(NamedTuple):
    """A schedule's transfers as parallel read-only numpy arrays, in program order.

    Buffers are coded 0 input, 1 output, 2 scratch (``BUFS[code]``), ops 0
    copy, 1 reduce (``OPS[code]``); in-place kinds never use code 1. Step s
    holds transfers ``step_offsets[s]:step_offsets[s + 1]``. About 23 bytes a
    transfer, where a ``Transfer`` object costs over 100.
    """

    src: np.ndarray
    dst: np.ndarray
    src_buf: np.ndarray
    src_index: np.ndarray
    dst_buf: np.ndarray
    dst_index: np.ndarray
    count: np.ndarray  # type: ignore[assignment]  # shadows tuple.count, as Transfer's field does
    op: np.ndarray
    step_offsets: np.ndarray


BUFS: tuple[Buf, Buf, Buf] = (Buf.INPUT, Buf.OUTPUT, Buf.SCRATCH)
"""Buffer codes of ``Columns``."""
OPS: tuple[Op, Op] = (Op.COPY, Op.REDUCE)
"""Op codes of ``Columns``."""
_BUF_CODE = {b: i for i, b in enumerate(BUFS)}
_OP_CODE = {o: i for i, o in enumerate(OPS)}
_BLOCK = 1 << 22
_DTYPES = {"src": np.int32, "dst": np.int32, "src_buf": np.uint8, "src_index": np.int32, "dst_buf": np.uint8,
           "dst_index": np.int32, "count": np.int32, "op": np.uint8, "step_offsets": np.int64}


class Schedule:
    """A named, validated program for one collective: ordered steps of transfers.

    Held as ``Columns`` (numpy arrays, one entry per transfer), so that
    schedules of tens of millions of transfers fit in memory; ``steps`` (a
    tuple of ``Step`` of ``Transfer``) is built from them on first use and
    kept. ``Schedule(collective, name, steps, scratch_chunks)`` validates
    steps; ``Schedule.from_columns`` validates arrays (what the builder makes).
    Immutable, compared and hashed by value.
    """

    __slots__ = ("_columns", "_steps", "collective", "name", "num_transfers", "scratch_chunks", "switch_ops")

    collective: Collective
    name: str
    scratch_chunks: int
    num_transfers: int
    switch_ops: tuple[SwitchOp, ...]
    """Operations a switch performs (multicast, in-switch reduction), by step, in program order (``SwitchOp``)."""
    _columns: Columns
    _steps: tuple[Step, ...] | None

    def __init__(self, collective: Collective, name: str, steps: Iterable[Step | Iterable[Transfer]] = (),
                 scratch_chunks: int = 0, *, switch_ops: Iterable[SwitchOp] = ()) -> None:
        _check_header(collective, name, scratch_chunks)
        given = tuple(s if isinstance(s, Step) else Step(tuple(s)) for s in steps)
        columns = _columns_of(given)
        self._init(collective, name, scratch_chunks, columns, given)
        object.__setattr__(self, "switch_ops", _check_switch_ops(self, switch_ops))

    @classmethod
    def from_columns(cls, collective: Collective, name: str, columns: Columns | Mapping[str, Any],
                     scratch_chunks: int = 0, *, switch_ops: Iterable[SwitchOp] = ()) -> Schedule:
        """A schedule from arrays with the fields of ``Columns`` (any integer dtype; codes as in ``Columns``)."""
        _check_header(collective, name, scratch_chunks)
        get = columns._asdict() if isinstance(columns, Columns) else dict(columns)
        missing = [f for f in Columns._fields if f not in get]
        if missing:
            raise ScheduleError(f"schedule columns: missing {', '.join(missing)}")
        arrays: dict[str, np.ndarray] = {}
        for f in Columns._fields:
            a = np.asarray(get[f])
            if not a.size:
                a = a.astype(np.int64)
            if a.ndim != 1 or a.dtype.kind not in "iu" or (a.dtype.kind == "u" and a.dtype.itemsize == 8):
                raise ScheduleError(f"schedule columns: {f} must be a 1-d array of int64 or smaller integers, "
                                    f"got {a.dtype} {a.shape}")
            arrays[f] = a
        n = len(arrays["src"])
        for f in Columns._fields[:-1]:
            if len(arrays[f]) != n:
                raise ScheduleError(f"schedule columns: {f} has {len(arrays[f])} entries, src has {n}")
        off = arrays["step_offsets"]
        if len(off) < 1 or off[0] != 0 or off[-1] != n or bool((np.diff(off) < 0).any()):
            raise ScheduleError(f"schedule columns: step_offsets must rise from 0 to {n}")
        for f, high in (("src_buf", 2), ("dst_buf", 2), ("op", 1)):
            bad = np.flatnonzero((arrays[f] < 0) | (arrays[f] > high))
            if len(bad):
                si, ti = _where(off, int(bad[0]))
                raise ScheduleError(f"step {si} transfer {ti}: {f} code {int(arrays[f][bad[0]])} (0..{high})")
        bad = np.flatnonzero(arrays["count"] < 1)
        if len(bad):
            si, ti = _where(off, int(bad[0]))
            raise ScheduleError(f"step {si} transfer {ti}: transfer.count must be an integer >= 1, "
                                f"got {int(arrays['count'][bad[0]])}")
        self = cls.__new__(cls)
        self._init(collective, name, scratch_chunks, Columns(**arrays), None)
        object.__setattr__(self, "switch_ops", _check_switch_ops(self, switch_ops))
        return self

    def _init(self, collective: Collective, name: str, scratch_chunks: int, columns: Columns | None,
              steps: tuple[Step, ...] | None) -> None:
        _check_ranges(collective, scratch_chunks, columns, steps)
        if columns is None:  # a field _columns_of could not hold, which _check_ranges names
            raise ScheduleError("schedule: a transfer field is not an integer in range")
        if collective.in_place and (bool((columns.src_buf == 1).any()) or bool((columns.dst_buf == 1).any())):
            # In-place kinds alias output to input; canonicalise so that everything downstream sees one name.
            columns = columns._replace(src_buf=np.where(columns.src_buf == 1, 0, columns.src_buf),
                                       dst_buf=np.where(columns.dst_buf == 1, 0, columns.dst_buf))
            steps = None
        compact = {}
        for f in Columns._fields:
            a = np.ascontiguousarray(getattr(columns, f), dtype=_DTYPES[f])
            a.flags.writeable = False
            compact[f] = a
        for attr, value in (("collective", collective), ("name", name), ("scratch_chunks", scratch_chunks),
                            ("num_transfers", len(compact["src"])), ("_columns", Columns(**compact)),
                            ("_steps", steps)):
            object.__setattr__(self, attr, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore, (self.collective, self.name, self.scratch_chunks, tuple(self._columns), self.switch_ops))

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not Schedule:
            return NotImplemented
        assert isinstance(other, Schedule)
        return (self.collective == other.collective and self.name == other.name
                and self.scratch_chunks == other.scratch_chunks and self.switch_ops == other.switch_ops
                and all(np.array_equal(a, b) for a, b in zip(self._columns, other._columns, strict=True)))

    def __hash__(self) -> int:
        return hash((self.collective, self.name, self.scratch_chunks, self.switch_ops,
                     *(a.tobytes() for a in self._columns)))

    def __repr__(self) -> str:
        ops = f", switch_ops={self.switch_ops!r}" if self.switch_ops else ""
        return (f"Schedule(collective={self.collective!r}, name={self.name!r}, steps={self.steps!r}, "
                f"scratch_chunks={self.scratch_chunks!r}{ops})")

    @property
    def steps(self) -> tuple[Step, ...]:
        """The steps as ``Step`` values of ``Transfer`` tuples (built from the columns on first use, then kept)."""
        steps = self._steps
        if steps is None:
            steps = _materialise(self._columns)
            object.__setattr__(self, "_steps", steps)
        return steps

    @property
    def num_steps(self) -> int:
        """The number of steps (without building them)."""
        return len(self._columns.step_offsets) - 1

    def columns(self) -> Columns:
        """The transfers as read-only numpy arrays (``Columns``): what the verifier and the engines read."""
        return self._columns

    @property
    def ranks(self) -> int:
        """The world size p."""
        return self.collective.ranks

    def transfers(self) -> list[tuple[int, int, Transfer]]:
        """Every transfer as ``(step, index in step, transfer)``, in program order."""
        return [(si, ti, t) for si, s in enumerate(self.steps) for ti, t in enumerate(s.transfers)]

    def transfer(self, i: int) -> tuple[int, int, Transfer]:
        """Transfer number ``i`` in program order as ``(step, index in step, transfer)``, without building steps."""
        c = self._columns
        si, ti = _where(c.step_offsets, i)
        t = tuple.__new__(Transfer, (int(c.src[i]), int(c.dst[i]), BUFS[c.src_buf[i]], int(c.src_index[i]),
                                     BUFS[c.dst_buf[i]], int(c.dst_index[i]), int(c.count[i]), OPS[c.op[i]]))
        return si, ti, t

    def buffer_chunks(self, rank: int, buf: Buf) -> int:
        """Size of one buffer of one rank, in chunks."""
        if buf is Buf.SCRATCH:
            return self.scratch_chunks
        if buf is Buf.INPUT:
            return self.collective.input_chunks(rank)
        return self.collective.output_chunks(rank)


def _restore(collective: Collective, name: str, scratch_chunks: int, arrays: tuple[np.ndarray, ...],
             switch_ops: tuple[SwitchOp, ...] = ()) -> Schedule:
    return Schedule.from_columns(collective, name, Columns(*arrays), scratch_chunks, switch_ops=switch_ops)


def _where(offsets: np.ndarray, i: int) -> tuple[int, int]:
    """(step, index in step) of transfer ``i``; empty steps hold nothing, so the last step starting at or before i."""
    si = int(np.searchsorted(offsets, i, side="right")) - 1
    return si, i - int(offsets[si])


def _check_header(collective: Collective, name: str, scratch_chunks: int) -> None:
    if not isinstance(collective, Collective):
        raise ScheduleError("schedule.collective must be a Collective")
    if not isinstance(name, str) or not name:
        raise ScheduleError(f"schedule.name must be a non-empty string, got {name!r}")
    _check_int(scratch_chunks, "schedule.scratch_chunks", 0, MAX_SLOTS)
    coll = collective
    slots = sum(coll.input_chunks(r) + (0 if coll.in_place else coll.output_chunks(r)) for r in range(coll.ranks))
    slots += coll.ranks * scratch_chunks
    if slots > MAX_SLOTS:
        raise ScheduleError(
            f"schedule addresses {slots} chunk slots over all ranks and buffers, over the limit of {MAX_SLOTS}"
        )


def _columns_of(steps: tuple[Step, ...]) -> Columns | None:
    """Columns of validated steps; None when a field is not a plain int in int64 range (the slow check names it)."""
    flat = [t for s in steps for t in s.transfers]
    offsets = np.zeros(len(steps) + 1, dtype=np.int64)
    np.cumsum([len(s.transfers) for s in steps], out=offsets[1:])
    if not flat:
        e = np.zeros(0, dtype=np.int64)
        return Columns(e, e, e, e, e, e, e, e, offsets)
    src, dst, sb, sx, db, dx, cnt, op = zip(*flat, strict=True)
    if {src.__class__ for src in src} | {d.__class__ for d in dst} != {int}:
        return None
    try:
        arrays = [np.array(v, dtype=np.int64) for v in (src, dst, sx, dx, cnt)]
    except OverflowError:
        return None
    bc, oc = _BUF_CODE, _OP_CODE
    return Columns(arrays[0], arrays[1], np.array([bc[b] for b in sb], dtype=np.uint8), arrays[2],
                   np.array([bc[b] for b in db], dtype=np.uint8), arrays[3], arrays[4],
                   np.array([oc[o] for o in op], dtype=np.uint8), offsets)


def _check_ranges(coll: Collective, scratch_chunks: int, columns: Columns | None,
                  steps: tuple[Step, ...] | None) -> None:
    """Every rank and index in range; the first bad transfer in program order is named (step, index in step)."""
    p = coll.ranks
    if columns is not None:
        sizes = np.array([[coll.input_chunks(r) for r in range(p)], [coll.output_chunks(r) for r in range(p)],
                          [scratch_chunks] * p], dtype=np.int64)
        c = columns
        first = np.zeros(0, dtype=np.int64)
        # In blocks, so that the temporaries stay small next to the columns themselves.
        for lo in range(0, len(c.src), _BLOCK):
            hi = lo + _BLOCK
            src, dst = c.src[lo:hi].astype(np.int64), c.dst[lo:hi].astype(np.int64)
            ok_src = (src >= 0) & (src < p)
            ok_dst = (dst >= 0) & (dst < p)
            cnt = c.count[lo:hi].astype(np.int64)
            sx, dx = c.src_index[lo:hi].astype(np.int64), c.dst_index[lo:hi].astype(np.int64)
            # Compare index > size - count rather than index + count > size: no overflow near int64's end.
            bad = ~ok_src | ~ok_dst
            bad |= (sx < 0) | (sx > sizes[c.src_buf[lo:hi], np.where(ok_src, src, 0)] - cnt)
            bad |= (dx < 0) | (dx > sizes[c.dst_buf[lo:hi], np.where(ok_dst, dst, 0)] - cnt)
            first = np.flatnonzero(bad) + lo
            if len(first):
                break
        if not len(first):
            return
        i = int(first[0])
        si, ti = _where(c.step_offsets, i)
        t: Transfer = tuple.__new__(Transfer, (int(c.src[i]), int(c.dst[i]), BUFS[c.src_buf[i]], int(c.src_index[i]),
                                               BUFS[c.dst_buf[i]], int(c.dst_index[i]), int(c.count[i]), OPS[c.op[i]]))
        _check_one(coll, scratch_chunks, si, ti, t)
        raise AssertionError("unreachable: the vectorised check found a bad transfer the scalar one accepts")
    assert steps is not None
    for si, step in enumerate(steps):
        for ti, t in enumerate(step.transfers):
            _check_one(coll, scratch_chunks, si, ti, t)


def _check_one(coll: Collective, scratch_chunks: int, si: int, ti: int, t: Transfer) -> None:
    src, dst, sb, sx, db, dx, n, _op = t
    p = coll.ranks
    if src.__class__ is not int or not 0 <= src < p:
        raise ScheduleError(f"step {si} transfer {ti}: src rank {src!r} out of range 0..{p - 1}")
    if dst.__class__ is not int or not 0 <= dst < p:
        raise ScheduleError(f"step {si} transfer {ti}: dst rank {dst!r} out of range 0..{p - 1}")
    size = _buffer_chunks(coll, scratch_chunks, src, sb)
    if sx < 0 or sx + n > size:
        raise ScheduleError(f"step {si} transfer {ti}: src_index {sx} count {n} out of range for "
                            f"rank {src} {sb} of {size} chunks")
    size = _buffer_chunks(coll, scratch_chunks, dst, db)
    if dx < 0 or dx + n > size:
        raise ScheduleError(f"step {si} transfer {ti}: dst_index {dx} count {n} out of range for "
                            f"rank {dst} {db} of {size} chunks")


def _buffer_chunks(coll: Collective, scratch_chunks: int, rank: int, buf: Buf) -> int:
    if buf is Buf.SCRATCH:
        return scratch_chunks
    return coll.input_chunks(rank) if buf is Buf.INPUT else coll.output_chunks(rank)


def _materialise(c: Columns) -> tuple[Step, ...]:
    """``Step`` values of ``Transfer`` tuples from columns (fields already validated)."""
    bufs, ops = BUFS, OPS
    new = tuple.__new__
    transfers = [new(Transfer, (s, d, bufs[sb], sx, bufs[db], dx, n, ops[o])) for s, d, sb, sx, db, dx, n, o in zip(
        c.src.tolist(), c.dst.tolist(), c.src_buf.tolist(), c.src_index.tolist(), c.dst_buf.tolist(),
        c.dst_index.tolist(), c.count.tolist(), c.op.tolist(), strict=True)]
    off = c.step_offsets.tolist()
    steps = []
    for lo, hi in itertools.pairwise(off):
        step = object.__new__(Step)
        object.__setattr__(step, "transfers", tuple(transfers[lo:hi]))
        steps.append(step)
    return tuple(steps)


# -- switch operations (multicast and in-switch reduction) ------------------------------------------


class SwitchOpKind(StrEnum):
    """What a switch does with the chunks its ports bring: copy one to many, or combine many into one."""

    MULTICAST = "multicast"
    REDUCE = "reduce"


class Endpoint(NamedTuple):
    """One end of a switch operation: ``count`` chunks of ``(rank, buf)`` from ``index`` on."""

    rank: int
    buf: Buf
    index: int  # type: ignore[assignment]  # shadows tuple.index, as Transfer's count does tuple.count

    def text(self, count: int) -> str:
        """``2.input[4:5]``, as a transfer prints its ends."""
        return f"{self.rank}.{self.buf}[{self.index}:{self.index + count}]"


@dataclass(frozen=True, slots=True)
class SwitchOp:
    """An operation a switch performs in step ``step``; it stands for the transfers it replaces.

    ``multicast``: the one source's ``count`` chunks are delivered to every
    target (the transfers ``target := source``, one per target, with the
    source crossing its rank's link up once). ``reduce``: the switch combines
    the chunks of every source (⊕, each contribution exactly once) and
    delivers the result to every target (``target := ⊕ sources``): NVLink
    SHARP's ``multimem.ld_reduce`` (targets: the issuing rank) followed by
    ``multimem.st`` (a multicast), or InfiniBand SHARP's aggregation. Every
    read sees the state at the step's start and every write lands at its end,
    as for transfers. ``switch`` names the switch: a topology node (``node0``)
    or a domain the topology resolves (``sim.topology.switches``).
    """

    op: SwitchOpKind
    switch: str
    sources: tuple[Endpoint, ...]
    targets: tuple[Endpoint, ...]
    count: int = 1
    step: int = 0

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "op", SwitchOpKind(self.op))
        except ValueError:
            raise ScheduleError(f"switch op: unknown op {self.op!r} (multicast, reduce)") from None
        if not isinstance(self.switch, str) or not self.switch:
            raise ScheduleError(f"switch op: switch must be a non-empty name, got {self.switch!r}")
        _check_int(self.count, "switch op count", 1, MAX_SLOTS)
        _check_int(self.step, "switch op step", 0)
        for side in ("sources", "targets"):
            ends = tuple(getattr(self, side))
            if not ends:
                raise ScheduleError(f"switch op {self.op}@{self.switch}: no {side}")
            object.__setattr__(self, side, tuple(_endpoint(e, side) for e in ends))
        if self.op is SwitchOpKind.MULTICAST and len(self.sources) != 1:
            raise ScheduleError(f"switch op {self.op}@{self.switch}: a multicast has exactly one source, "
                                f"got {len(self.sources)}")

    def describe(self) -> str:
        """One line: ``reduce@node0 0.input[1:2],1.input[1:2] -> 1.input[1:2]``."""
        def ends(xs: tuple[Endpoint, ...]) -> str:
            return ",".join(e.text(self.count) for e in xs)

        return f"{self.op}@{self.switch} {ends(self.sources)} -> {ends(self.targets)}"

    def __repr__(self) -> str:
        return f"SwitchOp(step {self.step}: {self.describe()})"

    def ranks(self) -> set[int]:
        """Every rank the operation reads from or writes to."""
        return {e.rank for e in self.sources} | {e.rank for e in self.targets}


def _endpoint(value: object, field: str) -> Endpoint:
    if isinstance(value, Endpoint) and value.buf.__class__ is Buf:
        return value
    if not isinstance(value, tuple | list) or len(value) != 3:
        raise ScheduleError(f"switch op {field}: expected (rank, buf, index), got {value!r}")
    rank, buf, index = value
    for name, v in (("rank", rank), ("index", index)):
        if v.__class__ is not int or v < 0:
            raise ScheduleError(f"switch op {field}: {name} must be an integer >= 0, got {v!r}")
    if buf.__class__ is not Buf:
        buf = _as_buf(buf, f"{field} buf")
    return Endpoint(rank, buf, index)


def _check_switch_ops(schedule: Schedule, ops: Iterable[SwitchOp]) -> tuple[SwitchOp, ...]:
    """The switch ops in step order (stable), each in range; in-place kinds name ``input`` for ``output``."""
    coll, scratch = schedule.collective, schedule.scratch_chunks
    steps = schedule.num_steps
    out: list[SwitchOp] = []
    for i, op in enumerate(ops):
        if not isinstance(op, SwitchOp):
            raise ScheduleError(f"switch op {i}: a {type(op).__name__}, not a SwitchOp")
        where = f"step {op.step} switch op ({op.describe()})"
        if op.step >= steps:
            raise ScheduleError(f"{where}: step {op.step} out of range for {steps} steps")
        fixed = {}
        for side in ("sources", "targets"):
            ends = []
            for e in getattr(op, side):
                if e.rank >= coll.ranks:
                    raise ScheduleError(f"{where}: {side} rank {e.rank} out of range 0..{coll.ranks - 1}")
                size = _buffer_chunks(coll, scratch, e.rank, e.buf)
                if e.index + op.count > size:
                    raise ScheduleError(f"{where}: {side} index {e.index} count {op.count} out of range for "
                                        f"rank {e.rank} {e.buf} of {size} chunks")
                ends.append(Endpoint(e.rank, Buf.INPUT, e.index) if coll.in_place and e.buf is Buf.OUTPUT else e)
            fixed[side] = tuple(ends)
        if fixed["sources"] != op.sources or fixed["targets"] != op.targets:
            op = SwitchOp(op.op, op.switch, fixed["sources"], fixed["targets"], op.count, op.step)
        out.append(op)
    out.sort(key=lambda o: o.step)
    return tuple(out)


def switch_ops_by_step(schedule: Schedule) -> list[list[SwitchOp]]:
    """The schedule's switch ops grouped by step: entry s lists step s's, in program order."""
    by: list[list[SwitchOp]] = [[] for _ in range(schedule.num_steps)]
    for op in schedule.switch_ops:
        by[op.step].append(op)
    return by
