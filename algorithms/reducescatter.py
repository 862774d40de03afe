"""Reduce-scatter algorithms.

Ring: the first half of Patarasuk & Yuan's ring all-reduce (JPDC 2009); the
partial sum of block j starts at rank j+1 and travels p-1 hops to rank j.
"""

from __future__ import annotations

from algorithms.builder import ScheduleBuilder
from algorithms.ir import Buf, Collective, Kind, Schedule
from algorithms.registry import Cost, register

__all__ = ["ring"]


@register(
    Kind.REDUCESCATTER,
    "ring",
    source="Patarasuk & Yuan 2009",
    cost=Cost(
        "(p-1)α + (p-1)/p·nβ + (p-1)/p·nγ",
        steps=lambda p, n, k: p - 1,
        bytes=lambda p, n, k: (p - 1) * n / p,
        reduced=lambda p, n, k: (p - 1) * n / p,
        sent_per_rank=lambda p, n, k: (p - 1) * n / p,
    ),
)
def ring(ranks: int, *, chunks: int = 1) -> Schedule:
    """Ring reduce-scatter: p-1 steps; rank r ends with block r summed over all ranks."""
    p, k = ranks, chunks
    b = ScheduleBuilder(Collective(Kind.REDUCESCATTER, p, k), "ring")
    if p <= 2:
        # The own block must be in the output before the last step reduces
        # into it; with p <= 2 the last step is the first, so copy it first.
        with b.step():
            for r in range(p):
                b.copy(r, r, r * k, k, dst_buf=Buf.OUTPUT, dst_index=0)
    for s in range(p - 1):
        with b.step():
            for r in range(p):
                if s == 0 and p > 2:
                    # Own block into the output, where its sum will be completed.
                    b.copy(r, r, r * k, k, dst_buf=Buf.OUTPUT, dst_index=0)
                block = (r - s - 1) % p
                dst = (r + 1) % p
                last = s == p - 2  # the partial sum arrives at its owner
                for c in range(k):
                    if last:
                        b.reduce(r, dst, block * k + c, dst_buf=Buf.OUTPUT, dst_index=c)
                    else:
                        b.reduce(r, dst, block * k + c)
    return b.build()
