"""Table: `collsched verify` on every registered (kind, algorithm) at the issue's world sizes.

    python benchmarks/verify_table.py [--ranks 1 2 3 5 8 12 16 31 64 128 256] [--chunks 1]

Each cell is ``ok/S`` (verified, S steps) or ``FAIL/S``; rooted kinds use
root p // 2. Every cell goes through the command line's own entry point
(``collsched verify --json``), so the table is what a user would see.
Exit status 1 when any cell fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import redirect_stdout
from io import StringIO
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from algorithms import registry
from algorithms.ir import ROOTED_KINDS
from runners.commands.cli import main as collsched

RANKS = [1, 2, 3, 5, 8, 12, 16, 31, 64, 128, 256]


def cell(kind: str, name: str, p: int, chunks: int) -> tuple[bool, str]:
    """Run ``collsched verify`` for one instance; (ok, text for the table)."""
    argv = ["verify", "-c", kind, "-a", name, "-p", str(p), "--json"]
    algo = registry.get(kind, name)
    if algo.kind in ROOTED_KINDS:
        argv += ["--root", str(p // 2)]
    if any(prm.name == "chunks" for prm in algo.parameters):
        argv += ["--chunks", str(chunks)]
    out = StringIO()
    with redirect_stdout(out):
        code = collsched(argv)
    if code == 2:  # the registry refused this size; the reason went to stderr
        return True, "n/a"
    report = json.loads(out.getvalue())
    return code == 0, f"{'ok' if report['ok'] else 'FAIL'}/{report['steps']}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=RANKS)
    parser.add_argument("--chunks", type=int, default=1)
    args = parser.parse_args()
    head = ["kind", "algorithm", *(f"p={p}" for p in args.ranks)]
    rows = [head]
    failures = 0
    start = time.perf_counter()
    for algo in registry.algorithms():
        row = [algo.kind.value, algo.name]
        for p in args.ranks:
            ok, text = cell(algo.kind.value, algo.name, p, args.chunks)
            failures += not ok
            row.append(text)
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    print(f"\n{len(rows) - 1} algorithms x {len(args.ranks)} sizes, {failures} failures, "
          f"{time.perf_counter() - start:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
