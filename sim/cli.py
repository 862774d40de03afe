"""The torch-free half of the ``collsched`` command line: list, verify, export, simulate, sweep.

    collsched list [--json]
    collsched verify --collective K --algorithm A --ranks P [--chunks k] [--root R] [--json]
    collsched verify --file F [--json]
    collsched export --collective K --algorithm A --ranks P [--chunks k] [--root R] -o F [--json]
                     [--format json|msccl] [--proto Simple|LL|LL128] [--min-bytes S] [--max-bytes S]
    collsched convert IN OUT [--format json|msccl] [--proto ...] [--json]
    collsched simulate --collective K --algorithm A --topology SPEC --size 256MiB [--chunks C]
                       [--mode dataflow|lockstep] [--bandwidth 50GB/s] [--latency 1us]
                       [--placement identity|snake|FILE] [--trace F.json] [--plot F.png] [--json]
    collsched sweep --collective K --topology SPEC --sizes 1KiB:1GiB [--file F ...] [--placement P]
                    [--plot F.png] [--json]
    collsched bound --collective K --topology SPEC --size 1GiB [--root R] [--json]
    collsched synthesize --collective K --topology SPEC [--root R] [--chunks k] -o F.json [--json]

``simulate`` and ``sweep`` print each result's efficiency, the lower bound of
``sim.bounds`` over the simulated time (``--bound auto``: up to 128 ranks); ``bound`` and ``synthesize`` live in
``sim.cli_bounds``, and ``-a synth --param topology=SPEC`` names the
synthesizer wherever an algorithm is named (``algorithms.synth``).

A schedule file (``--file``, ``convert``'s IN) is collsched.schedule/1 JSON or
MSCCL-IR XML (``algorithms.msccl``); ``verify`` also runs the MSCCL-IR
executability check on XML, ``export``/``convert`` write XML for a ``.xml``
name or ``--format msccl``.

``--placement`` puts rank r on topology node placement[r] (``sim.placement``);
``simulate`` says which pairs of ranks that exchange data sit more than one
hop apart (JSON: ``stretched_pairs``, a list of [src, dst, hops]).

Every subcommand takes ``--import MODULE`` (repeatable; also the environment
variable ``COLLSCHED_IMPORT=mod1,mod2``): the modules are imported before the
command runs, so algorithms they register with ``@register`` can be named
with ``--algorithm``. Installed packages register through the entry-point
group ``collsched.algorithms`` (see ``algorithms.registry``).

Units: sizes take B, KiB, MiB, GiB (K, M, G are binary too, as in nccl-tests)
or plain bytes; bandwidths B/s, KB/s, MB/s, GB/s (decimal, as in nccl-tests)
or plain bytes/s; times s, ms, us, ns or plain seconds.

Exit status: 0 success (verify, simulate, sweep: every schedule met its
postcondition), 1 a schedule is incorrect, 2 usage or input error (one line
on stderr, no traceback). With ``--json`` a command prints exactly one JSON
object on stdout, errors included: ``{"ok": false, "error": "..."}``.

The torch commands (``bench``, ``demo``) live in ``runners`` and are added by
``runners.cli``, the installed entry point; building the parser imports no
torch, numpy, simpy or networkx.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from algorithms import fileformat, registry
from algorithms.errors import CollschedError, ScheduleError, UsageError
from algorithms.ir import Kind, Schedule
from sim.units import parse_bandwidth, parse_duration, parse_size, parse_sizes

__all__ = ["add_common_args", "add_schedule_args", "build_parser", "main", "schedule_from_args"]

# Same texts as sim.topology.SPEC_FORMS and sim.placement.PLACEMENT_FORMS, repeated so that building the
# parser imports no networkx.
_SPEC_FORMS = "ring:P, uring:P, full:P, switch:P, torus:RxC, fattree:K, cluster:NxG, dgx-h100:N, or a topology file"
_PLACEMENT_FORMS = "identity, snake (torus:RxC only), or a placement file (collsched.placement/1 JSON)"


class ParseError(Exception):
    """argparse found the command line malformed (raised instead of exiting, so --json can answer)."""

    def __init__(self, prog: str, usage: str, message: str) -> None:
        super().__init__(message)
        self.prog, self.usage, self.message = prog, usage, message


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors raise ``ParseError`` instead of exiting."""

    def error(self, message: str) -> NoReturn:
        raise ParseError(self.prog, self.format_usage(), message)


