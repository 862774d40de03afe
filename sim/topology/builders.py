"""Topology builders in the usual shapes, and the SPEC syntax that names them (``from_spec``).

Rings (uni- and bidirectional), fully connected, a single switch (star), a 2D
torus, the k-ary fat tree of Al-Fares, Loukissas & Vahdat, "A scalable,
commodity data center network architecture", SIGCOMM 2008, and a
hierarchical cluster of N nodes with G GPUs each (an NVLink-like switch
inside every node, one NIC per GPU to a network switch). ``dgx_h100`` is that
cluster with DGX H100 figures.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

import networkx as nx

from sim.topology.files import load
from sim.topology.graph import Node, Topology, TopologyError

__all__ = [
    "DEFAULT_BANDWIDTH",
    "DEFAULT_LATENCY",
    "MAX_SPEC_RANKS",
    "NIC_BANDWIDTH",
    "NIC_LATENCY",
    "NVLINK_BANDWIDTH",
    "NVLINK_LATENCY",
    "SPEC_FORMS",
    "cluster",
    "dgx_h100",
    "fat_tree",
    "from_spec",
    "fully_connected",
    "ring",
    "single_switch",
    "torus",
    "unidirectional_ring",
]

DEFAULT_BANDWIDTH = 50e9
"""Link bandwidth of the simple builders when none is given: 50 GB/s (one 400 Gb/s NIC)."""
DEFAULT_LATENCY = 1e-6
"""Link latency of the simple builders when none is given: 1 us."""
NVLINK_BANDWIDTH = 450e9
"""DGX H100: 18 NVLink-4 links of 25 GB/s per direction = 450 GB/s per GPU per direction to the NVSwitches."""
NVLINK_LATENCY = 0.5e-6
"""Per hop GPU <-> NVSwitch, so a GPU-to-GPU message inside a node sees 1 us."""
NIC_BANDWIDTH = 50e9
"""DGX H100: one ConnectX-7 NIC of 400 Gb/s = 50 GB/s per GPU per direction."""
NIC_LATENCY = 1e-6
"""Per hop GPU <-> network switch, so a message between nodes sees 2 us."""

# The dgx-h100 preset carries what NCCL reaches on those links, so that simulation reproduces NVIDIA's
# published figures (tests/test_machine.py holds each within 5%):
DGX_NVLINK_EFFICIENCY = 0.815
"""NCCL's ring reaches ~365-370 GB/s busbw on 8 H100s whose NVLink line rate is 450 GB/s: "with the protocol
overhead (~20%) NCCL can get an effective NVLink bandwidth of 370GB/s" (S. Jeaugey, NVIDIA/nccl-tests issue 212;
also NVIDIA/nccl issue 1455). 0.815 x 450 = 366.75 GB/s."""
DGX_NIC_EFFICIENCY = 0.94
"""NDR 400 Gb/s (50 GB/s) NICs: "you should see 46-48GB/s per NIC" (NVIDIA/nccl-tests issue 290). 0.94 x 50 = 47."""
DGX_NIC_LATENCY = 4.8e-6
"""Per GPU <-> network switch hop, so one network step of a ring costs 9.6 us: NCCL's
``hwLat[NET][RING][SIMPLE] = 9.6`` us (src/graph/tuning.cc). It also keeps messages inside a node on NVLink,
whose route (3.4 us) is then the lower-latency one."""
DGX_NVLINK_LATENCY = 1.7e-6
"""Per GPU <-> NVSwitch hop, so one NVLink step of a ring costs 3.4 us: NCCL's
``hwLat[NVLINK][RING][SIMPLE] = 3.4`` us (src/graph/tuning.cc); with its base latency of 8.4 us per
collective (``sim.machine.model.PRESET_ENGINES``) a 1 KiB ring all-reduce on 8 GPUs takes 8.4 + 14 x 3.4 = 56 us."""


def _graph(p: int, what: str) -> nx.DiGraph:
    if isinstance(p, bool) or not isinstance(p, int) or p < 1:
        raise TopologyError(f"{what}: ranks must be an integer >= 1, got {p!r}")
    g = nx.DiGraph()
    g.add_nodes_from(range(p))
    return g


def _link(g: nx.DiGraph, u: Node, v: Node, bandwidth: float, latency: float, *, both: bool = True) -> None:
    g.add_edge(u, v, bandwidth=bandwidth, latency=latency)
    if both:
        g.add_edge(v, u, bandwidth=bandwidth, latency=latency)


def ring(p: int, *, bandwidth: float = DEFAULT_BANDWIDTH, latency: float = DEFAULT_LATENCY) -> Topology:
    """Bidirectional ring: rank r linked both ways to r+1 (mod p)."""
    g = _graph(p, "ring")
    for r in range(p if p > 2 else p - 1):
        _link(g, r, (r + 1) % p, bandwidth, latency)
    return Topology(g, f"ring:{p}")


def unidirectional_ring(p: int, *, bandwidth: float = DEFAULT_BANDWIDTH,
                        latency: float = DEFAULT_LATENCY) -> Topology:
    """Unidirectional ring: one link r -> r+1 (mod p) per rank."""
    g = _graph(p, "uring")
    for r in range(p if p > 1 else 0):
        _link(g, r, (r + 1) % p, bandwidth, latency, both=False)
    return Topology(g, f"uring:{p}")


def fully_connected(p: int, *, bandwidth: float = DEFAULT_BANDWIDTH, latency: float = DEFAULT_LATENCY) -> Topology:
    """Full mesh: a dedicated link each way between every pair of ranks."""
    g = _graph(p, "full")
    for u in range(p):
        for v in range(p):
            if u != v:
                g.add_edge(u, v, bandwidth=bandwidth, latency=latency)
    return Topology(g, f"full:{p}")


def single_switch(p: int, *, bandwidth: float = DEFAULT_BANDWIDTH, latency: float = DEFAULT_LATENCY) -> Topology:
    """Star: every rank linked both ways to one switch ``"switch"`` (a message crosses two links)."""
    g = _graph(p, "switch")
    for r in range(p):
        _link(g, r, "switch", bandwidth, latency)
    return Topology(g, f"switch:{p}")


def torus(rows: int, cols: int, *, bandwidth: float = DEFAULT_BANDWIDTH,
          latency: float = DEFAULT_LATENCY) -> Topology:
    """2D torus of rows x cols ranks (rank = row·cols + col), wrap-around links both ways in both dimensions."""
    for v, what in ((rows, "rows"), (cols, "cols")):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise TopologyError(f"torus: {what} must be an integer >= 1, got {v!r}")
    g = _graph(rows * cols, "torus")
    for i in range(rows):
        for j in range(cols):
            r = i * cols + j
            if cols > 1:
                _link(g, r, i * cols + (j + 1) % cols, bandwidth, latency)
            if rows > 1:
                _link(g, r, ((i + 1) % rows) * cols + j, bandwidth, latency)
    return Topology(g, f"torus:{rows}x{cols}")


def fat_tree(k: int, *, bandwidth: float = DEFAULT_BANDWIDTH, latency: float = DEFAULT_LATENCY) -> Topology:
    """k-ary fat tree (Al-Fares et al. 2008): k pods of k/2 edge and k/2 aggregation switches,
    (k/2)^2 core switches, k^3/4 ranks (k/2 per edge switch); every link at the same bandwidth."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 2 or k % 2:
        raise TopologyError(f"fattree: k must be an even integer >= 2, got {k!r}")
    h = k // 2
    g = _graph(k * h * h, "fattree")
    for pod in range(k):
        for e in range(h):
            edge = f"edge{pod}.{e}"
            for i in range(h):
                _link(g, (pod * h + e) * h + i, edge, bandwidth, latency)
        for a in range(h):
            agg = f"agg{pod}.{a}"
            for e in range(h):
                _link(g, f"edge{pod}.{e}", agg, bandwidth, latency)
            for c in range(h):
                _link(g, agg, f"core{a * h + c}", bandwidth, latency)
    return Topology(g, f"fattree:{k}")


