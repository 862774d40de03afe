"""sim.bounds.flows: synthesized all-to-all(v) verifies, and simulates near the LP bound (the bound itself is
checked against brute force in test_lp.py); the flow decomposition on a hand-made flow; bad matrices."""

from __future__ import annotations

import itertools
import random

import networkx as nx
import numpy as np
import pytest

from algorithms import matrices
from algorithms.errors import CollschedError
from algorithms.ir import Kind
from sim.bounds.flows import decompose, synthesize_alltoall
from sim.bounds.lp import bound_traffic
from sim.engine.reference import simulate
from sim.topology import Topology, from_spec
from sim.verify.verifier import verify

GIB = 2**30


def random_seven() -> Topology:
    """Seven GPUs on a ring plus five random cables, each of 25, 50 or 100 GB/s (seeded): no builder makes it."""
    rng = random.Random(7)
    g = nx.DiGraph()
    cables = [(i, (i + 1) % 7) for i in range(7)] + [tuple(rng.sample(range(7), 2)) for _ in range(5)]
    for a, b in cables:
        bw = rng.choice([25e9, 50e9, 100e9])
        g.add_edge(a, b, bandwidth=bw, latency=1e-6)
        g.add_edge(b, a, bandwidth=bw, latency=1e-6)
    return Topology(g, "random7")


def efficiency(topo: Topology, matrix: object = None) -> float:
    s = synthesize_alltoall(topo, matrix=matrix)
    assert verify(s).ok
    r = simulate(s, topo, GIB, in_flight=0)  # synthesis's model: no send order
    assert r.ok
    return bound_traffic(topo, s.collective, GIB).efficiency(r.time)


@pytest.mark.parametrize("spec", ["ring:8", "fattree:4", "cluster:2x8", "dgx-h100:2"])
def test_alltoall_within_five_percent_of_the_lp(spec: str) -> None:
    assert efficiency(from_spec(spec)) >= 0.95


@pytest.mark.slow
def test_alltoall_on_a_torus_within_five_percent_of_the_lp() -> None:
    assert efficiency(from_spec("torus:4x4")) >= 0.95  # relays through the other minimal paths


def test_alltoall_on_a_random_heterogeneous_graph() -> None:
    assert efficiency(random_seven()) >= 0.95


@pytest.mark.parametrize("spec", ["ring:8", pytest.param("dgx-h100:2", marks=pytest.mark.slow)])
def test_zipf_alltoallv_within_ten_percent_of_the_lp(spec: str) -> None:
    topo = from_spec(spec)
    assert efficiency(topo, matrices.parse("zipf:1.2", topo.ranks)) >= 0.90


def test_direct_alone_is_far_from_the_bound_on_a_ring() -> None:
    # What the relays buy: every pair on its own route loads the ring's short way only.
    topo = from_spec("ring:8")
    s = synthesize_alltoall(topo, relays=False)
    r = simulate(s, topo, GIB, in_flight=0)  # synthesis's model: no send order
    assert bound_traffic(topo, s.collective, GIB).efficiency(r.time) < 0.92


def test_alltoallv_with_empty_ranks_and_zero_rows() -> None:
    m = [[0, 3, 0, 1], [0, 0, 0, 0], [5, 0, 2, 0], [0, 0, 0, 0]]
    s = synthesize_alltoall(from_spec("ring:4"), matrix=m)
    assert s.collective.kind is Kind.ALLTOALLV
    assert verify(s).ok


@pytest.mark.parametrize("matrix, message", [
    ([[0, 1], [1]], "row 1"),
    ([[0, 1], [-1, 0]], "row 1"),
    ([[0, 1, 1], [1, 0, 1], [1, 1, 0]], "3 rows"),
])
def test_a_bad_matrix_is_refused_naming_the_row(matrix: object, message: str) -> None:
    with pytest.raises(CollschedError, match=message):
        synthesize_alltoall(from_spec("ring:2"), matrix=matrix)


def test_decompose_a_flow_with_two_paths_and_a_cycle() -> None:
    # Source 0 sends 3 to rank 3: 2 over 0->1->3, 1 over 0->2->3; a cycle 1->2->1 of 0.5 rides along.
    f = np.zeros((4, 4))
    f[0, 1], f[1, 3], f[0, 2], f[2, 3] = 2.0, 2.0, 1.0, 1.0
    f[1, 2] += 0.5
    f[2, 1] += 0.5
    demand = np.array([0.0, 0.0, 0.0, 3.0])
    paths = decompose(f, 0, demand)[3]
    assert sum(a for _, a in paths) == pytest.approx(3.0)
    for path, _ in paths:
        assert path[0] == 0 and path[-1] == 3 and len(set(path)) == len(path)
    carried = np.zeros((4, 4))
    for path, a in paths:
        for u, v in itertools.pairwise(path):
            carried[u, v] += a
    assert (carried <= f + 1e-9).all()  # never more than the flow on any edge
