"""NCCL's ring and tree algorithms on nodes of G GPUs, over many channels, rail-matched.

Ranks are node-major, as NCCL numbers them on a homogeneous cluster: rank = node·G + gpu, and GPU g of
every node owns NIC g, on rail g (the leaf switch that joins the g-th NICs of all nodes).

Rings (``nccl_ring``). NCCL builds one ring per channel (src/graph/search.cc, "Search Patterns"; the
rings are joined across nodes in src/graph/connect.cc, connectRings, and checked in src/graph/rings.cc,
ncclBuildRings): inside a node the ring enters at one GPU, visits every GPU over NVLink and leaves the
node; the next node's ring enters where this one left. On a rail-optimised machine the search keeps the
network hop on one rail (NCCL_CROSS_NIC: a ring that stays on its NIC is preferred), and different
channels start at different GPUs, so that the channels together use every NIC of a node. NCCL leaves a
node through the NIC it entered by, forwarding the last GPU's data over NVLink to that NIC (PXN); a
schedule of GPU-to-GPU transfers states the network hop as GPU x of node n to GPU x of node n+1
instead, so the path inside a node must end on a different GPU than it began. We let consecutive nodes
walk their GPUs in alternating directions: node n enters at GPU e_n and leaves from GPU e_{n+1}, with
e_n = c for even n and c-1 for odd n in channel c (an odd node count ends on c-2 when G >= 3). Every
network hop then joins two GPUs of the same index, and for K = G channels each NIC of each node sends
one channel's traffic and receives one, the load NCCL's rings put on them. Only G = 2 with an odd node
count cannot be rail-matched (two GPU indices cannot alternate around an odd cycle): there the hop from
the last node back to node 0 changes rails. The data is split evenly across the channels; each runs the
textbook ring algorithm of its kind on its ring (Patarasuk & Yuan 2009 for all-reduce; NCCL's
broadcast and reduce are pipelined chains along the ring from and to the root,
src/device/broadcast.h and reduce.h).

Trees (``nccl_tree``). NCCL's all-reduce tree (src/graph/connect.cc, connectTrees; src/graph/trees.cc,
ncclGetDtree): inside each node a chain of its G GPUs (search pattern "Tree": NET -> GPU a -> GPU b
-> ... ; on Hopper the simpler pattern in which the parent and both children across nodes attach to the
chain's first GPU, src/graph/search.cc), and between nodes NCCL's double binary tree over the node
heads: the binary tree of ncclGetBtree and its mirror (even node count) or its shift by one (odd). Each
channel pairs the two trees on one chain, headed by GPU c of every node (rail c), each tree carrying
half of the channel's data: reduce towards the root, then broadcast back, pipelined chunk by chunk
(src/device/all_reduce.h, runTreeUpDown).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from algorithms.builder import ScheduleBuilder
from algorithms.ir import Buf, Collective, Kind, Op, Schedule
from algorithms.library.allreduce import _dbt_parents, _tree_shape
from algorithms.library.fold import log2ceil
from algorithms.registry import CHUNKS, Cost, Parameter, register

__all__ = ["CHANNELS", "GROUP", "channel_count", "rail_rings", "tree_parents"]

GROUP = Parameter("group", 1, "GPUs per node; ranks are node-major (rank = node·group + gpu), group must divide p")
CHANNELS = Parameter("channels", 0, "channels (rings, or tree pairs), the data split evenly across them; "
                     "0: one per GPU of a node (= group)", minimum=0)
PARAMS = (CHUNKS, GROUP, CHANNELS)
CONSTRAINTS = ("group divides p (nodes of group GPUs, rank = node·group + gpu)",)
RING_SOURCE = "NCCL rings (src/graph/search.cc, connect.cc, rings.cc), rail-matched per channel"
TREE_SOURCE = "NCCL trees (src/graph/connect.cc connectTrees, src/graph/trees.cc ncclGetDtree)"


def _check(p: int, params: Mapping[str, Any]) -> str | None:
    g = params["group"]
    if p % g:
        return f"group={g} does not divide {p} ranks (nodes of group GPUs each, rank = node·group + gpu)"
    return None


def channel_count(params: Mapping[str, Any]) -> int:
    """The number of channels K: ``channels``, or the node's GPU count when it is 0."""
    return int(params["channels"]) or int(params["group"])


