"""What NCCL would run, and its simulation: NCCL's tuning model (``-a nccl``) on a GPU preset.

``tuning(kind, system, nodes, ranks)`` is NCCL's cost model of every (algorithm, protocol) of a release
(``sim.machine.nccl_tuning``, with each release's constants in ``sim.machine.nccl_versions``): a latency (base
+ per step by link type) and a bus bandwidth (channels x per-channel bandwidth, then the protocol's
refinements and caps), in our own words and with the preset's figures. ``choose`` picks, as NCCL does, the
(algorithm, protocol) of least modelled time for a size; ``NCCL_ALGO``/``NCCL_PROTO`` are ``algo=``/``proto=``;
``nccl_version=`` the release (default: a fitted machine's, else the newest modelled).

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
from typing import Any

from algorithms import registry
from algorithms.errors import CollschedError
from algorithms.ir import ROOTED_KINDS, Kind, Schedule
from sim.engine.options import EngineOptions
from sim.engine.protocols import ProtocolModel, apply
from sim.machine.nccl_tuning import (
    CHOICES,
    NcclChoice,
    NcclRun,
    choose,
    graphs,
    latency_factors,
    launch_shape,
    model_channels,
    topology_version,
    tuning,
)
from sim.machine.nccl_versions import version
from sim.topology.gpus import node_size, system_of
from sim.topology.graph import Topology

P2P_KINDS = ("alltoall", "sendrecv")
"""Collectives NCCL runs as point-to-point (``sim.machine.nccl_p2p``)."""

__all__ = ["CHOICES", "PIPELINE_MODES", "NcclChoice", "NcclRun", "choose", "compare", "model_channels",
           "simulate_nccl", "tuning"]

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


# -- simulating the choice -------------------------------------------------------------------------

_NAMES = {"ring": ("nccl_ring",), "tree": ("nccl_tree",), "pat": ("pat",), "nvls": ("nvls",),
          "nvls_tree": ("nvls_tree",)}
_FALLBACK = {("ring", Kind.ALLREDUCE): "ring", ("ring", Kind.ALLGATHER): "ring",
             ("ring", Kind.REDUCESCATTER): "ring", ("ring", Kind.BROADCAST): "chain", ("ring", Kind.REDUCE): "chain",
             ("tree", Kind.ALLREDUCE): "double_binary_tree"}


SIMPLE_IN_FLIGHT = 8
"""Steps of a Simple ring connection in flight: ``NCCL_STEPS`` = 8 slots (src/include/device.h). The sender
posts a step whenever the receiver has freed a slot, so a network step's delay (hwLat 14 us plus the fabric's)
overlaps the next steps' data rather than holding the port (the engine's ``in_flight``, where 1 is MPI's
blocking send). Taken for Simple only: on the 2-node H100 ring table (nccl-tests #309) it brings 256 MiB from
+30% to +15% and the 2-node B200 all-gather's Simple sizes from +28/+22/+11% to within 8.4%; on LL128 it made
the 2-node ring's 1-8 MiB, already 7-12% fast, 20-30% fast (LL and LL128 are priced by NCCL's per-step hwLat
summed step after step). Not for the ring's broadcast and reduce chains: their first rank has every chunk ready,
and the engine shares a port among the steps in flight where NCCL's slots go in order, so the chain's head would be
slowed by the chunks behind it (4 GiB on 8 H100s: 16.0 ms, 12.6 with one step in flight, NCCL's model 11.9). A
user's own ``in_flight`` other than 1 is kept."""


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


CHAIN_STAGES = 128
"""At most this many chunks per chain in NCCL's ring broadcast and reduce (``nccl_ring``): 2 (p - 1) / 128 of the run
at most is the pipeline's fill and drain, where NCCL's own chunks are as many as the size needs."""


def protocol_step(protocol: str) -> int:
    """Data bytes of one step of ``protocol``'s buffer per channel: Simple's 512 KiB (``TREE_CHUNK``), LL's 64 KiB
    of 8-byte lines with half of it data, LL128's 614,400 bytes with 15 of every 16 elements data."""
    return {"LL": LL_STEP // 2, "LL128": LL128_STEP // 16 * 15}.get(protocol, TREE_CHUNK)


def tree_chunk(protocol: str, size: float, nodes: int, ranks: int, channels: int) -> int:
    """Bytes of NCCL's tree chunk for one call of ``size`` bytes (src/enqueue.cc, the chunk size of a collective):
    one step of the protocol's buffer per channel (``TREE_CHUNK`` for Simple; LL's 64 KiB step of 8-byte lines,
    half of it data; LL128's step of 120 of every 128 bytes), LL128's halved while a channel would get fewer
    than 64 (then 16) chunks per ``1 + log2(nodes) + ppn / 10`` steps over ``ppn`` GPUs per node, down to 128
    (then 32) KiB."""
    chunk = protocol_step(protocol)
    if protocol != "LL128":
        return chunk
    ppn = ranks / nodes
    steps = 1 + int(math.log2(nodes)) + 0.1 * ppn
    while size // (channels * chunk) < steps * 64 / ppn and chunk > 131072:
        chunk //= 2
    while size // (channels * chunk) < steps * 16 / ppn and chunk > 32768:
        chunk //= 2
    return chunk


NVLS_TREE_MAX_CHUNK = 64 * 1024
"""NCCL's NVLSTree chunk cap from 4 nodes on (``NCCL_NVLSTREE_MAX_CHUNKSIZE`` default: 64 KiB when nNodes >= 4, else
the NVLS chunk; src/enqueue.cc and src/transport/nvls.cc)."""
NVLS_TREE_STAGE_TRANSFERS = 1 << 17
"""At most about this many transfers in an ``nvls_tree`` schedule past ``STAGE_SEARCH_RANKS`` ranks (a stage moves
about 4 per rank): the stage count NCCL's chunking gives is cut to what the engine simulates in seconds, since every
stage is simulated transfer by transfer (fewer stages pipeline less: the run gets slower, never faster)."""


def nvls_tree_chunk(size: float, nodes: int, concurrent_ops: int) -> int:
    """Bytes of NCCL's NVLSTree chunk for an all-reduce of ``size`` bytes, as src/enqueue.cc (``calcCollChunking``,
    ``NCCL_ALGO_NVLS_TREE``, 2.19-2.30) sets it: the NVLS chunk (128 KiB), at most ``NVLS_TREE_MAX_CHUNK`` from 4
    nodes on, then cut to 256/128/64/32 KiB while ``size`` is under 32/16/4/1 x ``concurrent_ops`` (channels x NVLS
    heads) x the chunk."""
    chunk = NVLS_CHUNK if nodes < 4 else min(NVLS_CHUNK, NVLS_TREE_MAX_CHUNK)
    for factor, cap in ((32, 262144), (16, 131072), (4, 65536), (1, 32768)):
        if size < factor * concurrent_ops * chunk and chunk > cap:
            chunk = cap
    return chunk


def nvls_tree_stages(size: float, nodes: int, channels: int, heads: int, ranks: int) -> int:
    """``nvls_tree``'s pipeline stages for NCCL's chunking of an all-reduce of ``size`` bytes: NCCL's NVLSTree kernel
    loops over each channel's share of the *whole* buffer, ``heads`` chunks (one per NVLS head, a node's GPU) an
    iteration (src/enqueue.cc ``computeCollLastChunkInfo``: the loop's unit is ``nvls.nHeads x chunkCount``;
    src/device/all_reduce.h ``runTreeSplit`` under NVLS_TREE), so an iteration of all ``channels`` moves
    channels x heads x ``nvls_tree_chunk`` bytes and is a stage of the schedule (its g pieces of size / (g k)).
    At most 64 (the pipeline is full), and at most what ``NVLS_TREE_STAGE_TRANSFERS`` allows."""
    ops = max(1, channels * heads)
    stages = math.ceil(size / (ops * nvls_tree_chunk(size, nodes, ops)))
    return max(1, min(64, stages, NVLS_TREE_STAGE_TRANSFERS // (4 * ranks)))


def _params(kind: Kind, name: str, topology: Topology, size: float, protocol: str = "Simple") -> dict[str, Any]:
    alg = registry.get(kind, name)
    known = {q.name for q in alg.parameters}
    gpn = node_size(topology) or 1
    system = system_of(topology)
    out: dict[str, Any] = {}
    if "group" in known:
        out["group"] = gpn
    if "channels" in known and system is not None:
        # One channel per rail (a GPU's share of the node's NICs) carries what NCCL's channels through that NIC
        # carry (they share its link).
        out["channels"] = gpn if topology.ranks > gpn else 1
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
    if "chunks" in known and name == "nccl_ring" and kind in (Kind.BROADCAST, Kind.REDUCE) and system is not None:
        # NCCL's broadcast and reduce are chains along the ring that forward each channel's share a protocol step at
        # a time (src/device/broadcast.h, reduce.h; BROADCAST/REDUCE_CHUNKSTEPS 1): as many chunks per chain.
        step = protocol_step(protocol)
        out["chunks"] = max(1, min(CHAIN_STAGES, math.ceil(size / (model_channels(system) * step))))
    if "chunks" in known and name == "nvls_tree" and system is not None and topology.ranks > STAGE_SEARCH_RANKS:
        out["chunks"] = nvls_tree_stages(size, topology.ranks // gpn, system.arch.nvls_channels(gpn), gpn,
                                         topology.ranks)
    elif "chunks" in known and name in ("nvls", "nvls_tree"):
        # NVLS pipelines in chunks of 128 KiB (NCCL src/transport/nvls.cc, NCCL_NVLS_CHUNKSIZE): a stage per
        # 128 KiB of each rank's piece, at most 64 (the stages' count past which the pipeline is full).
        out["chunks"] = max(1, min(64, math.ceil(size / topology.ranks / NVLS_CHUNK)))
    return out


def protocol_model(choice: NcclChoice, kind: Kind, topology: Topology,
                   nccl_version: str | None = None, size: float | None = None) -> ProtocolModel:
    """The engine's view of ``choice``: the release's latencies (base at launch, ``hwLat`` per step, half per
    hop; across nodes the network's reported latency too, twice for Simple, and the proxy's post overhead as the
    least a multi-node ring's NVLink step costs), times a fitted machine's factor, and the protocol's bandwidth
    relative to Simple's on every link; given ``size``, times the share of its channels NCCL
    launches at that size (``launch_shape``)."""
    system = system_of(topology)
    gpn = node_size(topology)
    assert system is not None and gpn is not None
    nodes = topology.ranks // gpn
    v = version(nccl_version or choice.version or topology_version(topology))
    table = tuning(kind, system, nodes, topology.ranks, topology, nccl_version=v.name)
    g = graphs(system, nodes, topology)
    a, p = choice.algorithm, choice.protocol
    simple = table.get((a, "Simple"))
    factor = choice.algbw_GBps / simple[1] if simple and simple[1] > 0 else 1.0
    if a == "tree":
        # The tree's own rate against the links' (which carry the ring's Simple rate).
        factor = choice.algbw_GBps * 2 / (g.channels * (g.ring_inter if nodes > 1 else g.ring_intra))
    if size is not None:
        factor *= launch_shape(a, p, size, topology.ranks, choice.channels, v.name).share
    f = latency_factors(topology)[p]
    if a in ("nvls", "nvls_tree"):
        # The NVSwitch's reduction carries NCCL's NVLS latency and rate itself (sim.topology.switches, its
        # capabilities on the preset's node switches); the links keep Simple's ring latencies and rates.
        link_algo, p, factor = "ring", "Simple", 1.0
    else:
        link_algo = a if a in v.base_latency else "ring"
    intra = v.hw_latency["nvlink"][link_algo][p]
    if nodes > 1 and link_algo == "ring":
        intra = max(intra, g.net_overhead * (3 if p == "Simple" else 1))
    inter = v.hw_latency["net"][link_algo][p] + g.latency_inter * (2 if p == "Simple" else 1)
    launch = v.base_latency[a][choice.protocol]
    return ProtocolModel(p, a, launch * f * 1e-6, intra / 2 * f * 1e-6, inter / 2 * f * 1e-6,
                         min(factor, 1.0), min(factor, 1.0))


def simulate_nccl(kind: Kind | str, topology: Topology, size: float, *, algo: str | None = None,
                  proto: str | None = None, root: int | None = None, options: EngineOptions | None = None,
                  nccl_version: str | None = None, **engine: Any) -> NcclRun:
    """Simulate what NCCL (release ``nccl_version``; default a fitted machine's, else the newest modelled) runs
    for ``kind`` at ``size`` on ``topology`` (module docstring) with ``options`` (``launch`` None, the default
    here: NCCL's base latency); keyword ``engine`` fields replace the options' own (``EngineOptions.of``)."""
    from sim.engine.reference import simulate

    options = EngineOptions.of(options if options is not None else EngineOptions(launch=None), **engine)
    if root is not None and not 0 <= root < topology.ranks:
        raise ValueError(f"root {root}: not a rank of {topology.name} (0 to {topology.ranks - 1})")
    if str(getattr(kind, "value", kind)) in P2P_KINDS:
        from sim.machine.nccl_p2p import simulate_p2p

        if algo not in (None, "p2p") or proto is not None:
            raise ValueError(f"{kind}: NCCL runs point-to-point (algo=p2p), its protocol by message size")
        return simulate_p2p(str(getattr(kind, "value", kind)), topology, size, options=options,
                            nccl_version=nccl_version)
    kind = Kind(kind)
    pick = choose(kind, topology, size, algo=algo, proto=proto, nccl_version=nccl_version)
    notes: list[str] = []
    simulated = pick
    have = [a for a in CHOICES if schedule_name(kind, a) is not None]
    name = schedule_name(kind, pick.algorithm)
    why = "no schedule is registered for it"
    while True:
        if name is not None:
            model = protocol_model(simulated, kind, topology, pick.version, size)
            opts = options if options.launch is not None else options.replace(launch=model.launch)
            if (name == "nccl_ring" and simulated.protocol == "Simple" and opts.in_flight == 1
                    and kind not in (Kind.BROADCAST, Kind.REDUCE)):
                opts = opts.replace(in_flight=SIMPLE_IN_FLIGHT)
            modes = PIPELINE_MODES.get(name, (opts.mode,))
            try:
                linked = apply(topology, model)
                result = min((simulate(build(kind, name, topology, size, root, chunks=k,
                                             protocol=simulated.protocol), linked, size,
                                       opts if mode == opts.mode else opts.replace(mode=mode))
                              for k in _stage_counts(kind, name, topology, size, simulated.protocol)
                              for mode in modes),
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
        simulated = choose(kind, topology, size, proto=proto, available=tuple(have), nccl_version=pick.version)
        notes.append(f"NCCL runs {pick.algorithm}/{pick.protocol} here; {why}, so {simulated.algorithm}/"
                     f"{simulated.protocol} is simulated")
        name = schedule_name(kind, simulated.algorithm)


AGREEMENT = 0.05
"""Within this fraction the simulated time and NCCL's own prediction agree (``compare``)."""


def compare(run: NcclRun, kind: Kind | str, topology: Topology, size: float) -> dict[str, Any]:
    """NCCL's own prediction for what it runs beside the simulated time: its model's terms (latency us, size over
    its algorithm bandwidth), the ratio simulated / predicted, and where they differ by more than ``AGREEMENT``,
    why: another pair simulated than NCCL runs; the latency part (NCCL's per-call latency against the simulation's
    launch and per-hop steps, which it pays per pipeline stage); or the bandwidth part (NCCL's graph rate, its
    channels x speed, against the links' rates the simulation prices every transfer at)."""
    pick = run.nccl
    latency = pick.latency_us * 1e-6
    bw_term = max(pick.time_s - latency, 0.0)
    ratio = run.time / pick.time_s if pick.time_s > 0 else float("nan")
    out: dict[str, Any] = {"version": pick.version, "algorithm": pick.algorithm, "protocol": pick.protocol,
                           "channels": pick.channels, "latency_s": latency, "bandwidth_s": bw_term,
                           "algbw_GBps": pick.algbw_GBps, "time_s": pick.time_s, "simulated_s": run.time,
                           "ratio": ratio, "why": []}
    why: list[str] = out["why"]
    if pick.algorithm == "p2p":
        why.append("NCCL's tuning has no model of point-to-point (send/recv and all-to-all are scheduled on its p2p "
                   "channels without ncclTopoGetAlgoTime): only the simulated time")
        return out
    shape = launch_shape(pick.algorithm, pick.protocol, size, topology.ranks, pick.channels, pick.version)
    out["launched_channels"] = shape.channels
    if abs(ratio - 1) <= AGREEMENT:
        return out
    if run.simulated.algorithm != pick.algorithm or run.simulated.protocol != pick.protocol:
        why.append(f"the simulation runs {run.simulated.algorithm}/{run.simulated.protocol}, not NCCL's "
                   f"{pick.algorithm}/{pick.protocol} (its model of that pair: {run.simulated.time_s * 1e6:.1f} us)")
    same = run.simulated.algorithm == pick.algorithm and run.simulated.protocol == pick.protocol
    gap = run.time - pick.time_s
    extra = bw_term * (shape.of / shape.channels - 1)  # what the channels left idle cost
    if same and shape.channels < shape.of and extra > AGREEMENT * pick.time_s:
        why.append(f"NCCL launches {shape.channels} of its {shape.of} channels at this size (src/enqueue.cc: "
                   "under its per-thread threshold it drops channels), which its model prices at all of them: the "
                   f"simulation moves the data at {shape.channels}/{shape.of} of {pick.protocol}'s rate "
                   f"(+{extra * 1e6:.1f} us of the +{gap * 1e6:.1f} us)")
        if extra >= 0.5 * gap:
            return out
    k = Kind(kind)
    if same and pick.algorithm == "ring" and k in (Kind.BROADCAST, Kind.REDUCE):
        chunks = int(_params(k, run.schedule, topology, size, pick.protocol).get("chunks", 1))
        p = topology.ranks
        why.append(f"NCCL's model of its ring {k.value} charges one step's latency and the size over its bandwidth; "
                   f"the chain it runs forwards {chunks} chunk(s) of a {pick.protocol} step per channel through "
                   f"{p} ranks (src/device/{'broadcast' if k is Kind.BROADCAST else 'reduce'}.h): {p - 1} hops' "
                   f"latency and {(p + chunks - 2) / chunks:.2f}x the streaming time to fill and drain the pipeline")
        return out
    sim_bw = size / max(run.time - run.model.launch, 1e-12) / 1e9
    if bw_term >= latency:
        why.append(f"bandwidth-bound: the simulation moves {sim_bw:.1f} GB/s of algorithm bandwidth on the links' "
                   f"rates (NVLink {_rate(topology, 'nvlink')}, network {_rate(topology, 'net')} per GPU, x"
                   f"{run.model.nvlink_factor:.3g} for {run.model.protocol}), NCCL's model {pick.algbw_GBps:.1f} "
                   f"GB/s from its graph ({pick.channels} channels x its per-channel speed, the algorithm's "
                   "refinements and caps)")
    else:
        why.append(f"latency-bound: NCCL's model charges {pick.latency_us:.1f} us per call; the simulation "
                   f"{run.model.launch * 1e6:.1f} us at launch plus {run.model.step_latency('nvlink') * 1e6:.2f} us "
                   f"per NVLink step and {run.model.step_latency('net') * 1e6:.2f} us per network step along the "
                   f"schedule's critical path ({run.result.transfers} transfers, {run.schedule})")
    return out


def _rate(topology: Topology, medium: str) -> str:
    for u, _v, a in topology.graph.edges(data=True):
        if isinstance(u, int) and a.get("medium") == medium:
            return f"{float(a['bandwidth']) / 1e9:.1f} GB/s"
    return "-"


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


def _stage_counts(kind: Kind, name: str, topology: Topology, size: float,
                  protocol: str = "Simple") -> list[int | None]:
    """The ``chunks`` values to simulate for ``name``: None (``_params``' own) except for the NVLS schedules on
    up to ``STAGE_SEARCH_RANKS`` ranks and the ring's broadcast and reduce chains. NCCL's NVLS kernel keeps many
    128 KiB chunks in flight over its channels, so a chunk's switch latency hides behind the others'; the schedule
    expresses that pipeline as ``chunks`` stages that each pay the switch-op latency, so the run takes the fastest
    of the powers of two up to the 128 KiB rule's count (what a tuned pipeline depth would be: few stages where
    latency dominates, many where bandwidth does). The chains likewise: every chunk of the schedule pays each hop's
    latency, where NCCL forwards LL and LL128 line by line as they land (cut through; up to ``CHAIN_STAGES``) and
    Simple a step of its buffer at a time (``_params``' count)."""
    chain = name == "nccl_ring" and kind in (Kind.BROADCAST, Kind.REDUCE)
    if not chain and (name not in ("nvls", "nvls_tree") or topology.ranks > STAGE_SEARCH_RANKS):
        return [None]
    most = int(_params(kind, name, topology, size, protocol).get("chunks", 1))
    if chain and protocol != "Simple":
        most = CHAIN_STAGES
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
