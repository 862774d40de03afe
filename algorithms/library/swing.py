"""Swing all-reduce, on a ring and on every port of a torus.

De Sensi, Bonato, Saam & Hoefler, "Swing: Short-cutting Rings for Higher
Bandwidth Allreduce", NSDI 2024. At step s rank r exchanges with

    π(r, s) = r + ρ(s) if r is even, r - ρ(s) if r is odd (mod p),
    ρ(s) = Σ_{i=0..s} (-2)^i = 1, -1, 3, -5, 11, -21, ...

so the peers are |ρ(s)| = 1, 1, 3, 5, 11 ranks away instead of recursive
doubling's 1, 2, 4, 8, 16. The bandwidth-optimal variant is a reduce-scatter
of log2 p halving steps (rank r sends its peer the blocks the peer reaches
in the steps left, ``compose.butterfly``) and the mirrored all-gather.

``swing``: the 1-D algorithm, p a power of two; other p fold their extra
ranks in and out (Thakur, Rabenseifner & Gropp 2005, §4.4).

``swing_torus``: the paper's multiport torus variant as we read it. On a
D-dimensional torus a Swing collective walks the dimensions in turn (step s
along the next dimension that has steps left, ρ counted per dimension, the
parity that of the rank's coordinate there); the data is cut into 2D parts,
part j starting at dimension ⌊j/2⌋ and, for odd j, mirrored (ρ negated), so
that on a square torus every step keeps all 2D ports of every rank busy,
each directed link carrying exactly one part's message.

``swing_latency_optimal`` and ``swing_torus_latency_optimal``: the paper's
latency-optimal Swing (§3.1.2), the same peers in half the steps. At step s
rank r and π(r, s) add their whole buffers into each other, as recursive
doubling does with r XOR 2^s: log2 p steps of n bytes instead of 2·log2 p
steps of shrinking blocks, the variant the paper runs for small vectors
(32 B on torus:8x8: 6 steps, 10 hops, against the bandwidth-optimal 12 and 20).
After step s a rank holds the sum of 2^(s+1) ranks' data: the peers' sets are
disjoint, the property the paper proves for π and the verifier checks here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from algorithms.builder import ScheduleBuilder
from algorithms.errors import ScheduleError
from algorithms.ir import Buf, Collective, Kind, Op, Schedule, Transfer
from algorithms.library.compose import Grid, Phase, butterfly, butterfly_in_order, emit, fold, parallel
from algorithms.library.fold import log2floor, pow2floor
from algorithms.registry import CHUNKS, Cost, Parameter, register
from algorithms.symmetric import SymmetricForm, restrict

__all__ = ["DIMS", "PORTS", "check_torus", "exchange", "exchange_cost", "halving_doubling_cost", "parts", "rho",
           "swing", "swing_latency_optimal", "swing_matching", "swing_torus", "swing_torus_latency_optimal",
           "torus_grid", "torus_walk"]

SOURCE = "De Sensi, Bonato, Saam & Hoefler, Swing, NSDI 2024"
DIMS = Parameter("dims", "", "torus sizes RxC (or AxBxC...), row-major as torus:RxC; default: a near-square grid")
PORTS = Parameter("ports", 0, "parts of the data, one per torus direction (+x, -x, +y, ...); 0: all 2·D", minimum=0)


def rho(s: int) -> int:
    """ρ(s) = Σ_{i=0..s} (-2)^i = (1 - (-2)^(s+1)) / 3 (De Sensi et al. 2024)."""
    return (1 - (-2) ** (s + 1)) // 3


def swing_matching(q: int, s: int, sign: int = 1) -> list[int]:
    """π(·, s) on a ring of q ranks (q even): even c goes to c + sign·ρ(s), odd c to c - sign·ρ(s)."""
    return [(c + (sign if c % 2 == 0 else -sign) * rho(s)) % q for c in range(q)]


def _e(p: int) -> int:
    return int(p != pow2floor(p))


def halving_doubling_cost(what: str) -> Cost:
    """The Cost of recursive halving, then doubling, over log2 P matchings (``butterfly``), folded.

    ``what`` ends the formula's text."""
    # Rabenseifner's counts (Thakur et al. 2005): a halving of P blocks, the doubling back, the fold.
    def big(p: int) -> int:
        return pow2floor(p)

    return Cost(
        "2(log2 P+e)α + (2(P-1)/P+2e)·nβ + ((P-1)/P+e)·nγ, P = 2^⌊log2 p⌋, e = [p ≠ P]" + what,
        steps=lambda p, n, params: 2 * (log2floor(p) + _e(p)),
        bytes=lambda p, n, params: (2 * (big(p) - 1) / big(p) + 2 * _e(p)) * n,
        reduced=lambda p, n, params: ((big(p) - 1) / big(p) + _e(p)) * n,
        sent_per_rank=lambda p, n, params: (2 * (big(p) - 1) / big(p) + _e(p)) * n,
    )


