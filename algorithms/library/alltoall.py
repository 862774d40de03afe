"""All-to-all algorithms: rank r's input block j goes to rank j's output block r.

Pairwise exchange: Thakur, Rabenseifner & Gropp, "Optimization of collective
communication operations in MPICH", IJHPCA 19(1), 2005, §4.7: in step s
rank r sends to r+s and receives from r-s; p-1 steps.

Bruck: Bruck, Ho, Kipnis, Upfal & Weathersby, "Efficient algorithms for
all-to-all communications in multiport message-passing systems", IEEE TPDS
8(11), 1997: after a local rotation, position i of rank r holds the block
for rank r+i; in round t every rank sends the positions with bit t set to
rank r + 2^t, which keeps them at the same position; ⌈log2 p⌉ rounds. Here
positions are addressed in place (the input is the rotated buffer, read at
an offset), blocks in transit wait in scratch, and each block lands in the
output as it arrives for the last time, so neither rotation costs a step.

Direct: every rank sends every block straight to its destination in one
step (Thakur et al. 2005, §4.7, the isend/irecv algorithm).
"""

from __future__ import annotations

from algorithms.builder import ScheduleBuilder
from algorithms.ir import Buf, Collective, Kind, Schedule
from algorithms.library.fold import log2ceil, popcount_sum
from algorithms.registry import Cost, register

__all__ = ["bruck", "direct", "pairwise"]


@register(
    Kind.ALLTOALL,
    "pairwise",
    source="Thakur, Rabenseifner & Gropp 2005",
    cost=Cost(
        "(p-1)α + (p-1)/p·nβ",
        steps=lambda p, n, params: p - 1,
        bytes=lambda p, n, params: (p - 1) * n / p,
        reduced=lambda p, n, params: 0,
        sent_per_rank=lambda p, n, params: (p - 1) * n / p,
    ),
)
def pairwise(ranks: int, *, chunks: int = 1) -> Schedule:
    """Pairwise-exchange all-to-all: at step s rank r sends its block for r+s to r+s (Thakur et al. 2005)."""
    p, k = ranks, chunks
    b = ScheduleBuilder(Collective(Kind.ALLTOALL, p, k), "pairwise")
    for s in range(max(p - 1, 1)):
        with b.step():
            for r in range(p):
                if s == 0:  # the own block, locally, alongside the first exchange
                    b.copy(r, r, r * k, k, dst_buf=Buf.OUTPUT)
                if p > 1:
                    dst = (r + s + 1) % p
                    b.copy(r, dst, dst * k, k, dst_buf=Buf.OUTPUT, dst_index=r * k)
    return b.build()


@register(
    Kind.ALLTOALL,
    "bruck",
    source="Bruck et al. 1997",
    cost=Cost(
        "⌈log2 p⌉α + Σ_{i<p} popcount(i)·n/pβ (≈ ⌈log2 p⌉/2·nβ)",
        steps=lambda p, n, params: log2ceil(p),
        bytes=lambda p, n, params: popcount_sum(p) * n / p,
        reduced=lambda p, n, params: 0,
        sent_per_rank=lambda p, n, params: popcount_sum(p) * n / p,
    ),
)
def bruck(ranks: int, *, chunks: int = 1) -> Schedule:
    """Bruck's all-to-all: ⌈log2 p⌉ rounds, position i travelling 2^t in round t for each bit t of i.

    Bruck et al. 1997. Position i of rank r starts as input block r+i; once
    moved it waits in scratch[i]; after its highest bit it is final and
    lands in the output at block (receiver - i), the rank it came from.
    """
    p, k = ranks, chunks
    b = ScheduleBuilder(Collective(Kind.ALLTOALL, p, k), "bruck", scratch_chunks=p * k)
    rounds = log2ceil(p)
    for t in range(max(rounds, 1)):
        bit = 1 << t
        with b.step():
            if t == 0:  # position 0, the own block, stays: into the output locally
                for r in range(p):
                    b.copy(r, r, r * k, k, dst_buf=Buf.OUTPUT)
            for i in range(bit, p) if rounds else ():
                if not i & bit:
                    continue
                moved = i & (bit - 1) != 0  # sent in an earlier round: in scratch
                final = i < 2 * bit  # t is the highest bit of i
                for r in range(p):
                    dst = (r + bit) % p
                    src_buf, src_index = (Buf.SCRATCH, i * k) if moved else (Buf.INPUT, (r + i) % p * k)
                    dst_buf, dst_index = (Buf.OUTPUT, (dst - i) % p * k) if final else (Buf.SCRATCH, i * k)
                    b.copy(r, dst, src_index, k, buf=src_buf, dst_buf=dst_buf, dst_index=dst_index)
    return b.build()


@register(
    Kind.ALLTOALL,
    "direct",
    source="Thakur, Rabenseifner & Gropp 2005",
    cost=Cost(
        "α + (p-1)/p·nβ",
        steps=lambda p, n, params: 1 if p > 1 else 0,
        bytes=lambda p, n, params: (p - 1) * n / p,
        reduced=lambda p, n, params: 0,
        sent_per_rank=lambda p, n, params: (p - 1) * n / p,
    ),
)
def direct(ranks: int, *, chunks: int = 1) -> Schedule:
    """Direct all-to-all: every block straight to its destination in one step (Thakur et al. 2005)."""
    p, k = ranks, chunks
    b = ScheduleBuilder(Collective(Kind.ALLTOALL, p, k), "direct")
    with b.step():
        for r in range(p):
            for j in range(p):
                b.copy(r, j, j * k, k, dst_buf=Buf.OUTPUT, dst_index=r * k)
    return b.build()
