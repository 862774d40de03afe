"""Lower bounds on the time of a collective on a topology: a cut (bandwidth) term and a latency term.

Bandwidth term, for a message of M bytes (``size``, by the nccl-tests
convention of ``sim.engine.reference.chunk_bytes``) on N ranks. For a vertex set S
(ranks and switches), B+(S) is the summed bandwidth of the links leaving S.

- allgather: every rank outside S needs the M/N bytes of every rank inside,
  and they can only leave S over its out-links, so
  T >= (M/N) · max_S |S ∩ ranks| / B+(S) over every S that holds at least one
  rank and leaves at least one out (the bound of ForestColl, arXiv 2402.06787).
- reducescatter: every rank u inside S ends with its own M/N-byte piece, which
  needs the contribution of a rank w outside; reductions only combine the same
  piece, so |S ∩ ranks| · M/N bytes must enter S: the allgather bound on the
  reversed graph. The reported cut is the complement of that S, so that, as
  for every kind, the bottleneck is the links leaving the reported cut.
- allreduce, two terms:
  *cut* (the bandwidth term): a rank outside S needs all M bytes of the result, which depend on
  the inputs inside S, so at least M bytes leave S:
  T >= M / min B+(S) over every S that holds some but not all ranks;
  *traffic*: every byte position is an instance of one-way gossip among the N
  ranks (a message hands the receiver the sum the sender holds; switches only
  forward), and one-way gossip needs at least 2(N-1) messages: order the
  message arrivals in time; the first rank to hold a complete sum needed a
  message sent by each of the N-1 others before then (their inputs had to
  leave them), and each of those N-1 others needs a message that arrives after
  that moment (none of them was complete yet), so 2(N-1) distinct messages.
  Every message enters its receiving rank over the rank's in-links and leaves
  its sender over its out-links, so
  T >= 2(N-1)·M / min(sum over ranks of B-(rank), sum over ranks of B+(rank)).
  Reported next to them, the reducescatter-plus-allgather reference (the sum
  of those two bounds for M), which is what a two-phase schedule can reach;
  when every rank has the same in- and out-bandwidth it equals the traffic
  term, which proves two-phase schedules optimal there.
  *With reducing switches* (``sim.topology.switches``: NVLink SHARP, InfiniBand
  SHARP) the gossip argument fails, since a switch hands a rank a sum that no
  rank held, and the traffic term becomes the *own-links* term
  T >= M / min over ranks r of min(B+(r), B-(r)). Proof: fix every input but
  rank r's; every other rank's result is then a one-to-one function of r's
  M-byte input (adding a fixed sum is invertible), so M bytes of it must leave
  r over r's out-links, wherever they are combined later; and r's result is a
  one-to-one function of any one other rank's input, so M bytes must enter r
  over its in-links. (It is the cut term at S = {r} and S = every node but r.)
  Halving NCCL's ring traffic on a DGX H100 this way is what NVLS does.
- broadcast (reduce): M bytes reach every rank from the root (to the root from
  every rank): T >= M / min over ranks w of the min cut root -> w (w -> root).
- alltoall: every rank sends M/N bytes to every other, so at least
  |S ∩ ranks| · |ranks - S| · M/N bytes leave S; this maximum is not a ratio of
  linear terms, so it is taken over a family of cuts (every single rank and its
  complement, the allgather and allreduce attaining cuts and their
  complements): still a valid bound, not always the tightest.

Every byte a schedule moves travels on the routes the simulator gives the
pairs of ranks (``Topology.route``), so the links that carry no pair's route
carry nothing: the terms are computed on the other links (``routed_part``),
and where there are any such idle links the bound over every link is reported
beside it (``any_routing``), what other routes could reach.

All of these are exact: bandwidths are converted to ``fractions.Fraction``
(a float converts exactly), max-flows run on integers scaled by a common
denominator, and the ratio is found by Dinkelbach's method: start from the
ratio of the cut around one rank, and for each rank w in turn look for a cut
S (w outside) with B+(S) < t · |S ∩ ranks| by one max-flow from a source
joined to every rank with capacity t; a violated cut lowers t to its ratio
and w is checked again. A rank that passes at t passes at every smaller t
(B+(S) - t·|S ∩ ranks| only grows as t falls), so one pass over the ranks
suffices: about N max-flows.

Latency term: data from rank u must travel from u to w, so T is at least the
smallest total link latency of a path u -> w, maximised over the pairs the
collective must connect (all ordered pairs; root to every rank for
broadcast; every rank to the root for reduce).

``bound_s`` is the largest of the terms (bandwidth, allreduce's traffic,
latency): each is a valid lower bound on its own, and the simulator
(``sim.engine.reference``) never beats any. This module
does not import torch.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import networkx as nx
from networkx.algorithms.flow import build_residual_network, preflow_push

from algorithms.ir import ROOTED_KINDS, Kind
from sim.bounds.budget import BoundError, guard_bound
from sim.topology import Node, Topology
from sim.topology.switches import reducing_switches

__all__ = ["BOUND_KINDS", "Bound", "BoundError", "bound", "cut_ratio", "min_cut_bandwidth", "latency_term",
           "own_link_bandwidth", "rank_bandwidth", "routed_part"]

BOUND_KINDS: tuple[Kind, ...] = (Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLREDUCE, Kind.BROADCAST, Kind.REDUCE,
                                 Kind.ALLTOALL)
RELABEL_FREQ = 8.0
"""networkx push-relabel's global relabelling frequency (its default is 1): measured at 256 ranks, 8 takes
the ring's allreduce bound from 4.5 s to 2.6 s and the cluster's from 3.3 s to 2.4 s, the torus unchanged."""
_SOURCE = ("bounds", "source")  # a node name no topology can have (nodes are ints and strs)


@dataclass(frozen=True)
class Bound:
    """A lower bound on the time of one collective of ``size`` bytes on a topology.

    ``bandwidth`` is the exact bandwidth term in seconds (a Fraction; ``bandwidth_s`` its float);
    ``cut`` the vertex set S (ranks and switch names) that attains it, its out-links the bottleneck;
    ``reference_s`` is, for allreduce, the reducescatter-plus-allgather reference (None otherwise);
    ``traffic_term`` is, for allreduce, the traffic term (None otherwise); ``bound_s`` takes the
    largest of ``bandwidth``, ``traffic_term`` and ``latency_s``. ``idle_links`` counts the links
    that carry no route and are left out; when there are any, ``any_routing`` is the bound with
    every link usable, what other routes could reach.
    """

    kind: Kind
    size: float
    bandwidth: Fraction
    latency_s: float
    cut: tuple[Node, ...]
    root: int | None = None
    reference_s: float | None = None
    traffic_term: Fraction | None = None
    idle_links: int = 0
    any_routing: Bound | None = None

    @property
    def bandwidth_s(self) -> float:
        """The bandwidth term in seconds."""
        return float(self.bandwidth)

    @property
    def traffic_s(self) -> float | None:
        """The allreduce traffic term in seconds (None for other kinds)."""
        return None if self.traffic_term is None else float(self.traffic_term)

    @property
    def bound_s(self) -> float:
        """The bound: the largest of the bandwidth (cut), traffic (allreduce) and latency terms."""
        return max(self.bandwidth_s, self.traffic_s or 0.0, self.latency_s)

    @property
    def bottleneck(self) -> str:
        """Which term ``bound_s`` is: "cut", "traffic" or "latency"."""
        if self.latency_s > max(self.bandwidth_s, self.traffic_s or 0.0):
            return "latency"
        return "traffic" if (self.traffic_s or 0.0) > self.bandwidth_s else "cut"

    def scaled(self, size: float) -> Bound:
        """The same bound for another size: the bandwidth term is linear in the size, the latency
        term does not depend on it (so a sweep computes the cuts once)."""
        if isinstance(size, bool) or not isinstance(size, int | float) or not 0 <= size < math.inf:
            raise BoundError(f"size must be a finite number of bytes >= 0, got {size!r}")
        f = Fraction(size) / Fraction(self.size) if self.size else Fraction(0)
        ref = None if self.reference_s is None or not self.size else self.reference_s * size / self.size
        traffic = None if self.traffic_term is None else self.traffic_term * f
        other = None if self.any_routing is None else self.any_routing.scaled(size)
        return Bound(self.kind, size, self.bandwidth * f, self.latency_s, self.cut, self.root, ref, traffic,
                     self.idle_links, other)

    def efficiency(self, time_s: float) -> float:
        """bound / time: 1.0 means the run reached the bound (inf for a run that took no time)."""
        if time_s <= 0:
            return math.inf if self.bound_s > 0 else 1.0
        return self.bound_s / time_s

    def to_dict(self) -> dict[str, object]:
        """JSON-ready: bound_s, bandwidth_s, latency_s, cut (and, for allreduce, traffic_s and reference_s;
        where links carry no route, idle_links and any_routing_s)."""
        out: dict[str, object] = {"bound_s": self.bound_s, "bandwidth_s": self.bandwidth_s,
                                  "latency_s": self.latency_s, "cut": list(self.cut)}
        if self.traffic_s is not None:
            out["traffic_s"] = self.traffic_s
        if self.any_routing is not None:
            out["idle_links"] = self.idle_links
            out["any_routing_s"] = self.any_routing.bound_s
        if self.reference_s is not None:
            out["reference_s"] = self.reference_s
        return out


def _frac(x: float) -> Fraction:
    return Fraction(x)


def _sorted_nodes(nodes: Iterable[Node]) -> tuple[Node, ...]:
    return tuple(sorted(nodes, key=lambda n: (isinstance(n, str), n if isinstance(n, int) else 0, str(n))))


class _Net:
    """The topology as an integer flow network (bandwidths scaled by a common denominator)."""

    def __init__(self, topology: Topology, *, reverse: bool = False) -> None:
        self.topology = topology
        self.ranks = topology.ranks
        self.bw: dict[tuple[Node, Node], Fraction] = {}
        for u, v, a in topology.graph.edges(data=True):
            key = (v, u) if reverse else (u, v)
            self.bw[key] = _frac(a["bandwidth"])
        self.out: dict[Node, Fraction] = {}
        self.inn: dict[Node, Fraction] = {}
        for (u, v), b in self.bw.items():
            self.out[u] = self.out.get(u, Fraction(0)) + b
            self.inn[v] = self.inn.get(v, Fraction(0)) + b
        self.nodes: list[Node] = list(topology.graph.nodes)

    def cut_out(self, s: set[Node] | frozenset[Node]) -> Fraction:
        """B+(S): bandwidth of the links leaving S."""
        return sum((b for (u, v), b in self.bw.items() if u in s and v not in s), Fraction(0))

    def graph(self, t: Fraction | None) -> tuple[nx.DiGraph, int]:
        """Integer flow graph (capacities times a common denominator, returned); with t, a source
        joined to every rank at capacity t."""
        den = 1
        for b in self.bw.values():
            den = math.lcm(den, b.denominator)
        if t is not None:
            den = math.lcm(den, t.denominator)
        g = nx.DiGraph()
        g.add_nodes_from(self.nodes)
        for (u, v), b in self.bw.items():
            g.add_edge(u, v, capacity=int(b * den))
        if t is not None:
            cap = int(t * den)
            for r in range(self.ranks):
                g.add_edge(_SOURCE, r, capacity=cap)
        return g, den


class _Flows:
    """Max-flows on one graph, reusing networkx's residual network between calls."""

    def __init__(self, g: nx.DiGraph) -> None:
        self.g = g
        self.residual = build_residual_network(g, "capacity")

    def min_cut_value(self, src: Hashable, sink: Hashable) -> int:
        """Value of a min cut src -> sink (push-relabel's first phase only)."""
        r = preflow_push(self.g, src, sink, residual=self.residual, value_only=True,
                         global_relabel_freq=RELABEL_FREQ)
        return int(r.graph["flow_value"])

    def min_cut(self, src: Hashable, sink: Hashable) -> tuple[int, set[Any]]:
        """Value of a min cut src -> sink and its source side."""
        r = preflow_push(self.g, src, sink, residual=self.residual, global_relabel_freq=RELABEL_FREQ)
        value = int(r.graph["flow_value"])
        succ = r.succ
        side = {src}
        stack = [src]
        while stack:
            u = stack.pop()
            for v, a in succ[u].items():
                if v not in side and a["flow"] < a["capacity"]:
                    side.add(v)
                    stack.append(v)
        return value, side


