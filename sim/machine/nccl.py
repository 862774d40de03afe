"""What NCCL would run, and its simulation: NCCL's tuning model (``-a nccl``) on a GPU preset.

``tuning(kind, system, nodes, ranks)`` is NCCL's cost model of every (algorithm, protocol), re-derived from
src/graph/tuning.cc (``ncclTopoTuneModel`` and ``ncclTopoGetAlgoTime``): a latency (base + per step by link
type) and a bus bandwidth (channels x per-channel bandwidth, then the protocol's refinements and caps),
in our own words and with the preset's figures. ``choose`` picks, as NCCL does, the (algorithm, protocol)
of least modelled time for a size; ``NCCL_ALGO``/``NCCL_PROTO`` are ``algo=``/``proto=``.

The choice is then *simulated*, not returned as the answer: ``simulate_nccl`` builds that algorithm's
schedule from the registry (``nccl_ring`` over rail-matched channels, ``nccl_tree``, ``pat``, ``nvls``,
``nvls_tree`` where registered; the textbook ring, chain or double binary tree where not) and runs it on
the topology rewritten for the protocol (``sim.engine.protocols.apply``): NCCL's base latency at launch,
its per-step latency per hop, and the protocol's bandwidth as a factor on every link, the ratio of the
protocol's modelled bus bandwidth to Simple's (LL's half and its cap, LL128's 120/128 and per-channel cap).
An algorithm NCCL picks that is not registered (NVLS before in-switch reduction exists) is reported
(``NcclRun.nccl``) and the best registered one simulated instead (``NcclRun.simulated``). NCCL's pipelined
schedules (NVLS, NVLS-tree, the tree) run in lockstep mode, the tree in both modes (``PIPELINE_MODES``: NCCL moves
their chunks in step order, where dataflow's fair sharing would run them all at once).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from algorithms import registry
from algorithms.errors import CollschedError
from algorithms.ir import ROOTED_KINDS, Kind, Schedule
from sim.engine.options import EngineOptions
from sim.engine.protocols import (
    BASE_LATENCY_US,
    HW_LATENCY_US,
    NET_OVERHEAD_US,
    PROTOCOLS,
    ProtocolModel,
    apply,
    parse_protocol,
)
from sim.topology.gpus import GpuSystem, node_size, system_of
from sim.topology.graph import Topology

__all__ = ["CHOICES", "PIPELINE_MODES", "NcclChoice", "NcclRun", "choose", "model_channels", "simulate_nccl",
           "tuning"]

CHOICES = ("ring", "tree", "pat", "nvls", "nvls_tree")
"""The algorithms ``algo=`` forces (NCCL_ALGO's names, lower case; collnet needs a SHARP network: not modelled)."""

# src/graph/tuning.cc, ncclTunerConstantsDefaults; rows by compute capability (Volta, Ampere, Hopper, Blackwell),
# columns by node count (1, 2, >= 3 nodes). llMaxBws' rows for more than one node are by CPU (Intel, AMD): the
# presets' hosts are Intel (DGX H100/H200/A100/B200) and Grace (GB200, counted as Intel: NCCL's index1 is 0
# for every CPU that is not AMD).
LL_MAX_BW = {70: (39.0, 39.0, 20.4), 80: (87.7, 22.5, 19.0), 90: (141.0, 45.0, 35.0), 100: (282.0, 90.0, 70.0)}
LL_MAX_BW_MULTI_NODE_INTEL = (39.0, 39.0, 20.4)
PER_CH_MAX_RING_LL128 = {70: (20.0,) * 3, 80: (20.0,) * 3, 90: (36.7,) * 3, 100: (40.0,) * 3}
PER_CH_MAX_TREE_LL128 = {70: (20.0,) * 3, 80: (20.0,) * 3, 90: (36.7, 36.7, 29.0), 100: (55.6, 31.67, 20.0)}
PER_CH_MAX_TREE = {70: (26.5, 18.5, 10.0), 80: (24.0, 23.6, 17.8), 90: (38.7, 41.4, 36.0), 100: (70.0, 42.8, 24.0)}
PER_CH_MAX_NVLS_TREE = {70: (26.5, 18.5, 10.0), 80: (24.0, 23.6, 17.8), 90: (0.0, 57.7, 45.5), 100: (0.0, 96.0, 80.0)}
NVLS_EFFICIENCY = {70: 0.0, 80: 0.0, 90: 0.85, 100: 0.74}
"""src/graph/tuning.cc, ``nvlsEfficiency`` by compute capability."""
TREE_CORRECTION = {
    # src/graph/tuning.cc, treeCorrectionFactor[protocol][log2(bytes / 64)], 64 B to 256 MiB.
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
}
NVLS_CHUNK = 128 * 1024
"""NCCL's NVLS chunk size, 128 KiB (src/transport/nvls.cc, ``NCCL_NVLS_CHUNKSIZE`` default)."""
TREE_CHUNK = (4 << 20) // 8
"""NCCL's tree chunk: one step of the Simple buffer, 4 MiB (src/init.cc, ``DEFAULT_BUFFSIZE``) over ``NCCL_STEPS`` = 8
steps (src/include/device.h), ``chunkSteps`` 1 for every algorithm but the ring (src/enqueue.cc): 512 KiB."""
LL_STEP = 8 * 512 * 8 * 16 // 8
"""LL's step: ``NCCL_LL_LINES_PER_THREAD`` 8 x ``NCCL_LL_MAX_NTHREADS`` 512 x ``NCCL_STEPS`` 8 lines of 16 bytes
(src/include/device.h, ``DEFAULT_LL_BUFFSIZE`` in src/init.cc), over 8 steps: 64 KiB, half of it data."""
LL128_STEP = 120 * 640 * 8 * 8 // 8
"""LL128's step: ``NCCL_LL128_ELEMS_PER_THREAD`` 120 x ``NCCL_LL128_MAX_NTHREADS`` 640 x ``NCCL_STEPS`` 8 eight-byte
elements (src/init.cc, ``DEFAULT_LL128_BUFFSIZE``), over 8 steps: 614,400 bytes, 15 of every 16 elements data."""
TREE_STAGES = 64
"""At most this many chunks per tree in ``nccl_tree`` (its transfers grow with them: 2 (p - 1) per chunk and tree);
64 keeps the pipeline's fill and drain (2 x the tree's height, 8 to 30 steps) a small part of the run."""
RING_PLATEAU = 1.4
"""An inter-node Simple ring all-reduce's latency x1.4 once each rank's share per channel reaches 64 bytes, on
compute capability >= 80 (src/graph/tuning.cc, ``ncclTopoGetAlgoTime``, "plateau effect of ring")."""
CHANNELS_PER_NIC = 2
"""NCCL drives each NIC with 2 channels (src/transport/net.cc, ``NCCL_NCHANNELS_PER_NET_PEER`` default 2);
our model of NCCL's channel count is 2 per rail (GPU of a node), which is what its ring graph search reaches
on DGX-class nodes (16 channels of 8 GPUs)."""


def _cc_row(cc: int) -> int:
    return 100 if cc >= 100 else 90 if cc >= 90 else 80 if cc >= 80 else 70


def model_channels(system: GpuSystem) -> int:
    """The channel count of our model of NCCL (``CHANNELS_PER_NIC`` per GPU of a node, at most 32)."""
    return min(32, CHANNELS_PER_NIC * min(system.gpus_per_node, 16))


def latency_scale(topology: Topology | None) -> float:
    """The factor on every NCCL latency a fitted machine carries (``collsched fit``; 1 for the presets)."""
    s = topology.graph.graph.get("nccl_latency_scale", 1.0) if topology is not None else 1.0
    return float(s)


def _link_bw(topology: Topology | None, u: object, v: object) -> float | None:
    if topology is None or not topology.graph.has_edge(u, v):
        return None
    return float(topology.graph.edges[u, v]["bandwidth"])


def _simple_busbw(system: GpuSystem, nodes: int, topology: Topology | None = None) -> float:
    """GB/s: NCCL's nChannels x bw of the ring graph, the preset's own figures: NVLink's effective rate per
    GPU inside a node; across nodes also each node's NICs' together (each rail-matched channel crosses one
    NIC, so a rank's channels add up to every NIC of its node)."""
    nvl = _link_bw(topology, 0, "node0") or system.nvlink_bandwidth
    bw = nvl / 1e9
    if nodes > 1:
        nic = _link_bw(topology, 0, "rail0") or system.nic_bandwidth
        bw = min(bw, nic * system.nics_per_node / 1e9)
    return bw


@dataclass(frozen=True)
class NcclChoice:
    """One (algorithm, protocol) of NCCL's model: latency (us), algorithm bandwidth (GB/s), time (s)."""

    algorithm: str
    protocol: str
    latency_us: float
    algbw_GBps: float
    time_s: float
    channels: int


def tuning(kind: Kind | str, system: GpuSystem, nodes: int, ranks: int,
           topology: Topology | None = None) -> dict[tuple[str, str], tuple[float, float]]:
    """NCCL's model per (algorithm, protocol) for ``kind``: (latency us, algorithm GB/s before the size's
    corrections); only the pairs NCCL would consider on this machine. ``topology``: take the link rates and
    the latency scale from it (a fitted machine), else the preset's."""
    kind = Kind(kind)
    cc = _cc_row(system.compute_capability)
    col = min(nodes, 3) - 1
    ppn = ranks / nodes
    nch = model_channels(system)
    busbw_simple = _simple_busbw(system, nodes, topology)
    scale = latency_scale(topology)
    per_ch = busbw_simple / nch
    if kind is Kind.ALLREDUCE:
        nsteps = 2 * (ranks - 1)
    elif kind in (Kind.ALLGATHER, Kind.REDUCESCATTER):
        nsteps = ranks - 1
    else:
        nsteps = ranks
    ll_max = LL_MAX_BW[cc][0] if nodes == 1 else LL_MAX_BW_MULTI_NODE_INTEL[col]
    algos = {Kind.ALLREDUCE: ("ring", "tree", "nvls", "nvls_tree"), Kind.ALLGATHER: ("ring", "pat", "nvls"),
             Kind.REDUCESCATTER: ("ring", "pat", "nvls"), Kind.BROADCAST: ("ring",), Kind.REDUCE: ("ring",)}
    out: dict[tuple[str, str], tuple[float, float]] = {}
    for a in algos.get(kind, ()):
        if a == "pat" and nodes != ranks:
            continue  # PAT only with one GPU per node (ncclPatEnable)
        if a == "nvls" and (not system.nvls or nodes > 1):
            continue  # NVLS needs NVSwitch reduction; across nodes only with CollNet (not modelled)
        if a == "nvls_tree" and (not system.nvls or nodes == 1):
            continue  # NVLSTree is disabled on one node
        if a == "tree" and nodes == 1 and kind is Kind.ALLREDUCE:
            pass
        for p in PROTOCOLS:
            if a in ("nvls", "nvls_tree", "pat") and p != "Simple":
                continue
            bw = per_ch
            if a in ("nvls", "nvls_tree"):
                intra = bw * NVLS_EFFICIENCY[cc] * (nch - 1) / nch
                intra *= 2.0 if kind is Kind.ALLREDUCE else (ppn - 1) / ppn
                inter = bw * (2 if nodes <= 2 and a == "nvls_tree" else 1)
                cap = PER_CH_MAX_NVLS_TREE[cc][col] if a == "nvls_tree" else math.inf
                bw = min(intra, inter, cap)
            busbw = nch * bw
            if a == "ring" and p == "LL":
                busbw = min(ll_max, busbw * 0.5)
            if a == "ring" and p == "LL128":
                busbw = min(busbw * 0.92, nch * PER_CH_MAX_RING_LL128[cc][col])
            if a == "tree" and kind is Kind.ALLREDUCE:
                busbw = min(busbw * 0.92, nch * PER_CH_MAX_TREE[cc][col])
            if a == "tree" and p == "LL":
                busbw = min(busbw / 3.8, ll_max)
            if a == "tree" and p == "LL128":
                busbw = min(busbw * (7 / 9 if nodes == 1 else 120 / 128), nch * PER_CH_MAX_TREE_LL128[cc][col])
            if a == "pat":
                busbw *= 0.75
            if not (a != "ring" and kind in (Kind.ALLGATHER, Kind.REDUCESCATTER)):
                busbw *= ranks / nsteps if a in ("ring", "nvls", "nvls_tree") else 0.5
            lat = BASE_LATENCY_US[a][p]
            intra_lat = HW_LATENCY_US["nvlink"][a][p]
            inter_lat = HW_LATENCY_US["net"]["tree" if ppn == 1 else a][p]
            if a == "ring":
                if kind in (Kind.BROADCAST, Kind.REDUCE):
                    lat += HW_LATENCY_US["nvlink" if nodes == 1 else "net"][a][p]
                else:
                    if nodes > 1:
                        intra_lat = max(intra_lat, NET_OVERHEAD_US * (3 if p == "Simple" else 1))
                    n_inter = 0 if nodes == 1 else 2 * (nodes - 1) if kind is Kind.ALLREDUCE else nodes - 1
                    lat += (nsteps - n_inter) * intra_lat + n_inter * inter_lat
            elif a == "tree":
                lat += 2 * ((ranks // nodes - 1) * intra_lat + int(math.log2(nodes)) * inter_lat)
            elif a == "nvls":
                lat = intra_lat + (inter_lat if nodes > 1 else 0.0)
            elif a == "nvls_tree":
                lat += intra_lat + 2 * int(math.log2(nodes)) * inter_lat
            elif a == "pat":
                lat += int(math.log2(nodes)) * (inter_lat / 3.5) + ranks * 2.8
            out[(a, p)] = (lat * scale, busbw)
    return out


def _time(kind: Kind, a: str, p: str, lat: float, bw: float, size: float, nodes: int, ranks: int,
          nch: int, cc: int) -> float:
    """Seconds of NCCL's ``ncclTopoGetAlgoTime`` for one call of ``size`` bytes."""
    log_size = int(math.log2(size)) - 6 if size >= 64 else -1
    if a == "tree" and kind is Kind.ALLREDUCE and 0 <= log_size < 23:
        bw *= TREE_CORRECTION[p][log_size]
    if a == "ring" and p == "Simple" and nodes > 1 and kind is Kind.ALLREDUCE and size / (nch * ranks) >= 64 \
            and cc >= 80:
        lat *= RING_PLATEAU
    return lat * 1e-6 + size / (bw * 1e9)


def choose(kind: Kind | str, topology: Topology, size: float, *, algo: str | None = None,
           proto: str | None = None, available: tuple[str, ...] | None = None) -> NcclChoice:
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
    table = tuning(kind, system, nodes, ranks, topology)
    if not table:
        raise ValueError(f"the NCCL model covers allreduce, allgather, reducescatter, broadcast and reduce, not "
                         f"{kind.value}")
    cc, nch = _cc_row(system.compute_capability), model_channels(system)
    best: NcclChoice | None = None
    for (a, p), (lat, bw) in table.items():
        if (algo is not None and a != algo) or (proto is not None and p != proto):
            continue
        if available is not None and a not in available:
            continue
        t = _time(kind, a, p, lat, bw, size, nodes, ranks, nch, cc)
        if best is None or t < best.time_s:
            best = NcclChoice(a, p, lat, bw, t, nch)
    if best is None:
        what = "/".join(x for x in (algo, proto) if x) or "any algorithm"
        raise ValueError(f"NCCL runs no {what} for {kind.value} on {topology.name}")
    return best


# -- simulating the choice -------------------------------------------------------------------------

_NAMES = {"ring": ("nccl_ring",), "tree": ("nccl_tree",), "pat": ("pat",), "nvls": ("nvls",),
          "nvls_tree": ("nvls_tree",)}
_FALLBACK = {("ring", Kind.ALLREDUCE): "ring", ("ring", Kind.ALLGATHER): "ring",
             ("ring", Kind.REDUCESCATTER): "ring", ("ring", Kind.BROADCAST): "chain", ("ring", Kind.REDUCE): "chain",
             ("tree", Kind.ALLREDUCE): "double_binary_tree"}


def _registered(kind: Kind, name: str) -> bool:
    try:
        registry.get(kind, name)
    except Exception:
        return False
    return True


def schedule_name(kind: Kind, algo: str) -> str | None:
    """The registry name that builds NCCL's ``algo`` for ``kind`` here, or None when none is registered."""
    for name in _NAMES.get(algo, ()):
        if _registered(kind, name):
            return name
    fb = _FALLBACK.get((algo, kind))
    return fb if fb is not None and _registered(kind, fb) else None


def tree_chunk(protocol: str, size: float, nodes: int, ranks: int, channels: int) -> int:
    """Bytes of NCCL's tree chunk for one call of ``size`` bytes (src/enqueue.cc, the chunk size of a collective):
    one step of the protocol's buffer per channel (``TREE_CHUNK`` for Simple; LL's 64 KiB step of 8-byte lines,
    half of it data; LL128's step of 120 of every 128 bytes), LL128's halved while a channel would get fewer
    than 64 (then 16) chunks per ``1 + log2(nodes) + ppn / 10`` steps over ``ppn`` GPUs per node, down to 128
    (then 32) KiB."""
    if protocol == "LL":
        return LL_STEP // 2
    if protocol != "LL128":
        return TREE_CHUNK
    chunk = LL128_STEP // 16 * 15
    ppn = ranks / nodes
    steps = 1 + int(math.log2(nodes)) + 0.1 * ppn
    while size // (channels * chunk) < steps * 64 / ppn and chunk > 131072:
        chunk //= 2
    while size // (channels * chunk) < steps * 16 / ppn and chunk > 32768:
        chunk //= 2
    return chunk


def _params(kind: Kind, name: str, topology: Topology, size: float, protocol: str = "Simple") -> dict[str, Any]:
    alg = registry.get(kind, name)
    known = {q.name for q in alg.parameters}
    gpn = node_size(topology) or 1
    system = system_of(topology)
    out: dict[str, Any] = {}
    if "group" in known:
        out["group"] = gpn
    if "channels" in known and system is not None:
        # One channel per rail carries what NCCL's two per NIC carry (they share the NIC's link).
        out["channels"] = system.nics_per_node if topology.ranks > gpn else 1
    if "chunks" in known and name in ("chain", "double_binary_tree"):
        # Pipelined algorithms move their data in pieces (NCCL: chunks of a step's buffer); a few suffice for
        # the pipeline to fill, and more only add transfers.
        out["chunks"] = max(1, min(8, int(size // (1 << 20)) or 1))
    if "chunks" in known and name == "nccl_tree" and system is not None:
        # NCCL's tree moves each channel's share in chunks of one protocol step (tree_chunk), up to TREE_STAGES of
        # them; each of our channels' two trees carries what one of NCCL's channels does (size / NCCL's channels).
        nodes = topology.ranks // gpn
        chunk = tree_chunk(protocol, size, nodes, topology.ranks, model_channels(system))
        per_tree = size / (2 * int(out.get("channels", 1) or gpn))
        out["chunks"] = max(1, min(TREE_STAGES, math.ceil(per_tree / chunk)))
    if "chunks" in known and name in ("nvls", "nvls_tree"):
        # NVLS pipelines in chunks of 128 KiB (NCCL src/transport/nvls.cc, NCCL_NVLS_CHUNKSIZE): a stage per
        # 128 KiB of each rank's piece, at most 64 (the stages' count past which the pipeline is full).
        out["chunks"] = max(1, min(64, math.ceil(size / topology.ranks / NVLS_CHUNK)))
    return out


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


def protocol_model(choice: NcclChoice, kind: Kind, topology: Topology) -> ProtocolModel:
    """The engine's view of ``choice``: NCCL's latencies, and the protocol's bandwidth relative to Simple's."""
    system = system_of(topology)
    gpn = node_size(topology)
    assert system is not None and gpn is not None
    nodes = topology.ranks // gpn
    table = tuning(kind, system, nodes, topology.ranks, topology)
    simple = table.get((choice.algorithm, "Simple"))
    factor = choice.algbw_GBps / simple[1] if simple and simple[1] > 0 else 1.0
    if choice.algorithm == "tree":
        # The tree's own Simple rate against the links' (which carry the ring's Simple rate).
        ring = table.get(("ring", "Simple"))
        base = _simple_busbw(system, nodes, topology)
        factor = choice.algbw_GBps * 2 / base if ring else factor
    if choice.algorithm in ("nvls", "nvls_tree"):
        # The NVSwitch's reduction carries NCCL's NVLS latency and rate itself (sim.topology.switches, its
        # capabilities on the preset's node switches); the links keep Simple's per-hop latency and rate, and
        # NVLS has no base latency (baseLat[NVLS] = 0).
        m = ProtocolModel.nccl("Simple", "ring", nodes=nodes)
        m = ProtocolModel("Simple", choice.algorithm, BASE_LATENCY_US[choice.algorithm]["Simple"] * 1e-6,
                          m.nvlink_latency, m.net_latency)
    else:
        algo = choice.algorithm if choice.algorithm in BASE_LATENCY_US else "ring"
        m = ProtocolModel.nccl(choice.protocol, algo, nodes=nodes, nvlink_factor=min(factor, 1.0),
                               net_factor=min(factor, 1.0))
    s = latency_scale(topology)
    if s != 1.0:
        m = replace(m, launch=m.launch * s, nvlink_latency=m.nvlink_latency * s, net_latency=m.net_latency * s)
    return m


def simulate_nccl(kind: Kind | str, topology: Topology, size: float, *, algo: str | None = None,
                  proto: str | None = None, root: int | None = None, options: EngineOptions | None = None,
                  **engine: Any) -> NcclRun:
    """Simulate what NCCL runs for ``kind`` at ``size`` on ``topology`` (module docstring) with ``options``
    (``launch`` None, the default here: NCCL's base latency); keyword ``engine`` fields replace the options'
    own (``EngineOptions.of``)."""
    from sim.engine.reference import simulate

    options = EngineOptions.of(options if options is not None else EngineOptions(launch=None), **engine)
    kind = Kind(kind)
    pick = choose(kind, topology, size, algo=algo, proto=proto)
    notes: list[str] = []
    simulated = pick
    have = [a for a in CHOICES if schedule_name(kind, a) is not None]
    name = schedule_name(kind, pick.algorithm)
    why = "no schedule is registered for it"
    while True:
        if name is not None:
            model = protocol_model(simulated, kind, topology)
            opts = options if options.launch is not None else options.replace(launch=model.launch)
            modes = PIPELINE_MODES.get(name, (opts.mode,))
            try:
                linked = apply(topology, model)
                result = min((simulate(build(kind, name, topology, size, root, chunks=k,
                                             protocol=simulated.protocol), linked, size,
                                       opts if mode == opts.mode else opts.replace(mode=mode))
                              for k in _stage_counts(kind, name, topology, size) for mode in modes),
                             key=lambda r: float(r.time))
                if modes != (opts.mode,):
                    kept = "s, the faster kept" if len(modes) > 1 else ""
                    notes.append(f"{name} runs in {' and '.join(modes)} mode{kept}, as NCCL moves its chunks in "
                                 "step order (sim.machine.nccl.PIPELINE_MODES)")
                return NcclRun(pick, simulated, name, model, result, notes)
            except CollschedError as e:  # too large to build or to lower here, or refused at this size
                why = f"its schedule {name} cannot be simulated here ({e})"
        if simulated.algorithm in have:
            have.remove(simulated.algorithm)
        if not have:
            raise ValueError(f"no NCCL algorithm for {kind.value} can be simulated on {topology.name}")
        simulated = choose(kind, topology, size, proto=proto, available=tuple(have))
        notes.append(f"NCCL runs {pick.algorithm}/{pick.protocol} here; {why}, so {simulated.algorithm}/"
                     f"{simulated.protocol} is simulated")
        name = schedule_name(kind, simulated.algorithm)


PIPELINE_MODES: dict[str, tuple[str, ...]] = {"nvls": ("lockstep",), "nvls_tree": ("lockstep",),
                                              "nccl_tree": ("dataflow", "lockstep")}
"""The engine modes ``simulate_nccl`` runs NCCL's pipelined schedules in, whatever ``mode`` it is given (a note says
so; where two are named, the faster run is kept). Their chunks are independent of each other, so that in dataflow
mode every ready chunk starts at once and max-min fair sharing splits each link among them, which undoes the
pipeline. NCCL moves a connection's chunks in order instead: a connection is a FIFO of ``NCCL_STEPS`` = 8 slots
(src/include/device.h), a chunk a step, so a tree's chunks cross each edge one after the other. ``nccl_tree`` with
Simple on dgx-h100:8 at 1 GiB takes 19.8 ms in dataflow whether it has 1, 8 or 64 chunks, 7.7 ms in lockstep with
64 (NCCL's model: 6.5 ms). Lockstep in turn charges every step its slowest transfer, which the FIFO does not: the
tree's LL128 sizes of 1-2 MiB on 2 nodes run faster in dataflow (the critical path of a few chunks), so the tree
takes the faster of the two modes, each an overestimate where its assumption fails. The ring (one piece per step,
each step waiting for the one before) is not affected and stays in the mode given. NCCL's NVLS
kernels (src/device/all_reduce.h, ``RunWorkColl`` for ``NCCL_ALGO_NVLS`` and ``NCCL_ALGO_NVLS_TREE``) split their
warps into fixed roles (scatter into the multicast buffer, ``ld_reduce``, send to / receive from the network, gather)
that move each chunk through the NVLS group's shared FIFO slots step by step: no chunk's reduction runs ahead of the
group and takes link bandwidth from an older chunk's multicast. In dataflow mode max-min fair sharing does let newer
stages' reductions share the GPU links with older stages' multicasts, so the pipeline stalls and gets slower the more
stages are in flight (``nvls_tree`` on dgx-h100:2 at 1 GiB in 16 stages: 260 GB/s busbw in dataflow with 4
staging slots, 203 GB/s with 16, 421 GB/s in lockstep; nccl-tests #309 measured 449 GB/s); lockstep is the engine's
model of the kernel's steps."""

STAGE_SEARCH_RANKS = 64
"""Up to this many ranks the NVLS schedules' stage count is searched (``_stage_counts``); above, the 128 KiB rule."""


def _stage_counts(kind: Kind, name: str, topology: Topology, size: float) -> list[int | None]:
    """The ``chunks`` values to simulate for ``name``: None (``_params``' own) except for the NVLS schedules on
    up to ``STAGE_SEARCH_RANKS`` ranks. NCCL's NVLS kernel keeps many 128 KiB chunks in flight over its channels,
    so a chunk's switch latency hides behind the others'; the schedule expresses that pipeline as ``chunks``
    stages that each pay the switch-op latency, so the run takes the fastest of the powers of two up to the 128 KiB
    rule's count (what a tuned pipeline depth would be: few stages where latency dominates, many where bandwidth
    does)."""
    if name not in ("nvls", "nvls_tree") or topology.ranks > STAGE_SEARCH_RANKS:
        return [None]
    most = int(_params(kind, name, topology, size).get("chunks", 1))
    counts: list[int | None] = [1 << i for i in range(most.bit_length()) if 1 << i <= most]
    return [*counts, most] if counts[-1] != most else counts


def build(kind: Kind, name: str, topology: Topology, size: float, root: int | None = None, *,
          chunks: int | None = None, protocol: str = "Simple") -> Schedule:
    """The registry's ``name`` for ``kind`` on ``topology`` with the parameters NCCL's version takes with
    ``protocol`` (``chunks`` overrides the stage count)."""
    params = _params(kind, name, topology, size, protocol)
    if chunks is not None:
        params["chunks"] = chunks
    return registry.build(kind, name, topology.ranks, root=(0 if root is None else root)
                          if kind in ROOTED_KINDS else None, **params)
