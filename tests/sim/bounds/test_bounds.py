"""sim.bounds.cuts: hand-written answers on known families, brute force over every vertex set on small
topologies, and no library schedule ever simulating faster than the bound."""

from __future__ import annotations

import itertools
from fractions import Fraction

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from algorithms import registry
from algorithms.ir import Kind
from sim.bounds.cuts import BOUND_KINDS, BoundError, bound, cut_ratio
from sim.bounds.packing import synthesize
from sim.engine.reference import simulate
from sim.topology import Node, Topology, cluster, fat_tree, fully_connected, ring, single_switch, torus
from sim.topology.routing import ROUTINGS, routed
from sim.topology.strategies import topologies

B = 50e9
LAT = 1e-6
M = 2**30


def close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-12 * max(abs(a), abs(b))


# -- hand-written answers ---------------------------------------------------------------------------

@pytest.mark.parametrize("p", [2, 3, 5, 8])
def test_ring(p: int) -> None:
    t = ring(p)
    links_out = 2 if p > 2 else 1  # a 2-ring has one cable
    # allgather: every rank but one must reach the last one over its links in.
    assert close(bound("allgather", t, M).bandwidth_s, M / p * (p - 1) / (links_out * B))
    assert close(bound("reducescatter", t, M).bandwidth_s, M / p * (p - 1) / (links_out * B))
    # allreduce, broadcast, reduce: any set of ranks is left over two links.
    for kind in ("allreduce", "broadcast", "reduce"):
        assert close(bound(kind, t, M).bandwidth_s, M / (links_out * B))
    # allreduce's traffic term: 2(p-1)·M bytes into p ranks of links_out·B each; the bound from p = 3 on.
    ar = bound("allreduce", t, M)
    assert ar.traffic_s is not None and close(ar.traffic_s, 2 * (p - 1) * M / (p * links_out * B))
    assert close(ar.bound_s, max(M / (links_out * B), 2 * (p - 1) * M / (p * links_out * B)))
    assert ar.bottleneck == ("traffic" if p > 2 else "cut")
    # latency: the farthest rank is p // 2 hops away.
    assert close(bound("allgather", t, M).latency_s, (p // 2) * LAT)


@pytest.mark.parametrize("p", [2, 4, 7])
def test_full_mesh(p: int) -> None:
    t = fully_connected(p)
    # k ranks inside S leave over k(p-k) links: the worst is k = p - 1, ratio 1/B.
    assert close(bound("allgather", t, M).bandwidth_s, M / p / B)
    assert close(bound("broadcast", t, M, root=p - 1).bandwidth_s, M / ((p - 1) * B))
    # allreduce: the cut around one rank, M / ((p-1)·B), loses to the traffic term 2(p-1)·M / (p·(p-1)·B)
    # = 2M / (pB) from p = 3 on; direct reduce-scatter then allgather reaches it (test_traffic_term_is_tight).
    assert close(bound("allreduce", t, M).bandwidth_s, M / ((p - 1) * B))
    assert close(bound("allreduce", t, M).bound_s, max(M / ((p - 1) * B), 2 * M / (p * B)))
    # alltoall: k(p-k)·M/p bytes over k(p-k) links.
    assert close(bound("alltoall", t, M).bandwidth_s, M / (p * B))
    assert close(bound("allgather", t, M).latency_s, LAT)


@pytest.mark.parametrize("p", [2, 5, 8])
def test_single_switch(p: int) -> None:
    t = single_switch(p)
    assert close(bound("allgather", t, M).bandwidth_s, M / p * (p - 1) / B)
    assert close(bound("reducescatter", t, M).bandwidth_s, M / p * (p - 1) / B)
    assert close(bound("allreduce", t, M).bandwidth_s, M / B)
    assert close(bound("allreduce", t, M).bound_s, 2 * (p - 1) * M / (p * B))  # traffic >= cut M / B
    assert close(bound("reduce", t, M, root=1).bandwidth_s, M / B)
    assert close(bound("alltoall", t, M).bandwidth_s, (p - 1) * M / (p * B))
    assert close(bound("broadcast", t, M).latency_s, 2 * LAT)
    # The cut around one rank's in-link: everything but that rank (the switch included).
    b = bound("allgather", t, M)
    assert len(b.cut) == p and "switch" in b.cut


def test_torus() -> None:
    t = torus(4, 4)
    # Each rank has four links in; 15 pieces must come in over them.
    assert close(bound("allgather", t, M).bandwidth_s, M / 16 * 15 / (4 * B))
    assert close(bound("broadcast", t, M).bandwidth_s, M / (4 * B))
    assert close(bound("allgather", t, M).latency_s, 4 * LAT)  # two hops each way round
    # allreduce: 2·15·M bytes into 16 ranks of four links each (the cut around a rank gives M / 4B).
    assert close(bound("allreduce", t, M).bandwidth_s, M / (4 * B))
    assert close(bound("allreduce", t, M).bound_s, 2 * 15 * M / (16 * 4 * B))


def test_fat_tree() -> None:
    t = fat_tree(4)
    # Full bisection: the bottleneck is each rank's single link in.
    assert close(bound("allgather", t, M).bandwidth_s, M / 16 * 15 / B)
    assert close(bound("allreduce", t, M).bandwidth_s, M / B)
    assert close(bound("allreduce", t, M).bound_s, 2 * 15 * M / (16 * B))  # traffic term
    assert close(bound("broadcast", t, M).latency_s, 6 * LAT)  # rank -> edge -> agg -> core -> agg -> edge -> rank


@pytest.mark.parametrize(("nodes", "gpus"), [(2, 8), (3, 4), (4, 2)])
def test_cluster_with_slow_nics_is_bound_by_the_nic_cut(nodes: int, gpus: int) -> None:
    nic = 10e9
    t = cluster(nodes, gpus, nic_bandwidth=nic)
    n = nodes * gpus
    # Every node but one holds (nodes-1)·gpus pieces; they reach the last node over its gpus NICs.
    b = bound("allgather", t, M)
    assert close(b.bandwidth_s, M / n * (nodes - 1) * gpus / (gpus * nic))
    ranks_in = sorted(x for x in b.cut if isinstance(x, int))
    left_out = sorted(set(range(n)) - set(ranks_in))
    first = left_out[0]
    assert first % gpus == 0 and left_out == list(range(first, first + gpus))
    # allreduce and broadcast: a node is left over its NICs (gpus·nic < nvlink + nic); for allreduce that
    # cut beats the traffic term 2(n-1)·M / (n·(nvlink + nic)).
    assert close(bound("allreduce", t, M).bound_s, M / (gpus * nic))
    assert bound("allreduce", t, M).bottleneck == "cut" and M / (gpus * nic) > 2 * (n - 1) * M / (n * (450e9 + nic))
    assert close(bound("broadcast", t, M, root=1).bandwidth_s, M / (gpus * nic))


def test_default_cluster_is_bound_by_one_gpu_in_links() -> None:
    t = cluster(2, 8)
    # 15 pieces into one GPU over NVLink (450 GB/s) plus its NIC (50 GB/s): the 2.01 ms.
    b = bound("allgather", t, M)
    assert close(b.bandwidth_s, M / 16 * 15 / 500e9)
    assert round(b.bound_s * 1e3, 2) == 2.01
    assert b.reference_s is None
    ar = bound("allreduce", t, M)
    assert ar.reference_s is not None and close(ar.reference_s, 2 * M / 16 * 15 / 500e9)
    # Every rank has the same links (500 GB/s in and out), so the traffic term equals that reference:
    # 2·15·M over 16 ranks' 500 GB/s, 4.03 ms, above the node cut M / (8 x 50 GB/s) = 2.68 ms.
    assert close(ar.bandwidth_s, M / (8 * 50e9))
    assert close(ar.bound_s, 2 * 15 * M / (16 * 500e9)) and round(ar.bound_s * 1e3, 2) == 4.03
    assert ar.bottleneck == "traffic"
    assert set(ar.to_dict()) == {"bound_s", "bandwidth_s", "latency_s", "cut", "traffic_s", "reference_s"}


def min_one_way_gossip_calls(p: int) -> int:
    """Breadth-first search over who knows whose input: a call u -> v gives v all that u knows (a message
    carrying u's partial sum can give no more); the fewest calls after which everyone knows everything."""
    everyone = frozenset(range(p))
    start = tuple(frozenset({r}) for r in range(p))
    seen = {start}
    frontier = [start]
    calls = 0
    while True:
        if any(all(k == everyone for k in state) for state in frontier):
            return calls
        nxt = []
        for state in frontier:
            for u in range(p):
                for v in range(p):
                    if u != v and not state[u] <= state[v]:
                        new = tuple(k | state[u] if i == v else k for i, k in enumerate(state))
                        if new not in seen:
                            seen.add(new)
                            nxt.append(new)
        frontier = nxt
        calls += 1


@pytest.mark.parametrize("p", [2, 3, 4])
def test_one_way_gossip_needs_2p_minus_2_messages(p: int) -> None:
    # The lemma behind allreduce's traffic term, checked by exhaustive search rather than by its proof.
    assert min_one_way_gossip_calls(p) == 2 * (p - 1)


@pytest.mark.parametrize("p", [3, 4, 6])
def test_traffic_term_is_tight_on_a_full_mesh(p: int) -> None:
    # Direct reduce-scatter then allgather moves (p-1)/p·M over each rank's p-1 links per phase: 2M / (pB)
    # plus two latencies, exactly the traffic term. A term any larger (2p·M instead of 2(p-1)·M, or the
    # ranks' in-links counted once) would be beaten here.
    t = fully_connected(p)
    b = bound("allreduce", t, M)
    assert close(b.bound_s, 2 * M / (p * B))
    r = simulate(registry.get(Kind.ALLREDUCE, "direct").build(p), t, M)
    assert r.ok and b.bound_s <= r.time <= b.bound_s + 2 * LAT + 1e-12


def test_links_on_no_route_are_left_out() -> None:
    # A triangle whose direct 0 <-> 1 cable is slow to answer (10 us against two 1 us hops): the routes
    # between 0 and 1 go through 2, so that cable carries nothing and the network is the line 0 - 2 - 1.
    g = nx.DiGraph()
    for u, v, lat in ((0, 1, 10e-6), (0, 2, LAT), (2, 1, LAT)):
        g.add_edge(u, v, bandwidth=B, latency=lat)
        g.add_edge(v, u, bandwidth=B, latency=lat)
    t = Topology(g, "triangle")
    assert t.route(0, 1) == (0, 2, 1) and len(t.routed_links()) == 4
    ag = bound("allgather", t, M)
    # On the line, the two pieces of {1, 2} reach 0 over one link: 2M/3 / B. Over every link, M/3 / B.
    assert close(ag.bandwidth_s, 2 * M / (3 * B)) and ag.idle_links == 2
    assert ag.any_routing is not None and close(ag.any_routing.bound_s, M / (3 * B))
    assert ag.to_dict()["idle_links"] == 2 and close(float(ag.to_dict()["any_routing_s"]), M / (3 * B))  # type: ignore[arg-type]
    # allreduce: the cut around 0 (one link out) and the traffic term 2·2·M over B + B + 2B in.
    assert close(bound("allreduce", t, M).bound_s, M / B)
    # The bound is reached: synthesis on the routes comes within 1%, and no library algorithm beats it.
    r = simulate(synthesize("allgather", t), t, M)
    assert ag.bound_s <= r.time <= 1.01 * ag.bound_s
    for algo in registry.algorithms(Kind.ALLGATHER):
        assert simulate(algo.build(3), t, M).time >= ag.bound_s


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_routed_links_are_the_links_of_every_route(data: st.DataObject) -> None:
    # Topology.routed_links walks each destination's tree once per state; here every pair's route,
    # one by one, with the synthesizer's explicit routes too.
    p = data.draw(st.integers(2, 7), label="ranks")
    t = data.draw(topologies(p), label="topology")
    general = [r for r in ROUTINGS if r != "dimension"]  # dimension order is for tori only
    t = routed(t, data.draw(st.sampled_from(general), label="routing"))
    want = {t.link_id(u, v) for a in range(p) for b in range(p) for u, v in itertools.pairwise(t.route(a, b))}
    assert t.routed_links() == want


def test_latency_dominates_small_messages() -> None:
    t = ring(8)
    b = bound("allgather", t, 64)
    assert b.bound_s == b.latency_s == pytest.approx(4 * LAT)
    assert bound("allgather", t, 0).bandwidth_s == 0


def test_single_rank_and_errors() -> None:
    t = ring(1)
    assert bound("allreduce", t, M).bound_s == 0
    with pytest.raises(BoundError, match="unknown kind"):
        bound("nonsense", ring(4), M)
    with pytest.raises(BoundError, match="no bound for barrier"):
        bound("barrier", ring(4), M)
    with pytest.raises(BoundError, match="root 9 out of range"):
        bound("broadcast", ring(4), M, root=9)
    with pytest.raises(BoundError, match="has no root"):
        bound("allgather", ring(4), M, root=0)
    with pytest.raises(BoundError, match="size"):
        bound("allgather", ring(4), -1)


def test_json_fields() -> None:
    d = bound("allgather", ring(4), M).to_dict()
    assert set(d) == {"bound_s", "bandwidth_s", "latency_s", "cut"}
    cut = d["cut"]
    assert isinstance(cut, list) and all(isinstance(x, int | str) for x in cut)


# -- brute force over every vertex set ----------------------------------------------------------------

def out_bw(t: Topology, s: set[Node]) -> Fraction:
    return sum((Fraction(a["bandwidth"]) for u, v, a in t.graph.edges(data=True) if u in s and v not in s),
               Fraction(0))


def in_bw(t: Topology, s: set[Node]) -> Fraction:
    return sum((Fraction(a["bandwidth"]) for u, v, a in t.graph.edges(data=True) if v in s and u not in s),
               Fraction(0))


def subsets(t: Topology) -> list[set[Node]]:
    nodes = list(t.graph.nodes)
    return [set(c) for k in range(1, len(nodes)) for c in itertools.combinations(nodes, k)]


def ranks_in(s: set[Node]) -> int:
    return sum(1 for x in s if isinstance(x, int))


def used_part(t: Topology) -> Topology:
    """t with only the links that some ordered pair of ranks' route takes (from Topology.route)."""
    used = set()
    for u in range(t.ranks):
        for v in range(t.ranks):
            path = t.route(u, v)
            used.update(itertools.pairwise(path))
    g = nx.DiGraph()
    g.add_nodes_from(t.graph.nodes)
    for u, v in used:
        g.add_edge(u, v, **t.graph.edges[u, v])
    return Topology(g, t.name)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_cuts_match_brute_force(data: st.DataObject) -> None:
    p = data.draw(st.integers(2, 6), label="ranks")
    drawn = data.draw(topologies(p, max_switches=min(3, 10 - p)), label="topology")
    # The bound counts only the links some pair's route takes; the brute force works on those links,
    # found here from Topology.route, and bound() is asked about the drawn topology itself.
    t = used_part(drawn)
    n = t.ranks
    every = subsets(t)
    some_not_all = [s for s in every if 0 < ranks_in(s) < n]
    # allgather: max |S ∩ ranks| / B+(S); reducescatter: the same with B-(S).
    want_ag = max(Fraction(ranks_in(s)) / out_bw(t, s) for s in some_not_all)
    want_rs = max(Fraction(ranks_in(s)) / in_bw(t, s) for s in some_not_all)
    got_ag, cut = cut_ratio(t)
    assert got_ag == want_ag
    assert Fraction(ranks_in(set(cut))) / out_bw(t, set(cut)) == want_ag  # the reported cut attains it
    assert cut_ratio(t, reverse=True)[0] == want_rs
    size = 12345
    ag = bound("allgather", drawn, size)
    assert ag.bandwidth == Fraction(size) / n * want_ag
    rs = bound("reducescatter", drawn, size)
    assert rs.bandwidth == Fraction(size) / n * want_rs
    c = set(rs.cut)  # its out-links are the bottleneck
    assert 0 < ranks_in(c) < n and Fraction(n - ranks_in(c)) / out_bw(t, c) == want_rs
    # allreduce: min B+(S) over S holding some but not all ranks, and the traffic term over the ranks' links.
    low = min(out_bw(t, s) for s in some_not_all)
    ar = bound("allreduce", drawn, size)
    assert ar.bandwidth == Fraction(size) / low and out_bw(t, set(ar.cut)) == low
    links_in = sum((in_bw(t, {r}) for r in range(n)), Fraction(0))
    links_out = sum((out_bw(t, {r}) for r in range(n)), Fraction(0))
    assert ar.traffic_term == Fraction(2 * (n - 1) * size) / min(links_in, links_out)
    traffic = Fraction(2 * (n - 1) * size) / min(links_in, links_out)
    assert ar.bound_s == max(float(Fraction(size) / low), float(traffic), ar.latency_s)
    # broadcast / reduce at a root: min B+(S) over S with the root in (out) and some rank out (in).
    root = data.draw(st.integers(0, n - 1), label="root")
    low_b = min(out_bw(t, s) for s in some_not_all if root in s)
    low_r = min(out_bw(t, s) for s in some_not_all if root not in s)
    bc = bound("broadcast", drawn, size, root=root)
    assert bc.bandwidth == Fraction(size) / low_b and root in bc.cut and out_bw(t, set(bc.cut)) == low_b
    rd = bound("reduce", drawn, size, root=root)
    assert rd.bandwidth == Fraction(size) / low_r and root not in rd.cut and out_bw(t, set(rd.cut)) == low_r
    # alltoall: a valid bound (at most the brute-force maximum), at least every single-rank cut,
    # attained by its cut.
    a2a = [Fraction(ranks_in(s) * (n - ranks_in(s)) * size, n) / out_bw(t, s) for s in some_not_all]
    aa = bound("alltoall", drawn, size)
    assert aa.bandwidth <= max(a2a)
    c = set(aa.cut)
    assert aa.bandwidth == Fraction(ranks_in(c) * (n - ranks_in(c)) * size, n) / out_bw(t, c)
    for r in range(n):
        one: set[Node] = {r}
        assert aa.bandwidth >= Fraction((n - 1) * size, n) / out_bw(t, one)
    # latency: the longest of the shortest paths, by brute force over networkx's Floyd-Warshall.
    dist = nx.floyd_warshall(t.graph, weight="latency")
    assert ag.latency_s == pytest.approx(max(dist[u][w] for u in range(n) for w in range(n)), rel=1e-12, abs=0)
    # Links on no route: counted, and the bound over every link reported beside it.
    idle = drawn.graph.number_of_edges() - t.graph.number_of_edges()
    assert ag.idle_links == idle
    if idle:
        assert ag.any_routing is not None
        assert ag.any_routing.bandwidth == Fraction(size) / n * max(
            Fraction(ranks_in(s)) / out_bw(drawn, s) for s in subsets(drawn) if 0 < ranks_in(s) < n)
    else:
        assert ag.any_routing is None


# -- no schedule beats the bound -------------------------------------------------------------------------

@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_no_library_algorithm_beats_the_bound(data: st.DataObject) -> None:
    p = data.draw(st.integers(2, 6), label="ranks")
    t = data.draw(topologies(p), label="topology")
    kind = data.draw(st.sampled_from(BOUND_KINDS), label="kind")
    size = data.draw(st.sampled_from([1.0, 4096.0, 2.0**24]), label="size")
    root = 0 if kind in (Kind.BROADCAST, Kind.REDUCE) else None
    b = bound(kind, t, size, root=root)
    ran = 0
    for algo in registry.algorithms(kind):
        if algo.unsupported(p) is not None:
            continue
        schedule = algo.build(p, root=root)
        r = simulate(schedule, t, size)
        assert r.ok
        assert r.time >= b.bound_s * (1 - 1e-9), (algo.name, r.time, b)
        ran += 1
    assert ran > 0