def cut_ratio(topology: Topology, *, reverse: bool = False) -> tuple[Fraction, tuple[Node, ...]]:
    """max over vertex sets S holding >= 1 rank and missing >= 1 rank of |S ∩ ranks| / B+(S), exactly,
    and an S that attains it (``reverse``: on the reversed graph, i.e. B-(S) for reducescatter).

    Seconds per byte of one rank's piece: the allgather bandwidth term is (M/N) times this.
    """
    n = topology.ranks
    if n < 2:
        return Fraction(0), ()
    net = _Net(topology, reverse=reverse)
    everything = set(net.nodes)
    # Start from the best cut around a single rank w: S = every node but w.
    best_w = min(range(n), key=lambda w: net.inn.get(w, Fraction(0)))
    t = net.inn.get(best_w, Fraction(0)) / (n - 1)  # B+(S) / |S ∩ ranks|
    cut: set[Node] = everything - {best_w}
    flows: _Flows | None = None
    den = 1
    for w in range(n):
        while True:
            if flows is None:
                g, den = net.graph(t)
                flows = _Flows(g)
            # The source's own link to w carries t straight through: compare with t·N.
            if Fraction(flows.min_cut_value(_SOURCE, w), den) >= t * n:
                break
            _, side = flows.min_cut(_SOURCE, w)
            s = set(side) - {_SOURCE}
            k = sum(1 for x in s if isinstance(x, int))
            ratio = net.cut_out(s) / k
            if ratio >= t:  # cannot happen for an exact max-flow; guards against a silent loop
                break
            t, cut, flows = ratio, s, None
    k = sum(1 for x in cut if isinstance(x, int))
    return Fraction(k) / net.cut_out(cut), _sorted_nodes(cut)


