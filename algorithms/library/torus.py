"""The bucket all-reduce on a torus, built dimension by dimension with ``compose``.

On a 2-D torus: ring reduce-scatter along x, ring all-reduce along y on the
1/X of the data each rank then owns, ring all-gather along x (the bucket
algorithms of Chan, Heimlich, Purkayastha & van de Geijn, "Collective
communication: theory, practice, and experience", CCPE 19(13), 2007, which
compose 1-D bucket (ring) collectives dimension by dimension on
multidimensional meshes). On D dimensions: reduce-scatter along each
dimension in turn, then all-gather back in the reverse order.

With ``ports`` parts (default: all 2·D), the data is cut into one part per
torus direction, as Jain & Sabharwal do ("Optimal bucket algorithms for
large MPI collectives on torus interconnects", ICS 2010): part j runs its
rings forwards (even j) or backwards (odd j), in the dimension order rotated
by ⌊j/2⌋, so that on a square torus every step keeps all 2·D ports busy.

``phases``: ``independent`` (the default) lets each part change dimension as
soon as its own ring is done: on torus:64x16 the part that starts on the
16-ring reaches the 64-ring after 15 steps, 2·(63 + 15) = 156 steps in all.
``synchronized`` is the bucket of De Sensi et al., "Swing: Short-cutting
Rings for Higher Bandwidth Allreduce", NSDI 2024 (its simulator's 2-D
all-reduce of four rings): every part changes dimension at once, when a
rank's rings of the phase are all done, so each of the 2·D phases lasts as
long as the longest ring, 2·D·(max q - 1) = 252 steps on torus:64x16 (the
same as independent on a square torus). The schedule holds the phases apart
with a local copy at every rank between them (each rank reads its whole
buffer into a scratch region of its own for that boundary): it reads every
slot the phase wrote there, and the next phase's transfers into that rank
write slots it read, so a dataflow execution cannot start them earlier. The
copies cost no time and move no bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from algorithms.builder import ScheduleBuilder
from algorithms.ir import Buf, Collective, Columns, Kind, Schedule, Transfer
from algorithms.library.compose import (
    Grid,
    Layout,
    Phase,
    along,
    emit,
    parallel,
    ring_allgather,
    ring_allreduce,
    ring_reducescatter,
)
from algorithms.library.swing import DIMS, PORTS, check_torus, parts, torus_grid
from algorithms.registry import CHUNKS, Cost, Parameter, register
from algorithms.symmetric import SymmetricForm

__all__ = ["PHASES", "torus_bucket"]

PHASES = Parameter("phases", "independent",
                   "independent: a part changes dimension when its own ring is done; synchronized: every part "
                   "at once, each phase as long as the longest ring (De Sensi et al. 2024)",
                   choices=("independent", "synchronized"))


def _orders(p: int, params: Mapping[str, Any]) -> tuple[list[int], list[list[int]]]:
    g = torus_grid(p, str(params["dims"]), pow2=False)
    return list(g.dims), [order for _, order in parts(g, int(params["ports"]))]


def _steps(p: int, params: Mapping[str, Any]) -> int:
    """2Σ(q_d - 1) independent; synchronized, each of the 2·D phases its longest ring's q - 1 steps."""
    qs, orders = _orders(p, params)
    if params["phases"] != "synchronized":
        return 2 * sum(q - 1 for q in qs)
    depth = max(len(o) for o in orders)
    return 2 * sum(max(qs[o[k]] - 1 for o in orders if len(o) > k) for k in range(depth))


@register(
    Kind.ALLREDUCE,
    "torus_bucket",
    source="Chan et al. 2007 (bucket algorithms by dimension); Jain & Sabharwal, ICS 2010 (one part per direction)",
    parameters=(CHUNKS, DIMS, PORTS, PHASES),
    check=check_torus(False),
    constraints=("dims (if given): product p; default: rows the largest divisor of p not above √p",),
    symmetric=lambda ranks, **params: _bucket_symmetric(ranks, **params),
    cost=Cost(
        "2Σ_d(q_d-1)α + 2(p-1)/p·nβ + (p-1)/p·nγ, q_d the torus sizes; synchronized: 2D·max_d(q_d-1)α "
        "with 2D parts (β summed over all ports: with 2D parts on a square torus, time ÷ 2D)",
        steps=lambda p, n, params: _steps(p, params),
        bytes=lambda p, n, params: 2 * (p - 1) / p * n,
        reduced=lambda p, n, params: (p - 1) / p * n,
        sent_per_rank=lambda p, n, params: 2 * (p - 1) / p * n,
    ),
)
def torus_bucket(ranks: int, *, chunks: int = 1, dims: str = "", ports: int = 0,
                 phases: str = "independent") -> Schedule:
    """Bucket all-reduce on the torus ``dims`` (row-major as torus:RxC; default ``Grid.auto``).

    The buffer is m parts of p·``chunks`` chunks; a part reduce-scatters
    along its dimensions d1, ..., dD in order (a rank keeps 1/q_d of its
    region each time, ``Grid.split``), all-reduces along dD, and all-gathers
    back along dD-1, ..., d1. Every chunk is its own transfer, so a dataflow
    execution pipelines them. ``phases="synchronized"``: phase k of every part
    starts when every part's phase k - 1 is done (module docstring).
    """
    return _bucket(ranks, chunks, dims, ports, phases, None).build()


