"""All-gather algorithms.

Ring: Thakur, Rabenseifner & Gropp, "Optimization of collective communication
operations in MPICH", IJHPCA 19(1), 2005, §4.1: in step s each rank passes
the block it received in step s-1 to its right neighbour; p-1 steps.
"""

from __future__ import annotations

from algorithms.builder import ScheduleBuilder
from algorithms.ir import Buf, Collective, Kind, Schedule
from algorithms.registry import Cost, register

__all__ = ["ring"]


@register(
    Kind.ALLGATHER,
    "ring",
    source="Thakur, Rabenseifner & Gropp 2005",
    cost=Cost(
        "(p-1)α + (p-1)/p·nβ",
        steps=lambda p, n, k: p - 1,
        bytes=lambda p, n, k: (p - 1) * n / p,
        reduced=lambda p, n, k: 0,
        sent_per_rank=lambda p, n, k: (p - 1) * n / p,
    ),
)
def ring(ranks: int, *, chunks: int = 1) -> Schedule:
    """Ring all-gather: p-1 steps, each rank forwarding the newest block to its right (Thakur et al. 2005)."""
    p, k = ranks, chunks
    b = ScheduleBuilder(Collective(Kind.ALLGATHER, p, k), "ring")
    for s in range(max(p - 1, 1)):
        with b.step():
            for r in range(p):
                if s == 0:
                    # Own block into place locally, and to the right neighbour.
                    b.copy(r, r, 0, k, dst_buf=Buf.OUTPUT, dst_index=r * k)
                    if p > 1:
                        b.copy(r, (r + 1) % p, 0, k, dst_buf=Buf.OUTPUT, dst_index=r * k)
                    continue
                block = (r - s) % p
                for c in range(k):
                    b.copy(r, (r + 1) % p, block * k + c, buf=Buf.OUTPUT)
    return b.build()
