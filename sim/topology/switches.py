"""What a topology's switches can do besides forwarding: reduce (in-network reduction) and multicast.

A switch node may carry a ``SwitchCaps`` as its ``caps`` node attribute: whether
it combines the chunks its ports bring (NVLink SHARP's ``multimem.ld_reduce``,
InfiniBand SHARP's aggregation) and whether it copies one chunk out to many
ports (``multimem.st``, switch multicast), the rate per port at which it does
so, and the latency each operation adds. ``mark_switches`` returns a topology
whose chosen switches carry one; ``resolve`` finds the switch a schedule's
``SwitchOp`` names, either a node (``node0``) or a *domain*:

- ``nvls``: the switch of domain ``nvls`` that can do the operation and is linked
  directly to every rank the operation touches (one DGX's NVSwitch);
- ``sharp``: likewise, among the switches of domain ``sharp`` (the network's SHARP switch);
- ``any``: the first capable switch linked to every rank.

A schedule that asks a switch for what it cannot do is refused naming the op and
the switch (``check_schedule``).

Figures (``DGX_NVSWITCH``, ``IB_SHARP``) carry their sources: NCCL's
``src/graph/tuning.cc`` and ``src/graph/search.cc``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import networkx as nx

from algorithms.ir import Schedule, SwitchOp, SwitchOpKind
from sim.topology.graph import Node, Topology, TopologyError

__all__ = ["DOMAINS", "DGX_NVSWITCH", "IB_SHARP", "SwitchCaps", "capabilities", "check_schedule", "mark_switches",
           "reducing_switches", "resolve"]


@dataclass(frozen=True)
class SwitchCaps:
    """What one switch does with a switch operation.

    ``bandwidth``: bytes/s per port at which the switch takes in contributions
    (reduce) or sends out copies (multicast); ``latency``: seconds one
    operation adds, once, to its delivery.
    """

    reduce: bool
    multicast: bool
    bandwidth: float
    latency: float
    source: str = ""
    domain: str = "nvls"
    """The domain (``DOMAINS``) a ``SwitchOp`` may name to reach this switch: ``nvls`` (a node's switch) or
    ``sharp`` (a network switch)."""

    def __post_init__(self) -> None:
        if not (isinstance(self.bandwidth, int | float) and 0 < self.bandwidth < math.inf):
            raise TopologyError(f"switch bandwidth must be a positive number of bytes/s, got {self.bandwidth!r}")
        if not (isinstance(self.latency, int | float) and 0 <= self.latency < math.inf):
            raise TopologyError(f"switch latency must be a finite number of seconds >= 0, got {self.latency!r}")

    def can(self, op: SwitchOpKind) -> bool:
        """True when the switch performs operations of kind ``op``."""
        return self.reduce if op is SwitchOpKind.REDUCE else self.multicast


# NCCL's model of NVLS on 8 H100s (the figure a run with NCCL_ALGO=NVLS reaches):
# - src/graph/search.cc, ncclTopoSearchTryNvls: an NVLS channel loads the head GPU's NVLink twice and every other
#   GPU's once, so 8 channels load each GPU's links 9 times; sm90SpeedArrayIntra's largest per-channel speed with
#   9 x speed <= 18 links x SM90_NVLINK_BW (20.6 GB/s, src/graph/topo.h) = 370.8 GB/s is 40 GB/s: 9 x 40 = 360 GB/s.
# - src/graph/tuning.cc, nvlsEfficiency[Hopper] = 0.85.
# So a port moves 360 GB/s x 0.85 = 306 GB/s of NVLS traffic per direction. NCCL's busbw prediction from the same
# figures, nChannels x bw x 0.85 x (nChannels - 1) / nChannels x 2 = 8 x 40 x 0.85 x 7/8 x 2 = 476 GB/s, is what this
# port rate gives for the ld_reduce/st traffic ((p + 1) / p of the message each way): 2 (p - 1) / (p + 1) x 306.
NVLS_CHANNEL_BANDWIDTH = 40e9
"""Per NVLS channel on H100: sm90SpeedArrayIntra's speed that NCCL's search settles on (src/graph/search.cc)."""
NVLS_PORT_LOAD = 9
"""Channel loads per GPU port with 8 NVLS channels: 2 for the head, 1 for each other GPU (ncclTopoSearchTryNvls)."""
NVLS_EFFICIENCY = 0.85
"""NCCL's ``nvlsEfficiency`` for Hopper (src/graph/tuning.cc)."""
NVLS_LATENCY = 25e-6
"""NCCL's ``hwLat[NVLINK][NVLS][SIMPLE]`` = 25 us (src/graph/tuning.cc): one NVLS collective (its ld_reduce pass
and its st pass); each of the two operations adds half."""
SHARP_LATENCY = 18e-6
"""NCCL's ``hwLat[NET][NVLS][SIMPLE]`` = 18 us (src/graph/tuning.cc), the network part of NVLS across nodes
(CollNet/SHARP); taken whole per operation: an aggregation's up and down the tree."""

DGX_NVSWITCH = SwitchCaps(
    reduce=True, multicast=True, bandwidth=NVLS_CHANNEL_BANDWIDTH * NVLS_PORT_LOAD * NVLS_EFFICIENCY,
    latency=NVLS_LATENCY / 2,
    source="NCCL src/graph/search.cc (NVLS channels: 9 x 40 GB/s per GPU port) x src/graph/tuning.cc "
           "nvlsEfficiency[Hopper] 0.85; hwLat[NVLINK][NVLS] 25 us per ld_reduce + st pair")
"""The third-generation NVSwitch of a DGX H100 (NVLink SHARP): reduces and multicasts."""

IB_SHARP = SwitchCaps(
    reduce=True, multicast=True, bandwidth=50e9 * 0.94, latency=SHARP_LATENCY, domain="sharp",
    source="Quantum-2 SHARP at the NDR port rate NCCL reaches (50 GB/s x 0.94, nccl-tests issue 290); "
           "NCCL src/graph/tuning.cc hwLat[NET][NVLS] 18 us")
"""An InfiniBand NDR switch with SHARP (``dgx-h100:N+sharp``): aggregates at its ports' rate."""

DOMAINS = ("nvls", "sharp", "any")
"""Switch names a ``SwitchOp`` may give instead of a node (module docstring)."""


def mark_switches(topology: Topology, caps: SwitchCaps, which: Callable[[Node], bool] | Iterable[Node]) -> Topology:
    """``topology`` with ``caps`` on the switches ``which`` selects (a predicate on node names, or the names)."""
    g = nx.DiGraph(topology.graph)
    chosen = [n for n in g.nodes if isinstance(n, str)]
    if callable(which):
        chosen = [n for n in chosen if which(n)]
    else:
        names = set(which)
        unknown = names - set(chosen)
        if unknown:
            raise TopologyError(f"topology {topology.name}: no switch named {sorted(map(str, unknown))[0]!r}")
        chosen = [n for n in chosen if n in names]
    for n in chosen:
        g.nodes[n]["caps"] = caps
    return Topology(g, topology.name, topology.routes)


def capabilities(topology: Topology, switch: Node) -> SwitchCaps | None:
    """The switch's ``SwitchCaps`` (None: it only forwards, or it is not a switch)."""
    if switch not in topology.graph or not isinstance(switch, str):
        return None
    caps = topology.graph.nodes[switch].get("caps")
    return caps if isinstance(caps, SwitchCaps) else None


def reducing_switches(topology: Topology) -> list[str]:
    """The switches that can reduce, in node order."""
    return [n for n in topology.graph.nodes if isinstance(n, str) and (c := capabilities(topology, n)) and c.reduce]


def _label(op: SwitchOp) -> str:
    return f"step {op.step} switch op ({op.describe()})"


def capable_switches(topology: Topology) -> list[tuple[Node, SwitchCaps]]:
    """Every switch of ``topology`` that carries ``SwitchCaps``, in node order."""
    return [(n, c) for n in topology.graph.nodes if (c := capabilities(topology, n)) is not None]


def resolve(topology: Topology, op: SwitchOp, *,
            switches: list[tuple[Node, SwitchCaps]] | None = None) -> tuple[str, SwitchCaps]:
    """The switch node that performs ``op`` and its capabilities; ``TopologyError`` naming the op and the
    switch when it does not exist, cannot do the operation, or is not linked to every rank it touches.
    ``switches``: the topology's capable switches (``capable_switches``), when the caller has them already."""
    g = topology.graph
    ranks = sorted(op.ranks())
    if op.switch in DOMAINS:
        return _in_domain(topology, op, _index(capable_switches(topology) if switches is None else switches))
    if op.switch not in g or not isinstance(op.switch, str):
        raise TopologyError(f"{_label(op)}: topology {topology.name} has no switch {op.switch!r}")
    named = capabilities(topology, op.switch)
    if named is None or not named.can(op.op):
        raise TopologyError(f"{_label(op)}: switch {op.switch} of topology {topology.name} cannot {op.op}")
    far = [r for r in ranks if not (g.has_edge(r, op.switch) and g.has_edge(op.switch, r))]
    if far:
        raise TopologyError(f"{_label(op)}: rank {far[0]} has no link to and from switch {op.switch}")
    return op.switch, named


def _index(switches: list[tuple[Node, SwitchCaps]]) -> dict[Node, tuple[int, SwitchCaps]]:
    return {n: (k, c) for k, (n, c) in enumerate(switches)}


def _in_domain(topology: Topology, op: SwitchOp, index: dict[Node, tuple[int, SwitchCaps]]) -> tuple[str, SwitchCaps]:
    """``resolve`` of an op that names a domain: the first capable switch in node order that may serve the domain,
    can do the op and is linked both ways to each of its ranks. Only the first rank's neighbours can be that
    switch, so only they are tried (not each of a cluster's 2,048 NVSwitches per op)."""
    g = topology.graph
    ranks = sorted(op.ranks())
    if not ranks:
        near = list(index)
    else:
        near = [n for n in g.succ[ranks[0]] if n in index] if ranks[0] in g else []
    for n in sorted(near, key=lambda n: index[n][0]):
        caps = index[n][1]
        if not caps.can(op.op) or op.switch not in ("any", caps.domain):
            continue
        if all(g.has_edge(r, n) and g.has_edge(n, r) for r in ranks):
            return str(n), caps
    raise TopologyError(f"{_label(op)}: no switch of topology {topology.name} in domain {op.switch!r} can "
                        f"{op.op} and is linked to all of ranks {ranks[0]}..{ranks[-1]}")


def check_schedule(schedule: Schedule, topology: Topology) -> list[tuple[str, SwitchCaps]]:
    """The resolved switch of every switch op of ``schedule`` (in order); ``TopologyError`` at the first bad one.
    Ops that name the same switch or domain for the same operation on the same ranks resolve once."""
    switches = capable_switches(topology)
    index = _index(switches)
    seen: dict[tuple[str, SwitchOpKind, frozenset[int]], tuple[str, SwitchCaps]] = {}
    out = []
    for op in schedule.switch_ops:
        key = (op.switch, op.op, frozenset(op.ranks()))
        hit = seen.get(key)
        if hit is None:
            hit = seen[key] = (_in_domain(topology, op, index) if op.switch in DOMAINS
                               else resolve(topology, op, switches=switches))
        out.append(hit)
    return out


def with_sharp(topology: Topology, spec: str) -> Topology:
    """``topology`` (a SPEC's, before its ``+sharp``) with ``IB_SHARP`` on every switch not linked to a single node's
    GPUs only: the network switches (for ``cluster`` and ``dgx-h100``, ``net``)."""
    net = [n for n in topology.graph.nodes if isinstance(n, str) and capabilities(topology, n) is None
           and not n.startswith("node")]
    if not net:
        raise TopologyError(f"topology {spec!r}: +sharp needs network switches, and {topology.name} has none")
    marked = mark_switches(topology, IB_SHARP, net)
    return Topology(marked.graph, f"{topology.name}+sharp", marked.routes)


_CAPS_KEYS = ("reduce", "multicast", "bandwidth", "latency", "domain", "source")


def caps_to_dict(caps: SwitchCaps) -> dict[str, object]:
    """A ``SwitchCaps`` as the JSON object of a topology file's ``switch_caps``."""
    return {k: getattr(caps, k) for k in _CAPS_KEYS}


def caps_from_dict(doc: object, where: str) -> SwitchCaps:
    """A ``SwitchCaps`` from a topology file's object; ``TopologyError`` naming ``where`` and the field."""
    if not isinstance(doc, dict):
        raise TopologyError(f"{where}: must be an object")
    extra = sorted(set(doc) - set(_CAPS_KEYS))
    if extra:
        raise TopologyError(f"{where}: unknown field {extra[0]!r}")
    for key, kinds in (("reduce", bool), ("multicast", bool), ("bandwidth", int | float), ("latency", int | float)):
        if key not in doc:
            raise TopologyError(f"{where}: missing field {key!r}")
        if not isinstance(doc[key], kinds) or (kinds is not bool and isinstance(doc[key], bool)):
            raise TopologyError(f"{where}.{key}: wrong type {type(doc[key]).__name__}")
    domain = doc.get("domain", "nvls")
    if domain not in DOMAINS[:2]:
        raise TopologyError(f"{where}.domain: one of nvls, sharp, got {domain!r}")
    try:
        return SwitchCaps(doc["reduce"], doc["multicast"], float(doc["bandwidth"]), float(doc["latency"]),
                          str(doc.get("source", "")), domain)
    except TopologyError as e:
        raise TopologyError(f"{where}: {e}") from None
