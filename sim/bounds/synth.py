"""The topology-aware synthesizer as a registered algorithm: ``-a synth --param topology=SPEC``.

The registry imports this module with its plugins (pyproject.toml declares it in the entry-point group
``collsched.algorithms``: algorithms/ never imports sim/); it
registers with ``listed=False``, so ``collsched list`` and ``registry.algorithms()`` leave it
out: it has no closed-form cost, and each build runs a packing (``sim.bounds.packing``). The topology is
a SPEC as ``--topology`` takes (``ring:8``, ``cluster:2x8``, a topology file); empty means a
single switch of the requested ranks. Building imports ``sim`` (numpy, networkx), never torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from algorithms.errors import RegistryError
from algorithms.ir import ROOTED_KINDS, Kind, Schedule
from algorithms.registry import CHUNKS, Parameter, register

__all__ = ["TOPOLOGY", "build"]

TOPOLOGY = Parameter("topology", "", "topology SPEC the schedule is packed onto (default: one switch)")
SOURCE = "collsched sim.bounds.packing: spanning-tree packing after ForestColl (arXiv 2402.06787), greedy, pipelined"


def build(kind: Kind, ranks: int, *, chunks: int = 1, root: int | None = None, topology: str = "") -> Schedule:
    """``sim.bounds.packing.synthesize`` on the named topology, which must have ``ranks`` ranks."""
    from sim.bounds.packing import synthesize
    from sim.topology import from_spec, single_switch

    topo = from_spec(topology) if topology else single_switch(ranks)
    if topo.ranks != ranks:
        raise RegistryError(f"{kind}/synth: topology {topology!r} has {topo.ranks} ranks, not {ranks}")
    return synthesize(kind, topo, root=root if kind in ROOTED_KINDS else None, chunks=chunks)


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
    @register(kind, "synth", source=SOURCE, parameters=(CHUNKS, TOPOLOGY), listed=False, check=_check,
              constraints=("topology (if given) has exactly p ranks",))
    def _synth(ranks: int, *, chunks: int = 1, root: int | None = None, topology: str = "") -> Schedule:
        return build(kind, ranks, chunks=chunks, root=root, topology=topology)


for _kind in (Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLREDUCE, Kind.BROADCAST, Kind.REDUCE):
    _register(_kind)
