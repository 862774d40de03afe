"""Power-of-two arithmetic, and the fold that lets power-of-two algorithms serve any p.

Thakur, Rabenseifner & Gropp 2005, §4.4 (what MPICH does): with P the largest
power of two not above p and r = p - P extra ranks, extra rank P+i first hands
its data to rank i (the pre-step), the P ranks run the power-of-two
algorithm, and rank i hands the result back to rank P+i (the post-step).
MPICH pairs even/odd neighbours instead; pairing P+i with i is the same fold
with a simpler numbering.
"""

from __future__ import annotations

__all__ = ["extras", "extras_below", "log2ceil", "log2floor", "popcount_sum", "pow2floor"]


def log2ceil(p: int) -> int:
    """⌈log2 p⌉ for p >= 1 (0 for p = 1)."""
    return (p - 1).bit_length()


def log2floor(p: int) -> int:
    """⌊log2 p⌋ for p >= 1."""
    return p.bit_length() - 1


def pow2floor(p: int) -> int:
    """P, the largest power of two not above p."""
    return 1 << log2floor(p)


def extras(p: int) -> int:
    """r = p - P, the ranks the fold takes out (0 when p is a power of two)."""
    return p - pow2floor(p)


def extras_below(p: int) -> int:
    """Σ over rounds t < log2 P of min(2^t, r): extra blocks that rank 0's group carries in recursive doubling."""
    big, r = pow2floor(p), extras(p)
    total, m = 0, 1
    while m < big:
        total += min(m, r)
        m <<= 1
    return total


def popcount_sum(p: int) -> int:
    """Σ_{i<p} popcount(i): the blocks each rank sends in Bruck's all-to-all (Bruck et al. 1997)."""
    total, t = 0, 1
    while t < p:
        # Of every 2t consecutive integers, the upper t have bit t set.
        total += (p // (2 * t)) * t + max(0, p % (2 * t) - t)
        t <<= 1
    return total
