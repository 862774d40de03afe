"""GPU cluster presets by architecture: DGX A100 (Ampere), DGX H100 and HGX H200 (Hopper), DGX B200 and GB200
NVL72 (Blackwell), on a NIC fabric.

A preset is ``N`` NVLink domains of ``G`` GPUs (rank = domain·G + gpu); a domain is what NCCL counts as a
node (it groups ranks by the NVLink domain its ring graph finds, src/init.cc: "NVLink domains"), a DGX box or
``G`` GPUs of a GB200 NVL72 rack (``gb200-nvl72:N@domain=G``, G up to 72). Inside domain ``n`` every GPU
links both ways to the switch ``node{n}`` (its NVLink ports to the NVSwitches, at the per-direction NVLink
bandwidth); between domains every GPU reaches the fabric's NICs (``sim.topology.fabrics``) through the
leaf switch of its *rail*, ``rail{g}`` (GPU g of every domain; the rail-aligned leaves of NVIDIA's DGX
SuperPOD reference architecture), and the leaves link both ways to a non-blocking ``spine``. A node of
``R`` NICs gives each of its ``G`` rails ``R/G`` of a NIC.

Each link carries a ``medium`` (``"nvlink"`` or ``"net"``, ``sim.engine.protocols.medium``) and the
topology's graph carries ``gpus_per_node``, ``system`` (the preset's name) and ``fabric`` (its figures), so
that hierarchical algorithms take the domain's size as their group (``node_size``) and the NCCL model
(``sim.machine.nccl``) knows the GPU generation and the network.

Link figures are line rates from the vendors' datasheets times the fraction NCCL reaches on them, never
fitted to measurements: on NVLink the rate NCCL's topology assigns each link of that generation
(src/graph/topo.h ``SMxx_NVLINK_BW``), on a NIC the fabric's efficiency. Latencies are NCCL's Simple ring
latency per step (src/graph/tuning.cc ``hwLat``), half per hop; other protocols rewrite the links
(``sim.engine.protocols.apply``). The architectures' NVSwitches that reduce (NVLS) carry ``SwitchCaps``
from NCCL's NVLS channel search and ``nvlsEfficiency`` (``Architecture.nvswitch``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import networkx as nx

from sim.topology.fabrics import FABRICS, IB_EFFICIENCY, Fabric, fabric_from_dict, with_options
from sim.topology.graph import Topology, TopologyError
from sim.topology.switches import DGX_NVSWITCH, NVLS_EFFICIENCY, NVLS_LATENCY, SwitchCaps, mark_switches

__all__ = ["AMPERE", "ARCHITECTURES", "BLACKWELL", "HOPPER", "IB_EFFICIENCY", "NVLINK_PROTOCOL_EFFICIENCY",
           "SYSTEMS", "Architecture", "GpuSystem", "fabric_of", "gpu_cluster", "node_size", "parse_options",
           "system_of"]


@dataclass(frozen=True)
class Architecture:
    """A GPU generation: its compute capability (which row of NCCL's tuning tables applies), its NVLink (links,
    GB/s per link per direction, the rate NCCL's topology assumes per link), and its NVSwitch's NVLS: the speed
    arrays NCCL's graph search picks an NVLS channel's rate from, and ``nvlsEfficiency``."""

    name: str
    compute_capability: int
    nvlink_generation: int
    nvlink_links: int
    nvlink_link_GBps: float
    nccl_link_GBps: float
    nvls: bool
    speeds_intra: tuple[float, ...] = ()
    """GB/s per channel NCCL's graph search tries inside a node, fastest first (src/graph/search.cc)."""
    speeds_inter: tuple[float, ...] = ()
    """... and across nodes."""
    nvls_efficiency: float = 0.0
    source: str = ""

    @property
    def nvlink_GBps(self) -> float:
        """NVLink line rate per GPU per direction, GB/s."""
        return self.nvlink_links * self.nvlink_link_GBps

    @property
    def nvlink_efficiency(self) -> float:
        """The fraction of the line rate NCCL's topology counts on (``SMxx_NVLINK_BW`` / the link's rate)."""
        return self.nccl_link_GBps / self.nvlink_link_GBps

    def nvls_channels(self, gpus: int) -> int:
        """NCCL's NVLS channels on ``gpus`` GPUs: one per head GPU, at most ``NCCL_MAX_NVLS_ARITY`` = 32
        (src/include/device.h; src/graph/search.cc sets the NVLS graph's maxChannels to min(32, GPUs))."""
        return min(32, gpus)

    def nvls_channel_GBps(self, gpus: int) -> float:
        """GB/s of one NVLS channel: the fastest speed of the architecture's intra-node speed array whose load
        fits a GPU's NVLink (``ncclTopoSearchTryNvls``: a channel loads its head GPU's link twice and every
        other GPU's once, so a head carries channels + 1 loads of ``nvlink_links x SMxx_NVLINK_BW``)."""
        if not self.nvls:
            return 0.0
        room = self.nvlink_links * self.nccl_link_GBps / (self.nvls_channels(gpus) + 1)
        return next((s for s in self.speeds_intra if s <= room), self.speeds_intra[-1])

    def nvswitch(self, gpus: int) -> SwitchCaps | None:
        """The ``SwitchCaps`` of a domain of ``gpus`` GPUs' NVSwitches, or None without NVLS: each GPU port moves
        (channels + 1) x the channel's rate x ``nvlsEfficiency`` of NVLS traffic per direction (8 H100s: 9 x 40 x
        0.85 = 306 GB/s; 8 B200s: 9 x 80 x 0.74 = 533 GB/s); an operation adds half of ``hwLat[NVLINK][NVLS]``."""
        if not self.nvls:
            return None
        ch = self.nvls_channels(gpus)
        speed = self.nvls_channel_GBps(gpus)
        if (self.compute_capability, ch, speed, self.nvls_efficiency) == (90, 8, 40.0, NVLS_EFFICIENCY):
            return DGX_NVSWITCH  # the same figures, with their own record (sim.topology.switches)
        return SwitchCaps(
            reduce=True, multicast=True, bandwidth=(ch + 1) * speed * 1e9 * self.nvls_efficiency,
            latency=NVLS_LATENCY / 2,
            source=f"{self.name} NVSwitch: NCCL src/graph/search.cc (NVLS channels: {ch + 1} x {speed:g} GB/s per "
                   f"GPU port) x src/graph/tuning.cc nvlsEfficiency {self.nvls_efficiency}; hwLat[NVLINK][NVLS] "
                   "25 us per ld_reduce + st pair")

AMPERE = Architecture(
    "Ampere", 80, 3, 12, 25.0, 20.0, nvls=False,
    # NVIDIA A100 datasheet: third-generation NVLink, 12 links, 600 GB/s bidirectional = 12 x 25 GB/s per
    # direction; NCCL src/graph/topo.h SM80_NVLINK_BW 20.0 GB/s per link. Its NVSwitch (2nd generation) does not
    # reduce: NCCL's NVLS search needs compute capability >= 90 (src/graph/search.cc), nvlsEfficiency[Ampere] 0.
    # Its graph search takes the generic speed arrays (src/graph/search.cc speedArrayIntra / speedArrayInter, 2.30).
    speeds_intra=(40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
    speeds_inter=(48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2),
    source="NVIDIA A100 datasheet (NVLink 3: 12 x 25 GB/s = 300 GB/s per direction); NCCL topo.h SM80_NVLINK_BW 20")
HOPPER = Architecture(
    "Hopper", 90, 4, 18, 25.0, 20.6, nvls=True,
    # NVIDIA H100/H200 datasheets: fourth-generation NVLink, 18 links, 900 GB/s bidirectional = 18 x 25 GB/s per
    # direction; NCCL topo.h SM90_NVLINK_BW 20.6 (18 x 20.6 = 370.8 GB/s, the maintainers' "effective NVLink
    # bandwidth of 370GB/s", nccl-tests issue 212). NVSwitch 3 reduces (NVLink SHARP). Graph speeds:
    # sm90SpeedArrayIntra / sm90SpeedArrayInter (src/graph/search.cc, 2.30); nvlsEfficiency[Hopper] 0.85
    # (src/graph/tuning.cc, 2.28+).
    speeds_intra=(60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
    speeds_inter=(48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2),
    nvls_efficiency=0.85,
    source="NVIDIA H100/H200 datasheets (NVLink 4: 18 x 25 GB/s = 450 GB/s per direction); NCCL topo.h "
           "SM90_NVLINK_BW 20.6; NVSwitch 3 NVLS")
BLACKWELL = Architecture(
    "Blackwell", 100, 5, 18, 50.0, 40.1, nvls=True,
    # NVIDIA DGX B200 / GB200 NVL72 datasheets: fifth-generation NVLink, 18 links, 1.8 TB/s bidirectional per GPU =
    # 18 x 50 GB/s per direction; NCCL topo.h SM100_NVLINK_BW 40.1. The NVLink 5 switch reduces (NVLS). Graph
    # speeds: sm100SpeedArrayIntra / sm100SpeedArrayInter (src/graph/search.cc, 2.30); nvlsEfficiency[Blackwell]
    # 0.74 (src/graph/tuning.cc, 2.28+).
    speeds_intra=(90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0),
    speeds_inter=(96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0),
    nvls_efficiency=0.74,
    source="NVIDIA DGX B200 / GB200 NVL72 datasheets (NVLink 5: 18 x 50 GB/s = 900 GB/s per direction); NCCL "
           "topo.h SM100_NVLINK_BW 40.1; NVLink 5 switch NVLS")
ARCHITECTURES: Mapping[str, Architecture] = {a.name.lower(): a for a in (AMPERE, HOPPER, BLACKWELL)}

NVLINK_PROTOCOL_EFFICIENCY = HOPPER.nvlink_efficiency
"""Hopper's fraction of NVLink's line rate NCCL reaches (20.6 / 25 = 0.824: 370.8 of 450 GB/s)."""


@dataclass(frozen=True)
class GpuSystem:
    """One node type: its architecture, GPUs per NVLink domain (``max_domain`` at most), and its NIC fabric.
    ``nvlink_efficiency`` None: the architecture's."""

    name: str
    gpu: str
    arch: Architecture
    gpus_per_node: int
    fabric: Fabric
    source: str
    max_domain: int = 0
    host: str = "x86"
    """The host CPU: ``x86`` (Intel: NCCL's multi-node LL rows and 1 us post overhead) or ``grace`` (Arm)."""
    nvlink_efficiency_override: float | None = field(default=None, compare=False)

    @property
    def compute_capability(self) -> int:
        return self.arch.compute_capability

    @property
    def nvls(self) -> bool:
        return self.arch.nvls

    @property
    def nvlink_GBps(self) -> float:
        return self.arch.nvlink_GBps

    @property
    def nvlink_efficiency(self) -> float:
        o = self.nvlink_efficiency_override
        return self.arch.nvlink_efficiency if o is None else o

    @property
    def nics_per_node(self) -> int:
        return self.fabric.nics(self.gpus_per_node)

    @property
    def nic_Gbps(self) -> float:
        return self.fabric.nic_Gbps

    @property
    def nic_efficiency(self) -> float:
        return self.fabric.efficiency

    @property
    def nvlink_bandwidth(self) -> float:
        """Effective bytes/s per direction per GPU on NVLink (line rate x NCCL's efficiency)."""
        return self.nvlink_GBps * 1e9 * self.nvlink_efficiency

    @property
    def nic_bandwidth(self) -> float:
        """Effective bytes/s per direction per NIC."""
        return self.fabric.nic_bandwidth

    def with_figures(self, *, nvlink_efficiency: float | None = None, nic_efficiency: float | None = None,
                     fabric: Fabric | None = None, gpus_per_node: int | None = None) -> GpuSystem:
        """This system with other figures (``collsched fit``, preset options)."""
        f = fabric or self.fabric
        if nic_efficiency is not None:
            f = replace(f, efficiency=nic_efficiency)
        return replace(self, fabric=f, gpus_per_node=gpus_per_node or self.gpus_per_node,
                       nvlink_efficiency_override=(nvlink_efficiency if nvlink_efficiency is not None
                                                   else self.nvlink_efficiency_override))


SYSTEMS: Mapping[str, GpuSystem] = {
    "dgx-h100": GpuSystem(
        "dgx-h100", "H100 SXM", HOPPER, 8, FABRICS["ib"],
        # DGX H100 datasheet: 8 H100 SXM, 4 NVSwitch chips; 8 single-port ConnectX-7 400 Gb/s for the compute fabric.
        "NVIDIA H100 Tensor Core GPU datasheet (NVLink 900 GB/s); DGX H100 datasheet (8x ConnectX-7 400 Gb/s)",
        max_domain=8),
    "hgx-h200": GpuSystem(
        "hgx-h200", "H200 SXM", HOPPER, 8, FABRICS["ib"],
        # H200 datasheet: the H100's NVLink 4 and NVSwitch; HGX/DGX H200 nodes carry 8 ConnectX-7 400 Gb/s NICs.
        "NVIDIA H200 Tensor Core GPU datasheet (NVLink 900 GB/s); DGX H200 datasheet (8x ConnectX-7 400 Gb/s)",
        max_domain=8),
    "dgx-a100": GpuSystem(
        "dgx-a100", "A100 SXM", AMPERE, 8, FABRICS["ib-hdr"],
        # DGX A100 datasheet: 8 A100 SXM, 6 NVSwitch chips; 8 single-port ConnectX-6 200 Gb/s HDR InfiniBand.
        "NVIDIA A100 Tensor Core GPU datasheet (NVLink 600 GB/s); DGX A100 datasheet (8x ConnectX-6 HDR 200 Gb/s)",
        max_domain=8),
    "dgx-b200": GpuSystem(
        "dgx-b200", "B200", BLACKWELL, 8, FABRICS["ib"],
        # DGX B200 datasheet: 8 B200, NVLink 5 at 1.8 TB/s per GPU (14.4 TB/s total); 8 ConnectX-7 400 Gb/s.
        "NVIDIA DGX B200 datasheet (NVLink 1.8 TB/s per GPU; 8x ConnectX-7 400 Gb/s)", max_domain=8),
    "gb200-nvl72": GpuSystem(
        "gb200-nvl72", "B200 (GB200)", BLACKWELL, 72, FABRICS["ib"],
        # GB200 NVL72 specifications: 72 Blackwell GPUs in one NVLink domain (18 compute trays of 4), 1.8 TB/s NVLink 5
        # per GPU, 130 TB/s per domain; a ConnectX-7 400 Gb/s NIC per GPU for the scale-out network.
        "NVIDIA GB200 NVL72 specifications (72 GPUs, NVLink 1.8 TB/s per GPU, 130 TB/s domain; 400 Gb/s per GPU)",
        max_domain=72, host="grace"),
}
"""The presets by SPEC name (``NAME:N`` is N of those domains)."""

SIMPLE_RING_NVLINK_STEP = 3.4e-6
"""NCCL's Simple ring step on NVLink: ``hwLat[NVLINK][RING][SIMPLE] = 3.4`` us (src/graph/tuning.cc)."""
SIMPLE_RING_NET_STEP = 14.0e-6
"""NCCL's Simple ring step on the network: ``hwLat[NET][RING][SIMPLE] = 14.0`` us (src/graph/tuning.cc,
NCCL 2.18 on)."""

OPTION_KEYS = ("domain", "fabric", "nics", "nic", "latency", "overhead", "efficiency")


def parse_options(system: GpuSystem, text: str) -> GpuSystem:
    """``system`` with the options of a SPEC's ``@key=value,...`` part: ``domain=G`` (GPUs per NVLink domain, at
    most the preset's), and the fabric's ``fabric``, ``nics``, ``nic``, ``latency``, ``overhead``, ``efficiency``
    (``sim.topology.fabrics.with_options``); ``TopologyError`` naming the option otherwise."""
    options: dict[str, str] = {}
    for item in (t for t in text.split(",") if t.strip()):
        key, eq, value = item.partition("=")
        key = key.strip().lower()
        if not eq or key not in OPTION_KEYS:
            raise TopologyError(f"{system.name}: option {item.strip()!r}: expected KEY=VALUE with KEY one of "
                                f"{', '.join(OPTION_KEYS)}")
        if key in options:
            raise TopologyError(f"{system.name}: option {key!r} is given twice")
        options[key] = value.strip()
    gpn = None
    if "domain" in options:
        d = options.pop("domain")
        if not d.isdigit() or not 1 <= int(d) <= system.max_domain:
            raise TopologyError(f"{system.name}: domain={d!r}: expected GPUs per NVLink domain, 1 to "
                                f"{system.max_domain}")
        gpn = int(d)
    return system.with_figures(fabric=with_options(system.fabric, options), gpus_per_node=gpn)


def gpu_cluster(system: str | GpuSystem, nodes: int, options: str = "") -> Topology:
    """``nodes`` NVLink domains of the preset ``system`` (module docstring), with the SPEC ``options``."""
    s = SYSTEMS[system] if isinstance(system, str) else system
    if options:
        s = parse_options(s, options)
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise TopologyError(f"{s.name}: nodes must be an integer >= 1, got {nodes!r}")
    gpn = s.gpus_per_node
    g = nx.DiGraph(gpus_per_node=gpn, system=s.name, fabric=s.fabric.to_dict())
    if s.nvlink_efficiency_override is not None:
        g.graph["nvlink_efficiency"] = s.nvlink_efficiency
    g.add_nodes_from(range(nodes * gpn))
    nvl, nvl_lat = s.nvlink_bandwidth, SIMPLE_RING_NVLINK_STEP / 2
    for n in range(nodes):
        for i in range(gpn):
            r = n * gpn + i
            g.add_edge(r, f"node{n}", bandwidth=nvl, latency=nvl_lat, medium="nvlink")
            g.add_edge(f"node{n}", r, bandwidth=nvl, latency=nvl_lat, medium="nvlink")
    if nodes > 1:
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
    topo = Topology(g, f"{s.name}:{nodes}" + (f"@{options}" if options else ""))
    caps = s.arch.nvswitch(gpn)
    if caps is not None and gpn > 1:
        topo = mark_switches(topo, caps, lambda n: str(n).startswith("node"))
    return topo


def node_size(topology: Topology) -> int | None:
    """GPUs per node (NVLink domain) of a topology that knows its nodes (a GPU preset), else None."""
    n = topology.graph.graph.get("gpus_per_node")
    return int(n) if isinstance(n, int) and n >= 1 and topology.ranks % n == 0 else None


def fabric_of(topology: Topology) -> Fabric | None:
    """The NIC fabric a GPU preset's graph records (``nodes.fabric`` in a machine file), else the preset's."""
    doc = topology.graph.graph.get("fabric")
    if isinstance(doc, dict):
        return fabric_from_dict(doc, "topology.nodes.fabric")
    s = system_of(topology)
    return s.fabric if s is not None else None


def system_of(topology: Topology) -> GpuSystem | None:
    """The preset a topology was built from, with its graph's domain size and fabric, or None."""
    name = topology.graph.graph.get("system")
    s = SYSTEMS.get(name) if isinstance(name, str) else None
    if s is None:
        return None
    gpn = node_size(topology)
    doc = topology.graph.graph.get("fabric")
    fabric = fabric_from_dict(doc, "topology.nodes.fabric") if isinstance(doc, dict) else None
    eff = topology.graph.graph.get("nvlink_efficiency")
    return s.with_figures(fabric=fabric, gpus_per_node=gpn,
                          nvlink_efficiency=float(eff) if isinstance(eff, int | float) else None)
