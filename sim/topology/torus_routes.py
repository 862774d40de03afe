"""The default routes of many pairs on a plain torus in closed form (``torus_route_links``): exactly the routes
``Topology.route`` takes, computed pair by pair in numpy instead of one shortest-path tree per destination.

``Topology.route_links_many`` calls it, so this module imports nothing of ``sim.topology.graph``: a topology here
is any object with ``name``, ``graph``, ``ranks`` and ``links`` as ``Topology`` has them (``TopologyLike``).
"""

from __future__ import annotations

import math
import re
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sim.topology.errors import TopologyError

if TYPE_CHECKING:
    import numpy as np

__all__ = ["torus_route_links"]

TopologyLike = Any
"""A ``sim.topology.graph.Topology`` (which imports this module, so it is not named here)."""

RouteLinks = tuple[tuple[int, ...], float]
"""A route as link ids and its latency, as ``sim.topology.graph.RouteLinks``."""


_TORUS_NAME = re.compile(r"torus:([0-9]+(?:x[0-9]+)+)(?:@.*)?")


@dataclass(frozen=True, eq=False)
class _Torus:
    """A torus whose links are the builder's (``sim.topology.builders.torus``), uniform along each dimension."""

    dims: tuple[int, ...]
    strides: tuple[int, ...]
    latency: tuple[float, ...]
    """Seconds per link of each dimension, the links' own figure (summed as ``Topology.route_links`` sums it)."""
    link: np.ndarray
    """(rank, dimension, 0 backward / 1 forward) -> link id; -1 where the dimension has size 1."""


_TORI: weakref.WeakKeyDictionary[TopologyLike, _Torus | None] = weakref.WeakKeyDictionary()


