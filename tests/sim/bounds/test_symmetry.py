"""sim.bounds.symmetry: orbits found from the graph, not the name (hand-worked orbits, every map checked link by
link here), and a topology file that no builder named synthesizes as well as the same topology by name."""

from __future__ import annotations

import networkx as nx
import pytest

from sim.bounds.cuts import bound
from sim.bounds.packing import synthesize
from sim.bounds.symmetry import rank_orbits
from sim.engine.reference import simulate
from sim.topology import Topology, files, from_spec

GIB = 2**30


def two_level() -> Topology:
    """2 nodes x 3 GPUs, NVSwitch-like 300 GB/s inside, NICs of 25, 50 and 100 GB/s (GPU 0, 1, 2 of each node)."""
    g = nx.DiGraph()
    nic = [25e9, 50e9, 100e9]
    for n in range(2):
        for i in range(3):
            r = 3 * n + i
            for a, b in ((r, f"sw{n}"), (f"sw{n}", r)):
                g.add_edge(a, b, bandwidth=300e9, latency=1e-6)
            for a, b in ((r, "fabric"), ("fabric", r)):
                g.add_edge(a, b, bandwidth=nic[i], latency=5e-6)
    return Topology(g, "two-level")


def as_file(spec: str) -> Topology:
    return files.as_file(from_spec(spec), "my-cluster.json")


def automorphism_here(t: Topology, perm: list[int]) -> bool:
    """Is there a switch bijection that, with ``perm`` on the ranks, keeps every link and its figures? (brute force)"""
    import itertools

    switches = [x for x in t.graph.nodes if isinstance(x, str)]
    for images in itertools.permutations(switches):
        f = {**dict(zip(switches, images, strict=True)), **dict(enumerate(perm))}
        if all(t.graph.has_edge(f[u], f[v]) and t.graph.edges[f[u], f[v]] == a for u, v, a in t.graph.edges(data=True)):
            return True
    return False


def test_unequal_nics_give_three_orbits_by_hand() -> None:
    # GPU i of node 0 and GPU i of node 1 are alike (swap the nodes); GPUs with other NICs are not.
    t = two_level()
    orbits = rank_orbits(t, list(range(6)))
    assert orbits is not None
    assert {r: b for r, (b, _) in orbits.items()} == {0: 0, 1: 1, 2: 2, 3: 0, 4: 1, 5: 2}
    for r, (b, pm) in orbits.items():
        assert pm[b] == r
        assert automorphism_here(t, pm.tolist())


def test_a_random_graph_without_symmetry_has_none() -> None:
    g = nx.DiGraph()
    for a, b, bw in [(0, 1, 1e9), (1, 2, 2e9), (2, 0, 3e9), (0, 3, 4e9)]:
        g.add_edge(a, b, bandwidth=bw, latency=0.0)
        g.add_edge(b, a, bandwidth=bw, latency=0.0)
    assert rank_orbits(Topology(g, "lopsided"), [0, 1, 2, 3]) is None


def test_a_torus_file_is_one_orbit_of_translations() -> None:
    t = as_file("torus:3x3")
    orbits = rank_orbits(t, list(range(9)))
    assert orbits is not None and {b for b, _ in orbits.values()} == {0}
    for r, (_, pm) in orbits.items():
        assert pm[0] == r and automorphism_here(t, pm.tolist())


@pytest.mark.parametrize("kind", ["allgather", "reducescatter"])
def test_a_cluster_file_synthesizes_as_the_named_cluster(kind: str) -> None:
    # A file link for link equal to cluster:2x8 packed at 94.2% (allgather) when symmetry came from the name.
    def eff(t: Topology) -> float:
        # in_flight 0: synthesis's model (sim.bounds.packing), no send order
        return bound(kind, t, GIB).efficiency(simulate(synthesize(kind, t), t, GIB, in_flight=0).time)

    named, file = eff(from_spec("cluster:2x8")), eff(as_file("cluster:2x8"))
    assert file == pytest.approx(named, abs=0.002)
    assert file >= 0.95
