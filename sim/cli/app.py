"""The parser and the entry point of the torch-free commands; each command is a module of ``sim.cli``.

    collsched list [--topologies] [--json]
    collsched verify --collective K --algorithm A --ranks P [--chunks k] [--root R] [--json]
    collsched verify --file F [--json]
    collsched export --collective K --algorithm A --ranks P [--chunks k] [--root R] -o F [--json]
                     [--format json|msccl] [--proto Simple|LL|LL128] [--min-bytes S] [--max-bytes S]
    collsched convert IN OUT [--format json|msccl] [--proto ...] [--json]
    collsched simulate --collective K --algorithm A [-p P] --topology SPEC --size 256MiB [--chunks C]
                       [--mode dataflow|lockstep] [--bandwidth 50GB/s] [--latency 1us]
                       [--placement identity|snake|FILE] [--trace F.json] [--plot F.png] [--json]
    collsched sweep --collective K --topology SPEC --sizes 1KiB:1GiB [--file F ...] [--placement P]
                    [--plot F.png] [--json]
    collsched bound --collective K --topology SPEC --size 1GiB [--root R] [--json]
    collsched synthesize --collective K --topology SPEC [--root R] [--chunks k] -o F.json [--json]

``simulate`` and ``sweep`` print each result's efficiency, the lower bound of
``sim.bounds.cuts`` over the simulated time (``--bound auto``: up to 128 ranks); ``-a synth --param
topology=SPEC`` names the synthesizer wherever an algorithm is named (``sim.bounds.synth``).

A schedule file (``--file``, ``convert``'s IN) is collsched.schedule/1 JSON or
MSCCL-IR XML (``algorithms.formats.msccl``); ``verify`` also runs the MSCCL-IR
executability check on XML, ``export``/``convert`` write XML for a ``.xml``
name or ``--format msccl``.

``--placement`` puts rank r on topology node placement[r] (``sim.topology.placement``);
``simulate`` says which pairs of ranks that exchange data sit more than one
hop apart (JSON: ``stretched_pairs``, a list of [src, dst, hops]).

Every subcommand takes ``--import MODULE`` (repeatable; also the environment
variable ``COLLSCHED_IMPORT=mod1,mod2``): the modules are imported before the
command runs, so algorithms they register with ``@register`` can be named
with ``--algorithm`` and topology forms they register with ``register_topology`` with ``--topology``.
Installed packages register through the entry-point groups ``collsched.algorithms`` and
``collsched.topologies`` (see ``algorithms.registry`` and ``sim.topology.forms``).

Units: sizes take B, KiB, MiB, GiB, TiB (K, M, G, T are binary too, as in nccl-tests), KB, MB, GB,
TB (decimal) or plain bytes, never negative; bandwidths B/s, KB/s, MB/s, GB/s (decimal, as in nccl-tests)
or plain bytes/s; times s, ms, us, ns or plain seconds.

Exit status: 0 success (verify, simulate, sweep: every schedule met its
postcondition), 1 a schedule is incorrect, 2 usage or input error (one line
on stderr, no traceback). With ``--json`` a command prints exactly one JSON
object on stdout, errors included: ``{"ok": false, "error": "..."}``.

The torch commands (``bench``, ``demo``, ``calibrate``, ``validate``, ``tune``) live in ``runners`` and are added by
``runners.commands.cli``, the installed entry point; building the parser imports no
torch, numpy, simpy or networkx.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Sequence

from algorithms import registry
from algorithms.errors import CollschedError
from sim.cli.common import ParseError, Parser

__all__ = ["COMMANDS", "build_parser", "main"]


COMMANDS: tuple[str, ...] = ("listing", "verify", "export", "simulate", "sweep", "bound", "synthesize", "fit",
                             "sim.campaign.command")
"""The torch-free command modules, in the order ``--help`` lists them; each has ``add_parser(subparsers)``.
A dotted name is a module outside ``sim.cli`` (``sim.campaign`` sits above it)."""


def build_parser(extensions: Sequence[str] = ()) -> Parser:
    """The argument parser: the torch-free commands, then each extension module's ``add_parser(subparsers)``.

    >>> sorted(build_parser()._subparsers._group_actions[0].choices)[:4]
    ['bound', 'campaign', 'convert', 'export']
    """
    parser = Parser(prog="collsched", description="Design collective-communication algorithms: list, verify, "
                                                  "export, simulate, sweep, bound and synthesize schedules, run "
                                                  "campaigns (and bench, demo, calibrate on torch).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(name if "." in name else f"sim.cli.{name}").add_parser(sub)
    for name in extensions:
        importlib.import_module(name).add_parser(sub)
    return parser


def _fail(prog: str, message: str, as_json: bool, usage: str = "") -> int:
    if as_json:
        print(json.dumps({"ok": False, "error": message}))
    else:
        print(f"{usage}{prog}: error: {message}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None, *, extensions: Sequence[str] = ()) -> int:
    """Run the command line; returns the exit status (see the module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in argv
    try:
        parser = build_parser(extensions)
        args = parser.parse_args(argv)
    except ParseError as e:
        return _fail(e.prog, e.message, as_json, e.usage)
    try:
        registry.import_modules(args.imports)
        return int(args.func(args))
    except CollschedError as e:
        return _fail(f"collsched {args.command}", str(e), as_json)
    except KeyboardInterrupt:
        print(f"collsched {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`collsched list | head`): stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141

