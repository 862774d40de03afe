"""Network topologies: directed graphs of ranks and switches, with deterministic routing.

A topology is a networkx ``DiGraph`` whose nodes are the ranks ``0..p-1``
(ints) plus switch nodes (strings), and whose edges are links carrying
``bandwidth`` (bytes/s, > 0) and ``latency`` (s, >= 0). A message from rank
a to rank b follows one route: the explicit one from the route table when
given, else a shortest path by total latency, then by hop count, then by
widest bottleneck bandwidth. Where k next hops remain equal, the message
takes the one picked by the next base-k digit of b, among the candidates in
node order (ranks by number, then switches in insertion order): destination-
based spreading, as the two-level routing tables of Al-Fares et al. (below)
do in a fat tree.
There is no per-message multipath: like a static routing table, every
message between the same pair takes the same links.

Builders follow the usual shapes: rings (uni- and bidirectional), fully
connected, a single switch (star), a 2D torus, the k-ary fat tree of
Al-Fares, Loukissas & Vahdat, "A scalable, commodity data center network
architecture", SIGCOMM 2008, and a hierarchical cluster of N nodes with G GPUs
each (an NVLink-like switch inside every node, one NIC per GPU to a network
switch). ``dgx_h100`` is that cluster with DGX H100 figures.
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx

from algorithms.errors import CollschedError

__all__ = [
    "DEFAULT_BANDWIDTH",
    "DEFAULT_LATENCY",
    "FORMAT",
    "NIC_BANDWIDTH",
    "NIC_LATENCY",
    "NVLINK_BANDWIDTH",
    "NVLINK_LATENCY",
    "SPEC_FORMS",
    "Link",
    "Node",
    "Topology",
    "TopologyError",
    "cluster",
    "dgx_h100",
    "dumps",
    "fat_tree",
    "from_spec",
    "fully_connected",
    "load",
    "loads",
    "ring",
    "save",
    "single_switch",
    "torus",
    "unidirectional_ring",
]

Node = int | str
Link = tuple[Node, Node]
RouteLinks = tuple[tuple[int, ...], float]
"""Link ids along a route, and the route's total latency in seconds."""

FORMAT = "collsched.topology/1"
DEFAULT_BANDWIDTH = 50e9
"""Link bandwidth of the simple builders when none is given: 50 GB/s (one 400 Gb/s NIC)."""
DEFAULT_LATENCY = 1e-6
"""Link latency of the simple builders when none is given: 1 us."""
NVLINK_BANDWIDTH = 450e9
"""DGX H100: 18 NVLink-4 links of 25 GB/s per direction = 450 GB/s per GPU per direction to the NVSwitches."""
NVLINK_LATENCY = 0.5e-6
"""Per hop GPU <-> NVSwitch, so a GPU-to-GPU message inside a node sees 1 us."""
NIC_BANDWIDTH = 50e9
"""DGX H100: one ConnectX-7 NIC of 400 Gb/s = 50 GB/s per GPU per direction."""
NIC_LATENCY = 1e-6
"""Per hop GPU <-> network switch, so a message between nodes sees 2 us."""
MAX_FILE_BYTES = 64 * 1024 * 1024


class TopologyError(CollschedError, ValueError):
    """A topology, topology file or route is invalid; the message names the node, link or field."""


def _name(node: Node) -> str:
    return str(node)


def _link_name(u: Node, v: Node) -> str:
    return f"link {_name(u)} -> {_name(v)}"


