"""``collsched sweep``: every algorithm of a kind (and schedule files) over message sizes."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from algorithms import formats as fileformat
from algorithms import registry
from algorithms.errors import UsageError
from algorithms.ir import ROOTED_KINDS, Collective, Kind, Schedule
from sim.cli.common import (
    add_common_args,
    add_matrix_arg,
    add_network_args,
    bound_for,
    dash_values,
    engine_options,
    gigabytes,
    guard_library_args,
    human_size,
    human_time,
    matrix_from_args,
    topology_from_args,
    want_bound,
)
from sim.units import parse_sizes

__all__ = ["add_parser"]


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


def _nccl_model(topo: Any) -> bool:
    from sim.topology.gpus import system_of

    return system_of(topo) is not None


def _params(args: argparse.Namespace, topo: Any, alg: registry.Algorithm) -> dict[str, Any]:
    """``alg``'s parameters in the sweep: the topology's node size as its group, and ``--chunks``."""
    from sim.cli.runtime import default_group

    params = default_group(argparse.Namespace(collective=args.collective, algorithm=alg.name), topo, {})
    if args.chunks is not None and any(x.name == "chunks" for x in alg.parameters):
        params["chunks"] = args.chunks
    return params


def _in_network(args: argparse.Namespace, topo: Any) -> list[tuple[str, Schedule]]:
    """The by-name algorithms whose switch operations this topology performs (``sim.topology.switches``):
    NVLS on an NVSwitch that reduces, SHARP with ``+sharp``, multicast; the synthesizer stays by name only."""
    from sim.topology.errors import TopologyError
    from sim.topology.switches import capable_switches, check_schedule

    if matrix_from_args(args, args.collective, topo.ranks) is not None or not capable_switches(topo):
        return []
    out = []
    for alg in registry.by_name_only(args.collective):
        params = _params(args, topo, alg)
        if alg.name == "synth" or alg.unsupported(topo.ranks, params) is not None:
            continue
        s = alg.build(topo.ranks, root=args.root, **params)
        try:
            check_schedule(s, topo)
        except TopologyError:
            continue  # e.g. one node's NVLS on several nodes
        out.append((s.name, s))
    return out


def _cmd_sweep(args: argparse.Namespace) -> int:
    from sim.cli.runtime import run_schedule
    from sim.engine.closed_form import cost_failure
    from sim.engine.trace import plot_sweep
    from sim.progress import bar

    sizes = parse_sizes(args.sizes)
    opts = engine_options(args, progress=False)  # the sweep's own bar counts the runs
    topo = topology_from_args(args)
    p = topo.ranks
    wanted = None if args.algorithms is None else [a.strip() for a in args.algorithms.split(",") if a.strip()]
    nccl_named = wanted is not None and "nccl" in wanted  # -a nccl's own row, as simulate -a nccl
    if wanted is not None:
        wanted = [a for a in wanted if a != "nccl"]
    schedules: list[tuple[str, Schedule]] = []
    warnings: list[str] = []
    files = _file_schedules(args.files, Kind(args.collective), p)
    candidates = [registry.get(args.collective, a) for a in wanted] if wanted else [] if nccl_named else list(
        registry.algorithms(args.collective))
    from sim.cli.runtime import runtime_of

    with_nccl = runtime_of(args, topo) == "nccl" and _nccl_model(topo)
    if nccl_named and not with_nccl:
        raise UsageError(f"--algorithms nccl: NCCL's model needs a GPU preset and the nccl runtime, not "
                         f"{topo.name}")
    for alg in candidates:
        params = _params(args, topo, alg)
        reason = alg.unsupported(p, params)
        if reason is not None:
            if wanted:
                raise UsageError(alg.refusal(p, params) or reason)
            print(f"collsched sweep: skipping {alg.name}: {reason}", file=sys.stderr)
            continue
        matrix = matrix_from_args(args, args.collective, p)
        s = alg.build(p, root=args.root, **params) if matrix is None else alg.build(p, matrix=matrix, **params)
        schedules.append((s.name, s))
        failure = cost_failure(alg, p, max(sizes), alg.resolve(params))
        if failure is not None:  # reported, not skipped: the simulation does not need the closed form
            warnings.append(f"{failure}; simulated all the same")
    if not wanted and not nccl_named:
        schedules += _in_network(args, topo)
    schedules += files
    if not schedules and not with_nccl:
        raise UsageError(f"no {args.collective} algorithm serves {p} ranks")
    rows: list[dict[str, Any]] = []
    all_ok = True

    if schedules:
        collective = schedules[0][1].collective
    else:  # NCCL's row alone
        kind = Kind(args.collective)
        collective = Collective(kind, p, 1, (args.root or 0) if kind in ROOTED_KINDS else None)
    unit = bound_for(collective.kind, collective.root, topo, 1.0, opts.faults, collective) \
        if want_bound(args, p) \
        else None  # cuts once, scaled per size
    with bar(len(sizes) * len(schedules), unit="run", enabled=not args.no_progress) as progress:
        for size in sizes:
            b = unit.scaled(size) if unit is not None else None
            runs: list[tuple[str, Any, str]] = []
            if with_nccl:
                from sim.cli.runtime import nccl_engine_options
                from sim.machine.nccl import simulate_nccl

                nr = simulate_nccl(args.collective, topo, size, proto=args.protocol, root=args.root,
                                   options=nccl_engine_options(args, opts),
                                   nccl_version=getattr(args, "nccl_version", None))
                runs.append(("nccl", nr.result, f"{nr.nccl.algorithm}/{nr.nccl.protocol}"))
            for label, s in schedules:
                r, _line, _ran = run_schedule(args, s, topo, size, opts)
                runs.append((label, r, ""))
                progress.update(1)
            ref = runs[0][1].time if with_nccl else None
            for label, r, picked in runs:
                all_ok &= r.ok
                rows.append({"algorithm": label, "size": size, "time_s": r.time, "algbw_GBps": gigabytes(r.algbw),
                             "busbw_GBps": gigabytes(r.busbw), "ok": r.ok,
                             "bound_s": b.bound_s if b is not None else None,
                             "efficiency": b.efficiency(r.time) if b is not None else None,
                             "vs_nccl": r.time / ref if ref else None, **({"nccl": picked} if picked else {})})
    names = (["nccl"] if with_nccl else []) + [label for label, _ in schedules]
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
                          "best": [{"size": s, "algorithm": best[s]} for s in sizes], "ok": all_ok,
                          "warnings": warnings}))
    else:
        for w in warnings:
            print(f"collsched sweep: warning: {w}", file=sys.stderr)
        _print_sweep(rows, sizes, names, best, args.collective, topo.describe())
    return 0 if all_ok else 1


def _print_sweep(rows: Sequence[dict[str, Any]], sizes: Sequence[float], names: Sequence[str],
                 best: dict[float, str], kind: str, where: str) -> None:
    print(f"{kind} on {where}: time per algorithm (* = fastest; in brackets, efficiency = bound / time, "
          "see `collsched bound`; in square brackets, what NCCL runs and each time vs NCCL's); busbw of the fastest")
    by = {(r["algorithm"], r["size"]): r for r in rows}
    head = ["size", *names, "best busbw GB/s"]
    table = [head]
    for size in sizes:
        line = [human_size(size)]
        for name in names:
            r = by[(name, size)]
            mark = "*" if best[size] == name else " "
            bad = "" if r["ok"] else " !"
            eff = f" ({100 * r['efficiency']:.0f}%)" if r["efficiency"] is not None else ""
            if r.get("nccl"):
                eff += f" [{r['nccl']}]"
            elif r.get("vs_nccl") is not None:
                eff += f" [{r['vs_nccl']:.2f}x NCCL]"
            line.append(f"{human_time(r['time_s'])}{mark}{eff}{bad}")
        bb = by[(best[size], size)]["busbw_GBps"]
        line.append(f"{bb:.3f}" if bb is not None else "-")
        table.append(line)
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for row in table:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))


def add_parser(subparsers: Any) -> None:
    """Register ``collsched sweep``."""
    p = subparsers.add_parser("sweep", help="simulate every algorithm of a kind over message sizes")
    kinds = [k.value for k in Kind]
    p.add_argument("--collective", "-c", required=True, choices=kinds, metavar="K", help=", ".join(kinds))
    p.add_argument("--algorithms", metavar="A,B", help="only these algorithms (default: every one that fits p)")
    p.add_argument("--file", "-f", dest="files", action="append", default=[], metavar="F",
                   help="also sweep this schedule file (its collective and ranks must match; repeatable)")
    p.add_argument("--chunks", "-k", type=int, metavar="k", help="chunks per piece for every algorithm")
    p.add_argument("--root", "-r", type=int, metavar="R", help="root rank for rooted kinds (default 0)")
    add_matrix_arg(p)
    add_network_args(p)
    from sim.cli.runtime import add_runtime_args

    add_runtime_args(p)
    p.add_argument("--sizes", required=True, metavar="A:B", help="A:B doubles from A to B; A:B:F multiplies by F; "
                                                                   "or A,B,C; sizes as --size of simulate (1MiB, "
                                                                   "1M binary; 1MB decimal)")
    p.add_argument("--plot", metavar="F.png", help="write a plot of time vs size per algorithm")
    add_common_args(p, json_help="print the results as JSON")
    dash_values(p)
    p.set_defaults(func=_cmd_sweep, guard=guard_library_args)
