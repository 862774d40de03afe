"""PAT, NCCL's Parallel Aggregated Trees, for reduce-scatter and all-gather at one GPU per node.

NCCL 2.23+ (src/include/collectives.h, PatRSAlgorithm and PatAGAlgorithm; the peers in
src/device/prims_simple.h): rank r talks to the peers at distances 2^d, receiving from r - 2^d and
sending to r + 2^d in a reduce-scatter (the reverse in an all-gather). As we read its step loop: the
partial sum that rank r holds of block r + s (its "offset" s from the block's owner) goes to rank
r + lowbit(s), whose offset for that block is s with its lowest set bit cleared. So every block is
reduced along a binomial tree of depth ⌈log2 p⌉ that ends at its owner (offset 0), and the trees of the
p blocks are the same tree shifted, run in parallel: each rank is at a different offset in each.

The loop walks the offsets from high to low so that a node's children (offsets s + 2^d, 2^d < lowbit(s))
come before it. Aggregation joins offsets into one message: with A = ``aggregate`` (a power of two) and
D = P/A, P = 2^⌈log2 p⌉, step ``as`` (D-1 down to 1) sends every offset s ≡ as (mod D), which all
share the lowest bit of ``as`` and so the peer; then the multiples of D go in log2 A steps of growing
lowest bit (NCCL's phases 2 and 3, ``scale`` doubling). A = 1 moves one block per step, p - 1 steps that
are bandwidth-optimal like a ring's; A = P/2 moves everything in log2 P steps, as recursive halving
does. NCCL picks A from the step size and the buffer (``aggregation``). Offsets s >= p do not exist
and are skipped, so any p works. The all-gather is the reduce-scatter run backwards: each block is
broadcast from its owner down the same tree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from algorithms.builder import ScheduleBuilder
from algorithms.ir import Buf, Collective, Kind, Op, Schedule
from algorithms.library.fold import log2ceil
from algorithms.registry import CHUNKS, Cost, Parameter, register

__all__ = ["AGGREGATE", "aggregation", "offset_groups"]

SOURCE = "NCCL PAT (src/include/collectives.h PatRSAlgorithm / PatAGAlgorithm, NCCL 2.23+)"
AGGREGATE = Parameter("aggregate", 1, "offsets joined per message (NCCL's aggFactor): a power of two, "
                      "at most 2^⌈log2 p⌉/2; 1: one block per step, larger: fewer, bigger steps")
CHANNELS = Parameter("channels", 1, "channels, each running the same steps on its slice of every block "
                     "(NCCL splits the buffer across its channels)")
CONSTRAINTS = ("one rank per node (NCCL runs PAT at one GPU per node)",
               "aggregate: a power of two <= 2^⌈log2 p⌉ / 2 (or 1)")


def _lowbit(x: int) -> int:
    return x & -x


def aggregation(ranks: int, channel_bytes: int, step_bytes: int, step_depth: int = 8) -> int:
    """NCCL's aggFactor for a channel's share of ``channel_bytes`` (PatRSAlgorithm's constructor).

    It doubles while a step of ``step_bytes`` holds two aggregated pieces and then once per halving of
    ``step_depth`` (NCCL_STEPS, 8), never reaching p/2.
    """
    agg = 1
    while step_bytes // max(1, channel_bytes * agg) >= 2 and agg < ranks // 2:
        agg *= 2
    d = step_depth
    while d > 1 and agg < ranks // 2:
        d //= 2
        agg *= 2
    return agg


def offset_groups(ranks: int, aggregate: int) -> list[list[int]]:
    """The offsets each reduce-scatter step sends, in step order; empty groups (offsets >= p) dropped."""
    big = 1 << log2ceil(ranks)
    delta = big // aggregate
    groups = [[s for s in range(a, big, delta) if s < ranks] for a in range(delta - 1, 0, -1)]
    scale = 1
    while scale < aggregate:  # the multiples of D, by growing lowest bit
        groups.append([s for s in range(scale * delta, big, 2 * scale * delta) if s < ranks])
        scale *= 2
    return [g for g in groups if g]


def _check(p: int, params: Mapping[str, Any]) -> str | None:
    a, big = params["aggregate"], 1 << log2ceil(p)
    if a & (a - 1) or (a > 1 and a > big // 2):
        return f"aggregate={a} must be a power of two at most {max(1, big // 2)} (2^⌈log2 p⌉ / 2)"
    return None


def _steps(p: int, params: Mapping[str, Any]) -> int:
    return len(offset_groups(p, params["aggregate"])) if p > 1 else 0


STEPS = "S = min(D-1, p-1) + #{j < log2 A: 2^j·D < p}, D = 2^⌈log2 p⌉/A"


def _cost(reduces: bool) -> Cost:
    return Cost(
        f"S·α + (p-1)/p·nβ{' + (p-1)/p·nγ' if reduces else ''}, {STEPS}",
        steps=lambda p, n, params: _steps(p, params),
        bytes=lambda p, n, params: (p - 1) * n / p,
        reduced=lambda p, n, params: (p - 1) * n / p if reduces else 0,
        sent_per_rank=lambda p, n, params: (p - 1) * n / p,
    )


def _arrays(p: int, group: list[int], k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rank, offset, chunk) of every transfer of a step: each rank sends each offset's k chunks."""
    r, s, i = (a.ravel() for a in np.meshgrid(np.arange(p), np.array(group), np.arange(k), indexing="ij"))
    return r, s, i


@register(Kind.REDUCESCATTER, "pat", source=SOURCE, parameters=(CHUNKS, AGGREGATE, CHANNELS), check=_check,
          constraints=CONSTRAINTS,
          cost=_cost(True))
def reducescatter_pat(ranks: int, *, chunks: int = 1, aggregate: int = 1, channels: int = 1) -> Schedule:
    """PAT reduce-scatter: rank r adds its partial of block r+s into rank r+lowbit(s), offsets high to low.

    Each block is ``channels`` x ``chunks`` chunks, all moved in the same steps."""
    p, k = ranks, chunks * channels
    b = ScheduleBuilder(Collective(Kind.REDUCESCATTER, p, k), "pat")
    own = np.arange(p)
    with b.step():  # the own block into the output first: partial sums arrive there
        b.add_many(own, own, own * k, k, dst_buf=Buf.OUTPUT, dst_index=0)
    if p == 1:
        return b.build()
    for group in offset_groups(p, aggregate):
        r, s, i = _arrays(p, group, k)
        dst = (r + (s & -s)) % p
        block = (r + s) % p
        owner = block == dst  # the partial reaches its owner: into its output
        with b.step():
            if (~owner).any():
                b.add_many(r[~owner], dst[~owner], block[~owner] * k + i[~owner], op=Op.REDUCE)
            if owner.any():
                b.add_many(r[owner], dst[owner], block[owner] * k + i[owner], op=Op.REDUCE,
                           dst_buf=Buf.OUTPUT, dst_index=i[owner])
    return b.build()


@register(Kind.ALLGATHER, "pat", source=SOURCE, parameters=(CHUNKS, AGGREGATE, CHANNELS), check=_check,
          constraints=CONSTRAINTS,
          cost=_cost(False))
def allgather_pat(ranks: int, *, chunks: int = 1, aggregate: int = 1, channels: int = 1) -> Schedule:
    """PAT all-gather, the reduce-scatter backwards: rank q passes block q-lowbit(s)+s on to q-lowbit(s)."""
    p, k = ranks, chunks * channels
    b = ScheduleBuilder(Collective(Kind.ALLGATHER, p, k), "pat")
    own = np.arange(p)
    with b.step():
        b.add_many(own, own, 0, k, dst_buf=Buf.OUTPUT, dst_index=own * k)
    for group in reversed(offset_groups(p, aggregate) if p > 1 else []):
        q, s, i = _arrays(p, group, k)
        dst = (q - (s & -s)) % p
        block = (dst + s) % p
        with b.step():
            b.add_many(q, dst, block * k + i, buf=Buf.OUTPUT)
    return b.build()