def min_cut_bandwidth(topology: Topology, pairs: Iterable[tuple[int, int]]) -> tuple[Fraction, tuple[Node, ...]]:
    """The smallest min cut u -> w over ``pairs``, exactly, and its source side."""
    net = _Net(topology)
    g, den = net.graph(None)
    flows = _Flows(g)
    lowest: tuple[int, int, int] | None = None
    for u, w in pairs:
        value = flows.min_cut_value(u, w)
        if lowest is None or value < lowest[0]:
            lowest = (value, u, w)
    if lowest is None:
        return Fraction(0), ()
    value, side = flows.min_cut(lowest[1], lowest[2])
    return Fraction(value, den), _sorted_nodes(side)


def latency_term(topology: Topology, pairs: Iterable[tuple[int, int]]) -> float:
    """max over ``pairs`` (u, w) of the smallest total link latency of a path u -> w."""
    g = topology.graph
    dist: dict[int, dict[Node, float]] = {}
    worst = 0.0
    for u, w in pairs:
        if u == w:
            continue
        if u not in dist:
            dist[u] = nx.single_source_dijkstra_path_length(g, u, weight="latency")
        worst = max(worst, float(dist[u][w]))
    return worst


def _all_pairs(n: int) -> Iterator[tuple[int, int]]:
    """Every ordered pair of distinct ranks, made as they are read (a list of p² pairs is 1 GB at 3,000 ranks)."""
    return ((u, w) for u in range(n) for w in range(n) if u != w)