def add_common_args(parser: argparse.ArgumentParser, *, json_help: str = "print one JSON object") -> None:
    """``--import MODULE`` (repeatable) and ``--json``: every subcommand has both."""
    parser.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                        help="import MODULE first, so the algorithms it registers can be named (repeatable; "
                             f"also {registry.ENV_IMPORT}=mod1,mod2)")
    parser.add_argument("--json", action="store_true", help=json_help)


def _param(text: str) -> tuple[str, int | str]:
    """NAME=VALUE: an integer when VALUE reads as one, else the text (``topology=cluster:2x8``);
    the algorithm's parameter says which it takes (``registry.Algorithm.resolve``)."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    try:
        return name, int(value)
    except ValueError:
        return name, value


def add_schedule_args(parser: argparse.ArgumentParser, *, ranks: bool = True, file: bool = True) -> None:
    """The options that pick a schedule: a registered algorithm, or (with ``file``) a schedule file."""
    kinds = [k.value for k in Kind]
    parser.add_argument("--collective", "-c", choices=kinds, metavar="K", help=f"collective kind: {', '.join(kinds)}")
    parser.add_argument("--algorithm", "-a", metavar="A", help="algorithm name (see `collsched list`)")
    if ranks:
        parser.add_argument("--ranks", "-p", type=int, metavar="P", help="world size")
    parser.add_argument("--chunks", "-k", type=int, metavar="k",
                        help="chunks per logical piece (default 1); the schedule records the resulting chunk count")
    parser.add_argument("--root", "-r", type=int, metavar="R", help="root rank for rooted kinds (default 0)")
    parser.add_argument("--param", action="append", type=_param, default=[], metavar="NAME=VALUE",
                        help="other algorithm parameter, e.g. --param group=4 (repeatable)")
    if file:
        parser.add_argument("--file", "-f", metavar="F",
                            help="a schedule file (collsched.schedule/1 JSON, or MSCCL-IR XML)")


def schedule_from_args(args: argparse.Namespace, *, ranks: int | None = None, allow_custom: bool = False) -> Schedule:
    """Build or load the schedule the options name; ``UsageError`` when they do not fit together.

    ``allow_custom``: an MSCCL-IR file with ``coll="custom"`` loads (for timing only: it has no postcondition).
    """
    if getattr(args, "file", None):
        extra = [o for o in ("collective", "algorithm", "chunks", "root") if getattr(args, o, None) is not None]
        if getattr(args, "ranks", None) is not None:
            extra.append("ranks")
        if extra or args.param:
            raise UsageError(f"--file cannot be combined with --{', --'.join(extra or ['param'])}")
        if allow_custom and _is_msccl(args.file):
            from algorithms.msccl import load_msccl

            return load_msccl(args.file, allow_custom=True)
        return fileformat.load(args.file)
    missing = [o for o in ("collective", "algorithm") if getattr(args, o, None) is None]
    p = ranks if ranks is not None else getattr(args, "ranks", None)
    if p is None:
        missing.append("ranks")
    if missing:
        alt = " (or --file F)" if hasattr(args, "file") else ""
        raise UsageError(f"missing --{', --'.join(missing)}{alt}")
    params: dict[str, Any] = dict(args.param)
    if args.chunks is not None:
        params["chunks"] = args.chunks
    algorithm = registry.get(args.collective, args.algorithm)
    return algorithm.build(p, root=args.root, **params)  # type: ignore[arg-type]


# ---------------------------------------------------------------- list, verify, export


def _cmd_list(args: argparse.Namespace) -> int:
    rows = [
        {
            "collective": a.kind.value,
            "algorithm": a.name,
            "constraints": list(a.constraints),
            "parameters": {p.name: {"default": p.default, "help": p.help} for p in a.parameters},
            "cost": a.cost.formula if a.cost else None,
            "source": a.source,
        }
        for a in registry.algorithms()
    ]
    if args.json:
        print(json.dumps({"ok": True, "algorithms": rows}, indent=1))
        return 0
    head = ("collective", "algorithm", "constraints", "parameters", "cost (α latency, β s/byte, γ s/byte reduced)")
    table = [head] + [
        (a.kind.value, a.name, "; ".join(a.constraints) or "any p",
         ", ".join(p.name for p in a.parameters) or "-", a.cost.formula if a.cost else "-")
        for a in registry.algorithms()
    ]
    widths = [max(len(str(row[i])) for row in table) for i in range(len(head))]
    for row in table:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return 0


def _is_msccl(path: str) -> bool:
    """True when the file is MSCCL-IR XML (by its name, or by its first bytes)."""
    if fileformat.is_xml_path(path):
        return True
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError:
        return False
    from algorithms.msccl import looks_like_xml

    return looks_like_xml(head)


def _cmd_verify(args: argparse.Namespace) -> int:
    from sim.verify import verify

    findings: list[Any] = []
    if getattr(args, "file", None) and _is_msccl(args.file):
        # MSCCL-IR: the static executability check first; what would hang or be rejected is a violation.
        from algorithms.msccl import check_msccl

        findings = check_msccl(args.file)
        errors = [f for f in findings if f.severity == "error"]
        try:
            schedule = schedule_from_args(args)
        except ScheduleError as e:
            if not errors:
                raise
            return _print_findings(args, findings, f"{args.file}: cannot run: {e}")
        report = verify(schedule)
    else:
        report = verify(schedule_from_args(args))
    ok = report.ok and not any(f.severity == "error" for f in findings)
    if args.json:
        d = report.to_dict()
        d["ok"] = ok
        if findings:
            d["msccl_findings"] = [f.to_dict() for f in findings]
        print(json.dumps(d))
    else:
        print(report)
        for f in findings:
            print(f"  MSCCL {f}")
    return 0 if ok else 1


def _print_findings(args: argparse.Namespace, findings: Sequence[Any], head: str) -> int:
    """Report an MSCCL-IR file that cannot be imported because of its check's findings (exit status 1)."""
    if args.json:
        print(json.dumps({"ok": False, "error": head, "violations": [],
                          "msccl_findings": [f.to_dict() for f in findings]}))
    else:
        print(head)
        for f in findings:
            print(f"  MSCCL {f}")
    return 1


