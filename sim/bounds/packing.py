"""Topology-aware synthesis: pipelined tree schedules packed onto a topology's links.

``synthesize(kind, topology)`` returns an ordinary ``Schedule`` (it verifies,
simulates, exports and runs like any library algorithm) for allgather,
reducescatter, allreduce, broadcast and reduce.

Method (docs/design.md, "Bounds and synthesis"). Every transfer is a
GPU-to-GPU message along the route the simulator gives that pair
(``Topology.route``: the explicit route table, else the shortest path), so a
switch never stores or copies data: a tree edge u -> v through switches is
the edge splitting of ForestColl (arXiv 2402.06787) done per routed pair, and
its cost is the sum over the physical links of its route.

1. Each root's data is cut into ``chunks`` chunks, and every chunk gets its
   own spanning tree: an out-tree from the root (allgather, broadcast) or an
   in-tree towards it (reducescatter, reduce). The trees are packed greedily
   against the per-link load: a link's price is exp(κ·(L/Lmax - 1)) over its
   bandwidth, where L is the seconds of data already placed on it, and the
   tree is grown Prim-style from the root, each step attaching the rank that
   is cheapest to reach from the tree. Chunks are placed round-robin over the
   roots, then every chunk is ripped up and placed again (``passes``). The
   packing's predicted time, max over links of L, is what the cut bound
   (``sim.bounds.cuts``) bounds from below; the trees come from a multiplicative-
   weights heuristic, not an exact arborescence packing. Two regular packings
   replace it when they predict within ``REGULAR`` of it: the star (every root
   sends to every rank directly) and the symmetric packing (the first root's
   trees, chosen against the load of all their images, mapped to every root
   by automorphisms of the topology's family), because the simulator's link
   sharing rewards every root behaving alike (docs/design.md).
2. Each chunk flows down (up) its tree, one transfer per tree edge, so the
   chunks of one tree form a pipeline. In dataflow simulation transfers start
   when their data is there, so a root (leaf) holding all its data would push
   every chunk at once; its sends go through lanes instead, scratch slots of
   their own (copy into the lane, send from it): the next copy into a lane
   waits for the previous send to finish (write after read), which paces the
   pipeline with ``LANES`` messages in flight per pair and root. Forwarding
   ranks need no lanes: chunks reach them one after the other. Steps are
   assigned by list scheduling, so the schedule is also correct in lockstep.
   Where the symmetric packing has several orbits, the trees may be sent as
   paced pipelines instead (``sim.bounds.pacing``: at most 32 chunks a
   pipeline, one message in flight per pipeline edge, relays included), when
   the simulator runs them faster (``synthesize``'s ``pace``).
3. allreduce is the reducescatter trees followed by the allgather trees over
   the same pieces: chunk j is reduced to its root along an in-tree, then sent
   out along an out-tree; in dataflow the two phases overlap chunk by chunk.

Allgather and reducescatter without ``chunks`` on a graph of ranks joined by links alone, without a symmetry
taking every rank to every other (a random graph, a user's file), come instead from the optimal packing
(``sim.bounds.arborescence``: the fractional optimum by column generation, which meets the cut bound, rounded to
k trees a root) emitted in steps (``sim.bounds.stepped``), which the simulator runs within a few percent of the
bound in either send order.

Routes (``sim.topology.routing.routed``): ``widest_routes`` and ``neighbour_routes`` give a topology
explicit routes where the least-latency ones keep the bound out of reach; the
schedule must then be simulated on the same routed topology.

This module does not import torch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from algorithms.errors import CollschedError
from algorithms.ir import Buf, Collective, Kind, Op, Schedule, Step, Transfer
from sim.bounds.arborescence import Routes as _Routes
from sim.bounds.pacing import PIPELINE, children, edges_by_depth, heights
from sim.bounds.pacing import emit_in as _paced_in
from sim.bounds.pacing import emit_out as _paced_out
from sim.bounds.pacing import pipelines as _pipelines
from sim.topology import Node, Topology
from sim.topology.routing import ROUTINGS, neighbour_routes, routed, widest_routes  # their home; kept importable here

__all__ = ["ROUTINGS", "SYNTH_KINDS", "SynthesisError", "Packing", "default_chunks", "neighbour_routes", "pack",
           "routed", "synthesize", "widest_routes"]

SYNTH_KINDS: tuple[Kind, ...] = (Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLREDUCE, Kind.BROADCAST, Kind.REDUCE)
KAPPA = 30.0
"""Sharpness of the link prices: a link at 90% of the busiest costs exp(-3) of it."""
PASSES = 3
"""Placements of every chunk: the first, then rip-up and re-place."""
REGULAR = 0.06
"""Use the star packing (every root sends to every rank directly) when its predicted time is within
this fraction of the greedy packing's: the same load, but every chunk the same tree."""
SYMMETRIC_MAX_RANKS = 256
"""When every root has an automorphism of the topology taking the first root to it, the first root's
trees mapped by those automorphisms are used instead if they predict no worse (within ``REGULAR``):
every root then behaves alike, which the simulator's link sharing rewards (``_automorphisms``)."""
LANES = 8
"""Staged messages one rank pair may have in flight per root (allgather, reducescatter, allreduce):
enough to hide a message's latency behind the next ones."""
SELECT_MAX_RANKS = 32
"""Up to this many ranks an irregular packing is emitted both ways and the faster one in simulation is kept
(each simulation at 1 GiB takes about a second at 12 ranks); above it, the lanes (not paced)."""
SELECT_MAX_TRANSFERS = 40_000
"""Nor above this many transfers (random:7's allreduce, 12 ranks x 1536 chunks, would cost two simulations of
a quarter of a million transfers each)."""
SELECT_SIZE = float(2**30)
"""The size both emissions are simulated at: large, where bandwidth, which the packing targets, decides."""
FOREST_MAX_RANKS = 64
"""Allgather and reducescatter without ``chunks`` or ``pace`` on up to this many ranks come from the optimal
fractional packing, rounded and stepped (``sim.bounds.arborescence``, ``sim.bounds.stepped``); above it, from the
greedy packing (its column generation prices N trees a round)."""
ROOTED_LANES = 2
"""The same for broadcast and reduce, whose single root's chunks share every lane: more in flight
there only splits the root's links further (ring:8 broadcast 95% of the bound with 2, 89% with 8)."""


