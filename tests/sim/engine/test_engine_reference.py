"""The engine against an independent reference: a plain fluid simulation stepped event to event.

The reference below shares nothing with ``sim.engine.reference`` but the model: it
keeps every transfer's phase in a list, recomputes every rate from scratch
at every instant (max-min fair shares by textbook water-filling: raise every
unfrozen flow's rate by the same amount until a link is full, freeze the
flows on full links, repeat), and advances time to the next thing that
happens. It is slow (quadratic) and obviously right; the engines are fast.
Hypothesis checks that both engines agree with it on random networks,
algorithms, modes, sizes, overheads, stragglers, reduction costs and send orders (``in_flight``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from algorithms import registry
from algorithms.ir import Op, Schedule
from sim.engine.reference import Faults, chunk_bytes, simulate
from sim.topology import Topology, ring, single_switch
from sim.topology.strategies import topologies
from sim.verify import strategies as cst
from sim.verify.dataflow import dataflow_graph

WAITING, PRE, FLOW, POST, REDUCE, ARRIVED, DONE = range(7)


def reference(schedule: Schedule, topo: Topology, size: float, *, mode: str, overhead: float,
              reduce_bandwidth: float | None, stragglers: dict[int, float],
              in_flight: int = 0) -> tuple[list[float], list[float]]:
    """Start and end time of every transfer, in program order. ``in_flight`` > 0: dataflow's send order,
    read from the rules of ``sim.engine.ports``' docstring and checked by brute force over every message (which
    is delivered whole: its transfers leave the latency phase together, when the last has landed). A transfer
    takes the route of its way (``Schedule.ways``), and a message is one way's."""
    flat = [(si, t) for si, s in enumerate(schedule.steps) for t in s.transfers]
    n = len(flat)
    way = [0] * n if schedule.ways is None else [int(w) for w in schedule.ways]
    chunk = chunk_bytes(schedule.collective, size)
    g = dataflow_graph(schedule)
    # Send order: a message is (step, src, dst, way) of the remote transfers; its ports the first and last link.
    members: dict[tuple[int, int, int, int], list[int]] = {}
    for i, (si, t) in enumerate(flat):
        if t.src != t.dst:
            members.setdefault((si, t.src, t.dst, way[i]), []).append(i)
    port_of: dict[tuple[int, int, int, int], tuple[object, object]] = {}
    for key in members:
        path = list(itertools.pairwise(topo.route(key[1], key[2], way=key[3])))
        port_of[key] = (("send", path[0]), ("recv", path[-1]))
    steps_on: dict[object, list[int]] = {}
    for key, ps in port_of.items():
        for q in ps:
            steps_on.setdefault(q, []).append(key[0])
    batch = {q: sorted(set(v)) for q, v in steps_on.items()}

    def key_of(i: int) -> tuple[int, int, int, int]:
        return flat[i][0], flat[i][1].src, flat[i][1].dst, way[i]

    def queued(i: int) -> bool:
        return mode == "dataflow" and in_flight > 0 and flat[i][1].src != flat[i][1].dst

    def may_begin(key: tuple[int, int, int, int]) -> bool:
        """Rules 1-3: dependencies ended; each port's earlier batches started, those N back landed."""
        if not all(phase[i] == WAITING and all(phase[d] == DONE for d in g.deps[i]) for i in members[key]):
            return False
        for q in port_of[key]:
            j = batch[q].index(key[0])
            for other, ps in port_of.items():
                if q not in ps:
                    continue
                k = batch[q].index(other[0])
                if k < j and any(phase[i] == WAITING for i in members[other]):
                    return False
                if k <= j - in_flight and any(phase[i] in (WAITING, PRE, FLOW, POST) for i in members[other]):
                    return False
        return True
    phase = [WAITING] * n
    start = [math.nan] * n
    end = [math.nan] * n
    timer = [0.0] * n
    left = [0.0] * n
    links: list[tuple[object, ...]] = [()] * n
    now = 0.0
    step = 0

    def begin(i: int) -> None:
        t = flat[i][1]
        phase[i], start[i] = PRE, now
        delay = stragglers.get(t.src, 0.0) + (stragglers.get(t.dst, 0.0) if t.dst != t.src else 0.0)
        timer[i] = now + delay + (overhead if t.src != t.dst else 0.0)

    while True:
        changed = True
        while changed:  # every instantaneous transition at this instant
            changed = False
            while mode == "lockstep" and step < len(schedule.steps):
                members = [i for i in range(n) if flat[i][0] == step]
                if all(phase[i] == WAITING for i in members):
                    for i in members:
                        begin(i)
                    changed = True
                if not all(phase[i] == DONE for i in members):
                    break
                step += 1
            if mode == "dataflow" and in_flight:
                for key in members:
                    if may_begin(key):
                        for i in members[key]:
                            begin(i)
                        changed = True
            for i in range(n):
                _si, t = flat[i]
                b = t.count * chunk
                if (phase[i] == WAITING and mode == "dataflow" and all(phase[d] == DONE for d in g.deps[i])
                        and (not in_flight or t.src == t.dst)):
                    begin(i)
                    changed = True
                if phase[i] == PRE and timer[i] <= now:
                    if t.src != t.dst and b > 0:
                        path = topo.route(t.src, t.dst, way=way[i])
                        phase[i], left[i], links[i] = FLOW, b, tuple(itertools.pairwise(path))
                    else:
                        phase[i], left[i] = FLOW, 0.0
                    changed = True
                if phase[i] == FLOW and left[i] <= 1e-9 * max(b, 1.0):
                    lat = 0.0
                    if t.src != t.dst:
                        path = topo.route(t.src, t.dst, way=way[i])
                        lat = sum(topo.latency(u, v) for u, v in itertools.pairwise(path))
                    phase[i], timer[i], links[i] = POST, now + lat, ()
                    changed = True
                if phase[i] == POST and timer[i] <= now and (not queued(i) or all(  # a message is delivered whole
                        phase[j] in (REDUCE, ARRIVED, DONE) or (phase[j] == POST and timer[j] <= now)
                        for j in members[key_of(i)])):
                    if reduce_bandwidth is not None and t.op is Op.REDUCE and b > 0:
                        phase[i], left[i], links[i] = REDUCE, b, (("reducer", t.dst),)
                    else:
                        phase[i] = ARRIVED
                    changed = True
                if phase[i] == REDUCE and left[i] <= 1e-9 * max(b, 1.0):
                    phase[i], links[i] = ARRIVED, ()
                    changed = True
                if phase[i] == ARRIVED and (mode == "lockstep" or all(phase[r] != WAITING for r in g.write_after[i])):
                    phase[i], end[i] = DONE, now
                    changed = True
        if all(p == DONE for p in phase):
            return start, end
        load: dict[object, int] = {}
        for i in range(n):
            if phase[i] in (FLOW, REDUCE):
                for lk in links[i]:
                    load[lk] = load.get(lk, 0) + 1

        def capacity(lk: object) -> float:
            if isinstance(lk, tuple) and lk[0] == "reducer":
                assert reduce_bandwidth is not None
                return reduce_bandwidth
            assert isinstance(lk, tuple)
            return topo.bandwidth(lk[0], lk[1])

        rate = water_fill({i: links[i] for i in range(n) if phase[i] in (FLOW, REDUCE)}, capacity, n)
        nxt = math.inf
        for i in range(n):
            if phase[i] in (PRE, POST) and timer[i] > now:
                nxt = min(nxt, timer[i])
            if phase[i] in (FLOW, REDUCE) and rate[i] > 0:
                nxt = min(nxt, now + left[i] / rate[i])
        assert nxt < math.inf, "the reference is stuck"
        for i in range(n):
            if phase[i] in (FLOW, REDUCE):
                left[i] -= rate[i] * (nxt - now)
        now = nxt


