"""The verifier catches every mutation that changes a schedule's outcome."""

from __future__ import annotations

import random

import pytest

from algorithms import build, registry
from algorithms.ir import ROOTED_KINDS
from sim.verify import mutation
from sim.verify.verifier import VerifyReport, verify

ALGORITHMS = [(a.kind.value, a.name) for a in registry.algorithms()]


def _instances(kind: str, name: str) -> list:
    algo = registry.get(kind, name)
    out = []
    for p in (2, 3, 5, 8):
        if algo.unsupported(p) is None:
            root = p - 1 if algo.kind in ROOTED_KINDS else None
            params = {"chunks": 2} if any(x.name == "chunks" for x in algo.parameters) else {}
            out.append(algo.build(p, root=root, **params))
    return out


@pytest.mark.parametrize(("kind", "name"), ALGORITHMS)
def test_every_outcome_changing_mutant_is_killed(kind: str, name: str) -> None:
    for schedule in _instances(kind, name):
        report = mutation.kill_rate(schedule, samples=50, seed=schedule.ranks)
        assert report.changed > 0, "no mutant changed the outcome: the oracle is blind"
        assert report.rate == 1.0, report.survivors[:3]


def test_each_mutation_operator_runs_and_changes_something() -> None:
    s = build("allreduce", "ring", 4, chunks=2)
    rng = random.Random(1)
    for name in mutation.MUTATIONS:
        _, mutant = mutation.mutate(s, rng, name)
        assert mutant != s


def test_the_outcome_oracle_is_independent_of_the_verifier() -> None:
    s = build("allreduce", "ring", 4)
    assert not mutation.outcome_changed(s)
    steps = list(s.steps)
    del steps[2]  # drop a reduce-scatter step
    assert mutation.outcome_changed(type(s)(s.collective, s.name, tuple(steps)))


def test_a_weakened_verifier_lets_mutants_survive(monkeypatch: pytest.MonkeyPatch) -> None:
    # Prove the kill-rate check can fail: a verifier that ignores double counts and races.
    def lenient(schedule):  # type: ignore[no-untyped-def]
        report = verify(schedule)
        kept = tuple(v for v in report.violations if v.kind not in ("double_count", "race"))
        return VerifyReport(report.schedule_name, report.collective, report.steps, report.transfers, kept)

    monkeypatch.setattr(mutation, "verify", lenient)
    report = mutation.kill_rate(build("allreduce", "ring", 5), samples=200, seed=3)
    assert report.rate < 1.0
