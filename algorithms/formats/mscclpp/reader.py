"""Reading MSCCL++ execution plans as collsched schedules: ``read_plan``, ``from_plan``, ``loads_plan``,
``load_plan``.

The reader takes every op of the executor's parser that moves, reduces or synchronises data (``ops`` and
``replay`` say what each does): Simple and LL (packet) plans, in-place buffers as the DSL writes them
(``buffers``), pipelines, thread-block groups (``tbg_info``), barriers and semaphores. It replays the plan
(``replay``): every data op comes at its level, one after everything that happens before it, and the
levels are the schedule's steps (an op that reduces into another slot and sends the sum takes one step a
phase). In-place collectives get the local copies that join them to collsched's out-of-place ones, in
the first or last step when nothing there touches their slots, else in a step of their own. Each transfer's
channel (``Schedule.channels``) is the thread block that issues it, numbered GPU by GPU: the simulator's send
order then runs thread blocks concurrently, each in its own order, as the executor does.

``from_plan`` refuses a plan whose synchronisation is wrong (a deadlock, a race, a signal no wait meets):
such a plan has no one meaning. ``read_plan`` returns the schedule with the problems and, for every
transfer and switch operation, the op it comes from (what ``sim.verify.plan`` names in its report).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from algorithms.errors import ScheduleError
from algorithms.formats.mscclpp.buffers import Layout
from algorithms.formats.mscclpp.plan import ExecutionPlan, looks_like_plan, parse_plan
from algorithms.formats.mscclpp.replay import HINTS, Event, Problem, replay
from algorithms.formats.schedule import read_bytes
from algorithms.ir import Buf, Endpoint, Op, Schedule, SwitchOp, SwitchOpKind, Transfer

__all__ = ["ReadPlan", "from_plan", "load_plan", "loads_plan", "looks_like_plan", "paused_gc", "read_plan"]

Slot = tuple[int, Buf, int]


@dataclass(frozen=True, slots=True)
class ReadPlan:
    """A plan as read: the schedule (None when the plan deadlocks), its synchronisation problems, and the op
    (its ``where``) behind every transfer, step by step (``origin[step][i]``), and every switch operation
    (``switch_origin[i]``, in the schedule's order); ``""`` for the local copies of an in-place layout."""

    plan: ExecutionPlan
    layout: Layout
    schedule: Schedule | None
    problems: tuple[Problem, ...]
    origin: tuple[tuple[str, ...], ...]
    switch_origin: tuple[str, ...]
    protocol: str

    def error(self) -> ScheduleError | None:
        """The ``ScheduleError`` ``from_plan`` raises for this plan (None: the plan reads): its first problem,
        or for a ``test`` plan (no postcondition, read for simulation) a deadlock only."""
        problems = [p for p in self.problems
                    if p.kind not in HINTS and (p.kind == "deadlock" or not self.layout.custom)]
        if not problems:
            return None
        more = len(problems) - 1
        tail = f" (and {more} more: sim.verify.plan.verify_plan lists them)" if more else ""
        return ScheduleError(f"plan: {problems[0].message}{tail}")


def _slots(buf: Buf, index: int, count: int, rank: int) -> set[Slot]:
    return {(rank, buf, index + k) for k in range(count)}


def _mergeable(level: list[Transfer], sw: list[SwitchOp], extra: list[Transfer], before: bool) -> bool:
    """Whether the local copies ``extra`` can share ``level``'s step and leave the same state as a step of their
    own just ``before`` it (or after it): the level neither reads nor writes what copies before it write, and
    does not write what copies after it read or write."""
    reads: set[Slot] = set()
    writes: set[Slot] = set()
    for t in level:
        dst = _slots(t.dst_buf, t.dst_index, t.count, t.dst)
        reads |= _slots(t.src_buf, t.src_index, t.count, t.src) | (dst if t.op is Op.REDUCE else set())
        writes |= dst
    for op in sw:
        reads |= {s for e in op.sources for s in _slots(e.buf, e.index, op.count, e.rank)}
        writes |= {s for e in op.targets for s in _slots(e.buf, e.index, op.count, e.rank)}
    theirs_r = set().union(*(_slots(t.src_buf, t.src_index, t.count, t.src) for t in extra))
    theirs_w = set().union(*(_slots(t.dst_buf, t.dst_index, t.count, t.dst) for t in extra))
    if before:
        return not theirs_w & (reads | writes)
    return not writes & (theirs_r | theirs_w)


def _switch(op: Any, level: int, sources: list[tuple[int, Buf, int]], targets: list[tuple[int, Buf, int]],
            count: int, reduce: bool) -> SwitchOp:
    kind = SwitchOpKind.REDUCE if reduce else SwitchOpKind.MULTICAST
    return SwitchOp(kind, op.switch or "any", tuple(Endpoint(*e) for e in sources),
                    tuple(Endpoint(*e) for e in targets), count, level)


def _assemble(plan: ExecutionPlan, layout: Layout, events: list[Event], name: str | None
              ) -> tuple[Schedule, tuple[tuple[str, ...], ...], tuple[str, ...]]:
    levels: dict[int, list[tuple[Transfer, str, int]]] = {}
    switch: dict[int, list[tuple[SwitchOp, str]]] = {}
    # Each thread block is a channel of its own (the executor runs them concurrently, each in its op order):
    # numbered GPU by GPU, so no two GPUs' thread blocks share one.
    first_tb = [0]
    for gpu in plan.gpus:
        first_tb.append(first_tb[-1] + len(gpu.threadblocks))
    for ev in events:
        op = ev.op
        channel = first_tb[op.gpu] + op.tb
        for m in ev.effect.moves:
            sb, si, n = layout.slots(m.src.rank, m.src.space, m.src.index, m.src.size, op.tbg, f"{op.where} src_buff")
            db, di, _ = layout.slots(m.dst.rank, m.dst.space, m.dst.index, m.dst.size, op.tbg, f"{op.where} dst_buff")
            if m.op is Op.COPY and (m.src.rank, sb, si) == (m.dst.rank, db, di):
                continue  # a copy onto itself (an in-place alias): nothing moves
            levels.setdefault(ev.level + m.phase, []).append(
                (Transfer(m.src.rank, m.dst.rank, sb, si, db, di, n, m.op), op.where, channel))
        for sm in ev.effect.switch:
            ends = [[layout.slots(r.rank, r.space, r.index, r.size, op.tbg, f"{op.where} {side}")
                     for r in refs] for side, refs in (("src_buff", sm.sources), ("dst_buff", sm.targets))]
            n = ends[0][0][2]
            at = ev.level + sm.phase
            srcs = [(r.rank, b, i) for r, (b, i, _) in zip(sm.sources, ends[0], strict=True)]
            dsts = [(r.rank, b, i) for r, (b, i, _) in zip(sm.targets, ends[1], strict=True)]
            switch.setdefault(at, []).append((_switch(op, at, srcs, dsts, n, sm.reduce), op.where))
    used = sorted(set(levels) | set(switch))
    first, last = (used[0], used[-1]) if used else (1, 1)

    def plain(level: int) -> tuple[list[Transfer], list[SwitchOp]]:
        return [t for t, _, _ in levels.get(level, [])], [o for o, _ in switch.get(level, [])]

    if layout.prelude:
        at = first if used and _mergeable(*plain(first), layout.prelude, True) else first - 1
        levels.setdefault(at, []).extend((t, "", 0) for t in layout.prelude)  # local: no queue, any channel
    if layout.postlude:
        at = last if used and _mergeable(*plain(last), layout.postlude, False) else last + 1
        levels.setdefault(at, []).extend((t, "", 0) for t in layout.postlude)
    order = sorted(set(levels) | set(switch))
    number = {lv: k for k, lv in enumerate(order)}
    steps = [[t for t, _, _ in levels.get(lv, [])] for lv in order]
    origin = tuple(tuple(w for _, w, _ in levels.get(lv, [])) for lv in order)
    channels = [c for lv in order for _, _, c in levels.get(lv, [])]
    ops: list[SwitchOp] = []
    sorigin: list[str] = []
    for lv in order:
        for o, w in switch.get(lv, []):
            ops.append(SwitchOp(o.op, o.switch, o.sources, o.targets, o.count, number[lv]))
            sorigin.append(w)
    try:
        schedule = Schedule(layout.collective, name or layout.name, steps, layout.scratch, switch_ops=ops,
                            channels=channels)
    except ScheduleError as e:
        raise ScheduleError(f"plan: {e}") from None
    return schedule, origin, tuple(sorigin)


@contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic garbage collector off for the block (back to how it was after). Reading a large plan makes
    millions of small objects and no cycles; the collector's passes over them took half of reading and
    verifying the largest plan of the corpus (32 GPUs, 193,000 ops: 5.8 s of CPU with it, 2.8 s without)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def read_plan(source: str | bytes | ExecutionPlan | dict[str, Any], *, name: str | None = None) -> ReadPlan:
    """The plan read, with its problems (see ``ReadPlan``); ``ScheduleError`` only for a plan that cannot be
    read at all (bad JSON, a bad field, an op the executor does not take or whose ranges do not fit it)."""
    with paused_gc():
        return _read(source, name)


def _read(source: str | bytes | ExecutionPlan | dict[str, Any], name: str | None) -> ReadPlan:
    plan = source if isinstance(source, ExecutionPlan) else parse_plan(source)
    if plan.protocol not in ("Simple", "LL"):
        raise ScheduleError(f"plan: protocol {plan.protocol!r} (the executor runs Simple and LL)")
    run = replay(plan)
    deadlocked = any(p.kind == "deadlock" for p in run.problems)
    if deadlocked:
        return ReadPlan(plan, run.layout, None, tuple(run.problems), (), (), plan.protocol)
    schedule, origin, sorigin = _assemble(plan, run.layout, run.events, name)
    return ReadPlan(plan, run.layout, schedule, tuple(run.problems), origin, sorigin, plan.protocol)


def from_plan(source: str | bytes | ExecutionPlan | dict[str, Any], *, name: str | None = None) -> Schedule:
    """The schedule an MSCCL++ execution plan runs (text, parsed JSON or an ``ExecutionPlan``); ``ScheduleError``
    for a plan that cannot be read or whose synchronisation is wrong (its first problem, naming the ops)."""
    got = read_plan(source, name=name)
    err = got.error()
    if err is not None:
        raise err
    assert got.schedule is not None
    return got.schedule


def loads_plan(text: str | bytes, *, name: str | None = None) -> Schedule:
    """The schedule of plan JSON text."""
    return from_plan(text, name=name)


def load_plan(path: str | os.PathLike[str], *, name: str | None = None) -> Schedule:
    """The schedule of a plan file; errors name the file."""
    data = read_bytes(path)
    try:
        return from_plan(data, name=name)
    except ScheduleError as e:
        raise ScheduleError(f"{path}: {e}") from None
