"""NCCL's three protocols, Simple, LL and LL128: what each costs per collective, per step and per byte.

NCCL moves every collective with one protocol (docs/design.md, "Protocols and runtimes"):

- **Simple** writes whole buffers and signals with a flag after a memory fence: full bandwidth, the
  highest latency per step;
- **LL** (low latency) writes 8-byte lines of 4 bytes of data and a 4-byte flag, so the receiver polls
  the data itself: the lowest latency, half the bandwidth at most;
- **LL128** writes 128-byte lines of 120 bytes of data and an 8-byte flag (src/include/device.h:
  ``NCCL_LL128_LINESIZE`` 128, ``NCCL_LL128_DATAELEMS`` = 16 - 1 eight-byte elements), needing NVLink's
  128-byte atomicity: nearly full bandwidth, a latency in between.

The figures are NCCL's own tuning constants (src/graph/tuning.cc, ``ncclTunerConstantsDefaults``, NCCL
2.27-2.29): a base latency per collective call (``baseLat``) and a latency per step by link type
(``hwLat``: NVLink, PCI, network), per algorithm and protocol. ``ProtocolModel`` carries one choice of
them as what the engines need: a launch cost, a latency per link hop of each medium and a bandwidth
factor per medium. ``apply`` rewrites a topology's links with it, so that both engines
(``sim.engine.fast`` and ``sim.engine.reference``) price every transfer with the protocol, unchanged.

A link's medium: the ``medium`` attribute the GPU presets (``sim.topology.gpus``) put on each link
(``"nvlink"`` or ``"net"``), else ``"nvlink"`` for a link to or from a switch named ``node...``
(``sim.topology.builders.cluster``'s node switches) and ``"net"`` for every other.

This module imports no torch and no networkx at import time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.topology.graph import Topology

__all__ = ["ALGORITHMS", "BASE_LATENCY_US", "HW_LATENCY_US", "LL128_DATA_FRACTION", "LL_DATA_FRACTION",
           "NET_OVERHEAD_US", "P2P_LL_THRESHOLD", "PROTOCOLS", "ProtocolModel", "apply", "medium", "parse_protocol"]

PROTOCOLS = ("LL", "LL128", "Simple")
"""In NCCL's order (src/include/device.h: ``NCCL_PROTO_LL`` 0, ``NCCL_PROTO_LL128`` 1, ``NCCL_PROTO_SIMPLE`` 2)."""

ALGORITHMS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
"""NCCL's algorithms in its order (src/include/device.h, ``NCCL_ALGO_TREE`` 0 ... ``NCCL_ALGO_PAT`` 6)."""

LL_DATA_FRACTION = 4 / 8
"""LL: a line is a 4-byte data word and a 4-byte flag (src/include/device.h, ``union ncclLLFifoLine``)."""
LL128_DATA_FRACTION = 120 / 128
"""LL128: a 128-byte line carries 15 of its 16 eight-byte elements as data (src/include/device.h,
``NCCL_LL128_LINESIZE`` 128, ``NCCL_LL128_DATAELEMS`` = ``NCCL_LL128_LINEELEMS`` - 1)."""

BASE_LATENCY_US: Mapping[str, Mapping[str, float]] = {
    # src/graph/tuning.cc, ncclTunerConstantsDefaults.baseLatencies, {LL, LL128, Simple} per algorithm.
    "tree": {"LL": 6.8, "LL128": 14.0, "Simple": 8.4},
    "ring": {"LL": 6.6, "LL128": 14.0, "Simple": 8.4},
    "collnet_direct": {"LL": 0.0, "LL128": 0.0, "Simple": 0.0},
    "collnet_chain": {"LL": 0.0, "LL128": 0.0, "Simple": 0.0},
    "nvls": {"LL": 0.0, "LL128": 0.0, "Simple": 0.0},
    "nvls_tree": {"LL": 0.0, "LL128": 0.0, "Simple": 0.0},
    "pat": {"LL": 8.0, "LL128": 8.0, "Simple": 8.0},
}
"""Microseconds per collective call, before its first step (NCCL's ``baseLat``)."""

HW_LATENCY_US: Mapping[str, Mapping[str, Mapping[str, float]]] = {
    # src/graph/tuning.cc, ncclTunerConstantsDefaults.hwLatencies[NCCL_HW_NVLINK], {LL, LL128, Simple}.
    "nvlink": {"tree": {"LL": 0.6, "LL128": 1.25, "Simple": 4.0}, "ring": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4},
               "collnet_direct": {"LL": 0.0, "LL128": 0.0, "Simple": 3.7},
               "collnet_chain": {"LL": 0.0, "LL128": 0.0, "Simple": 2.8},
               "nvls": {"LL": 0.0, "LL128": 0.0, "Simple": 25.0},
               "nvls_tree": {"LL": 0.0, "LL128": 0.0, "Simple": 25.0},
               "pat": {"LL": 0.0, "LL128": 0.0, "Simple": 4.0}},
    # hwLatencies[NCCL_HW_PCI]
    "pci": {"tree": {"LL": 1.0, "LL128": 1.9, "Simple": 4.0}, "ring": {"LL": 1.0, "LL128": 2.5, "Simple": 5.7},
            "collnet_direct": {"LL": 0.0, "LL128": 0.0, "Simple": 3.7},
            "collnet_chain": {"LL": 0.0, "LL128": 0.0, "Simple": 2.8},
            "nvls": {"LL": 0.0, "LL128": 0.0, "Simple": 0.0}, "nvls_tree": {"LL": 0.0, "LL128": 0.0, "Simple": 0.0},
            "pat": {"LL": 0.0, "LL128": 0.0, "Simple": 4.0}},
    # hwLatencies[NCCL_HW_NET]
    "net": {"tree": {"LL": 5.0, "LL128": 8.5, "Simple": 14.0}, "ring": {"LL": 2.7, "LL128": 4.0, "Simple": 14.0},
            "collnet_direct": {"LL": 0.0, "LL128": 0.0, "Simple": 31.0},
            "collnet_chain": {"LL": 0.0, "LL128": 0.0, "Simple": 30.0},
            "nvls": {"LL": 0.0, "LL128": 0.0, "Simple": 18.0}, "nvls_tree": {"LL": 0.0, "LL128": 0.0, "Simple": 20.9},
            "pat": {"LL": 0.0, "LL128": 0.0, "Simple": 14.0}},
}
"""Microseconds per step on a link type, by algorithm and protocol (NCCL's ``hwLat``)."""