@register(Kind.ALLREDUCE, "swing", source=SOURCE, cost=halving_doubling_cost(""),
          constraints=("p not a power of two: the p - P extra ranks fold in and out",))
def swing(ranks: int, *, chunks: int = 1) -> Schedule:
    """Bandwidth-optimal Swing all-reduce on P = 2^⌊log2 p⌋ ranks, extra ranks folded in.

    The buffer is P blocks of ``chunks`` chunks; rank r ends the reduce-scatter owning block r.
    """
    p, k = ranks, chunks
    big = pow2floor(p)
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, p, big * k), "swing")
    pre, post = fold(p, big * k)
    matchings = [swing_matching(big, s) for s in range(log2floor(big))]
    rs, ag = butterfly(matchings, lambda blk: blk * k, k)
    for phase in (pre, rs, ag, post):
        emit(b, phase)
    return b.build()


def torus_grid(p: int, dims: str, *, pow2: bool) -> Grid:
    """The grid ``dims`` names (its product must be p), or ``Grid.auto`` of p when empty."""
    if not dims.strip():
        return Grid.auto(p, pow2=pow2)
    g = Grid.parse(dims)
    if g.ranks != p:
        raise ScheduleError(f"dims {dims} hold {g.ranks} ranks, not {p}")
    if pow2 and any(q & (q - 1) for q in g.dims):
        raise ScheduleError(f"dims {dims}: every size must be a power of two")
    return g


def check_torus(pow2: bool) -> Any:
    def check(p: int, params: Mapping[str, Any]) -> str | None:
        try:
            torus_grid(p, params.get("dims", ""), pow2=pow2)
        except ScheduleError as e:
            return str(e)
        return None

    return check


