"""The cut lower bound of an all-to-allv: a traffic matrix's bytes that must leave a vertex set, over its links.

For a vertex set S (ranks and switches) with out-bandwidth B+(S), the bytes
that ranks in S send to ranks outside, Σ_{i∈S, j∉S} T[i][j]·chunk, can only
leave S over its out-links, so T >= that / B+(S). As for alltoall
(``sim.bounds.cuts``), the maximum over every S is not a ratio of linear
terms, so it is taken over a family of cuts: every single rank and its
complement, the cuts that attain the allgather, reducescatter and allreduce
bounds, and their complements. A valid lower bound, the fast one; the exact
bound is a max-concurrent-flow LP. Latency term: the farthest pair that
exchanges data (T[i][j] > 0). Exact arithmetic (``fractions.Fraction``).

Sizes follow ``sim.engine.reference.chunk_bytes``: ``size`` is the mean rank's
input, so a chunk is size·p / ΣT bytes.
"""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction

import numpy as np

from algorithms.ir import Collective, Kind
from sim.bounds.cuts import (
    Bound,
    BoundError,
    _Net,
    _sorted_nodes,
    cut_ratio,
    latency_term,
    min_cut_bandwidth,
    routed_part,
)
from sim.topology import Node, Topology

__all__ = ["matrix_bound"]


def matrix_bound(topology: Topology, collective: Collective, size: float) -> Bound:
    """The cut bound of ``collective`` (an alltoallv, or an alltoall: its uniform matrix) of ``size`` bytes."""
    if collective.kind not in (Kind.ALLTOALLV, Kind.ALLTOALL):
        raise BoundError(f"collective: a traffic-matrix bound is for alltoallv and alltoall, not {collective.kind}")
    if isinstance(size, bool) or not isinstance(size, int | float) or not 0 <= size < math.inf:
        raise BoundError(f"size must be a finite number of bytes >= 0, got {size!r}")
    n = topology.ranks
    if collective.ranks != n:
        raise BoundError(f"collective: {collective.ranks} ranks, the topology has {n}")
    t = collective.traffic()
    total = int(t.sum())
    if n < 2 or not total:
        return Bound(Kind.ALLTOALLV, size, Fraction(0), 0.0, ())
    chunk = Fraction(size) * n / total
    idle = len(topology.links) - len(topology.routed_links())
    if not idle:
        return _bound(topology, t, chunk, size)
    return replace(_bound(routed_part(topology), t, chunk, size), idle_links=idle,
                   any_routing=_bound(topology, t, chunk, size))


def _bound(topology: Topology, t: np.ndarray, chunk: Fraction, size: float) -> Bound:
    n = topology.ranks
    net = _Net(topology)
    everything = frozenset(net.nodes)
    family: list[frozenset[Node]] = []
    for r in range(n):
        family += [frozenset({r}), everything - {r}]
    for reverse in (False, True):
        _, c = cut_ratio(topology, reverse=reverse)
        family += [frozenset(c), everything - frozenset(c)]
    _, c = min_cut_bandwidth(topology, [(0, w) for w in range(1, n)] + [(w, 0) for w in range(1, n)])
    family += [frozenset(c), everything - frozenset(c)]
    best, best_cut = Fraction(0), family[0]
    for s in family:
        inside = np.zeros(n, dtype=bool)
        inside[[x for x in s if isinstance(x, int)]] = True
        crossing = int(t[inside][:, ~inside].sum())
        if not crossing:
            continue
        out = net.cut_out(s)
        if not out:
            continue  # no link leaves S (a disconnected topology): the engine reports it
        value = crossing * chunk / out
        if value > best:
            best, best_cut = value, s
    src, dst = np.nonzero(t)
    pairs = [(int(a), int(b)) for a, b in zip(src, dst, strict=True) if a != b]
    return Bound(Kind.ALLTOALLV, size, best, latency_term(topology, pairs), _sorted_nodes(best_cut))
