"""Reduce algorithms (the sum ends at the root; other ranks' buffers end as anything).

Binomial tree: Thakur, Rabenseifner & Gropp, "Optimization of collective
communication operations in MPICH", IJHPCA 19(1), 2005, §4.5 (MPICH's
short-message reduce): in round j, relative rank v with lowest set bit 2^j
adds its subtree's partial sum into v - 2^j; ⌈log2 p⌉ rounds.

Pipelined chain: Chan et al., "Collective communication: theory, practice,
and experience", CCPE 19(13), 2007, §5: the buffer is cut into k chunks;
chunk c crosses hop h (relative rank p-1-h into p-2-h) at step c + h.

Reduce-scatter + gather: Rabenseifner's long-message reduce (Thakur et al.
2005, §4.5): recursive-halving reduce-scatter, then a binomial gather of the
pieces to the root; other world sizes fold their extra ranks in first
(algorithms.library.fold).

Ranks are numbered relative to the root: relative rank v is rank (v + root) mod p.
"""

from __future__ import annotations

from algorithms.builder import ScheduleBuilder
from algorithms.ir import Collective, Kind, Schedule
from algorithms.library.fold import log2ceil, log2floor, pow2floor
from algorithms.registry import Cost, register

__all__ = ["binomial", "chain", "reducescatter_gather"]


@register(
    Kind.REDUCE,
    "binomial",
    source="Thakur, Rabenseifner & Gropp 2005",
    cost=Cost(
        "⌈log2 p⌉(α + nβ + nγ)",
        steps=lambda p, n, params: log2ceil(p),
        bytes=lambda p, n, params: log2ceil(p) * n,
        reduced=lambda p, n, params: log2ceil(p) * n,
        sent_per_rank=lambda p, n, params: n if p > 1 else 0,
    ),
)
def binomial(ranks: int, *, root: int = 0, chunks: int = 1) -> Schedule:
    """Binomial-tree reduce to ``root`` in ⌈log2 p⌉ rounds (Thakur et al. 2005)."""
    p, k = ranks, chunks
    b = ScheduleBuilder(Collective(Kind.REDUCE, p, k, root), "binomial")
    mask = 1
    while mask < p:
        with b.step():
            for v in range(mask, p, 2 * mask):
                for c in range(k):
                    b.reduce((v + root) % p, (v - mask + root) % p, c)
        mask <<= 1
    return b.build()


@register(
    Kind.REDUCE,
    "chain",
    source="Chan et al. 2007",
    cost=Cost(
        "(p+k-2)(α + n/k·β + n/k·γ), k chunks",
        steps=lambda p, n, params: p + params["chunks"] - 2 if p > 1 else 0,
        bytes=lambda p, n, params: (p + params["chunks"] - 2) * n / params["chunks"] if p > 1 else 0,
        reduced=lambda p, n, params: (p + params["chunks"] - 2) * n / params["chunks"] if p > 1 else 0,
        sent_per_rank=lambda p, n, params: n if p > 1 else 0,
    ),
)
def chain(ranks: int, *, root: int = 0, chunks: int = 1) -> Schedule:
    """Pipelined chain reduce: relative rank p-1-h adds chunk c into p-2-h at step c + h (Chan et al. 2007)."""
    p, k = ranks, chunks
    b = ScheduleBuilder(Collective(Kind.REDUCE, p, k, root), "chain")
    for s in range(p + k - 2 if p > 1 else 0):
        with b.step():
            for hop in range(max(0, s - k + 1), min(s, p - 2) + 1):
                b.reduce((p - 1 - hop + root) % p, (p - 2 - hop + root) % p, s - hop)
    return b.build()


def _rsg_sent(p: int, n: float) -> float:
    big = pow2floor(p)
    # Relative rank P/2 sends half of its segment each halving round, then n/2 in the gather.
    return (big - 1) * n / big + n / 2 if p > 1 else 0


@register(
    Kind.REDUCE,
    "reducescatter_gather",
    source="Rabenseifner (Thakur, Rabenseifner & Gropp 2005)",
    cost=Cost(
        "(2log2 P+e)α + (2(P-1)/P + e)·nβ + ((P-1)/P + e)·nγ, P = 2^⌊log2 p⌋, e = [p ≠ P]",
        steps=lambda p, n, params: 2 * log2floor(p) + (p != pow2floor(p)),
        bytes=lambda p, n, params: 2 * (pow2floor(p) - 1) * n / pow2floor(p) + (p != pow2floor(p)) * n,
        reduced=lambda p, n, params: (pow2floor(p) - 1) * n / pow2floor(p) + (p != pow2floor(p)) * n,
        sent_per_rank=lambda p, n, params: _rsg_sent(p, n),
    ),
)
def reducescatter_gather(ranks: int, *, root: int = 0, chunks: int = 1) -> Schedule:
    """Rabenseifner's reduce: recursive-halving reduce-scatter, then binomial gather to the root.

    Thakur et al. 2005, §4.5. The buffer is P pieces of ``chunks`` chunks;
    relative rank i owns piece i after the reduce-scatter.
    """
    p, k = ranks, chunks
    big = pow2floor(p)
    b = ScheduleBuilder(Collective(Kind.REDUCE, p, big * k, root), "reducescatter_gather")

    def rank(v: int) -> int:
        return (v + root) % p

    with b.step():  # fold in: relative rank P+i adds its buffer into relative rank i
        for i in range(p - big):
            for c in range(big * k):
                b.reduce(rank(big + i), rank(i), c)
    mask = big >> 1
    while mask:  # recursive halving: keep the half holding your own piece
        with b.step():
            for i in range(big):
                partner = i ^ mask
                lo = partner & ~(mask - 1)
                for c in range(lo * k, (lo + mask) * k):
                    b.reduce(rank(i), rank(partner), c)
        mask >>= 1
    mask = 1
    while mask < big:  # binomial gather: v hands its finished pieces v .. v+mask-1 to v - mask
        with b.step():
            for v in range(mask, big, 2 * mask):
                for c in range(v * k, (v + mask) * k):
                    b.copy(rank(v), rank(v - mask), c)
        mask <<= 1
    return b.build()