def _save(schedule: Schedule, args: argparse.Namespace) -> None:
    """Write ``schedule`` to ``args.output``: MSCCL-IR for --format msccl or a .xml name, else JSON."""
    fmt = args.format or ("msccl" if fileformat.is_xml_path(args.output) else "json")
    msccl_opts = {k: getattr(args, k) for k in ("proto", "nchannels", "min_bytes", "max_bytes", "staged")
                  if getattr(args, k, None) is not None}
    for k in ("min_bytes", "max_bytes"):
        if k in msccl_opts:
            msccl_opts[k] = int(parse_size(msccl_opts[k]))
    try:
        if fmt == "msccl":
            from algorithms.msccl import save_msccl

            save_msccl(schedule, args.output, **msccl_opts)
        else:
            if msccl_opts:
                raise UsageError(f"--{next(iter(msccl_opts)).replace('_', '-')} is for MSCCL-IR output "
                                 "(--format msccl or a .xml name)")
            fileformat.save(schedule, args.output)
    except OSError as e:
        raise UsageError(f"cannot write {args.output}: {e.strerror or e}") from None


def _add_output_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=("json", "msccl"), default=None,
                   help="file format (default: msccl for a .xml name, else json)")
    p.add_argument("--proto", choices=("Simple", "LL", "LL128"), default=None,
                   help="MSCCL-IR: the protocol the executor runs it with (default Simple)")
    p.add_argument("--nchannels", type=int, default=None, metavar="N",
                   help="MSCCL-IR: spread connections over at least N channels (default 1)")
    p.add_argument("--min-bytes", default=None, metavar="SIZE",
                   help="MSCCL-IR: smallest call the executor picks it for (default 0)")
    p.add_argument("--max-bytes", default=None, metavar="SIZE",
                   help="MSCCL-IR: largest call the executor picks it for (default 0: unlimited)")
    p.add_argument("--staged", action="store_const", const=True, default=None,
                   help="MSCCL-IR: receive concurrent reductions into one slot into scratch and add them locally "
                        "(instead of one rrc after another)")


def _cmd_convert(args: argparse.Namespace) -> int:
    schedule = fileformat.load(args.input)
    _save(schedule, args)
    if args.json:
        print(json.dumps({"ok": True, "input": str(args.input), "output": str(args.output), "name": schedule.name,
                          "steps": len(schedule.steps), "transfers": schedule.num_transfers}))
    else:
        print(f"wrote {args.output}: {schedule.name} ({schedule.collective.describe()}), "
              f"{len(schedule.steps)} steps, {schedule.num_transfers} transfers")
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    schedule = schedule_from_args(args)
    _save(schedule, args)
    if args.json:
        print(json.dumps({"ok": True, "output": str(args.output), "name": schedule.name,
                          "collective": schedule.collective.kind.value, "ranks": schedule.collective.ranks,
                          "steps": len(schedule.steps), "transfers": schedule.num_transfers}))
    else:
        print(f"wrote {args.output}: {schedule.name} ({schedule.collective.describe()}), "
              f"{len(schedule.steps)} steps, {schedule.num_transfers} transfers")
    return 0


