"""What verification reports: ``Violation`` (one thing wrong, located by step and transfer or by slot) and
``VerifyReport`` (every violation of one schedule), with their text and JSON forms.

Both verifiers (``sim.verify.verifier`` and ``sim.verify.fast``) build these, so they live below both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sim.verify.semantics import describe

__all__ = ["DOUBLE_COUNT", "RACE", "UNINITIALISED_READ", "WRONG_SLOT", "Violation", "VerifyReport"]

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
    writer: tuple[int, int, str] | None = None
    """Wrong slot: (step, transfer, text) of the transfer that last wrote it; None if nothing did."""
    missing: tuple[tuple[int, int, int | None], ...] = ()
    """Wrong slot: (chunk, rank mask, last step) per group of contributions it lacks; the last step
    after which some slot held them, -1 for only before step 0, None when never present."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; contributions as ``[{"chunk", "ranks"}]``."""
        d: dict[str, Any] = {"kind": self.kind, "message": self.message}
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