def _bucket(p: int, k: int, dims: str, ports: int, phases: str, sources: frozenset[int] | None) -> ScheduleBuilder:
    """``torus_bucket``'s schedule, built; with ``sources``, only the transfers from those ranks (``along``)."""
    g = torus_grid(p, dims, pow2=False)
    plan = parts(g, ports)
    width = p * k
    programs = [_bucket_phases(g, j * width, width, sign, order, sources) for j, (sign, order) in enumerate(plan)]
    total = len(plan) * width
    if phases != "synchronized":
        b = ScheduleBuilder(Collective(Kind.ALLREDUCE, p, total), "torus_bucket")
        emit(b, parallel(*([step for phase in prog for step in phase] for prog in programs)))
        return b
    depth = max(len(prog) for prog in programs)
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, p, total), "torus_bucket", scratch_chunks=max(depth - 1, 0) * total)
    for i in range(depth):
        if i:  # every rank reads its whole buffer: the next phase's writes wait for this phase's
            emit(b, [[Transfer(r, r, Buf.INPUT, 0, Buf.SCRATCH, (i - 1) * total, total) for r in range(p)
                      if sources is None or r in sources]])
        emit(b, parallel(*(prog[i] for prog in programs if i < len(prog))))
    return b


def _bucket_phases(g: Grid, start: int, width: int, sign: int, order: list[int],
                   sources: frozenset[int] | None = None) -> list[Phase]:
    """One part's phases (the chunks ``start`` .. +``width``): a ring reduce-scatter along each of ``order``
    but the last, a ring all-reduce along the last, the all-gathers back (``sources``: as ``along``)."""
    layouts: list[Layout] = [((start, width),) * g.ranks]
    for d in order[:-1]:
        layouts.append(g.split(layouts[-1], d))
    out = [along(g, d, ring_reducescatter(g.dims[d], sign), lay, split=True, sources=sources)
           for d, lay in zip(order[:-1], layouts, strict=False)]
    if order:
        out.append(along(g, order[-1], ring_allreduce(g.dims[order[-1]], sign), layouts[-1], split=True,
                         sources=sources))
    out += [along(g, d, ring_allgather(g.dims[d], sign), lay, split=True, sources=sources)
            for d, lay in reversed(list(zip(order[:-1], layouts, strict=False)))]
    return out


def _bucket_symmetric(ranks: int, *, chunks: int = 1, dims: str = "", ports: int = 0,
                      phases: str = "independent") -> SymmetricForm:
    """The bucket's symmetric form: every translation of the torus (a rank's rings and the block it keeps
    move with it). A translation by g adds g_d to the digit of dimension d in each part's chunk index, which
    reads, within part j, as the mixed-radix number (c_{o_1}, ..., c_{o_D}, chunk) of its dimension order o."""
    p, k = ranks, chunks
    g = torus_grid(p, dims, pow2=False)
    plan = parts(g, ports)
    width = p * k
    total = len(plan) * width
    active = [d for d, q in enumerate(g.dims) if q > 1]
    gens = tuple(tuple(int(i == d) for i in range(g.ndim)) for d in active)
    radices = [(*(g.dims[d] for d in order), k) for _sign, order in plan]

    def chunk_map(shift: tuple[int, ...], buf: Buf, index: np.ndarray) -> np.ndarray:
        block, x = np.divmod(index, total)  # scratch: one copy of the buffer per phase boundary
        part, x = np.divmod(x, width)
        out = np.empty_like(x)
        for j, (_sign, order) in enumerate(plan):
            mine = part == j
            digits = np.stack(np.unravel_index(x[mine], radices[j]))
            for m, d in enumerate(order):
                digits[m] = (digits[m] + shift[d]) % g.dims[d]
            out[mine] = np.ravel_multi_index(tuple(digits), radices[j])
        return block * total + part * width + out

    def partial(sources: np.ndarray) -> Columns:
        return _bucket(p, k, dims, ports, phases, frozenset(int(r) for r in sources)).columns()

    depth = max(2 * len(order) - 1 for _sign, order in plan)  # phases per part, as _bucket counts them
    scratch = max(depth - 1, 0) * total if phases == "synchronized" else 0
    return SymmetricForm("torus_bucket", Collective(Kind.ALLREDUCE, p, total), g.dims, gens, partial,
                         lambda: torus_bucket(p, chunks=k, dims=dims, ports=ports, phases=phases), chunk_map,
                         scratch)
