"""Barrier algorithms.

Dissemination: Hensgen, Finkel & Manber, "Two algorithms for barrier
synchronization", IJPP 17(1), 1988: in round j rank r signals rank r + 2^j
(mod p); after ⌈log2 p⌉ rounds every rank has heard from every rank.
"""

from __future__ import annotations

from algorithms.broadcast import _log2ceil
from algorithms.builder import ScheduleBuilder
from algorithms.ir import Collective, Kind, Schedule
from algorithms.registry import Cost, register

__all__ = ["dissemination"]


@register(
    Kind.BARRIER,
    "dissemination",
    source="Hensgen, Finkel & Manber 1988",
    parameters=(),
    cost=Cost(
        "⌈log2 p⌉α",
        steps=lambda p, n, k: _log2ceil(p),
        bytes=lambda p, n, k: 0,
        reduced=lambda p, n, k: 0,
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