def _entries(nodes: int, g: int, c: int) -> list[int]:
    """The GPU at which channel c's ring enters each node; it leaves from the next node's entry GPU."""
    if g == 1:
        return [0] * nodes
    e = [(c - n % 2) % g for n in range(nodes)]
    if nodes % 2 and nodes > 1 and g >= 3:
        e[-1] = (c - 2) % g  # an odd cycle needs a third index
    return e


def _path(e: int, x: int, g: int) -> list[int]:
    """The GPUs of one node in ring order, from entry e to exit x (x != e unless g = 1)."""
    if g == 1:
        return [e]
    if x == (e - 1) % g:
        return [(e + i) % g for i in range(g)]
    if x == (e + 1) % g:
        return [(e - i) % g for i in range(g)]
    return [e] + [(e + i) % g for i in range(1, g) if (e + i) % g != x] + [x]


def rail_rings(ranks: int, group: int, channels: int) -> list[list[int]]:
    """Each channel's ring, as the ranks in ring order (module docstring): rank = node·group + gpu.

    With one node, channel c is the ring c, c+1, ..., c-1 over NVLink. Across nodes, a node-crossing
    edge of ring c joins GPU x of node n to GPU x of node n+1 (except G = 2 with an odd node count).
    """
    g, nodes = group, ranks // group
    rings = []
    for c in range(channels):
        if nodes == 1:
            rings.append([(c + i) % g for i in range(g)])
            continue
        e = _entries(nodes, g, c % g)
        order: list[int] = []
        for n in range(nodes):
            x = e[(n + 1) % nodes]
            if x == e[n] and g > 1:  # G = 2, odd node count: leave by the other GPU (the one rail change)
                x = (e[n] + 1) % g
            order += [n * g + gpu for gpu in _path(e[n], x, g)]
        rings.append(order)
    return rings


def _rings(p: int, params: Mapping[str, Any]) -> np.ndarray:
    """The rings as a (K, p) array of ranks in ring order."""
    return np.array(rail_rings(p, params["group"], channel_count(params)), dtype=np.int64).reshape(-1, p)


# --- rings ----------------------------------------------------------------------------------------


