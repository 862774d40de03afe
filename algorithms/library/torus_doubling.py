"""Recursive doubling and Rabenseifner's all-reduce on a torus, nearest peers first, on every port.

De Sensi, Bonato, Saam & Hoefler, "Swing: Short-cutting Rings for Higher
Bandwidth Allreduce", NSDI 2024, §2 and §5 compare Swing with recursive
doubling run the way Swing runs on a torus: one dimension at a time, a
coordinate c pairing with c XOR 2^t at its t-th step in that dimension, the
distance doubling (1, 2, 4, ... hops) so that the reduce-scatter's largest
blocks cross one hop and its smallest the most; the data cut into 2D parts,
part j starting at dimension ⌊j/2⌋ and, for odd j, mirrored (c goes the
other way, to c - ((c XOR 2^t) - c): every rank then goes +2^t on one part of
a dimension and -2^t on the other, so both directions of every link carry the
same load). The paper's simulator pairs its peers so (its recdoub motif).

``rabenseifner_torus``: the bandwidth-optimal one (Rabenseifner; Thakur,
Rabenseifner & Gropp 2005, §4.4): a reduce-scatter by recursive halving over
those matchings, then the all-gather by recursive doubling back, 2·log2 p
steps. Where the library's ``rabenseifner`` halves from distance p/2 on the
row-major numbering, its largest blocks cross the most hops: 59.3 ms against
28.2 ms on torus:8x8 at 512 MiB with one port (``ports=1``), about 4x less
again on all four.

``recursive_doubling_torus``: the latency-optimal one: log2 p steps, every
rank adding its whole part into its peer's.

On a ring of q ranks, step t of a dimension crosses min(2^t, q - 2^t) hops and
loads the links it uses up to 2^t messages deep: the congestion Swing's ρ
(1, 1, 3, 5, 11 hops) reduces.
"""

from __future__ import annotations

from algorithms.builder import ScheduleBuilder
from algorithms.ir import Collective, Kind, Schedule
from algorithms.library.compose import Grid, Phase, butterfly_in_order, emit, fold, parallel
from algorithms.library.fold import pow2floor
from algorithms.library.swing import (
    DIMS,
    PORTS,
    check_torus,
    exchange,
    exchange_cost,
    halving_doubling_cost,
    parts,
    torus_grid,
    torus_walk,
)
from algorithms.registry import CHUNKS, register

__all__ = ["doubling_matching", "half_way_ways", "rabenseifner_torus", "recursive_doubling_torus"]

SOURCE = "De Sensi, Bonato, Saam & Hoefler, Swing, NSDI 2024 (recursive doubling on a torus); Thakur et al. 2005"
CONSTRAINTS = ("dims (if given): sizes that are powers of two, product p",
               "dims empty: P = 2^⌊log2 p⌋ ranks on a near-square grid, the extra ranks folded in")


def doubling_matching(g: Grid, d: int, t: int, sign: int) -> list[int]:
    """Along dimension d at its step t: coordinate c moves by δ = (c XOR 2^t) - c (sign 1: it pairs with
    c XOR 2^t) or by -δ (sign -1: the mirror image, also a matching), the other coordinates unchanged."""
    bit = 1 << t
    out = []
    for x in range(g.ranks):
        c = g.coords(x)[d]
        out.append(g.shift(x, d, sign * ((c ^ bit) - c)))
    return out


def _plan(ranks: int, dims: str, ports: int) -> tuple[int, Grid, list[list[list[int]]]]:
    """(P, the grid of the P ranks, each part's matchings in the order it takes them)."""
    big, g, walks = _walks(ranks, dims, ports)
    return big, g, [[doubling_matching(g, d, t, sign) for d, t in walk] for sign, walk in walks]


def _walks(ranks: int, dims: str, ports: int) -> tuple[int, Grid, list[tuple[int, list[tuple[int, int]]]]]:
    """(P, the grid of the P ranks, each part's sign and (dimension, step) walk)."""
    big = pow2floor(ranks)
    g = torus_grid(big if not dims.strip() else ranks, dims, pow2=True)
    return big, g, [(sign, torus_walk(g, order)) for sign, order in parts(g, ports)]


