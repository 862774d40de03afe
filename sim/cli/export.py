"""``collsched export`` and ``collsched convert``: write schedules as collsched.schedule/1 JSON, MSCCL-IR XML or
MSCCL++ execution plans (``convert`` reads any of them: an MSCCL++ plan, MSCCL++'s own included, converts to the
collsched format, to MSCCL-IR where the plan is expressible there, and back to a plan)."""

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
    plan = _plan_head(args.input)
    if plan is not None:  # an MSCCL++ plan keeps its protocol, and its in-place layout when written as a plan
        if args.proto is None:
            args.proto = plan.get("protocol")
        fmt = args.format or ("msccl" if fileformat.is_xml_path(args.output) else "json")
        if fmt == "mscclpp" and args.inplace is None and plan.get("inplace") and not schedule.collective.in_place:
            args.inplace = True
        if fmt == "json":
            args.proto = None  # collsched JSON has no protocol
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


def _plan_head(path: str) -> dict[str, Any] | None:
    """The top-level fields of an MSCCL++ plan file (None: not a plan)."""
    from algorithms.formats.mscclpp import looks_like_plan

    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if not looks_like_plan(data):
        return None
    try:
        obj = json.loads(data)
    except ValueError:
        return None
    return {k: v for k, v in obj.items() if k != "gpus"} if isinstance(obj, dict) else None


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
    p = subparsers.add_parser("convert", help="convert a schedule file between JSON, MSCCL-IR XML and MSCCL++ plans")
    p.add_argument("input", metavar="IN", help="schedule file to read (JSON, MSCCL-IR XML or an MSCCL++ plan: its "
                                               "protocol carries over to MSCCL-IR and plans unless --proto says)")
    p.add_argument("output", metavar="OUT", help="file to write")
    add_output_args(p)
    add_common_args(p, json_help='print {"ok", "input", "output", "name", "steps", "transfers"}')
    p.set_defaults(func=_cmd_convert)
