"""Stepped pipelines: an integer tree packing (``sim.bounds.arborescence``) as a schedule whose every step loads
every link alike.

An integer packing gives every root k trees (repeats allowed), so k chunks of every root, one down each tree,
make a *round* that loads each link in proportion to the optimal packing. The collective is cut into
``rounds`` such rounds (k·rounds chunks per rank), and round s crosses a tree edge at depth d (out-trees) or
from a rank at height h (in-trees: after its children) in step s + d (s + h + 1): every tree is a pipeline
with one round in flight per edge, and in the steady state every step moves one round's load on every link.
A tree's chunks of a round are contiguous. Each message, one per rank pair and step, is one transfer: the
sender first copies its items (each a tree's chunks of a round, runs of neighbours merged) into its *box* for
the pair, a scratch region reused every step, sends the box into the receiver's box for the pair, and the
receiver copies (reducescatter: reduces) them out to where they belong. The reuse paces every pair at one
message in flight (the next copy into a box waits for the send from it, the next send into the receiver's box
for its copies out), so the schedule runs alike with and without dataflow's send order, and a link carries one
flow at a time.

Why steps: in dataflow's send order (``EngineOptions.in_flight``, the default one step in flight per port) a
rank's port sends its messages step by step, each after the previous one has landed. When every step's message
on a link is one round's share of the link's load, every port's steps take the same time, the time of the round
at the packing's rate, so ports never wait on each other beyond the pipeline's fill and drain (depth - 1
steps) and one latency per step: the run takes about (R + depth - 1)·(τ/R + α) for R rounds, τ the packing's
time and α the route latency. ``rounds_for`` picks R for that at a nominal size (1 GiB), and
``sim.bounds.arborescence.integer_packing`` trades load against depth by the same estimate.

This module does not import torch.
"""

from __future__ import annotations

import math

import numpy as np

from algorithms.ir import Collective, Kind, Schedule
from sim.bounds.arborescence import Forest
from sim.bounds.pacing import children, edges_by_depth, heights
from sim.topology import Topology

__all__ = ["MAX_ROUNDS", "build", "depth_weight", "emit", "rounds_for"]

MAX_ROUNDS = 256
"""Rounds at most: fill and drain then cost (depth - 1) / 256 of the run (the schedule's transfers grow with
the rounds, about three per tree edge and round)."""
MAX_TRANSFERS = 400_000
"""Fewer rounds where more would exceed this many transfers."""
NOMINAL_SIZE = float(2**30)
"""The message size the rounds are chosen for: large, where bandwidth, which the packing targets, decides."""


def depth_weight(forest: Forest, topology: Topology, *, size: float = NOMINAL_SIZE,
                 max_rounds: int = MAX_ROUNDS) -> float:
    """What one more level of pipeline depth costs, as a fraction of the packing's time at ``size``: a step,
    1/R + α/τ at the rounds R the fractional packing's depth would get (``rounds_for``)."""
    tau = forest.time * size / topology.ranks
    alpha = _latency(forest, topology)
    rounds = rounds_for(forest, topology, size=size, max_rounds=max_rounds)
    return 1 / rounds + (alpha / tau if tau > 0 else 0.0)


def _latency(forest: Forest, topology: Topology) -> float:
    """The longest route latency of a tree edge of ``forest``."""
    n = topology.ranks
    pairs = {(int(p[v]), v) if not forest.inward else (v, int(p[v]))
             for r, ts in forest.trees.items() for p, _w in ts for v in range(n) if v != r}
    return max((lat for _links, lat in topology.route_links_many(sorted(pairs)).values()), default=0.0)