def parts(g: Grid, ports: int) -> list[tuple[int, list[int]]]:
    """(sign, dimension order) of each part: part j mirrored for odd j, its order the dimensions of size > 1
    rotated by ⌊j/2⌋. ``ports`` parts (0: 2·D, D the dimensions of size > 1), at most 2·D; one when D = 0."""
    active = [d for d, q in enumerate(g.dims) if q > 1]
    if not active:
        return [(1, [])]
    m = 2 * len(active) if ports == 0 else min(ports, 2 * len(active))
    out = []
    for j in range(m):
        r = (j // 2) % len(active)
        out.append((1 if j % 2 == 0 else -1, active[r:] + active[:r]))
    return out


def torus_walk(g: Grid, order: list[int]) -> list[tuple[int, int]]:
    """(dimension, its step t) in the order a Swing collective takes them: round robin from ``order[0]``,
    skipping a dimension once its log2 q steps are done."""
    left = {d: log2floor(g.dims[d]) for d in order}
    done = dict.fromkeys(order, 0)
    out = []
    while any(left.values()):
        for d in order:
            if left[d]:
                out.append((d, done[d]))
                done[d] += 1
                left[d] -= 1
    return out


def _torus_matching(g: Grid, d: int, t: int, sign: int) -> list[int]:
    """Along dimension d at its step t: even coordinates go sign·ρ(t) ahead, odd ones sign·ρ(t) back."""
    out = []
    for x in range(g.ranks):
        c = g.coords(x)[d]
        out.append(g.shift(x, d, (sign if c % 2 == 0 else -sign) * rho(t)))
    return out


@register(Kind.ALLREDUCE, "swing_torus", source=SOURCE + " (multiport torus variant)",
          parameters=(CHUNKS, DIMS, PORTS), check=check_torus(True),
          cost=halving_doubling_cost(" (β summed over all ports: on a square torus the 2D ports share it, time ÷ 2D)"),
          constraints=("dims (if given): sizes that are powers of two, product p",
                       "dims empty: P = 2^⌊log2 p⌋ ranks on a near-square grid, the extra ranks folded in"))
def swing_torus(ranks: int, *, chunks: int = 1, dims: str = "", ports: int = 0) -> Schedule:
    """Multiport Swing all-reduce on a torus of ``dims`` (row-major, rank = row·cols + col as torus:RxC).

    The buffer is m parts (``parts``) of P blocks of ``chunks`` chunks; each
    part runs a Swing reduce-scatter and all-gather on its own dimension
    order and direction, all parts in the same steps. The blocks lie in
    ``butterfly_order`` (chunk c of every block of a part in a row of P), so
    that what a rank sends at a step is one transfer per chunk: 2·m·k·P·log2 P
    transfers, not m·k·P² (64x64: 393,216).
    """
    p, k = ranks, chunks
    big = pow2floor(p)
    g = torus_grid(big if not dims.strip() else p, dims, pow2=True)
    plan = parts(g, ports)
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, p, len(plan) * big * k), "swing_torus")
    pre, post = fold(p, len(plan) * big * k)
    halves: list[Phase] = []
    doubles: list[Phase] = []
    for j, (sign, order) in enumerate(plan):
        matchings = [_torus_matching(g, d, t, sign) for d, t in torus_walk(g, order)]
        rs, ag = butterfly_in_order(matchings, j * big * k, k)  # part j: k rows of P blocks
        halves.append(rs)
        doubles.append(ag)
    for phase in (pre, parallel(*halves), parallel(*doubles), post):
        emit(b, phase)
    return b.build()


# --- latency-optimal Swing (De Sensi et al. 2024, §3.1.2) ----------------------------------------


def exchange(matching: Sequence[int], start: int, width: int,
             ranks: Callable[[int], int] = lambda x: x) -> list[Transfer]:
    """One latency-optimal step: every x adds its ``width`` chunks from ``start`` into ``matching[x]``'s.

    Both directions of a pair run in the same step (a transfer reads its source when the step starts),
    so x and its partner end holding the same sum. One transfer per chunk, as ``butterfly`` does;
    ``ranks`` maps the matching's ranks to the schedule's (for a fold).
    """
    return [Transfer(ranks(x), ranks(y), Buf.INPUT, start + c, Buf.INPUT, start + c, 1, Op.REDUCE)
            for x, y in enumerate(matching) for c in range(width)]


def exchange_cost(what: str) -> Cost:
    """The Cost of log2 P whole-buffer exchanges (``exchange``), folded; ``what`` ends the formula's text."""
    # Recursive doubling's counts (Thakur et al. 2005): log2 P exchanges of the whole buffer, the fold.
    def steps(p: int) -> int:
        return log2floor(p) + 2 * _e(p)

    return Cost(
        "(log2 P+2e)α + (log2 P+2e)·nβ + (log2 P+e)·nγ, P = 2^⌊log2 p⌋, e = [p ≠ P]" + what,
        steps=lambda p, n, params: steps(p),
        bytes=lambda p, n, params: steps(p) * n,
        reduced=lambda p, n, params: (log2floor(p) + _e(p)) * n,
        sent_per_rank=lambda p, n, params: (log2floor(p) + _e(p)) * n,
    )


