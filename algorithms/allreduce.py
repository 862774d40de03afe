"""All-reduce algorithms.

Ring: Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters
of workstations", JPDC 69(2), 2009: a ring reduce-scatter of p pieces
followed by a ring all-gather, 2(p-1) steps, each rank sending 2(p-1)/p of
the buffer, which is bandwidth-optimal.
"""

from __future__ import annotations

from algorithms.builder import ScheduleBuilder
from algorithms.ir import Collective, Kind, Schedule
from algorithms.registry import Cost, register

__all__ = ["ring"]


@register(
    Kind.ALLREDUCE,
    "ring",
    source="Patarasuk & Yuan 2009",
    cost=Cost(
        "2(p-1)α + 2(p-1)/p·nβ + (p-1)/p·nγ",
        steps=lambda p, n, k: 2 * (p - 1),
        bytes=lambda p, n, k: 2 * (p - 1) * n / p,
        reduced=lambda p, n, k: (p - 1) * n / p,
        sent_per_rank=lambda p, n, k: 2 * (p - 1) * n / p,
    ),
)
def ring(ranks: int, *, chunks: int = 1) -> Schedule:
    """Ring all-reduce: p-1 reduce-scatter steps, then p-1 all-gather steps (Patarasuk & Yuan 2009).

    The buffer is cut into p pieces of ``chunks`` chunks each; every chunk is
    its own transfer so that a dataflow execution pipelines them.
    """
    p, k = ranks, chunks
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, p, p * k), "ring")
    # Reduce-scatter: at step s, rank r passes its partial sum of piece r-s on to r+1.
    for s in range(p - 1):
        with b.step():
            for r in range(p):
                piece = (r - s) % p
                for c in range(k):
                    b.reduce(r, (r + 1) % p, piece * k + c)
    # Rank r now holds the whole sum of piece r+1. All-gather: pass it around.
    for s in range(p - 1):
        with b.step():
            for r in range(p):
                piece = (r + 1 - s) % p
                for c in range(k):
                    b.copy(r, (r + 1) % p, piece * k + c)
    return b.build()
