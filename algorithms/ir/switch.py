"""Switch operations: multicast and in-switch reduction, performed by a switch in one step of a schedule.

A ``SwitchOp`` stands for the transfers it replaces; ``Endpoint`` is one of its ends. ``_check_switch_ops``
checks a schedule's switch ops against its collective (the ``Schedule`` calls it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

from algorithms.errors import ScheduleError
from algorithms.ir.collective import MAX_SLOTS, Buf, Collective, _buffer_chunks, _check_int
from algorithms.ir.transfer import _as_buf

__all__ = ["Endpoint", "SwitchOpKind", "SwitchOp"]


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


def _check_switch_ops(coll: Collective, scratch: int, steps: int, ops: Iterable[SwitchOp]) -> tuple[SwitchOp, ...]:
    """The switch ops in step order (stable), each in range of a schedule of ``steps`` steps for ``coll`` with
    ``scratch`` chunks of scratch; in-place kinds name ``input`` for ``output``."""
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