@register(
    Kind.ALLREDUCE, "nccl_ring", source=RING_SOURCE, parameters=PARAMS, check=_check, constraints=CONSTRAINTS,
    cost=Cost(
        "2(p-1)α + 2(p-1)/p·nβ + (p-1)/p·nγ (K rings, each n/K)",
        steps=lambda p, n, params: 2 * (p - 1),
        bytes=lambda p, n, params: 2 * (p - 1) * n / p,
        reduced=lambda p, n, params: (p - 1) * n / p,
        sent_per_rank=lambda p, n, params: 2 * (p - 1) * n / p,
    ),
)
def allreduce_ring(ranks: int, *, chunks: int = 1, group: int = 1, channels: int = 0) -> Schedule:
    """NCCL's ring all-reduce on K rail-matched rings: a ring reduce-scatter then a ring all-gather on each.

    Chunk (c·p + j)·k + i is chunk i of piece j of channel c; the rank at position q of ring c ends
    the reduce-scatter owning piece q+1 of its channel.
    """
    p, k = ranks, chunks
    rings = _rings(p, {"group": group, "channels": channels})
    kk = len(rings)
    c, q, i = (a.ravel() for a in np.meshgrid(np.arange(kk), np.arange(p), np.arange(k), indexing="ij"))
    src, dst = rings[c, q], rings[c, (q + 1) % p]
    # All 2(p-1) steps as whole columns at once (a 1,024-GPU all-reduce holds tens of millions of transfers):
    # in reduce-scatter step s position q passes its partial sum of piece q-s on to q+1, then in all-gather
    # step s the finished piece q+1-s travels on.
    # int32 throughout: every index of a valid schedule fits (MAX_SLOTS), and the columns are int32.
    q32, base = q.astype(np.int32), (c * p * k + i).astype(np.int32)
    s = np.arange(p - 1, dtype=np.int32)[:, None]
    piece = np.concatenate([(q32[None, :] - s) % p, (q32[None, :] + 1 - s) % p])
    index = (piece * k + base[None, :]).ravel()
    steps, width = piece.shape[0], len(c)
    n = steps * width

    def tiled(a: np.ndarray) -> np.ndarray:
        return np.tile(a.astype(np.int32), steps)

    columns = {"src": tiled(src), "dst": tiled(dst), "src_buf": np.zeros(n, np.uint8),
               "src_index": index, "dst_buf": np.zeros(n, np.uint8),
               "dst_index": index, "count": np.ones(n, np.int32),
               "op": np.repeat(np.array([1, 0], np.uint8), (steps // 2) * width),
               "step_offsets": np.arange(steps + 1, dtype=np.int64) * width}
    return Schedule.from_columns(Collective(Kind.ALLREDUCE, p, kk * p * k), "nccl_ring", columns)


@register(
    Kind.ALLGATHER, "nccl_ring", source=RING_SOURCE, parameters=PARAMS, check=_check, constraints=CONSTRAINTS,
    cost=Cost(
        "(p-1)α + (p-1)/p·nβ (K rings, each n/K)",
        steps=lambda p, n, params: p - 1,
        bytes=lambda p, n, params: (p - 1) * n / p,
        reduced=lambda p, n, params: 0,
        sent_per_rank=lambda p, n, params: (p - 1) * n / p,
    ),
)
def allgather_ring(ranks: int, *, chunks: int = 1, group: int = 1, channels: int = 0) -> Schedule:
    """NCCL's ring all-gather on K rings: channel c carries chunks c·k..c·k+k-1 of every rank's block."""
    p, k = ranks, chunks
    rings = _rings(p, {"group": group, "channels": channels})
    kk = len(rings)
    width = kk * k  # chunks per rank's block
    b = ScheduleBuilder(Collective(Kind.ALLGATHER, p, width), "nccl_ring")
    c, q, i = (a.ravel() for a in np.meshgrid(np.arange(kk), np.arange(p), np.arange(k), indexing="ij"))
    src, dst = rings[c, q], rings[c, (q + 1) % p]
    with b.step():
        b.add_many(np.arange(p), np.arange(p), 0, width, dst_buf=Buf.OUTPUT, dst_index=np.arange(p) * width)
        if p > 1:  # own block to the next rank on every ring
            b.add_many(src, dst, c * k + i, dst_buf=Buf.OUTPUT, dst_index=src * width + c * k + i)
    for s in range(1, p - 1):  # position q forwards the block of position q-s
        with b.step():
            b.add_many(src, dst, rings[c, (q - s) % p] * width + c * k + i, buf=Buf.OUTPUT)
    return b.build()


@register(
    Kind.REDUCESCATTER, "nccl_ring", source=RING_SOURCE, parameters=PARAMS, check=_check,
    constraints=CONSTRAINTS,
    cost=Cost(
        "(p-1)α + (p-1)/p·nβ + (p-1)/p·nγ (K rings, each n/K)",
        steps=lambda p, n, params: p - 1,
        bytes=lambda p, n, params: (p - 1) * n / p,
        reduced=lambda p, n, params: (p - 1) * n / p,
        sent_per_rank=lambda p, n, params: (p - 1) * n / p,
    ),
)
def reducescatter_ring(ranks: int, *, chunks: int = 1, group: int = 1, channels: int = 0) -> Schedule:
    """NCCL's ring reduce-scatter on K rings: channel c sums chunks c·k..c·k+k-1 of every rank's block."""
    p, k = ranks, chunks
    rings = _rings(p, {"group": group, "channels": channels})
    kk = len(rings)
    width = kk * k
    b = ScheduleBuilder(Collective(Kind.REDUCESCATTER, p, width), "nccl_ring")
    c, q, i = (a.ravel() for a in np.meshgrid(np.arange(kk), np.arange(p), np.arange(k), indexing="ij"))
    src, dst = rings[c, q], rings[c, (q + 1) % p]
    own = np.arange(p)

    def copy_own() -> None:  # the own block into the output, where its sum is completed
        b.add_many(own, own, own * width, width, dst_buf=Buf.OUTPUT, dst_index=0)

    if p <= 2:  # the first step is the last: the own block must be in place before it
        with b.step():
            copy_own()
    for s in range(p - 1):  # position q passes on its partial sum of the block of position q-s-1
        with b.step():
            if s == 0 and p > 2:
                copy_own()
            index = rings[c, (q - s - 1) % p] * width + c * k + i
            if s == p - 2:  # the sum arrives at its owner
                b.add_many(src, dst, index, op=Op.REDUCE, dst_buf=Buf.OUTPUT, dst_index=c * k + i)
            else:
                b.add_many(src, dst, index, op=Op.REDUCE)
    return b.build()


def _chain_steps(p: int, params: Mapping[str, Any]) -> int:
    return p + params["chunks"] - 2 if p > 1 else 0


@register(
    Kind.BROADCAST, "nccl_ring", source=RING_SOURCE, parameters=PARAMS, check=_check, constraints=CONSTRAINTS,
    cost=Cost(
        "(p+k-2)α + ≤(p+k-2)·n/kβ, k chunks per ring (β: exact when the rings' chains coincide, one node)",
        steps=lambda p, n, params: _chain_steps(p, params),
        bytes=lambda p, n, params: _chain_steps(p, params) * n / params["chunks"],
        reduced=lambda p, n, params: 0,
        sent_per_rank=lambda p, n, params: n if p > 1 else 0,
    ),
)
def broadcast_ring(ranks: int, *, root: int = 0, chunks: int = 1, group: int = 1, channels: int = 0) -> Schedule:
    """NCCL's ring broadcast: on each ring a chain from the root; hop h passes chunk i at step i + h."""
    p, k = ranks, chunks
    rings = _rings(p, {"group": group, "channels": channels})
    kk = len(rings)
    b = ScheduleBuilder(Collective(Kind.BROADCAST, p, kk * k, root), "nccl_ring")
    start = np.argmax(rings == root, axis=1)  # the root's position on each ring
    for s in range(_chain_steps(p, {"chunks": k})):
        hops = np.arange(max(0, s - k + 1), min(s, p - 2) + 1)
        c, h = (a.ravel() for a in np.meshgrid(np.arange(kk), hops, indexing="ij"))
        with b.step():
            b.add_many(rings[c, (start[c] + h) % p], rings[c, (start[c] + h + 1) % p], c * k + s - h)
    return b.build()


@register(
    Kind.REDUCE, "nccl_ring", source=RING_SOURCE, parameters=PARAMS, check=_check, constraints=CONSTRAINTS,
    cost=Cost(
        "(p+k-2)(α + ≤n/k·β + ≤n/k·γ), k chunks per ring (β, γ: exact when the rings' chains coincide)",
        steps=lambda p, n, params: _chain_steps(p, params),
        bytes=lambda p, n, params: _chain_steps(p, params) * n / params["chunks"],
        reduced=lambda p, n, params: _chain_steps(p, params) * n / params["chunks"],
        sent_per_rank=lambda p, n, params: n if p > 1 else 0,
    ),
)
def reduce_ring(ranks: int, *, root: int = 0, chunks: int = 1, group: int = 1, channels: int = 0) -> Schedule:
    """NCCL's ring reduce: on each ring a chain that ends at the root, the rank after it first."""
    p, k = ranks, chunks
    rings = _rings(p, {"group": group, "channels": channels})
    kk = len(rings)
    b = ScheduleBuilder(Collective(Kind.REDUCE, p, kk * k, root), "nccl_ring")
    start = np.argmax(rings == root, axis=1)
    for s in range(_chain_steps(p, {"chunks": k})):
        hops = np.arange(max(0, s - k + 1), min(s, p - 2) + 1)
        c, h = (a.ravel() for a in np.meshgrid(np.arange(kk), hops, indexing="ij"))
        # Hop h leaves the rank p-1-h places before the root (ring position start + h + 1).
        with b.step():
            b.add_many(rings[c, (start[c] + h + 1) % p], rings[c, (start[c] + h + 2) % p], c * k + s - h,
                       op=Op.REDUCE)
    return b.build()


# --- trees ----------------------------------------------------------------------------------------


def tree_parents(ranks: int, group: int, channels: int) -> list[list[int]]:
    """The parent of every rank (-1: the root) in each of the 2K trees: channel c's trees are 2c and 2c+1.

    Inside node n the chain runs GPU c, c+1, ..., c-1 (mod G), each GPU the parent of the next; the
    chain's head hangs under the head of the parent node in NCCL's double binary tree over the nodes
    (tree 0 the btree, tree 1 its mirror or shift, ``algorithms.library.allreduce._dbt_parents``).
    """
    g, nodes = group, ranks // group
    node_trees = _dbt_parents(nodes) if nodes > 1 else ([-1], [-1])
    out = []
    for c in range(channels):
        chain = [(c + i) % g for i in range(g)]
        for up in node_trees:
            parent = [-1] * ranks
            for n in range(nodes):
                head = n * g + chain[0]
                parent[head] = -1 if up[n] < 0 else up[n] * g + chain[0]
                for i in range(1, g):
                    parent[n * g + chain[i]] = n * g + chain[i - 1]
            out.append(parent)
    return out


def _tree_steps(p: int, params: Mapping[str, Any]) -> int:
    # The rank-level height is G-1 down the deepest node's chain plus ⌈log2 N⌉ node hops.
    g = params["group"]
    height = log2ceil(p // g) + g - 1
    return params["chunks"] + 2 * height - 1 if p > 1 else 0


def _tree_sent(p: int, n: float, params: Mapping[str, Any]) -> float:
    """The most bytes one rank sends: n/(2K) per tree, once up and once to each child."""
    if p == 1:
        return 0.0
    kk = channel_count(params)
    sends = [0] * p
    for parent in tree_parents(p, params["group"], kk):
        for v, u in enumerate(parent):
            if u >= 0:
                sends[v] += 1  # up
                sends[u] += 1  # down
    return max(sends) * n / (2 * kk)


@register(
    Kind.ALLREDUCE, "nccl_tree", source=TREE_SOURCE, parameters=PARAMS, check=_check, constraints=CONSTRAINTS,
    cost=Cost(
        "(k+2H-1)α + ≤4(k+2H-1)·n/kβ + ≤3(k+2H-1)·n/kγ, H = G-1+⌈log2 N⌉, k chunks per tree, 2K trees "
        "(β, γ: bounds; a chain head has up to 3 children, NCCL_MAX_TREE_ARITY)",
        steps=lambda p, n, params: _tree_steps(p, params),
        bytes=lambda p, n, params: 4 * _tree_steps(p, params) * n / params["chunks"],
        reduced=lambda p, n, params: 3 * _tree_steps(p, params) * n / params["chunks"],
        sent_per_rank=_tree_sent,
    ),
)
def allreduce_tree(ranks: int, *, chunks: int = 1, group: int = 1, channels: int = 0) -> Schedule:
    """NCCL's tree all-reduce: 2K trees (a chain per node, a double binary tree across nodes), each with
    1/(2K) of the data in ``chunks`` chunks, reduced up and broadcast down, pipelined.

    A rank of height h sends chunk i up at step i + h, once its children have added theirs; the root,
    of height H, starts chunk i down at step i + H, and a rank at depth d passes it on at step i + H + d.
    Chunk t·k + i is chunk i of tree t.
    """
    p, k = ranks, chunks
    trees = tree_parents(p, group, channels or group)
    coll = Collective(Kind.ALLREDUCE, p, len(trees) * k)
    if p == 1:
        return ScheduleBuilder(coll, "nccl_tree").build()
    # Every tree edge once per chunk, as arrays (step, src, dst, chunk, op), then stably sorted by step.
    parts: list[tuple[np.ndarray, ...]] = []
    i = np.arange(k)
    for t, parent in enumerate(trees):
        _, height, depth = _tree_shape(parent)
        top = max(height)
        up = np.array(parent)
        v = np.flatnonzero(up >= 0)  # each non-root v: chunk i goes up at step i + height(v) ...
        h, d = np.array(height)[v], np.array(depth)[up[v]]
        ones = np.ones_like(i)
        parts.append((np.add.outer(h, i).ravel(), np.repeat(v, k), np.repeat(up[v], k), np.tile(t * k + i, len(v)),
                      np.tile(ones, len(v))))
        # ... and comes back down from its parent at step i + top + depth(parent).
        parts.append((np.add.outer(d + top, i).ravel(), np.repeat(up[v], k), np.repeat(v, k),
                      np.tile(t * k + i, len(v)), np.tile(0 * ones, len(v))))
    step, src, dst, chunk, op = (np.concatenate(col) for col in zip(*parts, strict=True))
    order = np.argsort(step, kind="stable")
    step = step[order]
    n = len(step)
    offsets = np.searchsorted(step, np.arange(int(step[-1]) + 2))  # steps 0..last are all non-empty
    chunk32 = chunk[order].astype(np.int32)
    columns = {"src": src[order].astype(np.int32), "dst": dst[order].astype(np.int32),
               "src_buf": np.zeros(n, np.uint8), "src_index": chunk32, "dst_buf": np.zeros(n, np.uint8),
               "dst_index": chunk32, "count": np.ones(n, np.int32), "op": op[order].astype(np.uint8),
               "step_offsets": offsets.astype(np.int64)}
    return Schedule.from_columns(coll, "nccl_tree", columns)
