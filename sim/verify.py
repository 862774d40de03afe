"""Symbolic verification of schedules against their collective's postcondition.

``verify(schedule)`` executes the schedule in lockstep on symbolic contents
(DESIGN.md, step semantics): reads in a step see the state at its start and
writes land at its end; a slot written by a ``copy`` is written by nothing
else in that step; a ``reduce`` needs disjoint contributions (except for
barrier tokens); reading an empty slot is an error. The report lists every
violation with its step and transfer, and every wrong final slot with its
expected and actual contributions. A barrier is checked by causality: every
rank's token must have heard, directly or transitively, from every rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from algorithms.ir import Kind, Op, Schedule
from algorithms.registry import no_gc
from sim.semantics import Content, SlotLayout, describe, describe_text, expected_state, initial_state, overlaps, union

__all__ = ["Violation", "VerifyReport", "verify", "execute"]

WRONG_SLOT = "wrong_slot"
RACE = "race"
DOUBLE_COUNT = "double_count"
UNINITIALISED_READ = "uninitialised_read"


@dataclass(frozen=True)
class Violation:
    """One thing wrong with a schedule, located by step/transfer or by slot."""

    kind: str
    message: str
    step: int | None = None
    transfer: int | None = None
    rank: int | None = None
    buf: str | None = None
    index: int | None = None
    expected: tuple[int, ...] | None = None
    actual: tuple[int, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; contributions as ``[{"chunk", "ranks"}]``."""
        d: dict[str, Any] = {"kind": self.kind, "message": self.message}
        for name in ("step", "transfer", "rank", "buf", "index"):
            if getattr(self, name) is not None:
                d[name] = getattr(self, name)
        if self.kind == WRONG_SLOT:
            d["expected"] = describe(self.expected)
            d["actual"] = describe(self.actual)
        return d

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class VerifyReport:
    """The outcome of ``verify``: ``ok`` when there is no violation."""

    schedule_name: str
    collective: str
    steps: int
    transfers: int
    violations: tuple[Violation, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        """True when the schedule meets its postcondition with no race, double count or bad read."""
        return not self.violations

    def to_dict(self) -> dict[str, Any]:
        """``{"ok", "violations", "transfers", "steps"}`` as the CLI prints it."""
        return {"ok": self.ok, "violations": [v.to_dict() for v in self.violations],
                "transfers": self.transfers, "steps": self.steps}

    def __str__(self) -> str:
        head = f"{self.schedule_name} ({self.collective}): {self.steps} steps, {self.transfers} transfers: "
        if self.ok:
            return head + "OK"
        return head + f"{len(self.violations)} violation(s)\n" + "\n".join(f"  {v}" for v in self.violations)


def _where(layout: SlotLayout, slot: int) -> str:
    r, buf, i = layout.where(slot)
    return f"rank {r} {buf}[{i}]"


def execute(schedule: Schedule) -> tuple[list[Content | None], list[Violation], SlotLayout]:
    """Run the schedule in lockstep; returns the final state, the step violations and the layout."""
    layout = SlotLayout(schedule)
    state = initial_state(layout)
    idempotent = schedule.collective.kind is Kind.BARRIER
    bases = layout.bases
    bad: list[Violation] = []
    copy_op = Op.COPY
    for si, step in enumerate(schedule.steps):
        copies: dict[int, tuple[Content, int]] = {}
        reduces: dict[int, list[tuple[Content, int]]] = {}
        for ti, t in enumerate(step.transfers):
            src_slot = bases[t.src_buf][t.src] + t.src_index
            dst_slot = bases[t.dst_buf][t.dst] + t.dst_index
            # Hot loop: one iteration per chunk moved (about 2 M at p = 1024).
            for k in range(t.count):
                v = state[src_slot + k]
                if v is None:
                    bad.append(Violation(
                        UNINITIALISED_READ,
                        f"step {si} transfer {ti} ({t!r}): reads {_where(layout, src_slot + k)}, which holds nothing",
                        si, ti, t.src, t.src_buf.value, t.src_index + k))
                    continue
                d = dst_slot + k
                if t.op is copy_op and not idempotent:
                    if d in copies or d in reduces:
                        other = copies[d][1] if d in copies else reduces[d][0][1]
                        bad.append(_race(layout, si, ti, other, d, t))
                        continue
                    copies[d] = (v, ti)
                else:
                    if d in copies:
                        bad.append(_race(layout, si, ti, copies[d][1], d, t))
                        continue
                    lst = reduces.get(d)
                    if lst is None:
                        reduces[d] = [(v, ti)]
                    else:
                        lst.append((v, ti))
        for d, (v, _ti) in copies.items():
            state[d] = v
        for d, lst in reduces.items():
            cur = state[d]
            for v, ti in lst:
                t = step.transfers[ti]
                if cur is None:
                    if idempotent and t.op is copy_op:
                        cur = v
                        continue
                    bad.append(Violation(
                        UNINITIALISED_READ,
                        f"step {si} transfer {ti} ({t!r}): reduces into {_where(layout, d)}, which holds nothing",
                        si, ti, t.dst, t.dst_buf.value, d - bases[t.dst_buf][t.dst]))
                    continue
                if not idempotent and overlaps(cur, v):
                    bad.append(Violation(
                        DOUBLE_COUNT,
                        f"step {si} transfer {ti} ({t!r}): {_where(layout, d)} already holds "
                        f"{describe_text(cur)}; adding {describe_text(v)} counts a contribution twice",
                        si, ti, t.dst, t.dst_buf.value, d - bases[t.dst_buf][t.dst]))
                    continue
                cur = union(cur, v)
            state[d] = cur
    return state, bad, layout


def _race(layout: SlotLayout, si: int, ti: int, other: int, slot: int, t: Any) -> Violation:
    return Violation(
        RACE,
        f"step {si} transfer {ti} ({t!r}): writes {_where(layout, slot)}, which transfer {other} "
        "of the same step also writes (a copy must be the only write to a slot in its step)",
        si, ti, t.dst, t.dst_buf.value, slot - layout.bases[t.dst_buf][t.dst])


def check_final(schedule: Schedule, state: list[Content | None], layout: SlotLayout) -> list[Violation]:
    """A violation for every slot whose final content differs from the postcondition."""
    bad: list[Violation] = []
    for slot, want in sorted(expected_state(schedule.collective, layout).items()):
        got = state[slot]
        if got != want:
            r, buf, i = layout.where(slot)
            bad.append(Violation(
                WRONG_SLOT,
                f"rank {r} {buf}[{i}]: expected {describe_text(want)}, got {describe_text(got)}",
                rank=r, buf=buf.value, index=i, expected=want, actual=got))
    return bad


def verify(schedule: Schedule) -> VerifyReport:
    """Verify ``schedule`` symbolically; the report lists every violation (empty when correct)."""
    with no_gc():
        state, bad, layout = execute(schedule)
    bad.extend(check_final(schedule, state, layout))
    return VerifyReport(schedule.name, schedule.collective.describe(), len(schedule.steps),
                        schedule.num_transfers, tuple(bad))
