"""Hypothesis strategies for network topologies, to test schedules under random timings.

    from hypothesis import given, strategies as st
    from sim.engine.reference import simulate
    from sim.topology.strategies import topologies

    @given(st.data())
    def test_my_allreduce_on_any_network(data):
        schedule = my_allreduce(8)
        topology = data.draw(topologies(8))
        assert simulate(schedule, topology, 2**20).ok

``placements(topology)`` draws rank placements (``sim.topology.placement.place``),
shrinking towards the identity, to check that a result holds wherever the
ranks sit on a structured network (torus, fat tree, cluster).

Every topology drawn is strongly connected: a random cycle through all
nodes (one way, or both) joins them, and random extra links, bandwidths
and latencies do the rest. Failures shrink towards fewer switches, fewer
extra links and the smallest bandwidths and latencies.
"""

from __future__ import annotations

import networkx as nx
from hypothesis import strategies as st

from sim.topology.graph import Node, Topology, TopologyError

__all__ = ["placements", "topologies"]


@st.composite
def _topologies(draw: st.DrawFn, ranks: int, max_switches: int, min_bandwidth: float, max_bandwidth: float,
                max_latency: float) -> Topology:
    switches = [f"s{i}" for i in range(draw(st.integers(0, max_switches)))]
    nodes: list[Node] = [*range(ranks), *switches]
    order = draw(st.permutations(nodes))
    bw = st.floats(min_bandwidth, max_bandwidth, allow_nan=False, allow_infinity=False)
    lat = st.one_of(st.just(0.0), st.floats(0.0, max_latency, allow_nan=False, allow_infinity=False))
    g = nx.DiGraph()
    g.add_nodes_from(range(ranks))
    g.add_nodes_from(switches)
    both = draw(st.booleans())
    for i in range(len(order)):
        u, v = order[i], order[(i + 1) % len(order)]
        if u != v:
            g.add_edge(u, v, bandwidth=draw(bw), latency=draw(lat))
            if both:
                g.add_edge(v, u, bandwidth=draw(bw), latency=draw(lat))
    for _ in range(draw(st.integers(0, 2 * len(nodes)))):
        u, v = draw(st.sampled_from(nodes)), draw(st.sampled_from(nodes))
        if u != v:
            g.add_edge(u, v, bandwidth=draw(bw), latency=draw(lat))
    return Topology(g, "random")


def topologies(ranks: int, *, max_switches: int = 3, min_bandwidth: float = 1e6, max_bandwidth: float = 1e11,
               max_latency: float = 1e-4) -> st.SearchStrategy[Topology]:
    """Random strongly connected topologies of ``ranks`` ranks and up to ``max_switches`` switches."""
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise TopologyError(f"ranks must be an integer >= 1, got {ranks!r}")
    if isinstance(max_switches, bool) or not isinstance(max_switches, int) or max_switches < 0:
        raise TopologyError(f"max_switches must be an integer >= 0, got {max_switches!r}")
    if not 0 < min_bandwidth <= max_bandwidth < float("inf"):
        raise TopologyError(f"need 0 < min_bandwidth <= max_bandwidth < inf, got {min_bandwidth!r}, {max_bandwidth!r}")
    if not 0 <= max_latency < float("inf"):
        raise TopologyError(f"max_latency must be a finite number >= 0, got {max_latency!r}")
    return _topologies(ranks, max_switches, min_bandwidth, max_bandwidth, max_latency)


def placements(topology: Topology) -> st.SearchStrategy[tuple[int, ...]]:
    """Permutations of the topology's ranks: entry r is the node rank r runs on (``sim.topology.placement.place``)."""
    if not isinstance(topology, Topology):
        raise TopologyError(f"placements needs a Topology, got {type(topology).__name__}")
    return st.permutations(range(topology.ranks)).map(tuple)
