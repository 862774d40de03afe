"""The torch-free half of the ``collsched`` command line, one module per command.

- ``app``: the parser (``build_parser``, the table ``COMMANDS``) and ``main``;
- ``common``: what the commands share (``--import``, ``--json``, schedule and topology options, units);
- ``listing``, ``verify``, ``export`` (and ``convert``), ``simulate``, ``sweep``, ``bound``, ``synthesize``.

The torch commands (``bench``, ``demo``, ``calibrate``, ...) live in ``runners`` and are added by
``runners.commands.cli``, the installed entry point. Building the parser imports no torch, numpy, simpy or networkx.
"""

from sim.cli.app import COMMANDS, build_parser, main
from sim.cli.common import add_common_args, add_schedule_args, schedule_from_args

__all__ = ["COMMANDS", "add_common_args", "add_schedule_args", "build_parser", "main", "schedule_from_args"]
