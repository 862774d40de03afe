"""The per-rank plans the runner executes (torch-free): what each rank enforces, stages and budgets."""

from __future__ import annotations

import pytest

from algorithms import registry
from algorithms.ir import Kind, Op, Schedule
from runners.execution.plan import Role, fingerprint, rank_plan
from sim.verify.dataflow import dataflow_graph
from tests.runners.runner_schedules import extra_schedules


def all_schedules(p: int) -> list[Schedule]:
    out = []
    for alg in registry.algorithms():
        params = {"chunks": 2} if any(prm.name == "chunks" for prm in alg.parameters) else {}
        if alg.unsupported(p, params) is None:
            out.append(alg.build(p, **params))
    return out + extra_schedules(p)


@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 8])
def test_every_dependency_is_observable_by_one_end_of_the_transfer(p: int) -> None:
    # The runner splits each transfer's dependencies between its two ends; that is only
    # complete if every dependency involves the source or the destination rank.
    for sched in all_schedules(p):
        g = dataflow_graph(sched)
        for t, deps in enumerate(g.deps):
            tr = g.transfers[t]
            for d in deps:
                dt = g.transfers[d]
                assert {dt.src, dt.dst} & {tr.src, tr.dst}, (sched.name, t, d)
        for t, readers in enumerate(g.write_after):
            assert all(g.transfers[r].src == g.transfers[t].dst for r in readers), (sched.name, t)


@pytest.mark.parametrize("p", [2, 3, 4, 8])
def test_plans_cover_every_transfer_exactly_once_per_end(p: int) -> None:
    for sched in all_schedules(p):
        plans = [rank_plan(sched, r) for r in range(p)]
        sends = sorted(it.tid for pl in plans for it in pl.items if it.role is Role.SEND)
        recvs = sorted(it.tid for pl in plans for it in pl.items if it.role is Role.RECV)
        local = sorted(it.tid for pl in plans for it in pl.items if it.role is Role.LOCAL)
        assert sends == recvs
        assert sorted(sends + local) == list(range(sched.num_transfers))


def test_ring_allreduce_stages_its_reduces_and_receives_its_copies_in_place() -> None:
    p, k = 4, 3
    sched = registry.get("allreduce", "ring").build(p, chunks=k)
    plan = rank_plan(sched, 1)
    recvs = [it for it in plan.items if it.role is Role.RECV]
    assert [it.staged for it in recvs] == [it.transfer.op is Op.REDUCE for it in recvs]
    assert sum(it.staged for it in recvs) == (p - 1) * k
    # Two steps of k staged one-chunk receives: the bound documented as 2·N/p for ring all-reduce.
    assert plan.budget_chunks == 2 * k
    assert not plan.writes_input or sched.collective.kind is Kind.ALLREDUCE


def test_a_same_slot_exchange_is_staged_and_a_local_swap_snapshotted() -> None:
    by_kind_name = {(s.collective.kind, s.name): s for s in extra_schedules(3)}
    rotate = rank_plan(by_kind_name[(Kind.ALLGATHER, "test-rotate")], 0)
    assert all(it.staged for it in rotate.items if it.role is Role.RECV)
    swap = rank_plan(by_kind_name[(Kind.ALLGATHER, "test-swap")], 0)
    assert any(it.staged for it in swap.items if it.role is Role.LOCAL)


def test_fingerprint_tells_schedules_apart() -> None:
    a = registry.get("allreduce", "ring").build(4)
    assert fingerprint(a) == fingerprint(registry.get("allreduce", "ring").build(4))
    assert fingerprint(a) != fingerprint(registry.get("allreduce", "ring").build(4, chunks=2))
