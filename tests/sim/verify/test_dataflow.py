"""The dataflow graph: hand-derived dependencies, and any consistent order agrees with lockstep."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from algorithms import Buf, Collective, Kind, Op, Schedule, Step, Transfer, build
from sim.verify import strategies as cst
from sim.verify.dataflow import dataflow_graph, differences, execute_in_order


def test_ring_allreduce_p3_dependencies_by_hand() -> None:
    g = dataflow_graph(build("allreduce", "ring", 3))
    # Transfers 0-2: step 0 (r -> r+1 reduce chunk r); 3-5: step 1 (chunk r-1).
    assert g.deps[:3] == ((), (), ())
    # Step 1, rank 0 sends chunk 2, which rank 2 reduced into rank 0 in step 0 (transfer 2: RAW).
    assert g.deps[3] == (2,)
    # Step 2 (all-gather), rank 0 sends chunk 1: rank 2 completed it on rank 0 in step 1
    # (transfer 5: RAW), and it overwrites rank 1's chunk 1, which rank 1 sent in step 0
    # (transfer 1: WAR).
    assert g.deps[6] == (1, 5)
    assert g.write_after == ((),) * 12
    assert g.to_networkx().number_of_edges() == sum(len(d) for d in g.deps)


def test_a_swap_needs_read_before_write_within_its_step() -> None:
    coll = Collective(Kind.ALLREDUCE, 2, 1)
    s = Schedule(coll, "exchange", (Step((Transfer(0, 1, op=Op.REDUCE), Transfer(1, 0, op=Op.REDUCE))),))
    g = dataflow_graph(s)
    assert g.deps == ((), ()) and g.write_after == ((1,), (0,))

    def eager(items: list[int]) -> int:
        # Ends before starts whenever possible: the most hostile legal order.
        return min(range(len(items)), key=lambda i: items[i])

    assert differences(s, eager) == []
    # Without write_after the same hostile order reads a value already written: prove the relation matters.
    unsafe = type(g)(g.steps, g.transfers, g.deps, ((), ()))
    state = execute_in_order(s, unsafe, eager)
    assert state[0] != state[1]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cst.schedules(max_ranks=12, max_chunks=3), cst.dataflow_orders())
def test_any_dataflow_order_gives_the_lockstep_result(schedule: Schedule, choose) -> None:  # type: ignore[no-untyped-def]
    assert differences(schedule, choose) == []


def test_scratch_and_output_slots_are_tracked() -> None:
    coll = Collective(Kind.ALLGATHER, 2, 1)
    steps = (
        Step((Transfer(0, 1, Buf.INPUT, 0, Buf.SCRATCH, 0), Transfer(1, 1, Buf.INPUT, 0, Buf.OUTPUT, 1))),
        Step((Transfer(1, 1, Buf.SCRATCH, 0, Buf.OUTPUT, 0),)),
    )
    g = dataflow_graph(Schedule(coll, "via-scratch", steps, scratch_chunks=1))
    assert g.deps == ((), (), (0,))
