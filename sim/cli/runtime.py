"""``--runtime`` and ``--protocol`` of ``simulate`` and ``sweep``, and ``-a nccl``: which protocol prices a run.

Runtimes (docs/design.md, "Protocols and runtimes"):

- ``nccl``: NCCL's native collectives, one protocol per call, chosen by size as NCCL's tuning does
  (``sim.machine.nccl``); a schedule of the library runs with the protocol NCCL's ring would take;
  ``-a nccl`` is the algorithm NCCL itself picks (``--param algo=``, ``--param proto=`` force them);
- ``msccl``: the protocol named in the MSCCL-IR file (``proto=``; Simple for other schedules);
- ``collsched``: this project's runner over torch's NCCL point-to-point: a message of up to 16 KiB goes
  with LL, a larger one with Simple, as NCCL's point-to-point does; ``--step-cost`` is the runner's host
  cost per message (the engine's per-message overhead);
- ``plain``: the links as the topology gives them, no protocol (the default except on GPU presets, where
  ``nccl`` is).

``--protocol LL|LL128|Simple`` forces one protocol in every runtime, as NCCL_PROTO does.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from algorithms.errors import UsageError
from algorithms.ir import Kind, Schedule

__all__ = ["RUNTIMES", "add_runtime_args", "nccl_params", "run_schedule", "runtime_of"]

RUNTIMES = ("nccl", "msccl", "collsched", "plain")


def add_runtime_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runtime", choices=RUNTIMES, default=None,
                   help="what executes the schedule, which decides its protocol: nccl (NCCL's choice by size), "
                        "msccl (the MSCCL-IR file's proto), collsched (NCCL point-to-point: LL up to 16 KiB, else "
                        "Simple), plain (the links as given; the default except on GPU presets, where nccl is)")
    p.add_argument("--protocol", choices=("LL", "LL128", "Simple"), default=None,
                   help="force one NCCL protocol, as NCCL_PROTO does")
    p.add_argument("--step-cost", metavar="T", default=None,
                   help="collsched runtime: the runner's host cost per message, e.g. 5us (default 0)")


def runtime_of(args: argparse.Namespace, topology: Any) -> str:
    """The run's runtime: ``--runtime``, else ``nccl`` on a GPU preset and ``plain`` elsewhere."""
    from sim.topology.gpus import system_of

    rt = getattr(args, "runtime", None)
    if rt is not None:
        return str(rt)
    return "nccl" if system_of(topology) is not None else "plain"


def nccl_params(args: argparse.Namespace) -> dict[str, str]:
    """``--param algo=``/``proto=`` of ``-a nccl`` (and ``--protocol``), checked; other parameters refused."""
    from sim.machine.nccl import CHOICES

    out: dict[str, str] = {}
    for k, v in args.param:
        if k not in ("algo", "proto"):
            raise UsageError(f"-a nccl: unknown parameter {k!r} (known: algo, proto)")
        out[k] = str(v).lower() if k == "algo" else str(v)
    if "algo" in out and out["algo"] not in CHOICES:
        raise UsageError(f"-a nccl: algo={out['algo']!r}: expected one of {', '.join(CHOICES)}")
    if getattr(args, "protocol", None):
        out.setdefault("proto", args.protocol)
    if "proto" in out:
        from sim.engine.protocols import parse_protocol

        try:
            out["proto"] = parse_protocol(out["proto"])
        except ValueError as e:
            raise UsageError(f"-a nccl: {e}") from None
    return out


def _msccl_proto(path: str | None) -> str | None:
    if not path:
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            head = f.read(4096)
    except OSError:
        return None
    m = re.search(r"<algo\b[^>]*\bproto\s*=\s*\"([^\"]*)\"", head)
    return m.group(1) if m else None


