"""The schedule: an ordered tuple of steps for one collective, held as numpy ``Columns``.

``Schedule`` validates what it is given (steps of transfers, or arrays), canonicalises the in-place
kinds' ``output`` to ``input``, pickles by its columns, and builds ``Step`` values only when asked.
``switch_ops_by_step`` groups its switch operations by step.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import FrozenInstanceError
from typing import Any, NamedTuple

import numpy as np

from algorithms.errors import ScheduleError
from algorithms.ir.collective import MAX_SLOTS, Buf, Collective, Op, _buffer_chunks, _check_int
from algorithms.ir.switch import SwitchOp, _check_switch_ops
from algorithms.ir.transfer import Step, Transfer

__all__ = ["Schedule", "Columns", "BUFS", "OPS", "switch_ops_by_step"]


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

    __slots__ = ("_columns", "_steps", "channels", "collective", "name", "num_transfers", "scratch_chunks",
                 "switch_ops", "ways")

    collective: Collective
    name: str
    scratch_chunks: int
    num_transfers: int
    switch_ops: tuple[SwitchOp, ...]
    """Operations a switch performs (multicast, in-switch reduction), by step, in program order (``SwitchOp``)."""
    channels: np.ndarray | None
    """Per transfer (program order), the channel that issues it: a thread block, an NCCL or MSCCL channel (a
    read-only int32 array of numbers >= 0), or None. Dataflow's send order queues a port's messages per channel
    when given (``sim.engine.ports``); verification ignores it."""
    ways: np.ndarray | None
    """Per transfer (program order), which of the tied shortest routes it takes (``sim.topology.graph``): 0 the
    default one, w > 0 every tied choice on the way turned w places on (a read-only uint16 array), or None when
    every transfer takes the default (an all-zero array is stored as None). Verification ignores it."""
    _columns: Columns
    _steps: tuple[Step, ...] | None

    def __init__(self, collective: Collective, name: str, steps: Iterable[Step | Iterable[Transfer]] = (),
                 scratch_chunks: int = 0, *, switch_ops: Iterable[SwitchOp] = (),
                 channels: Iterable[int] | np.ndarray | None = None,
                 ways: Iterable[int] | np.ndarray | None = None) -> None:
        _check_header(collective, name, scratch_chunks)
        given = tuple(s if isinstance(s, Step) else Step(tuple(s)) for s in steps)
        columns = _columns_of(given)
        self._init(collective, name, scratch_chunks, columns, given)
        checked = _check_switch_ops(collective, scratch_chunks, self.num_steps, switch_ops)
        object.__setattr__(self, "switch_ops", checked)
        object.__setattr__(self, "channels", _check_channels(channels, self.num_transfers))
        object.__setattr__(self, "ways", _check_ways(ways, self.num_transfers))

    @classmethod
    def from_columns(cls, collective: Collective, name: str, columns: Columns | Mapping[str, Any],
                     scratch_chunks: int = 0, *, switch_ops: Iterable[SwitchOp] = (),
                     channels: Iterable[int] | np.ndarray | None = None,
                     ways: Iterable[int] | np.ndarray | None = None) -> Schedule:
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
        checked = _check_switch_ops(collective, scratch_chunks, self.num_steps, switch_ops)
        object.__setattr__(self, "switch_ops", checked)
        object.__setattr__(self, "channels", _check_channels(channels, self.num_transfers))
        object.__setattr__(self, "ways", _check_ways(ways, self.num_transfers))
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
        return (_restore, (self.collective, self.name, self.scratch_chunks, tuple(self._columns), self.switch_ops,
                           self.channels, self.ways))

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not Schedule:
            return NotImplemented
        assert isinstance(other, Schedule)
        return (self.collective == other.collective and self.name == other.name
                and self.scratch_chunks == other.scratch_chunks and self.switch_ops == other.switch_ops
                and _same_channels(self.channels, other.channels) and _same_channels(self.ways, other.ways)
                and all(np.array_equal(a, b) for a, b in zip(self._columns, other._columns, strict=True)))

    def __hash__(self) -> int:
        return hash((self.collective, self.name, self.scratch_chunks, self.switch_ops,
                     None if self.channels is None else self.channels.tobytes(),
                     None if self.ways is None else self.ways.tobytes(),
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
             switch_ops: tuple[SwitchOp, ...] = (), channels: np.ndarray | None = None,
             ways: np.ndarray | None = None) -> Schedule:
    return Schedule.from_columns(collective, name, Columns(*arrays), scratch_chunks, switch_ops=switch_ops,
                                 channels=channels, ways=ways)


def _per_transfer(field: str, values: Iterable[int] | np.ndarray, n: int, top: int, dtype: type,
                  what: str) -> np.ndarray:
    """A per-transfer integer column (``Schedule.channels``, ``Schedule.ways``) checked: 1-d, ``n`` entries, each
    in 0..``top`` (``what`` names the range in the error); read-only, as ``dtype``."""
    a = np.asarray(values if isinstance(values, np.ndarray) else list(values))
    if not a.size:
        a = a.astype(np.int64)
    if a.ndim != 1 or a.dtype.kind not in "iu":
        raise ScheduleError(f"schedule.{field} must be a 1-d array of integers, got {a.dtype} {a.shape}")
    if len(a) != n:
        raise ScheduleError(f"schedule.{field} has {len(a)} entries, the schedule {n} transfers")
    bad = np.flatnonzero((a < 0) | (a > top))
    if len(bad):
        raise ScheduleError(f"schedule.{field}[{int(bad[0])}] is {int(a[bad[0]])}: {what}")
    out: np.ndarray = np.ascontiguousarray(a, dtype=dtype)
    out.flags.writeable = False
    return out


def _check_channels(channels: Iterable[int] | np.ndarray | None, n: int) -> np.ndarray | None:
    """``Schedule.channels`` checked: one integer >= 0 per transfer."""
    if channels is None:
        return None
    return _per_transfer("channels", channels, n, np.iinfo(np.int32).max, np.int32, "a channel is 0..2**31-1")


MAX_WAY = (1 << 16) - 1
"""The largest ``Schedule.ways`` entry."""


def _check_ways(ways: Iterable[int] | np.ndarray | None, n: int) -> np.ndarray | None:
    """``Schedule.ways`` checked: one integer in 0..MAX_WAY per transfer; None when there are none or all are 0."""
    if ways is None:
        return None
    out = _per_transfer("ways", ways, n, MAX_WAY, np.uint16, f"a way is 0..{MAX_WAY}")
    return out if out.any() else None


def _same_channels(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return np.array_equal(a, b)


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


def switch_ops_by_step(schedule: Schedule) -> list[list[SwitchOp]]:
    """The schedule's switch ops grouped by step: entry s lists step s's, in program order."""
    by: list[list[SwitchOp]] = [[] for _ in range(schedule.num_steps)]
    for op in schedule.switch_ops:
        by[op.step].append(op)
    return by
