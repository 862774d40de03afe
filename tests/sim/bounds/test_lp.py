"""sim.bounds.lp: the max-concurrent-flow bound against closed forms by hand, against a path LP written here
over every simple path (brute force), and never below the cut bound."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

from sim.bounds.cuts import BoundError, bound, routed_part
from sim.bounds.lp import bound_alltoall, routed_flow, uniform_matrix
from sim.topology import Topology, ring, single_switch, torus
from sim.topology.strategies import topologies

B = 50e9
M = 2**30


def path_lp(topology: Topology, matrix: np.ndarray) -> float:
    """min t over flows split among every simple path of every pair (one variable per path), dense: an
    independent formulation of the same bound, on the links that carry a route."""
    g = routed_part(topology).graph
    links = list(g.edges)
    row = {e: k for k, e in enumerate(links)}
    columns: list[list[int]] = []
    owner: list[int] = []
    pairs = [(i, j) for i in range(topology.ranks) for j in range(topology.ranks) if matrix[i, j] > 0]
    for k, (i, j) in enumerate(pairs):
        for path in nx.all_simple_paths(g, i, j):
            columns.append([row[(path[a], path[a + 1])] for a in range(len(path) - 1)])
            owner.append(k)
    nv = len(columns) + 1
    a_ub = np.zeros((len(links), nv))
    for c, used in enumerate(columns):
        for e in used:
            a_ub[e, c] += 1.0
    bw = np.array([g.edges[e]["bandwidth"] for e in links])
    a_ub[:, -1] = -bw / bw.max()
    a_eq = np.zeros((len(pairs), nv))
    for c, k in enumerate(owner):
        a_eq[k, c] = 1.0
    demand = np.array([matrix[i, j] for i, j in pairs])
    scale = demand.max()
    cost = np.zeros(nv)
    cost[-1] = 1.0
    res = linprog(cost, A_ub=a_ub, b_ub=np.zeros(len(links)), A_eq=a_eq, b_eq=demand / scale, method="highs")
    assert res.status == 0
    return float(res.x[-1]) * scale / bw.max()


# -- closed forms by hand --------------------------------------------------------------------------------

def test_ring_of_four_by_hand() -> None:
    # Every rank sends M/4 to each of three others: two at one hop, one at two hops (either way round).
    # Byte-hops: 4 sources x (1 + 1 + 2) x M/4 = 4M over 8 links of B: M/2 per link.
    b = bound_alltoall(ring(4, bandwidth=B, latency=0.0), uniform_matrix(4, M))
    assert b.throughput_s == pytest.approx(M / 2 / B, rel=1e-7)


def test_ring_of_eight_by_hand() -> None:
    # Distances 1,1,2,2,3,3,4 from each rank: 16 hops of M/8 per source, 8 sources, 16 links: M per link.
    b = bound_alltoall(ring(8, bandwidth=B, latency=0.0), uniform_matrix(8, M))
    assert b.throughput_s == pytest.approx(M / B, rel=1e-7)
    assert b.throughput_s > bound("alltoall", ring(8, bandwidth=B, latency=0.0), M).bandwidth_s * 2  # cut is weak


def test_star_by_hand() -> None:
    # A single switch: every rank's own link up carries its (p-1)/p·M, and nothing can go around it.
    p = 5
    b = bound_alltoall(single_switch(p, bandwidth=B, latency=0.0), uniform_matrix(p, M))
    assert b.throughput_s == pytest.approx((p - 1) / p * M / B, rel=1e-7)


def test_one_hot_destination_by_hand() -> None:
    # On a switch every byte to rank 0 enters over its one link in: the bound is their sum over B.
    t = np.zeros((4, 4))
    t[1:, 0] = [1e6, 2e6, 3e6]
    b = bound_alltoall(single_switch(4, bandwidth=B, latency=0.0), t)
    assert b.throughput_s == pytest.approx(6e6 / B, rel=1e-7)
    assert [(n.src, n.dst) for n in b.bottlenecks] == [("switch", 0)]
    assert b.bottlenecks[0].share == pytest.approx(1.0)


def test_latency_term_is_the_farthest_pair_with_traffic() -> None:
    t = np.zeros((8, 8))
    t[0, 1] = 1.0  # one hop: 1 us
    b = bound_alltoall(ring(8, bandwidth=B, latency=1e-6), t)
    assert b.latency_s == pytest.approx(1e-6)
    t[0, 4] = 1.0  # four hops
    assert bound_alltoall(ring(8, bandwidth=B, latency=1e-6), t).latency_s == pytest.approx(4e-6)


def test_bottleneck_shares_sum_to_one_and_are_full() -> None:
    topo = torus(3, 3, bandwidth=B, latency=0.0)
    b = bound_alltoall(topo, uniform_matrix(9, M))
    assert sum(n.share for n in b.bottlenecks) == pytest.approx(1.0, rel=1e-6)
    for n in b.bottlenecks:  # a link with a positive dual is loaded to its capacity (complementary slackness)
        assert n.load_bytes == pytest.approx(topo.bandwidth(n.src, n.dst) * b.throughput_s, rel=1e-5)


@pytest.mark.parametrize("matrix, message", [
    (np.zeros((3, 4)), "3 rows"),
    (np.zeros((4, 3)), "row 0: 3 entries"),
    (np.array([[0, 1, 2, 3], [1, 0, -1, 1], [0] * 4, [0] * 4]), "matrix row 1: entry 2"),
    (np.array([[0, 1, 2, 3], [1, 0, 1, 1], [0, 0, np.nan, 0], [0] * 4]), "matrix row 2: entry 2"),
])
def test_a_bad_matrix_is_named_by_its_row(matrix: np.ndarray, message: str) -> None:
    with pytest.raises(BoundError, match=message):
        bound_alltoall(ring(4), matrix)


# -- brute force --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("topo", [ring(4, bandwidth=B), ring(5, bandwidth=B), single_switch(4, bandwidth=B),
                                  torus(2, 3, bandwidth=B)], ids=lambda t: t.name)
def test_uniform_against_the_path_lp(topo: Topology) -> None:
    m = uniform_matrix(topo.ranks, M)
    assert bound_alltoall(topo, m).throughput_s == pytest.approx(path_lp(topo, m), rel=1e-6)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_matrices_on_random_topologies_against_the_path_lp(data: st.DataObject) -> None:
    p = data.draw(st.integers(2, 4))
    topo = data.draw(topologies(p, max_switches=2))
    cells = data.draw(st.lists(st.integers(0, 5), min_size=p * p, max_size=p * p))
    m = np.array(cells, dtype=float).reshape(p, p) * 1e6
    np.fill_diagonal(m, 0.0)
    if not m.any():
        m[0, 1] = 1e6
    assert bound_alltoall(topo, m).throughput_s == pytest.approx(path_lp(topo, m), rel=1e-6)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_the_cut_bound_never_exceeds_the_lp(data: st.DataObject) -> None:
    topo = data.draw(topologies(data.draw(st.integers(2, 6)), max_switches=3))
    lp = bound_alltoall(topo, uniform_matrix(topo.ranks, M))
    cut = bound("alltoall", topo, M)
    assert cut.bandwidth_s <= lp.throughput_s * (1 + 1e-7)


def test_the_overlay_lp_is_no_lower_than_the_physical_one() -> None:
    # Relays through ranks only realise some of the physical paths: never better, equal on a ring.
    topo = ring(6, bandwidth=B)
    m = uniform_matrix(6, M)
    assert routed_flow(topo, m).time_s == pytest.approx(bound_alltoall(topo, m).throughput_s, rel=1e-6)
    assert routed_flow(topo, m, relays=False).time_s > routed_flow(topo, m).time_s * 1.05


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_the_matrix_cut_bound_never_exceeds_the_lp(data: st.DataObject) -> None:
    # sim.bounds.traffic's cut bound for an alltoallv's matrix is the fast lower bound of the same quantity.
    from algorithms.ir import Collective, Kind
    from sim.bounds.lp import bound_traffic
    from sim.bounds.traffic import matrix_bound

    p = data.draw(st.integers(2, 5))
    topo = data.draw(topologies(p, max_switches=2))
    cells = data.draw(st.lists(st.integers(0, 6), min_size=p * p, max_size=p * p))
    coll = Collective(Kind.ALLTOALLV, p, matrix=tuple(tuple(cells[i * p:(i + 1) * p]) for i in range(p)))
    assert matrix_bound(topo, coll, M).bandwidth_s <= bound_traffic(topo, coll, M).throughput_s * (1 + 1e-7)
