"""Reduce-scatter algorithms.

Ring: the first half of Patarasuk & Yuan's ring all-reduce (JPDC 2009); the
partial sum of block j starts at rank j+1 and travels p-1 hops to rank j.

Recursive halving: Thakur, Rabenseifner & Gropp, "Optimization of collective
communication operations in MPICH", IJHPCA 19(1), 2005, §4.3: in round j
rank i sends the half of its blocks that its partner i XOR P/2^(j+1) keeps
and adds in the half it keeps; other world sizes fold their extra ranks in
and out (algorithms.library.fold), the block of extra rank P+i travelling with
rank i's.

Direct: every rank adds its block j into rank j in one step (MPICH's
pairwise-exchange reduce-scatter with all p-1 exchanges posted at once;
Chan et al., "Collective communication: theory, practice, and experience",
CCPE 19(13), 2007).
"""

from __future__ import annotations

from algorithms.builder import ScheduleBuilder
from algorithms.ir import Buf, Collective, Kind, Schedule
from algorithms.library.fold import extras_below, log2floor, pow2floor
from algorithms.registry import Cost, register

__all__ = ["direct", "recursive_halving", "ring"]


@register(
    Kind.REDUCESCATTER,
    "ring",
    source="Patarasuk & Yuan 2009",
    cost=Cost(
        "(p-1)α + (p-1)/p·nβ + (p-1)/p·nγ",
        steps=lambda p, n, params: p - 1,
        bytes=lambda p, n, params: (p - 1) * n / p,
        reduced=lambda p, n, params: (p - 1) * n / p,
        sent_per_rank=lambda p, n, params: (p - 1) * n / p,
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


def _halving_blocks(p: int) -> int:
    """Blocks the busiest rank moves during the halving rounds: P-1 plus the extras of its groups."""
    return pow2floor(p) - 1 + extras_below(p)


def _folded(p: int) -> int:
    return int(p != pow2floor(p))


@register(
    Kind.REDUCESCATTER,
    "recursive_halving",
    source="Thakur, Rabenseifner & Gropp 2005",
    cost=Cost(
        "(⌊log2 p⌋+2e)α + (e·p + P-1 + Σ_j min(2^j, r) + e)·n/pβ + (e·p + P-1 + Σ_j min(2^j, r))·n/pγ, "
        "P = 2^⌊log2 p⌋, r = p-P, e = [r > 0]",
        steps=lambda p, n, params: log2floor(p) + 2 * _folded(p),
        bytes=lambda p, n, params: _folded(p) * n + (_halving_blocks(p) + _folded(p)) * n / p,
        reduced=lambda p, n, params: _folded(p) * n + _halving_blocks(p) * n / p,
        sent_per_rank=lambda p, n, params: n if _folded(p) else (p - 1) * n / p,
    ),
)
def recursive_halving(ranks: int, *, chunks: int = 1) -> Schedule:
    """Recursive-halving reduce-scatter: log2 P rounds, each halving the blocks a rank is responsible for.

    Thakur et al. 2005, §4.3. Block j belongs to rank j, and block P+i (an
    extra rank's) to rank i until the post-step hands it over.
    """
    p, k = ranks, chunks
    big = pow2floor(p)
    extra = p - big
    b = ScheduleBuilder(Collective(Kind.REDUCESCATTER, p, k), "recursive_halving")
    with b.step():  # fold in: extra rank P+i adds its whole input into rank i
        for i in range(extra):
            b.reduce(big + i, i, 0, p * k)
    mask = big >> 1
    while mask:
        with b.step():
            for i in range(big):
                partner = i ^ mask
                lo = partner & ~(mask - 1)  # the partner keeps the blocks of ranks lo .. lo+mask-1
                b.reduce(i, partner, lo * k, mask * k)
                if lo < extra:  # ... and of their extra ranks
                    b.reduce(i, partner, (big + lo) * k, (min(lo + mask, extra) - lo) * k)
        mask >>= 1
    with b.step():  # the finished blocks into the outputs; fold out to the extra ranks
        for i in range(big):
            b.copy(i, i, i * k, k, dst_buf=Buf.OUTPUT, dst_index=0)
        for i in range(extra):
            b.copy(i, big + i, (big + i) * k, k, dst_buf=Buf.OUTPUT, dst_index=0)
    return b.build()


@register(
    Kind.REDUCESCATTER,
    "direct",
    source="Chan et al. 2007",
    cost=Cost(
        "α + (p-1)/p·nβ + (p-1)/p·nγ",
        steps=lambda p, n, params: 1 if p > 1 else 0,
        bytes=lambda p, n, params: (p - 1) * n / p,
        reduced=lambda p, n, params: (p - 1) * n / p,
        sent_per_rank=lambda p, n, params: (p - 1) * n / p,
    ),
)
def direct(ranks: int, *, chunks: int = 1) -> Schedule:
    """Direct reduce-scatter: every rank adds block j into rank j in one step, then a local copy (Chan et al. 2007)."""
    p, k = ranks, chunks
    b = ScheduleBuilder(Collective(Kind.REDUCESCATTER, p, k), "direct")
    with b.step():
        for r in range(p):
            for j in range(p):
                if j != r:
                    for c in range(j * k, (j + 1) * k):
                        b.reduce(r, j, c)
    with b.step():  # no network: the summed block into the output
        for j in range(p):
            b.copy(j, j, j * k, k, dst_buf=Buf.OUTPUT, dst_index=0)
    return b.build()