NET_OVERHEAD_US = 1.0
"""The network proxy's post overhead per step on an Intel x86 host (src/graph/tuning.cc, ``getNetOverhead``:
1.0 us on Intel, 2.0 on AMD), tripled for Simple; an inter-node ring's intra-node steps cost at least this."""

P2P_LL_THRESHOLD = 16384
"""Point-to-point messages up to this many bytes go with LL, larger ones with Simple (NCCL src/enqueue.cc,
``NCCL_P2P_LL_THRESHOLD`` default 16384; point-to-point never uses LL128)."""


def parse_protocol(text: str) -> str:
    """``LL``, ``LL128`` or ``Simple`` from any capitalisation; ``ValueError`` naming the choices otherwise."""
    for p in PROTOCOLS:
        if text.strip().lower() == p.lower():
            return p
    raise ValueError(f"protocol {text!r}: expected one of {', '.join(PROTOCOLS)}")


def medium(u: object, v: object, attrs: Mapping[str, object]) -> str:
    """The medium of link u -> v (module docstring): ``"nvlink"`` or ``"net"``."""
    m = attrs.get("medium")
    if m in ("nvlink", "net"):
        return str(m)
    return "nvlink" if any(isinstance(x, str) and x.startswith("node") for x in (u, v)) else "net"


@dataclass(frozen=True)
class ProtocolModel:
    """What a protocol costs the engines: ``launch`` seconds per collective; per link hop, ``nvlink_latency``
    and ``net_latency`` seconds; each link's bandwidth times ``nvlink_factor`` or ``net_factor``.

    A route inside a node crosses two NVLink hops (GPU -> NVSwitch -> GPU), one between nodes two network
    hops (GPU -> leaf switch -> GPU), so a step costs twice the hop latency: NCCL's ``hwLat`` per step.
    """

    protocol: str
    algorithm: str
    launch: float
    nvlink_latency: float
    net_latency: float
    nvlink_factor: float = 1.0
    net_factor: float = 1.0

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"protocol {self.protocol!r}: expected one of {', '.join(PROTOCOLS)}")
        for key in ("launch", "nvlink_latency", "net_latency"):
            v = getattr(self, key)
            if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0):
                raise ValueError(f"{key}: must be a finite number of seconds >= 0, got {v!r}")
        for key in ("nvlink_factor", "net_factor"):
            v = getattr(self, key)
            if not (isinstance(v, int | float) and math.isfinite(v) and v > 0):
                raise ValueError(f"{key}: must be a positive number, got {v!r}")

    @classmethod
    def nccl(cls, protocol: str, algorithm: str = "ring", *, nodes: int = 1, nvlink_factor: float = 1.0,
             net_factor: float = 1.0, net_overhead_us: float = NET_OVERHEAD_US) -> ProtocolModel:
        """NCCL's latencies of ``algorithm`` with ``protocol`` (tuning.cc's ``ncclTopoTuneModel``): the base
        latency at launch; per step ``hwLat[NVLINK]`` inside a node and ``hwLat[NET]`` between nodes, where an
        inter-node ring's intra-node step costs at least the proxy's post overhead (x3 for Simple)."""
        protocol = parse_protocol(protocol)
        if algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm {algorithm!r}: expected one of {', '.join(ALGORITHMS)}")
        intra = HW_LATENCY_US["nvlink"][algorithm][protocol]
        inter = HW_LATENCY_US["net"][algorithm][protocol]
        if nodes > 1 and algorithm == "ring":
            intra = max(intra, net_overhead_us * (3 if protocol == "Simple" else 1))
        return cls(protocol, algorithm, BASE_LATENCY_US[algorithm][protocol] * 1e-6, intra / 2 * 1e-6,
                   inter / 2 * 1e-6, nvlink_factor, net_factor)

    def step_latency(self, medium_name: str) -> float:
        """Seconds of one step over two hops of ``medium_name``."""
        return 2 * (self.nvlink_latency if medium_name == "nvlink" else self.net_latency)


def apply(topology: Topology, model: ProtocolModel) -> Topology:
    """A copy of ``topology`` whose links carry ``model``'s latency per hop and bandwidth factor by medium."""
    from sim.topology.graph import Topology

    g = topology.graph.copy()
    for u, v, attrs in g.edges(data=True):
        m = medium(u, v, attrs)
        attrs["latency"] = model.nvlink_latency if m == "nvlink" else model.net_latency
        attrs["bandwidth"] = float(attrs["bandwidth"]) * (model.nvlink_factor if m == "nvlink" else model.net_factor)
    return Topology(g, f"{topology.name} [{model.algorithm}/{model.protocol}]", topology.routes)
