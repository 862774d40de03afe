"""The vectorised engine (sim.fastengine): its dependency arrays against sim.dataflow, its times against simpy.

The reference for the dependencies is ``sim.dataflow.dataflow_graph`` (sets
built slot by slot); for the times it is the simpy engine (``sim.engine``),
which shares the model but none of the bookkeeping.
"""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from algorithms.ir import Schedule
from sim import strategies as cst
from sim.dataflow import dataflow_graph
from sim.fastengine import dataflow_arrays
from sim.mutate import mutate

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
    # Each edge may be listed more than once (waited for and released as often); the sets must match.
    deps_of: list[set[int]] = [set() for _ in range(n)]
    for u in range(n):
        for t in dependents[dptr[u]:dptr[u + 1]].tolist():
            deps_of[t].add(u)
    assert deps_of == [set(d) for d in g.deps]
    assert waiting.tolist() == [sum(1 for u in range(n) for t in dependents[dptr[u]:dptr[u + 1]].tolist() if t == v)
                                for v in range(n)]
    after: list[Counter[int]] = [Counter() for _ in range(n)]
    for r in range(n):
        for w in waiters[wptr[r]:wptr[r + 1]].tolist():
            after[w][r] += 1
    assert after == [Counter(w) for w in g.write_after]
    assert readers_left.tolist() == [len(w) for w in g.write_after]