@register(Kind.ALLREDUCE, "swing_latency_optimal", source=SOURCE + " (latency-optimal, §3.1.2)",
          cost=exchange_cost(""), constraints=("p not a power of two: the p - P extra ranks fold in and out",))
def swing_latency_optimal(ranks: int, *, chunks: int = 1) -> Schedule:
    """Latency-optimal Swing all-reduce: at step s, r and π(r, s) add their whole buffers into each other.

    log2 P steps on P = 2^⌊log2 p⌋ ranks, the extra ranks folded in and out; the buffer is ``chunks``
    chunks, each its own transfer.
    """
    p, k = ranks, chunks
    big = pow2floor(p)
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, p, k), "swing_latency_optimal")
    pre, post = fold(p, k)
    steps = [exchange(swing_matching(big, s), 0, k) for s in range(log2floor(big))]
    for phase in (pre, steps, post):
        emit(b, phase)
    return b.build()


def _latency_optimal_symmetric(ranks: int, *, chunks: int = 1, dims: str = "", ports: int = 0
                               ) -> SymmetricForm | None:
    """``swing_torus_latency_optimal``'s symmetric form: translations by even amounts along every dimension
    (a rank's peer depends on the parity of its coordinate; the whole buffer moves, so chunk indices stay).
    None when p is not a power of two (the fold's extra ranks break the symmetry)."""
    p, k = ranks, chunks
    if p != pow2floor(p):
        return None
    g = torus_grid(p, dims, pow2=True)
    plan = parts(g, ports)
    gens = tuple(tuple(2 * int(i == d) for i in range(g.ndim)) for d, q in enumerate(g.dims) if q > 2)

    def build() -> Schedule:
        return swing_torus_latency_optimal(p, chunks=k, dims=dims, ports=ports)

    return SymmetricForm("swing_torus_latency_optimal", Collective(Kind.ALLREDUCE, p, len(plan) * k), g.dims, gens,
                         lambda sources: restrict(build(), sources), build)


@register(Kind.ALLREDUCE, "swing_torus_latency_optimal", source=SOURCE + " (latency-optimal, multiport torus)",
          parameters=(CHUNKS, DIMS, PORTS), check=check_torus(True),
          symmetric=lambda ranks, **params: _latency_optimal_symmetric(ranks, **params),
          cost=exchange_cost(" (β summed over all ports: the m parts move n/m each, time ÷ m on distinct links)"),
          constraints=("dims (if given): sizes that are powers of two, product p",
                       "dims empty: P = 2^⌊log2 p⌋ ranks on a near-square grid, the extra ranks folded in"))
def swing_torus_latency_optimal(ranks: int, *, chunks: int = 1, dims: str = "", ports: int = 0) -> Schedule:
    """Latency-optimal Swing all-reduce on a torus of ``dims`` (row-major as torus:RxC).

    The buffer is m parts (``parts``) of ``chunks`` chunks; part j walks the dimensions in its own
    order and direction, as ``swing_torus`` does, and at each of its log2 P steps every rank adds its
    whole part into its peer's, all parts in the same steps.
    """
    p, k = ranks, chunks
    big = pow2floor(p)
    g = torus_grid(big if not dims.strip() else p, dims, pow2=True)
    plan = parts(g, ports)
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, p, len(plan) * k), "swing_torus_latency_optimal")
    pre, post = fold(p, len(plan) * k)
    programs: list[Phase] = []
    for j, (sign, order) in enumerate(plan):
        programs.append([exchange(_torus_matching(g, d, t, sign), j * k, k) for d, t in torus_walk(g, order)])
    for phase in (pre, parallel(*programs), post):
        emit(b, phase)
    return b.build()
