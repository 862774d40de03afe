"""sim.bounds.lp_symmetry: the all-to-all LP reduced to one commodity by a translation group gives the full
LP's optimum (p commodities, solved here too) and the hand answer; maps that are not a group of automorphisms,
or a matrix they do not leave alone, keep the full LP."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from algorithms import matrices
from sim.bounds import lp
from sim.bounds.lp_symmetry import link_orbits, regular_group
from sim.topology import Topology, from_spec, ring

B = 50e9
M = 2**30


def both(t: Topology, matrix: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> tuple[lp.AllToAllBound, lp.AllToAllBound]:
    """The bound with the reduction forced on (threshold 0), and with it off (the p-commodity LP)."""
    monkeypatch.setattr(lp, "SYMMETRIC_VARIABLES", 0)
    reduced = lp.bound_alltoall(t, matrix)
    monkeypatch.setattr(lp, "SYMMETRIC_VARIABLES", 10**12)
    return reduced, lp.bound_alltoall(t, matrix)


def test_ring_of_eight_reduced_is_the_hand_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    # Distances 1,1,2,2,3,3,4 from each rank: 16 hops of M/8 per source, 8 sources, 16 links: M per link.
    t = ring(8, bandwidth=B, latency=0.0)
    reduced, full = both(t, lp.uniform_matrix(8, M), monkeypatch)
    assert reduced.variables == 16 + 1  # one commodity over the 16 links
    assert reduced.throughput_s == pytest.approx(M / B, rel=1e-7)
    assert full.throughput_s == pytest.approx(M / B, rel=1e-7)


def test_torus_reduced_equals_the_full_lp_with_its_bottlenecks(monkeypatch: pytest.MonkeyPatch) -> None:
    t = from_spec("torus:4x4")
    reduced, full = both(t, lp.uniform_matrix(16, M), monkeypatch)
    assert reduced.variables < full.variables / 10
    assert reduced.throughput_s == pytest.approx(full.throughput_s, rel=1e-7)
    # The split duals are a dual solution of the full LP: their shares sum to 1, and the loads they report
    # are every link's load under the symmetrised flow, which fills a bottleneck to bandwidth x t.
    assert sum(b.share for b in reduced.bottlenecks) == pytest.approx(1.0, rel=1e-6)
    bw = {link: t.graph.edges[link]["bandwidth"] for link in t.links}
    for b in reduced.bottlenecks:
        assert b.load_bytes == pytest.approx(bw[(b.src, b.dst)] * reduced.throughput_s, rel=1e-6)


def test_every_torus_link_is_one_orbit_of_four_by_hand() -> None:
    # Translations move an east link onto every east link (16), likewise west, north and south: four orbits.
    t = from_spec("torus:4x4")
    perms = regular_group(t, lp.uniform_matrix(16, M))
    assert perms is not None
    assert sorted(np.bincount(link_orbits(t, perms)).tolist()) == [16, 16, 16, 16]


def test_a_file_that_borrows_the_name_keeps_the_full_lp(monkeypatch: pytest.MonkeyPatch) -> None:
    # One slower cable breaks the translations: no group, the p-commodity LP, the same answer as without the name.
    src = from_spec("torus:4x4")
    g = nx.DiGraph(src.graph)
    g.edges[0, 1]["bandwidth"] = g.edges[1, 0]["bandwidth"] = g.edges[0, 1]["bandwidth"] / 4
    fake, plain = Topology(g, "torus:4x4"), Topology(g, "mine")
    m = lp.uniform_matrix(16, M)
    assert regular_group(fake, m) is None
    reduced, full = both(fake, m, monkeypatch)
    assert reduced.variables == full.variables
    assert reduced.throughput_s == pytest.approx(lp.bound_alltoall(plain, m).throughput_s, rel=1e-9)


def test_a_skewed_matrix_is_not_invariant(monkeypatch: pytest.MonkeyPatch) -> None:
    t = ring(6, bandwidth=B, latency=0.0)
    m = np.asarray(matrices.parse("zipf:1.2", 6), dtype=float) * 1e6
    assert regular_group(t, m) is None
    reduced, full = both(t, m, monkeypatch)
    assert reduced.throughput_s == pytest.approx(full.throughput_s, rel=1e-9)


def test_a_cluster_with_switches_reduced_equals_the_full_lp(monkeypatch: pytest.MonkeyPatch) -> None:
    # Node switches go where their GPUs go, the network switch stays: one commodity, the same optimum.
    t = from_spec("cluster:4x4")
    m = lp.uniform_matrix(16, M)
    maps = regular_group(t, m)
    assert maps is not None and maps.shape == (16, 16 + 5)
    reduced, full = both(t, m, monkeypatch)
    assert reduced.variables < full.variables / 10
    assert reduced.throughput_s == pytest.approx(full.throughput_s, rel=1e-7)
    assert sum(b.share for b in reduced.bottlenecks) == pytest.approx(1.0, rel=1e-6)
