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


@pytest.mark.parametrize(("name", "p", "params"), [("rabenseifner_torus", 16, {"dims": "4x4", "chunks": 2}),
                                                   ("rabenseifner_torus", 64, {"dims": "4x4x4"}),
                                                   ("rabenseifner_torus", 12, {"ports": 2})])
@pytest.mark.parametrize("mode", ["dataflow", "lockstep"])
def test_runs_of_chunks_time_as_on_simpy(name: str, p: int, params: dict[str, Any], mode: str) -> None:
    """A halving in butterfly order moves runs of many chunks that overlap the next steps' runs in part: the
    fast engine keys them by segment (``segments``), simpy chunk by chunk; their times agree, transfer by
    transfer, with and without link sharing (one port a rank on the ring of 12)."""
    from algorithms import registry
    from sim.topology import from_spec

    s = registry.get("allreduce", name).build(p, **params)
    assert int(s.columns().count.max()) > 1
    spec = "torus:" + params["dims"] if "dims" in params else f"ring:{p}"
    topo = from_spec(spec, bandwidth=1e9, latency=1e-6)
    fast = simulate(s, topo, 1 << 20, mode=mode, overhead=1e-6, engine="fast")
    ref = simulate(s, topo, 1 << 20, mode=mode, overhead=1e-6, engine="simpy")
    assert fast.ok and ref.ok
    assert _close(fast.time, ref.time)
    assert np.allclose(fast.end, ref.end, rtol=REL, atol=0)


@pytest.mark.parametrize("engine", ["fast", "simpy"])
def test_a_run_waits_for_the_last_writer_of_every_chunk_in_it(engine: str) -> None:
    """Rank 0's two chunks are written by a neighbour (1 hop) and by rank 6 (2 hops, 1 us later); then rank 0
    sends both as one run of 2 chunks. In dataflow it starts when the later write has landed, worked out by hand:
    6->0 starts at 1 us (overhead), streams 1 KiB at 1 GB/s, lands after 2 hops of 1 us; the run then takes
    1 us + 2 KiB / 1 GB/s + 1 us. No link carries two flows, so the fast engine's closed form times it."""
    from algorithms.ir import Op
    from sim.topology import from_spec

    coll = Collective(Kind.ALLREDUCE, 8, 2)
    s = Schedule(coll, "two writers", (
        Step((Transfer(1, 0, Buf.INPUT, 0, Buf.INPUT, 0, 1, Op.REDUCE),
              Transfer(6, 0, Buf.INPUT, 1, Buf.INPUT, 1, 1, Op.REDUCE))),
        Step((Transfer(0, 1, Buf.INPUT, 0, Buf.INPUT, 0, 2, Op.REDUCE),))))
    topo = from_spec("ring:8", bandwidth=1e9, latency=1e-6)
    chunk = 1024.0
    r = simulate(s, topo, 2 * chunk, mode="dataflow", overhead=1e-6, engine=engine)
    landed = 1e-6 + chunk / 1e9 + 2e-6
    assert _close(float(r.start[2]), landed)
    assert _close(r.time, landed + 1e-6 + 2 * chunk / 1e9 + 1e-6)
