"""All-reduce algorithms.

Ring: Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters
of workstations", JPDC 69(2), 2009: a ring reduce-scatter of p pieces
followed by a ring all-gather, 2(p-1) steps, each rank sending 2(p-1)/p of
the buffer, which is bandwidth-optimal.

Recursive doubling and Rabenseifner's algorithm (recursive-halving
reduce-scatter, then recursive-doubling all-gather): Thakur, Rabenseifner &
Gropp, "Optimization of collective communication operations in MPICH",
IJHPCA 19(1), 2005, §4.4; other world sizes fold their extra ranks in and
out (algorithms.library.fold).

Binomial: a binomial-tree reduce to rank 0 followed by a binomial-tree
broadcast (Thakur et al. 2005, §4.4, MPICH's reduce + bcast fallback).

Double binary tree: NCCL 2.4's trees (Sanders, Speck & Träff, "Two-tree
algorithms for full bandwidth broadcast, reduction and scan", Parallel
Computing 35(12), 2009; NCCL src/graph/trees.cc): two binary trees in which
every internal rank of one is a leaf of the other, each reducing and then
broadcasting half of the buffer, pipelined chunk by chunk.

Direct: one reduce-scatter step in which every rank sends piece j to rank j,
then one all-gather step in which rank j sends piece j to everyone (Chan et
al., "Collective communication: theory, practice, and experience", CCPE
19(13), 2007, the bucket-free "direct" variants).

Hierarchical: reduce-scatter inside groups of g ranks, all-reduce across
groups, all-gather inside groups, as NCCL and Horovod do across nodes of g
GPUs (Chan et al. 2007, §7 on multi-level algorithms). Ranks left over
when g does not divide p fold in and out as the power-of-two algorithms do.
"""

from __future__ import annotations

import numpy as np

from algorithms.builder import ScheduleBuilder
from algorithms.ir import Buf, Collective, Kind, Op, Schedule, Transfer
from algorithms.library.fold import log2ceil, log2floor, pow2floor
from algorithms.registry import CHUNKS, Cost, Parameter, register

__all__ = [
    "binomial",
    "direct",
    "double_binary_tree",
    "hierarchical",
    "rabenseifner",
    "recursive_doubling",
    "ring",
]


@register(
    Kind.ALLREDUCE,
    "ring",
    source="Patarasuk & Yuan 2009",
    cost=Cost(
        "2(p-1)α + 2(p-1)/p·nβ + (p-1)/p·nγ",
        steps=lambda p, n, params: 2 * (p - 1),
        bytes=lambda p, n, params: 2 * (p - 1) * n / p,
        reduced=lambda p, n, params: (p - 1) * n / p,
        sent_per_rank=lambda p, n, params: 2 * (p - 1) * n / p,
    ),
)
def ring(ranks: int, *, chunks: int = 1) -> Schedule:
    """Ring all-reduce: p-1 reduce-scatter steps, then p-1 all-gather steps (Patarasuk & Yuan 2009).

    The buffer is cut into p pieces of ``chunks`` chunks each; every chunk is
    its own transfer so that a dataflow execution pipelines them.
    """
    p, k = ranks, chunks
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, p, p * k), "ring")
    # One step's transfers as arrays (rank-major, then chunk), in the order of the loops
    #   for r in range(p): for c in range(k): b.reduce(r, (r + 1) % p, piece(r) * k + c)
    r = np.repeat(np.arange(p), k)
    c = np.tile(np.arange(k), p)
    right = (r + 1) % p
    # Reduce-scatter: at step s, rank r passes its partial sum of piece r-s on to r+1.
    for s in range(p - 1):
        with b.step():
            b.add_many(r, right, (r - s) % p * k + c, op=Op.REDUCE)
    # Rank r now holds the whole sum of piece r+1. All-gather: pass it around.
    for s in range(p - 1):
        with b.step():
            b.add_many(r, right, (r + 1 - s) % p * k + c)
    return b.build()