class SynthesisError(CollschedError, ValueError):
    """A synthesis request that cannot be served; the message names the kind, root or chunks."""


def default_chunks(kind: Kind | str, ranks: int) -> int:
    """Chunks per root's piece when none are asked for: deep enough pipelines for large messages
    on small worlds, about N²·chunks transfers kept near half a million on large ones."""
    kind = Kind(kind)
    if kind in (Kind.BROADCAST, Kind.REDUCE):
        return 1024  # one root: cheap in transfers, and small chunks drain deep trees sooner
    return max(8, min(128, 2048 // max(ranks, 1)))


def _grow(price: np.ndarray, root: int, inward: bool) -> np.ndarray:
    """A spanning tree by Prim's rule: repeatedly attach the rank cheapest to reach from the tree
    (``inward``: cheapest to send into the tree). Returns the parent of every rank (root: itself)."""
    m = price.T if inward else price
    n = m.shape[0]
    best = m[root].copy()
    parent = np.full(n, root, dtype=np.int64)
    done = np.zeros(n, dtype=bool)
    done[root] = True
    best[root] = np.inf
    for _ in range(n - 1):
        v = int(np.argmin(best))
        done[v] = True
        best[v] = np.inf
        row = m[v]
        better = (row < best) & ~done
        best[better] = row[better]
        parent[better] = v
    return parent


@dataclass(frozen=True)
class Packing:
    """Trees for every chunk of every root: ``trees[r][j]`` is the parent array of chunk j of root r.

    ``time_per_byte`` is the predicted seconds per byte of one chunk: max over links of the load
    (each chunk's bytes times the links its tree's messages cross, over the bandwidth).
    """

    roots: tuple[int, ...]
    chunks: int
    inward: bool
    trees: dict[int, list[np.ndarray]]
    time_per_byte: float
    method: str = "greedy"
    """Which packing it is: ``greedy``, ``star``, ``symmetric`` or ``chain`` (one root)."""
    orbits: int = 1
    """Classes of roots whose trees are images of each other's (greedy: every root its own; star: one)."""

    @property
    def regular(self) -> bool:
        """Every root's trees the image of one root's: the simulator's link sharing treats all roots alike."""
        return self.orbits <= 1


def pack(topology: Topology, roots: Sequence[int], chunks: int, *, inward: bool, passes: int = PASSES,
         kappa: float = KAPPA) -> Packing:
    """Greedy multiplicative-weights packing of one tree per chunk of every root (module docstring)."""
    routes = _Routes(topology)
    n = topology.ranks
    load = np.zeros(routes.nl)
    trees: dict[int, list[np.ndarray]] = {r: [] for r in roots}
    loads: dict[bytes, np.ndarray] = {}
    placed: dict[tuple[int, int], bytes] = {}

    def tree_load(parent: np.ndarray, r: int) -> np.ndarray:
        key = parent.tobytes()
        hit = loads.get(key)
        if hit is None:
            kids = np.array([v for v in range(n) if v != r], dtype=np.int64)
            par = parent[kids]
            pairs = kids * n + par if inward else par * n + kids
            hit = loads[key] = routes.load(pairs)
        return hit

    star = {r: np.full(n, r, dtype=np.int64) for r in roots}
    direct = sum((tree_load(star[r], r) for r in roots), np.zeros(routes.nl)) * chunks
    sym: dict[int, list[np.ndarray]] | None = None
    classes = 1
    perms = _symmetries(topology, roots) if len(roots) > 1 and n <= SYMMETRIC_MAX_RANKS else None
    if perms is not None:
        sym, predicted = _pack_symmetric(routes, perms, roots, chunks, inward, passes, kappa)
        classes = len({base for base, _ in perms.values()})
    if len(roots) == n and n > 1:
        # Every rank a root: the cut bound is known, and a regular packing that comes within
        # REGULAR of it needs no greedy packing to compare with.
        from sim.bounds.cuts import cut_ratio

        lowest = float(cut_ratio(topology, reverse=inward)[0]) * chunks  # seconds per chunk byte
        if float(direct.max()) <= lowest * (1 + REGULAR):
            return Packing(tuple(roots), chunks, inward, {r: [star[r]] * chunks for r in roots}, float(direct.max()),
                           "star")
        if sym is not None and predicted <= lowest * (1 + REGULAR):
            return Packing(tuple(roots), chunks, inward, sym, predicted, "symmetric", classes)
    for p in range(max(1, passes)):
        for j in range(chunks):
            for r in roots:
                if p > 0:
                    load -= loads[placed[(r, j)]]
                top = float(load.max()) if load.size else 0.0
                y = np.exp(kappa * (load / top - 1.0)) if top > 0 else np.ones(routes.nl)
                parent = _grow(routes.prices(y), r, inward)
                load += tree_load(parent, r)
                placed[(r, j)] = parent.tobytes()
                if p == 0:
                    trees[r].append(parent)
                else:
                    trees[r][j] = parent
    np.maximum(load, 0.0, out=load)
    greedy = float(load.max()) if load.size else 0.0
    if direct.size and float(direct.max()) <= greedy * (1 + REGULAR):
        return Packing(tuple(roots), chunks, inward, {r: [star[r]] * chunks for r in roots}, float(direct.max()),
                       "star")
    if sym is not None and predicted <= greedy * (1 + REGULAR):
        return Packing(tuple(roots), chunks, inward, sym, predicted, "symmetric", classes)
    if len(roots) == 1 and n > 2:
        # One root: the chains through the ranks in order from it, one way, the other, or
        # alternating by chunk (a pipeline with one flow per link: optimal on a fat tree).
        r = roots[0]
        forward = np.empty(n, dtype=np.int64)
        backward = np.empty(n, dtype=np.int64)
        for i in range(n):
            forward[(r + i) % n] = (r + i - 1) % n if i else r
            backward[(r - i) % n] = (r - i + 1) % n if i else r
        options = {"forward": [forward] * chunks, "backward": [backward] * chunks,
                   "both": [forward if j % 2 == 0 else backward for j in range(chunks)]}
        for chain in options.values():
            total = sum((tree_load(t, r) for t in chain), np.zeros(routes.nl))
            if float(total.max()) <= greedy * (1 + REGULAR):
                return Packing(tuple(roots), chunks, inward, {r: chain}, float(total.max()), "chain")
    return Packing(tuple(roots), chunks, inward, trees, greedy, "greedy", len(roots))


def _map_tree(parent: np.ndarray, pm: np.ndarray) -> np.ndarray:
    """The tree's image under the rank permutation pm: the parent of pm[v] is pm[parent[v]]."""
    out = np.empty_like(parent)
    out[pm] = pm[parent]
    return out


def _pack_symmetric(routes: _Routes, perms: dict[int, tuple[int, np.ndarray]], roots: Sequence[int], chunks: int,
                    inward: bool, passes: int, kappa: float) -> tuple[dict[int, list[np.ndarray]], float]:
    """The greedy packing restricted to symmetric solutions: trees are chosen for each orbit's base only
    (``perms[r]`` is r's base and an automorphism taking the base to r), priced and loaded as the sum of their
    images over the orbit, and every root uses its base's trees' images. Returns the trees of every root and
    the predicted max link load."""
    n = routes.n
    orbits: dict[int, list[tuple[int, np.ndarray]]] = {}
    for r in roots:
        base, pm = perms[r]
        orbits.setdefault(base, []).append((r, pm))
    load = np.zeros(routes.nl)
    chosen: dict[int, list[np.ndarray]] = {b: [] for b in orbits}

    def orbit_load(parent: np.ndarray, members: list[tuple[int, np.ndarray]]) -> np.ndarray:
        total = np.zeros(routes.nl)
        for r, pm in members:
            t = _map_tree(parent, pm)
            kids = np.array([v for v in range(n) if v != r], dtype=np.int64)
            par = t[kids]
            total += routes.load(kids * n + par if inward else par * n + kids)
        return total

    cache: dict[tuple[int, bytes], np.ndarray] = {}
    for p in range(max(1, passes)):
        for j in range(chunks):
            for base, members in orbits.items():
                if p > 0:
                    load -= cache[(base, chosen[base][j].tobytes())]
                top = float(load.max()) if load.size else 0.0
                y = np.exp(kappa * (load / top - 1.0)) if top > 0 else np.ones(routes.nl)
                price = routes.prices(y)
                np.fill_diagonal(price, 0.0)
                orbit = sum((price[np.ix_(pm, pm)] for _, pm in members), np.zeros((n, n)))
                np.fill_diagonal(orbit, np.inf)
                parent = _grow(orbit, base, inward)
                key = (base, parent.tobytes())
                if key not in cache:
                    cache[key] = orbit_load(parent, members)
                load += cache[key]
                if p == 0:
                    chosen[base].append(parent)
                else:
                    chosen[base][j] = parent
    np.maximum(load, 0.0, out=load)
    trees = {r: [_map_tree(t, perms[r][1]) for t in chosen[perms[r][0]]] for r in roots}
    return trees, float(load.max()) if load.size else 0.0


def _symmetries(topology: Topology, roots: Sequence[int]) -> dict[int, tuple[int, np.ndarray]] | None:
    """For every root, its orbit's base and an automorphism taking the base to it: the builder family's
    translations where the graph has them (checked link by link; cheap on large worlds), else the orbits
    found from the graph itself (``sim.bounds.symmetry``), so a topology file packs as its name would."""
    named = _automorphisms(topology, roots)
    if named is not None:
        return {r: (roots[0], pm) for r, pm in named.items()}
    from sim.bounds.symmetry import rank_orbits

    return rank_orbits(topology, roots)


def _automorphisms(topology: Topology, roots: Sequence[int]) -> dict[int, np.ndarray] | None:
    """For every root r, a rank permutation that maps roots[0] to r and is an automorphism of the
    topology, or None. Candidates come from the builder families, by the topology's name (rotations
    of ``ring``/``uring``/``switch``/``full``, translations of ``torus``, node and GPU rotations of
    ``cluster``/``dgx-h100``); each is checked link by link (same bandwidth and latency, switches
    onto switches), so a file that merely borrows a name gets None."""
    n = topology.ranks
    m = re.fullmatch(r"(ring|uring|switch|full|torus|cluster|dgx-h100):(\d+)(?:x(\d+))?", topology.name)
    if m is None:
        return None
    kind = m.group(1)
    if kind in ("ring", "uring", "switch", "full"):
        shape = (1, n)
    elif kind == "dgx-h100":
        shape = (int(m.group(2)), 8)
    elif m.group(3) is None:
        return None
    else:
        shape = (int(m.group(2)), int(m.group(3)))
    rows, cols = shape
    if rows * cols != n:
        return None
    base = roots[0]
    out: dict[int, np.ndarray] = {}
    for r in roots:
        di, dj = (r // cols - base // cols) % rows, (r % cols - base % cols) % cols
        perm = np.array([((v // cols + di) % rows) * cols + (v % cols + dj) % cols for v in range(n)], dtype=np.int64)
        nodes = {f"node{k}": f"node{(k + di) % rows}" for k in range(rows)} if kind in ("cluster", "dgx-h100") else {}
        if not _is_automorphism(topology, perm, nodes):
            return None
        out[r] = perm
    return out


def _is_automorphism(topology: Topology, perm: np.ndarray, switches: dict[str, str]) -> bool:
    g = topology.graph

    def f(x: Node) -> Node:
        return int(perm[x]) if isinstance(x, int) else switches.get(x, x)

    for u, v, a in g.edges(data=True):
        b = g.get_edge_data(f(u), f(v))
        if b is None or b["bandwidth"] != a["bandwidth"] or b["latency"] != a["latency"]:
            return False
    return True


# -- emitting transfers ------------------------------------------------------------------------

Slot = tuple[Buf, int]


class _Emitter:
    """Collects the tree messages of a schedule, then places them in steps, one lane per rank pair.

    Every message u -> v goes through u's scratch slot for the pair (a *lane*): a local copy of
    the data into the lane, then the send from the lane. The next copy into a lane waits, as a
    write after a read, for the previous send to finish, so each pair has at most one message in
    flight, in priority order (the chunk's number, then its depth in its tree). Steps are then
    assigned by list scheduling: a send goes two steps after its data is ready at u and two steps
    after the lane's previous send, its copy one step before it.
    """

    def __init__(self, ranks: int, lanes: int = 1) -> None:
        self.ranks = ranks
        self.lanes = lanes
        self.turn: dict[tuple[int, int, int], int] = {}
        self.scratch = [0] * ranks
        self.fixed: list[tuple[int, Transfer]] = []
        self.sends: list[tuple[int, int, int, int, Slot, int, Slot, Op, int]] = []
        self.ready: dict[tuple[int, Buf, int], int] = {}
        self.lane: dict[tuple[int, int, int, int], int] = {}
        self.groups = ranks  # lane groups handed out by ``group``, after the roots' own (0 .. ranks-1)
        self.pair_lanes: dict[tuple[int, int], int] = {}  # lanes for the sends u -> v where not ``lanes``

    def group(self) -> int:
        """A fresh lane group: its sends share no lane with any other group's."""
        self.groups += 1
        return self.groups

    def reserve(self, rank: int, count: int = 1) -> int:
        """``count`` fresh scratch slots of ``rank``; the first one's index."""
        i = self.scratch[rank]
        self.scratch[rank] += count
        return i

    def local(self, step: int, rank: int, s: Slot, d: Slot, count: int = 1) -> None:
        """A local copy at a fixed step; its destination is ready after it."""
        self.fixed.append((step, Transfer(rank, rank, s[0], s[1], d[0], d[1], count, Op.COPY)))
        for k in range(count):
            key = (rank, d[0], d[1] + k)
            self.ready[key] = max(self.ready.get(key, -1), step)

    def send(self, phase: int, priority: int, u: int, s: Slot, v: int, d: Slot, op: Op = Op.COPY,
             staged: int = -1) -> None:
        """A message u -> v of one chunk, placed later by ``schedule`` in (phase, priority) order;
        ``staged`` >= 0: through a lane of that group (lanes are per pair and group), else straight
        from ``s``."""
        self.sends.append((phase, priority, len(self.sends), u, s, v, d, op, staged))

    def schedule(self, coll: Collective, name: str) -> Schedule:
        steps: dict[int, list[Transfer]] = {}
        for step, t in self.fixed:
            steps.setdefault(step, []).append(t)
        ready, lanes = self.ready, self.lane
        last: dict[tuple[int, int, int, int], int] = {}
        turn = self.turn
        for _phase, _prio, _i, u, s, v, d, op, staged in sorted(self.sends):
            if staged < 0:
                at = ready.get((u, s[0], s[1]), -1) + 1
                steps.setdefault(at, []).append(Transfer(u, v, s[0], s[1], d[0], d[1], 1, op))
                dk = (v, d[0], d[1])
                ready[dk] = max(ready.get(dk, -1), at)
                continue
            which = turn.get((u, v, staged), 0)
            turn[(u, v, staged)] = (which + 1) % self.pair_lanes.get((u, v), self.lanes)
            key = (u, v, staged, which)
            lane = lanes.get(key)
            if lane is None:
                lane = lanes[key] = self.reserve(u)
            at = max(ready.get((u, s[0], s[1]), -1) + 2, last.get(key, -1) + 2)
            last[key] = at
            steps.setdefault(at - 1, []).append(Transfer(u, u, s[0], s[1], Buf.SCRATCH, lane, 1, Op.COPY))
            steps.setdefault(at, []).append(Transfer(u, v, Buf.SCRATCH, lane, d[0], d[1], 1, op))
            dk = (v, d[0], d[1])
            ready[dk] = max(ready.get(dk, -1), at)
        return Schedule(coll, name, tuple(Step(tuple(steps[s])) for s in sorted(steps)),
                        scratch_chunks=max(self.scratch, default=0))


DEEP = 3
"""The last candidate for an irregular packing (when ``chunks`` is not given): this many times the chunks, in
pipelines this many times longer (two-level 2x3 cluster reducescatter 92.8% -> 95.5%, random 7-GPU graph
reducescatter 97.1% -> 98.4%; the two-level allgather 97.1% -> 91.3%, where another candidate wins)."""
FAR_LANES = 2
"""Lanes per pipeline edge between far pairs (``_far_pairs``) in the third candidate for in-trees: a second
message in flight hides the route's latency (two-level 2x3 cluster, reducescatter: 89.9% with one, 92.8% with
two on the 10 us NIC hops; allgather loses with it, 97.1% -> 96.1%, so out-trees are not offered it)."""


def _far_pairs(topology: Topology) -> dict[tuple[int, int], int]:
    """``FAR_LANES`` for every pair of ranks whose route's latency is above the smallest over all pairs."""
    n = topology.ranks
    routes = topology.route_links_many([(u, v) for u in range(n) for v in range(n) if u != v])
    if not routes:
        return {}
    least = min(lat for _, lat in routes.values())
    return {pair: FAR_LANES for pair, (_, lat) in routes.items() if lat > least}


def _out_trees(e: _Emitter, phase: int, root: int, trees: list[np.ndarray], paced: bool, pipe: int,
               src: Callable[[int], Slot], dst: Callable[[int], Slot]) -> None:
    """Every chunk of ``root`` down its out-tree: as paced pipelines, or grouped by tree through the root's lanes."""
    if paced:
        for parent, js in _pipelines(trees, pipe):
            _paced_out(e, phase, root, parent, js, e.group(), src, dst)
    else:
        for parent, js in _groups(trees):
            _emit_out(e, phase, root, parent, js, src, dst)


def _in_trees(e: _Emitter, phase: int, root: int, trees: list[np.ndarray], paced: bool, pipe: int,
              own: Callable[[int, int], Slot], acc: Callable[[int, int], Slot]) -> None:
    """Every chunk of ``root`` up its in-tree, reducing: as paced pipelines, or grouped by tree."""
    if paced:
        for parent, js in _pipelines(trees, pipe):
            _paced_in(e, phase, root, parent, js, e.group(), own, acc)
    else:
        for parent, js in _groups(trees):
            _emit_in(e, phase, root, parent, js, own, acc)


def _groups(trees: list[np.ndarray]) -> list[tuple[np.ndarray, list[int]]]:
    """Chunks grouped by identical tree, in chunk order."""
    by: dict[bytes, tuple[np.ndarray, list[int]]] = {}
    for j, t in enumerate(trees):
        by.setdefault(t.tobytes(), (t, []))[1].append(j)
    return list(by.values())


def _emit_out(e: _Emitter, phase: int, root: int, parent: np.ndarray, js: list[int],
              src: Callable[[int], Slot], dst: Callable[[int], Slot]) -> None:
    """Chunks ``js`` down an out-tree: chunk j leaves the root from ``src(j)`` and lands in
    ``dst(j)`` everywhere; an edge at depth d has priority 2j + d."""
    order = edges_by_depth(children(parent, root), root)  # (depth of the edge, u, v)
    for j in js:
        for d, u, v in order:
            e.send(phase, 2 * j + d, u, src(j) if u == root else dst(j), v, dst(j),
                   staged=root if u == root else -1)


def _emit_in(e: _Emitter, phase: int, root: int, parent: np.ndarray, js: list[int],
             own: Callable[[int, int], Slot], acc: Callable[[int, int], Slot]) -> None:
    """Chunks ``js`` up an in-tree, reducing: a leaf v sends its own ``own(v, j)``, an inner rank
    its sum ``acc(v, j)`` (which must already hold its own piece), each reduced into the parent's
    ``acc``; a rank at height h sends with priority 2j + h + 1, after its children."""
    kids = children(parent, root)
    order, height = heights(kids, root)
    for j in js:
        for v in order:
            if v != root:
                u = int(parent[v])
                s = acc(v, j) if kids[v] else own(v, j)
                e.send(phase, 2 * j + height[v] + 1, v, s, u, acc(u, j), Op.REDUCE,
                       staged=root if not kids[v] else -1)


# -- the collectives ----------------------------------------------------------------------------


def synthesize(kind: Kind | str, topology: Topology, *, root: int | None = None, chunks: int | None = None,
               passes: int = PASSES, pace: bool | None = None) -> Schedule:
    """A tree schedule for ``kind`` on ``topology`` (module docstring), named ``synth``.

    ``chunks``: chunks per root's piece (allgather and reducescatter: per rank, so C = chunks;
    allreduce: C = ranks·chunks; broadcast and reduce: C = chunks); default ``default_chunks``.
    ``pace``: emit paced pipelines (``sim.bounds.pacing``) for allgather, reducescatter and allreduce, or not;
    None (the default): where a packing is symmetric with several orbits (``Packing.orbits``; the greedy packing's
    trees differ chunk to chunk, so its pipelines would be a few chunks long, and it keeps the lanes) on up to
    ``SELECT_MAX_RANKS`` ranks and ``SELECT_MAX_TRANSFERS`` transfers, both emissions are simulated at
    ``SELECT_SIZE`` and the faster is kept; elsewhere the lanes (not paced). The candidates: the lanes; paced
    pipelines; for in-trees, paced with ``FAR_LANES`` between far pairs (``_far_pairs``); and, when ``chunks`` is
    not given, paced with ``DEEP`` times the chunks in pipelines ``DEEP`` times longer (its collective then has
    that many chunks).
    """
    try:
        kind = Kind(kind)
    except ValueError:
        raise SynthesisError(f"collective: unknown kind {kind!r} (one of {', '.join(SYNTH_KINDS)})") from None
    if kind not in SYNTH_KINDS:
        raise SynthesisError(f"collective: cannot synthesize {kind} (one of {', '.join(SYNTH_KINDS)})")
    n = topology.ranks
    if kind in (Kind.BROADCAST, Kind.REDUCE):
        root = 0 if root is None else root
        if isinstance(root, bool) or not isinstance(root, int) or not 0 <= root < n:
            raise SynthesisError(f"root {root!r} out of range for a topology of {n} ranks")
    elif root is not None:
        raise SynthesisError(f"{kind} has no root, got root={root}")
    c = default_chunks(kind, n) if chunks is None else chunks
    if isinstance(c, bool) or not isinstance(c, int) or c < 1:
        raise SynthesisError(f"chunks must be an integer >= 1, got {chunks!r}")
    if isinstance(passes, bool) or not isinstance(passes, int) or passes < 1:
        raise SynthesisError(f"passes must be an integer >= 1, got {passes!r}")
    if pace is not None and not isinstance(pace, bool):
        raise SynthesisError(f"pace must be True, False or None (automatic), got {pace!r}")
    if kind in (Kind.ALLGATHER, Kind.REDUCESCATTER) and chunks is None and pace is None and _irregular_graph(topology):
        # The optimal packing, in steps (docs/design.md, "Optimal packings in steps").
        from sim.bounds.stepped import build

        return build(kind, topology)
    cache: dict[tuple[tuple[int, ...], bool, int], Packing] = {}

    def packed(roots: Sequence[int], inward: bool, k: int) -> Packing:
        key = (tuple(roots), inward, k)
        if key not in cache:
            cache[key] = pack(topology, roots, k, inward=inward, passes=passes)
        return cache[key]

    def emit(mode: bool, far: dict[tuple[int, int], int] | None = None, c: int = c,
             pipe: int = PIPELINE) -> tuple[Schedule, bool]:
        """The schedule, paced (``mode``) or not, and whether a packing it used has several orbits; ``far``: lanes
        for the sends between those pairs (paced only); ``c`` chunks a piece, ``pipe`` chunks a pipeline."""
        irregular = [False]
        e = _Emitter(n, ROOTED_LANES if kind in (Kind.BROADCAST, Kind.REDUCE) else LANES)
        rank_roots = range(n)

        def paced(pk: Packing) -> bool:
            if pk.method == "symmetric" and not pk.regular:
                irregular[0] = True
            if mode:
                e.lanes = 1  # one lane per pipeline edge; no unpaced sends share this emitter
                e.pair_lanes = far or {}
            return mode
        if kind is Kind.ALLGATHER:
            coll = Collective(kind, n, c)
            for r in rank_roots:
                e.local(0, r, (Buf.INPUT, 0), (Buf.OUTPUT, r * c), c)
            if n > 1:
                pk = packed(rank_roots, False, c)
                for r in rank_roots:
                    _out_trees(e, 0, r, pk.trees[r], paced(pk), pipe, lambda j: (Buf.INPUT, j),
                               lambda j, r=r: (Buf.OUTPUT, r * c + j))  # type: ignore[misc]
        elif kind is Kind.REDUCESCATTER:
            coll = Collective(kind, n, c)
            for r in rank_roots:
                e.local(0, r, (Buf.INPUT, r * c), (Buf.OUTPUT, 0), c)
            if n > 1:
                pk = packed(rank_roots, True, c)
                # Inner ranks sum in scratch: N·C slots each, filled with their own input first.
                base = [e.reserve(v, n * c) for v in range(n)]
                for v in range(n):
                    e.local(0, v, (Buf.INPUT, 0), (Buf.SCRATCH, base[v]), n * c)
                for r in rank_roots:
                    def own(v: int, j: int, r: int = r) -> Slot:
                        return (Buf.INPUT, r * c + j)

                    def acc(v: int, j: int, r: int = r) -> Slot:
                        return (Buf.OUTPUT, j) if v == r else (Buf.SCRATCH, base[v] + r * c + j)

                    _in_trees(e, 0, r, pk.trees[r], paced(pk), pipe, own, acc)
        elif kind is Kind.ALLREDUCE:
            coll = Collective(kind, n, n * c)
            if n > 1:
                rs = packed(rank_roots, True, c)
                ag = packed(rank_roots, False, c)
                for r in rank_roots:
                    def mine(v: int, j: int, r: int = r) -> Slot:
                        return (Buf.INPUT, r * c + j)

                    both = paced(rs) or paced(ag)
                    _in_trees(e, 0, r, rs.trees[r], both, pipe, mine, mine)
                    _out_trees(e, 1, r, ag.trees[r], both, pipe, lambda j, r=r: (Buf.INPUT, r * c + j),  # type: ignore[misc]
                               lambda j, r=r: (Buf.INPUT, r * c + j))  # type: ignore[misc]
        elif kind is Kind.BROADCAST:
            assert root is not None
            coll = Collective(kind, n, c, root)
            if n > 1:
                pk = packed([root], False, c)
                for parent, js in _groups(pk.trees[root]):
                    _emit_out(e, 0, root, parent, js, lambda j: (Buf.INPUT, j), lambda j: (Buf.INPUT, j))
        else:
            assert root is not None
            coll = Collective(kind, n, c, root)
            if n > 1:
                pk = packed([root], True, c)
                for parent, js in _groups(pk.trees[root]):
                    _emit_in(e, 0, root, parent, js, lambda v, j: (Buf.INPUT, j), lambda v, j: (Buf.INPUT, j))
        return e.schedule(coll, "synth"), irregular[0]

    if pace is not None:
        return emit(pace)[0]
    plain, irregular = emit(False)
    if not irregular or n > SELECT_MAX_RANKS or plain.num_transfers > SELECT_MAX_TRANSFERS:
        return plain
    # Roots that differ: keep whichever emission the simulator runs faster (docs/design.md, "Paced pipelines").
    from sim.engine.reference import simulate

    inward = kind in (Kind.REDUCESCATTER, Kind.ALLREDUCE)
    far = _far_pairs(topology) if inward else None
    candidates = [plain, emit(True)[0]]
    if inward:
        candidates.append(emit(True, far)[0])
    if chunks is None and plain.num_transfers * DEEP <= SELECT_MAX_TRANSFERS:
        # Deeper pipelines: fill and drain cost less of the run (random 7-GPU graph allgather 98.5% -> 99.3%).
        candidates.append(emit(True, far, DEEP * c, DEEP * PIPELINE)[0])
    # Timed without dataflow's send order (in_flight 0): the pipelines interleave trees on a port across steps,
    # for an executor that posts each transfer when its dependencies complete (the runner's dataflow one).
    times = [simulate(x, topology, SELECT_SIZE, in_flight=0).time for x in candidates]
    return candidates[times.index(min(times))]


def _irregular_graph(topology: Topology) -> bool:
    """Whether the optimal packing in steps serves ``topology`` (``FOREST_MAX_RANKS``): ranks joined by links
    alone (no switch: a step's messages then never share a link), every rank reachable over routes that pass no
    other rank, and no symmetry taking every rank to every other (where the symmetric packing is regular and
    reaches the bound in either send order)."""
    from sim.bounds.arborescence import strongly_connected, through_ranks

    n = topology.ranks
    if not 1 < n <= FOREST_MAX_RANKS or any(not isinstance(v, int) for v in topology.graph.nodes):
        return False
    if not strongly_connected(~through_ranks(topology)):
        return False
    perms = _symmetries(topology, range(n))
    return perms is None or len({base for base, _pm in perms.values()}) > 1


def predicted_time(pk: Packing, chunk_bytes: float) -> float:
    """The packing's bandwidth time for chunks of ``chunk_bytes``: max over links of bytes / bandwidth."""
    return pk.time_per_byte * chunk_bytes if math.isfinite(pk.time_per_byte) else math.inf
