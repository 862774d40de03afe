"""Topologies: builder shapes against their formulas, routing, validation, files and SPECs."""

from __future__ import annotations

import json

import networkx as nx
import pytest

from algorithms.errors import CollschedError
from sim import topology as T
from sim.topology import Topology, TopologyError


def _hops(topo: Topology, a: int, b: int) -> int:
    return len(topo.route(a, b)) - 1


# -- builders: sizes from closed forms -------------------------------------------------


@pytest.mark.parametrize("p", [3, 4, 7, 16])
def test_ring_shapes(p: int) -> None:
    assert len(T.ring(p).links) == 2 * p
    assert len(T.unidirectional_ring(p).links) == p
    assert len(T.fully_connected(p).links) == p * (p - 1)
    sw = T.single_switch(p)
    assert len(sw.links) == 2 * p and sw.graph.number_of_nodes() == p + 1


def test_tiny_rings_have_no_duplicate_or_self_links() -> None:
    assert T.ring(1).links == () and T.unidirectional_ring(1).links == ()
    assert sorted(T.ring(2).links) == [(0, 1), (1, 0)]
    assert sorted(T.unidirectional_ring(2).links) == [(0, 1), (1, 0)]


@pytest.mark.parametrize(("rows", "cols"), [(3, 3), (4, 4), (3, 5), (5, 8)])
def test_torus_hops_are_wraparound_manhattan(rows: int, cols: int) -> None:
    topo = T.torus(rows, cols)
    assert topo.ranks == rows * cols and len(topo.links) == 4 * rows * cols
    for a in range(topo.ranks):
        for b in range(0, topo.ranks, 3):
            di, dj = abs(a // cols - b // cols), abs(a % cols - b % cols)
            assert _hops(topo, a, b) == min(di, rows - di) + min(dj, cols - dj)


@pytest.mark.parametrize("k", [2, 4, 6])
def test_fat_tree_counts_and_hops(k: int) -> None:
    topo = T.fat_tree(k)
    h = k // 2
    assert topo.ranks == k**3 // 4
    assert topo.graph.number_of_nodes() - topo.ranks == 5 * k * k // 4  # k^2 pod switches + (k/2)^2 core
    assert len(topo.links) == 2 * 3 * k**3 // 4  # host-edge, edge-agg, agg-core, each both ways
    per_pod = h * h
    for a in range(topo.ranks):
        for b in range(topo.ranks):
            if a == b:
                continue
            if a // h == b // h:
                want = 2  # same edge switch
            elif a // per_pod == b // per_pod:
                want = 4  # same pod
            else:
                want = 6  # through a core switch
            assert _hops(topo, a, b) == want


def test_cluster_routes_inside_nodes_over_nvlink_and_between_nodes_over_nics() -> None:
    topo = T.cluster(3, 4)
    assert topo.ranks == 12 and len(topo.links) == 2 * 12 + 2 * 12
    assert topo.route(1, 2) == (1, "node0", 2)
    assert topo.route(1, 6) == (1, "net", 6)
    # Equal latencies everywhere: inside a node the wider NVLink route still wins.
    flat = topo.with_links(latency=1e-6)
    assert all(flat.route(a, b)[1] == "node0" for a in range(4) for b in range(4) if a != b)


def test_dgx_h100_figures() -> None:
    topo = T.dgx_h100(2)
    assert topo.ranks == 16
    # NCCL's effective figures on 450 GB/s NVLink (18 links x SM90_NVLINK_BW 20.6 GB/s) and 50 GB/s NICs
    # (sim.topology.gpus, tests/sim/machine/test_machine.py)
    assert topo.bandwidth(3, "node0") == pytest.approx(18 * 20.6e9) and topo.bandwidth("node0", 3) < 450e9
    # one 400 Gb/s NIC per GPU, on the leaf switch of its rail (GPU 3 of every node on rail3)
    assert topo.bandwidth(3, "rail3") == pytest.approx(0.94 * 50e9) and topo.bandwidth("rail3", 11) < 50e9
    assert topo.route(3, 11) == (3, "rail3", 11)
    assert T.dgx_h100(1).links == T.cluster(1, 8).links  # one box: no network at all


# -- routing -------------------------------------------------------------------------------


def test_routing_is_by_latency_then_hops_then_bandwidth_then_destination() -> None:
    g = nx.DiGraph()
    g.add_nodes_from(range(4))
    for u, v, lat in [(0, 1, 1.0), (1, 2, 1.0), (0, 2, 3.0), (0, "s", 0.5), ("s", 2, 1.5), (2, 3, 1.0)]:
        g.add_edge(u, v, bandwidth=1.0, latency=lat)
        g.add_edge(v, u, bandwidth=1.0, latency=lat)
    topo = Topology(g)
    # 0->1->2 and 0->s->2 both cost 2.0 s and 2 hops: destination 2 takes candidate 2 mod 2 = 0
    # in node order (rank 1 before switch s), destination 3 takes candidate 3 mod 2 = 1.
    assert topo.route(0, 2) == (0, 1, 2)
    assert topo.route(0, 3) == (0, "s", 2, 3)
    assert topo.route_links(0, 2)[1] == 2.0
    # Even ring: both ways round are equally long.
    assert T.ring(6).route(0, 3) == (0, 5, 4, 3)
    assert T.ring(6).route(3, 0) == (3, 2, 1, 0)
    assert T.ring(6).route(1, 4) == (1, 0, 5, 4)


def test_equal_routes_prefer_the_widest_bottleneck() -> None:
    g = nx.DiGraph()
    g.add_nodes_from(range(2))
    for sw, bw in [("a", 5.0), ("b", 9.0), ("c", 7.0)]:
        for r in range(2):
            g.add_edge(r, sw, bandwidth=bw if r == 0 else 100.0, latency=1.0)
            g.add_edge(sw, r, bandwidth=100.0 if r == 0 else bw, latency=1.0)
    topo = Topology(g)
    assert topo.route(0, 1) == (0, "b", 1)  # bottlenecks 5, 9, 7
    assert topo.route(1, 0) == (1, "a", 0)  # all 100: a tie, destination 0 picks the first


def test_fat_tree_spreads_destinations_over_the_core() -> None:
    topo = T.fat_tree(4)
    cores = {topo.route(0, d)[3] for d in range(4, 16)}
    aggs = {topo.route(0, d)[2] for d in range(2, 16)}
    assert cores == {f"core{i}" for i in range(4)}
    assert aggs == {"agg0.0", "agg0.1"}
    # Destination-based, as Al-Fares' tables: the uplink is picked by the destination's number.
    assert all(topo.route(0, d)[2] == f"agg0.{d % 2}" for d in range(2, 16))


def test_many_routes_at_once_agree_with_one_by_one() -> None:
    pairs = [(s, d) for s in range(16) for d in range(16)]
    for spec in ("fattree:4", "torus:4x4", "cluster:2x8", "ring:16"):
        many = T.from_spec(spec).route_links_many(pairs)
        one = T.from_spec(spec)
        assert many == {pr: one.route_links(*pr) for pr in pairs}


def test_shorter_latency_beats_fewer_hops() -> None:
    g = nx.DiGraph()
    g.add_nodes_from(range(2))
    g.add_edge(0, 1, bandwidth=1.0, latency=5.0)
    g.add_edge(1, 0, bandwidth=1.0, latency=5.0)
    for u, v in [(0, "a"), ("a", "b"), ("b", 1)]:
        g.add_edge(u, v, bandwidth=1.0, latency=1.0)
    topo = Topology(g)
    assert topo.route(0, 1) == (0, "a", "b", 1)
    assert topo.route(1, 0) == (1, 0)


def test_explicit_routes_override_and_are_checked() -> None:
    base = T.ring(4)
    topo = Topology(nx.DiGraph(base.graph), "ring", {(0, 1): (0, 3, 2, 1)})
    assert topo.route(0, 1) == (0, 3, 2, 1)
    assert topo.route(1, 0) == (1, 0)
    with pytest.raises(TopologyError, match="route 0 -> 2: link 0 -> 2 does not exist"):
        Topology(nx.DiGraph(base.graph), "ring", {(0, 2): (0, 2)})
    with pytest.raises(TopologyError, match="must start at 0 and end at 2"):
        Topology(nx.DiGraph(base.graph), "ring", {(0, 2): (1, 2)})
    with pytest.raises(TopologyError, match="route key 3: expected a"):
        Topology(nx.DiGraph(base.graph), "ring", {3: (1, 2)})  # type: ignore[dict-item]
    with pytest.raises(TopologyError, match="rank 7 out of range"):
        Topology(nx.DiGraph(base.graph), "ring", {(0, 7): (0, 7)})


def test_route_rejects_unknown_ranks() -> None:
    with pytest.raises(TopologyError, match="rank 9 out of range"):
        T.ring(4).route(0, 9)


# -- validation ------------------------------------------------------------------------------


def _pair(**attrs: object) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_edge(0, 1, **attrs)
    g.add_edge(1, 0, bandwidth=1.0, latency=0.0)
    return g


@pytest.mark.parametrize(
    ("attrs", "message"),
    [
        ({"latency": 0.0}, r"link 0 -> 1: missing attribute 'bandwidth'"),
        ({"bandwidth": 1.0}, r"link 0 -> 1: missing attribute 'latency'"),
        ({"bandwidth": 0.0, "latency": 0.0}, r"link 0 -> 1: bandwidth must be positive"),
        ({"bandwidth": -5, "latency": 0.0}, r"link 0 -> 1: bandwidth must be positive"),
        ({"bandwidth": 1.0, "latency": -1.0}, r"link 0 -> 1: latency must be >= 0"),
        ({"bandwidth": float("inf"), "latency": 0.0}, r"link 0 -> 1: bandwidth must be a finite number"),
        ({"bandwidth": "fast", "latency": 0.0}, r"link 0 -> 1: bandwidth must be a finite number"),
    ],
)
def test_bad_link_attributes_name_the_link(attrs: dict[str, object], message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        Topology(_pair(**attrs))


def test_unreachable_rank_is_named() -> None:
    g = nx.DiGraph()
    g.add_nodes_from(range(3))
    g.add_edge(0, 1, bandwidth=1.0, latency=0.0)
    g.add_edge(1, 0, bandwidth=1.0, latency=0.0)
    g.add_edge(2, 0, bandwidth=1.0, latency=0.0)
    with pytest.raises(TopologyError, match="rank 2 is unreachable: no path from rank 0 to rank 2"):
        Topology(g)
    g.remove_edge(2, 0)
    g.add_edge(0, 2, bandwidth=1.0, latency=0.0)
    with pytest.raises(TopologyError, match="rank 2 is unreachable: no path from rank 2 to rank 0"):
        Topology(g)


def test_node_naming_rules() -> None:
    g = nx.DiGraph()
    g.add_nodes_from([0, 2])
    with pytest.raises(TopologyError, match="rank 1 is missing"):
        Topology(g)
    g = nx.DiGraph()
    g.add_node(0)
    g.add_node(1.5)
    with pytest.raises(TopologyError, match=r"node 1.5: nodes are ranks \(int\) or switches \(str\)"):
        Topology(g)
    g = nx.DiGraph()
    g.add_node(0)
    g.add_edge(0, 0, bandwidth=1.0, latency=0.0)
    with pytest.raises(TopologyError, match="link 0 -> 0: a link cannot loop back"):
        Topology(g)


def test_topology_error_is_a_collsched_error() -> None:
    assert issubclass(TopologyError, CollschedError)


def test_topology_is_frozen() -> None:
    topo = T.ring(4)
    with pytest.raises(nx.NetworkXError):
        topo.graph.add_edge(0, 2, bandwidth=1.0, latency=0.0)


# -- faults on the graph -----------------------------------------------------------------------


def test_link_down_reroutes_the_long_way() -> None:
    topo = T.ring(6).with_link_down(0, 1)
    assert topo.route(0, 1) == (0, 5, 4, 3, 2, 1)
    assert topo.route(1, 0) == (1, 2, 3, 4, 5, 0)
    assert (0, 1) not in topo.links and (1, 0) not in topo.links


def test_link_down_drops_explicit_routes_through_it() -> None:
    base = T.ring(4)
    topo = Topology(nx.DiGraph(base.graph), "r", {(0, 2): (0, 1, 2)}).with_link_down(1, 2)
    assert topo.route(0, 2) == (0, 3, 2)


def test_link_down_that_cuts_a_rank_off_is_an_error() -> None:
    with pytest.raises(TopologyError, match="with link 1 -> 2 down: rank 1 is unreachable: no path from rank 1 to"):
        T.unidirectional_ring(4).with_link_down(1, 2)
    with pytest.raises(TopologyError, match="no such link"):
        T.ring(4).with_link_down(0, 2)


def test_degraded_link_scales_both_directions() -> None:
    topo = T.ring(4, bandwidth=8.0).with_degraded_link(1, 2, 0.25)
    assert topo.bandwidth(1, 2) == 2.0 and topo.bandwidth(2, 1) == 2.0 and topo.bandwidth(0, 1) == 8.0
    with pytest.raises(TopologyError, match="must be a positive number"):
        T.ring(4).with_degraded_link(1, 2, 0)


# -- files and SPECs -----------------------------------------------------------------------------


def _same(a: Topology, b: Topology) -> None:
    assert a.ranks == b.ranks
    assert set(a.graph.nodes) == set(b.graph.nodes)
    assert {(u, v): (d["bandwidth"], d["latency"]) for u, v, d in a.graph.edges(data=True)} == \
        {(u, v): (d["bandwidth"], d["latency"]) for u, v, d in b.graph.edges(data=True)}
    assert dict(a.routes) == dict(b.routes)


@pytest.mark.parametrize("suffix", [".json", ".graphml"])
@pytest.mark.parametrize("spec", ["ring:5", "fattree:4", "cluster:2x3", "torus:3x4"])
def test_files_round_trip(tmp_path: object, spec: str, suffix: str) -> None:
    topo = T.from_spec(spec)
    if spec == "ring:5":
        topo = Topology(nx.DiGraph(topo.graph), "ring5", {(0, 2): (0, 4, 3, 2)})
    path = f"{tmp_path}/t{suffix}"
    T.save(topo, path)
    back = T.load(path)
    _same(topo, back)
    assert back.route(0, 2) == topo.route(0, 2)
    _same(T.from_spec(path), topo)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"format": "x"}, "topology.format: expected"),
        ({"extra": 1}, "topology: unknown field 'extra'"),
        ({"ranks": "2"}, r"topology.ranks: wrong type str"),
        ({"links": [{"src": 0, "dst": 9, "bandwidth": 1, "latency": 0}]}, r"topology.links\[0\].dst: unknown node 9"),
        ({"links": [{"src": 0, "dst": 1, "bandwidth": 1, "latency": 0, "color": 1}]},
         r"topology.links\[0\]: unknown field 'color'"),
        ({"links": [{"src": 0, "dst": 1, "latency": 0}]}, r"link 0 -> 1: missing attribute 'bandwidth'"),
        ({"routes": [{"src": 0, "dst": 1, "path": [0, 1], "via": 2}]}, r"topology.routes\[0\]: unknown field 'via'"),
    ],
)
def test_json_is_strict(doc: dict[str, object], message: str) -> None:
    base = json.loads(T.dumps(T.ring(2)))
    base.update(doc)
    with pytest.raises(TopologyError, match=message):
        T.loads(json.dumps(base))


