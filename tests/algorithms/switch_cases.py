"""Schedules with switch operations written by hand, one per shape the issue names, for the lowering, the
MSCCL++ plan and the runner tests (B1's library algorithms are added where they exist)."""

from __future__ import annotations

from algorithms import registry
from algorithms.builder import ScheduleBuilder
from algorithms.errors import RegistryError
from algorithms.ir import Buf, Collective, Kind, Schedule

SWITCH_ALGORITHMS = (("allreduce", "nvls"), ("allreduce", "nvls_tree"), ("allreduce", "sharp"),
                     ("broadcast", "multicast"), ("allgather", "multicast"))
"""This issue's library algorithms (issue 22, Deliver 6), by kind and name (unlisted: they need a switch)."""


def nvls_allreduce(p: int) -> Schedule:
    """NVLS all-reduce: every rank's chunk g reduced in the switch to rank g, then multicast from g to the rest."""
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, p, p), "hand-nvls")
    with b.step():
        for g in range(p):
            b.switch_reduce("node0", list(range(p)), [g], g)
    with b.step():
        for g in range(p):
            b.multicast("node0", g, [d for d in range(p) if d != g], g)
    return b.build()


def sharp_allreduce(p: int) -> Schedule:
    """SHARP all-reduce: one in-switch reduction whose result every rank receives."""
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, p, 1), "hand-sharp")
    with b.step():
        b.switch_reduce("sw", list(range(p)), list(range(p)), 0)
    return b.build()


def multicast_broadcast(p: int, root: int = 1) -> Schedule:
    b = ScheduleBuilder(Collective(Kind.BROADCAST, p, 1, root=root % p), "hand-mcast-bcast")
    with b.step():
        b.multicast("node0", root % p, [d for d in range(p) if d != root % p], 0)
    return b.build()


def multicast_allgather(p: int) -> Schedule:
    """All-gather: each rank multicasts its input chunk into slot r of every output, its own included."""
    b = ScheduleBuilder(Collective(Kind.ALLGATHER, p, 1), "hand-mcast-ag")
    with b.step():
        for r in range(p):
            b.multicast("node0", r, list(range(p)), 0, dst_index=r, dst_buf=Buf.OUTPUT)
    return b.build()


def reducescatter_to_scratch(p: int) -> Schedule:
    """Reduce-scatter through the switch into scratch, then a local copy: a reduction to one target that is not
    at the sources' index."""
    b = ScheduleBuilder(Collective(Kind.REDUCESCATTER, p, 1), "hand-rs", scratch_chunks=1)
    with b.step():
        for g in range(p):
            b.switch_reduce("node0", list(range(p)), [g], g, dst_index=0, dst_buf=Buf.SCRATCH)
    with b.step():
        for g in range(p):
            b.copy(g, g, 0, buf=Buf.SCRATCH, dst_buf=Buf.OUTPUT)
    return b.build()


HAND = (nvls_allreduce, sharp_allreduce, multicast_broadcast, multicast_allgather, reducescatter_to_scratch)


def library(p: int, **params: int) -> list[Schedule]:
    """This issue's library algorithms that are registered and build at ``p`` ranks, for every kind they serve."""
    out = []
    for kind, name in SWITCH_ALGORITHMS:
        try:
            algorithm = registry.get(kind, name)
        except RegistryError:  # not on this branch
            continue
        out.append(algorithm.build(p, **params))
    return out


def across_nodes(p: int, **params: int) -> list[Schedule]:
    """The library's two-level algorithms with nodes of two ranks (NVLS in each, the network between)."""
    if p < 4 or p % 2:
        return []
    out = []
    for name in ("nvls_tree", "sharp"):
        try:
            algorithm = registry.get("allreduce", name)
        except RegistryError:
            continue
        out.append(algorithm.build(p, group=2, **params))
    return out


def every(p: int, **params: int) -> list[Schedule]:
    """The hand-written schedules and the library's, at ``p`` ranks (``params`` for the library's)."""
    return [f(p) for f in HAND] + library(p, **params) + across_nodes(p, **params)
