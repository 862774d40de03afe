"""Broadcast algorithms.

Binomial tree: Thakur, Rabenseifner & Gropp 2005, §3 (MPICH's short-message
broadcast): in round j, every rank that already has the data (relative rank
v < 2^j) sends it to relative rank v + 2^j; ceil(log2 p) rounds.

Binary tree and pipelined chain: the pipelined trees of Chan et al.,
"Collective communication: theory, practice, and experience", CCPE 19(13),
2007, §5: the buffer is cut into k chunks and chunk c crosses the tree edge
out of depth h at step c + h, so that the edges work concurrently.

Scatter + all-gather: van de Geijn's long-message broadcast (Barnett et al.
1994), as MPICH does it (Thakur et al. 2005, §4.2): a binomial scatter of p
pieces, then a ring all-gather of them.

Linear: the root sends the whole buffer to every other rank in one step (the
flat tree; Chan et al. 2007 count it among the short-vector direct
algorithms). One latency instead of ceil(log2 p), for (p-1)·n bytes out of
the root: the choice where latency per step dominates and the root's link is
not the bottleneck (on a shared-memory host, ranks' copies contend for one
memory system either way).

Ranks are numbered relative to the root: relative rank v is rank (v + root) mod p.
"""

from __future__ import annotations

from algorithms.builder import ScheduleBuilder
from algorithms.ir import Collective, Kind, Schedule
from algorithms.library.fold import log2ceil, log2floor
from algorithms.registry import Cost, register

__all__ = ["binary_tree", "binomial", "chain", "linear", "scatter_allgather"]



@register(
    Kind.BROADCAST,
    "binomial",
    source="Thakur, Rabenseifner & Gropp 2005",
    cost=Cost(
        "⌈log2 p⌉(α + nβ)",
        steps=lambda p, n, params: log2ceil(p),
        bytes=lambda p, n, params: log2ceil(p) * n,
        reduced=lambda p, n, params: 0,
        sent_per_rank=lambda p, n, params: log2ceil(p) * n,
    ),
)
def binomial(ranks: int, *, root: int = 0, chunks: int = 1) -> Schedule:
    """Binomial-tree broadcast from ``root`` in ⌈log2 p⌉ rounds (Thakur et al. 2005)."""
    p, k = ranks, chunks
    b = ScheduleBuilder(Collective(Kind.BROADCAST, p, k, root), "binomial")
    mask = 1
    while mask < p:
        with b.step():
            for v in range(min(mask, p - mask)):
                src, dst = (v + root) % p, (v + mask + root) % p
                for c in range(k):
                    b.copy(src, dst, c)
        mask <<= 1
    return b.build()


@register(
    Kind.BROADCAST,
    "linear",
    source="Chan et al. 2007",
    cost=Cost(
        "α + (p-1)·nβ",
        steps=lambda p, n, params: 1 if p > 1 else 0,
        bytes=lambda p, n, params: (p - 1) * n,
        reduced=lambda p, n, params: 0,
        sent_per_rank=lambda p, n, params: (p - 1) * n,
    ),
)
def linear(ranks: int, *, root: int = 0, chunks: int = 1) -> Schedule:
    """Linear (flat-tree) broadcast: the root sends every rank the whole buffer in one step."""
    p, k = ranks, chunks
    b = ScheduleBuilder(Collective(Kind.BROADCAST, p, k, root), "linear")
    if p > 1:
        with b.step():
            for v in range(1, p):
                b.copy(root, (v + root) % p, 0, k)
    return b.build()


def _binary_bytes(p: int, n: float, k: int) -> float:
    if p <= 2:
        return (p - 1) * n
    # Two chunks leave a parent per step, except in the last step when p is a
    # power of two: then the only parent at the deepest level has one child.
    last_single = p & (p - 1) == 0
    return (2 * (k - 1 + log2floor(p)) - last_single) * n / k


