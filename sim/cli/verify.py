"""``collsched verify``: a schedule against its postcondition; MSCCL-IR files also get the executability check."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from algorithms.errors import ScheduleError, UsageError
from sim.cli.common import add_common_args, add_schedule_args, is_msccl, schedule_from_args

__all__ = ["MAX_VIOLATIONS", "add_parser"]

MAX_VIOLATIONS = 20
"""How many violations (and hints) ``verify`` prints unless ``--max-violations`` says otherwise."""


def _cmd_verify(args: argparse.Namespace) -> int:
    if args.max_violations < 0:
        raise UsageError(f"--max-violations must be >= 0 (0: all), got {args.max_violations}")
    if args.cost:
        return _cmd_cost(args)
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
        print(report.text(args.max_violations or None, see_all="--max-violations 0 for all"))
        if checked:
            _print_check(findings)
    return 0 if ok else 1


def _cmd_cost(args: argparse.Namespace) -> int:
    """``verify --cost``: the algorithm's closed-form Cost against its schedules
    (``sim.engine.closed_form.check_cost``): exit 0 when every case agrees, 1 when one does not, 2 when the cost
    cannot be evaluated or nothing is checked."""
    from algorithms import registry
    from sim.cli.common import root_for
    from sim.engine.closed_form import check_cost

    if getattr(args, "file", None):
        raise UsageError("--cost checks a registered algorithm's Cost: name it with --collective and --algorithm, "
                         "not --file")
    missing = [o for o in ("collective", "algorithm") if getattr(args, o, None) is None]
    if missing:
        raise UsageError(f"--cost: missing --{', --'.join(missing)}")
    if args.matrix is not None:
        raise UsageError("--cost checks the uniform matrix of an alltoallv's Cost: no --matrix")
    root_for(args.collective, args.root)  # --root of a kind without one is refused
    params: dict[str, Any] = dict(args.param)
    if args.chunks is not None:
        params["chunks"] = args.chunks
    ranks = [args.ranks] if args.ranks is not None else range(1, 17)
    check = check_cost(args.collective, args.algorithm, ranks=ranks, params=params,
                       roots=None if args.root is None else [args.root])
    if check.error is not None:
        raise UsageError(check.error)
    if not check.cases:
        alg = registry.get(args.collective, args.algorithm)
        why = alg.refusal(ranks[0], params) if args.ranks is not None else None
        raise UsageError(why or f"{alg.kind}/{alg.name} serves none of p = 1..16 with these parameters")
    print(json.dumps(check.to_dict()) if args.json else check.text(args.max_violations or None))
    return 0 if check.ok else 1


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
    p.add_argument("--cost", action="store_true",
                   help="check the algorithm's closed-form Cost instead: its terms against the schedule's transfers "
                        "and its time against a lockstep simulation on switch:p, for -p P or p = 1..16 (exit 1 on "
                        "a mismatch; sim.engine.closed_form.check_cost)")
    p.add_argument("--max-violations", type=int, default=MAX_VIOLATIONS, metavar="N",
                   help=f"list at most N violations (and N hints, printed first), then how many more "
                        f"(default {MAX_VIOLATIONS}; 0: all; --json always lists all)")
    add_common_args(p, json_help='print {"ok", "violations", "transfers", "steps"} (--cost: {"ok", "cases", '
                                 '"mismatches", ...})')
    p.set_defaults(func=_cmd_verify)
