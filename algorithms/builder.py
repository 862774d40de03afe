"""A small builder so that an algorithm reads like its paper's pseudocode.

>>> from algorithms.ir import Collective, Kind
>>> p = 4
>>> b = ScheduleBuilder(Collective(Kind.ALLREDUCE, p, p), "ring")
>>> for s in range(p - 1):                       # reduce-scatter: chunk (r - s) goes r -> r + 1
...     with b.step():
...         for r in range(p):
...             b.reduce(r, (r + 1) % p, (r - s) % p)
>>> for s in range(p - 1):                       # all-gather
...     with b.step():
...         for r in range(p):
...             b.copy(r, (r + 1) % p, (r + 1 - s) % p)
>>> schedule = b.build()
>>> len(schedule.steps), schedule.num_transfers
(6, 24)

Each ``with b.step()`` block is one step: its transfers run concurrently.
Transfers are appended to flat integer arrays (``Schedule.from_columns``),
not kept as objects, so a builder of tens of millions of transfers stays
small; ``add_many`` appends a whole vector of them at numpy speed.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

import numpy as np
from numpy.typing import ArrayLike

from algorithms.errors import ScheduleError
from algorithms.ir import (
    BUFS,
    OPS,
    Buf,
    Collective,
    Columns,
    Endpoint,
    Op,
    Schedule,
    SwitchOp,
    SwitchOpKind,
    Transfer,
)
from algorithms.ir.schedule import MAX_WAY, _check_one
from algorithms.ir.transfer import _as_buf, _as_op

__all__ = ["ScheduleBuilder"]

_BUF: dict[str, int] = {Buf.INPUT: 0, Buf.OUTPUT: 1, Buf.SCRATCH: 2}
_COPY, _REDUCE = 0, 1
_LOW, _HIGH = -(1 << 31), (1 << 31) - 1


class ScheduleBuilder:
    """Collects transfers step by step and returns a validated ``Schedule``."""

    def __init__(self, collective: Collective, name: str, *, scratch_chunks: int = 0) -> None:
        self.collective = collective
        self.name = name
        self.scratch_chunks = scratch_chunks
        # 32-bit columns: every valid rank, index and count fits (MAX_RANKS, MAX_SLOTS); one that does not
        # is out of range, and _too_big names it as the schedule's range check would.
        self._src = array("i")
        self._dst = array("i")
        self._sb = array("B")
        self._sx = array("i")
        self._db = array("B")
        self._dx = array("i")
        self._n = array("i")
        self._op = array("B")
        self._offsets = array("q", [0])
        self._switch_ops: list[SwitchOp] = []
        self._ways: dict[int, int] = {}  # transfer number -> its way (``Schedule.ways``), where not 0
        self._open = False

    @property
    def ranks(self) -> int:
        """The world size p."""
        return self.collective.ranks

    @contextmanager
    def step(self) -> Iterator[ScheduleBuilder]:
        """Open a step; transfers added inside the block run concurrently. Empty steps are dropped."""
        if self._open:
            raise ScheduleError("steps cannot nest: close the open step first")
        self._open = True
        ops = len(self._switch_ops)
        try:
            yield self
        finally:
            if len(self._op) > self._offsets[-1] or len(self._switch_ops) > ops:
                self._offsets.append(len(self._op))
            self._open = False

    def _where(self) -> str:
        return f"step {len(self._offsets) - 1} transfer {len(self._op) - self._offsets[-1]}"

    def _append(self, src: int, dst: int, sb: Buf | str, sx: int, db: Buf | str, dx: int, count: int,
                op: int) -> None:
        if not self._open:
            raise ScheduleError("add a transfer inside `with builder.step():`")
        if count.__class__ is not int or count < 1:
            raise ScheduleError(f"{self._where()}: transfer.count must be an integer >= 1, got {count!r}")
        if sx.__class__ is not int or dx.__class__ is not int:
            raise ScheduleError(f"{self._where()}: transfer indices must be integers, got {sx!r}, {dx!r}")
        if src.__class__ is not int or dst.__class__ is not int:
            raise ScheduleError(f"{self._where()}: ranks must be integers, got src {src!r}, dst {dst!r}")
        sbc = _BUF.get(sb)
        if sbc is None:
            sbc = _BUF[_as_buf(sb, "src_buf")]
        dbc = _BUF.get(db)
        if dbc is None:
            dbc = _BUF[_as_buf(db, "dst_buf")]
        try:
            self._src.append(src)
            self._dst.append(dst)
            self._sx.append(sx)
            self._dx.append(dx)
            self._n.append(count)
        except OverflowError:
            k = len(self._op)  # appended last: the length every column had before this transfer
            for a in (self._src, self._dst, self._sx, self._dx, self._n):
                del a[k:]
            self._too_big(Transfer(src, dst, sb, sx, db, dx, count, OPS[op]))
        self._sb.append(sbc)
        self._db.append(dbc)
        self._op.append(op)

    def _too_big(self, t: Transfer, later: int = 0) -> NoReturn:
        """Raise the range error for ``t``, the ``later``-th transfer after those added so far."""
        si, ti = len(self._offsets) - 1, len(self._op) - self._offsets[-1] + later
        _check_one(self.collective, self.scratch_chunks, si, ti, t)
        raise ScheduleError(f"step {si} transfer {ti}: a rank, index or count does not fit 32 bits")

    def add(self, transfer: Transfer, *, way: int = 0) -> None:
        """Add one transfer to the open step; ``way``: which of the tied shortest routes it takes
        (``Schedule.ways``; 0, the default route)."""
        if not isinstance(transfer, Transfer):
            raise ScheduleError(f"step holds a {type(transfer).__name__}, not a Transfer")
        if way.__class__ is not int or not 0 <= way <= MAX_WAY:
            raise ScheduleError(f"{self._where()}: a transfer's way is an integer in 0..{MAX_WAY}, got {way!r}")
        src, dst, sb, sx, db, dx, n, op = transfer
        self._append(src, dst, sb, sx, db, dx, n, _COPY if op is Op.COPY else _REDUCE)
        if way:
            self._ways[len(self._op) - 1] = way

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
        self._append(src, dst, buf, index, buf if dst_buf is None else dst_buf,
                     index if dst_index is None else dst_index, count, _COPY)

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
        self._append(src, dst, buf, index, buf if dst_buf is None else dst_buf,
                     index if dst_index is None else dst_index, count, _REDUCE)

    def add_many(
        self,
        src: ArrayLike,
        dst: ArrayLike,
        index: ArrayLike,
        count: ArrayLike = 1,
        *,
        op: Op | str = Op.COPY,
        buf: Buf | str = Buf.INPUT,
        dst_index: ArrayLike | None = None,
        dst_buf: Buf | str | None = None,
    ) -> None:
        """Add many transfers to the open step at once: integer arrays (or scalars) broadcast together.

        The same as calling ``copy`` (or ``reduce`` for ``op="reduce"``) once
        per element, in order; ranges are checked by ``build``.
        """
        if not self._open:
            raise ScheduleError("add a transfer inside `with builder.step():`")
        opc = _COPY if _as_op(op) is Op.COPY else _REDUCE
        sbc = _BUF[_as_buf(buf, "src_buf")]
        dbc = sbc if dst_buf is None else _BUF[_as_buf(dst_buf, "dst_buf")]
        try:
            arrays = np.broadcast_arrays(*(np.asarray(a) for a in (src, dst, index, count,
                                                                   index if dst_index is None else dst_index)))
        except ValueError as e:
            raise ScheduleError(f"{self._where()}: add_many arrays do not broadcast together ({e})") from None
        names = ("src", "dst", "index", "count", "dst_index")
        for name, a in zip(names, arrays, strict=True):
            if a.ndim > 1 or (a.size and a.dtype.kind not in "iu") or (a.dtype.kind == "u" and a.dtype.itemsize > 4):
                raise ScheduleError(f"{self._where()}: add_many {name} must be 1-d integers, got {a.dtype} {a.shape}")
        s, d, x, n, dx = (np.atleast_1d(a).astype(np.int64) for a in arrays)
        if len(n) and int(n.min()) < 1:
            raise ScheduleError(f"{self._where()}: transfer.count must be an integer >= 1, got {int(n.min())}")
        fits = (s >= _LOW) & (s <= _HIGH) & (d >= _LOW) & (d <= _HIGH) & (x >= _LOW) & (x <= _HIGH)
        fits &= (n <= _HIGH) & (dx >= _LOW) & (dx <= _HIGH)
        if not fits.all():
            i = int(np.flatnonzero(~fits)[0])
            self._too_big(Transfer(int(s[i]), int(d[i]), BUFS[sbc], int(x[i]), BUFS[dbc], int(dx[i]), int(n[i]),
                                   OPS[opc]), i)
        k = len(s)
        for column, v in ((self._src, s), (self._dst, d), (self._sx, x), (self._dx, dx), (self._n, n)):
            column.frombytes(v.astype(np.int32).tobytes())
        self._sb.frombytes(bytes([sbc]) * k)
        self._db.frombytes(bytes([dbc]) * k)
        self._op.frombytes(bytes([opc]) * k)

    def switch_op(self, op: SwitchOpKind | str, switch: str, sources: list[tuple[int, Buf | str, int]],
                  targets: list[tuple[int, Buf | str, int]], count: int = 1) -> None:
        """Add a switch operation to the open step, its ends given as ``(rank, buf, index)``."""
        if not self._open:
            raise ScheduleError("add a switch op inside `with builder.step():`")
        ends = [[Endpoint(r, _as_buf(b, "buf"), x) for r, b, x in side] for side in (sources, targets)]
        self._switch_ops.append(SwitchOp(SwitchOpKind(op), switch, tuple(ends[0]), tuple(ends[1]), count,
                                         len(self._offsets) - 1))

    def multicast(self, switch: str, src: int, dsts: list[int], index: int, count: int = 1, *,
                  buf: Buf = Buf.INPUT, dst_index: int | None = None, dst_buf: Buf | None = None) -> None:
        """Through ``switch``: d.dst_buf[dst_index:+count] := src.buf[index:+count] for every d in ``dsts``."""
        dx = index if dst_index is None else dst_index
        db = buf if dst_buf is None else dst_buf
        self.switch_op(SwitchOpKind.MULTICAST, switch, [(src, buf, index)], [(d, db, dx) for d in dsts], count)

    def switch_reduce(self, switch: str, srcs: list[int], dsts: list[int], index: int, count: int = 1, *,
                      buf: Buf = Buf.INPUT, dst_index: int | None = None, dst_buf: Buf | None = None) -> None:
        """In ``switch``: d.dst_buf[dst_index:+count] := ⊕ over s in ``srcs`` of s.buf[index:+count], for every d
        in ``dsts`` (NVLS ld_reduce to one rank, ld_reduce + st to many, or SHARP)."""
        dx = index if dst_index is None else dst_index
        db = buf if dst_buf is None else dst_buf
        self.switch_op(SwitchOpKind.REDUCE, switch, [(s, buf, index) for s in srcs], [(d, db, dx) for d in dsts],
                       count)

    def build(self) -> Schedule:
        """The validated, immutable schedule."""
        ways = None
        if self._ways:
            ways = np.zeros(len(self._op), dtype=np.uint16)
            ways[list(self._ways)] = list(self._ways.values())
        return Schedule.from_columns(self.collective, self.name, self.columns(), self.scratch_chunks,
                                     switch_ops=self._switch_ops, ways=ways)

    def columns(self) -> Columns:
        """The transfers so far as ``Columns`` (copies), not yet checked against the collective: what
        ``build`` validates, and what a symmetric form's partial schedule is (``algorithms.symmetric``)."""
        if self._open:
            raise ScheduleError("build() called inside an open step")

        def arr(a: array[int]) -> np.ndarray:
            # A copy: the builder may go on growing its arrays after build().
            return np.frombuffer(a, dtype={"i": np.int32, "q": np.int64, "B": np.uint8}[a.typecode]).copy()

        return Columns(arr(self._src), arr(self._dst), arr(self._sb), arr(self._sx), arr(self._db), arr(self._dx),
                       arr(self._n), arr(self._op), arr(self._offsets))
