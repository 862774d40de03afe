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
