"""The ``collsched`` command line.

    collsched list [--json]
    collsched verify --collective K --algorithm A --ranks P [--chunks k] [--root R] [--json]
    collsched verify --file F [--json]
    collsched export --collective K --algorithm A --ranks P [--chunks k] [--root R] -o F
    collsched bench --nproc N --collective K --algorithm A [--chunks k] [--sizes 1KiB:64MiB] [--json]

Exit status: 0 success (verify: the schedule is correct), 1 verify found
violations, 2 usage or input error (one line on stderr, no traceback).
Other subcommands live beside the feature they drive and are added by
``_EXTENSIONS``; their modules import nothing heavy at import time.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence
from typing import Any

from algorithms import fileformat, registry
from algorithms.errors import CollschedError
from algorithms.ir import Kind, Schedule

__all__ = ["main", "build_parser", "add_schedule_args", "schedule_from_args", "UsageError"]

_EXTENSIONS: tuple[str, ...] = ("runners.simulate", "runners.bench")


class UsageError(CollschedError):
    """Command-line arguments that do not fit together."""


def _param(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    try:
        return name, int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{name}: expected an integer, got {value!r}") from None


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
        parser.add_argument("--file", "-f", metavar="F", help="a schedule file (collsched.schedule/1 JSON)")


def schedule_from_args(args: argparse.Namespace, *, ranks: int | None = None) -> Schedule:
    """Build or load the schedule the options name; ``UsageError`` when they do not fit together."""
    if getattr(args, "file", None):
        extra = [o for o in ("collective", "algorithm", "chunks", "root") if getattr(args, o, None) is not None]
        if getattr(args, "ranks", None) is not None:
            extra.append("ranks")
        if extra or args.param:
            raise UsageError(f"--file cannot be combined with --{', --'.join(extra or ['param'])}")
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
        print(json.dumps(rows, indent=1))
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


def _cmd_verify(args: argparse.Namespace) -> int:
    from sim.verify import verify

    report = verify(schedule_from_args(args))
    if args.json:
        print(json.dumps(report.to_dict()))
    else:
        print(report)
    return 0 if report.ok else 1


def _cmd_export(args: argparse.Namespace) -> int:
    schedule = schedule_from_args(args)
    try:
        fileformat.save(schedule, args.output)
    except OSError as e:
        raise UsageError(f"cannot write {args.output}: {e.strerror or e}") from None
    print(f"wrote {args.output}: {schedule.name} ({schedule.collective.describe()}), "
          f"{len(schedule.steps)} steps, {schedule.num_transfers} transfers")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, extensions included."""
    parser = argparse.ArgumentParser(prog="collsched", description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("list", help="list the registered algorithms with their constraints and costs")
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.set_defaults(func=_cmd_list)
    p = sub.add_parser("verify", help="verify a schedule symbolically against its postcondition")
    add_schedule_args(p)
    p.add_argument("--json", action="store_true", help='print {"ok", "violations", "transfers", "steps"}')
    p.set_defaults(func=_cmd_verify)
    p = sub.add_parser("export", help="write a schedule file (collsched.schedule/1)")
    add_schedule_args(p, file=False)
    p.add_argument("--output", "-o", required=True, metavar="F", help="file to write")
    p.set_defaults(func=_cmd_export)
    for name in _EXTENSIONS:
        importlib.import_module(name).add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except CollschedError as e:
        print(f"collsched {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"collsched {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
