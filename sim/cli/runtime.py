"""``--runtime`` and ``--protocol`` of ``simulate`` and ``sweep``, and ``-a nccl``: which protocol prices a run.

Runtimes (docs/design.md, "Protocols and runtimes"):

- ``nccl``: NCCL's native collectives, one protocol per call, chosen by size as NCCL's tuning does
  (``sim.machine.nccl``); a schedule of the library runs with the protocol NCCL's ring would take;
  ``-a nccl`` is the algorithm NCCL itself picks (``--param algo=``, ``--param proto=`` force them);
- ``msccl``: the protocol named in the MSCCL-IR file (``proto=``) or the MSCCL++ plan (``protocol``; the default
  runtime of a plan); Simple for other schedules;
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
from typing import TYPE_CHECKING, Any

from algorithms.errors import UsageError
from algorithms.ir import Schedule

if TYPE_CHECKING:
    from sim.engine.options import EngineOptions

__all__ = ["RUNTIMES", "add_runtime_args", "nccl_params", "run_schedule", "runtime_of"]

RUNTIMES = ("nccl", "msccl", "collsched", "plain")
"""``sim.machine.runtime.RUNTIMES``, spelled here so that building the parser imports no networkx."""


def add_runtime_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runtime", choices=RUNTIMES, default=None,
                   help="what executes the schedule, which decides its protocol: nccl (NCCL's choice by size), "
                        "msccl (the MSCCL-IR file's proto, or the MSCCL++ plan's protocol: a plan's default), "
                        "collsched (NCCL point-to-point: LL up to 16 KiB, else Simple), plain (the links as given; "
                        "the default except on GPU presets, where nccl is)")
    p.add_argument("--protocol", choices=("LL", "LL128", "Simple"), default=None,
                   help="force one NCCL protocol, as NCCL_PROTO does")
    p.add_argument("--step-cost", metavar="T", default=None,
                   help="collsched runtime: the runner's host cost per message, e.g. 5us (default 0)")
    p.add_argument("--nccl-version", metavar="V", default=None,
                   help="the NCCL release whose tuning -a nccl and the nccl runtime model, 2.18 to 2.31 (2.31: the "
                        "development branch; sim.machine.nccl_versions; default: a fitted machine's, else 2.30)")


def runtime_of(args: argparse.Namespace, topology: Any) -> str:
    """The run's runtime: ``--runtime``, else ``msccl`` for an MSCCL++ plan (its executor runs the plan with the
    plan's own protocol), ``nccl`` on a GPU preset and ``plain`` elsewhere."""
    from sim.machine.runtime import default_runtime

    rt = getattr(args, "runtime", None)
    if rt is None and _plan_proto(getattr(args, "file", None)) is not None:
        return "msccl"
    return str(rt) if rt is not None else default_runtime(topology)


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


def _head(path: str | None) -> str:
    if not path:
        return ""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(1 << 16)
    except OSError:
        return ""


def _plan_proto(path: str | None) -> str | None:
    """The ``protocol`` of an MSCCL++ plan file (None: not a plan)."""
    from algorithms.formats.mscclpp import looks_like_plan

    head = _head(path)
    if not head or not looks_like_plan(head):
        return None
    m = re.search(r'"protocol"\s*:\s*"([^"]*)"', head)
    return m.group(1) if m else "Simple"


def _msccl_proto(path: str | None) -> str | None:
    """The protocol an MSCCL-IR file (``proto=``) or an MSCCL++ plan (``protocol``) names."""
    head = _head(path)
    m = re.search(r"<algo\b[^>]*\bproto\s*=\s*\"([^\"]*)\"", head[:4096])
    return m.group(1) if m else _plan_proto(path)


