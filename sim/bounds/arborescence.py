"""Exact fractional packing of spanning arborescences for allgather and reducescatter, and its integer form.

The throughput-optimal allgather on a capacitated digraph sends every rank's piece down a weighted set of
out-arborescences rooted at that rank (reducescatter: in-arborescences into it), and the best packing reaches the
cut bound ``sim.bounds.cuts`` computes (Edmonds' branching theorem, as ForestColl uses it: Zhao et al.,
"ForestColl: Throughput-Optimal Collective Communications on Heterogeneous Network Fabrics", arXiv 2402.06787).
ForestColl finds the packing combinatorially (edge splitting, then Edmonds' construction); here the same optimum
comes from a linear program solved by column generation, which also prices every tree edge along the route the
simulator gives that pair of ranks (``Topology.route``), so switches and multi-hop routes need no special case:

    min T  subject to  sum over trees t of root r of x_t = 1        for every root r
                       sum over t of load_l(t) · x_t <= T            for every link l
                       x >= 0,

where load_l(t) is the seconds per byte tree t puts on link l (one message per tree edge, each crossing the
links of its route). The master LP (scipy's HiGHS) runs over the trees found so far; its link duals y price a
link at y_l / bandwidth_l, and the cheapest tree of every root under those prices is a minimum-cost spanning
arborescence (Chu & Liu 1965, Edmonds 1967: ``min_arborescence``). A tree cheaper than the root's dual joins the
master; when none is, the master is optimal. Every round also gives a lower bound, sum over roots of the
cheapest tree's price (the duals sum to one), so the loop stops when the two meet.

The schedule needs whole chunks: ``integer_packing`` picks, by a small mixed-integer program over the trees
the column generation found, K trees per root (with repetition) that load the links least, so that K chunks of
every root, one down each tree, make a *round* that loads every link in proportion to the optimum
(``sim.bounds.stepped`` pipelines the rounds).

This module does not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from algorithms.errors import CollschedError
from sim.topology import Topology

__all__ = ["Forest", "Routes", "best_integer_packing", "fractional_packing", "integer_packing", "min_arborescence",
           "strongly_connected", "through_ranks"]

GAP = 1e-6
"""Column generation stops when the master's time is within this fraction of the lower bound."""
MAX_ROUNDS = 200
"""Column generation rounds at most (each adds up to one tree per root)."""
TREES_PER_ROOT = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 30, 32, 40, 48, 60, 64)
"""The k ``best_integer_packing`` tries, in order, until one comes within ``ROUNDING`` of the fractional optimum."""
ROUNDING = 1e-3
MILP_SECONDS = 5.0
"""Time limit of the rounding program; past it, the best integer solution found (the LP's rounding at worst)."""


def min_arborescence(cost: np.ndarray, root: int) -> np.ndarray:
    """The minimum-cost spanning out-arborescence of the complete digraph ``cost`` (``cost[u, v]``: edge u -> v)
    rooted at ``root``, as a parent array (the root's entry is itself): Chu-Liu/Edmonds (Chu & Liu 1965,
    Edmonds 1967). Every rank must be reachable from the root by finite edges."""
    n = cost.shape[0]
    c = np.array(cost, dtype=float)
    np.fill_diagonal(c, np.inf)
    c[:, root] = np.inf
    if n == 1:
        return np.zeros(1, dtype=np.int64)
    # Step 1: every node but the root takes its cheapest edge in.
    parent = np.argmin(c, axis=0).astype(np.int64)
    parent[root] = root
    rest = np.flatnonzero(np.arange(n) != root)
    if not np.isfinite(c[parent[rest], rest]).all():
        raise CollschedError(f"min_arborescence: some rank cannot be reached from root {root}")
    cycle = _find_cycle(parent, root)
    if cycle is None:
        return parent
    # Step 2: contract the cycle into one node; an edge into it is priced by what it saves on the cycle.
    inside = np.zeros(n, dtype=bool)
    inside[cycle] = True
    others = np.flatnonzero(~inside)
    m = len(others)
    sub = np.full((m + 1, m + 1), np.inf)
    sub[:m, :m] = c[np.ix_(others, others)]
    enter = c[np.ix_(others, cycle)] - c[parent[cycle], cycle][None, :]
    sub[:m, m] = enter.min(axis=1)
    enter_at = cycle[enter.argmin(axis=1)]
    leave = c[np.ix_(cycle, others)]
    sub[m, :m] = leave.min(axis=0)
    leave_from = cycle[leave.argmin(axis=0)]
    inner = min_arborescence(sub, int(np.flatnonzero(others == root)[0]))
    # Step 3: expand: the cycle keeps its edges but the one its entering edge replaces.
    out = parent.copy()
    for i, w in enumerate(others.tolist()):
        if w == root:
            continue
        p = int(inner[i])
        out[w] = leave_from[i] if p == m else others[p]
    u = int(inner[m])
    out[enter_at[u]] = others[u]
    return out