def rounds_for(forest: Forest, topology: Topology, *, size: float = NOMINAL_SIZE, max_rounds: int = MAX_ROUNDS,
               max_transfers: int = MAX_TRANSFERS) -> int:
    """Rounds R that minimise the run's estimate (R + depth - 1)·(τ/R + α) at ``size`` (module docstring): τ the
    packing's time, α the longest route latency a tree edge takes; at most ``max_rounds`` and about
    ``max_transfers`` transfers."""
    n = topology.ranks
    depth = forest.depth()
    if depth <= 1:
        return 1
    tau = forest.time * size / n
    alpha = _latency(forest, topology)
    best = max_rounds if alpha <= 0 else round(math.sqrt((depth - 1) * tau / alpha))
    edges = max(sum(len(ts) for ts in forest.trees.values()), n) * (n - 1)
    return max(1, min(best, max_rounds, max_transfers // max(3 * edges, 1)))


def emit(kind: Kind, forest: Forest, ranks: int, rounds: int) -> Schedule:
    """The allgather (out-trees) or reducescatter (in-trees) of ``forest`` (an integer packing, k trees per root)
    in ``rounds`` rounds, named ``synth`` (module docstring)."""
    k = forest.k
    c = k * rounds
    acc = ranks * c if kind is Kind.REDUCESCATTER else 0  # scratch: every root's partial sums, then the boxes
    items: dict[tuple[int, int, int], list[tuple[int, int, int, int, int]]] = {}
    for r, trees in forest.trees.items():
        at = 0
        for parent, weight in trees:
            a = int(weight)
            kids = children(parent, r)
            if kind is Kind.ALLGATHER:
                hops = [(d - 1, u, v) for d, u, v in edges_by_depth(kids, r)]
            else:
                order, height = heights(kids, r)
                hops = [(height[v], v, int(parent[v])) for v in order if v != r]
            for g0, u, v in hops:
                if kind is Kind.ALLGATHER:
                    src = (_IN, 0) if u == r else (_OUT, r * c)
                    dst = (_OUT, r * c)
                else:
                    src = (_SCR, r * c) if kids[u] else (_IN, r * c)
                    dst = (_OUT, 0) if v == r else (_SCR, r * c)
                for s in range(rounds):
                    j = s * k + at
                    items.setdefault((g0 + s, u, v), []).append((src[0], src[1] + j, dst[0], dst[1] + j, a))
            at += a
    op = _RED if kind is Kind.REDUCESCATTER else _COPY
    cols = _Cols()
    for r in range(ranks):
        if kind is Kind.ALLGATHER:
            cols.add(0, r, r, _IN, 0, _OUT, r * c, c, _COPY)
        else:
            cols.add(0, r, r, _IN, r * c, _OUT, 0, c, _COPY)
            cols.add(0, r, r, _IN, 0, _SCR, 0, ranks * c, _COPY)
    box: dict[tuple[int, int], int] = {}
    for (_g, u, v), its in items.items():
        box[(u, v)] = max(box.get((u, v), 0), sum(it[4] for it in its))
    scratch = [acc] * ranks
    out_at: dict[tuple[int, int], int] = {}
    in_at: dict[tuple[int, int], int] = {}
    for (u, v), size in sorted(box.items()):
        out_at[(u, v)] = scratch[u]
        scratch[u] += size
        in_at[(u, v)] = scratch[v]
        scratch[v] += size
    for (g, u, v), its in sorted(items.items()):
        its.sort()
        ob, ib = out_at[(u, v)], in_at[(u, v)]
        off = 0
        for sb, si, _db, _di, a in _runs(its):
            cols.add(3 * g + 1, u, u, sb, si, _SCR, ob + off, a, _COPY)
            off += a
        cols.add(3 * g + 2, u, v, _SCR, ob, _SCR, ib, off, _COPY)
        off = 0
        for _sb, _si, db, di, a in _runs(its, by_destination=True):
            cols.add(3 * g + 3, v, v, _SCR, ib + off, db, di, a, op)
            off += a
    return cols.schedule(Collective(kind, ranks, c), max(scratch))


_IN, _OUT, _SCR = 0, 1, 2
_COPY, _RED = 0, 1


def _runs(items: list[tuple[int, int, int, int, int]], *, by_destination: bool = False
          ) -> list[tuple[int, int, int, int, int]]:
    """Items (source buffer, index, destination buffer, index, count) in box order, neighbours merged where
    their sources (``by_destination``: destinations) are contiguous."""
    out: list[tuple[int, int, int, int, int]] = []
    for sb, si, db, di, a in items:
        if out:
            psb, psi, pdb, pdi, pa = out[-1]
            near = (pdb == db and pdi + pa == di) if by_destination else (psb == sb and psi + pa == si)
            if near:
                out[-1] = (psb, psi, pdb, pdi, pa + a)
                continue
        out.append((sb, si, db, di, a))
    return out


class _Cols:
    """Transfers by step, then one schedule from their columns."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, int, int, int, int, int, int, int, int]] = []

    def add(self, step: int, src: int, dst: int, sb: int, si: int, db: int, di: int, count: int, op: int) -> None:
        self.rows.append((step, src, dst, sb, si, db, di, count, op))

    def schedule(self, coll: Collective, scratch: int) -> Schedule:
        a = np.array(self.rows, dtype=np.int64).reshape(-1, 9)
        a = a[np.argsort(a[:, 0], kind="stable")]
        _steps, first = np.unique(a[:, 0], return_index=True)
        offsets = np.append(first, len(a))
        names = ("src", "dst", "src_buf", "src_index", "dst_buf", "dst_index", "count", "op")
        columns = {f: a[:, i + 1] for i, f in enumerate(names)}
        columns["step_offsets"] = offsets
        return Schedule.from_columns(coll, "synth", columns, scratch)


def build(kind: Kind, topology: Topology, *, size: float = NOMINAL_SIZE) -> Schedule:
    """The allgather or reducescatter of ``topology`` from its optimal tree packing (``sim.bounds.arborescence``):
    the fractional optimum, k trees a root traded against depth, rounds chosen for messages of ``size``."""
    from sim.bounds.arborescence import best_integer_packing, fractional_packing

    forest = fractional_packing(topology, inward=kind is Kind.REDUCESCATTER)
    whole = best_integer_packing(forest, depth_weight=depth_weight(forest, topology, size=size))
    return emit(kind, whole, topology.ranks, rounds_for(whole, topology, size=size))