@register(
    Kind.BROADCAST,
    "binary_tree",
    source="Chan et al. 2007",
    cost=Cost(
        "(⌊log2 p⌋+k-1)α + (2(⌊log2 p⌋+k-1) - [p = 2^m ≥ 4])·n/kβ, k chunks",
        steps=lambda p, n, params: log2floor(p) + params["chunks"] - 1 if p > 1 else 0,
        bytes=lambda p, n, params: _binary_bytes(p, n, params["chunks"]),
        reduced=lambda p, n, params: 0,
        sent_per_rank=lambda p, n, params: min(p - 1, 2) * n,
    ),
)
def binary_tree(ranks: int, *, root: int = 0, chunks: int = 1) -> Schedule:
    """Pipelined binary-tree broadcast: relative rank v feeds 2v+1 and 2v+2, chunk c at step c + depth(v).

    Chan et al. 2007, §5; ⌊log2 p⌋ + k - 1 steps for k chunks.
    """
    p, k = ranks, chunks
    b = ScheduleBuilder(Collective(Kind.BROADCAST, p, k, root), "binary_tree")
    depth_max = log2floor(p)
    for s in range(depth_max + k - 1 if p > 1 else 0):
        with b.step():
            for depth in range(max(0, s - k + 1), min(s, depth_max - 1) + 1):
                c = s - depth
                for v in range((1 << depth) - 1, min((2 << depth) - 1, p)):
                    for child in (2 * v + 1, 2 * v + 2):
                        if child < p:
                            b.copy((v + root) % p, (child + root) % p, c)
    return b.build()


@register(
    Kind.BROADCAST,
    "chain",
    source="Chan et al. 2007",
    cost=Cost(
        "(p+k-2)α + (p+k-2)·n/kβ, k chunks",
        steps=lambda p, n, params: p + params["chunks"] - 2 if p > 1 else 0,
        bytes=lambda p, n, params: (p + params["chunks"] - 2) * n / params["chunks"] if p > 1 else 0,
        reduced=lambda p, n, params: 0,
        sent_per_rank=lambda p, n, params: n if p > 1 else 0,
    ),
)
def chain(ranks: int, *, root: int = 0, chunks: int = 1) -> Schedule:
    """Pipelined chain broadcast: relative rank h passes chunk c to h+1 at step c + h (Chan et al. 2007)."""
    p, k = ranks, chunks
    b = ScheduleBuilder(Collective(Kind.BROADCAST, p, k, root), "chain")
    for s in range(p + k - 2 if p > 1 else 0):
        with b.step():
            for hop in range(max(0, s - k + 1), min(s, p - 2) + 1):
                b.copy((hop + root) % p, (hop + 1 + root) % p, s - hop)
    return b.build()


@register(
    Kind.BROADCAST,
    "scatter_allgather",
    source="van de Geijn (Barnett et al. 1994); Thakur, Rabenseifner & Gropp 2005",
    cost=Cost(
        "(⌈log2 p⌉ + p-1)α + 2(p-1)/p·nβ",
        steps=lambda p, n, params: log2ceil(p) + p - 1,
        bytes=lambda p, n, params: 2 * (p - 1) * n / p,
        reduced=lambda p, n, params: 0,
        sent_per_rank=lambda p, n, params: 2 * (p - 1) * n / p,
    ),
)
def scatter_allgather(ranks: int, *, root: int = 0, chunks: int = 1) -> Schedule:
    """Van de Geijn's broadcast: binomial scatter of p pieces, then ring all-gather (Thakur et al. 2005, §4.2).

    Piece v (``chunks`` chunks) is scattered to relative rank v.
    """
    p, k = ranks, chunks
    b = ScheduleBuilder(Collective(Kind.BROADCAST, p, p * k, root), "scatter_allgather")

    def rank(v: int) -> int:
        return (v + root) % p

    # Scatter: relative rank v (a multiple of 2m) hands pieces v+m .. v+2m-1 to v+m.
    mask = 1 << log2ceil(p) >> 1
    while mask:
        with b.step():
            for v in range(0, p - mask, 2 * mask):
                for c in range((v + mask) * k, min(v + 2 * mask, p) * k):
                    b.copy(rank(v), rank(v + mask), c)
        mask >>= 1
    # Ring all-gather: at step s relative rank v passes piece v - s on to v + 1.
    for s in range(p - 1):
        with b.step():
            for v in range(p):
                piece = (v - s) % p
                for c in range(piece * k, (piece + 1) * k):
                    b.copy(rank(v), rank(v + 1), c)
    return b.build()
