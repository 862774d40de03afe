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
"""

from __future__ import annotations

from algorithms.builder import ScheduleBuilder
from algorithms.ir import Collective, Kind, Schedule
from algorithms.library.compose import (
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
from algorithms.registry import CHUNKS, Cost, register

__all__ = ["torus_bucket"]


def _steps(p: int, dims: str) -> int:
    return 2 * sum(q - 1 for q in torus_grid(p, dims, pow2=False).dims)


@register(
    Kind.ALLREDUCE,
    "torus_bucket",
    source="Chan et al. 2007 (bucket algorithms by dimension); Jain & Sabharwal, ICS 2010 (one part per direction)",
    parameters=(CHUNKS, DIMS, PORTS),
    check=check_torus(False),
    constraints=("dims (if given): product p; default: rows the largest divisor of p not above √p",),
    cost=Cost(
        "2Σ_d(q_d-1)α + 2(p-1)/p·nβ + (p-1)/p·nγ, q_d the torus sizes "
        "(β summed over all ports: with 2D parts on a square torus, time ÷ 2D)",
        steps=lambda p, n, params: _steps(p, str(params["dims"])),
        bytes=lambda p, n, params: 2 * (p - 1) / p * n,
        reduced=lambda p, n, params: (p - 1) / p * n,
        sent_per_rank=lambda p, n, params: 2 * (p - 1) / p * n,
    ),
)
def torus_bucket(ranks: int, *, chunks: int = 1, dims: str = "", ports: int = 0) -> Schedule:
    """Bucket all-reduce on the torus ``dims`` (row-major as torus:RxC; default ``Grid.auto``).

    The buffer is m parts of p·``chunks`` chunks; a part reduce-scatters
    along its dimensions d1, ..., dD in order (a rank keeps 1/q_d of its
    region each time, ``Grid.split``), all-reduces along dD, and all-gathers
    back along dD-1, ..., d1. Every chunk is its own transfer, so a dataflow
    execution pipelines them.
    """
    p, k = ranks, chunks
    g = torus_grid(p, dims, pow2=False)
    plan = parts(g, ports)
    width = p * k
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, p, len(plan) * width), "torus_bucket")
    programs: list[Phase] = []
    for j, (sign, order) in enumerate(plan):
        layouts: list[Layout] = [((j * width, width),) * p]
        for d in order[:-1]:
            layouts.append(g.split(layouts[-1], d))
        prog: Phase = []
        for d, lay in zip(order[:-1], layouts, strict=False):
            prog += along(g, d, ring_reducescatter(g.dims[d], sign), lay, split=True)
        if order:
            prog += along(g, order[-1], ring_allreduce(g.dims[order[-1]], sign), layouts[-1], split=True)
        for d, lay in reversed(list(zip(order[:-1], layouts, strict=False))):
            prog += along(g, d, ring_allgather(g.dims[d], sign), lay, split=True)
        programs.append(prog)
    emit(b, parallel(*programs))
    return b.build()