def _fold(p: int) -> tuple[int, int]:
    """(d, e): log2 of P, and 1 when p is not a power of two (the fold adds a pre- and a post-step)."""
    return log2floor(p), int(p != pow2floor(p))


def _fold_in(b: ScheduleBuilder, chunks: int) -> None:
    """Pre-step: extra rank P+i reduces its whole buffer into rank i."""
    p = b.ranks
    big = pow2floor(p)
    with b.step():
        for i in range(p - big):
            for c in range(chunks):
                b.reduce(big + i, i, c)


def _fold_out(b: ScheduleBuilder, chunks: int) -> None:
    """Post-step: rank i hands the finished buffer back to extra rank P+i."""
    p = b.ranks
    big = pow2floor(p)
    with b.step():
        for i in range(p - big):
            for c in range(chunks):
                b.copy(i, big + i, c)


@register(
    Kind.ALLREDUCE,
    "recursive_doubling",
    source="Thakur, Rabenseifner & Gropp 2005",
    cost=Cost(
        "(⌊log2 p⌋+2e)α + (⌊log2 p⌋+2e)·nβ + (⌊log2 p⌋+e)·nγ, e = [p not a power of 2]",
        steps=lambda p, n, params: _fold(p)[0] + 2 * _fold(p)[1],
        bytes=lambda p, n, params: (_fold(p)[0] + 2 * _fold(p)[1]) * n,
        reduced=lambda p, n, params: (_fold(p)[0] + _fold(p)[1]) * n,
        sent_per_rank=lambda p, n, params: (_fold(p)[0] + _fold(p)[1]) * n,
    ),
)
def recursive_doubling(ranks: int, *, chunks: int = 1) -> Schedule:
    """Recursive-doubling all-reduce: log2 P exchange rounds of the whole buffer (Thakur et al. 2005)."""
    p, k = ranks, chunks
    big = pow2floor(p)
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, p, k), "recursive_doubling")
    _fold_in(b, k)
    # Round j: rank i and i XOR 2^j add their partial sums into each other.
    mask = 1
    while mask < big:
        with b.step():
            for i in range(big):
                for c in range(k):
                    b.reduce(i, i ^ mask, c)
        mask <<= 1
    _fold_out(b, k)
    return b.build()


def _rabenseifner_sent(p: int, n: float) -> float:
    d, e = _fold(p)
    big = 1 << d
    return 2 * (big - 1) * n / big + e * n


@register(
    Kind.ALLREDUCE,
    "rabenseifner",
    source="Thakur, Rabenseifner & Gropp 2005",
    cost=Cost(
        "2(log2 P+e)α + (2(P-1)/P+2e)·nβ + ((P-1)/P+e)·nγ, P = 2^⌊log2 p⌋, e = [p ≠ P]",
        steps=lambda p, n, params: 2 * sum(_fold(p)),
        bytes=lambda p, n, params: _rabenseifner_sent(p, n) + _fold(p)[1] * n,
        reduced=lambda p, n, params: (pow2floor(p) - 1) * n / pow2floor(p) + _fold(p)[1] * n,
        sent_per_rank=lambda p, n, params: _rabenseifner_sent(p, n),
    ),
)
def rabenseifner(ranks: int, *, chunks: int = 1) -> Schedule:
    """Rabenseifner's all-reduce: recursive-halving reduce-scatter, recursive-doubling all-gather.

    Thakur, Rabenseifner & Gropp 2005, §4.4. The buffer is cut into P pieces
    of ``chunks`` chunks; rank i ends the reduce-scatter owning piece i.
    """
    p, k = ranks, chunks
    big = pow2floor(p)
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, p, big * k), "rabenseifner")
    _fold_in(b, big * k)
    # Reduce-scatter by recursive halving: rank i keeps the half of its
    # segment that holds piece i and adds the other half into its partner.
    mask = big >> 1
    while mask:
        with b.step():
            for i in range(big):
                partner = i ^ mask
                lo = partner & ~(mask - 1)  # the half the partner keeps
                for c in range(lo * k, (lo + mask) * k):
                    b.reduce(i, partner, c)
        mask >>= 1
    # All-gather by recursive doubling: exchange the finished segments.
    mask = 1
    while mask < big:
        with b.step():
            for i in range(big):
                lo = i & ~(mask - 1)  # the segment of `mask` pieces that i holds
                for c in range(lo * k, (lo + mask) * k):
                    b.copy(i, i ^ mask, c)
        mask <<= 1
    _fold_out(b, big * k)
    return b.build()