def test_unreadable_files() -> None:
    with pytest.raises(TopologyError, match="not valid JSON"):
        T.loads("{")
    with pytest.raises(TopologyError, match=r"topology file /nonexistent/topo\.json: no such file"):
        T.from_spec("/nonexistent/topo.json")
    with pytest.raises(TopologyError, match=r"topology file missing\.graphml: no such file"):
        T.from_spec("missing.graphml")
    with pytest.raises(TopologyError, match="unknown topology 'nosuch'"):
        T.from_spec("nosuch")


@pytest.mark.parametrize(
    ("spec", "ranks", "links"),
    [("ring:8", 8, 16), ("uring:8", 8, 8), ("full:8", 8, 56), ("switch:8", 8, 16), ("torus:4x4", 16, 64),
     ("fattree:4", 16, 96), ("cluster:2x8", 16, 64), ("dgx-h100:2", 16, 80)],
)
def test_specs(spec: str, ranks: int, links: int) -> None:
    topo = T.from_spec(spec)
    assert (topo.ranks, len(topo.links), topo.name) == (ranks, links, spec)


def test_spec_overrides_every_link() -> None:
    topo = T.from_spec("dgx-h100:1", bandwidth=7.0, latency=3e-6)
    assert {d["bandwidth"] for *_e, d in topo.graph.edges(data=True)} == {7.0}
    assert {d["latency"] for *_e, d in topo.graph.edges(data=True)} == {3e-6}