def bound(kind: Kind | str, topology: Topology, size: float, *, root: int | None = None) -> Bound:
    """The lower bound on the time of ``kind`` moving ``size`` bytes on ``topology`` (module docstring)."""
    try:
        kind = Kind(kind)
    except ValueError:
        raise BoundError(f"collective: unknown kind {kind!r} (one of {', '.join(BOUND_KINDS)})") from None
    if kind not in BOUND_KINDS:
        raise BoundError(f"collective: no bound for {kind} (one of {', '.join(BOUND_KINDS)})")
    if isinstance(size, bool) or not isinstance(size, int | float) or not 0 <= size < math.inf:
        raise BoundError(f"size must be a finite number of bytes >= 0, got {size!r}")
    n = topology.ranks
    if kind in ROOTED_KINDS:
        root = 0 if root is None else root
        if isinstance(root, bool) or not isinstance(root, int) or not 0 <= root < n:
            raise BoundError(f"root {root!r} out of range for a topology of {n} ranks")
    elif root is not None:
        raise BoundError(f"{kind} has no root, got root={root}")
    if n < 2:
        return Bound(kind, size, Fraction(0), 0.0, (), root)
    guard_bound(kind.value, n, topology.graph.number_of_nodes(), len(topology.links))  # before routed_links: p²
    idle = len(topology.links) - len(topology.routed_links())
    if idle:
        guard_bound(kind.value, n, topology.graph.number_of_nodes(), len(topology.links), idle_links=True)
    if not idle:
        return _bound(kind, topology, size, root)
    # Links on no route carry nothing: the bound for these routes leaves them out, and the bound
    # over every link says what other routes could reach.
    return replace(_bound(kind, routed_part(topology), size, root), idle_links=idle,
                   any_routing=_bound(kind, topology, size, root))


