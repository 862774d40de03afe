"""Paced pipelines for tree packings whose roots do not all behave alike (``sim.bounds.packing``).

Where every root's trees are images of one root's (one orbit of a symmetry, or the star), every flow on a link
wants the same rate, and the simulator's max-min sharing gives it: ``packing`` emits each root's chunks through
``LANES`` lanes per pair, relays forwarding as chunks arrive. Where roots differ (several orbits, or none: a
user's two-level cluster with NICs of unequal speed, a random graph), that emission loses 5-25% to the bound
though the packing predicts it within 1%: a tree that carries many chunks and one that carries few get equal
shares of a link they cross, relays with a backlog put several flows on one link and take more than their share,
and the trees that fall behind finish alone at the end, on links the others no longer use (measured:
the random 7-GPU graph's allgather 74.9% of the bound, its packing at 100.0%).

Here the packing's trees are cut into *pipelines* of at most ``PIPELINE`` chunks (identical trees of a root are
grouped first, then cut into balanced pieces), and every edge of every pipeline, at the root and at every relay,
sends through a lane of its own: one message in flight per pipeline edge. Every pipeline then asks every link
it crosses for the same rate, a pipeline's chunk count times the chunk over the run's time, which is the rate
max-min sharing gives each flow on a link the packing filled (equal demands, counted in proportion to the load),
so the links the bound makes tight stay busy to the end. Fill and drain cost about the tree's depth over
``PIPELINE`` chunks.

This module does not import torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from algorithms.ir import Buf, Op

__all__ = ["PIPELINE", "emit_in", "emit_out", "pipelines"]

PIPELINE = 32
"""Chunks per pipeline at most: allgather on the two-level 2x3 cluster / the random 7-GPU graph
(``benchmarks/heldout``), 97.1% / 98.5% of the bound with 128 chunks a root in pipelines of 32, 93.6% / 99.2%
with 256 in pipelines of 64 (``packing.synthesize`` also tries 3x the chunks in pipelines 3x longer)."""

Slot = tuple[Buf, int]


def pipelines(trees: list[np.ndarray], size: int = PIPELINE) -> list[tuple[np.ndarray, list[int]]]:
    """One root's chunk trees (``trees[j]`` the parent array of chunk j) as pipelines: chunks with identical
    trees grouped in chunk order, each group cut into the fewest pieces of at most ``size`` chunks, balanced."""
    groups: dict[bytes, tuple[np.ndarray, list[int]]] = {}
    for j, t in enumerate(trees):
        groups.setdefault(t.tobytes(), (t, []))[1].append(j)
    out: list[tuple[np.ndarray, list[int]]] = []
    for parent, js in groups.values():
        pieces = -(-len(js) // size)
        at = 0
        for k in range(pieces):
            n = len(js) // pieces + (1 if k < len(js) % pieces else 0)
            out.append((parent, js[at:at + n]))
            at += n
    return out


def children(parent: np.ndarray, root: int) -> list[list[int]]:
    """Each rank's children in the tree given by ``parent`` (the root's own entry is ignored)."""
    kids: list[list[int]] = [[] for _ in range(len(parent))]
    for v, u in enumerate(parent.tolist()):
        if v != root:
            kids[u].append(v)
    return kids


def edges_by_depth(kids: list[list[int]], root: int) -> list[tuple[int, int, int]]:
    """The tree's edges as (depth of the edge, parent, child), depth first from the root."""
    order: list[tuple[int, int, int]] = []
    frontier = [(root, 0)]
    while frontier:
        u, d = frontier.pop()
        for v in kids[u]:
            order.append((d + 1, u, v))
            frontier.append((v, d + 1))
    return order


def heights(kids: list[list[int]], root: int) -> tuple[list[int], list[int]]:
    """The ranks in depth-first order from the root, and each rank's height (0 for a leaf)."""
    height = [0] * len(kids)
    order: list[int] = []
    stack = [root]
    while stack:
        u = stack.pop()
        order.append(u)
        stack.extend(kids[u])
    for u in reversed(order):
        for v in kids[u]:
            height[u] = max(height[u], height[v] + 1)
    return order, height


def emit_out(e: Any, phase: int, root: int, parent: np.ndarray, js: list[int], lane: int,
             src: Callable[[int], Slot], dst: Callable[[int], Slot]) -> None:
    """Chunks ``js`` down an out-tree as one pipeline: chunk j leaves the root from ``src(j)`` and lands in
    ``dst(j)`` everywhere; every edge sends through its lane of group ``lane`` (``packing._Emitter`` with one
    lane per group), the i-th chunk at depth d with priority 2i + d."""
    order = edges_by_depth(children(parent, root), root)
    for i, j in enumerate(js):
        for d, u, v in order:
            e.send(phase, 2 * i + d, u, src(j) if u == root else dst(j), v, dst(j), staged=lane)


def emit_in(e: Any, phase: int, root: int, parent: np.ndarray, js: list[int], lane: int,
            own: Callable[[int, int], Slot], acc: Callable[[int, int], Slot]) -> None:
    """Chunks ``js`` up an in-tree as one pipeline, reducing: a leaf v sends its own ``own(v, j)``, an inner
    rank its sum ``acc(v, j)``, into the parent's ``acc``; every edge through its lane of group ``lane``, a rank
    at height h sending the i-th chunk with priority 2i + h + 1, after its children."""
    kids = children(parent, root)
    order, height = heights(kids, root)
    for i, j in enumerate(js):
        for v in order:
            if v != root:
                u = int(parent[v])
                s = acc(v, j) if kids[v] else own(v, j)
                e.send(phase, 2 * i + height[v] + 1, v, s, u, acc(u, j), Op.REDUCE, staged=lane)