# ---------------------------------------------------------------- simulate, sweep


def _node(text: str) -> int | str:
    text = text.strip()
    return int(text) if text.isdigit() else text


def _link(text: str, what: str) -> tuple[int | str, int | str]:
    m = re.fullmatch(r"([^-\s]+)-([^-\s]+)", text.strip())
    if not m:
        raise UsageError(f"{what}: expected U-V (two node names), got {text!r}")
    return _node(m.group(1)), _node(m.group(2))


def _faults(args: argparse.Namespace) -> Any:
    from sim.engine import Faults

    down = tuple(_link(s, "--link-down") for s in args.link_down)
    degraded: dict[tuple[int | str, int | str], float] = {}
    for s in args.degrade:
        link, sep, f = s.partition("=")
        try:
            factor = float(f)
        except ValueError:
            factor = math.nan
        if not sep or not 0 < factor < math.inf:
            raise UsageError(f"--degrade: expected U-V=FACTOR with FACTOR > 0, got {s!r}")
        degraded[_link(link, "--degrade")] = factor
    stragglers: dict[int, float] = {}
    for s in args.straggler:
        rank, sep, delay = s.partition("=")
        if not sep or not rank.strip().isdigit():
            raise UsageError(f"--straggler: expected RANK=DELAY such as 3=10us, got {s!r}")
        stragglers[int(rank)] = parse_duration(delay, "--straggler")
    return Faults(down=down, degraded=degraded, stragglers=stragglers)


def add_routing_arg(p: argparse.ArgumentParser) -> None:
    """--routing: the simulator's least-latency routes, or explicit ones (``sim.synth.routed``)."""
    p.add_argument("--routing", choices=("shortest", "widest", "neighbour"), default="shortest",
                   help="message routes: least latency (default); widest bottleneck where that is wider; or "
                        "neighbouring ranks over their own link or shared switch (sim.synth.routed)")


def _network_args(p: argparse.ArgumentParser) -> None:
    add_routing_arg(p)
    p.add_argument("--topology", "-t", required=True, metavar="SPEC",
                   help=f"{_SPEC_FORMS}. Links run at 50 GB/s and 1 us unless --bandwidth/--latency say otherwise; "
                        "cluster: 450 GB/s, 0.5 us to the node switch and 50 GB/s, 1 us per NIC; dgx-h100: NCCL's "
                        "effective figures (docs/design.md). A machine file (collsched calibrate) also sets "
                        "--overhead, --reduce-bw, --launch and --message-cpu unless they are given")
    p.add_argument("--mode", choices=("dataflow", "lockstep"), default="dataflow",
                   help="dataflow: a transfer starts when its dependencies are done (default); "
                        "lockstep: a step starts when the previous one is done")
    p.add_argument("--bandwidth", metavar="BW", help="set every link's bandwidth, e.g. 50GB/s")
    p.add_argument("--latency", metavar="T", help="set every link's latency, e.g. 1us")
    p.add_argument("--overhead", metavar="T", help="per-message endpoint overhead, e.g. 2us (default 0)")
    p.add_argument("--reduce-bw", metavar="BW", help="reduction throughput per rank, e.g. 100GB/s (default: free)")
    p.add_argument("--launch", metavar="T", help="fixed cost per collective before its first transfer, e.g. 10us "
                                                 "(default 0)")
    p.add_argument("--message-cpu", metavar="T", help="a rank's processor time per message it sends or receives, "
                                                      "one at a time, e.g. 20us (default 0)")
    p.add_argument("--link-down", action="append", default=[], metavar="U-V",
                   help="take the cable between nodes U and V down (repeatable)")
    p.add_argument("--degrade", action="append", default=[], metavar="U-V=F",
                   help="run the cable U-V at factor F of its bandwidth (repeatable)")
    p.add_argument("--straggler", action="append", default=[], metavar="R=T",
                   help="add delay T to every message rank R sends or receives (repeatable)")
    p.add_argument("--placement", default="identity", metavar="SPEC",
                   help=f"which topology node each rank runs on: {_PLACEMENT_FORMS}; default identity (rank r on "
                        "node r). Faults then name ranks: node U of --link-down is where rank U runs")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--engine", choices=("auto", "simpy", "fast"), default="auto",
                   help="simpy (the reference), fast (vectorised, the same times) or auto (fast whenever it is "
                        "exact for the run; default)")
    p.add_argument("--bound", choices=("auto", "yes", "no"), default="auto",
                   help=f"compute the lower bound and efficiency (exact max-flow cuts, a minute at 1024 ranks): "
                        f"auto does up to {BOUND_AUTO_RANKS} ranks (default auto)")


