"""All-to-all(v) synthesis from the max-concurrent-flow LP: routes and rates over several paths, pipelined.

``synthesize_alltoall(topology, counts)`` returns an ordinary ``Schedule``
(it verifies, simulates, exports and runs like any library algorithm).

Method:

1. Rates: ``sim.bounds.lp.routed_flow`` solves the max-concurrent-flow LP on
   the overlay of rank pairs, where a hop u -> v is a message on the route the
   simulator gives that pair and a relay is a rank that stores and forwards
   (switches never store). When every pair's own route is within
   ``DIRECT_SLACK`` of it, the pairs send directly (fewer transfers, no relay
   memory); large worlds (over ``RELAY_MAX_RANKS``) send directly without
   solving.
2. Paths: each source's flow is cut into paths, one sink at a time (walk back
   from the sink along edges that carry flow, take the smallest of them and
   the sink's remaining demand; a cycle met on the way is cancelled), the
   standard flow decomposition (Ahuja, Magnanti & Orlin, "Network Flows",
   1993, §3.5).
3. Chunks: the block s -> j of ``counts[s][j]`` chunks is shared among its
   paths by largest remainder, in proportion to their flow, each path taking
   a contiguous range. Every path sends chunk by chunk through ``WINDOW``
   lanes at its source (a scratch slot per message in flight: the copy of the
   next chunk into a lane waits for the lane's send, a write after a read),
   so that a relay forwards chunk i while chunk i+1 is on its way: the path is
   a pipeline, and paced paths share the links evenly to the end. Every relay
   forwards through lanes of its own too (``pace_relays``): a relay whose next
   hop is slower than the one before would otherwise hold a backlog and put
   several of the path's messages on that hop at once, taking more than the
   path's share of a link the LP filled (Zipf(1.2) all-to-allv on cluster:2x8:
   79.5% of the bound with the source paced alone, 96.5% with every relay paced;
   the NIC downlinks into the hot expert's node then finish together).

This module does not import torch.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np

from algorithms.ir import Buf, Collective, Kind, Op, Schedule, Step, Transfer
from sim.bounds.lp import RoutedFlow, routed_flow
from sim.bounds.packing import SynthesisError
from sim.topology import Topology

__all__ = ["DIRECT_SLACK", "RELAY_MAX_RANKS", "alltoall_chunks", "decompose", "paths_for", "synthesize_alltoall"]

DIRECT_SLACK = 0.02
"""Send every pair directly when that load is within this fraction of the LP's (relays cost transfers and memory)."""
RELAY_MAX_RANKS = 64
"""Above this many ranks the overlay LP (p³ variables) is not solved and every pair sends directly."""
WINDOW = 1
"""Messages each path keeps in flight at its source. One is best under the simulator's max-min fair sharing
(measured at 1 GiB, 16 chunks: torus:4x4 97.7% of the LP bound with 1, 95.9% with 2, 91.5% with 4, 71% with
all of them at once; ring:8 99.3%, 97.0%, 88.9%): paced paths keep every tight link busy to the end."""

MESSAGES_PER_PATH = 16
"""Messages of about equal size a path is cut into on average (an all-to-allv's blocks hold many chunks)."""

Path = tuple[int, ...]


