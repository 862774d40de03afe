"""Gather algorithms. Only the root has an output buffer; pieces passing
through other ranks wait in their scratch.

Binomial tree: Thakur, Rabenseifner & Gropp, "Optimization of collective
communication operations in MPICH", IJHPCA 19(1), 2005, §4.6 (MPICH's
gather): in round j, relative rank v with lowest set bit 2^j hands the
pieces of its subtree, v .. v+2^j-1, to v - 2^j; ⌈log2 p⌉ rounds.

Linear: every rank sends its piece to the root in one step (Chan et al.,
"Collective communication: theory, practice, and experience", CCPE 19(13),
2007).

Ranks are numbered relative to the root: relative rank v is rank (v + root) mod p.
"""

from __future__ import annotations

from algorithms.builder import ScheduleBuilder
from algorithms.ir import Buf, Collective, Kind, Schedule
from algorithms.library.fold import log2ceil
from algorithms.library.scatter import largest_subtree, subtree_slot
from algorithms.registry import Cost, register

__all__ = ["binomial", "linear"]


@register(
    Kind.GATHER,
    "binomial",
    source="Thakur, Rabenseifner & Gropp 2005",
    cost=Cost(
        "⌈log2 p⌉α + (p-1)/p·nβ; a rank sends at most max_j min(2^j, p-2^j)·n/p",
        steps=lambda p, n, params: log2ceil(p),
        bytes=lambda p, n, params: (p - 1) * n / p,
        reduced=lambda p, n, params: 0,
        sent_per_rank=lambda p, n, params: largest_subtree(p) * n / p,
    ),
)
def binomial(ranks: int, *, root: int = 0, chunks: int = 1) -> Schedule:
    """Binomial-tree gather to ``root`` in ⌈log2 p⌉ rounds (Thakur et al. 2005)."""
    p, k = ranks, chunks
    b = ScheduleBuilder(Collective(Kind.GATHER, p, k, root), "binomial",
                        scratch_chunks=max(largest_subtree(p) - 1, 0) * k)

    def rank(v: int) -> int:
        return (v + root) % p

    def hand_up(mask: int) -> None:
        """Relative rank v with lowest set bit ``mask`` hands the pieces of v .. v+mask-1 to v - mask."""
        for v in range(mask, p, 2 * mask):
            for piece in range(v, min(v + mask, p)):
                sb, si = subtree_slot(p, root, k, v, piece, wide=Buf.OUTPUT)
                db, di = subtree_slot(p, root, k, v - mask, piece, wide=Buf.OUTPUT)
                b.copy(rank(v), rank(v - mask), si, k, buf=sb, dst_buf=db, dst_index=di)

    masks = [1 << j for j in range(log2ceil(p))]  # from the leaves up
    with b.step():
        b.copy(root, root, 0, k, dst_buf=Buf.OUTPUT, dst_index=root * k)  # the root's own piece
        if masks:
            hand_up(masks[0])
    for mask in masks[1:]:
        with b.step():
            hand_up(mask)
    return b.build()


@register(
    Kind.GATHER,
    "linear",
    source="Chan et al. 2007",
    cost=Cost(
        "α + (p-1)/p·nβ; a rank sends n/p",
        steps=lambda p, n, params: 1 if p > 1 else 0,
        bytes=lambda p, n, params: (p - 1) * n / p,
        reduced=lambda p, n, params: 0,
        sent_per_rank=lambda p, n, params: n / p if p > 1 else 0,
    ),
)
def linear(ranks: int, *, root: int = 0, chunks: int = 1) -> Schedule:
    """Linear gather: every rank sends its piece to the root in one step (Chan et al. 2007)."""
    p, k = ranks, chunks
    b = ScheduleBuilder(Collective(Kind.GATHER, p, k, root), "linear")
    with b.step():
        for r in range(p):
            b.copy(r, root, 0, k, dst_buf=Buf.OUTPUT, dst_index=r * k)
    return b.build()
