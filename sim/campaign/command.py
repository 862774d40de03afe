"""``collsched campaign``: run a campaign file's configurations that the store lacks, then report.

    collsched campaign FILE [--store S] [--workers N | --scheduler ADDRESS] [--max-hours H] [--max-memory SIZE]
                       [--max-configs N] [--estimate | --report-only] [--csv F] [--winners-csv F]
                       [--heatmaps DIR] [--table F.json [--table-topology T] [--table-mode M]
                       [--table-runtime R]] [--no-progress] [--json]

Exit status: 0 every configuration of the campaign stored ran correctly (or cannot serve its world size);
1 some broke their postcondition or failed (each failure's text is in the store and the CSV); 2 usage error,
or a campaign refused (too many configurations, or an estimate over the time or memory given).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_parser"]

_WINNERS_SHOWN = 60


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # run's finally blocks close the pool and mark the run interrupted


def default_store(path: str) -> Path:
    """``camp.toml`` -> ``camp.sqlite`` beside it."""
    return Path(path).with_suffix(".sqlite")


def _cmd(args: argparse.Namespace) -> int:
    from algorithms.errors import UsageError
    from sim.campaign.report import heatmaps, load_report, write_csv, write_winners_csv
    from sim.campaign.run import run_campaign
    from sim.campaign.spec import load_campaign
    from sim.campaign.store import Store
    from sim.campaign.table import tuning_table, write_table
    from sim.units import parse_size

    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers {args.workers}: must be at least 1")
    if args.scheduler and args.workers is not None:
        raise UsageError("--workers is for the local pool; a Dask cluster has its own workers (--scheduler)")
    campaign = load_campaign(args.file)
    store_path = args.store or campaign.store or str(default_store(args.file))
    max_memory = float(parse_size(args.max_memory, "--max-memory")) if args.max_memory else None
    if args.max_hours is not None and not args.max_hours > 0:
        raise UsageError(f"--max-hours {args.max_hours}: must be > 0")
    out: dict[str, Any] = {"campaign": campaign.name, "store": store_path}
    if threading_main():
        signal.signal(signal.SIGTERM, _terminate)
    with Store(store_path) as store:
        if not args.report_only:
            summary = run_campaign(campaign, store, workers=args.workers, scheduler=args.scheduler,
                                   max_hours=args.max_hours, max_memory=max_memory, max_configs=args.max_configs,
                                   estimate_only=args.estimate, progress=not args.no_progress,
                                   log=None if args.json else sys.stderr)
            out["run"] = summary.to_dict()
            if args.estimate:
                if args.json:
                    print(json.dumps({"ok": True, **out}))
                else:
                    est = summary.estimate
                    print("nothing to compute: every configuration is stored" if est is None else
                          f"estimate: {est.describe()}")
                return 0
        report = load_report(campaign, store)
    statuses = report.statuses()
    outputs: dict[str, Any] = {}
    if args.csv:
        write_csv(report, args.csv)
        outputs["csv"] = args.csv
    if args.winners_csv:
        write_winners_csv(report, args.winners_csv)
        outputs["winners_csv"] = args.winners_csv
    if args.heatmaps:
        try:
            outputs["heatmaps"] = [str(p) for p in heatmaps(report, args.heatmaps)]
        except OSError as e:
            raise UsageError(f"--heatmaps {args.heatmaps}: {e.strerror or e}") from None
    if args.table:
        table = tuning_table(report, topology=args.table_topology, mode=args.table_mode, runtime=args.table_runtime)
        write_table(table, args.table)
        outputs["table"] = args.table
    ok = statuses.get("error", 0) == 0 and statuses.get("incorrect", 0) == 0
    codes = report.codes()
    if len(codes) > 1 and not args.json:
        print(f"collsched campaign: warning: the rows were computed by {len(codes)} versions of the algorithms/sim "
              f"sources ({', '.join(f'{n:,} by {c}' for c, n in codes.items())}): the source tree changed between "
              "runs; a fresh --store recomputes them all with one", file=sys.stderr)
    if args.json:
        from dataclasses import asdict

        print(json.dumps({"ok": ok, **out, "statuses": statuses, "missing": report.missing, "codes": codes,
                          "winners": [asdict(w) for w in report.winners], "outputs": outputs}))
    else:
        _print(report, statuses, out, outputs)
    return 0 if ok else 1


def threading_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _print(report: Any, statuses: dict[str, int], out: dict[str, Any], outputs: dict[str, Any]) -> None:
    from sim.cli.common import human_size, human_time

    run = out.get("run")
    if run is not None:
        print(f"campaign {out['campaign']}: {run['configurations']:,} configurations, {run['already_stored']:,} "
              f"already stored, {run['computed']:,} computed ({run['executor']}, {run['workers']} workers, "
              f"{run['wall_s']:.1f} s); store {out['store']}")
    counts = ", ".join(f"{n:,} {s}" for s, n in sorted(statuses.items()))
    print(f"  rows: {counts or 'none'}" + (f"; {report.missing:,} not computed yet" if report.missing else ""))
    winners = report.winners
    if winners:
        head = ("collective", "topology", "mode", "runtime", "size", "winner", "time", "runner-up", "margin",
                "efficiency")
        table = [head]
        for w in winners[:_WINNERS_SHOWN]:
            table.append((w.collective, w.topology, w.mode, w.runtime, human_size(w.size), w.winner,
                          human_time(w.time_s), w.runner_up or "-",
                          f"{100 * w.margin:.1f}%" if w.margin is not None else "-",
                          f"{100 * w.efficiency:.0f}%" if w.efficiency is not None else "-"))
        widths = [max(len(str(r[i])) for r in table) for i in range(len(head))]
        for r in table:
            print("  " + "  ".join(str(c).ljust(wd) for c, wd in zip(r, widths, strict=True)))
        if len(winners) > _WINNERS_SHOWN:
            print(f"  ... {len(winners) - _WINNERS_SHOWN:,} more winners: --winners-csv F, or --json")
    for name, value in outputs.items():
        print(f"  {name}: {', '.join(value) if isinstance(value, list) else value}")


def add_parser(subparsers: Any) -> None:
    """Register ``collsched campaign``."""
    from sim.campaign.spec import MAX_CONFIGS
    from sim.cli.common import add_common_args

    p = subparsers.add_parser("campaign", help="run a campaign file's simulations (resumable; a process pool or "
                                               "Dask), then report the winners, heatmaps, CSV and a tuning table")
    p.add_argument("file", metavar="FILE", help="the campaign file: TOML, JSON or YAML (docs/usage.md, Campaigns)")
    p.add_argument("--store", metavar="S", help="the SQLite store (default: the file's 'store', else FILE with "
                                                ".sqlite)")
    p.add_argument("--workers", type=int, metavar="N", help=f"local worker processes (default: os.cpu_count(), "
                                                             f"here {os.cpu_count()})")
    p.add_argument("--scheduler", metavar="ADDRESS", help="run on this Dask cluster (tcp://host:8786) instead")
    p.add_argument("--max-hours", type=float, metavar="H", help="refuse a campaign estimated to take longer")
    p.add_argument("--max-memory", metavar="SIZE", help="refuse a campaign estimated to need more memory "
                                                        "(default: what sim.guards allows, COLLSCHED_MEMORY)")
    p.add_argument("--max-configs", type=int, default=MAX_CONFIGS, metavar="N",
                   help=f"refuse a campaign of more configurations, before expanding it (default {MAX_CONFIGS:,})")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--estimate", action="store_true", help="stop after the estimate (the sample is stored)")
    what.add_argument("--report-only", action="store_true", help="compute nothing: report what the store holds")
    p.add_argument("--csv", metavar="F", help="write every row of the campaign as CSV")
    p.add_argument("--winners-csv", metavar="F", help="write the winners as CSV")
    p.add_argument("--heatmaps", metavar="DIR", help="write a PNG per collective and topology: algorithm x size")
    p.add_argument("--table", metavar="F.json", help="write the backend policy's tuning table from the winners "
                                                     "(COLLSCHED_TUNING=F.json)")
    p.add_argument("--table-topology", metavar="T", help="the table's topology, where several share a world size")
    p.add_argument("--table-mode", metavar="M", help="the table's mode, where the campaign has several")
    p.add_argument("--table-runtime", metavar="R", help="the table's runtime, where the campaign has several")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_common_args(p, json_help="print one JSON object: the run, the winners and what was written")
    p.set_defaults(func=_cmd)