def alltoall_chunks(ranks: int) -> int:
    """Chunks per block when none are asked for: enough for the LP's path shares to round well on small worlds,
    about ranks²·chunks messages kept near a quarter of a million on large ones (one chunk a block from 512)."""
    return max(1, min(16, 262_144 // max(ranks * ranks, 1)))


def decompose(flow: np.ndarray, source: int, demand: np.ndarray) -> dict[int, list[tuple[Path, float]]]:
    """Paths from ``source`` carrying each sink's ``demand`` in ``flow`` (p x p, bytes on u -> v), by walking back
    from every sink along edges with flow (module docstring, step 2). Demand the flow does not reach (LP rounding)
    goes on the direct edge."""
    f = np.maximum(np.asarray(flow, dtype=float), 0.0)
    tol = max(float(demand.max()) if demand.size else 0.0, 1.0) * 1e-9
    out: dict[int, list[tuple[Path, float]]] = {}
    for sink in np.flatnonzero(demand > 0).tolist():
        j = int(sink)
        need = float(demand[j])
        got: list[tuple[Path, float]] = []
        while need > tol:
            walk = _walk_back(f, source, j, tol)
            if walk is None:
                got.append(((source, j), need))
                break
            path = tuple(reversed(walk))
            amount = min(need, min(float(f[a, b]) for a, b in pairwise(path)))
            for a, b in pairwise(path):
                f[a, b] -= amount
            need -= amount
            got.append((path, amount))
        out[j] = got
    return out


def _walk_back(f: np.ndarray, source: int, sink: int, tol: float) -> list[int] | None:
    """Nodes from ``sink`` back to ``source`` along the heaviest edges with flow, cancelling (in ``f``) every
    cycle of flow met on the way; None when no flow reaches the sink."""
    walk = [sink]
    seen = {sink: 0}
    cur = sink
    while cur != source:
        u = int(np.argmax(f[:, cur]))
        if f[u, cur] <= tol:
            return None
        if u in seen:  # a cycle u -> cur -> ... -> u: cancel it and walk again from the sink
            cycle = [u, *reversed(walk[seen[u]:])]
            m = min(float(f[a, b]) for a, b in pairwise(cycle))
            for a, b in pairwise(cycle):
                f[a, b] -= m
            walk, seen, cur = [sink], {sink: 0}, sink
            continue
        seen[u] = len(walk)
        walk.append(u)
        cur = u
    return walk


def _shares(amounts: list[float], chunks: int) -> list[int]:
    """``chunks`` shared in proportion to ``amounts`` by largest remainder."""
    total = sum(amounts)
    if total <= 0:
        return [chunks] + [0] * (len(amounts) - 1)
    ideal = [a / total * chunks for a in amounts]
    base = [int(x) for x in ideal]
    for k in sorted(range(len(ideal)), key=lambda k: base[k] - ideal[k])[:chunks - sum(base)]:
        base[k] += 1
    return base


def paths_for(topology: Topology, counts: np.ndarray, *, relays: bool | None = None,
              ) -> tuple[dict[tuple[int, int], list[tuple[Path, int]]], RoutedFlow]:
    """Every block's paths with their chunk counts (module docstring, steps 1-3), and the flow they came from."""
    p = topology.ranks
    direct = routed_flow(topology, counts, relays=False)
    flow = direct
    if relays is None:
        relays = p <= RELAY_MAX_RANKS
    if relays and p > 2:
        lp = routed_flow(topology, counts, relays=True)
        if direct.time_s > lp.time_s * (1 + DIRECT_SLACK):
            flow = lp
    blocks: dict[tuple[int, int], list[tuple[Path, int]]] = {}
    for s in range(p):
        row = counts[s].astype(float)
        row[s] = 0.0
        if not row.any():
            continue
        parts = decompose(flow.flow.get(s, np.zeros((p, p))), s, row) if flow is not direct else \
            {int(j): [((s, int(j)), float(row[j]))] for j in np.flatnonzero(row > 0)}
        for j, paths in parts.items():
            merged: dict[Path, float] = {}
            for path, a in paths:
                merged[path] = merged.get(path, 0.0) + a
            items = sorted(merged.items(), key=lambda kv: (len(kv[0]), kv[0]))
            shares = _shares([a for _, a in items], int(counts[s, j]))
            blocks[(s, j)] = [(path, q) for (path, _), q in zip(items, shares, strict=True) if q > 0]
    return blocks, flow


def synthesize_alltoall(topology: Topology, *, chunks: int | None = None, matrix: object = None,
                        relays: bool | None = None, window: int = WINDOW) -> Schedule:
    """An all-to-all(v) schedule on ``topology`` from the LP's flows (module docstring), named ``synth``.

    Without ``matrix``: the even all-to-all of ``chunks`` chunks per block (default ``alltoall_chunks``).
    With it: the all-to-allv of that traffic matrix in chunks (``algorithms.matrices``; a bad one is refused
    naming its row). ``relays``: allow paths through other ranks (default: up to ``RELAY_MAX_RANKS`` ranks).
    """
    p = topology.ranks
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise SynthesisError(f"window must be an integer >= 1, got {window!r}")
    if matrix is None:
        c = alltoall_chunks(p) if chunks is None else chunks
        if isinstance(c, bool) or not isinstance(c, int) or c < 1:
            raise SynthesisError(f"chunks must be an integer >= 1, got {chunks!r}")
        coll = Collective(Kind.ALLTOALL, p, c)
    else:
        if chunks not in (None, 1):
            raise SynthesisError(f"chunks: an alltoallv's matrix counts its chunks, got chunks={chunks!r}")
        coll = Collective(Kind.ALLTOALLV, p, matrix=matrix)  # type: ignore[arg-type]
    counts = np.array(coll.traffic(), dtype=np.int64)
    send = np.array([[coll.send_offset(s, j) for j in range(p)] for s in range(p)], dtype=np.int64)
    recv = np.array([[coll.recv_offset(j, s) for j in range(p)] for s in range(p)], dtype=np.int64)
    steps: dict[int, list[Transfer]] = {}
    scratch = [0] * p
    for r in range(p):
        if counts[r, r] > 0:  # the own block: one local copy
            steps.setdefault(0, []).append(Transfer(r, r, Buf.INPUT, int(send[r, r]), Buf.OUTPUT, int(recv[r, r]),
                                                    int(counts[r, r]), Op.COPY))
    blocks, _flow = paths_for(topology, counts, relays=relays)
    sizes = [q for paths in blocks.values() for _, q in paths]
    grain = max(1, -(-sum(sizes) // max(1, MESSAGES_PER_PATH * len(sizes))))
    typical = float(np.median(sizes)) if sizes else 1.0
    for (s, j), paths in sorted(blocks.items()):
        i0 = 0
        for path, q in paths:
            width = max(window, round(window * q / typical))  # rate in proportion to the path's bytes
            _emit_path(steps, scratch, path, q, width, grain, int(send[s, j]) + i0, int(recv[s, j]) + i0)
            i0 += q
    return Schedule(coll, "synth", tuple(Step(tuple(steps[k])) for k in sorted(steps)),
                    scratch_chunks=max(scratch, default=0))


def _emit_path(steps: dict[int, list[Transfer]], scratch: list[int], path: Path, q: int, window: int, grain: int,
               src: int, dst: int, *, pace_relays: bool = True) -> None:
    """The q chunks of one path (``src`` in the source's input, ``dst`` in the sink's output), in messages of
    ``grain`` chunks, ``window`` of them in flight at the source (module docstring, step 3) and, with
    ``pace_relays``, at every relay too; steps by list scheduling, so that the lockstep order is correct too."""
    pieces = [(k, min(grain, q - k)) for k in range(0, q, grain)]
    width = max(1, min(window, len(pieces)))
    s = path[0]
    hops = list(pairwise(path))
    held = {}
    for v in path[1:-1]:
        held[v] = scratch[v]
        scratch[v] += q
    # Lanes: scratch slots a hop's sender copies a message into and sends it from; the next copy into a lane
    # waits for its previous send (a write after a read), which paces the hop.
    senders = [s, *path[1:-1]] if pace_relays else [s]
    lanes: dict[int, list[int]] = {}
    if width < len(pieces):
        for u in senders:
            lanes[u] = [scratch[u] + k * grain for k in range(width)]
            scratch[u] += width * grain
    last = {u: [-1] * width for u in lanes}
    for n, (k, cnt) in enumerate(pieces):
        w = n % width
        there = -1  # the step after which the message is at the hop's sender
        for d, (u, v) in enumerate(hops):
            a = (Buf.INPUT, src + k) if d == 0 else (Buf.SCRATCH, held[u] + k)
            b = (Buf.OUTPUT, dst + k) if v == path[-1] else (Buf.SCRATCH, held[v] + k)
            at = there + 1
            if u in lanes:
                at = max(there, last[u][w]) + 1
                steps.setdefault(at, []).append(Transfer(u, u, a[0], a[1], Buf.SCRATCH, lanes[u][w], cnt, Op.COPY))
                at += 1
                last[u][w] = at
                a = (Buf.SCRATCH, lanes[u][w])
            steps.setdefault(at, []).append(Transfer(u, v, a[0], a[1], b[0], b[1], cnt, Op.COPY))
            there = at