def half_way_ways(g: Grid, sign: int, walk: list[tuple[int, int]]) -> list[int]:
    """Per step of a part's walk, the way (``Schedule.ways``) its messages take: 1 for a mirrored part (sign -1)
    at a half-way step (2^t = q/2 on a ring of q > 2 ranks, where c + q/2 = c - q/2: its peer is the unmirrored
    part's, and both ways round are shortest), else 0. So the two parts' messages to that peer go round opposite
    ways, as the paper's minimal routing sends each the way its δ says, and not both down one static route."""
    return [1 if sign < 0 and g.dims[d] > 2 and 2 << t == g.dims[d] else 0 for d, t in walk]


def _with_ways(phases: list[Phase], ways: list[list[int]]) -> list[list[int]]:
    """``parallel(*phases)``'s ways: each transfer of step i of phase j gets ``ways[j][i]``."""
    out: list[list[int]] = []
    for phase, per_step in zip(phases, ways, strict=True):
        for i, step in enumerate(phase):
            if i == len(out):
                out.append([])
            out[i].extend([per_step[i]] * len(step))
    return out


@register(Kind.ALLREDUCE, "rabenseifner_torus", source=SOURCE, parameters=(CHUNKS, DIMS, PORTS),
          check=check_torus(True), constraints=CONSTRAINTS,
          cost=halving_doubling_cost(" (β summed over all ports: m parts of n/m, time ÷ m on distinct links)"))
def rabenseifner_torus(ranks: int, *, chunks: int = 1, dims: str = "", ports: int = 0) -> Schedule:
    """Rabenseifner's all-reduce on a torus of ``dims`` (row-major as torus:RxC), nearest peers first.

    The buffer is m parts (``parts``) of P blocks of ``chunks`` chunks; part j halves over its
    matchings (``doubling_matching``, dimensions in turn from its own) and doubles back, all parts in
    the same steps; rank x ends the halving owning block x of every part. The blocks lie in
    ``butterfly_order`` (chunk c of every block of a part in a row of P), so that what a rank sends
    at a step is one transfer per chunk: 2·m·k·P·log2 P transfers, not m·k·P² (64x64: 393,216).
    """
    p, k = ranks, chunks
    big, g, walks = _walks(p, dims, ports)
    m = len(walks)
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, p, m * big * k), "rabenseifner_torus")
    pre, post = fold(p, m * big * k)
    halves: list[Phase] = []
    doubles: list[Phase] = []
    ways: list[list[int]] = []
    for j, (sign, walk) in enumerate(walks):
        matchings = [doubling_matching(g, d, t, sign) for d, t in walk]
        rs, ag = butterfly_in_order(matchings, j * big * k, k)  # part j: k rows of P blocks
        halves.append(rs)
        doubles.append(ag)
        ways.append(half_way_ways(g, sign, walk))
    emit(b, pre)
    emit(b, parallel(*halves), _with_ways(halves, ways))
    emit(b, parallel(*doubles), _with_ways(doubles, [w[::-1] for w in ways]))  # the doubling runs backwards
    emit(b, post)
    return b.build()


@register(Kind.ALLREDUCE, "recursive_doubling_torus", source=SOURCE, parameters=(CHUNKS, DIMS, PORTS),
          check=check_torus(True), constraints=CONSTRAINTS,
          cost=exchange_cost(" (β summed over all ports: m parts of n/m, time ÷ m on distinct links)"))
def recursive_doubling_torus(ranks: int, *, chunks: int = 1, dims: str = "", ports: int = 0) -> Schedule:
    """Recursive-doubling all-reduce on a torus of ``dims``: log2 P whole-part exchanges, nearest first.

    The buffer is m parts of ``chunks`` chunks; at each step every rank adds its whole part j into its
    peer's along part j's matching.
    """
    p, k = ranks, chunks
    _, _, plan = _plan(p, dims, ports)
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, p, len(plan) * k), "recursive_doubling_torus")
    pre, post = fold(p, len(plan) * k)
    programs = [[exchange(m, j * k, k) for m in matchings] for j, matchings in enumerate(plan)]
    for phase in (pre, parallel(*programs), post):
        emit(b, phase)
    return b.build()
