"""Explicit routes for a topology: the widest, neighbouring ranks on their own links, or a torus's
dimension order (``routed``). (The default routes of many pairs on a plain torus, in closed form, are
``sim.topology.torus_routes``'s.)

The simulator routes a message by least latency (``Topology.route``); where that keeps links idle or
takes a narrow path, ``widest_routes`` and ``neighbour_routes`` write explicit routes into the
topology's route table, ``dimension_order_routes`` a torus's x-then-y-then-... routes, and
``routed(topology, routing)`` picks one by its name (``ROUTINGS``, the choices of ``--routing``).
A schedule must then be simulated on the same routed topology.

This module imports no networkx until a route is computed, so the command line's ``--routing``
choices come from ``ROUTINGS`` while the parser is built.
"""

from __future__ import annotations

import heapq
import math
import re
from typing import TYPE_CHECKING

from sim.topology.errors import TopologyError

if TYPE_CHECKING:

    from sim.topology.graph import Node, Topology

__all__ = ["DIMENSION_ORDER_MAX_RANKS", "ROUTINGS", "dimension_order_routes", "neighbour_routes", "routed",
           "widest_routes"]

def widest_routes(topology: Topology) -> Topology:
    """The topology with explicit routes wherever the default route is not a widest one.

    For each ordered pair of ranks, the widest route maximises the smallest link bandwidth along
    it (then, among those, the total latency, then the hops); it is recorded in the topology's route
    table (``collsched.topology/1`` ``routes``) only where its bottleneck is strictly wider than the
    default route's. The simulator follows explicit routes, so schedules simulated on the result
    (synthesized or not) take them. Why: the default route is the one of least latency, and on
    ``dgx-h100:N``, whose NVLink hops carry NCCL's 1.7 us step latency, the least-latency route
    between two GPUs of one node runs through their 47 GB/s NICs instead of the 367 GB/s NVSwitch.
    """
    from sim.topology.graph import Topology

    g = topology.graph
    n = topology.ranks
    if n < 2:
        return topology
    routes = dict(topology.routes)
    adj: dict[Node, list[tuple[Node, float, float]]] = {v: [] for v in g.nodes}
    for u, v, a in g.edges(data=True):
        adj[u].append((v, float(a["bandwidth"]), float(a["latency"])))
    widths = sorted({b for es in adj.values() for _, b, _ in es}, reverse=True)
    order = {v: i for i, v in enumerate(g.nodes)}  # ties on latency and hops go to the first node
    bws = topology.link_bandwidths()
    default = topology.route_links_many((a, b) for a in range(n) for b in range(n) if a != b)
    narrow = {pair: min(bws[i] for i in links) for pair, (links, _lat) in default.items()}
    for src in range(n):
        wanted = [d for d in range(n) if d != src]
        done: set[int] = set()
        for w in widths:
            # Least latency (then fewest hops) over the links at least w wide: Dijkstra.
            dist: dict[Node, tuple[float, int, int]] = {src: (0.0, 0, order[src])}
            prev: dict[Node, Node] = {}
            heap: list[tuple[float, int, int, Node]] = [(0.0, 0, order[src], src)]
            seen: set[Node] = set()
            while heap:
                lat, hops, _, u = heapq.heappop(heap)
                if u in seen:
                    continue
                seen.add(u)
                for v, b, vl in adj[u]:
                    if b >= w and v not in seen:
                        cand = (lat + vl, hops + 1, order[v])
                        if v not in dist or cand < dist[v]:
                            dist[v] = cand
                            prev[v] = u
                            heapq.heappush(heap, (*cand, v))
            for d in wanted:
                if d in done or d not in seen:
                    continue
                done.add(d)  # w is d's widest bottleneck: the widest width that reaches it
                if narrow[(src, d)] < w:
                    path: list[Node] = [d]
                    while path[-1] != src:
                        path.append(prev[path[-1]])
                    routes[(src, d)] = tuple(reversed(path))
            if len(done) == len(wanted):
                break
    return Topology(g, topology.name, routes)