def water_fill(routes: dict[int, tuple[object, ...]], capacity: Callable[[object], float], n: int) -> list[float]:
    """Max-min fair rates: every unfrozen flow's rate rises by the same step until some link is full;
    the flows crossing a full link freeze; repeat until all are frozen. Flows not in ``routes`` get 0."""
    rate = [0.0] * n
    frozen: set[int] = set()
    while len(frozen) < len(routes):
        live = [i for i in routes if i not in frozen]
        used = {lk: sum(rate[i] for i in routes if lk in routes[i]) for i in live for lk in routes[i]}
        users = {lk: sum(1 for i in live if lk in routes[i]) for lk in used}
        step = min((capacity(lk) - used[lk]) / users[lk] for lk in used)
        for i in live:
            rate[i] += step
        for lk in used:
            if sum(rate[i] for i in routes if lk in routes[i]) >= capacity(lk) * (1 - 1e-12):
                frozen.update(i for i in live if lk in routes[i])
    return rate


@st.composite
def cases(draw: st.DrawFn) -> tuple[Schedule, Topology]:
    schedule = draw(cst.schedules(max_ranks=6, max_chunks=2))
    p = schedule.ranks
    return schedule, draw(topologies(p, max_switches=2, min_bandwidth=1.0, max_bandwidth=100.0, max_latency=5.0))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(), data=st.data())
