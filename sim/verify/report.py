"""What verification reports: ``Violation`` (one thing wrong, located by step and transfer or by slot) and
``VerifyReport`` (every violation of one schedule), with their text and JSON forms.

Both verifiers (``sim.verify.verifier`` and ``sim.verify.fast``) build these, so they live below both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sim.verify.semantics import describe

__all__ = ["DEAD_WRITE", "DOUBLE_COUNT", "RACE", "UNINITIALISED_READ", "WRONG_SLOT", "Hint", "Violation",
           "VerifyReport", "dead_write", "schedule_title"]

WRONG_SLOT = "wrong_slot"
RACE = "race"
DOUBLE_COUNT = "double_count"
UNINITIALISED_READ = "uninitialised_read"
DEAD_WRITE = "dead_write"


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
    writer: tuple[int, int, str] | None = None
    """Wrong slot: (step, transfer, text) of the transfer that last wrote it; None if nothing did."""
    missing: tuple[tuple[int, int, int | None], ...] = ()
    """Wrong slot: (chunk, rank mask, last step) per group of contributions it lacks; the last step
    after which some slot held them, -1 for only before step 0, None when never present."""
    count: int = 1
    """How many violations of this kind the entry stands for: more than 1 for the compact verifier's
    ``"N more ... not listed"`` entries, so that the report's summary counts them all."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; contributions as ``[{"chunk", "ranks"}]``."""
        d: dict[str, Any] = {"kind": self.kind, "message": self.message}
        if self.count != 1:
            d["count"] = self.count
        for name in ("step", "transfer", "rank", "buf", "index"):
            if getattr(self, name) is not None:
                d[name] = getattr(self, name)
        if self.kind == WRONG_SLOT:
            d["expected"] = describe(self.expected)
            d["actual"] = describe(self.actual)
            d["last_write"] = (None if self.writer is None else
                               {"step": self.writer[0], "transfer": self.writer[1], "text": self.writer[2]})
            d["missing"] = [{"chunk": c, "ranks": describe((c, m))[0]["ranks"], "last_held_step": last}
                            for c, m, last in self.missing]
        return d

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class Hint:
    """Something suspicious that is not a violation: a dead write (a slot written, then overwritten by a
    copy before anything read it; a later step's copy, since a copy racing a write in its own step is a race).

    ``step``/``transfer`` name the dead write (the first of its step that took effect, when several
    reductions landed in the slot in one step), ``overwritten_by`` the copy that replaced it unread."""

    kind: str
    message: str
    step: int
    transfer: int
    rank: int
    buf: str
    index: int
    overwritten_by: tuple[int, int]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"kind": self.kind, "step": self.step, "transfer": self.transfer, "rank": self.rank,
                "buf": self.buf, "index": self.index,
                "overwritten_by": {"step": self.overwritten_by[0], "transfer": self.overwritten_by[1]},
                "message": self.message}

    def __str__(self) -> str:
        return self.message


def dead_write(step: int, transfer: int, text: str, rank: int, buf: str, index: int,
               by_step: int, by_transfer: int, by_text: str) -> Hint:
    """The hint for the write of step/transfer (``text``: its repr) to rank's buf[index], overwritten unread
    by the copy by_step/by_transfer (``by_text``)."""
    return Hint(DEAD_WRITE, f"step {step} transfer {transfer} ({text}): writes rank {rank} {buf}[{index}], which "
                f"step {by_step} transfer {by_transfer} ({by_text}) overwrites before anything reads it (a dead write)",
                step, transfer, rank, buf, index, (by_step, by_transfer))


def sort_hints(hints: list[Hint]) -> tuple[Hint, ...]:
    """Hints in program order of their dead writes, then by slot."""
    return tuple(sorted(hints, key=lambda h: (h.step, h.transfer, h.rank, h.buf, h.index)))


@dataclass(frozen=True)
class VerifyReport:
    """The outcome of ``verify``: ``ok`` when there is no violation."""

    schedule_name: str
    collective: str
    steps: int
    transfers: int
    violations: tuple[Violation, ...] = field(default_factory=tuple)
    hints: tuple[Hint, ...] = field(default_factory=tuple)
    """Dead writes (``Hint``): not violations, the schedule may still be correct."""
    hints_not_listed: int = 0
    """Hints beyond the compact verifier's limit (``sim.verify.fast``), counted but not listed."""

    @property
    def ok(self) -> bool:
        """True when the schedule meets its postcondition with no race, double count or bad read."""
        return not self.violations

    @property
    def title(self) -> str:
        """The schedule's name and collective, e.g. ``binomial (broadcast p=4 C=1 root=2)``."""
        return schedule_title(self.schedule_name, self.collective)

    @property
    def summary(self) -> dict[str, int]:
        """Violations by kind, most frequent first (unlisted ones included), e.g. ``{"wrong_slot": 12, "race": 3}``."""
        counts: dict[str, int] = {}
        for v in self.violations:
            counts[v.kind] = counts.get(v.kind, 0) + v.count
        return dict(sorted(counts.items(), key=lambda kv: -kv[1]))  # stable: ties in order of first appearance

    def text(self, limit: int | None = None, *, see_all: str = "") -> str:
        """``str(report)``: the head line, the hints (dead writes: often the cause, so first), then the
        violations, at most ``limit`` of each (None: all), then the summary by kind. ``see_all`` says how to
        list the rest (``"--max-violations 0 for all"``), in brackets after ``... and K more``."""
        n = sum(v.count for v in self.violations)
        how = f" ({see_all})" if see_all else ""
        lines = [f"{self.title}: {self.steps} steps, {self.transfers} transfers: "
                 + ("OK" if self.ok else f"{n} violation(s)")]
        lines += [f"  hint: {h}" for h in self.hints[:limit]]
        more_hints = self.hints_not_listed + (len(self.hints) - limit if limit is not None and len(self.hints) > limit
                                              else 0)
        if more_hints:
            shown_by = how if self.hints_not_listed == 0 else ""  # the compact verifier's are not kept at all
            lines.append(f"  hint: {more_hints} more dead write(s) not listed{shown_by}")
        lines += [f"  {v}" for v in self.violations[:limit]]
        if limit is not None and len(self.violations) > limit:
            lines.append(f"  ... and {len(self.violations) - limit} more{how}")
        if not self.ok:
            lines.append("  summary: " + ", ".join(f"{c} {k}" for k, c in self.summary.items()))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """``{"ok", "violations", "transfers", "steps"}`` as the CLI prints it; ``"hints"`` (``Hint.to_dict``)
        when there are any, and ``"hints_not_listed"`` when the compact verifier listed only some."""
        d: dict[str, Any] = {"ok": self.ok, "violations": [v.to_dict() for v in self.violations],
                             "transfers": self.transfers, "steps": self.steps}
        if not self.ok:
            d["summary"] = self.summary
        if self.hints or self.hints_not_listed:
            d["hints"] = [h.to_dict() for h in self.hints]
        if self.hints_not_listed:
            d["hints_not_listed"] = self.hints_not_listed
        return d

    def __str__(self) -> str:
        return self.text()


def schedule_title(name: str, collective: str) -> str:
    """How reports name a schedule: its name and its collective's ``describe()``, ``ring (allreduce p=8 C=8)``."""
    return f"{name} ({collective})"


