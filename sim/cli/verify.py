"""``collsched verify``: a schedule against its postcondition; MSCCL-IR files also get the executability check."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from algorithms.errors import ScheduleError
from sim.cli.common import add_common_args, add_schedule_args, is_msccl, schedule_from_args

__all__ = ["add_parser"]


def _cmd_verify(args: argparse.Namespace) -> int:
    from sim.verify.verifier import verify

    findings: list[Any] = []
    checked = False  # an MSCCL-IR file: its check's count is printed, also when it found nothing
    if getattr(args, "file", None) and is_msccl(args.file):
        # MSCCL-IR: the static executability check first; what would hang or be rejected is a violation.
        from algorithms.formats.msccl import check_msccl

        findings = check_msccl(args.file)
        checked = True
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
        if checked:
            _print_check(findings)
    return 0 if ok else 1


def _print_check(findings: Sequence[Any]) -> None:
    """``MSCCL check: E errors, W warnings``, then each finding."""
    errors = sum(1 for f in findings if f.severity == "error")
    warnings = len(findings) - errors
    print(f"  MSCCL check: {_count(errors, 'error')}, {_count(warnings, 'warning')}")
    for f in findings:
        print(f"  MSCCL {f}")


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def _print_findings(args: argparse.Namespace, findings: Sequence[Any], head: str) -> int:
    """Report an MSCCL-IR file that cannot be imported because of its check's findings (exit status 1)."""
    if args.json:
        print(json.dumps({"ok": False, "error": head, "violations": [],
                          "msccl_findings": [f.to_dict() for f in findings]}))
    else:
        print(head)
        _print_check(findings)
    return 1


def add_parser(subparsers: Any) -> None:
    """Register ``collsched verify``."""
    p = subparsers.add_parser("verify", help="verify a schedule symbolically against its postcondition")
    add_schedule_args(p)
    add_common_args(p, json_help='print {"ok", "violations", "transfers", "steps"}')
    p.set_defaults(func=_cmd_verify)