def test_engine_matches_the_reference(case: tuple[Schedule, Topology], data: st.DataObject) -> None:
    schedule, topo = case
    mode = data.draw(st.sampled_from(["dataflow", "lockstep"]))
    size = data.draw(st.sampled_from([0.0, 10.0, 1000.0]))
    overhead = data.draw(st.sampled_from([0.0, 0.5]))
    red = data.draw(st.sampled_from([None, 7.0]))
    slow = {data.draw(st.integers(0, schedule.ranks - 1)): data.draw(st.sampled_from([0.0, 3.0]))}
    in_flight = data.draw(st.sampled_from([0, 1, 2]))
    start, end = reference(schedule, topo, size, mode=mode, overhead=overhead, reduce_bandwidth=red,
                           stragglers=slow, in_flight=in_flight)
    for engine in ("simpy", "fast"):
        r = simulate(schedule, topo, size, mode=mode, overhead=overhead, reduce_bandwidth=red,
                     faults=Faults(stragglers=slow), engine=engine, in_flight=in_flight)
        for i in range(schedule.num_transfers):
            assert math.isclose(r.start[i], start[i], rel_tol=1e-7, abs_tol=1e-9), (engine, i, r.start[i], start[i])
            assert math.isclose(r.end[i], end[i], rel_tol=1e-7, abs_tol=1e-9), (engine, i, r.end[i], end[i])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schedule=cst.schedules(max_ranks=6, max_chunks=2), data=st.data())
def test_engine_takes_each_transfers_way(schedule: Schedule, data: st.DataObject) -> None:
    """Random ways (``Schedule.ways``) on a bidirectional ring, where half way round both ways are shortest."""
    assume(not schedule.switch_ops and schedule.ranks >= 2)
    ways = data.draw(st.lists(st.integers(0, 2), min_size=schedule.num_transfers, max_size=schedule.num_transfers))
    hinted = Schedule.from_columns(schedule.collective, schedule.name, schedule.columns(), schedule.scratch_chunks,
                                   ways=ways)
    topo = ring(schedule.ranks, bandwidth=10.0, latency=1.0)
    mode = data.draw(st.sampled_from(["dataflow", "lockstep"]))
    in_flight = data.draw(st.sampled_from([0, 1, 2]))
    start, end = reference(hinted, topo, 1000.0, mode=mode, overhead=0.5, reduce_bandwidth=None, stragglers={},
                           in_flight=in_flight)
    for engine in ("simpy", "fast"):
        r = simulate(hinted, topo, 1000.0, mode=mode, overhead=0.5, engine=engine, in_flight=in_flight)
        for i in range(hinted.num_transfers):
            assert math.isclose(r.start[i], start[i], rel_tol=1e-7, abs_tol=1e-9), (engine, i, r.start[i], start[i])
            assert math.isclose(r.end[i], end[i], rel_tol=1e-7, abs_tol=1e-9), (engine, i, r.end[i], end[i])


@pytest.mark.parametrize("kind, name, p", [("reducescatter", "recursive_halving", 5), ("allgather", "bruck", 6),
                                            ("gather", "binomial", 6), ("allreduce", "rabenseifner", 6),
                                            ("broadcast", "binomial", 5), ("alltoall", "pairwise", 4)])
@pytest.mark.parametrize("in_flight", [0, 1, 2])
def test_library_schedules_in_send_order_match_the_reference(kind: str, name: str, p: int, in_flight: int) -> None:
    """Messages of several transfers of unequal sizes (recursive halving's fold at p = 5, Bruck's wrapped
    blocks), trees and rounds, on a switch with reductions: each engine's every start and end is the
    reference's (a message delivered whole, its ports in order)."""
    schedule = registry.build(kind, name, p)
    topo = single_switch(p, bandwidth=10.0, latency=1.0)
    start, end = reference(schedule, topo, 1000.0, mode="dataflow", overhead=0.5, reduce_bandwidth=7.0,
                           stragglers={}, in_flight=in_flight)
    for engine in ("simpy", "fast"):
        r = simulate(schedule, topo, 1000.0, overhead=0.5, reduce_bandwidth=7.0, engine=engine, in_flight=in_flight)
        assert r.ok
        for i in range(schedule.num_transfers):
            assert math.isclose(r.start[i], start[i], rel_tol=1e-7, abs_tol=1e-9), (engine, i, r.start[i], start[i])
            assert math.isclose(r.end[i], end[i], rel_tol=1e-7, abs_tol=1e-9), (engine, i, r.end[i], end[i])
