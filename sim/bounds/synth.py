"""The topology-aware synthesizer as a registered algorithm: ``-a synth --param topology=SPEC``.

The registry imports this module with its plugins (pyproject.toml declares it in the entry-point group
``collsched.algorithms``: algorithms/ never imports sim/); it
registers with ``listed=False``, so ``collsched list`` and ``registry.algorithms()`` leave it
out: it has no closed-form cost, and each build runs a packing (``sim.bounds.packing``). Alltoall and alltoallv
are served by the LP-flow synthesis (``sim.bounds.flows``), alltoallv with the matrix the registry passes. The
topology is a SPEC as ``--topology`` takes (``ring:8``, ``cluster:2x8``, a topology file); empty means a
single switch of the requested ranks. Building imports ``sim`` (numpy, networkx), never torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from algorithms.errors import RegistryError
from algorithms.ir import ROOTED_KINDS, Kind, Schedule
from algorithms.registry import CHUNKS, Parameter, register

__all__ = ["SYNTH_CHUNKS", "TOPOLOGY", "build", "build_alltoall"]

TOPOLOGY = Parameter("topology", "", "topology SPEC the schedule is packed onto (default: one switch)")
SYNTH_CHUNKS = Parameter("chunks", 0, "chunks per root's piece; 0 (the default): chosen by the world size, as "
                         "`collsched synthesize` chooses them (sim.bounds.packing.default_chunks), which lets the "
                         "optimal packing serve all-gather and reduce-scatter", minimum=0)
SOURCE = "collsched sim.bounds.packing: spanning-tree packing after ForestColl (arXiv 2402.06787), greedy, pipelined"
FLOW_SOURCE = ("collsched sim.bounds.flows: max-concurrent-flow LP (Shahrokhi & Matula 1990) routes and rates, "
               "decomposed into paths, pipelined")


def build(kind: Kind, ranks: int, *, chunks: int = 0, root: int | None = None, topology: str = "") -> Schedule:
    """``sim.bounds.packing.synthesize`` on the named topology, which must have ``ranks`` ranks; ``chunks`` 0:
    the synthesizer's own choice, as ``collsched synthesize`` makes it without ``--chunks``."""
    from sim.bounds.packing import synthesize
    from sim.topology import from_spec, single_switch

    topo = from_spec(topology) if topology else single_switch(ranks)
    if topo.ranks != ranks:
        raise RegistryError(f"{kind}/synth: topology {topology!r} has {topo.ranks} ranks, not {ranks}")
    return synthesize(kind, topo, root=root if kind in ROOTED_KINDS else None, chunks=chunks or None)


def build_alltoall(kind: Kind, ranks: int, *, chunks: int = 1, matrix: object = None, topology: str = "") -> Schedule:
    """``sim.bounds.flows.synthesize_alltoall`` on the named topology: alltoall with ``chunks`` a block, alltoallv
    of ``matrix`` (without one, the uniform matrix of ``chunks`` a pair)."""
    from sim.bounds.flows import synthesize_alltoall
    from sim.topology import from_spec, single_switch

    topo = from_spec(topology) if topology else single_switch(ranks)
    if topo.ranks != ranks:
        raise RegistryError(f"{kind}/synth: topology {topology!r} has {topo.ranks} ranks, not {ranks}")
    if kind is Kind.ALLTOALL:
        return synthesize_alltoall(topo, chunks=chunks)
    from algorithms.library.alltoallv import collective_for

    return synthesize_alltoall(topo, matrix=collective_for(ranks, matrix, chunks).traffic())


def _check(ranks: int, params: Mapping[str, Any]) -> str | None:
    """Why the named topology cannot serve ``ranks`` (unreadable, or another world size), or None."""
    spec = params.get("topology", "")
    if not spec:
        return None
    from algorithms.errors import CollschedError
    from sim.topology import from_spec

    try:
        topo = from_spec(spec)
    except CollschedError as err:
        return str(err)
    if topo.ranks != ranks:
        return f"topology {spec!r} has {topo.ranks} ranks, not {ranks}"
    return None


def _register(kind: Kind) -> None:
    @register(kind, "synth", source=SOURCE, parameters=(SYNTH_CHUNKS, TOPOLOGY), listed=False, check=_check,
              constraints=("topology (if given) has exactly p ranks",))
    def _synth(ranks: int, *, chunks: int = 0, root: int | None = None, topology: str = "") -> Schedule:
        return build(kind, ranks, chunks=chunks, root=root, topology=topology)


for _kind in (Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLREDUCE, Kind.BROADCAST, Kind.REDUCE):
    _register(_kind)


@register(Kind.ALLTOALL, "synth", source=FLOW_SOURCE, parameters=(CHUNKS, TOPOLOGY), listed=False, check=_check,
          constraints=("topology (if given) has exactly p ranks",))
def _synth_alltoall(ranks: int, *, chunks: int = 1, topology: str = "") -> Schedule:
    return build_alltoall(Kind.ALLTOALL, ranks, chunks=chunks, topology=topology)


@register(Kind.ALLTOALLV, "synth", source=FLOW_SOURCE, parameters=(CHUNKS, TOPOLOGY), listed=False, check=_check,
          constraints=("topology (if given) has exactly p ranks",))
def _synth_alltoallv(ranks: int, *, chunks: int = 1, matrix: object = None, topology: str = "") -> Schedule:
    return build_alltoall(Kind.ALLTOALLV, ranks, chunks=chunks, matrix=matrix, topology=topology)