def _largest_message(schedule: Schedule, size: float) -> float:
    from sim import units

    coll = schedule.collective
    piece = size if units.sized_buffer(coll.kind) == "buffer" else size / coll.ranks
    cols = schedule.columns()
    most = int(cols.count.max()) if len(cols.count) else 0
    return most * piece / coll.chunks


def _generic_model(protocol: str, nodes: int) -> Any:
    """NCCL's ring latencies of ``protocol`` and its line format's share of data as the bandwidth factor."""
    from sim.engine.protocols import LL128_DATA_FRACTION, LL_DATA_FRACTION, ProtocolModel

    factor = {"LL": LL_DATA_FRACTION, "LL128": LL128_DATA_FRACTION, "Simple": 1.0}[protocol]
    return ProtocolModel.nccl(protocol, "ring", nodes=nodes, nvlink_factor=factor, net_factor=factor)


def run_schedule(args: argparse.Namespace, schedule: Schedule, topology: Any, size: float,
                 opts: dict[str, Any]) -> tuple[Any, str]:
    """Simulate ``schedule`` under the run's runtime; the result and a line saying what priced it."""
    from sim.engine.protocols import apply, parse_protocol
    from sim.engine.reference import simulate
    from sim.machine.nccl import choose, protocol_model
    from sim.topology.gpus import node_size, system_of
    from sim.units import parse_duration

    rt = runtime_of(args, topology)
    forced = getattr(args, "protocol", None)
    if rt == "plain" and forced is None:
        return simulate(schedule, topology, size, **opts), ""
    gpn = node_size(topology) or topology.ranks
    nodes = max(1, topology.ranks // gpn)
    opts = dict(opts)
    if rt == "nccl":
        kind = schedule.collective.kind
        if system_of(topology) is not None and kind in (Kind.ALLREDUCE, Kind.ALLGATHER, Kind.REDUCESCATTER,
                                                        Kind.BROADCAST, Kind.REDUCE):
            try:
                pick = choose(kind, topology, size, algo="ring", proto=forced)
            except ValueError as e:
                raise UsageError(str(e)) from None
            model = protocol_model(pick, kind, topology)
        else:
            model = _generic_model(forced or "Simple", nodes)
    elif rt == "msccl":
        proto = forced or _msccl_proto(getattr(args, "file", None)) or "Simple"
        try:
            model = _generic_model(parse_protocol(proto), nodes)
        except ValueError as e:
            raise UsageError(f"--runtime msccl: {e}") from None
    elif rt == "collsched":
        from sim.engine.protocols import P2P_LL_THRESHOLD

        proto = forced or ("LL" if _largest_message(schedule, size) <= P2P_LL_THRESHOLD else "Simple")
        model = _generic_model(proto, nodes)
        if getattr(args, "step_cost", None) is not None:
            opts["overhead"] = float(opts.get("overhead") or 0.0) + parse_duration(args.step_cost, "--step-cost")
    else:  # plain with --protocol
        model = _generic_model(str(forced), nodes)
    if getattr(args, "launch", None) is None:
        opts["launch"] = model.launch if rt != "collsched" else 0.0
    line = (f"  runtime    {rt}: protocol {model.protocol} ({model.algorithm} latencies: launch "
            f"{model.launch * 1e6:.3g} us, NVLink step {model.step_latency('nvlink') * 1e6:.3g} us, network step "
            f"{model.step_latency('net') * 1e6:.3g} us; bandwidth x{model.nvlink_factor:.3g})")
    return simulate(schedule, apply(topology, model), size, **opts), line


def nccl_engine_options(args: argparse.Namespace, opts: dict[str, Any]) -> dict[str, Any]:
    """``opts`` for ``sim.machine.nccl.simulate_nccl``: NCCL's base latency stands unless --launch is given."""
    out = dict(opts)
    if getattr(args, "launch", None) is None:
        out["launch"] = None
    return out


def cmd_simulate_nccl(args: argparse.Namespace) -> int:
    """``collsched simulate -a nccl``: what NCCL runs for the collective and size, built and simulated."""
    import json
    import time

    from sim.cli.common import gigabytes, human_size, human_time, peak_rss_mib, topology_from_args
    from sim.machine.nccl import simulate_nccl
    from sim.units import parse_size

    if getattr(args, "file", None):
        raise UsageError("-a nccl builds NCCL's own schedule: it cannot be combined with --file")
    if getattr(args, "collective", None) is None:
        raise UsageError("missing --collective")
    if getattr(args, "runtime", None) not in (None, "nccl"):
        raise UsageError(f"-a nccl runs under --runtime nccl, not {args.runtime}")
    from sim.cli.common import engine_options

    size = parse_size(args.size)
    opts = nccl_engine_options(args, engine_options(args))
    topo = topology_from_args(args, args.ranks)
    params = nccl_params(args)
    t0 = time.perf_counter()
    try:
        run = simulate_nccl(args.collective, topo, size, algo=params.get("algo"), proto=params.get("proto"),
                            root=args.root, **opts)
    except ValueError as e:
        raise UsageError(str(e)) from None
    wall = time.perf_counter() - t0
    r = run.result
    if args.json:
        print(json.dumps({**r.to_dict(), "wall_s": wall, "peak_rss_MiB": peak_rss_mib(),
                          "nccl": {"algorithm": run.nccl.algorithm, "protocol": run.nccl.protocol,
                                   "channels": run.nccl.channels, "model_time_s": run.nccl.time_s},
                          "simulated": {"algorithm": run.simulated.algorithm, "protocol": run.simulated.protocol,
                                        "schedule": run.schedule, "model_time_s": run.simulated.time_s},
                          "notes": run.notes}))
        return 0 if r.ok else 1
    print(f"nccl {args.collective} on {topo.describe()}, {r.mode}, {human_size(size)}")
    print(f"  NCCL runs  {run.nccl.algorithm}/{run.nccl.protocol} on {run.nccl.channels} channels (its tuning model: "
          f"{human_time(run.nccl.time_s)})")
    if run.simulated != run.nccl:
        print(f"  simulated  {run.simulated.algorithm}/{run.simulated.protocol} (its model: "
              f"{human_time(run.simulated.time_s)})")
    for note in run.notes:
        print(f"  note       {note}")
    m = run.model
    print(f"  schedule   {run.schedule}, {r.transfers} transfers; protocol {m.protocol}: launch "
          f"{m.launch * 1e6:.3g} us, NVLink step {m.step_latency('nvlink') * 1e6:.3g} us, network step "
          f"{m.step_latency('net') * 1e6:.3g} us, bandwidth x{m.nvlink_factor:.3g}")
    algbw, busbw = gigabytes(r.algbw), gigabytes(r.busbw)
    print(f"  time       {human_time(r.time)}")
    print(f"  algbw      {algbw:.4f} GB/s" if algbw is not None else "  algbw      -")
    print(f"  busbw      {busbw:.4f} GB/s" if busbw is not None else "  busbw      -")
    print(f"  simulated in {wall:.3f} s by the {r.engine} engine, peak memory {peak_rss_mib():.0f} MiB")
    print("  postcondition OK" if r.ok else f"  postcondition BROKEN: {len(r.violations)} violation(s)")
    return 0 if r.ok else 1


def default_group(args: argparse.Namespace, topology: Any, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with ``group`` set to the topology's node size when the algorithm takes a group, none is
    given and the topology knows its nodes (a GPU preset): hierarchical algorithms group by node."""
    from algorithms import registry
    from sim.topology.gpus import node_size

    n = node_size(topology)
    if n is None or "group" in params or getattr(args, "collective", None) is None:
        return params
    try:
        alg = registry.get(args.collective, args.algorithm)
    except Exception:
        return params
    if any(q.name == "group" for q in alg.parameters):
        return {**params, "group": n}
    return params
