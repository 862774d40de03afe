"""Symmetries of a topology found from the graph itself: rank orbits and the automorphisms that map them.

``rank_orbits(topology, roots)`` partitions the roots into orbits of the
topology's automorphism group (permutations of the nodes that keep ranks on
ranks, switches on switches, and every link with its bandwidth and
latency), and gives, for every root, its orbit's base and an automorphism
taking the base to it. Nothing depends on the topology's name, so a topology
read from a file is treated as the same topology built by name.

Method: colour refinement (1-dimensional Weisfeiler-Leman: a node's colour is
its kind, then repeatedly its colour with the multiset of (link figures,
neighbour colour) over its links out and in, until the partition stops
splitting; Weisfeiler & Leman 1968, as in Grohe et al., "Color refinement and
its applications", 2021) gives classes that no automorphism can cross. Within
a class, an automorphism taking the base to the root is searched for by
individualisation and refinement (as in McKay's nauty, "Practical graph
isomorphism", 1981): give the base and the root a fresh colour, refine both
colourings together, and keep individualising a node of the smallest
non-singleton class against the nodes of its class on the other side,
backtracking within ``SEARCH_BUDGET`` refinements, until every class is one
node; the bijection is checked link by link. A root with no such map starts
an orbit of its own.

This module does not import torch.
"""

from __future__ import annotations

from collections.abc import Sequence

import networkx as nx
import numpy as np

from sim.topology import Node, Topology

__all__ = ["STRUCTURAL_MAX_NODES", "colour_classes", "rank_orbits"]

STRUCTURAL_MAX_NODES = 160
"""Largest topology (ranks and switches) searched for automorphisms; the VF2 search is pure Python."""
SEARCH_BUDGET = 64
"""Refinements one automorphism search may try before giving up (the root then starts an orbit of its own)."""
_ROUNDS = 64


def _refine(g: nx.DiGraph, colourings: list[dict[Node, int]]) -> list[dict[Node, int]]:
    """Colour refinement of several colourings of ``g`` at once, with one naming of the signatures, so that
    colours stay comparable between them (module docstring)."""
    for _ in range(_ROUNDS):
        sigs = [{v: (c[v],
                     tuple(sorted((a["bandwidth"], a["latency"], c[w]) for _, w, a in g.out_edges(v, data=True))),
                     tuple(sorted((a["bandwidth"], a["latency"], c[u]) for u, _, a in g.in_edges(v, data=True))))
                 for v in g.nodes} for c in colourings]
        names = {x: k for k, x in enumerate(sorted({x for sig in sigs for x in sig.values()}, key=repr))}
        new = [{v: names[sig[v]] for v in g.nodes} for sig in sigs]
        if all(len(set(n.values())) == len(set(c.values())) for n, c in zip(new, colourings, strict=True)):
            return new
        colourings = new
    return colourings


def colour_classes(topology: Topology) -> dict[Node, int]:
    """Every node's colour after colour refinement (module docstring): equal colours are necessary for two nodes
    to be exchanged by an automorphism."""
    g = topology.graph
    return _refine(g, [{v: int(isinstance(v, int)) for v in g.nodes}])[0]


def _classes(c: dict[Node, int]) -> dict[int, list[Node]]:
    out: dict[int, list[Node]] = {}
    for v, k in c.items():
        out.setdefault(k, []).append(v)
    return out


def _is_automorphism(g: nx.DiGraph, f: dict[Node, Node]) -> bool:
    for u, v, a in g.edges(data=True):
        b = g.get_edge_data(f[u], f[v])
        if b is None or b["bandwidth"] != a["bandwidth"] or b["latency"] != a["latency"]:
            return False
    return True


def _map(g: nx.DiGraph, colour: dict[Node, int], base: int, root: int, budget: list[int]) -> dict[Node, Node] | None:
    """An automorphism of ``g`` taking ``base`` to ``root`` that keeps link figures, or None: individualise
    base and root, refine both colourings together, and go on individualising a node of the smallest class
    against each node of the same class on the other side (backtracking, within ``budget`` tries) until every
    class is a single node; the bijection is then checked link by link."""
    top = max(colour.values()) + 1
    n = sum(1 for v in g.nodes if isinstance(v, int))
    spos = {v: k for k, v in enumerate(x for x in g.nodes if not isinstance(x, int))}
    shift = root - base

    def guess(x: Node, y: Node) -> int:
        """How far y is from x's image under the translation base -> root: candidates are tried nearest first,
        so that the maps found behave like a translation group (every rank moves), which spreads the images
        of a tree over the links as a builder family's rotations do."""
        if isinstance(x, int) and isinstance(y, int):
            return (y - x - shift) % max(n, 1)
        if isinstance(x, str) and isinstance(y, str):
            return (spos[y] - spos[x]) % max(len(spos), 1)
        return 0

    def search(a: dict[Node, int], b: dict[Node, int]) -> dict[Node, Node] | None:
        budget[0] -= 1
        if budget[0] < 0:
            return None
        a, b = _refine(g, [a, b])
        ca, cb = _classes(a), _classes(b)
        if {k: len(v) for k, v in ca.items()} != {k: len(v) for k, v in cb.items()}:
            return None
        open_classes = [k for k, v in ca.items() if len(v) > 1]
        if not open_classes:
            f = {ca[k][0]: cb[k][0] for k in ca}
            return f if _is_automorphism(g, f) else None
        k = min(open_classes, key=lambda k: (len(ca[k]), k))
        x = ca[k][0]
        fresh = max(max(a.values()), max(b.values())) + 1
        for y in sorted(cb[k], key=lambda y: guess(x, y)):
            found = search({**a, x: fresh}, {**b, y: fresh})
            if found is not None:
                return found
        return None

    return search({**colour, base: top}, {**colour, root: top})


def rank_orbits(topology: Topology, roots: Sequence[int]) -> dict[int, tuple[int, np.ndarray]] | None:
    """For every root, (its orbit's base, a rank permutation that is an automorphism taking the base to it), the
    orbits found from the graph (module docstring); None when the topology is too large to search or every root
    is alone in its orbit."""
    g = topology.graph
    if g.number_of_nodes() > STRUCTURAL_MAX_NODES or not roots:
        return None
    n = topology.ranks
    colour = colour_classes(topology)
    identity = np.arange(n, dtype=np.int64)
    out: dict[int, tuple[int, np.ndarray]] = {}
    bases: list[int] = []
    for r in roots:
        found = None
        for b in bases:
            if colour[b] != colour[r]:
                continue
            mapping = _map(g, colour, b, r, [SEARCH_BUDGET])
            if mapping is not None:
                found = (b, np.array([int(mapping[v]) for v in range(n)], dtype=np.int64))
                break
        if found is None:
            bases.append(r)
            found = (r, identity)
        out[r] = found
    if len(bases) == len(roots):
        return None
    return out