def _find_cycle(parent: np.ndarray, root: int) -> np.ndarray | None:
    """A cycle of the parent pointers (which avoid the root's own entry), or None."""
    n = len(parent)
    state = np.zeros(n, dtype=np.int8)  # 0 unseen, 1 on the current walk, 2 done
    state[root] = 2
    for start in range(n):
        path = []
        v = start
        while state[v] == 0:
            state[v] = 1
            path.append(v)
            v = int(parent[v])
        if state[v] == 1:
            return np.array(path[path.index(v):], dtype=np.int64)
        for w in path:
            state[w] = 2
    return None



class Routes:
    """Every ordered rank pair's route as link ids, padded into one array for vectorised pricing."""

    def __init__(self, topology: Topology) -> None:
        n = topology.ranks
        self.n = n
        self.nl = len(topology.links)
        pairs = [(u, v) for u in range(n) for v in range(n) if u != v]
        routes = topology.route_links_many(pairs)
        width = max((len(routes[p][0]) for p in pairs), default=1)
        pad = np.full((n * n, max(width, 1)), self.nl, dtype=np.int64)  # index nl: a free dummy link
        for (u, v), (links, _lat) in routes.items():
            pad[u * n + v, :len(links)] = links
        self.pad = pad
        self.inv_bw = np.array([1.0 / b for b in topology.link_bandwidths()] + [0.0])

    def prices(self, y: np.ndarray) -> np.ndarray:
        """N x N matrix: the price of a message u -> v, the sum of y[l]/bandwidth[l] along its route."""
        w = np.append(y, 0.0) * self.inv_bw
        c = w[self.pad].sum(axis=1).reshape(self.n, self.n)
        np.fill_diagonal(c, np.inf)
        return c

    def load(self, pairs: np.ndarray) -> np.ndarray:
        """Seconds per byte each link carries when every pair (u·N + v) sends one byte."""
        counts = np.bincount(self.pad[pairs].ravel(), minlength=self.nl + 1).astype(float)
        return (counts * self.inv_bw)[:self.nl]


@dataclass(frozen=True)
class Forest:
    """Trees of every root with their weights: ``trees[r]`` is a list of (parent array, weight).

    Fractional (``fractional_packing``): the weights of a root sum to 1 and ``time`` is the seconds per byte
    of every root's piece, the LP's T. Integer (``integer_packing``): the weights are whole trees, ``k`` of
    them per root, and ``time`` the seconds per byte of a round of k chunks of every root, over k.
    """

    inward: bool
    trees: dict[int, list[tuple[np.ndarray, float]]]
    time: float
    lower: float
    """A lower bound on ``time`` over every packing (fractional: the column generation's)."""
    k: int = 0
    rounds: int = 0
    """Column generation rounds run."""
    columns: _Columns | None = field(default=None, repr=False, compare=False)
    """Every tree the column generation found (fractional packings), for ``integer_packing`` to choose from."""
    weights: np.ndarray | None = field(default=None, repr=False, compare=False)
    """The LP's weight of every tree of ``columns``."""

    def depth(self) -> int:
        """The most hops from a root to a rank (out-trees) or from a rank to the root (in-trees), over the trees."""
        return max((_depth(p, r) for r, ts in self.trees.items() for p, _w in ts), default=0)


def _depth(parent: np.ndarray, root: int) -> int:
    n = len(parent)
    best = 0
    for v in range(n):
        d = 0
        while v != root:
            v = int(parent[v])
            d += 1
            if d > n:
                raise CollschedError(f"tree of root {root} is not a tree: {parent.tolist()}")
        best = max(best, d)
    return best


class _Columns:
    """The trees found so far: their roots, parent arrays and link loads (seconds per byte, scaled)."""

    def __init__(self, links: int) -> None:
        self.root: list[int] = []
        self.parent: list[np.ndarray] = []
        self.load: list[np.ndarray] = []
        self.seen: set[tuple[int, bytes]] = set()
        self.links = links

    def add(self, root: int, parent: np.ndarray, load: np.ndarray) -> bool:
        key = (root, parent.tobytes())
        if key in self.seen:
            return False
        self.seen.add(key)
        self.root.append(root)
        self.parent.append(parent)
        self.load.append(load)
        return True

    def matrix(self) -> np.ndarray:
        return np.array(self.load).T  # links x trees


