"""NCCL's tuning model, by release: the latency and bandwidth of every (algorithm, protocol), and its pick.

``tuning(kind, system, nodes, ranks, topology, version=...)`` restates ``ncclTopoTuneModel`` of that release
(src/graph/tuning.cc; src/tuning/*.cc in 2.31; the constants and the rules that changed between releases are in
``sim.machine.nccl_versions``), and ``model_time`` its ``ncclTopoGetAlgoTime``: a latency plus the size over an
algorithm bandwidth, with the tree's size correction and the ring's plateau. ``choose`` picks, as NCCL does,
the pair of least modelled time; ``NCCL_ALGO``/``NCCL_PROTO`` are ``algo=``/``proto=``.

The model's inputs are what NCCL's graph search finds on the machine (``NcclGraphs``), derived here from the
preset's figures rather than searched: ring and tree channels (``model_channels``: 2 per GPU of a node, as
NCCL's search reaches on DGX-class nodes with 2 channels per NIC, src/transport/net.cc
``NCCL_NCHANNELS_PER_NET_PEER``), each at an equal share of NVLink's effective rate (and, across nodes, of
the node's NICs'); NVLS channels, one per GPU of the domain (at most 32), at the architecture's NVLS channel
speed (``sim.topology.gpus.Architecture``); the network's reported latency (``latencyInter``) and post
overhead from the fabric (``sim.topology.fabrics``). A fitted machine (``collsched fit``) carries its own
rates in its links and its latency factors in ``nodes.nccl`` (``latency_factors``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from algorithms.ir import Kind
from sim.engine.protocols import PROTOCOLS, ProtocolModel, parse_protocol
from sim.machine.nccl_versions import NcclVersion, version
from sim.topology.gpus import GpuSystem, fabric_of, node_size, system_of
from sim.topology.graph import Topology

__all__ = ["CHOICES", "LaunchShape", "NcclChoice", "NcclGraphs", "NcclRun", "choose", "graphs", "latency_factors",
           "launch_shape", "model_channels", "model_time", "ring_search", "topology_version", "tuning"]

CHOICES = ("ring", "tree", "pat", "nvls", "nvls_tree")
"""The algorithms ``algo=`` forces (NCCL_ALGO's names, lower case; collnet needs a SHARP network: not modelled)."""

TREE_CORRECTION = {
    # src/graph/tuning.cc, treeCorrectionFactor[protocol][log2(bytes / 64)], 64 B to 512 MiB (24 entries since 2.29;
    # 23 before: the last one only reaches NVLSTree on Blackwell, which 2.29 added).
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
}
RING_PLATEAU = {70: 1.9, 80: 1.4}
"""An inter-node Simple ring all-reduce's latency x1.4 (x1.9 before Ampere) once each rank's share per channel
reaches 64 bytes (src/graph/tuning.cc, ``ncclTopoGetAlgoTime``, "plateau effect of ring")."""
CHANNELS_PER_NIC = 2
"""NCCL drives each NIC with 2 channels (src/transport/net.cc, ``NCCL_NCHANNELS_PER_NET_PEER`` default 2)."""
THREAD_THRESHOLD = {"LL": 8, "LL128": 8, "Simple": 64}
"""Bytes of a call each thread must have before NCCL adds channels and threads (src/include/comm.h,
``NCCL_{LL,LL128,SIMPLE}_THREAD_THRESHOLD``); the ring's LL threshold is x nRanks (src/graph/tuning.cc)."""
MAX_THREADS = {"LL": 512, "LL128": 640, "Simple": 512}
"""Threads of a channel's block per protocol (src/include/device.h: ``NCCL_LL_MAX_NTHREADS`` 512,
``NCCL_LL128_MAX_NTHREADS`` 640, ``NCCL_SIMPLE_MAX_NTHREADS`` 512, the ring's Simple default on NVLink)."""
ALL_THREADS = 640
"""``NCCL_MAX_NTHREADS``: the tree's (2.22 on) and PAT's block whatever the size (src/enqueue.cc)."""


@dataclass(frozen=True)
class LaunchShape:
    """What NCCL launches for one call (src/enqueue.cc, ``topoGetAlgoInfo``): ``channels`` of the communicator's
    ``of`` and ``threads`` per block, and ``share``, the fraction of the full launch's bandwidth they drive
    (``channels`` / ``of``)."""

    channels: int
    of: int
    threads: int
    share: float


def launch_shape(algorithm: str, protocol: str, size: float, ranks: int, channels: int,
                 nccl_version: str | None = None) -> LaunchShape:
    """The channels and threads NCCL runs ``algorithm``/``protocol`` with at ``size`` bytes (the call's largest
    buffer, ``ncclFuncMaxSendRecvCount``) on ``channels``: while the size is under channels x threads x the
    protocol's per-thread threshold it drops a channel, down to one, then halves the threads while a multiple of
    128, and never goes under 3 warps. NVLS keeps its own channels; the tree (2.22 on) and PAT keep every thread.
    Each channel is a block that moves its share of the call at its own rate, so ``share`` scales the protocol's
    bandwidth: NCCL's own model prices every call at the full launch, which at mid sizes it does not run (one LL
    ring channel of 12 on an 8-GPU node up to 32 KiB, 8 at 256 KiB). The threads are not priced: measured, the
    1-node H100 table's 8-16 KiB (one channel, 128-256 threads) take what one channel of 512 does (pricing
    them x threads / 512 gave +10-13% there and +17-23% on the 2-node B200 all-gather's 16-64 KiB)."""
    if algorithm in ("nvls", "nvls_tree") or protocol not in MAX_THREADS:
        return LaunchShape(channels, channels, ALL_THREADS, 1.0)
    v = version(nccl_version)
    full = MAX_THREADS[protocol]
    threshold = THREAD_THRESHOLD[protocol] * (ranks if algorithm == "ring" and protocol == "LL" else 1)
    nc, nt = max(1, channels), full
    while size < nc * nt * threshold and nc >= 2:
        nc -= 1
    while size < nc * nt * threshold and nt % 128 == 0:
        nt //= 2
    nt = max(nt, 3 * 32)
    if algorithm == "pat" or (algorithm == "tree" and v.tree_all_threads):
        nt = full
    return LaunchShape(nc, max(1, channels), nt, nc / max(1, channels))


def model_channels(system: GpuSystem) -> int:
    """The ring and tree channel count of our model of NCCL (``CHANNELS_PER_NIC`` per GPU of a node, at most
    32, NCCL's ``MAXCHANNELS`` / 2 for collectives)."""
    return min(32, CHANNELS_PER_NIC * min(system.gpus_per_node, 16))


def latency_factors(topology: Topology | None) -> dict[str, float]:
    """Per protocol, the factor on NCCL's latencies a fitted machine carries (``nodes.nccl.latency`` by protocol,
    or the older one ``nccl_latency_scale`` for all; 1 for the presets)."""
    out = dict.fromkeys(PROTOCOLS, 1.0)
    if topology is None:
        return out
    g = topology.graph.graph
    if "nccl_latency_scale" in g:
        out = dict.fromkeys(PROTOCOLS, float(g["nccl_latency_scale"]))
    fitted = g.get("nccl", {}).get("latency", {}) if isinstance(g.get("nccl"), dict) else {}
    for p, v in fitted.items():
        if p in out:
            out[p] = float(v)
    return out


def topology_version(topology: Topology | None) -> str | None:
    """The NCCL release a fitted machine was fitted with (``nodes.nccl.version``), or None."""
    if topology is None:
        return None
    doc = topology.graph.graph.get("nccl")
    v = doc.get("version") if isinstance(doc, dict) else None
    return v if isinstance(v, str) else None


@dataclass(frozen=True)
class NcclGraphs:
    """What NCCL's graph search gives its tuning on a machine (module docstring): GB/s per channel."""

    channels: int
    ring_intra: float
    ring_inter: float
    tree_intra: float
    tree_inter: float
    nvls_channels: int
    nvls_intra: float
    nvls_inter: float
    latency_inter: float
    """us: the network's reported latency (``graphs[a]->latencyInter``)."""
    net_overhead: float
    """us: the proxy's post overhead per step (``getNetOverhead``, ``NCCL_NET_OVERHEAD``)."""


def ring_search(total: float, speeds: tuple[float, ...], cc: int, *, channels_at: float | None = None,
                max_channels: int = 16) -> tuple[int, float]:
    """(channels, GB/s each) of NCCL's ring graph search (src/graph/search.cc, ``ncclTopoCompute``) where each
    channel costs its speed of a budget of ``total`` GB/s: from the fastest speed down, the most channels that
    fit (``channels_at``: at most one per that many GB/s of a NIC), keeping the best channels x speed, done when it
    reaches ``total``, giving up once a speed is below 0.49 of the best's; then ``ncclTopoDupChannels`` doubles the
    channels at half the speed unless the speed is below 25 GB/s, or below 50 with more than 4 channels from
    Hopper on."""
    best_n, best_s = 0, 0.0
    for speed in speeds:
        if best_n and speed / best_s <= 0.49:
            break
        n = min(max_channels, int(total // speed))
        if channels_at is not None:
            n = min(n, int(channels_at // speed))
        if n >= 1 and n * speed > best_n * best_s:
            best_n, best_s = n, speed
        if best_n * best_s >= total:
            break
    if best_n == 0:
        return 1, speeds[-1]
    if best_s >= 25.0 and not (cc > 80 and best_s < 50.0 and best_n > 4):
        best_n, best_s = min(2 * best_n, 2 * max_channels), best_s / 2
    return best_n, best_s


def graphs(system: GpuSystem, nodes: int, topology: Topology | None = None) -> NcclGraphs:
    """NCCL's graph figures on ``nodes`` domains of ``system`` (module docstring): its own view of the hardware
    (line rates, NCCL's per-link NVLink figure), so that a fitted machine's rates change the simulation but not
    NCCL's choice; the fabric (latency, overhead) from ``topology`` when given."""
    arch, gpn, cc = system.arch, system.gpus_per_node, system.compute_capability
    nvl = arch.nvlink_links * arch.nccl_link_GBps
    fabric = (fabric_of(topology) if topology is not None else None) or system.fabric
    nics = fabric.nics(gpn)
    nic_line = fabric.nic_Gbps / 8
    if nodes == 1:
        ch, ring = ring_search(nvl, arch.speeds_intra, cc)
        ring_inter = tree_inter = tree_intra = ring
    else:
        # Each channel leaves the node through one NIC: at most as many channels per NIC as its line rate holds
        # at the speed, and the node's channels share each GPU's NVLink.
        per_nic, speed = ring_search(nic_line, arch.speeds_inter, cc, channels_at=nic_line, max_channels=16)
        ch = min(16, max(1, per_nic * nics))
        ring = ring_inter = tree_inter = min(speed, nvl / ch)
        # The tree may double its intra-node rate over the inter-node one (search.cc pass 2, "increase bwIntra for
        # trees") where NVLink holds it.
        tree_intra = max([tree_inter, *(x for x in arch.speeds_inter if x <= min(2 * tree_inter, nvl / ch))])
    nch = arch.nvls_channels(gpn) if system.nvls and gpn > 1 else 0
    nvls = arch.nvls_channel_GBps(gpn)
    # NVLS: the search then raises bwInter while below twice bwIntra (search.cc, pass 2), on one node up to the
    # intra speed array's top (no NIC bounds it), across nodes as far as a NIC's line rate per channel allows.
    if nodes == 1:
        nvls_inter = max((x for x in arch.speeds_intra if x < 2 * nvls), default=nvls)
    else:
        nvls_inter = max((x for x in arch.speeds_inter if x < 2 * nvls and x <= nic_line * nics / max(nch, 1)),
                         default=nvls)
    return NcclGraphs(ch, ring, ring_inter, tree_intra, tree_inter, nch, nvls, nvls_inter, fabric.latency_us,
                      fabric.overhead_us)


@dataclass(frozen=True)
class NcclChoice:
    """One (algorithm, protocol) of NCCL's model: latency (us), algorithm bandwidth (GB/s), time (s), channels,
    and the release modelled."""

    algorithm: str
    protocol: str
    latency_us: float
    algbw_GBps: float
    time_s: float
    channels: int
    version: str = ""


@dataclass
class NcclRun:
    """A simulated NCCL call: NCCL's pick (``nccl``), the pair simulated (``simulated``, the same unless the pick
    has no schedule here), the schedule's registry name, the protocol model, and the engine's result."""

    nccl: NcclChoice
    simulated: NcclChoice
    schedule: str
    model: ProtocolModel
    result: Any
    notes: list[str] = field(default_factory=list)

    @property
    def time(self) -> float:
        return float(self.result.time)



_ALGOS: Mapping[Kind, tuple[str, ...]] = {
    Kind.ALLREDUCE: ("ring", "tree", "nvls", "nvls_tree"), Kind.ALLGATHER: ("ring", "pat", "nvls"),
    Kind.REDUCESCATTER: ("ring", "pat", "nvls"), Kind.BROADCAST: ("ring",), Kind.REDUCE: ("ring",)}


def _steps(kind: Kind, ranks: int) -> int:
    if kind is Kind.ALLREDUCE:
        return 2 * (ranks - 1)
    return ranks - 1 if kind in (Kind.ALLGATHER, Kind.REDUCESCATTER) else ranks


def _enabled(v: NcclVersion, kind: Kind, a: str, p: str, system: GpuSystem, nodes: int, ranks: int) -> bool:
    """Whether ``v`` considers (a, p) for ``kind`` on this machine (tuning.cc's skips and algoEnable/protoEnable)."""
    if a in ("nvls", "nvls_tree", "pat") and p != "Simple":
        return False
    if a == "pat" and (not v.pat or nodes != ranks):
        return False  # PAT from 2.23, with one GPU per node only (ncclPatEnable)
    if a in ("nvls", "nvls_tree") and not system.nvls:
        return False  # no NVSwitch reduction (the NVLS graph needs compute capability >= 90)
    if a == "nvls" and (nodes > 1 or (kind is not Kind.ALLREDUCE and not v.nvls_allgather)):
        return False  # across nodes only with CollNet (not modelled); all-gather/reduce-scatter from 2.19
    if a == "nvls_tree" and nodes == 1:
        return False
    if p == "LL128" and system.compute_capability >= 100 and not v.blackwell_ll128:
        return False
    return True


def _busbw(v: NcclVersion, kind: Kind, a: str, p: str, g: NcclGraphs, system: GpuSystem, nodes: int,
           ranks: int) -> float:
    cc = system.compute_capability
    col = min(nodes, 3) - 1
    ppn = ranks / nodes
    if a in ("nvls", "nvls_tree"):
        return _nvls_busbw(v, kind, a, g, cc, nodes, ppn)
    if a == "ring":
        bw = g.ring_inter if (nodes > 1 if v.split_bw else nodes > 2) else g.ring_intra
    elif a == "tree" and v.split_bw:
        bw = min(g.tree_intra, g.tree_inter)
    else:
        bw = g.tree_intra if nodes <= 2 else g.tree_inter
    busbw = g.channels * bw
    ll_max = v.row(v.ll_max_bw, cc)[0] if nodes == 1 else v.ll_max_bw_intel[col]
    if a == "ring" and p == "LL":
        wide = kind in (Kind.ALLREDUCE, Kind.REDUCE) or nodes > 1
        busbw = min(ll_max, busbw * v.ring_ll_factor[0 if wide else 1])
    if a == "ring" and p == "LL128":
        share = v.ring_ll128_one_ppn if ppn < 2 else v.ring_ll128
        busbw = min(busbw * share, g.channels * v.row(v.per_ch_ring_ll128, cc)[col])
    if a == "tree" and kind is Kind.ALLREDUCE:
        busbw = min(busbw * 0.92, g.channels * v.row(v.per_ch_tree, cc)[col])
    if a == "tree" and p == "LL":
        busbw = min(busbw / 3.8, ll_max)
    if a == "tree" and p == "LL128":
        busbw = min(busbw * (7 / 9 if nodes == 1 else 120 / 128), g.channels * v.row(v.per_ch_tree_ll128, cc)[col])
    if a == "pat":
        busbw = min(g.tree_intra, g.tree_inter) * g.channels * v.pat
    # bus to algorithm bandwidth
    if a == "ring":
        busbw *= ranks / _steps(kind, ranks)
    elif kind is Kind.ALLREDUCE:
        busbw *= 0.5
    return busbw


def _nvls_busbw(v: NcclVersion, kind: Kind, a: str, g: NcclGraphs, cc: int, nodes: int, ppn: float) -> float:
    """NVLS and NVLSTree's algorithm bandwidth (GB/s) in ``v``'s model."""
    ch = g.nvls_channels
    if ch < 2:
        return 0.0
    ranks = int(ppn * nodes)
    if v.nvls_model == "efficiency":  # 2.28 on
        intra = g.nvls_intra * v.row_value(v.nvls_efficiency, cc) * (ch - 1) / ch
        intra *= 2.0 if kind is Kind.ALLREDUCE else (ppn - 1) / ppn
        inter = g.nvls_inter * (2 if nodes <= 2 and a == "nvls_tree" else 1)
        cap = v.row(v.per_ch_nvls_tree, cc)[min(nodes, 3) - 1] if a == "nvls_tree" else math.inf
        return ch * min(intra, inter, cap) * ranks / _steps(kind, ranks)
    if v.nvls_model == "min":  # 2.19 to 2.27
        if a == "nvls":
            bw = min(g.nvls_intra, g.nvls_inter)
        else:
            bw = min(g.nvls_intra, g.nvls_inter if nodes <= 2 else g.nvls_inter / 2)
        return ch * bw * 5 / 6
    bw = g.nvls_intra if nodes <= 2 else g.nvls_inter  # 2.18
    ratio = 5 / 6 if a == "nvls" else 0.70 * nodes / (2 * (nodes - 1))
    return ch * bw * ratio


def _latency(v: NcclVersion, kind: Kind, a: str, p: str, g: NcclGraphs, nodes: int, ranks: int) -> float:
    """Microseconds of NCCL's latency for (a, p) in ``v``'s model."""
    ppn = ranks / nodes
    nsteps = _steps(kind, ranks)
    hw = v.hw_latency
    intra_hw = hw["nvlink"]
    lat = v.base_latency[a][p]
    intra = intra_hw[a][p]
    if v.split_bw and nodes == 1:
        inter = intra
    else:
        inter = hw["net"]["tree" if (ppn == 1 and v.ppn1_tree_net_latency) else a][p]
    inter += g.latency_inter * (2 if p == "Simple" else 1)
    if a == "ring":
        if kind in (Kind.BROADCAST, Kind.REDUCE):
            return lat + (hw["nvlink"] if nodes == 1 else hw["net"])[a][p]
        if nodes > 1:
            intra = max(intra, g.net_overhead * (3 if p == "Simple" else 1))
        if nodes == 1:
            n_inter = 0
        elif kind is Kind.ALLREDUCE:
            n_inter = 2 * nodes if v.inter_steps_2n else 2 * (nodes - 1)
        else:
            n_inter = nodes - 1
        return lat + (nsteps - n_inter) * intra + n_inter * inter
    log_nodes = int(math.log2(nodes))
    if a == "tree":
        return lat + 2 * ((ranks // nodes - 1) * intra + log_nodes * inter) if kind is Kind.ALLREDUCE else lat
    if v.nvls_model == "2.18" and a in ("nvls", "nvls_tree"):
        net = hw["net"][a][p]
        return lat + ((net if nodes > 1 else 0.0) if a == "nvls" else 2 * (nodes - 1) * net)
    if a == "nvls":
        return intra + (inter if nodes > 1 else 0.0)
    if a == "nvls_tree":
        return lat + intra + 2 * log_nodes * inter
    return lat + log_nodes * (inter / 3.5) + ranks * 2.8  # pat


def tuning(kind: Kind | str, system: GpuSystem, nodes: int, ranks: int, topology: Topology | None = None, *,
           nccl_version: str | None = None) -> dict[tuple[str, str], tuple[float, float]]:
    """NCCL's model per (algorithm, protocol) for ``kind``: (latency us, algorithm GB/s before the size's
    corrections); only the pairs NCCL would consider on this machine. ``topology``: take the link rates, the
    fabric and the latency factors from it (a fitted machine), else the preset's. ``nccl_version``: the release
    (``sim.machine.nccl_versions``; default: a fitted machine's, else the newest)."""
    kind = Kind(kind)
    v = version(nccl_version or topology_version(topology))
    g = graphs(system, nodes, topology)
    factors = latency_factors(topology)
    out: dict[tuple[str, str], tuple[float, float]] = {}
    for a in _ALGOS.get(kind, ()):
        for p in PROTOCOLS:
            if not _enabled(v, kind, a, p, system, nodes, ranks):
                continue
            bw = _busbw(v, kind, a, p, g, system, nodes, ranks)
            if bw <= 0:
                continue
            out[(a, p)] = (_latency(v, kind, a, p, g, nodes, ranks) * factors[p], bw)
    return out


def model_time(kind: Kind, a: str, p: str, lat: float, bw: float, size: float, nodes: int, ranks: int,
               channels: int, cc: int, nccl_version: str | None = None, *, x86: bool = True) -> float:
    """Seconds of NCCL's ``ncclTopoGetAlgoTime`` for one call of ``size`` bytes: ``lat`` us plus the size at ``bw``
    GB/s, with the tree's size correction (and NVLSTree's on Blackwell x86 hosts, from 2.29) and the ring's
    plateau."""
    v = version(nccl_version)
    log_size = int(math.log2(size)) - 6 if size >= 64 else -1
    if a == "tree" and kind is Kind.ALLREDUCE and 0 <= log_size < 23:
        bw *= TREE_CORRECTION[p][log_size]
    if (a == "nvls_tree" and kind is Kind.ALLREDUCE and 0 <= log_size < 24 and cc >= 100 and x86
            and v.nvls_tree_correction_blackwell):
        bw *= TREE_CORRECTION[p][log_size]
    if a == "ring" and p == "Simple" and nodes > 1 and kind is Kind.ALLREDUCE and size / (channels * ranks) >= 64:
        lat *= RING_PLATEAU[80 if cc >= 80 else 70]
    return lat * 1e-6 + size / (bw * 1e9)


def choose(kind: Kind | str, topology: Topology, size: float, *, algo: str | None = None,
           proto: str | None = None, available: tuple[str, ...] | None = None,
           nccl_version: str | None = None) -> NcclChoice:
    """NCCL's pick for ``kind`` at ``size`` bytes on a GPU preset: the least modelled time among the pairs
    that ``algo``/``proto`` allow (and, given ``available``, among those algorithms only)."""
    kind = Kind(kind)
    system = system_of(topology)
    gpn = node_size(topology)
    if system is None or gpn is None:
        raise ValueError(f"{topology.name}: the NCCL model needs a GPU preset (dgx-h100:N, hgx-h200:N, ...)")
    nodes, ranks = topology.ranks // gpn, topology.ranks
    if proto is not None:
        proto = parse_protocol(proto)
    if algo is not None and algo not in CHOICES:
        raise ValueError(f"algo={algo!r}: expected one of {', '.join(CHOICES)}")
    name = version(nccl_version or topology_version(topology)).name
    table = tuning(kind, system, nodes, ranks, topology, nccl_version=name)
    if not table:
        raise ValueError(f"the NCCL model covers allreduce, allgather, reducescatter, broadcast and reduce, not "
                         f"{kind.value}")
    cc, g = system.compute_capability, graphs(system, nodes, topology)
    x86 = system.host == "x86"
    best: NcclChoice | None = None
    for (a, p), (lat, bw) in table.items():
        if (algo is not None and a != algo) or (proto is not None and p != proto):
            continue
        if available is not None and a not in available:
            continue
        channels = g.nvls_channels if a.startswith("nvls") else g.channels
        t = model_time(kind, a, p, lat, bw, size, nodes, ranks, g.channels, cc, name, x86=x86)
        if best is None or t < best.time_s:
            best = NcclChoice(a, p, lat, bw, t, channels, name)
    if best is None:
        what = "/".join(x for x in (algo, proto) if x) or "any algorithm"
        raise ValueError(f"NCCL {name} runs no {what} for {kind.value} on {topology.name}")
    return best


def describe(choice: NcclChoice, size: float) -> dict[str, Any]:
    """NCCL's prediction for ``choice`` at ``size`` bytes, term by term (what ``simulate -a nccl`` prints)."""
    return {"version": choice.version, "algorithm": choice.algorithm, "protocol": choice.protocol,
            "channels": choice.channels, "latency_us": choice.latency_us, "algbw_GBps": choice.algbw_GBps,
            "time_s": choice.time_s}
