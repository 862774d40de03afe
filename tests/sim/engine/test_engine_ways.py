"""Ways (``Schedule.ways``): a transfer may take another of the tied shortest routes (docs/design.md, "Topologies
and routing"), and both engines route it so.

References: on ``ring:4`` two transfers from 0 to 2 (half way round, both ways shortest), timed by hand: on two
ways each has a route of its own (2α + b/B), on one way they share it (2α + 2b/B); the routes themselves (way 1
goes round the other way, way 2 is way 0 again, explicit routes and direct links have no other way); the torus's
closed-form router against the trees by way; the simpy engine against the fast one on random schedules with
random ways; what does not carry ways (switch operations, symmetric forms) says so.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from algorithms import registry
from algorithms.builder import ScheduleBuilder
from algorithms.ir import Buf, Collective, Kind, Op, Schedule, Transfer
from sim.engine.options import SimulationError
from sim.engine.reference import simulate
from sim.engine.symmetric import check_form
from sim.topology import Topology, from_spec, ring
from sim.topology import torus_routes as routing
from sim.verify import strategies as cst

B, ALPHA, SIZE = 1e9, 1e-6, 2e6  # the ring's links (bytes/s, s per hop) and the message sizes (two chunks)


def _two_halves(ways: tuple[int, int]) -> Schedule:
    """Rank 0 adds both its chunks into rank 2's, half way round ring:4, on ``ways``."""
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, 4, 2), "two halves")
    with b.step():
        for c, w in enumerate(ways):
            b.add(Transfer(0, 2, Buf.INPUT, c, Buf.INPUT, c, 1, Op.REDUCE), way=w)
    return b.build()


@pytest.mark.parametrize("engine", ["fast", "simpy"])
@pytest.mark.parametrize("mode, in_flight", [("lockstep", 1), ("dataflow", 0), ("dataflow", 1)])
def test_two_ways_round_a_ring_by_hand(engine: str, mode: str, in_flight: int) -> None:
    topo = ring(4, bandwidth=B, latency=ALPHA)
    b = SIZE / 2 / B
    split = simulate(_two_halves((0, 1)), topo, SIZE, mode=mode, in_flight=in_flight, engine=engine)
    shared = simulate(_two_halves((0, 0)), topo, SIZE, mode=mode, in_flight=in_flight, engine=engine)
    assert split.time == pytest.approx(2 * ALPHA + b, rel=1e-12)
    assert shared.time == pytest.approx(2 * ALPHA + 2 * b, rel=1e-12)
    assert set(split.link_busy) == {(0, 1), (1, 2), (0, 3), (3, 2)}
    assert len(shared.link_busy) == 2


@pytest.mark.parametrize("engine", ["fast", "simpy"])
def test_a_way_queues_on_its_own_ports(engine: str) -> None:
    """Send order (in_flight 1): 0 -> 2 on way 1, then 0 -> 2 on way 0 in the next step, other chunks. Each leaves
    by its own route's first link, so the second need not wait for the first to land: 2α + b/B in all; one port
    would make it 2(2α + b/B)."""
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, 4, 2), "two steps")
    for c, w in enumerate((1, 0)):
        with b.step():
            b.add(Transfer(0, 2, Buf.INPUT, c, Buf.INPUT, c, 1, Op.REDUCE), way=w)
    r = simulate(b.build(), ring(4, bandwidth=B, latency=ALPHA), SIZE, in_flight=1, engine=engine)
    assert r.time == pytest.approx(2 * ALPHA + SIZE / 2 / B, rel=1e-12)


