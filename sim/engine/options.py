"""The engine's options: one frozen value, checked in one place, that the command line builds once and the
engines take whole (docs/design.md, "The simulator").

``EngineOptions`` is everything ``sim.engine.reference.simulate`` runs with besides the schedule, the topology
and the size: the ``mode``, the machine's costs (``overhead``, ``reduce_bandwidth``, ``launch``,
``message_cpu``: the fields of a machine file's ``"engine"`` section, ``ENGINE_KEYS``), the ``faults``, the
``progress`` bar, the ``engine`` and dataflow's send order (``in_flight``). Its constructor checks every field
and raises ``SimulationError`` naming it; ``replace`` derives another value and ``of`` turns the keyword form of
the Python API into one, both through the constructor; ``from_dict`` reads a machine file's section
(``TopologyError``, naming the field there).

This module imports no numpy, simpy or networkx.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from algorithms.errors import CollschedError
from sim.topology.errors import TopologyError

if TYPE_CHECKING:
    from sim.topology import Link, Topology

__all__ = ["ENGINES", "ENGINE_KEYS", "MODES", "EngineOptions", "Faults", "SimulationError"]

MODES: tuple[str, ...] = ("dataflow", "lockstep")
ENGINES: tuple[str, ...] = ("auto", "simpy", "fast")
"""``simulate``'s engines: simpy (the reference, an event per transfer phase), fast (``sim.engine.fast``,
vectorised), auto (fast whenever it computes exactly what simpy would: every run without ``message_cpu``)."""
ENGINE_KEYS: tuple[str, ...] = ("overhead", "reduce_bandwidth", "launch", "message_cpu")
"""The fields a machine has (a machine file's ``"engine"`` section, ``sim.machine.model``); the others say how
a run is driven."""


class SimulationError(CollschedError, ValueError):
    """Simulation options that do not fit the schedule or topology; the message names the option."""


@dataclass(frozen=True)
class Faults:
    """Faults injected into a run.

    ``down``: cables (u, v) taken out, both directions; messages are
    rerouted, or ``TopologyError`` when a rank becomes unreachable.
    ``degraded``: cable (u, v) -> factor of its bandwidth that remains (0 < f).
    ``stragglers``: rank -> extra seconds added to every message it sends or receives.
    """

    down: tuple[Link, ...] = ()
    degraded: Mapping[Link, float] = field(default_factory=dict)
    stragglers: Mapping[int, float] = field(default_factory=dict)

    def apply(self, topology: Topology) -> Topology:
        """The topology with the link faults applied (stragglers are the engine's concern)."""
        for u, v in self.down:
            topology = topology.with_link_down(u, v)
        for (u, v), factor in self.degraded.items():
            topology = topology.with_degraded_link(u, v, factor)
        for r, delay in self.stragglers.items():
            if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < topology.ranks:
                raise SimulationError(f"straggler rank {r!r} out of range for {topology.ranks} ranks")
            if isinstance(delay, bool) or not isinstance(delay, int | float) or not 0 <= delay < math.inf:
                raise SimulationError(f"straggler rank {r}: delay must be a finite number >= 0, got {delay!r}")
        return topology


def _number(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float)


@dataclass(frozen=True)
class EngineOptions:
    """How a run is simulated (module docstring); frozen, and checked when made.

    ``mode``: ``dataflow`` (a transfer starts when its dependencies are done) or ``lockstep`` (a step starts
    when the previous one is done), ``MODES``.
    ``overhead``: seconds per network message at the endpoints.
    ``reduce_bandwidth``: bytes/s a rank combines at (None: reductions are free).
    ``launch``: seconds per collective before its first transfer may start (a runtime's fixed cost per call,
    such as NCCL's base latency); None: the base latency of the protocol that prices the run
    (``sim.machine.runtime``, ``sim.machine.nccl``), none on plain links.
    ``message_cpu``: seconds of a rank's processor per network message it sends or receives, one message at
    a time per rank (a host-driven runtime posting and completing each message).
    ``faults``: links down or degraded, stragglers (``Faults``).
    ``progress``: show a tqdm bar on stderr for long runs.
    ``engine``: ``simpy``, ``fast`` or ``auto`` (``ENGINES``); fast does not model ``message_cpu``.
    ``in_flight``: dataflow's send order (``sim.engine.ports``): each rank's port issues its messages in
    schedule order, with at most this many of its steps in flight (1: a blocking send per step, as MPI's
    collectives; 0, ``IN_FLIGHT_ALL``: no queue, every ready transfer starts at once and shares the port).
    Lockstep ignores it.
    The defaults leave the engine as it is without a machine model. Numbers are held as floats.
    """

    mode: str = "dataflow"
    overhead: float = 0.0
    reduce_bandwidth: float | None = None
    launch: float | None = 0.0
    message_cpu: float = 0.0
    faults: Faults = Faults()
    progress: bool = False
    engine: str = "auto"
    in_flight: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.mode, str) or self.mode not in MODES:
            raise SimulationError(f"mode: must be one of {', '.join(MODES)}, got {self.mode!r}")
        for key in ("overhead", "launch", "message_cpu"):
            v = getattr(self, key)
            if key == "launch" and v is None:
                continue
            if not _number(v) or not 0 <= v < math.inf:
                none = " or None" if key == "launch" else ""
                raise SimulationError(f"{key}: must be a finite number of seconds >= 0{none}, got {v!r}")
            object.__setattr__(self, key, float(v))
        rb = self.reduce_bandwidth
        if rb is not None:
            if not _number(rb) or not 0 < rb < math.inf:
                raise SimulationError(f"reduce_bandwidth: must be a positive finite number of bytes/s or None "
                                      f"(reductions are free), got {rb!r}")
            object.__setattr__(self, "reduce_bandwidth", float(rb))
        if not isinstance(self.faults, Faults):
            raise SimulationError(f"faults: must be a Faults, got {self.faults!r}")
        if not isinstance(self.progress, bool):
            raise SimulationError(f"progress: must be True or False, got {self.progress!r}")
        if not isinstance(self.engine, str) or self.engine not in ENGINES:
            raise SimulationError(f"engine: must be one of {', '.join(ENGINES)}, got {self.engine!r}")
        n = self.in_flight
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise SimulationError(f"in_flight: must be an integer >= 0 (0: every ready transfer at once), "
                                  f"got {n!r}")
        if self.engine == "fast" and self.message_cpu:
            raise SimulationError("engine fast does not model message_cpu (one message at a time per rank): "
                                  "use engine simpy or auto")

    def replace(self, **changes: Any) -> EngineOptions:
        """This value with ``changes`` (field names), checked as the constructor checks."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def of(cls, options: EngineOptions | None = None, /, **fields: Any) -> EngineOptions:
        """The value a Python caller means: ``options`` (None: the defaults) with the keyword ``fields``
        replaced (``simulate(s, t, n, overhead=2e-6)``); ``faults=None`` is no faults. An unknown field is a
        ``TypeError``, as an unknown keyword is."""
        if options is None:
            options = cls()
        elif not isinstance(options, EngineOptions):
            raise SimulationError(f"options: must be an EngineOptions, got {options!r}")
        if "faults" in fields and fields["faults"] is None:
            fields["faults"] = Faults()
        return options.replace(**fields) if fields else options

    def to_dict(self) -> dict[str, Any]:
        """A machine file's ``"engine"`` section: the machine's fields (``ENGINE_KEYS``)."""
        return {k: getattr(self, k) for k in ENGINE_KEYS}

    @classmethod
    def from_dict(cls, doc: object, where: str = "engine") -> EngineOptions:
        """A machine file's ``"engine"`` section, at ``where`` in the file: an object with only ``ENGINE_KEYS``,
        each optional; ``TopologyError`` naming the field (``where.field: ...``)."""
        if not isinstance(doc, dict):
            raise TopologyError(f"{where}: must be an object with keys {', '.join(ENGINE_KEYS)}")
        extra = sorted(set(doc) - set(ENGINE_KEYS), key=str)
        if extra:
            raise TopologyError(f"{where}: unknown field {extra[0]!r} (known: {', '.join(ENGINE_KEYS)})")
        try:
            return cls(**doc)
        except SimulationError as e:
            raise TopologyError(f"{where}.{e}") from None
