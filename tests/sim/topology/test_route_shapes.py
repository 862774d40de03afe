"""``Topology.route_many`` on clusters of permutable NVLink domains: one search per route shape, relabelled.

The reference is ``route`` itself, pair by pair, on the GPU presets (hypothesis draws the pairs), on a symmetric
cluster whose routes tie (where the shapes must not be used), and on clusters whose symmetry a fault breaks. Two
broken variants show that the comparison catches a relabelled route that is not the only best one, and a symmetry
assumed where the graph has none.
"""

from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.topology import Topology
from sim.topology.forms import from_spec
from sim.topology.symmetry import DomainSymmetry, domain_symmetry

PRESETS = ["dgx-h100:3", "dgx-h100:5", "dgx-a100:4", "dgx-b200:3", "hgx-h200:3", "gb200-nvl72:3@domain=6",
           "dgx-h100:4+sharp", "dgx-h100:3@latency=1us"]
_BUILT: dict[str, Topology] = {}


def _preset(spec: str) -> Topology:
    if spec not in _BUILT:
        _BUILT[spec] = from_spec(spec)
    return _BUILT[spec]


def _routes(t: Topology, pairs: list[tuple[int, int]]) -> dict[tuple[int, int], tuple[object, ...]]:
    return {pr: t.route(*pr) for pr in pairs}


def _tied(domains: int = 4, size: int = 3) -> Topology:
    """``domains`` domains of ``size`` GPUs on a switch each, every GPU on two shared switches of equal links: a
    route between domains has two equal best ways, which the destination's digits pick between."""
    g = nx.DiGraph(gpus_per_node=size)
    g.add_nodes_from(range(domains * size))
    for n in range(domains):
        for i in range(size):
            r = n * size + i
            for s, bw, lat in ((f"node{n}", 4e9, 1e-6), ("a", 1e9, 5e-6), ("b", 1e9, 5e-6)):
                g.add_edge(r, s, bandwidth=bw, latency=lat)
                g.add_edge(s, r, bandwidth=bw, latency=lat)
    return Topology(g, "tied")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(PRESETS), st.data())
def test_route_many_takes_routes_routes_on_the_presets(spec: str, data: st.DataObject) -> None:
    t = _preset(spec)
    assert t.symmetry() == DomainSymmetry(t.ranks // t.graph.graph["gpus_per_node"], t.graph.graph["gpus_per_node"])
    rank = st.integers(0, t.ranks - 1)
    pairs = data.draw(st.lists(st.tuples(rank, rank), min_size=1, max_size=40))
    got = t.route_many(pairs)
    assert {pr: got[pr] for pr in pairs} == _routes(t, pairs)


@pytest.mark.parametrize("spec", ["dgx-h100:4", "dgx-a100:3", "gb200-nvl72:3@domain=4"])
def test_route_many_takes_routes_routes_for_every_pair(spec: str) -> None:
    t = from_spec(spec)
    pairs = [(a, b) for a in range(t.ranks) for b in range(t.ranks)]
    assert t.route_many(pairs) == _routes(t, pairs)


def test_tied_routes_are_searched_not_relabelled() -> None:
    t = _tied()
    assert t.symmetry() is not None
    pairs = [(a, b) for a in range(t.ranks) for b in range(t.ranks)]
    want = _routes(t, pairs)
    assert {want[(0, b)][1] for b in range(3, t.ranks)} == {"a", "b"}  # the digits spread them
    assert t.route_many(pairs) == want


@pytest.mark.parametrize("fault", ["degrade", "down"])
def test_a_fault_breaks_the_symmetry(fault: str) -> None:
    t = from_spec("dgx-h100:4")
    t = t.with_degraded_link(9, "rail1", 0.5) if fault == "degrade" else t.with_link_down(9, "rail1")
    assert t.symmetry() is None
    pairs = [(a, b) for a in range(0, t.ranks, 3) for b in range(t.ranks)]
    assert t.route_many(pairs) == _routes(t, pairs)


def test_too_few_domains_or_explicit_routes_have_no_symmetry() -> None:
    assert domain_symmetry(from_spec("dgx-h100:2")) is None
    t = from_spec("dgx-h100:3")
    assert domain_symmetry(Topology(t.graph, t.name, {(0, 9): t.route(0, 9)})) is None


def test_the_comparison_fails_when_a_tied_route_is_relabelled(monkeypatch: pytest.MonkeyPatch) -> None:
    t = _tied()
    pairs = [(a, b) for a in range(t.ranks) for b in range(t.ranks)]
    want = _routes(t, pairs)
    searched = Topology._searched

    def always_only(self: Topology, by_dst: dict[int, list[int]]) -> dict[tuple[int, int], tuple[object, bool]]:
        return {pr: (path, True) for pr, (path, _only) in searched(self, by_dst).items()}

    monkeypatch.setattr(Topology, "_searched", always_only)
    assert _tied().route_many(pairs) != want


def test_the_comparison_fails_when_a_symmetry_is_assumed(monkeypatch: pytest.MonkeyPatch) -> None:
    t = from_spec("dgx-h100:4").with_link_down(9, "rail1")
    pairs = [(a, b) for a in range(t.ranks) for b in range(t.ranks)]
    want = _routes(t, pairs)
    monkeypatch.setattr(Topology, "symmetry", lambda self: DomainSymmetry(4, 8))
    assert t.route_many(pairs) != want
