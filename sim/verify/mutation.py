"""Mutation testing of the verifier: break a correct schedule, check the verifier notices.

A mutant drops, duplicates or redirects one transfer, or changes one of its
indices, its count, a buffer, its op or its step; in a schedule with switch
operations, it may instead drop, duplicate or move one of them, drop, add,
duplicate or redirect one of its sources or targets, or change an end's
index or buffer, its count or its kind (``SWITCH_MUTATIONS``). Whether a mutant *changes
the outcome* is decided independently of the symbolic verifier: the mutant is
executed concretely on random integers (addition as ⊕; a read of an empty
slot yields garbage; writes that race land in a random order) and compared
with the reference result computed straight from the collective's
definition. Every outcome-changing mutant must be rejected, either when it is
built (``ScheduleError``) or by ``verify``; the kill rate is the fraction that is.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from algorithms.errors import ScheduleError
from algorithms.ir import Buf, Endpoint, Kind, Op, Schedule, Step, SwitchOp, SwitchOpKind, Transfer, switch_ops_by_step
from sim.verify.semantics import SlotLayout, expected_state
from sim.verify.verifier import verify

__all__ = ["MUTATIONS", "SWITCH_MUTATIONS", "MutationReport", "mutate", "outcome_changed", "kill_rate"]


def _drop(steps: list[list[Transfer]], si: int, ti: int, rng: random.Random, p: int) -> None:
    del steps[si][ti]


def _duplicate(steps: list[list[Transfer]], si: int, ti: int, rng: random.Random, p: int) -> None:
    steps[si].append(steps[si][ti])


def _redirect(steps: list[list[Transfer]], si: int, ti: int, rng: random.Random, p: int) -> None:
    t = steps[si][ti]
    field_ = rng.choice(("src", "dst"))
    steps[si][ti] = t._replace(**{field_: rng.randrange(p)})  # type: ignore[arg-type]


def _index(steps: list[list[Transfer]], si: int, ti: int, rng: random.Random, p: int) -> None:
    t = steps[si][ti]
    field_ = rng.choice(("src_index", "dst_index"))
    delta = rng.choice((-2, -1, 1, 2))
    steps[si][ti] = t._replace(**{field_: max(0, getattr(t, field_) + delta)})


def _count(steps: list[list[Transfer]], si: int, ti: int, rng: random.Random, p: int) -> None:
    t = steps[si][ti]
    steps[si][ti] = t._replace(count=max(1, t.count + rng.choice((-1, 1))))


def _buffer(steps: list[list[Transfer]], si: int, ti: int, rng: random.Random, p: int) -> None:
    t = steps[si][ti]
    field_ = rng.choice(("src_buf", "dst_buf"))
    others = [b for b in Buf if b is not getattr(t, field_)]
    steps[si][ti] = t._replace(**{field_: rng.choice(others)})  # type: ignore[arg-type]


def _op(steps: list[list[Transfer]], si: int, ti: int, rng: random.Random, p: int) -> None:
    t = steps[si][ti]
    steps[si][ti] = t._replace(op=Op.COPY if t.op is Op.REDUCE else Op.REDUCE)


def _step(steps: list[list[Transfer]], si: int, ti: int, rng: random.Random, p: int) -> None:
    t = steps[si].pop(ti)
    target = rng.randrange(len(steps) + 1)
    if target == len(steps):
        steps.append([t])
    else:
        steps[target].append(t)


MUTATIONS: dict[str, Callable[[list[list[Transfer]], int, int, random.Random, int], None]] = {
    "drop": _drop, "duplicate": _duplicate, "redirect": _redirect, "index": _index,
    "count": _count, "buffer": _buffer, "op": _op, "step": _step,
}


def _end(op: SwitchOp, rng: random.Random) -> tuple[str, int]:
    field_ = rng.choice(("sources", "targets"))
    return field_, rng.randrange(len(getattr(op, field_)))


def _with(op: SwitchOp, field_: str, ends: list[Endpoint]) -> SwitchOp:
    return SwitchOp(op.op, op.switch, **{**{"sources": op.sources, "targets": op.targets}, field_: tuple(ends)},
                    count=op.count, step=op.step)


def _op_drop(ops: list[SwitchOp], j: int, rng: random.Random, p: int, steps: int) -> None:
    del ops[j]


def _op_duplicate(ops: list[SwitchOp], j: int, rng: random.Random, p: int, steps: int) -> None:
    ops.append(ops[j])


def _op_step(ops: list[SwitchOp], j: int, rng: random.Random, p: int, steps: int) -> None:
    o = ops[j]
    ops[j] = SwitchOp(o.op, o.switch, o.sources, o.targets, o.count, rng.randrange(steps))


def _op_end_drop(ops: list[SwitchOp], j: int, rng: random.Random, p: int, steps: int) -> None:
    field_, k = _end(ops[j], rng)
    ends = list(getattr(ops[j], field_))
    del ends[k]
    ops[j] = _with(ops[j], field_, ends)


def _op_end_duplicate(ops: list[SwitchOp], j: int, rng: random.Random, p: int, steps: int) -> None:
    field_, k = _end(ops[j], rng)
    ends = list(getattr(ops[j], field_))
    ends.append(ends[k])
    ops[j] = _with(ops[j], field_, ends)


def _op_end_add(ops: list[SwitchOp], j: int, rng: random.Random, p: int, steps: int) -> None:
    field_, k = _end(ops[j], rng)
    ends = list(getattr(ops[j], field_))
    ends.append(ends[k]._replace(rank=rng.randrange(p)))
    ops[j] = _with(ops[j], field_, ends)


def _op_end_redirect(ops: list[SwitchOp], j: int, rng: random.Random, p: int, steps: int) -> None:
    field_, k = _end(ops[j], rng)
    ends = list(getattr(ops[j], field_))
    ends[k] = ends[k]._replace(rank=rng.randrange(p))
    ops[j] = _with(ops[j], field_, ends)


def _op_end_index(ops: list[SwitchOp], j: int, rng: random.Random, p: int, steps: int) -> None:
    field_, k = _end(ops[j], rng)
    ends = list(getattr(ops[j], field_))
    ends[k] = ends[k]._replace(index=max(0, ends[k].index + rng.choice((-1, 1))))
    ops[j] = _with(ops[j], field_, ends)


def _op_end_buffer(ops: list[SwitchOp], j: int, rng: random.Random, p: int, steps: int) -> None:
    field_, k = _end(ops[j], rng)
    ends = list(getattr(ops[j], field_))
    ends[k] = ends[k]._replace(buf=rng.choice([b for b in Buf if b is not ends[k].buf]))
    ops[j] = _with(ops[j], field_, ends)


def _op_count(ops: list[SwitchOp], j: int, rng: random.Random, p: int, steps: int) -> None:
    o = ops[j]
    ops[j] = SwitchOp(o.op, o.switch, o.sources, o.targets, max(1, o.count + rng.choice((-1, 1))), o.step)


def _op_kind(ops: list[SwitchOp], j: int, rng: random.Random, p: int, steps: int) -> None:
    o = ops[j]
    other = SwitchOpKind.REDUCE if o.op is SwitchOpKind.MULTICAST else SwitchOpKind.MULTICAST
    ops[j] = SwitchOp(other, o.switch, o.sources, o.targets, o.count, o.step)


SWITCH_MUTATIONS: dict[str, Callable[[list[SwitchOp], int, random.Random, int, int], None]] = {
    "op_drop": _op_drop, "op_duplicate": _op_duplicate, "op_step": _op_step, "op_end_drop": _op_end_drop,
    "op_end_duplicate": _op_end_duplicate, "op_end_add": _op_end_add, "op_end_redirect": _op_end_redirect,
    "op_end_index": _op_end_index, "op_end_buffer": _op_end_buffer, "op_count": _op_count, "op_kind": _op_kind,
}
"""Mutations of one switch operation (``mutate`` picks one of a switch op about as often as its share of
the schedule's entries). Building rejects the ones that leave a side empty or a multicast with several
sources: those count as killed at build time."""


def _mutate_switch_op(schedule: Schedule, rng: random.Random, kind: str | None) -> tuple[str, Schedule | None]:
    name = kind if kind is not None else rng.choice(list(SWITCH_MUTATIONS))
    ops = list(schedule.switch_ops)
    try:
        SWITCH_MUTATIONS[name](ops, rng.randrange(len(ops)), rng, schedule.ranks, schedule.num_steps)
        return name, Schedule(schedule.collective, schedule.name, schedule.steps, schedule.scratch_chunks,
                              switch_ops=ops)
    except ScheduleError:
        return name, None


def mutate(schedule: Schedule, rng: random.Random, kind: str | None = None) -> tuple[str, Schedule | None]:
    """One random mutant: ``(mutation name, schedule)``, or ``(name, None)`` when validation rejects it."""
    if schedule.switch_ops:
        share = len(schedule.switch_ops) / (len(schedule.switch_ops) + schedule.num_transfers)
        if kind in SWITCH_MUTATIONS or (kind is None and rng.random() < share):
            return _mutate_switch_op(schedule, rng, kind)
        return _mutate_transfer_keeping_ops(schedule, rng, kind)
    name = kind if kind is not None else rng.choice(list(MUTATIONS))
    steps = [list(s.transfers) for s in schedule.steps]
    located = [(si, ti) for si, s in enumerate(steps) for ti in range(len(s))]
    if not located:
        raise ValueError(f"{schedule.name}: no transfer to mutate")
    si, ti = rng.choice(located)
    MUTATIONS[name](steps, si, ti, rng, schedule.ranks)
    try:
        return name, Schedule(schedule.collective, schedule.name, tuple(Step(tuple(s)) for s in steps if s),
                              schedule.scratch_chunks)
    except ScheduleError:
        return name, None


def _mutate_transfer_keeping_ops(schedule: Schedule, rng: random.Random,
                                 kind: str | None) -> tuple[str, Schedule | None]:
    """A transfer mutant of a schedule with switch ops: every step stays (the ops name them by number)."""
    name = kind if kind is not None else rng.choice(list(MUTATIONS))
    steps = [list(s.transfers) for s in schedule.steps]
    located = [(si, ti) for si, s in enumerate(steps) for ti in range(len(s))]
    MUTATIONS[name](steps, *rng.choice(located), rng, schedule.ranks)
    try:
        return name, Schedule(schedule.collective, schedule.name, tuple(Step(tuple(s)) for s in steps),
                              schedule.scratch_chunks, switch_ops=schedule.switch_ops)
    except ScheduleError:
        return name, None


def _concrete_run(schedule: Schedule, rng: random.Random) -> bool:
    """Execute concretely on random integers; True when the result equals the reference."""
    layout = SlotLayout(schedule)
    coll = schedule.collective
    barrier = coll.kind is Kind.BARRIER
    value: dict[tuple[int, int], int] = {}
    state: list[int | None] = [None] * layout.num_slots
    for r in range(coll.ranks):
        if coll.kind is Kind.BROADCAST and r != coll.root:
            continue
        for i in range(coll.input_chunks(r)):
            value[(r, i)] = (1 << r) if barrier else rng.getrandbits(48)
            state[layout.slot(r, Buf.INPUT, i)] = value[(r, i)]

    def read(slot: int) -> int:
        v = state[slot]
        return rng.getrandbits(48) if v is None else v  # an empty slot holds garbage

    by_step = switch_ops_by_step(schedule)
    for si, step in enumerate(schedule.steps):
        writes: list[tuple[int, Op, int]] = []
        for t in step.transfers:
            for k in range(t.count):
                writes.append((layout.slot(t.dst, t.dst_buf, t.dst_index + k), t.op,
                               read(layout.slot(t.src, t.src_buf, t.src_index + k))))
        for o in by_step[si]:  # the switch combines its sources (⊕ = +; a barrier's tokens: |) and copies out
            for k in range(o.count):
                total = 0
                for e in o.sources:
                    v = read(layout.slot(e.rank, e.buf, e.index + k))
                    total = total | v if barrier else total + v
                writes.extend((layout.slot(e.rank, e.buf, e.index + k), Op.COPY, total) for e in o.targets)
        rng.shuffle(writes)  # racing writes land in an arbitrary order
        for slot, op, v in writes:
            if barrier:
                state[slot] = read(slot) | v
            elif op is Op.COPY:
                state[slot] = v
            else:
                state[slot] = read(slot) + v
    for slot, want in expected_state(coll, layout).items():
        ref = 0
        for j in range(0, len(want), 2):
            i, mask = want[j], want[j + 1]
            for s in range(coll.ranks):
                if mask >> s & 1:
                    ref = ref | value[(s, i)] if barrier else ref + value[(s, i)]
        if state[slot] != ref:
            return False
    return True


def outcome_changed(schedule: Schedule, *, seed: int = 0, trials: int = 3) -> bool:
    """True when a concrete run on random data, in some order of racing writes, gives a wrong result."""
    rng = random.Random(seed)
    return not all(_concrete_run(schedule, rng) for _ in range(trials))


@dataclass
class MutationReport:
    """Counts over the mutants of one schedule."""

    name: str
    total: int = 0
    rejected_at_build: int = 0
    changed: int = 0
    killed: int = 0
    flagged_harmless: int = 0
    survivors: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        """Killed / outcome-changing mutants (1.0 when none changed the outcome)."""
        return self.killed / self.changed if self.changed else 1.0


def kill_rate(schedule: Schedule, *, samples: int = 200, seed: int = 0) -> MutationReport:
    """Mutate ``schedule`` ``samples`` times; count the outcome-changing mutants the verifier catches."""
    rng = random.Random(seed)
    report = MutationReport(schedule.name)
    for n in range(samples):
        name, mutant = mutate(schedule, rng)
        report.total += 1
        if mutant is None:
            # Out-of-range mutants never become schedules: caught at build time.
            report.rejected_at_build += 1
            report.changed += 1
            report.killed += 1
            continue
        flagged = not verify(mutant).ok
        if outcome_changed(mutant, seed=seed * 1_000_003 + n):
            report.changed += 1
            if flagged:
                report.killed += 1
            else:
                report.survivors.append(f"{name}: {mutant.steps}")
        elif flagged:
            report.flagged_harmless += 1
    return report
