"""``collsched export`` and ``collsched convert``: write schedules as collsched.schedule/1 JSON or MSCCL-IR XML."""

from __future__ import annotations

import argparse
import json
from typing import Any

from algorithms import formats as fileformat
from algorithms.ir import Kind, Schedule
from sim.cli.common import (
    add_common_args,
    add_output_args,
    add_schedule_args,
    is_msccl,
    save_schedule,
    schedule_from_args,
)

__all__ = ["add_parser"]


def _cmd_convert(args: argparse.Namespace) -> int:
    schedule = fileformat.load(args.input)
    save_schedule(schedule, args)
    if args.json:
        print(json.dumps({"ok": True, "input": str(args.input), "output": str(args.output), "name": schedule.name,
                          "steps": len(schedule.steps), "transfers": schedule.num_transfers}))
    else:
        print(f"wrote {args.output}: {schedule.name} ({schedule.collective.describe()}), "
              f"{len(schedule.steps)} steps, {schedule.num_transfers} transfers{_msccl_note(schedule, args)}")
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    schedule = schedule_from_args(args)
    save_schedule(schedule, args)
    if args.json:
        print(json.dumps({"ok": True, "output": str(args.output), "name": schedule.name,
                          "collective": schedule.collective.kind.value, "ranks": schedule.collective.ranks,
                          "steps": len(schedule.steps), "transfers": schedule.num_transfers}))
    else:
        print(f"wrote {args.output}: {schedule.name} ({schedule.collective.describe()}), "
              f"{len(schedule.steps)} steps, {schedule.num_transfers} transfers{_msccl_note(schedule, args)}")
    return 0


def _msccl_note(schedule: Schedule, args: argparse.Namespace) -> str:
    """For an MSCCL-IR file: its channels, and how much finer its chunks are (``--nchannels`` may cut them)."""
    if not is_msccl(str(args.output)):
        return ""
    from algorithms.formats.msccl import parse_msccl

    program = parse_msccl(str(args.output))
    coll = schedule.collective
    per_loop = coll.chunks * (1 if coll.kind is Kind.ALLREDUCE else coll.ranks)
    n = program.attrs.get("nchannels", "?")
    note = f"; MSCCL-IR on {n} channel{'' if n == '1' else 's'}"
    if program.chunks != per_loop:
        note += (f", every chunk cut in {program.chunks // per_loop} to spread the transfers "
                 f"(nchunksperloop={program.chunks})")
    return note


def add_parser(subparsers: Any) -> None:
    """Register ``collsched export`` and ``collsched convert``."""
    p = subparsers.add_parser("export", help="write a schedule file (collsched.schedule/1 JSON, or MSCCL-IR XML)")
    add_schedule_args(p, file=False)
    p.add_argument("--output", "-o", required=True, metavar="F", help="file to write")
    add_output_args(p)
    add_common_args(p, json_help='print {"ok", "output", "name", "collective", "ranks", "steps", "transfers"}')
    p.set_defaults(func=_cmd_export)
    p = subparsers.add_parser("convert", help="convert a schedule file between JSON and MSCCL-IR XML")
    p.add_argument("input", metavar="IN", help="schedule file to read (JSON or MSCCL-IR XML)")
    p.add_argument("output", metavar="OUT", help="file to write")
    add_output_args(p)
    add_common_args(p, json_help='print {"ok", "input", "output", "name", "steps", "transfers"}')
    p.set_defaults(func=_cmd_convert)
