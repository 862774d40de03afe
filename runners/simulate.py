"""``collsched simulate`` and ``collsched sweep``: predict a schedule's time on a network.

    collsched simulate --collective K --algorithm A --topology SPEC --size 256MiB [--chunks C]
                       [--mode dataflow|lockstep] [--bandwidth 50GB/s] [--latency 1us]
                       [--trace F.json] [--plot F.png] [--json]
    collsched sweep --collective K --topology SPEC --sizes 1KiB:1GiB [--plot F.png] [--json]

Units: sizes take B, KiB, MiB, GiB (K, M, G are binary too, as in nccl-tests)
or plain bytes; bandwidths B/s, KB/s, MB/s, GB/s (decimal, as in nccl-tests)
or plain bytes/s; times s, ms, us, ns or plain seconds. Exit status: 0 when
every run met its postcondition, 1 when one did not, 2 for bad input.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections.abc import Sequence
from typing import Any

from algorithms import registry
from algorithms.ir import Kind, Schedule
from runners.cli import UsageError, add_schedule_args, schedule_from_args
from runners.units import parse_bandwidth, parse_duration, parse_size, parse_sizes

__all__ = ["add_parser", "parse_bandwidth", "parse_duration", "parse_size", "parse_sizes"]

# Same text as sim.topology.SPEC_FORMS, repeated so that building the parser imports no networkx.
_SPEC_FORMS = "ring:P, uring:P, full:P, switch:P, torus:RxC, fattree:K, cluster:NxG, dgx-h100:N, or a topology file"
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


def _network_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topology", "-t", required=True, metavar="SPEC",
                   help=f"{_SPEC_FORMS}. Links run at 50 GB/s and 1 us unless --bandwidth/--latency say otherwise; "
                        "cluster and dgx-h100: 450 GB/s, 0.5 us to the node switch and 50 GB/s, 1 us per NIC")
    p.add_argument("--mode", choices=("dataflow", "lockstep"), default="dataflow",
                   help="dataflow: a transfer starts when its dependencies are done (default); "
                        "lockstep: a step starts when the previous one is done")
    p.add_argument("--bandwidth", metavar="BW", help="set every link's bandwidth, e.g. 50GB/s")
    p.add_argument("--latency", metavar="T", help="set every link's latency, e.g. 1us")
    p.add_argument("--overhead", metavar="T", help="per-message endpoint overhead, e.g. 2us (default 0)")
    p.add_argument("--reduce-bw", metavar="BW", help="reduction throughput per rank, e.g. 100GB/s (default: free)")
    p.add_argument("--link-down", action="append", default=[], metavar="U-V",
                   help="take the cable between nodes U and V down (repeatable)")
    p.add_argument("--degrade", action="append", default=[], metavar="U-V=F",
                   help="run the cable U-V at factor F of its bandwidth (repeatable)")
    p.add_argument("--straggler", action="append", default=[], metavar="R=T",
                   help="add delay T to every message rank R sends or receives (repeatable)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def add_parser(subparsers: Any) -> None:
    """Register ``simulate`` and ``sweep``."""
    p = subparsers.add_parser("simulate", help="simulate a schedule on a topology (time, bandwidth, trace)")
    add_schedule_args(p, ranks=False)
    _network_args(p)
    p.add_argument("--size", "-s", required=True, metavar="N", help="message size (nccl-tests convention), e.g. 256MiB")
    p.add_argument("--trace", metavar="F.json", help="write a Chrome/Perfetto trace")
    p.add_argument("--plot", metavar="F.png", help="write a timeline plot")
    p.add_argument("--json", action="store_true",
                   help='print {"ok", "time_s", "algbw_GBps", "busbw_GBps", "transfers", "events", "wall_s"}')
    p.set_defaults(func=_cmd_simulate)

    p = subparsers.add_parser("sweep", help="simulate every algorithm of a kind over message sizes")
    kinds = [k.value for k in Kind]
    p.add_argument("--collective", "-c", required=True, choices=kinds, metavar="K", help=", ".join(kinds))
    p.add_argument("--algorithms", metavar="A,B", help="only these algorithms (default: every one that fits p)")
    p.add_argument("--chunks", "-k", type=int, metavar="k", help="chunks per piece for every algorithm")
    p.add_argument("--root", "-r", type=int, metavar="R", help="root rank for rooted kinds (default 0)")
    _network_args(p)
    p.add_argument("--sizes", required=True, metavar="A:B", help="A:B doubles from A to B; A:B:F multiplies by F; "
                                                                   "or A,B,C")
    p.add_argument("--plot", metavar="F.png", help="write a plot of time vs size per algorithm")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.set_defaults(func=_cmd_sweep)


def _topology(args: argparse.Namespace) -> Any:
    from sim.topology import from_spec

    bw = parse_bandwidth(args.bandwidth) if args.bandwidth is not None else None
    lat = parse_duration(args.latency) if args.latency is not None else None
    return from_spec(args.topology, bandwidth=bw, latency=lat)


def _engine_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "mode": args.mode,
        "overhead": parse_duration(args.overhead, "--overhead") if args.overhead is not None else 0.0,
        "reduce_bandwidth": parse_bandwidth(args.reduce_bw, "--reduce-bw") if args.reduce_bw is not None else None,
        "faults": _faults(args),
        "progress": not args.no_progress,
    }


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
    schedule = schedule_from_args(args, ranks=topo.ranks)
    t0 = time.perf_counter()
    result = simulate(schedule, topo, size, **opts)
    wall = time.perf_counter() - t0
    _write_outputs(result, args)
    if args.json:
        print(json.dumps({**result.to_dict(), "wall_s": wall}))
    else:
        _print_result(result, schedule, wall, args)
    return 0 if result.ok else 1


def _print_result(result: Any, schedule: Schedule, wall: float, args: argparse.Namespace) -> None:
    from sim.cost import predict, route_alpha_beta

    topo = result.topology
    print(f"{schedule.name} {schedule.collective.describe()} on {topo.describe()}, {result.mode}, "
          f"{_human_size(result.size)}")
    algbw, busbw = _gb(result.algbw), _gb(result.busbw)
    print(f"  time       {_human_time(result.time)}")
    print(f"  algbw      {algbw:.4f} GB/s" if algbw is not None else "  algbw      - (no time)")
    print(f"  busbw      {busbw:.4f} GB/s" if busbw is not None else "  busbw      - (no time)")
    print(f"  transfers  {result.transfers}, events {result.events}, simulated in {wall:.3f} s")
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
    if result.ok:
        print("  postcondition OK")
    else:
        print(f"  postcondition BROKEN: {len(result.violations)} violation(s)")
        for v in result.violations[:20]:
            print(f"    {v}")


def _cmd_sweep(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from sim.engine import simulate
    from sim.trace import plot_sweep

    sizes = parse_sizes(args.sizes)
    opts = _engine_options(args)
    opts["progress"] = False
    topo = _topology(args)
    p = topo.ranks
    wanted = None if args.algorithms is None else [a.strip() for a in args.algorithms.split(",") if a.strip()]
    schedules: list[Schedule] = []
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
        schedules.append(alg.build(p, root=args.root, **params))
    if not schedules:
        raise UsageError(f"no {args.collective} algorithm serves {p} ranks")
    rows: list[dict[str, Any]] = []
    all_ok = True
    with tqdm(total=len(sizes) * len(schedules), unit="run", file=sys.stderr, delay=0.5, leave=False,
              disable=args.no_progress) as bar:
        for size in sizes:
            for s in schedules:
                r = simulate(s, topo, size, **opts)
                all_ok &= r.ok
                rows.append({"algorithm": s.name, "size": size, "time_s": r.time, "algbw_GBps": _gb(r.algbw),
                             "busbw_GBps": _gb(r.busbw), "ok": r.ok})
                bar.update(1)
    names = [s.name for s in schedules]
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
    print(f"{kind} on {where}: time per algorithm (* = fastest); busbw of the fastest")
    by = {(r["algorithm"], r["size"]): r for r in rows}
    head = ["size", *names, "best busbw GB/s"]
    table = [head]
    for size in sizes:
        line = [_human_size(size)]
        for name in names:
            r = by[(name, size)]
            mark = "*" if best[size] == name else " "
            bad = "" if r["ok"] else " !"
            line.append(f"{_human_time(r['time_s'])}{mark}{bad}")
        bb = by[(best[size], size)]["busbw_GBps"]
        line.append(f"{bb:.3f}" if bb is not None else "-")
        table.append(line)
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for row in table:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