def test_routes_by_way() -> None:
    topo = ring(4)
    assert topo.route(0, 2) == (0, 1, 2)
    assert topo.route(0, 2, way=1) == (0, 3, 2)
    assert topo.route(0, 2, way=2) == topo.route(0, 2)  # two ways there: w counts round them
    assert topo.route(0, 1, way=1) == (0, 1)  # the direct link is the only shortest route
    assert topo.route_links(0, 2, way=1) == topo.route_links_many([(0, 2)], way=1)[(0, 2)]
    assert topo.route_links_ways([(0, 2, 0), (0, 2, 1)]) == {(0, 2, 0): topo.route_links(0, 2),
                                                             (0, 2, 1): topo.route_links(0, 2, way=1)}
    pinned = Topology(topo.graph, "pinned", {(0, 2): (0, 1, 2)})
    assert pinned.route(0, 2, way=1) == (0, 1, 2)  # an explicit route has no other way


@pytest.mark.parametrize("dims", ["4x4", "8x4", "4x4x4", "6x3", "2x4"])
@pytest.mark.parametrize("way", [1, 2, 3])
def test_torus_closed_form_takes_the_trees_way(dims: str, way: int) -> None:
    topo = from_spec(f"torus:{dims}")
    pairs = [(a, b) for a in range(topo.ranks) for b in range(topo.ranks)]
    walked = routing.torus_route_links(topo, pairs, way=way)
    plain = Topology(topo.graph, "not a torus")
    assert walked == plain.route_links_many(pairs, way=way)
    if dims != "6x3":
        assert walked != plain.route_links_many(pairs)  # some pair has a tie there: the way changes its route


def _with_ways(schedule: Schedule, ways: list[int]) -> Schedule:
    return Schedule.from_columns(schedule.collective, schedule.name, schedule.columns(), schedule.scratch_chunks,
                                 switch_ops=schedule.switch_ops, ways=ways)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schedule=cst.schedules(max_ranks=6, max_chunks=2), data=st.data())
def test_engines_agree_on_ways(schedule: Schedule, data: st.DataObject) -> None:
    assume(not schedule.switch_ops and schedule.ranks >= 2)
    p = schedule.ranks
    # A ring by the trees, or by the torus's closed form (torus:px1): ties half way round when p is even.
    topo = data.draw(st.sampled_from([ring(p, bandwidth=10.0, latency=1.0),
                                      from_spec(f"torus:{p}x1", bandwidth=10.0, latency=1.0)]))
    ways = data.draw(st.lists(st.integers(0, 3), min_size=schedule.num_transfers, max_size=schedule.num_transfers))
    hinted = _with_ways(schedule, ways)
    mode = data.draw(st.sampled_from(["dataflow", "lockstep"]))
    in_flight = data.draw(st.sampled_from([0, 1, 2]))
    fast = simulate(hinted, topo, 1000.0, mode=mode, in_flight=in_flight, overhead=0.5, engine="fast")
    ref = simulate(hinted, topo, 1000.0, mode=mode, in_flight=in_flight, overhead=0.5, engine="simpy")
    for a, b in ((fast.start, ref.start), (fast.end, ref.end)):
        assert np.allclose(a, b, rtol=1e-9, atol=1e-12, equal_nan=True)
    assert fast.link_busy.keys() == ref.link_busy.keys()
    assert all(math.isclose(fast.link_busy[k], ref.link_busy[k], rel_tol=1e-9) for k in ref.link_busy)


def test_switch_operations_refuse_ways() -> None:
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, 2, 1), "switched", scratch_chunks=1)
    with b.step():
        b.switch_reduce("sw", [0, 1], [0, 1], 0)
        b.add(Transfer(0, 1, Buf.SCRATCH, 0, Buf.SCRATCH, 0, 1, Op.COPY), way=1)
    with pytest.raises(SimulationError, match="ways"):
        simulate(b.build(), from_spec("switch:2"), 1e3)


def test_a_symmetric_form_does_not_carry_ways() -> None:
    alg = registry.get("allreduce", "torus_bucket")
    form = alg.symmetric_form(16, dims="4x4")
    assert form is not None
    whole = form.build()
    assert check_form(form, whole) == []
    hinted = _with_ways(whole, [1] * whole.num_transfers)
    assert any("ways" in problem for problem in check_form(form, hinted))
