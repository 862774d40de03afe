"""Verification of an MSCCL++ execution plan: its synchronisation and its data, named by the plan's ops.

``verify_plan(source)`` reads the plan (``algorithms.formats.mscclpp.read_plan``), which replays it on the
happens-before its signals, waits, barriers, semaphores, proxies and packets give: a deadlock (waits that
can never all be met, named by the ops of the cycle or the op nothing left can serve), a race (two
accesses to one slot, one a write, that nothing orders; an access another GPU's run does not order
within it) and a signal no wait meets are *sync findings*. It then verifies the schedule the replay lays
out against the collective's postcondition (``sim.verify.verifier``) and names every data violation by the
op behind the transfer at fault: a wrong final slot by the op that last wrote it and the ops that carried
data astray (``sim.verify.plan_blame``), and every op whose write was overwritten before anything read it
(a dead write). A
``test`` plan (the DSL's op-level probes) has no postcondition: only its synchronisation is checked.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from algorithms.errors import ScheduleError
from algorithms.formats.mscclpp.reader import ReadPlan, paused_gc, read_plan
from algorithms.formats.mscclpp.replay import HINTS
from algorithms.formats.schedule import read_bytes
from algorithms.ir import Buf
from sim.verify.plan_blame import blame_wrong_slots
from sim.verify.report import WRONG_SLOT, VerifyReport
from sim.verify.semantics import SlotLayout
from sim.verify.verifier import verify

__all__ = ["Finding", "PlanReport", "verify_plan"]

_TRACED = 20
"""Wrong slots traced back to the ops that carried their data (``sim.verify.plan_blame``)."""


@dataclass(frozen=True)
class Finding:
    """One thing wrong with a plan: ``kind`` (deadlock, race, unmatched, a data violation's kind, or
    dead_write or dead_packet for a hint), its message, and the ops it names (their ``where``: ``gpu 1
    threadblock 0 op 5``)."""

    kind: str
    message: str
    ops: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "ops": list(self.ops)}


@dataclass(frozen=True)
class PlanReport:
    """The outcome of ``verify_plan``: ``ok`` when the plan's synchronisation and data are right."""

    name: str
    collective: str
    protocol: str
    findings: tuple[Finding, ...]
    hints: tuple[Finding, ...] = field(default_factory=tuple)
    data: VerifyReport | None = None
    """The schedule's own verification (None: the plan deadlocks, or is a ``test`` plan)."""

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def ops(self) -> set[str]:
        """Every op the report names, findings and hints."""
        return {o for f in (*self.findings, *self.hints) for o in f.ops}

    def text(self, limit: int | None = 20) -> str:
        head = f"{self.name} ({self.collective}, {self.protocol}, MSCCL++ plan): "
        lines = [head + ("OK" if self.ok else f"{len(self.findings)} problem(s)")]
        lines += [f"  {f.message}" for f in self.findings[:limit]]
        if limit is not None and len(self.findings) > limit:
            lines.append(f"  ... and {len(self.findings) - limit} more")
        lines += [f"  hint: {h.message}" for h in self.hints[:limit]]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "name": self.name, "collective": self.collective, "protocol": self.protocol,
                "findings": [f.to_dict() for f in self.findings], "hints": [h.to_dict() for h in self.hints]}

    def __str__(self) -> str:
        return self.text()


def _op_of(got: ReadPlan, step: int | None, transfer: int | None) -> tuple[str, ...]:
    if step is None or transfer is None or step >= len(got.origin):
        return ()
    row = got.origin[step]
    if transfer < len(row):
        return (row[transfer],) if row[transfer] else ()
    k = transfer - len(row)  # a switch op of the step: the verifier numbers them after the transfers
    ops = [w for w, o in zip(got.switch_origin, got.schedule.switch_ops if got.schedule else (), strict=False)
           if o.step == step]
    return (ops[k],) if k < len(ops) and ops[k] else ()


def verify_plan(source: str | bytes | dict[str, Any] | os.PathLike[str]) -> PlanReport:
    """Verify an MSCCL++ plan (JSON text, parsed JSON or a path; module docstring). ``ScheduleError`` for a plan
    that cannot be read at all (bad JSON or field, an op the executor does not take), naming the place."""
    with paused_gc():  # (reader.paused_gc: the collector's passes over a large plan's objects cost as much again)
        return _verify_plan(source)


def _verify_plan(source: str | bytes | dict[str, Any] | os.PathLike[str]) -> PlanReport:
    if isinstance(source, os.PathLike) or (isinstance(source, str) and not source.lstrip().startswith("{")
                                           and Path(source).is_file()):
        path = source
        try:
            got = read_plan(read_bytes(path))
        except ScheduleError as e:
            raise ScheduleError(f"{path}: {e}") from None
    else:
        got = read_plan(source)
    findings = [Finding(p.kind, p.message, p.ops) for p in got.problems if p.kind not in HINTS]
    hints: list[Finding] = [Finding(p.kind, p.message, p.ops) for p in got.problems if p.kind in HINTS]
    data = None
    if got.schedule is not None and not got.layout.custom:
        data = verify(got.schedule)
        layout = got.layout
        wrong = [v for v in data.violations if v.kind == WRONG_SLOT and v.rank is not None and v.buf is not None
                 and v.index is not None][:_TRACED]
        slots = SlotLayout(got.schedule)
        ids = {id(v): slots.slot(v.rank, Buf(v.buf), v.index) for v in wrong}  # type: ignore[arg-type]
        blamed, dead = blame_wrong_slots(got, list(ids.values())) if not data.ok else ({}, [])
        for v in data.violations:
            ops = _op_of(got, v.step, v.transfer)
            message = v.message
            if v.writer is not None:
                ops = _op_of(got, v.writer[0], v.writer[1]) or ops
            traced = blamed.get(ids.get(id(v), -1), ())
            if traced:
                ops = ops + tuple(w for w in traced if w not in ops)
            if v.rank is not None and v.buf is not None and v.index is not None:
                where = layout.describe(v.rank, Buf(v.buf), v.index)
                message = f"{where}: {message}"
            if ops:
                message = f"{message} [{', '.join(ops)}]"
            findings.append(Finding(v.kind, message, ops))
        for first, then, slot in dead[:_TRACED]:
            where = layout.describe(*slots.where(slot))
            hints.append(Finding("dead_write", f"{first} writes {where}, and {then or 'a local copy'} overwrites it "
                                               "before anything reads it", (first, then) if then else (first,)))
        for h in data.hints:
            ops = _op_of(got, h.step, h.transfer)
            if ops:
                hints.append(Finding("dead_write", f"{ops[0]} writes data that is overwritten before anything reads "
                                                   f"it ({h.message})", ops))
    plan = got.plan
    return PlanReport(plan.name, plan.collective, got.protocol, tuple(findings), tuple(hints), data)