@register(
    Kind.ALLREDUCE,
    "binomial",
    source="Thakur, Rabenseifner & Gropp 2005",
    cost=Cost(
        "2⌈log2 p⌉(α + nβ) + ⌈log2 p⌉·nγ",
        steps=lambda p, n, params: 2 * log2ceil(p),
        bytes=lambda p, n, params: 2 * log2ceil(p) * n,
        reduced=lambda p, n, params: log2ceil(p) * n,
        sent_per_rank=lambda p, n, params: log2ceil(p) * n,
    ),
)
def binomial(ranks: int, *, chunks: int = 1) -> Schedule:
    """Binomial-tree reduce to rank 0, then binomial-tree broadcast: 2⌈log2 p⌉ steps (Thakur et al. 2005)."""
    p, k = ranks, chunks
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, p, k), "binomial")
    # Reduce: in round j, rank v with lowest set bit 2^j adds its subtree's sum into v - 2^j.
    mask = 1
    while mask < p:
        with b.step():
            for v in range(mask, p, 2 * mask):
                for c in range(k):
                    b.reduce(v, v - mask, c)
        mask <<= 1
    # Broadcast: in round j, every rank v < 2^j that has the sum sends it to v + 2^j.
    mask = 1
    while mask < p:
        with b.step():
            for v in range(min(mask, p - mask)):
                for c in range(k):
                    b.copy(v, v + mask, c)
        mask <<= 1
    return b.build()


def _btree_parent(rank: int, p: int) -> int:
    """NCCL's binary tree rooted at 0 (ncclGetBtree): parent of ``rank``, -1 for the root.

    With b the lowest set bit of rank, the parent is (rank ^ b) | 2b, or
    rank ^ b when that is out of range; rank 0's only child is the highest
    power of two below p.
    """
    if rank == 0:
        return -1
    bit = rank & -rank
    up = (rank ^ bit) | (bit << 1)
    return up if up < p else rank ^ bit


def _dbt_parents(p: int) -> tuple[list[int], list[int]]:
    """Parents in NCCL's two trees: the btree, and its mirror (even p) or its shift by one (odd p)."""
    first = [_btree_parent(r, p) for r in range(p)]
    if p % 2:
        second = [-1 if (u := first[(r - 1) % p]) < 0 else (u + 1) % p for r in range(p)]
    else:
        second = [-1 if (u := first[p - 1 - r]) < 0 else p - 1 - u for r in range(p)]
    return first, second


def _tree_shape(parent: list[int]) -> tuple[list[list[int]], list[int], list[int]]:
    """(children, height, depth) of every rank of a tree given by its parent list."""
    p = len(parent)
    children: list[list[int]] = [[] for _ in range(p)]
    for v, u in enumerate(parent):
        if u >= 0:
            children[u].append(v)
    depth = [0] * p
    order = [parent.index(-1)]
    for v in order:  # breadth first: parents before children
        for w in children[v]:
            depth[w] = depth[v] + 1
            order.append(w)
    height = [0] * p
    for v in reversed(order):
        if children[v]:
            height[v] = 1 + max(height[w] for w in children[v])
    return children, height, depth


def _dbt_sent(p: int, n: float) -> float:
    # An internal rank with two children in one tree is a leaf in the other:
    # it sends its half up and down twice there, and up once here.
    return {1: 0.0, 2: n, 3: 1.5 * n}.get(p, 2 * n)


