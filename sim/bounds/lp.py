"""The exact all-to-all(v) bound: a max-concurrent-flow linear program, solved by HiGHS.

A traffic matrix T (``T[i][j]`` bytes from rank i to rank j, zero diagonal) is
one commodity per ordered pair. A schedule moves every byte over links of the
network, so for any schedule that takes time t, the bytes each link carries
fit in ``bandwidth · t``, and the bytes of each pair form a flow from i to j.
The smallest such t over all multi-commodity flows is therefore a lower bound
(the throughput term): it is the max-concurrent-flow problem (Shahrokhi &
Matula, "The maximum concurrent flow problem", JACM 37(2), 1990) with
λ = 1/t. Commodities are aggregated by source (Leighton & Rao's observation
that flows from one source can share one variable per link): for source s,
``f[s, e]`` bytes cross link e, leaving s with the row sum and delivering
``T[s][v]`` at every rank v; switches conserve. That is p commodities, not p².

    minimise t  subject to  Σ_s f[s, e] <= bandwidth(e) · t   for every link e
                            out_s(v) - in_s(v) = b_s(v)        for every source s and node v
                            f >= 0

Only links that carry some pair's route take part (``sim.bounds.cuts.routed_part``:
a byte never travels on another link); ``bound_alltoall`` on ``routed_part`` is
what the cut bound is on the same links, and the cut bound never exceeds it
(every cut's bytes cross the cut's links: the LP's capacity rows summed over
the cut).

Latency, stated carefully: a byte from i to j also needs at least the least
total link latency of a path i -> j, but the two terms do not add (a pipelined
schedule overlaps them), so ``bound_s`` is the larger of the throughput term
and the largest such latency over the pairs with traffic, each a lower bound
on its own. Per-message costs the simulator charges on top (none here) are not
part of it.

The duals of the capacity rows say where the bound comes from: by LP duality
they are prices y_e >= 0 with Σ_e y_e·bandwidth(e) = 1, and the links with
y_e > 0 are the bottleneck (``Bottleneck``: the link, the share
y_e·bandwidth(e) of the bound it accounts for, its load).

``routed_flow`` solves the same program on the overlay of rank pairs (each
pair's edge loads the links of its route, relays are ranks that store and
forward), which is what a schedule on this topology's routes can realise:
``sim.bounds.alltoall_synth`` cuts its flow into paths and chunks.

This module does not import torch.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import block_diag, coo_matrix, csr_matrix, hstack

from sim.bounds.cuts import BoundError, latency_term, routed_part
from sim.bounds.lp_symmetry import link_orbits, regular_group, symmetric_rows
from sim.topology import Node, Topology

__all__ = ["AllToAllBound", "Bottleneck", "RoutedFlow", "bound_alltoall", "bound_traffic", "check_matrix",
           "routed_flow", "uniform_matrix"]

IPM_VARIABLES = 10_000
"""Above this many flow variables on a topology without switches, HiGHS's interior-point solver (with its
crossover) replaces the dual simplex: measured on 2 loaded cores, torus:8x8 (16 k variables) 1.7 s against
35 s, torus:16x16 82 s against over 300 s; with switches the simplex stays faster (cluster:8x8 0.4 s against
0.6 s, cluster:32x8 12 s against 20 s)."""
SYMMETRIC_VARIABLES = 2_000
"""Above this many flow variables, a symmetry group of the topology that leaves the matrix invariant reduces
the LP to one commodity (``sim.bounds.lp_symmetry``; torus:16x16's
uniform all-to-all: 1 k variables instead of 262 k, was 82 s with the interior point)."""
DUAL_TOLERANCE = 1e-9
"""A capacity row whose share of the bound is below this is not reported as a bottleneck."""


@dataclass(frozen=True)
class Bottleneck:
    """A link whose capacity row is tight in the LP: ``share`` of the bound is due to it (the shares sum to 1)."""

    src: Node
    dst: Node
    share: float
    load_bytes: float

    def to_dict(self) -> dict[str, object]:
        """JSON-ready."""
        return {"link": [self.src, self.dst], "share": self.share, "load_bytes": self.load_bytes}


@dataclass(frozen=True)
class AllToAllBound:
    """The LP bound on an all-to-all(v) of ``total`` bytes: ``throughput_s`` from the LP, ``latency_s``
    the largest least path latency over pairs with traffic, ``bound_s`` the larger; ``bottlenecks``
    the links with positive duals (largest share first); ``solve_s`` HiGHS's wall time."""

    total: float
    throughput_s: float
    latency_s: float
    bottlenecks: tuple[Bottleneck, ...]
    variables: int
    solve_s: float

    @property
    def bound_s(self) -> float:
        """The larger of the throughput and latency terms."""
        return max(self.throughput_s, self.latency_s)

    def efficiency(self, time_s: float) -> float:
        """bound / time (1.0: the bound is reached)."""
        if time_s <= 0:
            return math.inf if self.bound_s > 0 else 1.0
        return self.bound_s / time_s

    def to_dict(self) -> dict[str, object]:
        """JSON-ready."""
        return {"bound_s": self.bound_s, "throughput_s": self.throughput_s, "latency_s": self.latency_s,
                "total_bytes": self.total, "variables": self.variables, "solve_s": self.solve_s,
                "bottlenecks": [b.to_dict() for b in self.bottlenecks]}


