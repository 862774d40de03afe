"""NCCL's point-to-point: all-to-all and send/recv as NCCL (and nccl-tests' alltoall_perf, sendrecv_perf) run them.

nccl-tests' all-to-all is one group of ``ncclSend`` and ``ncclRecv`` to and from every peer, its send/recv a send
to rank + 1 and a receive from rank - 1 (src/alltoall.cu, src/sendrecv.cu). NCCL schedules the group's
operations on its point-to-point channels all at once, a few channels per peer (src/enqueue.cc; ``NCCL_NCHANNELS_
PER_NET_PEER`` 2 across nodes, src/transport/net.cc), so every pair's transfer runs concurrently: the ``direct``
schedule of all-to-all (all-to-allv with a shift matrix for send/recv). Its protocol is LL for a message of up to
``NCCL_P2P_LL_THRESHOLD`` (16 KiB, src/enqueue.cc), Simple above; point-to-point never uses LL128. Latencies are
the ring's of that protocol (``baseLat`` at launch, ``hwLat`` per step by link, the fabric's reported latency per
network step), as NCCL's tuning has no model of point-to-point to take them from.

PXN (PCI x NVLink, src/graph/paths.cc, ``NCCL_PXN_DISABLE`` 0 by default): a message to a GPU of another node
on another rail first crosses NVLink to the local GPU on the destination's rail and leaves through that GPU's
NIC, so it meets the destination on its own rail leaf instead of crossing the spine. ``pxn_routes`` gives those
routes; ``simulate_p2p(pxn=False)`` keeps the preset's (through the spine).
"""

from __future__ import annotations

import math
from typing import Any

from algorithms import registry
from algorithms.ir import Kind
from sim.engine.options import EngineOptions
from sim.engine.protocols import LL_DATA_FRACTION, P2P_LL_THRESHOLD, ProtocolModel, apply
from sim.machine.nccl_tuning import NcclChoice, NcclRun, graphs, latency_factors, topology_version
from sim.machine.nccl_versions import version
from sim.topology.gpus import node_size, system_of
from sim.topology.graph import Node, Topology

__all__ = ["CHANNELS_PER_PEER", "P2P_KINDS", "pxn_routes", "simulate_p2p"]

P2P_KINDS = ("alltoall", "sendrecv")
"""What ``simulate_nccl`` runs as point-to-point."""
CHANNELS_PER_PEER = 2
"""NCCL's channels per remote peer (src/transport/net.cc ``NCCL_NCHANNELS_PER_NET_PEER`` default 2)."""


def pxn_routes(topology: Topology) -> dict[tuple[int, int], tuple[Node, ...]]:
    """PXN's route for every pair of GPUs on different nodes and rails of a GPU preset (module docstring)."""
    gpn = node_size(topology)
    if gpn is None:
        return {}
    nodes = topology.ranks // gpn
    out: dict[tuple[int, int], tuple[Node, ...]] = {}
    for s in range(topology.ranks):
        for d in range(topology.ranks):
            ns, nd, gd = s // gpn, d // gpn, d % gpn
            if ns == nd or s % gpn == gd or nodes < 2:
                continue
            relay = ns * gpn + gd
            out[(s, d)] = (s, f"node{ns}", relay, f"rail{gd}", d)
    return out


def _schedule(kind: str, ranks: int) -> Any:
    if kind == "sendrecv":
        matrix = tuple(tuple(1 if j == (i + 1) % ranks else 0 for j in range(ranks)) for i in range(ranks))
        return registry.build(Kind.ALLTOALLV, "direct", ranks, matrix=matrix)
    return registry.build(Kind.ALLTOALL, "direct", ranks)


def simulate_p2p(kind: str, topology: Topology, size: float, *, options: EngineOptions | None = None,
                 nccl_version: str | None = None, pxn: bool = True) -> Any:
    """An ``NcclRun`` of nccl-tests' ``kind`` (``alltoall`` or ``sendrecv``) at ``size`` bytes per rank's input
    on a GPU preset (module docstring)."""
    from sim.engine.reference import simulate

    system = system_of(topology)
    gpn = node_size(topology)
    if system is None or gpn is None:
        raise ValueError(f"{topology.name}: the NCCL model needs a GPU preset (dgx-h100:N, hgx-h200:N, ...)")
    v = version(nccl_version or topology_version(topology))
    p = topology.ranks
    nodes = p // gpn
    per_peer = size / p if kind == "alltoall" else size
    proto = "LL" if per_peer <= P2P_LL_THRESHOLD else "Simple"
    g = graphs(system, nodes, topology)
    f = latency_factors(topology)[proto]
    intra = v.hw_latency["nvlink"]["ring"][proto]
    inter = v.hw_latency["net"]["ring"][proto] + g.latency_inter * (2 if proto == "Simple" else 1)
    launch = v.base_latency["ring"][proto]
    factor = LL_DATA_FRACTION if proto == "LL" else 1.0
    model = ProtocolModel(proto, "ring", launch * f * 1e-6, intra / 2 * f * 1e-6, inter / 2 * f * 1e-6, factor,
                          factor)
    linked = apply(topology, model)
    notes = [f"point-to-point ({kind}): every peer at once over NCCL's p2p channels, {proto} "
             f"(LL up to {P2P_LL_THRESHOLD} B per message)"]
    if pxn and nodes > 1:
        linked = type(linked)(linked.graph, linked.name, {**dict(linked.routes), **pxn_routes(topology)})
        notes.append("PXN: a message to another node's GPU on another rail crosses NVLink to the local GPU on that "
                     "rail and leaves through its NIC")
    opts = EngineOptions.of(options if options is not None else EngineOptions(launch=None))
    if opts.launch is None:
        opts = opts.replace(launch=model.launch)
    result = simulate(_schedule(kind, p), linked, size, opts)
    # NCCL's tuning prices no point-to-point: the choice records the protocol and latency, no modelled time.
    choice = NcclChoice("p2p", proto, (launch + (intra if nodes == 1 else inter)) * f, math.nan, math.nan,
                        CHANNELS_PER_PEER, v.name)
    return NcclRun(choice, choice, "direct", model, result, notes)