def cluster(nodes: int, gpus: int, *, nvlink_bandwidth: float = NVLINK_BANDWIDTH,
            nvlink_latency: float = NVLINK_LATENCY, nic_bandwidth: float = NIC_BANDWIDTH,
            nic_latency: float = NIC_LATENCY, name: str | None = None) -> Topology:
    """Hierarchical cluster: ``nodes`` x ``gpus`` ranks (rank = node·gpus + gpu).

    Inside node n every GPU links both ways to the switch ``"node{n}"``
    (NVLink/NVSwitch-like); every GPU also has one NIC, linked both ways to
    the switch ``"net"``. Messages inside a node take the node switch (lower
    latency, and it comes first on ties); messages between nodes take the NICs.
    """
    for v, what in ((nodes, "nodes"), (gpus, "gpus")):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise TopologyError(f"cluster: {what} must be an integer >= 1, got {v!r}")
    g = _graph(nodes * gpus, "cluster")
    for n in range(nodes):
        for i in range(gpus):
            _link(g, n * gpus + i, f"node{n}", nvlink_bandwidth, nvlink_latency)
    if nodes > 1:
        for r in range(nodes * gpus):
            _link(g, r, "net", nic_bandwidth, nic_latency)
    return Topology(g, name or f"cluster:{nodes}x{gpus}")