@register(
    Kind.ALLREDUCE,
    "double_binary_tree",
    source="NCCL double binary tree (Sanders, Speck & Träff 2009)",
    cost=Cost(
        "(2⌈log2 p⌉+k-1)α + ≤2(2⌈log2 p⌉+k-1)·n/kβ + ≤(⌈log2 p⌉+k-1)·n/kγ, k chunks per half "
        "(β, γ: bounds; a rank moves at most 4 half-chunks a step, reduces at most 2 a step while reducing)",
        steps=lambda p, n, params: 2 * log2ceil(p) + params["chunks"] - 1 if p > 1 else 0,
        bytes=lambda p, n, params: 2 * (2 * log2ceil(p) + params["chunks"] - 1) * n / params["chunks"] if p > 1 else 0,
        reduced=lambda p, n, params: (log2ceil(p) + params["chunks"] - 1) * n / params["chunks"] if p > 1 else 0,
        sent_per_rank=lambda p, n, params: _dbt_sent(p, n),
    ),
)
def double_binary_tree(ranks: int, *, chunks: int = 1) -> Schedule:
    """NCCL's double binary tree all-reduce: two complementary trees, each reducing then broadcasting half.

    Each half is cut into ``chunks`` chunks and pipelined: a rank of height h
    (0 for leaves) sends chunk c up at step c + h, once both children have
    added theirs; the root of height H starts chunk c down at step c + H and
    a rank at depth δ passes it on at step c + H + δ.
    """
    p, k = ranks, chunks
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, p, 2 * k), "double_binary_tree")
    if p == 1:
        return b.build()
    plan: dict[int, list[Transfer]] = {}
    for half, parent in enumerate(_dbt_parents(p)):
        children, height, depth = _tree_shape(parent)
        top = max(height)
        for v in range(p):
            for c in range(k):
                chunk = half * k + c
                if parent[v] >= 0:
                    plan.setdefault(c + height[v], []).append(
                        Transfer(v, parent[v], Buf.INPUT, chunk, Buf.INPUT, chunk, 1, Op.REDUCE))
                for w in children[v]:
                    plan.setdefault(c + top + depth[v], []).append(
                        Transfer(v, w, Buf.INPUT, chunk, Buf.INPUT, chunk, 1, Op.COPY))
    for s in sorted(plan):
        with b.step():
            for t in plan[s]:
                b.add(t)
    return b.build()


@register(
    Kind.ALLREDUCE,
    "direct",
    source="Chan et al. 2007",
    cost=Cost(
        "2α + 2(p-1)/p·nβ + (p-1)/p·nγ",
        steps=lambda p, n, params: 2 if p > 1 else 0,
        bytes=lambda p, n, params: 2 * (p - 1) * n / p,
        reduced=lambda p, n, params: (p - 1) * n / p,
        sent_per_rank=lambda p, n, params: 2 * (p - 1) * n / p,
    ),
)
def direct(ranks: int, *, chunks: int = 1) -> Schedule:
    """Direct all-reduce: every rank adds piece j into rank j, then rank j sends piece j to all (2 steps)."""
    p, k = ranks, chunks
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, p, p * k), "direct")
    # As arrays, in the order of the loops: for r: for j != r: for c in piece j: b.reduce(r, j, c).
    outer, inner = np.divmod(np.arange(p * p), p)
    off = outer != inner
    outer, inner = np.repeat(outer[off], k), np.repeat(inner[off], k)
    c = np.tile(np.arange(k), p * (p - 1))
    with b.step():
        b.add_many(outer, inner, inner * k + c, op=Op.REDUCE)  # rank outer adds piece inner into rank inner
    with b.step():
        b.add_many(outer, inner, outer * k + c)  # rank outer sends its piece to rank inner
    return b.build()


def _groups(p: int, g: int) -> tuple[int, int, int]:
    """(g', q, left): effective group size min(g, p), number of full groups, ranks left over."""
    g = min(g, p)
    q = p // g
    return g, q, p - q * g