@pytest.mark.parametrize("spec", ["ring", "ring:x", "torus:4", "torus:4x", "fattree:3", "ring:0", "mesh:4", "",
                                  "full:4096", "ring:100000", "fattree:100"])
def test_bad_specs(spec: str) -> None:
    with pytest.raises(TopologyError):
        T.from_spec(spec)


def test_bad_graphml_files(tmp_path: object) -> None:
    path = f"{tmp_path}/bad.graphml"
    with open(path, "w") as f:
        f.write("<graphml><graph")
    with pytest.raises(TopologyError, match="not a GraphML topology"):
        T.load(path)
    g = nx.DiGraph()
    g.add_edge("0", "1", bandwidth=1.0)
    g.add_edge("1", "0", bandwidth=1.0, latency=0.0)
    nx.write_graphml(g, path)
    with pytest.raises(TopologyError, match="link 0 -> 1: missing attribute 'latency'"):
        T.load(path)


def test_topology_strategy_rejects_bad_bounds() -> None:
    from sim.topology.strategies import topologies

    with pytest.raises(TopologyError, match="ranks must be an integer >= 1"):
        topologies(0)
    with pytest.raises(TopologyError, match="min_bandwidth"):
        topologies(2, min_bandwidth=0.0)


# -- the split: sim.topology still offers everything ----------------------------------------

