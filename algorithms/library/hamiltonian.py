"""Ring all-reduce on edge-disjoint Hamiltonian cycles of a torus: one ring per port.

De Sensi, Bonato, Saam & Hoefler, "Swing: Short-cutting Rings for Higher
Bandwidth Allreduce", NSDI 2024, §2 compare Swing with rings that use every
port of a torus node: a 2-D torus splits into two edge-disjoint Hamiltonian
cycles, each run both ways, four rings over four disjoint sets of directed
links, each ring all-reducing a quarter of the data (Patarasuk & Yuan's ring,
2(p-1) steps of one hop). A single ring uses one port of four: 21.25 ms at
512 MiB on torus:8x8 where the four rings take about 5.3.

The cycles are the Gray-code walks of the construction the paper's simulator
cites ("Edge-disjoint Hamiltonian cycles in two-dimensional torus"): on R rows
of C columns (rank = row·C + col, as torus:RxC numbers them), with C | R,
position X = x1·C + x0 of the walk (x1 < R, x0 < C) is

    cycle 0: row x1,                          column (x0 + (C-1)·x1) mod C
    cycle 1: row (x0 + (C-1)·x1) mod R,       column x1 mod C

Consecutive positions differ by one hop, cycle 0 along the rows and cycle 1
down the columns, with one step the other way at each carry; the two use
disjoint links, and both visit every node when gcd(C - 1, R / C) = 1
(torus:8x8, 64x16, 128x8, 256x4, 64x64). R | C is the transpose. A 1-D torus
is its own Hamiltonian cycle, two rings. The simulator the paper used runs
rings only on 1-D and 2-D tori; so does this module: other shapes are refused
by ``hamiltonian_cycles`` with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from algorithms.builder import ScheduleBuilder
from algorithms.errors import ScheduleError
from algorithms.ir import Buf, Collective, Kind, Op, Schedule
from algorithms.library.compose import Grid
from algorithms.library.swing import DIMS, PORTS
from algorithms.registry import CHUNKS, Cost, register
from algorithms.symmetric import SymmetricForm

__all__ = ["hamiltonian_cycles", "hamiltonian_rings", "rings_grid"]


def _gray_cycles(rows: int, cols: int) -> list[list[tuple[int, int]]]:
    """The two walks of the module docstring, as (row, column) lists, for ``cols`` dividing ``rows``."""
    walks: list[list[tuple[int, int]]] = [[], []]
    for x1 in range(rows):
        for x0 in range(cols):
            walks[0].append((x1, (x0 + (cols - 1) * x1) % cols))
            walks[1].append(((x0 + (cols - 1) * x1) % rows, x1 % cols))
    return walks


def _hops(g: Grid, a: int, b: int) -> int:
    return sum(min((x - y) % q, (y - x) % q) for x, y, q in zip(g.coords(a), g.coords(b), g.dims, strict=True))


def _check_cycles(g: Grid, cycles: list[list[int]]) -> None:
    """Each cycle visits every rank once, one hop at a time, and no two share a link."""
    used: set[frozenset[int]] = set()
    for i, cyc in enumerate(cycles):
        if sorted(cyc) != list(range(g.ranks)):
            raise ScheduleError(f"torus {g}: walk {i} does not visit every rank once")
        if any(_hops(g, a, cyc[(j + 1) % len(cyc)]) != 1 for j, a in enumerate(cyc)) and len(cyc) > 1:
            raise ScheduleError(f"torus {g}: walk {i} is not one hop at a time")
        links = {frozenset((a, cyc[(j + 1) % len(cyc)])) for j, a in enumerate(cyc)}
        if len(links) != len(cyc) and len(cyc) > 2:
            raise ScheduleError(f"torus {g}: walk {i} uses a link twice")
        if used & links:
            raise ScheduleError(f"torus {g}: walk {i} shares links with an earlier one")
        used |= links


def hamiltonian_cycles(g: Grid) -> list[list[int]]:
    """Edge-disjoint Hamiltonian cycles of the torus ``g``, each as its ranks in walk order.

    The dimensions of size 1 do not count. One dimension: the ring itself. Two, of R and C ranks: the
    two cycles of the module docstring, when one size divides the other, their quotient m is prime to
    the smaller size minus 1 and both sizes are at least 3. Raises ``ScheduleError`` saying why otherwise.
    """
    active = [d for d, q in enumerate(g.dims) if q > 1]
    if len(active) <= 1:
        return [list(range(g.ranks))]
    if len(active) > 2:
        raise ScheduleError(f"torus {g}: Hamiltonian rings here serve 1-D and 2-D tori only "
                            "(as the Swing paper's simulator does)")
    rows, cols = (g.dims[d] for d in active)
    small, big = sorted((rows, cols))
    if small < 3 or big % small or math.gcd(small - 1, big // small) != 1:
        raise ScheduleError(f"torus {g}: no edge-disjoint Hamiltonian cycles here for {rows}x{cols} (needs sizes "
                            f">= 3, one dividing the other, the quotient prime to the smaller size minus 1)")
    if rows % cols == 0:
        walks = _gray_cycles(rows, cols)
    else:
        walks = [[(r, c) for c, r in w] for w in _gray_cycles(cols, rows)]
    cycles = [[r * cols + c for r, c in w] for w in walks]  # sizes 1 leave the numbering alone
    _check_cycles(g, cycles)
    return cycles


def rings_grid(p: int, dims: str) -> Grid:
    """The grid ``dims`` names (its product must be p); empty: ``Grid.auto(p)`` if it has the cycles, else a
    ring of p."""
    if dims.strip():
        g = Grid.parse(dims)
        if g.ranks != p:
            raise ScheduleError(f"dims {dims} hold {g.ranks} ranks, not {p}")
        return g
    g = Grid.auto(p)
    try:
        hamiltonian_cycles(g)
    except ScheduleError:
        return Grid((p,))
    return g


def _check(p: int, params: Mapping[str, Any]) -> str | None:
    try:
        hamiltonian_cycles(rings_grid(p, params.get("dims", "")))
    except ScheduleError as e:
        return str(e)
    return None


def _rings(p: int, params: Mapping[str, Any]) -> list[tuple[list[int], int]]:
    """(cycle, direction) of each ring: ``ports`` of them (0: both ways round every cycle)."""
    cycles = hamiltonian_cycles(rings_grid(p, str(params["dims"])))
    ports = int(params["ports"])
    m = 2 * len(cycles) if ports == 0 else min(ports, 2 * len(cycles))
    return [(cycles[j // 2], 1 if j % 2 == 0 else -1) for j in range(m)]


@register(
    Kind.ALLREDUCE,
    "hamiltonian_rings",
    source="De Sensi, Bonato, Saam & Hoefler, Swing, NSDI 2024 (Hamiltonian rings); Patarasuk & Yuan 2009",
    parameters=(CHUNKS, DIMS, PORTS),
    check=_check,
    symmetric=lambda ranks, **params: _symmetric(ranks, **params),
    constraints=("1-D, or 2-D with R | C or C | R, sizes >= 3 and gcd(min - 1, max / min) = 1 (8x8, 64x16, ...)",
                 "dims empty: the near-square grid when it qualifies, else a ring of p (two rings, one each way)"),
    cost=Cost(
        "2(p-1)α + 2(p-1)/p·nβ + (p-1)/p·nγ (β summed over the m rings: edge-disjoint, time ÷ m)",
        steps=lambda p, n, params: 2 * (p - 1),
        bytes=lambda p, n, params: 2 * (p - 1) * n / p,
        reduced=lambda p, n, params: (p - 1) * n / p,
        sent_per_rank=lambda p, n, params: 2 * (p - 1) * n / p,
    ),
)
def hamiltonian_rings(ranks: int, *, chunks: int = 1, dims: str = "", ports: int = 0) -> Schedule:
    """Ring all-reduce on m rings at once, each on a Hamiltonian cycle of the torus ``dims``, one way round.

    The buffer is m parts of p blocks of ``chunks`` chunks; ring j reduce-scatters part j in p - 1 steps
    (walk position i adds block i - d(s+1) into position i + d, d its direction), then all-gathers it in
    p - 1 more, every ring in the same steps. Every chunk is its own transfer.
    """
    return _build(ranks, chunks, _rings(ranks, {"dims": dims, "ports": ports}), None).build()


def _build(p: int, k: int, rings: list[tuple[list[int], int]], sources: np.ndarray | None) -> ScheduleBuilder:
    """``hamiltonian_rings``' schedule on ``rings``, built; with ``sources``, only the transfers from those
    ranks."""
    width = p * k
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, p, len(rings) * width), "hamiltonian_rings")
    pos = np.repeat(np.arange(p), k)
    c = np.tile(np.arange(k), p)
    walks = []
    for j, (cycle, direction) in enumerate(rings):
        arr = np.asarray(cycle)
        mine = slice(None) if sources is None else np.isin(arr[pos], sources)
        walks.append((arr, direction, j * width, pos[mine], c[mine]))
    for s in range(p - 1):  # reduce-scatter: position i adds block i - d(s+1) into i + d
        with b.step():
            for cyc, d, base, at, ci in walks:
                b.add_many(cyc[at], cyc[(at + d) % p], base + (at - d * (s + 1)) % p * k + ci, op=Op.REDUCE)
    for s in range(p - 1):  # position i now holds block i whole; all-gather: pass block i - d·s on
        with b.step():
            for cyc, d, base, at, ci in walks:
                b.add_many(cyc[at], cyc[(at + d) % p], base + (at - d * s) % p * k + ci)
    return b


def _symmetric(ranks: int, *, chunks: int = 1, dims: str = "", ports: int = 0) -> SymmetricForm | None:
    """The rings' symmetric form: the torus translations that move every cycle along itself (a 1-D torus:
    all of them; R x C with C | R: the multiples of (1, -1), which shift cycle 0 by C positions and cycle 1
    likewise), each moving ring j's blocks by the positions it shifts that ring. None where those translations
    do not rotate every cycle."""
    p, k = ranks, chunks
    g = rings_grid(p, dims)
    rings = _rings(p, {"dims": dims, "ports": ports})
    active = [d for d, q in enumerate(g.dims) if q > 1]
    gen = [0] * g.ndim
    for i, d in enumerate(active):
        gen[d] = 1 if i == 0 else -1
    gens = (tuple(gen),) if active else ()
    where = [np.argsort(np.asarray(cyc)) for cyc, _d in rings]  # position of each rank on each ring

    def moved(shift: tuple[int, ...]) -> np.ndarray:
        """Per ring, how many positions ``shift`` moves it along itself."""
        return np.array([int(w[g.rank([a + b for a, b in zip(g.coords(cyc[0]), shift, strict=True)])])
                         for (cyc, _d), w in zip(rings, where, strict=True)])

    for gv in gens:
        delta = moved(gv)
        for (cyc, _d), w, dj in zip(rings, where, delta, strict=True):
            image = [w[g.rank([a + b for a, b in zip(g.coords(r), gv, strict=True)])] for r in cyc]
            if image != [(i + dj) % p for i in range(p)]:
                return None
    width = p * k

    def chunk_map(shift: tuple[int, ...], buf: Buf, index: np.ndarray) -> np.ndarray:
        j, x = np.divmod(index, width)
        blk, c = np.divmod(x, k)
        return j * width + (blk + moved(shift)[j]) % p * k + c

    return SymmetricForm("hamiltonian_rings", Collective(Kind.ALLREDUCE, p, len(rings) * width), g.dims, gens,
                         lambda sources: _build(p, k, rings, sources).columns(),
                         lambda: _build(p, k, rings, None).build(), chunk_map)