def run_schedule(args: argparse.Namespace, schedule: Schedule, topology: Any, size: float,
                 options: EngineOptions) -> tuple[Any, str, EngineOptions]:
    """Simulate ``schedule`` with the command's ``options`` under the run's runtime (``sim.machine.runtime``);
    the result, a line saying what priced it ("" for the plain links), and the options it ran with (a
    protocol's base latency as ``launch`` where it set one)."""
    from sim.machine.runtime import simulate_under
    from sim.units import parse_duration

    rt = runtime_of(args, topology)
    step = parse_duration(args.step_cost, "--step-cost") if getattr(args, "step_cost", None) is not None else 0.0
    # --launch stands; else the plain links keep the machine's launch (a preset's or a machine file's), and a
    # protocol brings its own base latency.
    if getattr(args, "launch", None) is None and not (rt == "plain" and getattr(args, "protocol", None) is None):
        options = options.replace(launch=None)
    try:
        result, model = simulate_under(rt, schedule, topology, size, options, protocol=getattr(args, "protocol", None),
                                       msccl_proto=_msccl_proto(getattr(args, "file", None)), step_cost=step)
    except ValueError as e:
        raise UsageError(f"--runtime {rt}: {e}") from None
    if model is None:
        return result, "", options
    if options.launch is None:
        options = options.replace(launch=model.launch)  # what the run's closed form line adds, as the run did
    line = (f"  runtime    {rt}: protocol {model.protocol} ({model.algorithm} latencies: launch "
            f"{model.launch * 1e6:.3g} us, NVLink step {model.step_latency('nvlink') * 1e6:.3g} us, network step "
            f"{model.step_latency('net') * 1e6:.3g} us; bandwidth x{model.nvlink_factor:.3g})")
    return result, line, options


def nccl_engine_options(args: argparse.Namespace, options: EngineOptions) -> EngineOptions:
    """``options`` for ``sim.machine.nccl.simulate_nccl``: NCCL's base latency stands unless --launch is given."""
    return options.replace(launch=None) if getattr(args, "launch", None) is None else options


def cmd_simulate_nccl(args: argparse.Namespace) -> int:
    """``collsched simulate -a nccl``: what NCCL runs for the collective and size, built and simulated."""
    import json
    import time

    from sim.cli.common import gigabytes, human_size, human_time, peak_rss_mib, topology_from_args
    from sim.machine.nccl import compare, simulate_nccl
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
                            root=args.root, options=opts, nccl_version=getattr(args, "nccl_version", None))
        cmp = compare(run, args.collective, topo, size)
    except ValueError as e:
        raise UsageError(str(e)) from None
    wall = time.perf_counter() - t0
    r = run.result
    if args.json:
        print(json.dumps({**r.to_dict(), "wall_s": wall, "peak_rss_MiB": peak_rss_mib(),
                          "nccl": {"algorithm": run.nccl.algorithm, "protocol": run.nccl.protocol,
                                   "channels": run.nccl.channels, "model_time_s": run.nccl.time_s,
                                   "version": run.nccl.version},
                          "simulated": {"algorithm": run.simulated.algorithm, "protocol": run.simulated.protocol,
                                        "schedule": run.schedule, "model_time_s": run.simulated.time_s},
                          "nccl_model": cmp, "notes": run.notes}))
        return 0 if r.ok else 1
    print(f"nccl {args.collective} on {topo.describe()}, {r.mode}, {human_size(size)}")
    launched = cmp.get("launched_channels", run.nccl.channels)
    on = f"{launched} of its {run.nccl.channels}" if launched < run.nccl.channels else f"{run.nccl.channels}"
    print(f"  NCCL {run.nccl.version} runs {run.nccl.algorithm}/{run.nccl.protocol} on {on} channels")
    if run.nccl.algorithm != "p2p":
        print(f"  NCCL's model {human_time(cmp['time_s'])} = {cmp['latency_s'] * 1e6:.1f} us latency + "
              f"{human_size(size)} / {cmp['algbw_GBps']:.1f} GB/s ({human_time(cmp['bandwidth_s'])}); simulated "
              f"{human_time(run.time)}, {cmp['ratio']:.2f}x NCCL's model")
    for why in cmp["why"]:
        print(f"  differs    {why}")
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
