"""``Topology.route_many``: the routes ``route`` takes, pair by pair, from a search stopped at the sources.

``route`` builds the destination's whole shortest-path tree; ``route_many`` (what the lowering of switch
operations routes with) searches only as far as the sources' keys. The reference is ``route`` itself, on random
graphs whose links tie often (latencies and bandwidths from small sets, zero-latency links), where the widest
bottleneck and the destination's digits pick among equal routes.
"""

from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.topology import Topology
from sim.topology.forms import from_spec
from sim.topology.strategies import topologies


@st.composite
def _tied(draw: st.DrawFn) -> Topology:
    ranks = draw(st.integers(2, 9))
    switches = [f"s{i}" for i in range(draw(st.integers(0, 3)))]
    nodes = [*range(ranks), *switches]
    g = nx.DiGraph()
    g.add_nodes_from(nodes)
    lat = st.sampled_from([0.0, 1e-6, 2e-6, 3e-6])
    bw = st.sampled_from([1e9, 2e9, 4e9])
    cycle = draw(st.permutations(nodes))
    for a, b in zip(cycle, [*cycle[1:], cycle[0]], strict=True):  # strongly connected both ways
        g.add_edge(a, b, bandwidth=draw(bw), latency=draw(lat))
        g.add_edge(b, a, bandwidth=draw(bw), latency=draw(lat))
    for a, b in draw(st.lists(st.tuples(st.sampled_from(nodes), st.sampled_from(nodes)), max_size=20)):
        if a != b:
            g.add_edge(a, b, bandwidth=draw(bw), latency=draw(lat))
    return Topology(g, "tied")


def _pairs(t: Topology) -> list[tuple[int, int]]:
    return [(a, b) for a in range(t.ranks) for b in range(t.ranks)]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_tied(), st.data())
def test_route_many_takes_routes_routes_on_tied_graphs(t: Topology, data: st.DataObject) -> None:
    pairs = data.draw(st.lists(st.sampled_from(_pairs(t)), min_size=1, max_size=30))
    got = t.route_many(pairs)
    assert {pr: got[pr] for pr in pairs} == {pr: t.route(*pr) for pr in pairs}


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(2, 8).flatmap(topologies))
def test_route_many_takes_routes_routes_on_random_topologies(t: Topology) -> None:
    got = t.route_many(_pairs(t))
    assert got == {pr: t.route(*pr) for pr in _pairs(t)}


@pytest.mark.parametrize("spec", ["torus:8x8", "torus:5x3x2", "fattree:4", "cluster:3x4", "dgx-h100:8",
                                  "torus:4x4@x=100GB/s,y=50GB/s/2us"])
def test_route_many_takes_routes_routes_on_the_builders(spec: str) -> None:
    t = from_spec(spec)
    pairs = _pairs(t)
    assert t.route_many(pairs) == {pr: t.route(*pr) for pr in pairs}
    for dst in (0, t.ranks - 1):  # one destination, few sources: the search stops early
        few = [(src, dst) for src in (1, t.ranks // 2)]
        assert t.route_many(few) == {pr: t.route(*pr) for pr in few}


def test_the_comparison_fails_when_the_search_drops_a_tie() -> None:
    # Keep only the first of a node's equal best next hops: on torus:4x4 a diagonal neighbour is two equal
    # routes away (x then y, or y then x), which the digits of the destination pick between.
    t = from_spec("torus:4x4")
    pairs = _pairs(t)
    want = {pr: t.route(*pr) for pr in pairs}
    best_nexts = Topology._best_nexts

    def first_only(self: Topology, dst: int, srcs: list[int]) -> dict[int, list[int]]:
        return {u: v[:1] for u, v in best_nexts(self, dst, srcs).items()}

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Topology, "_best_nexts", first_only)
        assert t.route_many(pairs) != want
