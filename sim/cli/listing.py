"""``collsched list``: the registered algorithms with their constraints, parameters and costs;
``collsched list --topologies``: the topology SPEC forms (``sim.topology.forms``), user forms included."""

from __future__ import annotations

import argparse
import json
from typing import Any

from algorithms import registry
from sim.cli.common import add_common_args

__all__ = ["add_parser"]


def _cmd_topologies(args: argparse.Namespace) -> int:
    from sim.topology.forms import topology_forms

    forms = list(topology_forms())
    if args.json:
        print(json.dumps({"ok": True, "topologies": [f.row() for f in forms]}, indent=1))
        return 0
    table = [("form", "constraints", "help")] + [(f.syntax, "; ".join(f.constraints) or "-", f.help) for f in forms]
    widths = [max(len(row[i]) for row in table) for i in range(2)]
    for row in table:
        print(f"{row[0].ljust(widths[0])}  {row[1].ljust(widths[1])}  {row[2]}".rstrip())
    print("or a topology file (collsched.topology/1 JSON, GraphML) or a machine file (collsched calibrate)")
    return 0


def _row(a: registry.Algorithm) -> dict[str, Any]:
    return {
        "collective": a.kind.value,
        "algorithm": a.name,
        "constraints": list(a.constraints),
        "parameters": {p.name: {"default": p.default, "help": p.help} for p in a.parameters},
        "cost": a.cost.formula if a.cost else None,
        "source": a.source,
    }


def _print_table(algos: list[registry.Algorithm]) -> None:
    head = ("collective", "algorithm", "constraints", "parameters", "cost (α latency, β s/byte, γ s/byte reduced)")
    table = [head] + [
        (a.kind.value, a.name, "; ".join(a.constraints) or "any p",
         ", ".join(p.name for p in a.parameters) or "-", a.cost.formula if a.cost else "-")
        for a in algos
    ]
    widths = [max(len(str(row[i])) for row in table) for i in range(len(head))]
    for row in table:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def _cmd_list(args: argparse.Namespace) -> int:
    if args.topologies:
        return _cmd_topologies(args)
    listed, named = list(registry.algorithms()), list(registry.by_name_only())
    if args.json:
        print(json.dumps({"ok": True, "algorithms": [_row(a) for a in listed],
                          "by_name_only": [_row(a) for a in named]}, indent=1))
        return 0
    _print_table(listed)
    if named:
        print("\nBy name only (-a NAME; the backend's policy leaves them out, and sweep takes the in-network ones only "
              "where a switch reduces or multicasts: dgx-h100:N, hgx-h200:N, any preset with +sharp):")
        _print_table(named)
    return 0


def add_parser(subparsers: Any) -> None:
    """Register ``collsched list``."""
    p = subparsers.add_parser("list", help="list the registered algorithms with their constraints and costs "
                                           "(--topologies: the topology SPEC forms)")
    p.add_argument("--topologies", action="store_true",
                   help="list the topology SPEC forms (form, constraints, help) instead, those of --import modules "
                        "included")
    add_common_args(p, json_help='print {"ok": true, "algorithms": [...]} ({"ok": true, "topologies": [...]} with '
                                 '--topologies)')
    p.set_defaults(func=_cmd_list)
