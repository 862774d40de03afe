"""Barrier algorithms. A token is a message of n bytes (n = 0 for a pure barrier).

Dissemination: Hensgen, Finkel & Manber, "Two algorithms for barrier
synchronization", IJPP 17(1), 1988: in round j rank r signals rank r + 2^j
(mod p); after ⌈log2 p⌉ rounds every rank has heard from every rank.

Recursive doubling: Thakur, Rabenseifner & Gropp, "Optimization of
collective communication operations in MPICH", IJHPCA 19(1), 2005 (the
all-reduce exchange pattern on a token): in round j rank i and i XOR 2^j
signal each other; other world sizes fold their extra ranks in and out
(algorithms.library.fold).

Central: every rank signals rank 0, which then releases them all (the
central-counter barrier of Mellor-Crummey & Scott, "Algorithms for scalable
synchronization on shared-memory multiprocessors", ACM TOCS 9(1), 1991).
"""

from __future__ import annotations

from algorithms.builder import ScheduleBuilder
from algorithms.ir import Collective, Kind, Schedule
from algorithms.library.fold import log2ceil, log2floor, pow2floor
from algorithms.registry import Cost, register

__all__ = ["central", "dissemination", "recursive_doubling"]


@register(
    Kind.BARRIER,
    "dissemination",
    source="Hensgen, Finkel & Manber 1988",
    parameters=(),
    cost=Cost(
        "⌈log2 p⌉(α + nβ), n the token size",
        steps=lambda p, n, params: log2ceil(p),
        bytes=lambda p, n, params: log2ceil(p) * n,
        reduced=lambda p, n, params: log2ceil(p) * n,
        sent_per_rank=lambda p, n, params: log2ceil(p) * n,
    ),
)
def dissemination(ranks: int) -> Schedule:
    """Dissemination barrier: ⌈log2 p⌉ rounds, rank r signalling r + 2^j (Hensgen et al. 1988)."""
    p = ranks
    b = ScheduleBuilder(Collective(Kind.BARRIER, p, 1), "dissemination")
    dist = 1
    while dist < p:
        with b.step():
            for r in range(p):
                b.reduce(r, (r + dist) % p, 0)
        dist <<= 1
    return b.build()


def _folded(p: int) -> int:
    return int(p != pow2floor(p))


@register(
    Kind.BARRIER,
    "recursive_doubling",
    source="Thakur, Rabenseifner & Gropp 2005",
    parameters=(),
    cost=Cost(
        "(⌊log2 p⌋+2e)(α + nβ), e = [p not a power of 2], n the token size",
        steps=lambda p, n, params: log2floor(p) + 2 * _folded(p),
        bytes=lambda p, n, params: (log2floor(p) + 2 * _folded(p)) * n,
        reduced=lambda p, n, params: (log2floor(p) + _folded(p)) * n,
        sent_per_rank=lambda p, n, params: (log2floor(p) + _folded(p)) * n,
    ),
)
def recursive_doubling(ranks: int) -> Schedule:
    """Recursive-doubling barrier: log2 P pairwise exchange rounds, extra ranks folded in and out."""
    p = ranks
    big = pow2floor(p)
    b = ScheduleBuilder(Collective(Kind.BARRIER, p, 1), "recursive_doubling")
    with b.step():  # fold in: extra rank P+i signals rank i
        for i in range(p - big):
            b.reduce(big + i, i, 0)
    mask = 1
    while mask < big:
        with b.step():
            for i in range(big):
                b.reduce(i, i ^ mask, 0)
        mask <<= 1
    with b.step():  # fold out: rank i releases P+i
        for i in range(p - big):
            b.copy(i, big + i, 0)
    return b.build()


@register(
    Kind.BARRIER,
    "central",
    source="Mellor-Crummey & Scott 1991",
    parameters=(),
    cost=Cost(
        "2α + 2(p-1)·nβ (rank 0 takes p-1 tokens in, then sends p-1 out), n the token size",
        steps=lambda p, n, params: 2 if p > 1 else 0,
        bytes=lambda p, n, params: 2 * (p - 1) * n,
        reduced=lambda p, n, params: (p - 1) * n,
        sent_per_rank=lambda p, n, params: (p - 1) * n,
    ),
)
def central(ranks: int) -> Schedule:
    """Central barrier: every rank signals rank 0, then rank 0 releases every rank (2 steps)."""
    p = ranks
    b = ScheduleBuilder(Collective(Kind.BARRIER, p, 1), "central")
    with b.step():
        for r in range(1, p):
            b.reduce(r, 0, 0)
    with b.step():
        for r in range(1, p):
            b.copy(0, r, 0)
    return b.build()
