"""All-gather algorithms.

Ring: Thakur, Rabenseifner & Gropp, "Optimization of collective communication
operations in MPICH", IJHPCA 19(1), 2005, §4.1: in step s each rank passes
the block it received in step s-1 to its right neighbour; p-1 steps.

Recursive doubling: Thakur et al. 2005, §4.1: in round j rank i exchanges
everything it has with rank i XOR 2^j; other world sizes fold their extra
ranks in and out (algorithms.library.fold).

Bruck: Bruck, Ho, Kipnis, Upfal & Weathersby, "Efficient algorithms for
all-to-all communications in multiport message-passing systems", IEEE TPDS
8(11), 1997: in round j rank r sends the first min(2^j, p - 2^j) blocks it
holds (blocks r, r+1, ...) to rank r - 2^j; ⌈log2 p⌉ rounds for any p.
Blocks are addressed by their owner, so no final rotation is needed.

Direct: every rank sends its block to every other rank in one step (Chan et
al., "Collective communication: theory, practice, and experience", CCPE
19(13), 2007).
"""

from __future__ import annotations

from algorithms.builder import ScheduleBuilder
from algorithms.ir import Buf, Collective, Kind, Schedule
from algorithms.library.fold import extras_below, log2ceil, log2floor, pow2floor
from algorithms.registry import Cost, register

__all__ = ["bruck", "direct", "recursive_doubling", "ring"]


@register(
    Kind.ALLGATHER,
    "ring",
    source="Thakur, Rabenseifner & Gropp 2005",
    cost=Cost(
        "(p-1)α + (p-1)/p·nβ",
        steps=lambda p, n, params: p - 1,
        bytes=lambda p, n, params: (p - 1) * n / p,
        reduced=lambda p, n, params: 0,
        sent_per_rank=lambda p, n, params: (p - 1) * n / p,
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


def _rd_blocks(p: int) -> int:
    """Blocks rank 0 sends in folded recursive doubling: its groups, their extras, and all p back out."""
    big = pow2floor(p)
    return big - 1 + extras_below(p) + (p if p != big else 0)


@register(
    Kind.ALLGATHER,
    "recursive_doubling",
    source="Thakur, Rabenseifner & Gropp 2005",
    cost=Cost(
        "(⌊log2 p⌋+2e)α + (P-1 + Σ_j min(2^j, r) + e(p+1))·n/pβ, P = 2^⌊log2 p⌋, r = p-P, e = [r > 0]",
        steps=lambda p, n, params: log2floor(p) + 2 * (p != pow2floor(p)),
        bytes=lambda p, n, params: (_rd_blocks(p) + (p != pow2floor(p))) * n / p,
        reduced=lambda p, n, params: 0,
        sent_per_rank=lambda p, n, params: _rd_blocks(p) * n / p,
    ),
)
def recursive_doubling(ranks: int, *, chunks: int = 1) -> Schedule:
    """Recursive-doubling all-gather: log2 P rounds, each doubling the blocks a rank holds (Thakur et al. 2005).

    After round j rank i holds the blocks of its aligned group of 2^(j+1)
    ranks and of their extra ranks (blocks P+a.. when the fold is used).
    """
    p, k = ranks, chunks
    big = pow2floor(p)
    folded = p != big
    b = ScheduleBuilder(Collective(Kind.ALLGATHER, p, k), "recursive_doubling")

    def group_blocks(lo: int, size: int) -> list[tuple[int, int]]:
        """(first block, count) ranges held by the group [lo, lo+size): its own and its extras'."""
        ranges = [(lo, size)]
        extra = min(lo + size, p - big) - lo
        if extra > 0:
            ranges.append((big + lo, extra))
        return ranges

    with b.step():  # own block into place; extra rank P+i hands its block to rank i
        for r in range(p):
            b.copy(r, r, 0, k, dst_buf=Buf.OUTPUT, dst_index=r * k)
        for i in range(p - big):
            b.copy(big + i, i, 0, k, dst_buf=Buf.OUTPUT, dst_index=(big + i) * k)
        if not folded and big > 1:
            # No pre-step to hide the local copy behind: round 0 sends straight from the input.
            for i in range(big):
                b.copy(i, i ^ 1, 0, k, dst_buf=Buf.OUTPUT, dst_index=i * k)
    mask = 1 if folded else 2
    while mask < big:
        with b.step():
            for i in range(big):
                for first, count in group_blocks(i & ~(mask - 1), mask):
                    b.copy(i, i ^ mask, first * k, count * k, buf=Buf.OUTPUT)
        mask <<= 1
    with b.step():  # fold out: rank i hands the whole result to P+i
        for i in range(p - big):
            b.copy(i, big + i, 0, p * k, buf=Buf.OUTPUT)
    return b.build()


@register(
    Kind.ALLGATHER,
    "bruck",
    source="Bruck et al. 1997",
    cost=Cost(
        "⌈log2 p⌉α + (p-1)/p·nβ",
        steps=lambda p, n, params: log2ceil(p),
        bytes=lambda p, n, params: (p - 1) * n / p,
        reduced=lambda p, n, params: 0,
        sent_per_rank=lambda p, n, params: (p - 1) * n / p,
    ),
)
def bruck(ranks: int, *, chunks: int = 1) -> Schedule:
    """Bruck's all-gather: ⌈log2 p⌉ rounds for any p (Bruck et al. 1997).

    Before round j rank r holds blocks r, r+1, ..., r+2^j-1 (mod p); it sends
    the first min(2^j, p-2^j) of them to rank r-2^j, which then holds twice as many.
    """
    p, k = ranks, chunks
    b = ScheduleBuilder(Collective(Kind.ALLGATHER, p, k), "bruck")
    with b.step():
        for r in range(p):
            b.copy(r, r, 0, k, dst_buf=Buf.OUTPUT, dst_index=r * k)
            if p > 1:  # round 0 sends the own block straight from the input
                b.copy(r, (r - 1) % p, 0, k, dst_buf=Buf.OUTPUT, dst_index=r * k)
    dist = 2
    while dist < p:
        with b.step():
            for r in range(p):
                count = min(dist, p - dist)
                # Blocks r .. r+count-1 (mod p), split where they wrap.
                first = min(count, p - r)
                b.copy(r, (r - dist) % p, r * k, first * k, buf=Buf.OUTPUT)
                if count > first:
                    b.copy(r, (r - dist) % p, 0, (count - first) * k, buf=Buf.OUTPUT)
        dist <<= 1
    return b.build()


@register(
    Kind.ALLGATHER,
    "direct",
    source="Chan et al. 2007",
    cost=Cost(
        "α + (p-1)/p·nβ",
        steps=lambda p, n, params: 1 if p > 1 else 0,
        bytes=lambda p, n, params: (p - 1) * n / p,
        reduced=lambda p, n, params: 0,
        sent_per_rank=lambda p, n, params: (p - 1) * n / p,
    ),
)
def direct(ranks: int, *, chunks: int = 1) -> Schedule:
    """Direct all-gather: every rank sends its block to every rank in one step (Chan et al. 2007)."""
    p, k = ranks, chunks
    b = ScheduleBuilder(Collective(Kind.ALLGATHER, p, k), "direct")
    with b.step():
        for r in range(p):
            for dst in range(p):
                b.copy(r, dst, 0, k, dst_buf=Buf.OUTPUT, dst_index=r * k)
    return b.build()