def neighbour_routes(topology: Topology) -> Topology:
    """The topology with explicit routes that keep every pair of neighbouring ranks on its own links.

    A pair joined by a direct link u -> v is routed over it; a pair without one that shares a switch
    (u -> s -> v) is routed through it (the widest such switch, then the first), unless its default
    route already crosses one switch only. These are the rank-to-rank edges of ForestColl's edge
    splitting: the links a tree packing can use. Why: the default route is the one of least
    latency, so where latencies differ a link can lie on no route between ranks at all, and the cut
    bound, which counts every link, then cannot be reached (a random topology with random
    latencies leaves 18 of its 60 links unused).
    """
    from sim.topology.graph import Topology

    g = topology.graph
    n = topology.ranks
    routes = dict(topology.routes)
    for u in range(n):
        for v in range(n):
            if u == v:
                continue
            cur = topology.route(u, v)
            if g.has_edge(u, v):
                if cur != (u, v):
                    routes[(u, v)] = (u, v)
                continue
            if len(cur) == 3 and isinstance(cur[1], str):
                continue
            via = [x for x in g.successors(u) if isinstance(x, str) and g.has_edge(x, v)]
            if via:
                s = max(via, key=lambda x: min(g.edges[u, x]["bandwidth"], g.edges[x, v]["bandwidth"]))
                routes[(u, v)] = (u, s, v)
    return Topology(g, topology.name, routes)


DIMENSION_ORDER_MAX_RANKS = 1024
"""Largest torus ``dimension_order_routes`` writes a route table for: one explicit route per ordered pair,
about a million at 1024 ranks."""


def dimension_order_routes(topology: Topology) -> Topology:
    """The torus with explicit dimension-order routes: a message corrects its x coordinate first, then y,
    then z, ..., each the shorter way round (on a tie, towards higher coordinates).

    Only for a torus built by ``sim.topology.builders.torus`` (its name, ``torus:RxC[xD...]`` with or without
    per-dimension figures, gives the shape; every link a route takes is checked). The default routes are the
    least-latency ones with ties spread by the destination's digits (``Topology.route``), which on a torus
    mix the dimensions' order from pair to pair; these take one fixed order, as dimension-order routers do.
    """
    from sim.topology.graph import Topology

    m = re.fullmatch(r"torus:([0-9]+(?:x[0-9]+)+)(?:@.*)?", topology.name)
    if m is None:
        raise TopologyError(f"dimension-order routing needs a torus (torus:RxC[xD...]), but topology "
                            f"{topology.name!r} is not one")
    dims = [int(s) for s in m.group(1).split("x")]
    n = topology.ranks
    if math.prod(dims) != n:
        raise TopologyError(f"dimension-order routing: topology {topology.name!r} has {n} ranks, not "
                            f"{'x'.join(map(str, dims))}")
    if n > DIMENSION_ORDER_MAX_RANKS:
        raise TopologyError(f"dimension-order routing: {n} ranks is more than the {DIMENSION_ORDER_MAX_RANKS} "
                            "it writes a route table for")
    strides = [math.prod(dims[k + 1:]) for k in range(len(dims))]
    g = topology.graph
    routes = dict(topology.routes)
    for src in range(n):
        for dst in range(n):
            if src == dst:
                continue
            path: list[Node] = [src]
            u = src
            for k, size in enumerate(dims):
                here, there = (u // strides[k]) % size, (dst // strides[k]) % size
                ahead = (there - here) % size
                step = 1 if ahead <= size - ahead else -1
                for _ in range(ahead if step == 1 else size - ahead):
                    nxt = (here + step) % size
                    v = u + (nxt - here) * strides[k]
                    if not g.has_edge(u, v):
                        raise TopologyError(f"dimension-order routing: topology {topology.name!r} lacks the torus "
                                            f"link {u} -> {v}")
                    path.append(v)
                    u, here = v, nxt
            routes[(src, dst)] = tuple(path)
    return Topology(g, topology.name, routes)


ROUTINGS = ("shortest", "widest", "neighbour", "dimension")
"""Route choices of ``routed``: the simulator's default, ``widest_routes``, ``neighbour_routes``,
``dimension_order_routes``."""


def routed(topology: Topology, routing: str) -> Topology:
    """``topology`` with the routes ``routing`` names (``ROUTINGS``)."""
    if routing == "shortest":
        return topology
    if routing == "widest":
        return widest_routes(topology)
    if routing == "neighbour":
        return neighbour_routes(topology)
    if routing == "dimension":
        return dimension_order_routes(topology)
    raise TopologyError(f"routing must be one of {', '.join(ROUTINGS)}, got {routing!r}")
