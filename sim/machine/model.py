"""Machine models: a topology plus the engine parameters that make simulated times match a machine.

A *machine file* is a ``collsched.topology/1`` document with two optional
keys (docs/design.md, "Machine model and calibration"):

- ``"engine"``: the engine parameters, ``{"overhead": s, "reduce_bandwidth":
  B/s or null, "launch": s, "message_cpu": s}`` (every key optional; read into
  ``sim.engine.options.EngineOptions``, which checks them, here called ``EngineParams``);
- ``"model"``: a free-form object recording how the figures were obtained
  (``collsched calibrate`` writes its measurements, fits and residuals there).

It loads wherever a topology file does (the engine keys are ignored there),
and ``collsched simulate --topology machine.json`` (and ``sweep``) take the
engine parameters from it unless ``--overhead``, ``--reduce-bw`` or
``--launch`` say otherwise. ``engine_for(spec)`` gives the parameters of a
SPEC: a machine file's, a preset's (``dgx-h100``: NCCL's base latency), or
the defaults (all zero: the engine as without a machine model).

``host(p, ...)`` is the topology of one host whose ranks talk through the
operating system (gloo over loopback): every rank sends through its own link
to a switch ``"tx"`` and receives through its own link from a switch
``"rx"``; the link ``tx -> rx`` carried by every message is the host-wide cap
(cores or memory bandwidth shared by all ranks).

This module imports no torch.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from algorithms.ir import Schedule
from sim.engine.options import ENGINE_KEYS, EngineOptions
from sim.topology.graph import Topology, TopologyError

__all__ = ["ENGINE_KEYS", "PRESET_ENGINES", "RUNNER_IN_FLIGHT", "EngineParams", "Machine", "engine_for", "host", "load",
           "save", "to_dict"]

NCCL_RING_SIMPLE_BASE_LATENCY = 8.4e-6
"""NCCL's base latency of the ring algorithm with the Simple protocol: ``baseLat[RING][SIMPLE] = 8.4`` us in
src/graph/tuning.cc (the per-step part, ``hwLat[NVLINK][RING][SIMPLE] = 3.4`` us, is the dgx-h100 preset's
NVLink route latency, ``sim.topology.builders.DGX_NVLINK_LATENCY``)."""


EngineParams = EngineOptions
"""A machine's engine parameters are ``EngineOptions``' machine fields (``ENGINE_KEYS``), held in that one value:
``from_dict``/``to_dict`` read and write a machine file's ``"engine"`` section (the name stays for callers)."""


PRESET_ENGINES: Mapping[str, EngineOptions] = {
    "dgx-h100": EngineOptions(launch=NCCL_RING_SIMPLE_BASE_LATENCY),
}
"""Engine parameters of the topology presets that carry some (by SPEC prefix)."""


RUNNER_IN_FLIGHT = 0
"""The send order (``EngineOptions.in_flight``) a calibrated machine's runs take: none, as the runner's executor on
gloo (the dataflow one, ``runners.execution.runner.AUTO_CPU`` being empty) posts every transfer as soon as its
dependencies complete; the calibration fits, ``predict`` and ``tune`` all simulate so."""


@dataclass(frozen=True)
class Machine:
    """A topology, its engine parameters and the record of how they were obtained."""

    topology: Topology
    engine: EngineOptions = field(default_factory=EngineOptions)
    model: Mapping[str, Any] = field(default_factory=dict)

    def simulate(self, schedule: Schedule, size: float, *, mode: str = "dataflow") -> Any:
        """``sim.engine.reference.simulate`` of ``schedule`` on this machine (a ``SimResult``), in the runner's send
        order (``RUNNER_IN_FLIGHT``)."""
        from sim.engine.reference import simulate

        return simulate(schedule, self.topology, size, self.engine.replace(mode=mode, in_flight=RUNNER_IN_FLIGHT))


def to_dict(machine: Machine) -> dict[str, Any]:
    """The machine file's document: the topology's, plus ``engine`` and ``model``."""
    from sim.topology.files import to_dict as topology_dict

    doc = topology_dict(machine.topology)
    doc["engine"] = machine.engine.to_dict()
    if machine.model:
        doc["model"] = dict(machine.model)
    return doc


def save(machine: Machine, path: str | os.PathLike[str]) -> None:
    """Write a machine file (JSON; ``algorithms.disk.write_output``)."""
    from algorithms.disk import write_output

    write_output(path, json.dumps(to_dict(machine), indent=1) + "\n", TopologyError)


def from_dict(doc: object) -> Machine:
    """A machine from a document: the topology, and ``engine``/``model`` when present."""
    from sim.topology.files import from_dict as topology_from_dict

    topology = topology_from_dict(doc)
    assert isinstance(doc, dict)  # topology_from_dict checked it
    engine = EngineOptions.from_dict(doc["engine"], "topology.engine") if "engine" in doc else EngineOptions()
    model = doc.get("model", {})
    return Machine(topology, engine, model)


def load(path: str | os.PathLike[str]) -> Machine:
    """Load a machine file; a plain topology file is a machine with the default engine parameters."""
    from sim.topology.files import load as load_topology
    from sim.topology.files import read_text

    if str(path).lower().endswith((".graphml", ".xml")):
        return Machine(load_topology(path))
    text = read_text(path)
    try:
        return from_dict(json.loads(text))
    except json.JSONDecodeError as e:
        raise TopologyError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    except TopologyError as e:
        raise TopologyError(f"{path}: {e}") from None


def engine_for(spec: str) -> EngineOptions:
    """The engine parameters a topology SPEC carries: a machine file's, a preset's, or the defaults."""
    m = re.fullmatch(r"([a-z][a-z0-9-]*):(.+)", spec.strip())
    if m and m.group(1) in PRESET_ENGINES:
        return PRESET_ENGINES[m.group(1)]
    if m is None and os.path.isfile(spec) and not spec.lower().endswith((".graphml", ".xml")):
        return load(spec).engine
    return EngineOptions()


def host(p: int, *, bandwidth: float, latency: float, host_bandwidth: float | None = None,
         name: str | None = None) -> Topology:
    """One host's ranks talking through its operating system (module docstring).

    Rank r -> ``"tx"`` and ``"rx"`` -> rank r run at ``bandwidth`` (one
    rank's own send and receive rate); ``"tx" -> "rx"`` runs at
    ``host_bandwidth`` (None: as much as every rank together, no cap) and
    carries the whole ``latency`` of a message (the other links have none).
    """
    if isinstance(p, bool) or not isinstance(p, int) or p < 1:
        raise TopologyError(f"host: ranks must be an integer >= 1, got {p!r}")
    cap = host_bandwidth if host_bandwidth is not None else bandwidth * p
    g = nx.DiGraph()
    g.add_nodes_from(range(p))
    if p > 1:
        g.add_node("tx")
        g.add_node("rx")
        for r in range(p):
            g.add_edge(r, "tx", bandwidth=bandwidth, latency=0.0)
            g.add_edge("rx", r, bandwidth=bandwidth, latency=0.0)
        g.add_edge("tx", "rx", bandwidth=cap, latency=latency)
    return Topology(g, name or f"host:{p}")
