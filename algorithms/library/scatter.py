"""Scatter algorithms. Only the root has an input buffer; pieces passing
through other ranks wait in their scratch.

Binomial tree: Thakur, Rabenseifner & Gropp, "Optimization of collective
communication operations in MPICH", IJHPCA 19(1), 2005, §4.6 (MPICH's
scatter): in the round with mask m (from the top), relative rank v, a
multiple of 2m, hands the pieces of ranks v+m .. v+2m-1 to v+m; ⌈log2 p⌉ rounds.

Linear: the root sends every rank its piece in one step (Chan et al.,
"Collective communication: theory, practice, and experience", CCPE 19(13),
2007, the short-vector direct algorithm).

Ranks are numbered relative to the root: relative rank v is rank (v + root) mod p.
"""

from __future__ import annotations

from algorithms.builder import ScheduleBuilder
from algorithms.ir import Buf, Collective, Kind, Schedule
from algorithms.library.fold import log2ceil
from algorithms.registry import Cost, register

__all__ = ["binomial", "largest_subtree", "linear", "subtree_slot"]


def largest_subtree(p: int) -> int:
    """Most pieces that pass through one non-root rank of a binomial tree: max over j of min(2^j, p - 2^j)."""
    if p < 2:
        return 0
    top = 1 << (log2ceil(p) - 1)  # the highest power of two below p
    return max(p - top, top >> 1)


def subtree_slot(p: int, root: int, k: int, holder: int, piece: int, *, wide: Buf) -> tuple[Buf, int]:
    """Where relative rank ``holder`` keeps relative ``piece`` in a binomial scatter or gather.

    The root keeps every piece in its wide buffer (``wide``: scatter's input,
    gather's output) at the owner's absolute position; any other rank keeps
    its own piece in its narrow buffer and the pieces of its subtree, v+1 ..,
    in scratch.
    """
    if holder == 0:
        return wide, ((piece + root) % p) * k
    if piece == holder:
        return (Buf.OUTPUT if wide is Buf.INPUT else Buf.INPUT), 0
    return Buf.SCRATCH, (piece - holder - 1) * k


@register(
    Kind.SCATTER,
    "binomial",
    source="Thakur, Rabenseifner & Gropp 2005",
    cost=Cost(
        "⌈log2 p⌉α + (p-1)/p·nβ",
        steps=lambda p, n, params: log2ceil(p),
        bytes=lambda p, n, params: (p - 1) * n / p,
        reduced=lambda p, n, params: 0,
        sent_per_rank=lambda p, n, params: (p - 1) * n / p,
    ),
)
def binomial(ranks: int, *, root: int = 0, chunks: int = 1) -> Schedule:
    """Binomial-tree scatter from ``root`` in ⌈log2 p⌉ rounds (Thakur et al. 2005)."""
    p, k = ranks, chunks
    b = ScheduleBuilder(Collective(Kind.SCATTER, p, k, root), "binomial",
                        scratch_chunks=max(largest_subtree(p) - 1, 0) * k)

    def rank(v: int) -> int:
        return (v + root) % p

    def hand_down(mask: int) -> None:
        """Relative rank v, a multiple of 2·mask, hands the pieces of v+mask .. v+2·mask-1 to v+mask."""
        for v in range(0, p - mask, 2 * mask):
            for piece in range(v + mask, min(v + 2 * mask, p)):
                sb, si = subtree_slot(p, root, k, v, piece, wide=Buf.INPUT)
                db, di = subtree_slot(p, root, k, v + mask, piece, wide=Buf.INPUT)
                b.copy(rank(v), rank(v + mask), si, k, buf=sb, dst_buf=db, dst_index=di)

    masks = [1 << j for j in reversed(range(log2ceil(p)))]  # from the top of the tree down
    with b.step():
        b.copy(root, root, root * k, k, dst_buf=Buf.OUTPUT, dst_index=0)  # the root's own piece
        if masks:
            hand_down(masks[0])
    for mask in masks[1:]:
        with b.step():
            hand_down(mask)
    return b.build()


@register(
    Kind.SCATTER,
    "linear",
    source="Chan et al. 2007",
    cost=Cost(
        "α + (p-1)/p·nβ",
        steps=lambda p, n, params: 1 if p > 1 else 0,
        bytes=lambda p, n, params: (p - 1) * n / p,
        reduced=lambda p, n, params: 0,
        sent_per_rank=lambda p, n, params: (p - 1) * n / p,
    ),
)
def linear(ranks: int, *, root: int = 0, chunks: int = 1) -> Schedule:
    """Linear scatter: the root sends each rank its piece in one step (Chan et al. 2007)."""
    p, k = ranks, chunks
    b = ScheduleBuilder(Collective(Kind.SCATTER, p, k, root), "linear")
    with b.step():
        for r in range(p):
            b.copy(root, r, r * k, k, dst_buf=Buf.OUTPUT, dst_index=0)
    return b.build()