def _positive_number(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


@dataclass(frozen=True, eq=False)
class Topology:
    """A validated network: a frozen DiGraph of ranks and switches, plus optional explicit routes.

    ``routes`` maps ``(src rank, dst rank)`` to the node path a message takes;
    pairs not listed use the deterministic shortest path (module docstring).
    """

    graph: nx.DiGraph
    name: str = "custom"
    routes: Mapping[tuple[int, int], tuple[Node, ...]] = field(default_factory=dict)
    ranks: int = field(init=False)
    links: tuple[Link, ...] = field(init=False, repr=False)
    _link_id: dict[Link, int] = field(init=False, repr=False)
    _order: dict[Node, int] = field(init=False, repr=False)
    _nodes: list[Node] = field(init=False, repr=False)
    _succ: list[list[tuple[int, int, float]]] = field(init=False, repr=False)
    _pred: list[list[tuple[int, int, float]]] = field(init=False, repr=False)
    _cache: dict[tuple[int, int], tuple[tuple[int, ...], float]] = field(init=False, repr=False)
    _cheapest: dict[tuple[str, Node], int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        g = self.graph
        if not isinstance(g, nx.DiGraph) or g.is_multigraph():
            raise TopologyError("a topology is a networkx DiGraph (not a multigraph)")
        p = _check_nodes(g)
        _check_links(g)
        frozen = nx.freeze(g.copy()) if not nx.is_frozen(g) else g
        object.__setattr__(self, "graph", frozen)
        object.__setattr__(self, "ranks", p)
        switches = [n for n in g.nodes if not isinstance(n, int)]
        order: dict[Node, int] = {r: r for r in range(p)}
        order.update((s, p + i) for i, s in enumerate(switches))
        object.__setattr__(self, "_order", order)
        # Routing works on node numbers and plain lists: networkx views are too slow for
        # a shortest-path tree per destination on thousands of nodes.
        nodes: list[Node] = [*range(p), *switches]
        succ: list[list[tuple[int, int, float]]] = [[] for _ in nodes]
        pred: list[list[tuple[int, int, float]]] = [[] for _ in nodes]
        for u, v, a in g.edges(data=True):
            iu, iv, lat, bw = order[u], order[v], _fs(a["latency"]), float(a["bandwidth"])
            succ[iu].append((iv, lat, bw))
            pred[iv].append((iu, lat, bw))
        object.__setattr__(self, "_nodes", nodes)
        object.__setattr__(self, "_succ", succ)
        object.__setattr__(self, "_pred", pred)
        links = tuple(g.edges)
        object.__setattr__(self, "links", links)
        object.__setattr__(self, "_link_id", {e: i for i, e in enumerate(links)})
        object.__setattr__(self, "_cache", {})
        object.__setattr__(self, "_cheapest", {})
        for key in self.routes:
            if not (isinstance(key, tuple) and len(key) == 2):
                raise TopologyError(f"route key {key!r}: expected a (src rank, dst rank) pair")
        object.__setattr__(self, "routes", {k: tuple(v) for k, v in dict(self.routes).items()})
        for (a, b), path in self.routes.items():
            self._check_route(a, b, path)
        _check_reachable(g, p)

    # -- link attributes ---------------------------------------------------------------

    def bandwidth(self, u: Node, v: Node) -> float:
        """Bandwidth of link u -> v in bytes/s."""
        return float(self.graph.edges[u, v]["bandwidth"])

    def latency(self, u: Node, v: Node) -> float:
        """Latency of link u -> v in seconds."""
        return float(self.graph.edges[u, v]["latency"])

    def link_bandwidths(self) -> list[float]:
        """Bandwidth of every link, indexed like ``links``."""
        return [float(self.graph.edges[e]["bandwidth"]) for e in self.links]

    def link_id(self, u: Node, v: Node) -> int:
        """Index of link u -> v in ``links``."""
        try:
            return self._link_id[(u, v)]
        except KeyError:
            raise TopologyError(f"{_link_name(u, v)} does not exist") from None

    # -- routing ---------------------------------------------------------------------

    def route(self, src: int, dst: int) -> tuple[Node, ...]:
        """The node path a message from rank src to rank dst takes (``(src,)`` when src == dst)."""
        self._check_rank(src)
        self._check_rank(dst)
        if src == dst:
            return (src,)
        explicit = self.routes.get((src, dst))
        if explicit is not None:
            return explicit
        direct = self._direct(src, dst)
        if direct is not None:
            return direct
        return self._walk(src, dst, self._tree(dst))

    def route_links(self, src: int, dst: int) -> tuple[tuple[int, ...], float]:
        """Link ids along the route from src to dst, and the route's total latency (cached)."""
        hit = self._cache.get((src, dst))
        if hit is None:
            hit = self._remember(src, dst, self.route(src, dst))
        return hit

    def route_links_many(self, pairs: Iterable[tuple[int, int]]) -> dict[tuple[int, int], RouteLinks]:
        """``route_links`` for many pairs at once, building each destination's tree only once."""
        out: dict[tuple[int, int], RouteLinks] = {}
        by_dst: dict[int, list[int]] = {}
        for src, dst in pairs:
            hit = self._cache.get((src, dst))
            if hit is not None:
                out[(src, dst)] = hit
            elif src == dst or (src, dst) in self.routes or self._direct(src, dst) is not None:
                out[(src, dst)] = self.route_links(src, dst)
            else:
                self._check_rank(src)
                self._check_rank(dst)
                by_dst.setdefault(dst, []).append(src)
        for dst, srcs in by_dst.items():
            tree = self._tree(dst)
            for src in srcs:
                out[(src, dst)] = self._remember(src, dst, self._walk(src, dst, tree))
        return out

    def _remember(self, src: int, dst: int, path: tuple[Node, ...]) -> tuple[tuple[int, ...], float]:
        ids = tuple(self._link_id[(path[i], path[i + 1])] for i in range(len(path) - 1))
        lat = 0.0
        for i in range(len(path) - 1):
            lat += self.graph.edges[path[i], path[i + 1]]["latency"]
        self._cache[(src, dst)] = (ids, lat)
        return ids, lat

    def _direct(self, src: int, dst: int) -> tuple[Node, ...] | None:
        """(src, dst) when the direct link is the shortest route, else None.

        Exact: any path of two or more hops costs at least the cheapest link
        out of src plus the cheapest link into dst, and loses ties on hop
        count. Keeps all-to-all on a large full mesh cheap.
        """
        direct = self.graph.get_edge_data(src, dst)
        if direct is not None and _fs(direct["latency"]) <= self._min_out(src) + self._min_in(dst):
            return (src, dst)
        return None

    def _tree(self, dst: int) -> tuple[list[int], list[int], list[float]]:
        """For every node (by number): latency in fs, hops and widest bottleneck of its best routes to dst.

        Dijkstra from dst over reversed links on (latency, hops), latencies in
        integer femtoseconds so that equal routes tie exactly; then, nearest
        first, the widest bottleneck bandwidth among each node's tight links.
        Nodes that cannot reach dst keep hops -1.
        """
        n = len(self._nodes)
        lat = [_NO_PATH] * n
        hops = [-1] * n
        lat[dst], hops[dst] = 0, 0
        heap: list[tuple[int, int, int]] = [(0, 0, dst)]
        done: list[int] = []
        seen = [False] * n
        pred = self._pred
        while heap:
            dl, dh, v = heapq.heappop(heap)
            if seen[v]:
                continue
            seen[v] = True
            done.append(v)
            for u, ul, _bw in pred[v]:
                if not seen[u]:
                    cl, ch = dl + ul, dh + 1
                    if cl < lat[u] or (cl == lat[u] and ch < hops[u]):
                        lat[u], hops[u] = cl, ch
                        heapq.heappush(heap, (cl, ch, u))
        for u in range(n):
            if not seen[u]:
                hops[u] = -1
        widest = [0.0] * n
        widest[dst] = math.inf
        succ = self._succ
        for u in done[1:]:
            best = 0.0
            for v, vl, bw in succ[u]:
                if hops[v] + 1 == hops[u] and hops[v] >= 0 and lat[v] + vl == lat[u]:
                    w = bw if bw < widest[v] else widest[v]
                    if w > best:
                        best = w
            widest[u] = best
        return lat, hops, widest

    def _walk(self, src: int, dst: int, tree: tuple[list[int], list[int], list[float]]) -> tuple[Node, ...]:
        """Follow best next hops from src to dst; among k equals, pick by the next base-k digit of dst.

        The first choice is the (dst mod k)-th candidate in node order, the
        next uses dst // k, and so on: different destinations spread over all
        equal paths, as the two-level tables of Al-Fares et al. 2008 do in a
        fat tree (uplink by destination, then core by destination).
        """
        lat, hops, widest = tree
        if hops[src] < 0:
            raise TopologyError(f"rank {src} cannot reach rank {dst}")
        succ, nodes = self._succ, self._nodes
        path: list[Node] = [src]
        u = src
        digits = dst  # consumed in mixed radix, so that successive choices are independent
        while u != dst:
            nexts = sorted(v for v, vl, bw in succ[u]
                           if hops[v] >= 0 and hops[v] + 1 == hops[u] and lat[v] + vl == lat[u]
                           and min(bw, widest[v]) == widest[u])
            if len(nexts) > 1:
                digits, pick = divmod(digits, len(nexts))
                u = nexts[pick]
            else:
                u = nexts[0]
            path.append(nodes[u])
        return tuple(path)

    def _min_out(self, u: Node) -> int:
        hit = self._cheapest.get(("out", u))
        if hit is None:
            hit = self._cheapest[("out", u)] = min(
                (_fs(a["latency"]) for a in self.graph.adj[u].values()), default=_NO_PATH)
        return hit

    def _min_in(self, v: Node) -> int:
        hit = self._cheapest.get(("in", v))
        if hit is None:
            hit = self._cheapest[("in", v)] = min(
                (_fs(a["latency"]) for a in self.graph.pred[v].values()), default=_NO_PATH)
        return hit

    def _check_rank(self, r: object) -> None:
        if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < self.ranks:
            raise TopologyError(f"rank {r!r} out of range for a topology of {self.ranks} ranks")

    def _check_route(self, src: int, dst: int, path: Sequence[Node]) -> None:
        self._check_rank(src)
        self._check_rank(dst)
        where = f"route {src} -> {dst}"
        if len(path) < 2 or path[0] != src or path[-1] != dst:
            raise TopologyError(f"{where}: path {list(path)} must start at {src} and end at {dst}")
        for u, v in itertools.pairwise(path):
            if not self.graph.has_edge(u, v):
                raise TopologyError(f"{where}: {_link_name(u, v)} does not exist")

    # -- variants ------------------------------------------------------------------------

    def with_links(self, *, bandwidth: float | None = None, latency: float | None = None) -> Topology:
        """A copy with every link's bandwidth and/or latency set to the given value."""
        g = self.graph.copy()
        for _u, _v, attrs in g.edges(data=True):
            if bandwidth is not None:
                attrs["bandwidth"] = bandwidth
            if latency is not None:
                attrs["latency"] = latency
        return Topology(g, self.name, self.routes)

    def with_link_down(self, u: Node, v: Node) -> Topology:
        """A copy without the cable u - v (both directions); routes through it are recomputed.

        Raises ``TopologyError`` when the link does not exist, or when a rank
        can no longer reach another.
        """
        g = self.graph.copy()
        gone = [(a, b) for a, b in ((u, v), (v, u)) if g.has_edge(a, b)]
        if not gone:
            raise TopologyError(f"cannot take down {_link_name(u, v)}: no such link")
        g.remove_edges_from(gone)
        routes = {k: path for k, path in self.routes.items()
                  if not any(e in gone for e in itertools.pairwise(path))}
        try:
            return Topology(g, f"{self.name} ({_name(u)}-{_name(v)} down)", routes)
        except TopologyError as e:
            raise TopologyError(f"with {_link_name(u, v)} down: {e}") from None

    def with_degraded_link(self, u: Node, v: Node, factor: float) -> Topology:
        """A copy where the cable u - v (both directions) runs at ``factor`` of its bandwidth."""
        if not _positive_number(factor) or not 0 < factor:
            raise TopologyError(f"degradation factor for {_link_name(u, v)} must be a positive number, got {factor!r}")
        g = self.graph.copy()
        found = False
        for a, b in ((u, v), (v, u)):
            if g.has_edge(a, b):
                g.edges[a, b]["bandwidth"] = g.edges[a, b]["bandwidth"] * factor
                found = True
        if not found:
            raise TopologyError(f"cannot degrade {_link_name(u, v)}: no such link")
        return Topology(g, self.name, self.routes)

    def describe(self) -> str:
        """One line: name, ranks, switches, links."""
        switches = self.graph.number_of_nodes() - self.ranks
        return f"{self.name}: {self.ranks} ranks, {switches} switches, {len(self.links)} links"


_NO_PATH = 1 << 62


def _fs(seconds: float) -> int:
    """A latency in integer femtoseconds, so that sums of equal latencies tie exactly when routing."""
    return round(seconds * 1e15)


def _check_nodes(g: nx.DiGraph) -> int:
    ranks = [n for n in g.nodes if isinstance(n, int) and not isinstance(n, bool)]
    for n in g.nodes:
        if isinstance(n, bool) or not isinstance(n, int | str):
            raise TopologyError(f"node {n!r}: nodes are ranks (int) or switches (str)")
        if isinstance(n, str) and not n:
            raise TopologyError("node '': a switch needs a non-empty name")
    p = len(ranks)
    if p == 0:
        raise TopologyError("the topology has no rank nodes (ints 0..p-1)")
    missing = sorted(set(range(p)) - set(ranks))
    if missing:
        raise TopologyError(f"rank {missing[0]} is missing: ranks must be numbered 0..{p - 1}")
    return p


def _check_links(g: nx.DiGraph) -> None:
    for u, v, attrs in g.edges(data=True):
        if u == v:
            raise TopologyError(f"{_link_name(u, v)}: a link cannot loop back to its node")
        for name in ("bandwidth", "latency"):
            if name not in attrs:
                raise TopologyError(f"{_link_name(u, v)}: missing attribute {name!r}")
            if not _positive_number(attrs[name]):
                raise TopologyError(f"{_link_name(u, v)}: {name} must be a finite number, got {attrs[name]!r}")
        if attrs["bandwidth"] <= 0:
            raise TopologyError(f"{_link_name(u, v)}: bandwidth must be positive, got {attrs['bandwidth']!r}")
        if attrs["latency"] < 0:
            raise TopologyError(f"{_link_name(u, v)}: latency must be >= 0, got {attrs['latency']!r}")


def _check_reachable(g: nx.DiGraph, p: int) -> None:
    if p == 1:
        return
    down = nx.descendants(g, 0)
    up = nx.ancestors(g, 0)
    for r in range(1, p):
        if r not in down:
            raise TopologyError(f"rank {r} is unreachable: no path from rank 0 to rank {r}")
        if r not in up:
            raise TopologyError(f"rank {r} is unreachable: no path from rank {r} to rank 0")


# -- builders ------------------------------------------------------------------------------


def _graph(p: int, what: str) -> nx.DiGraph:
    if isinstance(p, bool) or not isinstance(p, int) or p < 1:
        raise TopologyError(f"{what}: ranks must be an integer >= 1, got {p!r}")
    g = nx.DiGraph()
    g.add_nodes_from(range(p))
    return g


def _link(g: nx.DiGraph, u: Node, v: Node, bandwidth: float, latency: float, *, both: bool = True) -> None:
    g.add_edge(u, v, bandwidth=bandwidth, latency=latency)
    if both:
        g.add_edge(v, u, bandwidth=bandwidth, latency=latency)


def ring(p: int, *, bandwidth: float = DEFAULT_BANDWIDTH, latency: float = DEFAULT_LATENCY) -> Topology:
    """Bidirectional ring: rank r linked both ways to r+1 (mod p)."""
    g = _graph(p, "ring")
    for r in range(p if p > 2 else p - 1):
        _link(g, r, (r + 1) % p, bandwidth, latency)
    return Topology(g, f"ring:{p}")


def unidirectional_ring(p: int, *, bandwidth: float = DEFAULT_BANDWIDTH,
                        latency: float = DEFAULT_LATENCY) -> Topology:
    """Unidirectional ring: one link r -> r+1 (mod p) per rank."""
    g = _graph(p, "uring")
    for r in range(p if p > 1 else 0):
        _link(g, r, (r + 1) % p, bandwidth, latency, both=False)
    return Topology(g, f"uring:{p}")


def fully_connected(p: int, *, bandwidth: float = DEFAULT_BANDWIDTH, latency: float = DEFAULT_LATENCY) -> Topology:
    """Full mesh: a dedicated link each way between every pair of ranks."""
    g = _graph(p, "full")
    for u in range(p):
        for v in range(p):
            if u != v:
                g.add_edge(u, v, bandwidth=bandwidth, latency=latency)
    return Topology(g, f"full:{p}")


def single_switch(p: int, *, bandwidth: float = DEFAULT_BANDWIDTH, latency: float = DEFAULT_LATENCY) -> Topology:
    """Star: every rank linked both ways to one switch ``"switch"`` (a message crosses two links)."""
    g = _graph(p, "switch")
    for r in range(p):
        _link(g, r, "switch", bandwidth, latency)
    return Topology(g, f"switch:{p}")


def torus(rows: int, cols: int, *, bandwidth: float = DEFAULT_BANDWIDTH,
          latency: float = DEFAULT_LATENCY) -> Topology:
    """2D torus of rows x cols ranks (rank = row·cols + col), wrap-around links both ways in both dimensions."""
    for v, what in ((rows, "rows"), (cols, "cols")):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise TopologyError(f"torus: {what} must be an integer >= 1, got {v!r}")
    g = _graph(rows * cols, "torus")
    for i in range(rows):
        for j in range(cols):
            r = i * cols + j
            if cols > 1:
                _link(g, r, i * cols + (j + 1) % cols, bandwidth, latency)
            if rows > 1:
                _link(g, r, ((i + 1) % rows) * cols + j, bandwidth, latency)
    return Topology(g, f"torus:{rows}x{cols}")


def fat_tree(k: int, *, bandwidth: float = DEFAULT_BANDWIDTH, latency: float = DEFAULT_LATENCY) -> Topology:
    """k-ary fat tree (Al-Fares et al. 2008): k pods of k/2 edge and k/2 aggregation switches,
    (k/2)^2 core switches, k^3/4 ranks (k/2 per edge switch); every link at the same bandwidth."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 2 or k % 2:
        raise TopologyError(f"fattree: k must be an even integer >= 2, got {k!r}")
    h = k // 2
    g = _graph(k * h * h, "fattree")
    for pod in range(k):
        for e in range(h):
            edge = f"edge{pod}.{e}"
            for i in range(h):
                _link(g, (pod * h + e) * h + i, edge, bandwidth, latency)
        for a in range(h):
            agg = f"agg{pod}.{a}"
            for e in range(h):
                _link(g, f"edge{pod}.{e}", agg, bandwidth, latency)
            for c in range(h):
                _link(g, agg, f"core{a * h + c}", bandwidth, latency)
    return Topology(g, f"fattree:{k}")


def cluster(nodes: int, gpus: int, *, nvlink_bandwidth: float = NVLINK_BANDWIDTH,
            nvlink_latency: float = NVLINK_LATENCY, nic_bandwidth: float = NIC_BANDWIDTH,
            nic_latency: float = NIC_LATENCY, name: str | None = None) -> Topology:
    """Hierarchical cluster: ``nodes`` x ``gpus`` ranks (rank = node·gpus + gpu).

    Inside node n every GPU links both ways to the switch ``"node{n}"``
    (NVLink/NVSwitch-like); every GPU also has one NIC, linked both ways to
    the switch ``"net"``. Messages inside a node take the node switch (lower
    latency, and it comes first on ties); messages between nodes take the NICs.
    """
    for v, what in ((nodes, "nodes"), (gpus, "gpus")):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise TopologyError(f"cluster: {what} must be an integer >= 1, got {v!r}")
    g = _graph(nodes * gpus, "cluster")
    for n in range(nodes):
        for i in range(gpus):
            _link(g, n * gpus + i, f"node{n}", nvlink_bandwidth, nvlink_latency)
    if nodes > 1:
        for r in range(nodes * gpus):
            _link(g, r, "net", nic_bandwidth, nic_latency)
    return Topology(g, name or f"cluster:{nodes}x{gpus}")


def dgx_h100(nodes: int) -> Topology:
    """``nodes`` DGX H100 systems: 8 GPUs each at 450 GB/s per direction to the NVSwitches
    (18 NVLink-4 links x 25 GB/s), and one 400 Gb/s (50 GB/s) ConnectX-7 NIC per GPU
    to a non-blocking network switch; 0.5 us per NVLink hop, 1 us per network hop."""
    return cluster(nodes, 8, name=f"dgx-h100:{nodes}")


# -- the SPEC syntax ------------------------------------------------------------------------

SPEC_FORMS = "ring:P, uring:P, full:P, switch:P, torus:RxC, fattree:K, cluster:NxG, dgx-h100:N, or a topology file"


def _ints(text: str, count: int, spec: str) -> list[int]:
    parts = text.lower().split("x")
    if len(parts) != count or not all(re.fullmatch(r"[0-9]+", s) for s in parts):
        shape = "x".join("N" * 1 for _ in range(count))
        raise TopologyError(f"topology {spec!r}: expected {shape} after the colon, got {text!r}")
    return [int(s) for s in parts]


_SIMPLE: dict[str, Callable[..., Topology]] = {
    "ring": ring,
    "uring": unidirectional_ring,
    "full": fully_connected,
    "switch": single_switch,
    "fattree": fat_tree,
}


MAX_SPEC_RANKS = 1 << 16
"""Largest world a SPEC may build (a full mesh: 2048 ranks, about 4 M links)."""


def _bounded(spec: str, ranks: int, limit: int = MAX_SPEC_RANKS) -> None:
    if ranks > limit:
        raise TopologyError(f"topology {spec!r}: {ranks} ranks is more than the {limit} a SPEC may build")


def from_spec(spec: str, *, bandwidth: float | None = None, latency: float | None = None) -> Topology:
    """The topology a SPEC names (``SPEC_FORMS``); ``bandwidth``/``latency``, when given, set every link."""
    m = re.fullmatch(r"([a-z][a-z0-9-]*):(.+)", spec.strip())
    topo: Topology
    if m and m.group(1) in (*_SIMPLE, "torus", "cluster", "dgx-h100"):
        kind, arg = m.group(1), m.group(2)
        if kind in _SIMPLE:
            (n,) = _ints(arg, 1, spec)
            _bounded(spec, n if kind != "fattree" else n**3 // 4, 2048 if kind == "full" else MAX_SPEC_RANKS)
            topo = _SIMPLE[kind](n)
        elif kind == "torus":
            rows, cols = _ints(arg, 2, spec)
            _bounded(spec, rows * cols)
            topo = torus(rows, cols)
        elif kind == "cluster":
            nodes, gpus = _ints(arg, 2, spec)
            _bounded(spec, nodes * gpus)
            topo = cluster(nodes, gpus)
        else:
            (n,) = _ints(arg, 1, spec)
            _bounded(spec, 8 * n)
            topo = dgx_h100(n)
    elif os.path.exists(spec):
        topo = load(spec)
    else:
        raise TopologyError(f"unknown topology {spec!r}: expected {SPEC_FORMS}")
    if bandwidth is not None or latency is not None:
        topo = topo.with_links(bandwidth=bandwidth, latency=latency)
    return topo


# -- files -----------------------------------------------------------------------------------


def to_dict(topology: Topology) -> dict[str, Any]:
    """The ``collsched.topology/1`` document of a topology."""
    g = topology.graph
    return {
        "format": FORMAT,
        "name": topology.name,
        "ranks": topology.ranks,
        "switches": [n for n in g.nodes if isinstance(n, str)],
        "links": [{"src": u, "dst": v, "bandwidth": a["bandwidth"], "latency": a["latency"]}
                  for u, v, a in g.edges(data=True)],
        "routes": [{"src": s, "dst": d, "path": list(path)} for (s, d), path in sorted(topology.routes.items())],
    }


def dumps(topology: Topology) -> str:
    """The topology as ``collsched.topology/1`` JSON text."""
    return json.dumps(to_dict(topology), indent=1)


def _field(doc: Mapping[str, Any], key: str, kinds: type | tuple[type, ...], where: str) -> Any:
    if key not in doc:
        raise TopologyError(f"{where}: missing field {key!r}")
    value = doc[key]
    if isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,)):
        raise TopologyError(f"{where}.{key}: wrong type {type(value).__name__}")
    if not isinstance(value, kinds):
        raise TopologyError(f"{where}.{key}: wrong type {type(value).__name__}")
    return value


def _only(doc: Mapping[str, Any], keys: Iterable[str], where: str) -> None:
    extra = sorted(set(doc) - set(keys))
    if extra:
        raise TopologyError(f"{where}: unknown field {extra[0]!r}")


def _node(value: object, where: str) -> Node:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TopologyError(f"{where}: a node is a rank (int) or a switch name (str), got {value!r}")
    return value


def from_dict(doc: object) -> Topology:
    """Build a topology from a ``collsched.topology/1`` document, strictly checked."""
    if not isinstance(doc, dict):
        raise TopologyError("topology: the document must be a JSON object")
    _only(doc, ("format", "name", "ranks", "switches", "links", "routes"), "topology")
    if doc.get("format") != FORMAT:
        raise TopologyError(f"topology.format: expected {FORMAT!r}, got {doc.get('format')!r}")
    name = _field(doc, "name", str, "topology")
    p = _field(doc, "ranks", int, "topology")
    if p < 1:
        raise TopologyError(f"topology.ranks: must be >= 1, got {p}")
    g = nx.DiGraph()
    g.add_nodes_from(range(p))
    for i, s in enumerate(_field(doc, "switches", list, "topology")):
        if not isinstance(s, str) or not s:
            raise TopologyError(f"topology.switches[{i}]: a switch name is a non-empty string, got {s!r}")
        g.add_node(s)
    for i, link in enumerate(_field(doc, "links", list, "topology")):
        where = f"topology.links[{i}]"
        if not isinstance(link, dict):
            raise TopologyError(f"{where}: must be an object")
        _only(link, ("src", "dst", "bandwidth", "latency"), where)
        u = _node(_field(link, "src", (int, str), where), f"{where}.src")
        v = _node(_field(link, "dst", (int, str), where), f"{where}.dst")
        for n, key in ((u, "src"), (v, "dst")):
            if n not in g:
                raise TopologyError(f"{where}.{key}: unknown node {n!r} (ranks 0..{p - 1} or a listed switch)")
        attrs = {k: link[k] for k in ("bandwidth", "latency") if k in link}
        if g.has_edge(u, v):
            raise TopologyError(f"{where}: {_link_name(u, v)} is listed twice")
        g.add_edge(u, v, **attrs)
    routes: dict[tuple[int, int], tuple[Node, ...]] = {}
    for i, r in enumerate(_field(doc, "routes", list, "topology") if "routes" in doc else []):
        where = f"topology.routes[{i}]"
        if not isinstance(r, dict):
            raise TopologyError(f"{where}: must be an object")
        _only(r, ("src", "dst", "path"), where)
        s, d = _field(r, "src", int, where), _field(r, "dst", int, where)
        path = _field(r, "path", list, where)
        routes[(s, d)] = tuple(_node(n, f"{where}.path") for n in path)
    return Topology(g, name, routes)


def loads(text: str) -> Topology:
    """Parse ``collsched.topology/1`` JSON text."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise TopologyError(f"topology: not valid JSON ({e.msg} at line {e.lineno})") from None
    return from_dict(doc)


def _is_graphml(path: str | os.PathLike[str]) -> bool:
    return str(path).lower().endswith((".graphml", ".xml"))


def load(path: str | os.PathLike[str]) -> Topology:
    """Load a topology file: GraphML when the name ends in .graphml, else collsched.topology/1 JSON."""
    try:
        size = os.path.getsize(path)
        if size > MAX_FILE_BYTES:
            raise TopologyError(f"{path}: file of {size} bytes exceeds the {MAX_FILE_BYTES}-byte limit")
        if _is_graphml(path):
            return _load_graphml(path)
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise TopologyError(f"cannot read {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise TopologyError(f"{path}: not UTF-8 text") from None
    try:
        return loads(text)
    except TopologyError as e:
        raise TopologyError(f"{path}: {e}") from None


def save(topology: Topology, path: str | os.PathLike[str]) -> None:
    """Write a topology file: GraphML when the name ends in .graphml, else collsched.topology/1 JSON."""
    if _is_graphml(path):
        g = nx.DiGraph(topology.graph)
        g.graph.update(format=FORMAT, name=topology.name, ranks=topology.ranks,
                       routes=json.dumps([[s, d, list(pth)] for (s, d), pth in sorted(topology.routes.items())]))
        for n in g.nodes:
            g.nodes[n]["kind"] = "rank" if isinstance(n, int) else "switch"
        nx.write_graphml(g, path)
    else:
        Path(path).write_text(dumps(topology), encoding="utf-8")


def _load_graphml(path: str | os.PathLike[str]) -> Topology:
    try:
        raw = nx.read_graphml(path)
    except Exception as e:  # networkx and ElementTree raise several unrelated types on bad XML
        raise TopologyError(f"{path}: not a GraphML topology ({e})") from None
    if not isinstance(raw, nx.DiGraph) or raw.is_multigraph():
        raise TopologyError(f"{path}: the GraphML graph must be directed and simple")
    rename: dict[Any, Node] = {}
    for n, attrs in raw.nodes(data=True):
        kind = attrs.get("kind", "rank" if re.fullmatch(r"[0-9]+", str(n)) else "switch")
        if kind == "rank":
            if not re.fullmatch(r"[0-9]+", str(n)):
                raise TopologyError(f"{path}: node {n!r} is marked as a rank but its id is not a number")
            rename[n] = int(n)
        elif kind == "switch":
            rename[n] = str(n)
        else:
            raise TopologyError(f"{path}: node {n!r} has unknown kind {kind!r} (rank or switch)")
    g = nx.DiGraph()
    g.add_nodes_from(sorted(v for v in rename.values() if isinstance(v, int)))
    g.add_nodes_from(v for v in rename.values() if isinstance(v, str))
    for u, v, attrs in raw.edges(data=True):
        g.add_edge(rename[u], rename[v], **{k: attrs[k] for k in ("bandwidth", "latency") if k in attrs})
    routes: dict[tuple[int, int], tuple[Node, ...]] = {}
    text = raw.graph.get("routes")
    if text:
        try:
            items = json.loads(text)
            for s, d, pth in items:
                routes[(int(s), int(d))] = tuple(pth)
        except (ValueError, TypeError):
            raise TopologyError(f"{path}: graph attribute 'routes' is not a JSON list of [src, dst, path]") from None
    try:
        return Topology(g, str(raw.graph.get("name", Path(path).stem)), routes)
    except TopologyError as e:
        raise TopologyError(f"{path}: {e}") from None