def routed_part(topology: Topology) -> Topology:
    """The topology with only the links that carry some pair's route (``Topology.routed_links``),
    its explicit routes kept: the network a schedule on ``topology`` can actually use."""
    keep = topology.routed_links()
    g = nx.DiGraph()
    g.add_nodes_from(topology.graph.nodes(data=True))  # with their attributes: a switch's capabilities
    for i in sorted(keep):
        u, v = topology.links[i]
        g.add_edge(u, v, **topology.graph.edges[u, v])
    return Topology(g, topology.name, topology.routes)


def _bound(kind: Kind, topology: Topology, size: float, root: int | None) -> Bound:
    n = topology.ranks
    m = _frac(size)
    pairs: Iterable[tuple[int, int]] = _all_pairs(n)
    ref: float | None = None
    traffic: Fraction | None = None
    if kind in (Kind.ALLGATHER, Kind.REDUCESCATTER):
        ratio, cut = cut_ratio(topology, reverse=kind is Kind.REDUCESCATTER)
        bw = m / n * ratio
        if kind is Kind.REDUCESCATTER:
            # cut_ratio worked on the reversed graph: the bottleneck links enter that set, so
            # report its complement, whose out-links they are.
            cut = _sorted_nodes(set(topology.graph.nodes) - set(cut))
    elif kind is Kind.ALLREDUCE:
        lo, cut = min_cut_bandwidth(topology, [(0, w) for w in range(1, n)] + [(w, 0) for w in range(1, n)])
        bw = m / lo
        traffic = (m / own_link_bandwidth(topology) if reducing_switches(topology)
                   else 2 * (n - 1) * m / rank_bandwidth(topology))
        ag, _ = cut_ratio(topology)
        rs, _ = cut_ratio(topology, reverse=True)
        ref = float(m / n * (ag + rs))
    elif kind is Kind.BROADCAST:
        assert root is not None
        pairs = [(root, w) for w in range(n) if w != root]
        lo, cut = min_cut_bandwidth(topology, pairs)
        bw = m / lo
    elif kind is Kind.REDUCE:
        assert root is not None
        pairs = [(w, root) for w in range(n) if w != root]
        lo, cut = min_cut_bandwidth(topology, pairs)
        bw = m / lo
    else:
        bw, cut = _alltoall(topology, m)
    return Bound(kind, size, bw, latency_term(topology, pairs), cut, root, ref, traffic)


def rank_bandwidth(topology: Topology) -> Fraction:
    """min(sum over ranks of the bandwidth into the rank, the same out of it), exactly: how fast
    messages can be delivered to (sent by) the ranks all together, the allreduce traffic term's divisor."""
    net = _Net(topology)
    ranks = range(topology.ranks)
    into = sum((net.inn.get(r, Fraction(0)) for r in ranks), Fraction(0))
    out = sum((net.out.get(r, Fraction(0)) for r in ranks), Fraction(0))
    return min(into, out)


def own_link_bandwidth(topology: Topology) -> Fraction:
    """min over ranks of min(bandwidth into the rank, out of it), exactly: the divisor of the all-reduce
    traffic term where switches reduce (module docstring)."""
    net = _Net(topology)
    return min(min(net.inn.get(r, Fraction(0)), net.out.get(r, Fraction(0))) for r in range(topology.ranks))


def _alltoall(topology: Topology, m: Fraction) -> tuple[Fraction, tuple[Node, ...]]:
    n = topology.ranks
    net = _Net(topology)
    everything = frozenset(net.nodes)
    family: list[frozenset[Node]] = []
    for r in range(n):
        family.append(frozenset({r}))
        family.append(everything - {r})
    for reverse in (False, True):
        _, c = cut_ratio(topology, reverse=reverse)
        family.append(frozenset(c))
        family.append(everything - frozenset(c))
    _, c = min_cut_bandwidth(topology, [(0, w) for w in range(1, n)] + [(w, 0) for w in range(1, n)])
    family.append(frozenset(c))
    family.append(everything - frozenset(c))
    best = Fraction(0)
    best_cut: frozenset[Node] = family[0]
    for s in family:
        k = sum(1 for x in s if isinstance(x, int))
        if not 0 < k < n:
            continue
        out = net.cut_out(s)
        value = Fraction(k * (n - k)) * m / n / out
        if value > best:
            best, best_cut = value, s
    return best, _sorted_nodes(best_cut)
