"""Runtimes: what executes a schedule decides the protocol that prices it (docs/design.md, "Protocols and
runtimes"). The one place the command line (``sim.cli.runtime``) and ``collsched validate`` ask.

- ``nccl``: NCCL's native collectives, one protocol per call, as NCCL's ring would pick it by size on a GPU
  preset (``sim.machine.nccl.choose``; elsewhere Simple unless forced);
- ``msccl``: the protocol of the MSCCL-IR file (``proto=``), Simple for any other schedule;
- ``collsched``: the runner over NCCL point-to-point: a message up to ``P2P_LL_THRESHOLD`` bytes goes with
  LL, larger with Simple, no per-call base latency; the runner's host cost per message is ``step_cost``;
- ``plain``: the links as the topology gives them (the default except on GPU presets, where ``nccl`` is).
"""

from __future__ import annotations

from typing import Any

from algorithms.ir import Kind, Schedule
from sim.engine.options import EngineOptions
from sim.engine.protocols import (
    LL128_DATA_FRACTION,
    LL_DATA_FRACTION,
    P2P_LL_THRESHOLD,
    ProtocolModel,
    apply,
    parse_protocol,
)
from sim.topology.gpus import node_size, system_of
from sim.topology.graph import Topology

__all__ = ["RUNTIMES", "default_runtime", "largest_message", "runtime_model", "simulate_under"]

RUNTIMES = ("nccl", "msccl", "collsched", "plain")
_NCCL_KINDS = (Kind.ALLREDUCE, Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.BROADCAST, Kind.REDUCE)


def default_runtime(topology: Topology) -> str:
    """``nccl`` on a GPU preset, ``plain`` elsewhere."""
    return "nccl" if system_of(topology) is not None else "plain"


def largest_message(schedule: Schedule, size: float) -> float:
    """Bytes of the schedule's largest transfer at ``size`` (nccl-tests convention)."""
    from sim import units

    coll = schedule.collective
    piece = size if units.sized_buffer(coll.kind) == "buffer" else size / coll.ranks
    cols = schedule.columns()
    most = int(cols.count.max()) if len(cols.count) else 0
    return most * piece / coll.chunks


def _generic(protocol: str, nodes: int) -> ProtocolModel:
    """NCCL's ring latencies of ``protocol``, and its line format's share of data as the bandwidth factor."""
    factor = {"LL": LL_DATA_FRACTION, "LL128": LL128_DATA_FRACTION, "Simple": 1.0}[protocol]
    return ProtocolModel.nccl(protocol, "ring", nodes=nodes, nvlink_factor=factor, net_factor=factor)


def runtime_model(runtime: str, schedule: Schedule, topology: Topology, size: float, *,
                  protocol: str | None = None, msccl_proto: str | None = None) -> ProtocolModel | None:
    """The protocol model ``runtime`` prices ``schedule`` with at ``size``; None for ``plain`` unforced.
    ``ValueError`` naming the problem for an unknown runtime or protocol."""
    if runtime not in RUNTIMES:
        raise ValueError(f"runtime {runtime!r}: expected one of {', '.join(RUNTIMES)}")
    forced = parse_protocol(protocol) if protocol is not None else None
    if runtime == "plain" and forced is None:
        return None
    gpn = node_size(topology) or topology.ranks
    nodes = max(1, topology.ranks // gpn)
    if runtime == "nccl":
        kind = schedule.collective.kind
        if system_of(topology) is not None and kind in _NCCL_KINDS:
            from sim.machine.nccl import choose, protocol_model

            return protocol_model(choose(kind, topology, size, algo="ring", proto=forced), kind, topology)
        return _generic(forced or "Simple", nodes)
    if runtime == "msccl":
        return _generic(forced or parse_protocol(msccl_proto or "Simple"), nodes)
    if runtime == "collsched":
        proto = forced or ("LL" if largest_message(schedule, size) <= P2P_LL_THRESHOLD else "Simple")
        m = _generic(proto, nodes)
        return ProtocolModel(m.protocol, m.algorithm, 0.0, m.nvlink_latency, m.net_latency, m.nvlink_factor,
                             m.net_factor)
    assert forced is not None
    return _generic(forced, nodes)


def simulate_under(runtime: str, schedule: Schedule, topology: Topology, size: float,
                   options: EngineOptions | None = None, *, protocol: str | None = None,
                   msccl_proto: str | None = None, step_cost: float = 0.0,
                   **fields: Any) -> tuple[Any, ProtocolModel | None]:
    """``sim.engine.reference.simulate`` of ``schedule`` with ``options`` priced by ``runtime``: the result and
    the protocol model (None: the links as given). ``options.launch`` None (the default here): the protocol's
    base latency (plain: 0); ``step_cost`` (collsched) adds to the overhead. Keyword ``fields`` replace the
    options' own (``EngineOptions.of``)."""
    from sim.engine.reference import simulate

    options = EngineOptions.of(options if options is not None else EngineOptions(launch=None), **fields)
    model = runtime_model(runtime, schedule, topology, size, protocol=protocol, msccl_proto=msccl_proto)
    if runtime == "collsched" and step_cost:
        options = options.replace(overhead=options.overhead + step_cost)
    if model is None:
        return simulate(schedule, topology, size, options), None
    if options.launch is None:
        options = options.replace(launch=model.launch)
    return simulate(schedule, apply(topology, model), size, options), model
