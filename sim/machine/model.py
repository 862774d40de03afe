"""Machine models: a topology plus the engine parameters that make simulated times match a machine.

A *machine file* is a ``collsched.topology/1`` document with two optional
keys (docs/design.md, "Machine model and calibration"):

- ``"engine"``: the engine parameters, ``{"overhead": s, "reduce_bandwidth":
  B/s or null, "launch": s, "message_cpu": s}`` (every key optional; see
  ``EngineParams``);
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
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx

from algorithms.ir import Schedule
from sim.topology.graph import Topology, TopologyError

__all__ = ["ENGINE_KEYS", "PRESET_ENGINES", "EngineParams", "Machine", "engine_for", "host", "load", "save",
           "to_dict"]

ENGINE_KEYS = ("overhead", "reduce_bandwidth", "launch", "message_cpu")

NCCL_RING_SIMPLE_BASE_LATENCY = 8.4e-6
"""NCCL's base latency of the ring algorithm with the Simple protocol: ``baseLat[RING][SIMPLE] = 8.4`` us in
src/graph/tuning.cc (the per-step part, ``hwLat[NVLINK][RING][SIMPLE] = 3.4`` us, is the dgx-h100 preset's
NVLink route latency, ``sim.topology.builders.DGX_NVLINK_LATENCY``)."""


@dataclass(frozen=True)
class EngineParams:
    """The engine parameters of a machine (``sim.engine.reference.simulate``'s keyword arguments of the same names).

    ``overhead``: seconds per network message at the endpoints; ``reduce_bandwidth``: bytes/s a rank
    combines at (None: reductions are free); ``launch``: seconds per collective before its first transfer;
    ``message_cpu``: seconds of a rank's processor per message it sends or receives, one at a time.
    The defaults leave the engine as it is without a machine model.
    """

    overhead: float = 0.0
    reduce_bandwidth: float | None = None
    launch: float = 0.0
    message_cpu: float = 0.0

    def __post_init__(self) -> None:
        for key in ("overhead", "launch", "message_cpu"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < math.inf:
                raise TopologyError(f"engine.{key}: must be a finite number of seconds >= 0, got {v!r}")
        rb = self.reduce_bandwidth
        if rb is not None and (isinstance(rb, bool) or not isinstance(rb, int | float) or not 0 < rb < math.inf):
            raise TopologyError(f"engine.reduce_bandwidth: must be a positive number of bytes/s or null, got {rb!r}")

    def options(self) -> dict[str, Any]:
        """Keyword arguments for ``sim.engine.reference.simulate``."""
        return {"overhead": float(self.overhead), "reduce_bandwidth": self.reduce_bandwidth,
                "launch": float(self.launch), "message_cpu": float(self.message_cpu)}

    def to_dict(self) -> dict[str, Any]:
        return {"overhead": self.overhead, "reduce_bandwidth": self.reduce_bandwidth, "launch": self.launch,
                "message_cpu": self.message_cpu}

    @classmethod
    def from_dict(cls, doc: object, where: str = "engine") -> EngineParams:
        """Strictly checked: an object with only ``ENGINE_KEYS``, each optional."""
        if not isinstance(doc, dict):
            raise TopologyError(f"{where}: must be an object with keys {', '.join(ENGINE_KEYS)}")
        extra = sorted(set(doc) - set(ENGINE_KEYS))
        if extra:
            raise TopologyError(f"{where}: unknown field {extra[0]!r} (known: {', '.join(ENGINE_KEYS)})")
        try:
            return cls(**doc)
        except TopologyError as e:
            raise TopologyError(str(e).replace("engine.", f"{where}.", 1)) from None


PRESET_ENGINES: Mapping[str, EngineParams] = {
    "dgx-h100": EngineParams(launch=NCCL_RING_SIMPLE_BASE_LATENCY),
}
"""Engine parameters of the topology presets that carry some (by SPEC prefix)."""


@dataclass(frozen=True)
class Machine:
    """A topology, its engine parameters and the record of how they were obtained."""

    topology: Topology
    engine: EngineParams = EngineParams()
    model: Mapping[str, Any] = field(default_factory=dict)

    def simulate(self, schedule: Schedule, size: float, *, mode: str = "dataflow") -> Any:
        """``sim.engine.reference.simulate`` of ``schedule`` on this machine (a ``SimResult``)."""
        from sim.engine.reference import simulate

        return simulate(schedule, self.topology, size, mode=mode, **self.engine.options())


def to_dict(machine: Machine) -> dict[str, Any]:
    """The machine file's document: the topology's, plus ``engine`` and ``model``."""
    from sim.topology.files import to_dict as topology_dict

    doc = topology_dict(machine.topology)
    doc["engine"] = machine.engine.to_dict()
    if machine.model:
        doc["model"] = dict(machine.model)
    return doc


def save(machine: Machine, path: str | os.PathLike[str]) -> None:
    """Write a machine file (JSON)."""
    Path(path).write_text(json.dumps(to_dict(machine), indent=1) + "\n", encoding="utf-8")


def from_dict(doc: object) -> Machine:
    """A machine from a document: the topology, and ``engine``/``model`` when present."""
    from sim.topology.files import from_dict as topology_from_dict

    topology = topology_from_dict(doc)
    assert isinstance(doc, dict)  # topology_from_dict checked it
    engine = EngineParams.from_dict(doc["engine"], "topology.engine") if "engine" in doc else EngineParams()
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


def engine_for(spec: str) -> EngineParams:
    """The engine parameters a topology SPEC carries: a machine file's, a preset's, or the defaults."""
    m = re.fullmatch(r"([a-z][a-z0-9-]*):(.+)", spec.strip())
    if m and m.group(1) in PRESET_ENGINES:
        return PRESET_ENGINES[m.group(1)]
    if m is None and os.path.isfile(spec) and not spec.lower().endswith((".graphml", ".xml")):
        return load(spec).engine
    return EngineParams()


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
