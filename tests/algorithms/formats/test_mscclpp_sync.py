"""Verification of MSCCL++ plans' synchronisation (``sim.verify.plan``): deadlocks named by the ops of their
cycle, races named by both ops, and mutation testing of the plans MSCCL++ itself wrote: every mutant whose
outcome changes (a dropped signal, a wrong peer, a wrong offset, a missing barrier) is caught, by its op.

References, none of them the code under test: ``sim.verify.plan_machine``, an adversarial executor of the raw
plan JSON (it decides whether a mutant's outcome changed), and plans written out by hand below.
"""

from __future__ import annotations

from typing import Any

import pytest

from algorithms.formats.mscclpp import read_plan
from sim.verify.plan import verify_plan
from sim.verify.plan_machine import outcome_changed
from sim.verify.plan_mutation import MUTATIONS, mutants, mutation_test
from tests.algorithms.formats.mscclpp_corpus import COLLECTIVES, UNITS, load

BIG = {"alltoall_ring_4gpu.json", "alltoall_ring_oop_4gpu.json", "alltoall_ring_peers_4gpu.json"}
SHARED = [n for n in COLLECTIVES + UNITS if n != "unit_switch_reduce_test.json"]


def _wait_first(plan: dict[str, Any]) -> dict[str, Any]:
    """``allgather_2gpu`` with each gpu waiting for the other before it signals: neither ever signals."""
    for g in plan["gpus"]:
        ops = g["threadblocks"][0]["ops"]
        signal = next(i for i, op in enumerate(ops) if op["name"] == "signal")
        ops[signal], ops[signal + 1] = ops[signal + 1], ops[signal]
    return plan


def test_a_cycle_of_waits_is_a_deadlock_named_by_its_ops() -> None:
    got = read_plan(_wait_first(load("allgather_2gpu.json")))
    assert got.schedule is None
    (problem,) = [p for p in got.problems if p.kind == "deadlock"]
    assert "a cycle: gpu 0 threadblock 0 op 7 (wait) waits for a signal from gpu 1 over memory channel 0, which " \
           "gpu 1 threadblock 0 op 7 (wait) waits for a signal from gpu 0 over memory channel 0" in problem.message
    assert set(problem.ops) == {"gpu 0 threadblock 0 op 7", "gpu 1 threadblock 0 op 7"}
    assert outcome_changed(_wait_first(load("allgather_2gpu.json")), seeds=2) is not None


def test_a_remote_read_no_signal_orders_after_its_write_is_a_race() -> None:
    plan = load("allreduce_allpairs_rres_2gpu.json")
    ops = plan["gpus"][1]["threadblocks"][0]["ops"]
    ops[3]["name"] = "rlxsignal"  # gpu 1 no longer waits for gpu 0's handshake before its rres reads gpu 0
    del ops[1:4]
    report = verify_plan(plan)
    assert not report.ok
    assert any(f.kind == "race" and "gpu 1 threadblock 0 op 2" in f.ops for f in report.findings), report.text()


def test_the_one_plan_of_each_mutation_is_caught_and_named() -> None:
    plan = load("mn_allgather_2x2.json")
    seen = set()
    for m in mutants(plan):
        if m.kind in seen or outcome_changed(m.plan, seeds=4) is None:  # the first of each kind that matters
            continue
        report = verify_plan(m.plan)
        assert not report.ok, (m.kind, m.description)
        assert report.ops & m.blame, (m.kind, m.description, report.text())
        seen.add(m.kind)
    assert seen == set(MUTATIONS)


@pytest.mark.parametrize("name", [n for n in SHARED if n not in BIG])
def test_mutants_of_the_shared_plans_are_caught_and_named(name: str) -> None:
    report = mutation_test(load(name), sample=6, seeds=4)
    assert report.survivors == [], [(r.mutant.op, r.mutant.description, r.changed) for r in report.survivors]
    assert report.kill_rate == 1.0
    assert report.unnamed == [], [(r.mutant.op, r.mutant.description, r.message) for r in report.unnamed]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BIG))
def test_mutants_of_the_largest_plans_are_caught_and_named(name: str) -> None:
    report = mutation_test(load(name), sample=2, seeds=2)
    assert report.survivors == [] and report.unnamed == []
