"""``collsched fit --nccl-tests LOG... -t PRESET -o machine.json``: a GPU preset fitted to nccl-tests logs."""

from __future__ import annotations

import argparse
import json
from typing import Any

from algorithms.errors import CollschedError, UsageError
from sim.cli.common import add_common_args

__all__ = ["add_parser"]


def _cmd_fit(args: argparse.Namespace) -> int:
    from sim.machine.model import save
    from sim.machine.nccl_fit import fit_logs

    try:
        f = fit_logs(args.nccl_tests, args.topology, nccl_version=args.nccl_version)
    except (ValueError, OSError) as e:
        raise UsageError(str(e)) from None
    except CollschedError as e:
        raise UsageError(str(e)) from None
    try:
        save(f.machine, args.output)
    except OSError as e:
        raise UsageError(f"-o {args.output}: cannot write: {e.strerror or e}") from None
    if args.json:
        print(json.dumps({"ok": True, "output": args.output, "figures": f.figures, "fitted": list(f.fitted),
                          "not_pinned": f.unpinned, "rms_log_residual": f.residual, "logs": f.logs}))
        return 0
    print(f"collsched fit: {args.topology} on {len(args.nccl_tests)} log(s); wrote {args.output}")
    for k in f.fitted:
        print(f"  {k:<18} {f.figures[k]:.4f}")
    for k, why in f.unpinned.items():
        print(f"  {k:<18} {f.figures[k]:.4f} kept: not pinned down by these logs ({why})")
    print(f"  residual           {f.residual:.4f} rms of log(simulated / measured)")
    for lg in f.logs:
        med = "-" if lg["median_abs_error"] is None else f"{lg['median_abs_error']:.1%}"
        print(f"  {lg['log']}: {lg['collective']}, {lg['points']} points, median |error| {med} after the fit")
    return 0


def add_parser(subparsers: Any) -> None:
    """Register ``collsched fit``."""
    p = subparsers.add_parser("fit", help="fit a GPU preset's NVLink, NIC and NVLS rates and NCCL's latency per "
                                          "protocol to nccl-tests logs (several: other collectives, other node "
                                          "counts); write a machine file")
    p.add_argument("--nccl-tests", action="append", required=True, metavar="LOG",
                   help="an nccl-tests log as printed (all_reduce_perf, all_gather_perf, ...) or a published "
                        ".tsv table (repeatable)")
    p.add_argument("--topology", "-t", required=True, metavar="PRESET",
                   help="the GPU preset, with its options, e.g. dgx-h100:2 or dgx-b200:2@fabric=roce; a log of "
                        "another node count runs on the preset at its own count")
    p.add_argument("--nccl-version", metavar="V", default=None,
                   help="the NCCL release to model (default: each log's own where it prints one, else 2.30); "
                        "kept in the machine file")
    p.add_argument("--output", "-o", default="machine.json", help="machine file to write (default machine.json)")
    add_common_args(p, json_help='print {"ok", "output", "figures", "fitted", "not_pinned", "rms_log_residual", '
                                '"logs"}')
    p.set_defaults(func=_cmd_fit)