def uniform_matrix(ranks: int, size: float) -> np.ndarray:
    """The even all-to-all of ``size`` bytes per rank (the nccl-tests convention): size/p to every other rank."""
    t = np.full((ranks, ranks), float(size) / max(ranks, 1))
    np.fill_diagonal(t, 0.0)
    return t


def check_matrix(matrix: object, ranks: int) -> np.ndarray:
    """The matrix as a float array of shape (ranks, ranks), or BoundError naming the row that is wrong
    (shape, a negative or non-finite entry). The diagonal (a rank's data for itself) moves no bytes
    over the network and is ignored."""
    try:
        t = np.asarray(matrix, dtype=float)
    except (TypeError, ValueError):
        raise BoundError("matrix: not a matrix of numbers") from None
    if t.ndim != 2:
        raise BoundError(f"matrix: expected {ranks} rows of {ranks} entries, got a {t.ndim}-d array")
    if t.shape[0] != ranks:
        raise BoundError(f"matrix: {t.shape[0]} rows, but the world has {ranks} ranks")
    if t.shape[1] != ranks:
        raise BoundError(f"matrix row 0: {t.shape[1]} entries, but the world has {ranks} ranks")
    bad = ~np.isfinite(t) | (t < 0)
    if bad.any():
        i, j = (int(x) for x in np.argwhere(bad)[0])
        raise BoundError(f"matrix row {i}: entry {j} is {t[i, j]!r}; entries are bytes, finite and >= 0")
    t = t.copy()
    np.fill_diagonal(t, 0.0)
    return t


def _solve(incidence: csr_matrix, load: csr_matrix, capacity: np.ndarray, supply: np.ndarray, *,
           method: str = "highs") -> tuple[float, np.ndarray, np.ndarray, float]:
    """min t s.t. Σ_s load·x_s <= capacity·t, incidence·x_s = supply[s], x >= 0, for every source s.

    ``incidence`` (nodes x edges) is the node-arc matrix, ``load`` (links x edges) says which links
    an edge loads. Returns t, the flows (sources x edges), the capacity duals and HiGHS's wall time.
    """
    sources, nodes = supply.shape
    edges = incidence.shape[1]
    nlinks = load.shape[0]
    # Scaled so that the largest supply and the largest capacity are 1: HiGHS's tolerances are absolute.
    scale_b = float(np.abs(supply).max()) or 1.0
    scale_c = float(capacity.max()) or 1.0
    cap = capacity / scale_c
    a_eq = hstack([block_diag([incidence] * sources, format="csr"), csr_matrix((sources * nodes, 1))], format="csr")
    b_eq = (supply / scale_b).ravel()
    a_ub = hstack([hstack([load] * sources, format="csr"), csr_matrix(-cap.reshape(-1, 1))], format="csr")
    b_ub = np.zeros(nlinks)
    c = np.zeros(sources * edges + 1)
    c[-1] = 1.0
    t0 = time.perf_counter()
    res = linprog(c, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=b_eq, bounds=(0, None), method=method)
    wall = time.perf_counter() - t0
    if res.status != 0:
        raise BoundError(f"matrix: the flow LP failed ({res.message})")
    flows = res.x[:-1].reshape(sources, edges) * scale_b
    t = float(res.x[-1]) * scale_b / scale_c
    duals = -np.asarray(res.ineqlin.marginals) / scale_c  # per unit of real capacity: Σ y·bandwidth = 1
    return t, flows, duals, wall


def _supply(t: np.ndarray, sources: np.ndarray, nodes: int) -> np.ndarray:
    ranks = t.shape[0]
    b = np.zeros((len(sources), nodes))
    b[:, :ranks] = -t[sources]
    b[np.arange(len(sources)), sources] = t[sources].sum(axis=1)
    return b


