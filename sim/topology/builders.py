"""Topology builders in the usual shapes; the SPEC syntax that names them is ``sim.topology.forms``.

Rings (uni- and bidirectional), fully connected, a single switch (star), an
N-dimensional torus, the k-ary fat tree of Al-Fares, Loukissas & Vahdat, "A scalable,
commodity data center network architecture", SIGCOMM 2008, and a
hierarchical cluster of N nodes with G GPUs each (an NVLink-like switch
inside every node, one NIC per GPU to a network switch). ``dgx_h100`` is that
cluster with DGX H100 figures.

Tori: ``torus(4, 4, 4)`` is the 4x4x4 torus (SPEC ``torus:4x4x4``), rank =
(i_x·Y + i_y)·Z + i_z, the first size the slowest-varying digit (row-major, as
``torus(rows, cols)`` always was: rank = row·cols + col). The dimensions are
named ``x``, ``y``, ``z`` in the order written (any dimension is also ``d1``,
``d2``, ..., 1-based), and each may carry its own link figures: ``bandwidth``
and ``latency`` take one number for every dimension or a sequence of one per
dimension; in a SPEC, ``torus:4x4@x=100GB/s,y=50GB/s/2us`` (each ``DIM=BW``,
``DIM=BW/LAT`` or ``DIM=/LAT``; units as ``sim.units`` reads them; dimensions
not named keep 50 GB/s and 1 us). Every dimension of size k > 2 is a ring of
wrap-around links both ways; a dimension of 2 has one link pair between its two
ranks (the wrap-around is the same cable), and a dimension of 1 has none.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import networkx as nx

from sim.topology.graph import Node, Topology, TopologyError

__all__ = [
    "DEFAULT_BANDWIDTH",
    "DEFAULT_LATENCY",
    "NIC_BANDWIDTH",
    "NIC_LATENCY",
    "NVLINK_BANDWIDTH",
    "NVLINK_LATENCY",
    "TORUS_DIMENSIONS",
    "cluster",
    "dgx_h100",
    "fat_tree",
    "fully_connected",
    "ring",
    "single_switch",
    "torus",
    "torus_dimension",
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
# published figures (tests/sim/machine/test_machine.py holds each within 5%):
DGX_NVLINK_EFFICIENCY = 20.6 / 25
"""NCCL's ring reaches ~365-370 GB/s busbw on 8 H100s whose NVLink line rate is 450 GB/s: "with the protocol
overhead (~20%) NCCL can get an effective NVLink bandwidth of 370GB/s" (S. Jeaugey, NVIDIA/nccl-tests issue 212;
also NVIDIA/nccl issue 1455), which is NCCL's own per-link figure (src/graph/topo.h ``SM90_NVLINK_BW`` 20.6 GB/s
of a 25 GB/s link; ``sim.topology.gpus.HOPPER``): 18 x 20.6 = 370.8 GB/s."""
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


TORUS_DIMENSIONS = ("x", "y", "z")
"""Names of a torus's first three dimensions, in the order its sizes are written; ``d1``, ``d2``, ... name any."""


def torus_dimension(name: str, count: int) -> int:
    """The index of the dimension ``name`` (``x``, ``y``, ``z`` or ``d1``..``dN``) of a torus of ``count``
    dimensions; ``TopologyError`` naming the dimensions it has otherwise."""
    names = [*TORUS_DIMENSIONS[:count], *(f"d{i + 1}" for i in range(count))]
    key = name.strip().lower()
    if key in TORUS_DIMENSIONS[:count]:
        return TORUS_DIMENSIONS.index(key)
    if key.startswith("d") and key[1:].isdigit() and 1 <= int(key[1:]) <= count:
        return int(key[1:]) - 1
    raise TopologyError(f"torus: no dimension {name!r} in {count} dimensions (they are {', '.join(names)})")


def _per_dimension(value: float | Sequence[float], count: int, what: str) -> list[float]:
    values = [value] * count if isinstance(value, int | float) else list(value)
    if len(values) != count:
        raise TopologyError(f"torus: {what} takes one number or one per dimension ({count}), got {len(values)}")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise TopologyError(f"torus: {what} must be finite numbers, got {v!r}")
    return [float(v) for v in values]


def _figures(bandwidth: float, latency: float) -> str:
    return f"{bandwidth / 1e9:.12g}GB/s/{latency * 1e6:.12g}us"


def torus(*dims: int, bandwidth: float | Sequence[float] = DEFAULT_BANDWIDTH,
          latency: float | Sequence[float] = DEFAULT_LATENCY) -> Topology:
    """Torus of ``dims[0] x dims[1] x ...`` ranks (module docstring): at least two dimensions, each >= 1,
    rank row-major, wrap-around links both ways in every dimension.

    ``bandwidth``/``latency``: one figure for every link, or one per dimension (the links along it).
    The name is the SPEC: ``torus:4x4x4``, with ``@x=...,y=...`` when the dimensions' figures differ.
    """
    if len(dims) < 2:
        raise TopologyError(f"torus: needs at least two dimensions (a ring is ring:P), got {list(dims)}")
    for k, v in enumerate(dims):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            what = ("rows", "cols")[k] if len(dims) == 2 else f"dimension {k + 1}"
            raise TopologyError(f"torus: {what} must be an integer >= 1, got {v!r}")
    bws = _per_dimension(bandwidth, len(dims), "bandwidth")
    lats = _per_dimension(latency, len(dims), "latency")
    total = math.prod(dims)
    g = _graph(total, "torus")
    strides = [math.prod(dims[k + 1:]) for k in range(len(dims))]
    for r in range(total):
        # The last dimension first, as the 2-D torus always linked a rank's column neighbour before its row
        # neighbour: the same links in the same order, so link ids (and every result keyed by them) stay put.
        for k in reversed(range(len(dims))):
            size = dims[k]
            if size > 1:
                here = (r // strides[k]) % size
                _link(g, r, r + (((here + 1) % size) - here) * strides[k], bws[k], lats[k])
    name = "torus:" + "x".join(map(str, dims))
    if len(set(bws)) > 1 or len(set(lats)) > 1:
        labels = [*TORUS_DIMENSIONS, *(f"d{i + 1}" for i in range(3, len(dims)))]
        name += "@" + ",".join(f"{labels[k]}={_figures(bws[k], lats[k])}" for k in range(len(dims)))
    return Topology(g, name)


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
    (18 NVLink-4 links x 25 GB/s), and one 400 Gb/s (50 GB/s) ConnectX-7 NIC per GPU on
    rail-aligned leaf switches (``sim.topology.gpus``, which holds the figures and their sources).
    The links carry what NCCL's Simple protocol reaches on them and its Simple ring latency per step;
    other protocols and NCCL's base latency come from the runtime (``sim.engine.protocols``)."""
    from sim.topology.gpus import gpu_cluster

    return gpu_cluster("dgx-h100", nodes)