# Every public name sim.topology offered before it was split into topology_graph, topology_builders
# and topology_io, written out here so that a name dropped from the re-exports fails this test.
_PUBLIC_BEFORE_THE_SPLIT = (
    "DEFAULT_BANDWIDTH DEFAULT_LATENCY FORMAT MAX_FILE_BYTES MAX_SPEC_RANKS NIC_BANDWIDTH NIC_LATENCY "
    "NVLINK_BANDWIDTH NVLINK_LATENCY SPEC_FORMS Link Node RouteLinks Topology TopologyError cluster dgx_h100 "
    "dumps fat_tree from_dict from_spec fully_connected load loads ring save single_switch to_dict torus "
    "unidirectional_ring"
).split()


# Added with the SPEC table (sim.topology.forms), the N-dimensional torus and the routing move (sim.topology.routing).
_ADDED_WITH_THE_TABLE = (
    "ROUTINGS TORUS_DIMENSIONS Form dimension_order_routes neighbour_routes parse_shape register_topology routed "
    "spec_forms topology_forms torus_dimension widest_routes"
).split()


def test_sim_topology_re_exports_every_name_of_its_parts() -> None:
    from sim.topology import builders, errors, files, forms, graph, routing

    assert sorted(T.__all__) == sorted(_PUBLIC_BEFORE_THE_SPLIT + _ADDED_WITH_THE_TABLE)
    for name in T.__all__:
        homes = [m for m in (graph, builders, files, forms, routing, errors) if name in m.__all__]
        assert homes, name
        assert all(getattr(T, name) is getattr(m, name) for m in homes), name
    assert set(dir(T)) >= set(T.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nosuch'"):
        T.nosuch  # noqa: B018
