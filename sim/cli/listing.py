"""``collsched list``: the registered algorithms with their constraints, parameters and costs."""

from __future__ import annotations

import argparse
import json
from typing import Any

from algorithms import registry
from sim.cli.common import add_common_args

__all__ = ["add_parser"]


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


def add_parser(subparsers: Any) -> None:
    """Register ``collsched list``."""
    p = subparsers.add_parser("list", help="list the registered algorithms with their constraints and costs")
    add_common_args(p, json_help='print {"ok": true, "algorithms": [...]}')
    p.set_defaults(func=_cmd_list)