BOUND_AUTO_RANKS = 128
"""Largest world size for which simulate and sweep compute the bound unless asked (``--bound``): the exact
cuts take about a second on ring:128, 5 s on ring:256, 35 s on switch:1024 and 90 s on ring:1024, where the
fast engine simulates in one."""


def _want_bound(args: argparse.Namespace, ranks: int) -> bool:
    return args.bound == "yes" or (args.bound == "auto" and ranks <= BOUND_AUTO_RANKS)


def _add_sim_parsers(subparsers: Any) -> None:
    p = subparsers.add_parser("simulate", help="simulate a schedule on a topology (time, bandwidth, trace)")
    add_schedule_args(p, ranks=False)
    _network_args(p)
    p.add_argument("--size", "-s", required=True, metavar="N", help="message size (nccl-tests convention), e.g. 256MiB")
    p.add_argument("--trace", metavar="F.json", help="write a Chrome/Perfetto trace")
    p.add_argument("--plot", metavar="F.png", help="write a timeline plot")
    add_common_args(p, json_help='print {"ok", "time_s", "algbw_GBps", "busbw_GBps", "transfers", "events", "engine", '
                                 '"wall_s", "peak_rss_MiB"}')
    p.set_defaults(func=_cmd_simulate)

    p = subparsers.add_parser("sweep", help="simulate every algorithm of a kind over message sizes")
    kinds = [k.value for k in Kind]
    p.add_argument("--collective", "-c", required=True, choices=kinds, metavar="K", help=", ".join(kinds))
    p.add_argument("--algorithms", metavar="A,B", help="only these algorithms (default: every one that fits p)")
    p.add_argument("--file", "-f", dest="files", action="append", default=[], metavar="F",
                   help="also sweep this schedule file (its collective and ranks must match; repeatable)")
    p.add_argument("--chunks", "-k", type=int, metavar="k", help="chunks per piece for every algorithm")
    p.add_argument("--root", "-r", type=int, metavar="R", help="root rank for rooted kinds (default 0)")
    _network_args(p)
    p.add_argument("--sizes", required=True, metavar="A:B", help="A:B doubles from A to B; A:B:F multiplies by F; "
                                                                   "or A,B,C")
    p.add_argument("--plot", metavar="F.png", help="write a plot of time vs size per algorithm")
    add_common_args(p, json_help="print the results as JSON")
    p.set_defaults(func=_cmd_sweep)


def _topology(args: argparse.Namespace) -> Any:
    """The topology of --topology, its links set by --bandwidth/--latency, its ranks placed by --placement."""
    from sim.placement import place, placement
    from sim.topology import from_spec

    bw = parse_bandwidth(args.bandwidth) if args.bandwidth is not None else None
    lat = parse_duration(args.latency) if args.latency is not None else None
    topo = from_spec(args.topology, bandwidth=bw, latency=lat)
    if args.placement != "identity":
        topo = place(topo, placement(args.placement, topo, topo.ranks),
                     name=f"{topo.name} placed {Path(args.placement).name}")
    if getattr(args, "routing", "shortest") != "shortest":
        from sim.synth import routed

        topo = routed(topo, args.routing)
    return topo


def _engine_options(args: argparse.Namespace) -> dict[str, Any]:
    from sim.machine import engine_for

    machine = engine_for(args.topology)  # a machine file's or a preset's engine parameters (sim.machine)
    return {
        "mode": args.mode,
        "overhead": parse_duration(args.overhead, "--overhead") if args.overhead is not None else machine.overhead,
        "reduce_bandwidth": parse_bandwidth(args.reduce_bw, "--reduce-bw") if args.reduce_bw is not None
        else machine.reduce_bandwidth,
        "launch": parse_duration(args.launch, "--launch") if args.launch is not None else machine.launch,
        "message_cpu": parse_duration(args.message_cpu, "--message-cpu") if args.message_cpu is not None
        else machine.message_cpu,
        "faults": _faults(args),
        "progress": not args.no_progress,
        "engine": args.engine,
    }