def fractional_packing(topology: Topology, *, inward: bool, start: list[tuple[int, np.ndarray]] | None = None,
                       gap: float = GAP, max_rounds: int = MAX_ROUNDS) -> Forest:
    """The optimal fractional packing of spanning trees of every rank (module docstring): out-trees, or in-trees
    (``inward``); ``start``: (root, parent) trees to seed the master with besides the stars."""
    from scipy.optimize import linprog


    n = topology.ranks
    routes = Routes(topology)
    scale = float(routes.inv_bw[:-1].min()) if routes.nl else 1.0  # loads in units of the fastest link
    cols = _Columns(routes.nl)

    def load_of(root: int, parent: np.ndarray) -> np.ndarray:
        kids = np.array([v for v in range(n) if v != root], dtype=np.int64)
        par = parent[kids]
        return routes.load(kids * n + par if inward else par * n + kids) / scale

    through = through_ranks(topology)
    direct = np.where(through, np.inf, 1.0)
    np.fill_diagonal(direct, np.inf)
    if strongly_connected(~through):
        # Every rank reachable by messages that pass no other rank: relaying at that rank loads the same links and
        # gives the simulator one flow per link, so routes through ranks are left out (and the stars with them).
        for r in range(n):
            seed = min_arborescence(direct.T if inward else direct, r)
            cols.add(r, seed, load_of(r, seed))
    else:
        through[:] = False
        for r in range(n):
            star = np.full(n, r, dtype=np.int64)
            cols.add(r, star, load_of(r, star))
    for r, parent in start or ():
        cols.add(r, parent, load_of(r, parent))
    shallow = [_layered(~through if not inward else ~through.T, r) for r in range(n)]
    lower = 0.0
    time = np.inf
    x = np.zeros(0)
    rounds = 0
    while rounds < max_rounds:
        rounds += 1
        a = cols.matrix()
        nt = a.shape[1]
        roots = np.array(cols.root)
        a_ub = np.hstack([a, -np.ones((routes.nl, 1))])
        a_eq = np.zeros((n, nt + 1))
        a_eq[roots, np.arange(nt)] = 1.0
        obj = np.zeros(nt + 1)
        obj[-1] = 1.0
        res = linprog(obj, A_ub=a_ub, b_ub=np.zeros(routes.nl), A_eq=a_eq, b_eq=np.ones(n), method="highs")
        if res.status != 0:
            raise CollschedError(f"arborescence packing: the master LP failed ({res.message})")
        x, time = res.x[:-1], float(res.x[-1])
        y = np.maximum(-res.ineqlin.marginals, 0.0)
        pi = res.eqlin.marginals
        price = routes.prices(y * scale)
        price[through] = np.inf
        best = 0.0
        added = False
        for r in range(n):
            parent = min_arborescence(price.T if inward else price, r)
            load = load_of(r, parent)
            cost = float(load @ y)
            best += cost
            if cost < pi[r] - gap * max(time, 1e-300) / n:
                added |= cols.add(r, parent, load)
            # The cheapest tree of least depth too, for the rounding to trade a little load for shallower pipelines.
            parent = min_arborescence(np.where(shallow[r], price.T if inward else price, np.inf), r)
            cols.add(r, parent, load_of(r, parent))
        lower = max(lower, best)
        if not added or time <= lower * (1 + gap):
            break
    x = np.append(x, np.zeros(len(cols.root) - len(x)))  # the last round's shallow trees: not in the master yet
    trees: dict[int, list[tuple[np.ndarray, float]]] = {r: [] for r in range(n)}
    for t in np.flatnonzero(x > 1e-9):
        trees[cols.root[t]].append((cols.parent[t], float(x[t])))
    return Forest(inward, trees, time * scale, lower * scale, 0, rounds, cols, x)


def through_ranks(topology: Topology) -> np.ndarray:
    """N x N: whether the route u -> v passes through a rank other than u and v."""
    n = topology.ranks
    out = np.zeros((n, n), dtype=bool)
    for u in range(n):
        for v in range(n):
            if u != v:
                out[u, v] = any(isinstance(x, int) for x in topology.route(u, v)[1:-1])
    return out


def _layered(allowed: np.ndarray, root: int) -> np.ndarray:
    """The ``allowed`` edges u -> v that lead one hop further from ``root`` (v at hop distance d(u) + 1): every
    spanning arborescence of them has the least depth."""
    n = allowed.shape[0]
    dist = np.full(n, -1)
    dist[root] = 0
    frontier = [root]
    while frontier:
        nxt = []
        for u in frontier:
            for v in np.flatnonzero(allowed[u] & (dist < 0)).tolist():
                dist[v] = dist[u] + 1
                nxt.append(v)
        frontier = nxt
    return allowed & (dist[None, :] == dist[:, None] + 1) & (dist[:, None] >= 0)


