"""The domain symmetry of a GPU cluster, and routes found once per route shape and translated.

A GPU preset (``sim.topology.gpus``) is ``N`` NVLink domains of ``G`` GPUs, rank ``n·G + i`` being GPU ``i`` of
domain ``n``, its switch ``node{n}``, and switches shared by all domains (``rail{i}``, ``spine``). Where every
link of domain ``n`` has its counterpart, with the same bandwidth and latency, in every other domain, and no link
joins two domains directly, any permutation σ of the domains (rank ``n·G + i`` to ``σ(n)·G + i``, ``node{n}`` to
``node{σ(n)}``, the shared switches fixed) is an automorphism of the graph. The best routes of ``Topology.route``
(shortest by latency, then hops, then widest bottleneck) map onto each other under it; only the tie-breaking
among equal routes (node order, the destination's digits) does not. So where a route between (domain 0, GPU i)
and (domain 0 or 1, GPU j) is the *only* best route, and it stays inside domains 0 and 1 and the shared
switches, its image under σ is the only best route, and hence ``route``'s, of every pair of the same shape:
(a, i) to (b, j) for a = b, or for a != b. ``DomainSymmetry.check`` verifies the symmetry on the graph itself
(never from the preset's name), so a degraded or hand-edited cluster falls back to the search.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = ["DomainSymmetry", "domain_symmetry"]

Node = int | str
"""A rank or a switch, as ``sim.topology.graph.Node``."""

Topology = Any
"""A ``sim.topology.graph.Topology``, which imports this module (so it is not imported here)."""

_DOMAIN_SWITCH = re.compile(r"node(\d+)")

MIN_DOMAINS = 3
"""Below this many domains the search is as cheap as the check."""


@dataclass(frozen=True)
class DomainSymmetry:
    """``domains`` domains of ``size`` ranks each, permutable (module docstring)."""

    domains: int
    size: int

    def domain(self, node: Node) -> int | None:
        """The domain a rank or a domain switch belongs to; None for a shared switch."""
        if isinstance(node, int):
            return node // self.size
        m = _DOMAIN_SWITCH.fullmatch(node)
        return int(m.group(1)) if m is not None and int(m.group(1)) < self.domains else None


def domain_symmetry(topology: Topology) -> DomainSymmetry | None:
    """The topology's domain symmetry (module docstring), or None where it has none, or too few domains, or
    explicit routes."""
    size = topology.graph.graph.get("gpus_per_node")
    p = topology.ranks
    if topology.routes or not isinstance(size, int) or size < 1 or p % size or p // size < MIN_DOMAINS:
        return None
    sym = DomainSymmetry(p // size, size)
    local = {n: (str(n) if isinstance(n, str) and sym.domain(n) is None else
                 ("r", n % size) if isinstance(n, int) else "node") for n in topology.graph.nodes}
    # Per link shape (ends without their domain, bandwidth, latency): the domains that have it.
    seen: dict[tuple[object, ...], list[int]] = {}
    for u, v, attrs in topology.graph.edges(data=True):
        du, dv = sym.domain(u), sym.domain(v)
        if du is not None and dv is not None and du != dv:
            return None  # a link between two domains: not every permutation keeps it
        shape = (local[u], local[v], float(attrs["bandwidth"]), float(attrs["latency"]))
        d = du if du is not None else dv
        if d is not None:  # a link between shared switches is its own image
            seen.setdefault(shape, []).append(d)
    for doms in seen.values():
        if len(doms) != sym.domains or len(set(doms)) != sym.domains:
            return None
    switches = {n for n in topology.graph.nodes if isinstance(n, str) and sym.domain(n) is not None}
    if len(switches) not in (0, sym.domains):
        return None
    return sym