def _hier_sent(p: int, n: float, g: int) -> float:
    g, q, left = _groups(p, g)
    return 2 * (g - 1) * n / g + 2 * (q - 1) * n / (g * q) + (n if left else 0)


def _hier_steps(p: int, g: int) -> int:
    g, q, left = _groups(p, g)
    return 2 * (g - 1) + 2 * (q - 1) + (2 if left else 0)


GROUP = Parameter("group", 4, "ranks per group (e.g. GPUs per node); ranks beyond a multiple of it fold in")


@register(
    Kind.ALLREDUCE,
    "hierarchical",
    source="Chan et al. 2007",
    parameters=(CHUNKS, GROUP),
    constraints=("g = min(group, p); p mod g leftover ranks fold into group 0",),
    cost=Cost(
        "(2(g-1)+2(q-1)+2e)α + (2(g-1)/g + 2(q-1)/(gq) + 2e)·nβ + ((g-1)/g + (q-1)/(gq) + e)·nγ, "
        "q = ⌊p/g⌋, e = [g ∤ p]",
        steps=lambda p, n, params: _hier_steps(p, params["group"]),
        bytes=lambda p, n, params: _hier_sent(p, n, params["group"]) + (n if _groups(p, params["group"])[2] else 0),
        reduced=lambda p, n, params: (_hier_sent(p, n, params["group"])
                                      + (n if _groups(p, params["group"])[2] else 0)) / 2,
        sent_per_rank=lambda p, n, params: _hier_sent(p, n, params["group"]),
    ),
)
def hierarchical(ranks: int, *, chunks: int = 1, group: int = 4) -> Schedule:
    """Two-level all-reduce: ring reduce-scatter in groups, ring all-reduce across groups, ring all-gather in groups.

    Chan et al. 2007. Rank r = G·g + i is local rank i of group G. The buffer
    is g pieces (one per local rank) of q sub-pieces (one per group) of
    ``chunks`` chunks. Ranks beyond q·g fold into the first group.
    """
    p, k = ranks, chunks
    g, q, left = _groups(p, group)
    full = q * g
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, p, g * q * k), "hierarchical")
    piece = q * k  # chunks per piece

    def rank(grp: int, local: int) -> int:
        return grp * g + local % g

    with b.step():  # fold in: leftover rank full+i adds its buffer into rank i
        for i in range(left):
            for c in range(g * piece):
                b.reduce(full + i, i, c)
    # 1. Ring reduce-scatter inside each group: local i ends with piece i+1 summed over the group.
    for s in range(g - 1):
        with b.step():
            for grp in range(q):
                for i in range(g):
                    j = (i - s) % g
                    for c in range(j * piece, (j + 1) * piece):
                        b.reduce(rank(grp, i), rank(grp, i + 1), c)
    # 2. Ring all-reduce across groups, among the ranks with the same local index,
    #    on their piece j = i+1: sub-piece G holds chunks j·q·k + G·k + c.
    for phase in (Op.REDUCE, Op.COPY):
        for s in range(q - 1):
            with b.step():
                for i in range(g):
                    j = (i + 1) % g
                    for grp in range(q):
                        sub = (grp - s) % q if phase is Op.REDUCE else (grp + 1 - s) % q
                        dst = rank((grp + 1) % q, i)
                        for c in range(j * piece + sub * k, j * piece + (sub + 1) * k):
                            (b.reduce if phase is Op.REDUCE else b.copy)(rank(grp, i), dst, c)
    # 3. Ring all-gather inside each group.
    for s in range(g - 1):
        with b.step():
            for grp in range(q):
                for i in range(g):
                    j = (i + 1 - s) % g
                    for c in range(j * piece, (j + 1) * piece):
                        b.copy(rank(grp, i), rank(grp, i + 1), c)
    with b.step():  # fold out
        for i in range(left):
            for c in range(g * piece):
                b.copy(i, full + i, c)
    return b.build()

