"""Table: mutation kill rate of the verifier on every registered (kind, algorithm).

    python benchmarks/mutation_table.py [--ranks 5 6 8] [--samples 200]

For each algorithm, ``sim.mutate.kill_rate`` mutates instances at the given
world sizes (chunks 2, rooted kinds at root p // 2, group 3 where there is
one) and counts the mutants that change the outcome (checked concretely,
independently of the verifier) and how many of those the verifier or the
schedule's own validation caught. Exit status 1 when any survives.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from algorithms import registry
from algorithms.ir import ROOTED_KINDS
from sim.mutate import kill_rate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[5, 6, 8])
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()
    print(f"{'kind':<14}{'algorithm':<22}{'mutants':>8}{'changed':>9}{'killed':>8}{'rate':>8}")
    survivors = 0
    for algo in registry.algorithms():
        names = {prm.name for prm in algo.parameters}
        params = {n: v for n, v in (("chunks", 2), ("group", 3)) if n in names}
        total = changed = killed = 0
        for p in args.ranks:
            root = p // 2 if algo.kind in ROOTED_KINDS else None
            report = kill_rate(algo.build(p, root=root, **params), samples=args.samples, seed=p)
            total, changed, killed = total + report.total, changed + report.changed, killed + report.killed
        survivors += changed - killed
        rate = killed / changed if changed else 1.0
        print(f"{algo.kind.value:<14}{algo.name:<22}{total:>8}{changed:>9}{killed:>8}{rate:>8.1%}")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