def _torus(topology: TopologyLike) -> _Torus | None:
    """``topology``'s torus structure when it is a plain torus (cached), else None.

    Plain: named ``torus:RxC[xD...]`` (the builder's names; a taken-down link renames it), no switches, exactly the
    builder's links, and along each dimension one bandwidth and one latency (``with_degraded_link`` breaks that).
    """
    m = _TORUS_NAME.fullmatch(topology.name)
    if m is None:
        return None
    if topology in _TORI:
        return _TORI[topology]
    import numpy as np

    dims = tuple(int(q) for q in m.group(1).split("x"))
    n = topology.ranks
    found: _Torus | None = None
    if math.prod(dims) == n and topology.graph.number_of_nodes() == n:
        strides = tuple(math.prod(dims[k + 1:]) for k in range(len(dims)))
        degree = sum(2 if q > 2 else 1 if q == 2 else 0 for q in dims)
        link = np.full((n, len(dims), 2), -1, dtype=np.int64)
        figures: list[set[tuple[float, float]]] = [set() for _ in dims]
        edges = topology.graph.edges
        ok = len(topology.links) == n * degree
        for r in range(n if ok else 0):
            for k, (q, stride) in enumerate(zip(dims, strides, strict=True)):
                if q == 1:
                    continue
                c = (r // stride) % q
                for way, step in ((0, -1), (1, 1)):
                    v = r + ((c + step) % q - c) * stride
                    if (r, v) not in edges:
                        ok = False
                        break
                    link[r, k, way] = topology.link_id(r, v)
                    a = edges[r, v]
                    figures[k].add((float(a["bandwidth"]), float(a["latency"])))
            if not ok:
                break
        if ok and all(len(f) <= 1 for f in figures):
            lats = tuple(next(iter(f))[1] if f else 0.0 for f in figures)
            found = _Torus(dims, strides, lats, link)
    _TORI[topology] = found
    return found


def _node_order(cand: np.ndarray) -> np.ndarray:
    """The columns of each row of candidate nodes in node order (the missing ones, int64's largest, last)."""
    import numpy as np

    return np.argsort(cand, axis=1)


def torus_route_links(topology: TopologyLike, pairs: Sequence[tuple[int, int]], *,
                      way: int = 0) -> dict[tuple[int, int], RouteLinks] | None:
    """``topology.route_links`` of every pair (by ``way``), walked for all pairs at once, when ``topology`` is a
    plain torus (``_torus``); None otherwise (route them one destination's tree at a time). Explicit routes are
    the caller's.

    The same routes, not merely equally short ones. On such a torus the default route's key (latency, hops) from
    u to dst is (sum_k L_k d_k, sum_k d_k), d_k the ring distance along dimension k, so the tight next hops of u
    (``Topology._tree``) are the neighbours one step nearer along some dimension: one per dimension not yet
    corrected, both ways round where u sits half way round a ring of more than 2. Every shortest route crosses
    d_k links of each dimension k, so all share one bottleneck (the narrowest dimension it crosses) and the widest
    rule keeps them all. The walk then takes, among those k in node order, the one the next base-k digit of dst
    picks (``Topology._walk``). That rule is not translation-equivariant (node order flips across the
    wrap-around, and the digits are dst's), so it is applied as is, to every pair, hop by hop in numpy; a way
    w > 0 turns each such pick w places on, as ``Topology._walk`` does.
    """
    shape = _torus(topology)
    if shape is None:
        return None
    import numpy as np

    if not pairs:
        return {}
    dims = np.array(shape.dims, dtype=np.int64)
    strides = np.array(shape.strides, dtype=np.int64)
    big = np.iinfo(np.int64).max
    src = np.array([s for s, _ in pairs], dtype=np.int64)
    dst = np.array([d for _, d in pairs], dtype=np.int64)
    bad = np.concatenate([src, dst])
    bad = bad[(bad < 0) | (bad >= topology.ranks)]
    if len(bad):
        raise TopologyError(f"rank {int(bad[0])} out of range for a topology of {topology.ranks} ranks")
    to = (dst[:, None] // strides) % dims
    at = src.copy()
    digits = dst.copy()
    lat = np.zeros(len(pairs))
    longest = int(np.sum(dims // 2))
    path = np.full((len(pairs), max(longest, 1)), -1, dtype=np.int64)
    hops = np.zeros(len(pairs), dtype=np.int64)
    way_lat = np.array([*shape.latency, *shape.latency])
    live = np.flatnonzero(at != dst)
    while len(live):
        u = at[live]
        here = (u[:, None] // strides) % dims
        ahead = (to[live] - here) % dims
        behind = (dims - ahead) % dims
        fwd = (ahead > 0) & (ahead <= behind)
        bwd = (ahead > 0) & (behind <= ahead) & (dims > 2)
        fnode = u[:, None] + ((here + 1) % dims - here) * strides
        bnode = u[:, None] + ((here - 1) % dims - here) * strides
        cand = np.concatenate([np.where(fwd, fnode, big), np.where(bwd, bnode, big)], axis=1)
        links = np.concatenate([shape.link[u, :, 1], shape.link[u, :, 0]], axis=1)
        k = fwd.sum(axis=1) + bwd.sum(axis=1)
        d = digits[live]
        many = k > 1
        pick = np.where(many, (d % np.maximum(k, 1) + way) % np.maximum(k, 1), 0)
        digits[live] = np.where(many, d // np.maximum(k, 1), d)
        col = _node_order(cand)[np.arange(len(live)), pick]  # the pick-th candidate in node order
        row = np.arange(len(live))
        at[live] = cand[row, col]
        path[live, hops[live]] = links[row, col]
        lat[live] = lat[live] + way_lat[col]  # summed hop by hop from 0.0, as Topology._remember does
        hops[live] += 1
        live = live[at[live] != dst[live]]
    rows = path.tolist()
    ends = zip(src.tolist(), dst.tolist(), hops.tolist(), lat.tolist(), strict=True)
    return {(s, d): (tuple(rows[i][:h]), la) for i, (s, d, h, la) in enumerate(ends)}
