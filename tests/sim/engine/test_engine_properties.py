"""Property tests: random connected networks, random timings and random registered algorithms
never break the postcondition, and the engine's timings obey the model's invariants."""

from __future__ import annotations

import itertools
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from algorithms import registry
from algorithms.ir import Schedule
from sim.engine.reference import Faults, simulate
from sim.topology.strategies import topologies
from sim.verify import strategies as cst
from sim.verify.dataflow import dataflow_graph


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), schedule=cst.schedules(max_ranks=9, max_chunks=3),
       mode=st.sampled_from(["dataflow", "lockstep"]))
def test_random_networks_never_break_the_postcondition(data: st.DataObject, schedule: Schedule, mode: str) -> None:
    topo = data.draw(topologies(schedule.ranks))
    size = data.draw(st.sampled_from([0.0, 1.0, 1000.0, 2.0**20, 3e8]))
    faults = Faults(stragglers={data.draw(st.integers(0, schedule.ranks - 1)): data.draw(st.floats(0, 1e-4))})
    r = simulate(schedule, topo, size, mode=mode, faults=faults,
                 overhead=data.draw(st.sampled_from([0.0, 1e-6])),
                 reduce_bandwidth=data.draw(st.sampled_from([None, 1e10])))
    assert r.ok, [str(v) for v in r.violations]
    n = schedule.num_transfers
    assert len(r.start) == n and all(math.isfinite(x) for x in r.end)
    assert all(r.start[i] <= r.send_start[i] <= r.send_end[i] <= r.end[i] for i in range(n))
    assert r.time == (max(r.end) if n else 0.0)
    # A link that carried data was busy for a while, and never longer than the run.
    for busy in r.link_busy.values():
        assert 0 < busy <= r.time * (1 + 1e-9)
    if mode == "dataflow":
        g = dataflow_graph(schedule)
        for t in range(n):
            assert all(r.start[t] >= r.end[d] for d in g.deps[t])
            assert all(r.end[t] >= r.start[w] for w in g.write_after[t])


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_a_single_flow_costs_latency_plus_bytes_over_its_bottleneck(data: st.DataObject) -> None:
    # Binomial broadcast on 2 ranks is one message: its time is the route's latency plus
    # size over the route's narrowest link, whatever the network.
    topo = data.draw(topologies(2))
    size = data.draw(st.floats(1.0, 1e9))
    r = simulate(registry.build("broadcast", "binomial", 2), topo, size)
    path = topo.route(0, 1)
    links = list(itertools.pairwise(path))
    want = sum(topo.latency(u, v) for u, v in links) + size / min(topo.bandwidth(u, v) for u, v in links)
    assert math.isclose(r.time, want, rel_tol=1e-9)
