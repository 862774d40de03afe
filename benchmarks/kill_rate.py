"""Mutation kill rate of the verifier, per registered algorithm.

    python benchmarks/kill_rate.py [--samples 300] [--ranks 2 3 5 8] [--import MODULE|FILE.py ...]

For each algorithm and world size: mutants made, mutants rejected when built,
mutants that change the outcome (decided by concrete execution on random
data, independently of the verifier), how many of those the verifier caught,
and the kill rate (caught / outcome-changing).

Every registered algorithm is measured, your own too: name their module
with ``--import`` (a module name or a ``.py`` path, repeatable) or in the
environment variable ``COLLSCHED_IMPORT=mod1,./my_algos.py``, as for
``collsched``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from algorithms import registry
from algorithms.errors import CollschedError
from algorithms.ir import ROOTED_KINDS
from sim.verify.mutation import kill_rate


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog=f"Algorithms of your own: --import, or {registry.ENV_IMPORT}=mod1,./my_algos.py in the environment "
               "(a module name is looked for on PYTHONPATH, which does not hold the current directory unless you "
               "say PYTHONPATH=.; a .py path is imported as it is). Installed packages register through the "
               f"entry-point group {registry.ENTRY_POINT_GROUP}.")
    parser.add_argument("--samples", type=int, default=300, help="mutants per schedule (default 300)")
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 3, 5, 8], help="world sizes (default 2 3 5 8)")
    parser.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                        help="import MODULE (a module name or a .py file) first, so that the algorithms it registers "
                             f"are measured too (repeatable; also {registry.ENV_IMPORT}=mod1,mod2)")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        registry.import_modules(args.imports)
        registry.load_plugins()
    except CollschedError as e:
        parser.error(str(e))
    print(f"{'collective':<14} {'algorithm':<22} {'mutants':>8} {'at build':>9} "
          f"{'changed':>8} {'killed':>7} {'rate':>7}")
    totals = [0, 0, 0, 0]
    for algo in registry.algorithms():
        n = built = changed = killed = 0
        for p in args.ranks:
            if algo.unsupported(p) is not None:
                continue
            root = p - 1 if algo.kind in ROOTED_KINDS else None
            params = {"chunks": 2} if any(x.name == "chunks" for x in algo.parameters) else {}
            schedule = algo.build(p, root=root, **params)
            if not schedule.num_transfers:
                continue
            r = kill_rate(schedule, samples=args.samples, seed=p)
            n, built, changed, killed = n + r.total, built + r.rejected_at_build, changed + r.changed, killed + r.killed
        for i, v in enumerate((n, built, changed, killed)):
            totals[i] += v
        rate = killed / changed if changed else 1.0
        print(f"{algo.kind.value:<14} {algo.name:<22} {n:>8} {built:>9} {changed:>8} {killed:>7} {rate:>7.1%}")
    rate = totals[3] / totals[2] if totals[2] else 1.0
    print(f"{'all':<14} {'':<22} {totals[0]:>8} {totals[1]:>9} {totals[2]:>8} {totals[3]:>7} {rate:>7.1%}")


if __name__ == "__main__":
    main()
