"""The network a schedule runs on: ``Topology``, a directed graph of ranks and switches with deterministic routing.

A topology is a networkx ``DiGraph`` whose nodes are the ranks ``0..p-1``
(ints) plus switch nodes (strings), and whose edges are links carrying
``bandwidth`` (bytes/s, > 0) and ``latency`` (s, >= 0). A message from rank
a to rank b follows one route: the explicit one from the route table when
given, else a shortest path by total latency, then by hop count, then by
widest bottleneck bandwidth. Where k next hops remain equal, the message
takes the one picked by the next base-k digit of b, among the candidates in
node order (ranks by number, then switches in insertion order): destination-
based spreading, as the two-level routing tables of Al-Fares et al.
(``sim.topology.builders``) do in a fat tree.
Like a static routing table, every message between the same pair takes the
same links, unless it names a *way* w > 0 (``Schedule.ways``): then every
choice among k equal next hops on its walk is turned w places on (the
(digit + w) mod k-th candidate), so way 1 takes the other half-way direction
round a ring where way 0 takes one. Explicit routes and a shortest direct
link have no alternatives and ignore the way.

The builders are in ``sim.topology.builders``, the files in ``sim.topology.files``;
``sim.topology`` gathers all three.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import networkx as nx

from sim.topology.errors import TopologyError
from sim.topology.symmetry import DomainSymmetry, domain_symmetry

__all__ = ["Link", "Node", "RouteLinks", "Topology", "TopologyError"]

Node = int | str
Link = tuple[Node, Node]
RouteLinks = tuple[tuple[int, ...], float]
"""Link ids along a route, and the route's total latency in seconds."""


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
    _hinted: dict[tuple[int, int, int], RouteLinks] = field(init=False, repr=False)
    _cheapest: dict[tuple[str, Node], int] = field(init=False, repr=False)
    _routed: list[frozenset[int]] = field(init=False, repr=False)
    _pred_sorted: list[list[list[tuple[int, int, float]]]] = field(init=False, repr=False)
    _symmetry: list[DomainSymmetry | None] = field(init=False, repr=False)

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
        object.__setattr__(self, "_hinted", {})
        object.__setattr__(self, "_cheapest", {})
        object.__setattr__(self, "_routed", [])
        object.__setattr__(self, "_pred_sorted", [])
        object.__setattr__(self, "_symmetry", [])
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

    def route(self, src: int, dst: int, *, way: int = 0) -> tuple[Node, ...]:
        """The node path a message from rank src to rank dst takes (``(src,)`` when src == dst); ``way``: which
        of the tied shortest routes (module docstring; 0 the default)."""
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
        return self._walk(src, dst, self._tree(dst), way)

    def route_links(self, src: int, dst: int, *, way: int = 0) -> tuple[tuple[int, ...], float]:
        """Link ids along the route from src to dst (by ``way``, as ``route``), and its total latency (cached)."""
        if way:
            hinted = self._hinted.get((src, dst, way))
            if hinted is None:
                hinted = self._hinted[(src, dst, way)] = self._links(self.route(src, dst, way=way))
            return hinted
        hit = self._cache.get((src, dst))
        if hit is None:
            hit = self._remember(src, dst, self.route(src, dst))
        return hit

    def route_links_ways(self, keys: Iterable[tuple[int, int, int]]) -> dict[tuple[int, int, int], RouteLinks]:
        """``route_links`` of many (src, dst, way) keys: ``route_links_many`` once per way."""
        by_way: dict[int, list[tuple[int, int]]] = {}
        for src, dst, way in keys:
            by_way.setdefault(way, []).append((src, dst))
        out: dict[tuple[int, int, int], RouteLinks] = {}
        for way, pairs in by_way.items():
            out.update(((s, d, way), r) for (s, d), r in self.route_links_many(pairs, way=way).items())
        return out

    def route_links_many(self, pairs: Iterable[tuple[int, int]], *,
                         way: int = 0) -> dict[tuple[int, int], RouteLinks]:
        """``route_links`` for many pairs at once (all by ``way``), building each destination's tree only once."""
        if way:
            return self._route_links_way(pairs, way)
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
        from sim.topology.torus_routes import torus_route_links  # closed form on a plain torus, else None

        walked = torus_route_links(self, [(s, d) for d, ss in by_dst.items() for s in ss]) if by_dst else None
        if walked is not None:
            self._cache.update(walked)
            out.update(walked)
            by_dst = {}
        for dst, srcs in by_dst.items():
            tree = self._tree(dst)
            for src in srcs:
                out[(src, dst)] = self._remember(src, dst, self._walk(src, dst, tree))
        return out

    def _route_links_way(self, pairs: Iterable[tuple[int, int]], way: int) -> dict[tuple[int, int], RouteLinks]:
        """``route_links_many`` by a way > 0: the torus's closed form, else one tree per destination."""
        from sim.topology.torus_routes import torus_route_links

        out: dict[tuple[int, int], RouteLinks] = {}
        by_dst: dict[int, list[int]] = {}
        for src, dst in pairs:
            hit = self._hinted.get((src, dst, way))
            if hit is not None:
                out[(src, dst)] = hit
            elif src == dst or (src, dst) in self.routes or self._direct(src, dst) is not None:
                out[(src, dst)] = self.route_links(src, dst, way=way)
            else:
                self._check_rank(src)
                self._check_rank(dst)
                by_dst.setdefault(dst, []).append(src)
        todo = [(s, d) for d, ss in by_dst.items() for s in ss]
        walked = torus_route_links(self, todo, way=way) if todo else None
        if walked is None:
            walked = {}
            for dst, srcs in by_dst.items():
                tree = self._tree(dst)
                walked.update(((src, dst), self._links(self._walk(src, dst, tree, way))) for src in srcs)
        self._hinted.update(((s, d, way), r) for (s, d), r in walked.items())
        out.update(walked)
        return out

    def route_many(self, pairs: Iterable[tuple[int, int]]) -> dict[tuple[int, int], tuple[Node, ...]]:
        """``route`` for many pairs at once: on a cluster of permutable domains (``sim.topology.symmetry``) one
        search per route shape, translated; else one search per destination, stopped at its sources."""
        out: dict[tuple[int, int], tuple[Node, ...]] = {}
        by_dst: dict[int, list[int]] = {}
        for src, dst in pairs:
            if src == dst or (src, dst) in self.routes or self._direct(src, dst) is not None:
                out[(src, dst)] = self.route(src, dst)
            else:
                self._check_rank(src)
                self._check_rank(dst)
                by_dst.setdefault(dst, []).append(src)
        sym = self.symmetry()
        if sym is not None and by_dst:
            by_dst = self._route_by_shape(sym, by_dst, out)
        for pair, (path, _only) in self._searched(by_dst).items():
            out[pair] = path
        return out

    def symmetry(self) -> DomainSymmetry | None:
        """The topology's domain symmetry (``sim.topology.symmetry.domain_symmetry``; cached)."""
        if not self._symmetry:
            self._symmetry.append(domain_symmetry(self))
        return self._symmetry[0]

    def _route_by_shape(self, sym: DomainSymmetry, by_dst: dict[int, list[int]],
                        out: dict[tuple[int, int], tuple[Node, ...]]) -> dict[int, list[int]]:
        """Route into ``out`` every pair whose shape's representative has one best route (``sim.topology.symmetry``):
        (0, i) to (0, j) or (1, j), searched once, then relabelled; the pairs left over, by destination."""
        size = sym.size
        shapes: dict[tuple[int, int], list[tuple[int, int]]] = {}
        for dst, srcs in by_dst.items():
            for src in srcs:
                shapes.setdefault((src % size, dst % size + (0 if src // size == dst // size else size)),
                                  []).append((src, dst))
        reps: dict[int, list[int]] = {}
        for i, rdst in shapes:
            reps.setdefault(rdst, []).append(i)
        left: dict[int, list[int]] = {}
        for (i, rdst), (path, only) in self._searched(reps).items():
            allowed = (0, None) if rdst < size else (0, 1, None)
            doms = [sym.domain(u) for u in path]
            if not only or any(d not in allowed for d in doms):
                for src, dst in shapes[(i, rdst)]:
                    left.setdefault(dst, []).append(src)
                continue
            # The route as a template: a rank by (domain 0 or 1, GPU), a domain switch by its domain, else itself.
            tpl = [(d, u % size if isinstance(u, int) else None, u) for u, d in zip(path, doms, strict=True)]
            for src, dst in shapes[(i, rdst)]:
                ends = (src // size, dst // size)
                out[(src, dst)] = tuple(u if d is None else ends[d] * size + g if g is not None else f"node{ends[d]}"
                                        for d, g, u in tpl)
        return left

    def _searched(self, by_dst: Mapping[int, Sequence[int]]) -> dict[tuple[int, int], tuple[tuple[Node, ...], bool]]:
        """``route`` of every (src, dst) of ``by_dst`` (sources by destination), and whether it is the only best
        route (no choice among equal next hops on the way)."""
        out: dict[tuple[int, int], tuple[tuple[Node, ...], bool]] = {}
        nodes = self._nodes
        for dst, srcs in by_dst.items():
            best = self._best_nexts(dst, srcs)
            for src in srcs:
                if src not in best:
                    raise TopologyError(f"rank {src} cannot reach rank {dst}")
                path: list[Node] = [src]
                u, digits, only = src, dst, True
                while u != dst:
                    only = only and len(best[u]) == 1
                    u, digits = _next_hop(best[u], digits)
                    path.append(nodes[u])
                out[(src, dst)] = (tuple(path), only)
        return out

    def _best_nexts(self, dst: int, srcs: Sequence[int]) -> dict[int, list[int]]:
        """``_tree(dst)``'s best next hops, for ``srcs`` and the nodes of their walks only: the same choices, from
        as much of the search as they depend on.

        Dijkstra from dst on (latency, hops) as ``_tree``, stopped once every source's key is at most the least
        key left in the heap (no unsettled node can then improve it), and not relaxing links that lead past the
        sources' keys (a node past them is on no source's best route): every node a walk visits has a smaller key
        than the source it started from. A node's tight next hops are recorded as its key is reached (the nodes
        whose key plus the link's equals its own, all settled before it), so a switch's successors are never
        scanned; the widest bottleneck among them and the ties in node order are ``_tree``'s.
        """
        order = self._pred_by_latency()
        want = set(srcs)
        key: dict[int, tuple[int, int]] = {dst: (0, 0)}
        tight: dict[int, list[tuple[int, float]]] = {dst: []}
        widest: dict[int, float] = {}
        nexts: dict[int, list[int]] = {}
        heap: list[tuple[int, int, int]] = [(0, 0, dst)]
        bound: tuple[int, int] | None = None
        seen = 0

        def settle(u: int) -> None:
            if u == dst:
                widest[u] = math.inf
                return
            ws = [(v, bw if bw < widest[v] else widest[v]) for v, bw in tight[u]]
            top = max(w for _v, w in ws)
            widest[u] = top
            nexts[u] = sorted(v for v, w in ws if w == top)

        while heap:
            if bound is not None and bound <= heap[0][:2]:
                break
            dl, dh, v = heapq.heappop(heap)
            if v in widest or (dl, dh) != key[v]:
                continue
            settle(v)
            ch = dh + 1
            for u, ul, bw in order[v]:
                cl = dl + ul
                if bound is not None and (cl, ch) > bound:
                    break  # the rest are further still (sorted by latency)
                if u in widest:
                    continue
                old = key.get(u)
                if old is None or (cl, ch) < old:
                    key[u] = (cl, ch)
                    tight[u] = [(v, bw)]
                    heapq.heappush(heap, (cl, ch, u))
                    if u in want:
                        seen += old is None
                        if seen == len(want):
                            bound = max(key[s] for s in want)
                elif (cl, ch) == old:
                    tight[u].append((v, bw))
        for u in want:
            if u in key and u not in widest:
                settle(u)
        return nexts

    def _pred_by_latency(self) -> list[list[tuple[int, int, float]]]:
        if not self._pred_sorted:
            self._pred_sorted.append([sorted(links, key=lambda x: x[1]) for links in self._pred])
        return self._pred_sorted[0]

    def routed_links(self) -> frozenset[int]:
        """Ids of the links that carry the route of at least one ordered pair of ranks (cached).

        Every byte a schedule moves travels on routes, so a link outside this set carries
        nothing (``sim.bounds.cuts`` leaves it out). The same choices as ``route``: an explicit route,
        else the direct link when it is the shortest, else the walk down the destination's tree,
        remembering (node, remaining digits) so that each walk state is followed once.
        """
        if self._routed:
            return self._routed[0]
        p = self.ranks
        used: set[int] = set()
        link = self._link_id
        nodes = self._nodes
        for path in self.routes.values():
            used.update(link[(path[i], path[i + 1])] for i in range(len(path) - 1))
        for dst in range(p):
            tree: tuple[list[int], list[int], list[float], list[list[int]]] | None = None
            seen: set[tuple[int, int]] = set()
            for src in range(p):
                if src == dst or (src, dst) in self.routes:
                    continue
                if self._direct(src, dst) is not None:
                    used.add(link[(src, dst)])
                    continue
                if tree is None:
                    tree = self._tree(dst)
                hops, best = tree[1], tree[3]
                if hops[src] < 0:
                    raise TopologyError(f"rank {src} cannot reach rank {dst}")
                u, digits = src, dst
                while u != dst and (u, digits) not in seen:
                    seen.add((u, digits))
                    v, digits = _next_hop(best[u], digits)
                    used.add(link[(nodes[u], nodes[v])])
                    u = v
        self._routed.append(frozenset(used))
        return self._routed[0]

    def _remember(self, src: int, dst: int, path: tuple[Node, ...]) -> tuple[tuple[int, ...], float]:
        hit = self._cache[(src, dst)] = self._links(path)
        return hit

    def _links(self, path: tuple[Node, ...]) -> RouteLinks:
        """The link ids along a node path, and its latency summed hop by hop from 0.0."""
        ids = tuple(self._link_id[(path[i], path[i + 1])] for i in range(len(path) - 1))
        lat = 0.0
        for i in range(len(path) - 1):
            lat += self.graph.edges[path[i], path[i + 1]]["latency"]
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

    def _tree(self, dst: int) -> tuple[list[int], list[int], list[float], list[list[int]]]:
        """For every node (by number): latency in fs, hops and widest bottleneck of its best routes to dst,
        and its best next hops (in node order).

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
        nexts: list[list[int]] = [[] for _ in range(n)]
        for u in done[1:]:
            best = 0.0
            tight: list[tuple[int, float]] = []
            for v, vl, bw in succ[u]:
                if hops[v] + 1 == hops[u] and hops[v] >= 0 and lat[v] + vl == lat[u]:
                    w = bw if bw < widest[v] else widest[v]
                    tight.append((v, w))
                    if w > best:
                        best = w
            widest[u] = best
            # Computed once per tree: a switch's p successors are scanned once, not once per route through it.
            nexts[u] = sorted(v for v, w in tight if w == best)
        return lat, hops, widest, nexts

    def _walk(self, src: int, dst: int, tree: tuple[list[int], list[int], list[float], list[list[int]]],
              way: int = 0) -> tuple[Node, ...]:
        """Follow best next hops from src to dst; among k equals, pick by the next base-k digit of dst (turned
        ``way`` places on).

        The first choice is the (dst mod k)-th candidate in node order, the
        next uses dst // k, and so on: different destinations spread over all
        equal paths, as the two-level tables of Al-Fares et al. 2008 do in a
        fat tree (uplink by destination, then core by destination).
        """
        _lat, hops, _widest, best = tree
        if hops[src] < 0:
            raise TopologyError(f"rank {src} cannot reach rank {dst}")
        nodes = self._nodes
        path: list[Node] = [src]
        u = src
        digits = dst  # consumed in mixed radix, so that successive choices are independent
        while u != dst:
            u, digits = _next_hop(best[u], digits, way)
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


def _next_hop(nexts: list[int], digits: int, way: int = 0) -> tuple[int, int]:
    """The next hop among a node's equal best ``nexts`` for the remaining ``digits`` of the destination
    (``Topology._walk``), turned ``way`` places on, and the digits left after the choice."""
    if len(nexts) > 1:
        digits, pick = divmod(digits, len(nexts))
        return nexts[(pick + way) % len(nexts)], digits
    return nexts[0], digits


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
