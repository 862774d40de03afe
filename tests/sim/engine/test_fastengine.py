"""The vectorised engine (sim.engine.fast): its dependency arrays against sim.verify.dataflow, its times against simpy.

The reference for the dependencies is ``sim.verify.dataflow.dataflow_graph`` (sets
built slot by slot); for the times it is the simpy engine (``sim.engine.reference``),
which shares the model but none of the bookkeeping.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from algorithms.ir import Buf, Collective, Kind, Schedule, Step, Transfer
from sim.engine.fast import dataflow_arrays, run_fast
from sim.engine.reference import EngineOptions, Faults, SimulationError, chunk_bytes, simulate
from sim.topology import TopologyError
from sim.topology.strategies import topologies
from sim.verify import strategies as cst
from sim.verify.dataflow import dataflow_graph
from sim.verify.mutation import mutate
from sim.verify.verifier import RACE, WRONG_SLOT, verify

SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def _mutant(s: Schedule, seed: int, mutated: bool) -> Schedule:
    if mutated and s.num_transfers:
        _name, m = mutate(s, random.Random(seed))
        if m is not None:
            return m
    return s


@SETTINGS
@given(cst.schedules(max_ranks=9, max_chunks=3), st.integers(0, 2**32), st.booleans())
def test_dependency_arrays_are_the_dataflow_graph(s: Schedule, seed: int, mutated: bool) -> None:
    s = _mutant(s, seed, mutated)
    g = dataflow_graph(s)
    waiting, (dptr, dependents), readers_left, (wptr, waiters) = dataflow_arrays(s)
    n = s.num_transfers
    nodes = len(waiting)
    # Each edge may be listed more than once (waited for and released as often); nodes from n on are joins,
    # which stand for everything they wait for: the transfers reached through them must be the deps.
    waits_for: list[list[int]] = [[] for _ in range(nodes)]
    for u in range(nodes):
        for t in dependents[dptr[u]:dptr[u + 1]].tolist():
            waits_for[t].append(u)
    assert waiting.tolist() == [len(w) for w in waits_for]

    def real(u: int) -> set[int]:
        return {u} if u < n else set().union(*(real(v) for v in waits_for[u]))

    assert [set().union(*(real(u) for u in waits_for[t])) for t in range(n)] == [set(d) for d in g.deps]
    assert all(waits_for[j] for j in range(n, nodes))  # a join waits for something
    after: list[Counter[int]] = [Counter() for _ in range(n)]
    for r in range(n):
        for w in waiters[wptr[r]:wptr[r + 1]].tolist():
            after[w][r] += 1
    assert after == [Counter(w) for w in g.write_after]
    assert readers_left.tolist() == [len(w) for w in g.write_after]


REL = 1e-9


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= REL * max(abs(a), abs(b))


@pytest.mark.slow  # 10 s: off the quick loop
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.data())
def test_fast_and_simpy_engines_give_the_same_times_and_verdict(data: st.DataObject) -> None:
    s = _mutant(data.draw(cst.schedules(max_ranks=8, max_chunks=3)), data.draw(st.integers(0, 2**32)),
                data.draw(st.booleans()))
    # With two writes to one slot in a step, which lands last is simpy's event order (auto runs simpy then).
    assume(not any(v.kind == RACE for v in verify(s).violations))
    p = s.ranks
    topo = data.draw(topologies(p, max_switches=2))
    links = list(topo.links)
    down: tuple[Any, ...] = ()
    degraded: dict[Any, float] = {}
    if links:
        down = tuple(data.draw(st.lists(st.sampled_from(links), max_size=1)))
        degraded = {lk: data.draw(st.sampled_from([0.25, 0.5]))
                    for lk in data.draw(st.lists(st.sampled_from(links), max_size=2))}
    stragglers = data.draw(st.dictionaries(st.integers(0, p - 1), st.sampled_from([0.0, 1e-6, 5e-5]), max_size=2))
    faults = Faults(down=down, degraded=degraded, stragglers=stragglers)
    try:
        applied = faults.apply(topo)
    except TopologyError:
        assume(False)  # the cable taken down cut a rank off
        raise
    mode = data.draw(st.sampled_from(["lockstep", "dataflow"]))
    overhead = data.draw(st.sampled_from([0.0, 1e-6]))
    reduce_bandwidth = data.draw(st.sampled_from([None, 1e9, 3e10]))
    size = data.draw(st.sampled_from([0, 1, 1000, 2**20, 3.5e6]))
    kw: dict[str, Any] = {"mode": mode, "overhead": overhead, "reduce_bandwidth": reduce_bandwidth,
                          "faults": faults}
    ref = simulate(s, topo, size, engine="simpy", **kw)
    fast = simulate(s, topo, size, engine="fast", **kw)
    assert (ref.engine, fast.engine) == ("simpy", "fast")
    assert _close(ref.time, fast.time), (ref.time, fast.time)
    assert ref.ok == fast.ok
    # The same kinds of violation; which slots end wrong may differ only after a double count, whose
    # skipped write depends on the order the step's reductions land in.
    assert {v.kind for v in ref.violations} - {WRONG_SLOT} == {v.kind for v in fast.violations} - {WRONG_SLOT}
    # The event loop too, on runs the closed form would have answered.
    loop = run_fast(s, applied, size, EngineOptions(**kw), chunk_bytes(s.collective, size), closed_form=False)
    for got in ({name: getattr(fast, name) for name in ("start", "send_start", "send_end", "end", "link_busy")},
                loop):
        for name in ("start", "send_start", "send_end", "end"):
            assert np.allclose(getattr(ref, name), got[name], rtol=REL, atol=0, equal_nan=True), name
        assert set(got["link_busy"]) == set(ref.link_busy)
        assert all(_close(b, ref.link_busy[k]) for k, b in got["link_busy"].items())


def test_auto_takes_fast_unless_only_simpy_is_exact() -> None:
    from algorithms import registry
    from sim import topology as T

    s = registry.build("allreduce", "ring", 4)
    topo = T.ring(4)
    assert simulate(s, topo, 2**20).engine == "fast"
    assert simulate(s, topo, 2**20, message_cpu=1e-6).engine == "simpy"
    with pytest.raises(SimulationError, match="engine fast does not model message_cpu"):
        simulate(s, topo, 2**20, message_cpu=1e-6, engine="fast")
    with pytest.raises(SimulationError, match="engine: must be one of auto, simpy, fast"):
        simulate(s, topo, 2**20, engine="quick")
    # A race: two copies into one slot in a step; auto leaves it to simpy, whose event order decides.
    coll = Collective(Kind.ALLGATHER, 2, 1)
    racy = Schedule(coll, "race", (Step((Transfer(0, 1, Buf.INPUT, 0, Buf.OUTPUT, 0),
                                         Transfer(1, 1, Buf.INPUT, 0, Buf.OUTPUT, 0))),))
    assert simulate(racy, T.ring(2), 2.0).engine == "simpy"
    assert simulate(racy, T.ring(2), 2.0, engine="fast").engine == "fast"
