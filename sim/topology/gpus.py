"""GPU cluster presets with node structure: DGX/HGX H100, H200, A100, B200 and GB200 NVL72.

A preset is ``N`` nodes of ``G`` GPUs (rank = node·G + gpu). Inside node ``n`` every GPU links both ways
to the switch ``node{n}`` (its NVLink ports to the NVSwitches, at the per-direction NVLink bandwidth);
between nodes every GPU has its own NIC, linked both ways to the leaf switch of its *rail*, ``rail{g}``
(GPU g of every node; the rail-aligned leaves of NVIDIA's DGX SuperPOD reference architecture), and the
leaves link both ways to a non-blocking ``spine`` (one link per leaf at the rail's whole bandwidth). A
message between same-rail GPUs of two nodes crosses two network hops; NCCL's rail-matched rings
(``nccl_ring``) only send such messages.

Each link carries a ``medium`` (``"nvlink"`` or ``"net"``, ``sim.engine.protocols.medium``) and the
topology's graph carries ``gpus_per_node`` and ``system`` (the preset's name), so that hierarchical
algorithms take the node's size as their group (``node_size``) and the NCCL model
(``sim.machine.nccl``) knows the GPU generation.

Link figures are line rates from the vendors' specifications times the fraction NCCL's Simple protocol
reaches on them (``GpuSystem``), never fitted to measurements; latencies are NCCL's Simple ring latency
per step (src/graph/tuning.cc ``hwLat``), half per hop. Other protocols rewrite the links
(``sim.engine.protocols.apply``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import networkx as nx

from sim.topology.graph import Topology, TopologyError

__all__ = ["NVLINK_PROTOCOL_EFFICIENCY", "IB_EFFICIENCY", "SYSTEMS", "GpuSystem", "gpu_cluster", "node_size",
           "system_of"]

NVLINK_PROTOCOL_EFFICIENCY = 0.815
"""The fraction of NVLink's line rate NCCL's ring (Simple) reaches on NVSwitch systems: "with the protocol
overhead (~20%) NCCL can get an effective NVLink bandwidth of 370GB/s" on 450 GB/s H100 NVLink (S. Jeaugey,
NVIDIA/nccl-tests issue 212; also NVIDIA/nccl issue 1455). 0.815 x 450 = 366.75 GB/s."""
IB_EFFICIENCY = 0.94
"""The fraction of an InfiniBand NIC's line rate NCCL reaches: "you should see 46-48GB/s per NIC" on NDR
400 Gb/s = 50 GB/s (NVIDIA/nccl-tests issue 290). 0.94 x 50 = 47 GB/s."""


@dataclass(frozen=True)
class GpuSystem:
    """One node type: GPUs per node, NVLink GB/s per direction per GPU, NICs and their Gb/s, the GPU's compute
    capability (which row of NCCL's tuning tables applies) and whether its NVSwitches reduce (NVLS)."""

    name: str
    gpu: str
    gpus_per_node: int
    nvlink_GBps: float
    nics_per_node: int
    nic_Gbps: float
    compute_capability: int
    nvls: bool
    source: str
    nvlink_efficiency: float = NVLINK_PROTOCOL_EFFICIENCY
    nic_efficiency: float = IB_EFFICIENCY

    @property
    def nvlink_bandwidth(self) -> float:
        """Effective bytes/s per direction per GPU on NVLink (line rate x NCCL's efficiency)."""
        return self.nvlink_GBps * 1e9 * self.nvlink_efficiency

    @property
    def nic_bandwidth(self) -> float:
        """Effective bytes/s per direction per NIC."""
        return self.nic_Gbps / 8 * 1e9 * self.nic_efficiency


SYSTEMS: Mapping[str, GpuSystem] = {
    "dgx-h100": GpuSystem(
        "dgx-h100", "H100 SXM", 8, 450.0, 8, 400.0, 90, True,
        # NVIDIA H100 datasheet: NVLink 900 GB/s bidirectional (18 NVLink-4 links x 25 GB/s per direction);
        # DGX H100 datasheet: 8 single-port ConnectX-7 400 Gb/s InfiniBand/Ethernet for the compute fabric.
        "NVIDIA H100 Tensor Core GPU datasheet (NVLink 900 GB/s); DGX H100 datasheet (8x ConnectX-7 400 Gb/s)"),
    "hgx-h200": GpuSystem(
        "hgx-h200", "H200 SXM", 8, 450.0, 8, 400.0, 90, True,
        # NVIDIA H200 datasheet: NVLink 900 GB/s (the H100's NVLink 4 and NVSwitch); HGX H200 / DGX H200 nodes
        # carry 8 ConnectX-7 400 Gb/s NICs, one per GPU.
        "NVIDIA H200 Tensor Core GPU datasheet (NVLink 900 GB/s); DGX H200 datasheet (8x ConnectX-7 400 Gb/s)"),
    "dgx-a100": GpuSystem(
        "dgx-a100", "A100 SXM", 8, 300.0, 8, 200.0, 80, False,
        # NVIDIA A100 datasheet: NVLink 600 GB/s bidirectional (12 NVLink-3 links x 25 GB/s per direction);
        # DGX A100 datasheet: 8 single-port ConnectX-6 200 Gb/s HDR InfiniBand for the compute fabric.
        "NVIDIA A100 Tensor Core GPU datasheet (NVLink 600 GB/s); DGX A100 datasheet (8x ConnectX-6 HDR 200 Gb/s)"),
    "dgx-b200": GpuSystem(
        "dgx-b200", "B200", 8, 900.0, 8, 400.0, 100, True,
        # NVIDIA DGX B200 datasheet: 8 B200 GPUs, NVLink 5 at 1.8 TB/s bidirectional per GPU (14.4 TB/s total),
        # 8 single-port ConnectX-7 400 Gb/s (4 OSFP ports).
        "NVIDIA DGX B200 datasheet (NVLink 1.8 TB/s per GPU; 8x ConnectX-7 400 Gb/s)"),
    "gb200-nvl72": GpuSystem(
        "gb200-nvl72", "B200 (GB200)", 72, 900.0, 72, 400.0, 100, True,
        # NVIDIA GB200 NVL72 specifications: 72 Blackwell GPUs in one NVLink domain, 1.8 TB/s NVLink 5 per GPU
        # (130 TB/s total); each compute tray carries ConnectX-7 400 Gb/s NICs, one per GPU, for the scale-out.
        "NVIDIA GB200 NVL72 specifications (72 GPUs, NVLink 1.8 TB/s per GPU, 130 TB/s domain; 400 Gb/s per GPU)"),
}
"""The presets by SPEC name (``NAME:N`` is N of those nodes)."""

SIMPLE_RING_NVLINK_STEP = 3.4e-6
"""NCCL's Simple ring step on NVLink: ``hwLat[NVLINK][RING][SIMPLE] = 3.4`` us (src/graph/tuning.cc)."""
SIMPLE_RING_NET_STEP = 14.0e-6
"""NCCL's Simple ring step on the network: ``hwLat[NET][RING][SIMPLE] = 14.0`` us (src/graph/tuning.cc,
NCCL 2.2x; older releases had 9.6)."""


def gpu_cluster(system: str | GpuSystem, nodes: int) -> Topology:
    """``nodes`` nodes of the preset ``system`` (module docstring)."""
    s = SYSTEMS[system] if isinstance(system, str) else system
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise TopologyError(f"{s.name}: nodes must be an integer >= 1, got {nodes!r}")
    gpn = s.gpus_per_node
    g = nx.DiGraph(gpus_per_node=gpn, system=s.name)
    g.add_nodes_from(range(nodes * gpn))
    nvl, nvl_lat = s.nvlink_bandwidth, SIMPLE_RING_NVLINK_STEP / 2
    for n in range(nodes):
        for i in range(gpn):
            r = n * gpn + i
            g.add_edge(r, f"node{n}", bandwidth=nvl, latency=nvl_lat, medium="nvlink")
            g.add_edge(f"node{n}", r, bandwidth=nvl, latency=nvl_lat, medium="nvlink")
    if nodes > 1:
        # NICs per GPU: a node of G GPUs and R NICs gives each rail R/G of a NIC per GPU (R = G on every preset).
        nic = s.nic_bandwidth * s.nics_per_node / gpn
        net_lat = SIMPLE_RING_NET_STEP / 2
        for i in range(gpn):
            leaf = f"rail{i}"
            for n in range(nodes):
                r = n * gpn + i
                g.add_edge(r, leaf, bandwidth=nic, latency=net_lat, medium="net")
                g.add_edge(leaf, r, bandwidth=nic, latency=net_lat, medium="net")
            if gpn > 1:
                # The spine carries cross-rail traffic without a bottleneck (a non-blocking fat tree); it adds
                # no latency of its own beyond the hops it makes a route take.
                g.add_edge(leaf, "spine", bandwidth=nic * nodes, latency=0.0, medium="net")
                g.add_edge("spine", leaf, bandwidth=nic * nodes, latency=0.0, medium="net")
    topo = Topology(g, f"{s.name}:{nodes}")
    if s.nvls and s.compute_capability == 90:
        # NVLink SHARP on every node's NVSwitch, with NCCL's Hopper figures (sim.topology.switches); Blackwell's
        # NVSwitch reduces too, but its figures are not modelled there yet.
        from sim.topology.switches import DGX_NVSWITCH, mark_switches

        topo = mark_switches(topo, DGX_NVSWITCH, lambda n: str(n).startswith("node"))
    return topo


def node_size(topology: Topology) -> int | None:
    """GPUs per node of a topology that knows its nodes (a GPU preset), else None."""
    n = topology.graph.graph.get("gpus_per_node")
    return int(n) if isinstance(n, int) and n >= 1 and topology.ranks % n == 0 else None


def system_of(topology: Topology) -> GpuSystem | None:
    """The preset a topology was built from, or None."""
    name = topology.graph.graph.get("system")
    return SYSTEMS.get(name) if isinstance(name, str) else None
