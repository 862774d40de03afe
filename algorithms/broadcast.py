"""Broadcast algorithms.

Binomial tree: Thakur, Rabenseifner & Gropp 2005, §3 (MPICH's short-message
broadcast): in round j, every rank that already has the data (relative rank
v < 2^j) sends it to relative rank v + 2^j; ceil(log2 p) rounds.
"""

from __future__ import annotations

import math

from algorithms.builder import ScheduleBuilder
from algorithms.ir import Collective, Kind, Schedule
from algorithms.registry import Cost, register

__all__ = ["binomial"]


def _log2ceil(p: int) -> int:
    return math.ceil(math.log2(p)) if p > 1 else 0


@register(
    Kind.BROADCAST,
    "binomial",
    source="Thakur, Rabenseifner & Gropp 2005",
    cost=Cost(
        "⌈log2 p⌉(α + nβ)",
        steps=lambda p, n, k: _log2ceil(p),
        bytes=lambda p, n, k: _log2ceil(p) * n,
        reduced=lambda p, n, k: 0,
        sent_per_rank=lambda p, n, k: _log2ceil(p) * n,
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