def strongly_connected(allowed: np.ndarray) -> bool:
    """Whether the digraph of ``allowed`` pairs is strongly connected."""
    n = allowed.shape[0]
    for m in (allowed, allowed.T):
        seen = np.zeros(n, dtype=bool)
        seen[0] = True
        frontier = [0]
        while frontier:
            u = frontier.pop()
            new = np.flatnonzero(m[u] & ~seen)
            seen[new] = True
            frontier.extend(new.tolist())
        if not seen.all():
            return False
    return True


def integer_packing(forest: Forest, k: int, *, depth_weight: float = 0.0, seconds: float = MILP_SECONDS) -> Forest:
    """K whole trees per root from the trees ``fractional_packing`` found (repeats allowed), loading the links
    least: a mixed-integer program (HiGHS) within ``seconds`` (past it, the LP's rounding). ``depth_weight``:
    what one more level of the deepest tree costs, as a fraction of the optimal time (a pipeline's fill and
    drain, ``sim.bounds.stepped``), minimised with the load."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    cols, x = forest.columns, forest.weights
    if cols is None or x is None:
        raise CollschedError("integer_packing: needs a fractional packing (fractional_packing's)")
    a = cols.matrix()
    nl, nt = a.shape
    roots = np.array(cols.root)
    n = int(roots.max()) + 1
    optimum = float((a @ x).max()) * k
    depths = np.array([_depth(p, r) for p, r in zip(cols.parent, cols.root, strict=True)], dtype=float)
    # Variables: the count of every tree, whether it is used, the round's busiest link T, the deepest tree used D.
    nv = 2 * nt + 2
    obj = np.zeros(nv)
    obj[-2] = 1.0
    obj[-1] = depth_weight * optimum
    load = np.zeros((nl, nv))
    load[:, :nt] = a
    load[:, -2] = -1.0
    per_root = np.zeros((n, nv))
    per_root[roots, np.arange(nt)] = 1.0
    used = np.zeros((nt, nv))
    used[np.arange(nt), np.arange(nt)] = 1.0
    used[np.arange(nt), nt + np.arange(nt)] = -float(k)
    deep = np.zeros((nt, nv))
    deep[np.arange(nt), nt + np.arange(nt)] = depths
    deep[:, -1] = -1.0
    cons = [LinearConstraint(load, -np.inf, 0.0), LinearConstraint(per_root, k, k),
            LinearConstraint(used, -np.inf, 0.0), LinearConstraint(deep, -np.inf, 0.0)]
    integrality = np.ones(nv)
    integrality[-2:] = 0
    upper = np.full(nv, np.inf)
    upper[nt:2 * nt] = 1.0
    res = milp(obj, constraints=cons, integrality=integrality, bounds=Bounds(0, upper),
               options={"time_limit": seconds, "mip_rel_gap": 1e-4})
    counts = np.rint(res.x[:nt]).astype(np.int64) if res.x is not None else _round(x, roots, k)
    scale = forest.time / max(optimum / k, 1e-300)
    trees: dict[int, list[tuple[np.ndarray, float]]] = {r: [] for r in range(n)}
    for t in np.flatnonzero(counts > 0):
        trees[cols.root[t]].append((cols.parent[t], float(counts[t])))
    time = float((a @ counts).max()) * scale / k
    return Forest(forest.inward, trees, time, forest.lower, k, forest.rounds)


def best_integer_packing(forest: Forest, *, depth_weight: float = 0.0, ks: tuple[int, ...] = TREES_PER_ROOT,
                         rounding: float = ROUNDING) -> Forest:
    """``integer_packing`` for the k of ``ks`` that minimises time·(1 + depth_weight·(depth - 1)), trying them in
    order and stopping at the first within ``rounding`` of the fractional optimum at the least depth seen
    (a smaller k: fewer distinct trees, fewer transfers)."""
    best: Forest | None = None
    score = np.inf
    for k in ks:
        got = integer_packing(forest, k, depth_weight=depth_weight)
        mine = got.time * (1 + depth_weight * (got.depth() - 1))
        if mine < score * (1 - 1e-9):
            best, score = got, mine
        if got.time <= forest.time * (1 + rounding) and got.depth() <= best.depth():  # type: ignore[union-attr]
            break
    assert best is not None
    return best


def _round(x: np.ndarray, roots: np.ndarray, k: int) -> np.ndarray:
    """The LP weights times k, rounded per root by largest remainders so that every root has k trees."""
    want = x * k
    counts = np.floor(want).astype(np.int64)
    for r in np.unique(roots):
        mine = np.flatnonzero(roots == r)
        short = k - int(counts[mine].sum())
        order = mine[np.argsort(-(want[mine] - counts[mine]), kind="stable")]
        counts[order[:short]] += 1
    return counts
