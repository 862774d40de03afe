"""The ``collsched`` entry point: the torch-free commands of ``sim.cli`` plus the torch ones.

    collsched list | verify | export | simulate | sweep   (sim.cli: no torch imported)
    collsched bench --nproc N --collective K --algorithm A [--sizes 1KiB:64MiB] [--json]
    collsched demo [--collective K --algorithm A --ranks P] [--json]

``bench`` and ``demo`` import torch only when they run, so building the
parser and running the torch-free commands never imports it. Exit status:
0 success, 1 a schedule (or a run) is incorrect, 2 usage or input error.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from sim.cli import app as cli

__all__ = ["TORCH_COMMANDS", "build_parser", "main"]

TORCH_COMMANDS: tuple[str, ...] = ("runners.commands.bench", "runners.commands.demo", "runners.commands.calibrate")


def build_parser() -> cli.Parser:
    """The full argument parser, torch commands included."""
    return cli.build_parser(TORCH_COMMANDS)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    return cli.main(argv, extensions=TORCH_COMMANDS)


if __name__ == "__main__":
    sys.exit(main())