def _peak_rss_mib() -> float:
    """This process's peak resident memory so far, in MiB (``ru_maxrss``: KiB on Linux, bytes on macOS)."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024


def _gb(x: float) -> float | None:
    return x / 1e9 if math.isfinite(x) else None


def _human_size(n: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.4g}{unit}"
    return f"{n:.4g}B"


def _human_time(t: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if t >= scale:
            return f"{t / scale:.4g} {unit}"
    return f"{t / 1e-9:.4g} ns"


def _write_outputs(result: Any, args: argparse.Namespace) -> None:
    from sim.trace import plot_timeline, write_trace

    for path, write in ((args.trace, write_trace), (args.plot, plot_timeline)):
        if path:
            try:
                write(result, path)
            except OSError as e:
                raise UsageError(f"cannot write {path}: {e.strerror or e}") from None


def _cmd_simulate(args: argparse.Namespace) -> int:
    from sim.engine import simulate

    size = parse_size(args.size)
    opts = _engine_options(args)
    topo = _topology(args)
    schedule = schedule_from_args(args, ranks=topo.ranks, allow_custom=True)
    t0 = time.perf_counter()
    result = simulate(schedule, topo, size, **opts)
    wall = time.perf_counter() - t0
    _write_outputs(result, args)
    from sim.placement import stretched_pairs

    stretched = stretched_pairs(schedule, topo)
    from sim.cli_bounds import bound_for

    b = None if schedule.name.startswith("custom:") or not _want_bound(args, topo.ranks) else bound_for(
        schedule.collective.kind, schedule.collective.root, topo, size, opts["faults"])
    eff = {"bound_s": b.bound_s, "efficiency": b.efficiency(result.time)} if b is not None else {}
    if args.json:
        print(json.dumps({**result.to_dict(), "wall_s": wall, "peak_rss_MiB": _peak_rss_mib(),
                          "stretched_pairs": [list(t) for t in stretched], **eff}))
    else:
        _print_result(result, schedule, wall, args)
        if b is not None:
            print(f"  bound      {_human_time(b.bound_s)} (`collsched bound`), efficiency "
                  f"{100 * b.efficiency(result.time):.1f}%")
        elif not _want_bound(args, topo.ranks):
            print(f"  bound      not computed above {BOUND_AUTO_RANKS} ranks (--bound yes, or `collsched bound`)")
        _print_stretched(stretched, topo, args.placement)
    if schedule.name.startswith("custom:"):  # an MSCCL-IR custom program: timing only, no postcondition
        return 0
    return 0 if result.ok else 1


def _print_stretched(stretched: Sequence[tuple[int, int, int]], topo: Any, placement: str) -> None:
    if not stretched:
        print("  neighbours every pair of ranks that exchanges data is one hop apart")
        return
    shown = ", ".join(f"{s}->{d} ({h} hops)" for s, d, h in stretched[:6])
    more = f" and {len(stretched) - 6} more" if len(stretched) > 6 else ""
    hint = " (try --placement snake)" if placement != "snake" and topo.name.startswith("torus:") else ""
    print(f"  stretched  {len(stretched)} pair(s) of ranks that exchange data are more than one hop apart: "
          f"{shown}{more}{hint}")


def _print_result(result: Any, schedule: Schedule, wall: float, args: argparse.Namespace) -> None:
    from sim.cost import predict, route_alpha_beta

    topo = result.topology
    print(f"{schedule.name} {schedule.collective.describe()} on {topo.describe()}, {result.mode}, "
          f"{_human_size(result.size)}")
    algbw, busbw = _gb(result.algbw), _gb(result.busbw)
    print(f"  time       {_human_time(result.time)}")
    print(f"  algbw      {algbw:.4f} GB/s" if algbw is not None else "  algbw      - (no time)")
    print(f"  busbw      {busbw:.4f} GB/s" if busbw is not None else "  busbw      - (no time)")
    print(f"  transfers  {result.transfers}, events {result.events}, simulated in {wall:.3f} s by the "
          f"{result.engine} engine, peak memory {_peak_rss_mib():.0f} MiB")
    if result.link_busy and result.time > 0:
        (u, v), busy = max(result.link_busy.items(), key=lambda kv: kv[1])
        print(f"  busiest    link {u}->{v}, busy {100 * busy / result.time:.1f}% of the time")
    if topo.ranks > 1 and getattr(args, "file", None) is None:
        alg = registry.get(schedule.collective.kind, args.algorithm)
        if alg.cost is not None:
            alpha, beta = route_alpha_beta(topo)
            params = dict(args.param)
            if args.chunks is not None:
                params["chunks"] = args.chunks
            pred = predict(alg.kind, alg.name, topo.ranks, result.size, alpha=alpha, beta=beta, params=params)
            print(f"  closed form {_human_time(pred.time)} ({pred.formula}; α={alpha:.3g} s, β=1/{1 / beta:.4g} B/s "
                  f"from route 0->1)")
    if schedule.name.startswith("custom:"):
        print("  postcondition none (an MSCCL-IR custom program: simulated for its timing only)")
    elif result.ok:
        print("  postcondition OK")
    else:
        print(f"  postcondition BROKEN: {len(result.violations)} violation(s)")
        for v in result.violations[:20]:
            print(f"    {v}")


def _file_schedules(paths: Sequence[str], kind: Kind, p: int) -> list[tuple[str, Schedule]]:
    """(label, schedule) of each --file; its collective must be ``kind`` on ``p`` ranks."""
    out = []
    for path in paths:
        s = fileformat.load(path)
        if s.collective.kind is not kind:
            raise UsageError(f"--file {path}: the schedule is {s.collective.kind.value}, the sweep is {kind.value}")
        if s.collective.ranks != p:
            raise UsageError(f"--file {path}: the schedule has {s.collective.ranks} ranks, the topology {p}")
        out.append((f"{s.name} [{Path(path).name}]", s))
    return out


def _cmd_sweep(args: argparse.Namespace) -> int:
    from sim.engine import simulate
    from sim.progress import bar
    from sim.trace import plot_sweep

    sizes = parse_sizes(args.sizes)
    opts = _engine_options(args)
    opts["progress"] = False
    topo = _topology(args)
    p = topo.ranks
    wanted = None if args.algorithms is None else [a.strip() for a in args.algorithms.split(",") if a.strip()]
    schedules: list[tuple[str, Schedule]] = []
    files = _file_schedules(args.files, Kind(args.collective), p)
    candidates = [registry.get(args.collective, a) for a in wanted] if wanted else list(
        registry.algorithms(args.collective))
    for alg in candidates:
        params: dict[str, Any] = {}
        if args.chunks is not None and any(x.name == "chunks" for x in alg.parameters):
            params["chunks"] = args.chunks
        reason = alg.unsupported(p, params)
        if reason is not None:
            if wanted:
                raise UsageError(f"{alg.kind}/{alg.name} cannot serve {p} ranks: {reason}")
            print(f"collsched sweep: skipping {alg.name}: {reason}", file=sys.stderr)
            continue
        s = alg.build(p, root=args.root, **params)
        schedules.append((s.name, s))
    schedules += files
    if not schedules:
        raise UsageError(f"no {args.collective} algorithm serves {p} ranks")
    rows: list[dict[str, Any]] = []
    all_ok = True
    from sim.cli_bounds import bound_for

    root = schedules[0][1].collective.root
    unit = bound_for(Kind(args.collective), root, topo, 1.0, opts["faults"]) if _want_bound(args, p) \
        else None  # cuts once, scaled per size
    with bar(len(sizes) * len(schedules), unit="run", enabled=not args.no_progress) as progress:
        for size in sizes:
            b = unit.scaled(size) if unit is not None else None
            for label, s in schedules:
                r = simulate(s, topo, size, **opts)
                all_ok &= r.ok
                rows.append({"algorithm": label, "size": size, "time_s": r.time, "algbw_GBps": _gb(r.algbw),
                             "busbw_GBps": _gb(r.busbw), "ok": r.ok,
                             "bound_s": b.bound_s if b is not None else None,
                             "efficiency": b.efficiency(r.time) if b is not None else None})
                progress.update(1)
    names = [label for label, _ in schedules]
    best = {size: min((r for r in rows if r["size"] == size), key=lambda r: r["time_s"])["algorithm"]
            for size in sizes}
    if args.plot:
        try:
            plot_sweep([(r["algorithm"], r["size"], r["time_s"]) for r in rows], args.plot,
                       title=f"{args.collective} on {topo.name} ({args.mode})")
        except OSError as e:
            raise UsageError(f"cannot write {args.plot}: {e.strerror or e}") from None
    if args.json:
        print(json.dumps({"collective": args.collective, "topology": topo.name, "ranks": p, "mode": args.mode,
                          "algorithms": names, "results": rows,
                          "best": [{"size": s, "algorithm": best[s]} for s in sizes], "ok": all_ok}))
    else:
        _print_sweep(rows, sizes, names, best, args.collective, topo.describe())
    return 0 if all_ok else 1


def _print_sweep(rows: Sequence[dict[str, Any]], sizes: Sequence[float], names: Sequence[str],
                 best: dict[float, str], kind: str, where: str) -> None:
    print(f"{kind} on {where}: time per algorithm (* = fastest; in brackets, efficiency = bound / time, "
          "see `collsched bound`); busbw of the fastest")
    by = {(r["algorithm"], r["size"]): r for r in rows}
    head = ["size", *names, "best busbw GB/s"]
    table = [head]
    for size in sizes:
        line = [_human_size(size)]
        for name in names:
            r = by[(name, size)]
            mark = "*" if best[size] == name else " "
            bad = "" if r["ok"] else " !"
            eff = f" ({100 * r['efficiency']:.0f}%)" if r["efficiency"] is not None else ""
            line.append(f"{_human_time(r['time_s'])}{mark}{eff}{bad}")
        bb = by[(best[size], size)]["busbw_GBps"]
        line.append(f"{bb:.3f}" if bb is not None else "-")
        table.append(line)
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for row in table:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))


# ---------------------------------------------------------------- parser and entry point


def build_parser(extensions: Sequence[str] = ()) -> Parser:
    """The argument parser: the torch-free commands, then each extension module's ``add_parser(subparsers)``."""
    parser = Parser(prog="collsched", description="Design collective-communication algorithms: list, verify, "
                                                  "export, simulate and sweep schedules (and bench, demo on torch).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("list", help="list the registered algorithms with their constraints and costs")
    add_common_args(p, json_help='print {"ok": true, "algorithms": [...]}')
    p.set_defaults(func=_cmd_list)
    p = sub.add_parser("verify", help="verify a schedule symbolically against its postcondition")
    add_schedule_args(p)
    add_common_args(p, json_help='print {"ok", "violations", "transfers", "steps"}')
    p.set_defaults(func=_cmd_verify)
    p = sub.add_parser("export", help="write a schedule file (collsched.schedule/1 JSON, or MSCCL-IR XML)")
    add_schedule_args(p, file=False)
    p.add_argument("--output", "-o", required=True, metavar="F", help="file to write")
    _add_output_args(p)
    add_common_args(p, json_help='print {"ok", "output", "name", "collective", "ranks", "steps", "transfers"}')
    p.set_defaults(func=_cmd_export)
    p = sub.add_parser("convert", help="convert a schedule file between JSON and MSCCL-IR XML")
    p.add_argument("input", metavar="IN", help="schedule file to read (JSON or MSCCL-IR XML)")
    p.add_argument("output", metavar="OUT", help="file to write")
    _add_output_args(p)
    add_common_args(p, json_help='print {"ok", "input", "output", "name", "steps", "transfers"}')
    p.set_defaults(func=_cmd_convert)
    _add_sim_parsers(sub)
    from sim import cli_bounds  # bound, synthesize (imports nothing heavy until they run)

    cli_bounds.add_parser(sub)
    for name in extensions:
        importlib.import_module(name).add_parser(sub)
    return parser


def _fail(prog: str, message: str, as_json: bool, usage: str = "") -> int:
    if as_json:
        print(json.dumps({"ok": False, "error": message}))
    else:
        print(f"{usage}{prog}: error: {message}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None, *, extensions: Sequence[str] = ()) -> int:
    """Run the command line; returns the exit status (see the module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in argv
    try:
        parser = build_parser(extensions)
        args = parser.parse_args(argv)
    except ParseError as e:
        return _fail(e.prog, e.message, as_json, e.usage)
    try:
        registry.import_modules(args.imports)
        return int(args.func(args))
    except CollschedError as e:
        return _fail(f"collsched {args.command}", str(e), as_json)
    except KeyboardInterrupt:
        print(f"collsched {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`collsched list | head`): stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