def bound_alltoall(topology: Topology, matrix: object) -> AllToAllBound:
    """The max-concurrent-flow bound on an all-to-all(v) of ``matrix`` (bytes, rank x rank) on ``topology``'s
    routed links (module docstring)."""
    p = topology.ranks
    t = check_matrix(matrix, p)
    total = float(t.sum())
    pairs = [(int(i), int(j)) for i, j in np.argwhere(t > 0)]
    if not pairs:
        return AllToAllBound(total, 0.0, 0.0, (), 0, 0.0)
    net = routed_part(topology)
    links = list(net.links)
    bw = np.array(net.link_bandwidths())
    index = {node: (node if isinstance(node, int) else p + k)
             for k, node in enumerate(x for x in net.graph.nodes if not isinstance(x, int))}
    index.update({r: r for r in range(p)})
    nn = len(index)
    ne = len(links)
    tails = np.array([index[u] for u, _ in links])
    heads = np.array([index[v] for _, v in links])
    cols = np.arange(ne)
    incidence = coo_matrix((np.r_[np.ones(ne), -np.ones(ne)], (np.r_[tails, heads], np.r_[cols, cols])),
                           shape=(nn, ne)).tocsr()
    load = coo_matrix((np.ones(ne), (cols, cols)), shape=(ne, ne)).tocsr()
    sources = np.flatnonzero(t.sum(axis=1) > 0)
    perms = regular_group(net, t) if len(sources) * ne > SYMMETRIC_VARIABLES else None
    if perms is not None:
        # One commodity: source 0's flow, every other source's its image (sim.bounds.lp_symmetry, exact).
        orbit = link_orbits(net, perms)
        rows = symmetric_rows(orbit, p)
        first = np.unique(orbit, return_index=True)[1]
        time_s, flows, duals, wall = _solve(incidence, rows, bw[first], _supply(t, np.array([0]), nn))
        carried = (rows @ flows[0])[orbit]
        share = duals[orbit] / np.bincount(orbit)[orbit] * bw
    else:
        method = "highs-ipm" if nn == p and len(sources) * ne > IPM_VARIABLES else "highs"
        time_s, flows, duals, wall = _solve(incidence, load, bw, _supply(t, sources, nn), method=method)
        carried = flows.sum(axis=0)
        share = duals * bw
    order = np.argsort(-share)
    necks = tuple(Bottleneck(links[k][0], links[k][1], float(share[k]), float(carried[k]))
                  for k in order if share[k] > DUAL_TOLERANCE)
    return AllToAllBound(total, time_s, latency_term(net, pairs), necks, flows.size + 1, wall)


@dataclass(frozen=True)
class RoutedFlow:
    """The LP on the overlay of rank pairs: ``flow[s][u, v]`` bytes of source s's traffic go u -> v along
    the topology's route for (u, v); ``time_s`` the LP's throughput time for it."""

    time_s: float
    flow: dict[int, np.ndarray]


def routed_flow(topology: Topology, matrix: np.ndarray, *, relays: bool = True) -> RoutedFlow:
    """Max-concurrent flow where every hop is a routed rank-to-rank message (module docstring);
    ``relays=False`` keeps every pair on its own route (the direct schedule's load)."""
    p = topology.ranks
    t = check_matrix(matrix, p)
    sources = np.flatnonzero(t.sum(axis=1) > 0)
    if relays:
        edges = [(u, v) for u in range(p) for v in range(p) if u != v]
    else:
        edges = sorted({(int(i), int(j)) for i, j in np.argwhere(t > 0)})
    if not edges:
        return RoutedFlow(0.0, {})
    routes = topology.route_links_many(edges)
    used = sorted({link for e in edges for link in routes[e][0]})
    row = {link: k for k, link in enumerate(used)}
    bw_all = topology.link_bandwidths()
    bw = np.array([bw_all[link] for link in used])
    r_idx = [row[link] for e in edges for link in routes[e][0]]
    c_idx = [k for k, e in enumerate(edges) for _ in routes[e][0]]
    ne = len(edges)
    load = coo_matrix((np.ones(len(r_idx)), (r_idx, c_idx)), shape=(len(used), ne)).tocsr()
    if not relays:
        # Every pair's bytes on its own edge: no LP needed.
        amount = np.array([t[u, v] for u, v in edges])
        carried = load @ amount
        time_s = float((carried / bw).max())
        flow = {int(s): np.zeros((p, p)) for s in sources}
        for (u, v), a in zip(edges, amount, strict=True):
            flow[u][u, v] = a
        return RoutedFlow(time_s, flow)
    tails = np.array([u for u, _ in edges])
    heads = np.array([v for _, v in edges])
    cols = np.arange(ne)
    incidence = coo_matrix((np.r_[np.ones(ne), -np.ones(ne)], (np.r_[tails, heads], np.r_[cols, cols])),
                           shape=(p, ne)).tocsr()
    time_s, flows, _duals, _wall = _solve(incidence, load, bw, _supply(t, sources, p))
    out: dict[int, np.ndarray] = {}
    for k, s in enumerate(sources):
        m = np.zeros((p, p))
        m[tails, heads] = flows[k]
        out[int(s)] = m
    return RoutedFlow(time_s, out)


def bound_traffic(topology: Topology, collective: object, size: float) -> AllToAllBound:
    """``bound_alltoall`` for an alltoall or alltoallv ``Collective`` moving ``size`` bytes (the nccl-tests
    convention of ``sim.engine.reference.chunk_bytes``: its traffic matrix in chunks times the chunk's bytes)."""
    from algorithms.ir import Collective
    from sim.engine.reference import chunk_bytes

    if not isinstance(collective, Collective):
        raise BoundError(f"collective: expected a Collective, got {type(collective).__name__}")
    return bound_alltoall(topology, np.asarray(collective.traffic(), dtype=float) * chunk_bytes(collective, size))
