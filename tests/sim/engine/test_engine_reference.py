"""The engine against an independent reference: a plain fluid simulation stepped event to event.

The reference below shares nothing with ``sim.engine.reference`` but the model: it
keeps every transfer's phase in a list, recomputes every rate from scratch
at every instant (max-min fair shares by textbook water-filling: raise every
unfrozen flow's rate by the same amount until a link is full, freeze the
flows on full links, repeat), and advances time to the next thing that
happens. It is slow (quadratic) and obviously right; the engines are fast.
Hypothesis checks that both engines agree with it on random networks,
algorithms, modes, sizes, overheads, stragglers and reduction costs.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from algorithms.ir import Op, Schedule
from sim.engine.reference import Faults, chunk_bytes, simulate
from sim.topology import Topology
from sim.topology.strategies import topologies
from sim.verify import strategies as cst
from sim.verify.dataflow import dataflow_graph

WAITING, PRE, FLOW, POST, REDUCE, ARRIVED, DONE = range(7)


def reference(schedule: Schedule, topo: Topology, size: float, *, mode: str, overhead: float,
              reduce_bandwidth: float | None, stragglers: dict[int, float]) -> tuple[list[float], list[float]]:
    """Start and end time of every transfer, in program order."""
    flat = [(si, t) for si, s in enumerate(schedule.steps) for t in s.transfers]
    n = len(flat)
    chunk = chunk_bytes(schedule.collective, size)
    g = dataflow_graph(schedule)
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
            for i in range(n):
                _si, t = flat[i]
                b = t.count * chunk
                if phase[i] == WAITING and mode == "dataflow" and all(phase[d] == DONE for d in g.deps[i]):
                    begin(i)
                    changed = True
                if phase[i] == PRE and timer[i] <= now:
                    if t.src != t.dst and b > 0:
                        path = topo.route(t.src, t.dst)
                        phase[i], left[i], links[i] = FLOW, b, tuple(itertools.pairwise(path))
                    else:
                        phase[i], left[i] = FLOW, 0.0
                    changed = True
                if phase[i] == FLOW and left[i] <= 1e-9 * max(b, 1.0):
                    lat = 0.0
                    if t.src != t.dst:
                        path = topo.route(t.src, t.dst)
                        lat = sum(topo.latency(u, v) for u, v in itertools.pairwise(path))
                    phase[i], timer[i], links[i] = POST, now + lat, ()
                    changed = True
                if phase[i] == POST and timer[i] <= now:
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
    start, end = reference(schedule, topo, size, mode=mode, overhead=overhead, reduce_bandwidth=red,
                           stragglers=slow)
    for engine in ("simpy", "fast"):
        r = simulate(schedule, topo, size, mode=mode, overhead=overhead, reduce_bandwidth=red,
                     faults=Faults(stragglers=slow), engine=engine)
        for i in range(schedule.num_transfers):
            assert math.isclose(r.start[i], start[i], rel_tol=1e-7, abs_tol=1e-9), (engine, i, r.start[i], start[i])
            assert math.isclose(r.end[i], end[i], rel_tol=1e-7, abs_tol=1e-9), (engine, i, r.end[i], end[i])