def dgx_h100(nodes: int) -> Topology:
    """``nodes`` DGX H100 systems: 8 GPUs each at 450 GB/s per direction to the NVSwitches
    (18 NVLink-4 links x 25 GB/s), and one 400 Gb/s (50 GB/s) ConnectX-7 NIC per GPU
    to a non-blocking network switch. The links carry what NCCL reaches on them:
    450 GB/s x ``DGX_NVLINK_EFFICIENCY``, 50 GB/s x ``DGX_NIC_EFFICIENCY``, and
    ``DGX_NVLINK_LATENCY``/``DGX_NIC_LATENCY`` per hop (NCCL's per-step latencies); NCCL's base latency
    per collective is the preset's engine parameter (``sim.machine.model.PRESET_ENGINES``)."""
    return cluster(nodes, 8, nvlink_bandwidth=NVLINK_BANDWIDTH * DGX_NVLINK_EFFICIENCY,
                   nvlink_latency=DGX_NVLINK_LATENCY, nic_bandwidth=NIC_BANDWIDTH * DGX_NIC_EFFICIENCY,
                   nic_latency=DGX_NIC_LATENCY, name=f"dgx-h100:{nodes}")


# -- the SPEC syntax ------------------------------------------------------------------------

SPEC_FORMS = "ring:P, uring:P, full:P, switch:P, torus:RxC, fattree:K, cluster:NxG, dgx-h100:N, or a topology file"


def _ints(text: str, count: int, spec: str) -> list[int]:
    parts = text.lower().split("x")
    if len(parts) != count or not all(re.fullmatch(r"[0-9]+", s) for s in parts):
        shape = "x".join("N" * 1 for _ in range(count))
        raise TopologyError(f"topology {spec!r}: expected {shape} after the colon, got {text!r}")
    return [int(s) for s in parts]


_SIMPLE: dict[str, Callable[..., Topology]] = {
    "ring": ring,
    "uring": unidirectional_ring,
    "full": fully_connected,
    "switch": single_switch,
    "fattree": fat_tree,
}


MAX_SPEC_RANKS = 1 << 16
"""Largest world a SPEC may build (a full mesh: 2048 ranks, about 4 M links)."""


def _bounded(spec: str, ranks: int, limit: int = MAX_SPEC_RANKS) -> None:
    if ranks > limit:
        raise TopologyError(f"topology {spec!r}: {ranks} ranks is more than the {limit} a SPEC may build")


def from_spec(spec: str, *, bandwidth: float | None = None, latency: float | None = None) -> Topology:
    """The topology a SPEC names (``SPEC_FORMS``); ``bandwidth``/``latency``, when given, set every link."""
    m = re.fullmatch(r"([a-z][a-z0-9-]*):(.+)", spec.strip())
    topo: Topology
    if m and m.group(1) in (*_SIMPLE, "torus", "cluster", "dgx-h100"):
        kind, arg = m.group(1), m.group(2)
        if kind in _SIMPLE:
            (n,) = _ints(arg, 1, spec)
            _bounded(spec, n if kind != "fattree" else n**3 // 4, 2048 if kind == "full" else MAX_SPEC_RANKS)
            topo = _SIMPLE[kind](n)
        elif kind == "torus":
            rows, cols = _ints(arg, 2, spec)
            _bounded(spec, rows * cols)
            topo = torus(rows, cols)
        elif kind == "cluster":
            nodes, gpus = _ints(arg, 2, spec)
            _bounded(spec, nodes * gpus)
            topo = cluster(nodes, gpus)
        else:
            (n,) = _ints(arg, 1, spec)
            _bounded(spec, 8 * n)
            topo = dgx_h100(n)
    elif os.path.exists(spec):
        topo = load(spec)
    elif os.sep in spec or spec.lower().endswith((".json", ".graphml", ".xml")):
        raise TopologyError(f"topology file {spec}: no such file")
    else:
        raise TopologyError(f"unknown topology {spec!r}: expected {SPEC_FORMS}")
    if bandwidth is not None or latency is not None:
        topo = topo.with_links(bandwidth=bandwidth, latency=latency)
    return topo
