"""Benchmark: symbolic verification of ring all-reduce at growing world sizes.

    python benchmarks/bench_verify.py [--ranks 64 256 1024] [--repeat 3]

Prints build and verify seconds (medians over --repeat runs) and verified
transfers per second. Goal (issue 2): p = 1024, about 2.1 M transfers,
verified in under 10 s on a 2-core machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from algorithms import build
from sim.verify.verifier import verify


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{'p':>6} {'transfers':>10} {'build s':>8} {'verify s':>9} {'transfers/s':>12} ok")
    for p in args.ranks:
        builds, verifies = [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            schedule = build("allreduce", "ring", p)
            t1 = time.perf_counter()
            report = verify(schedule)
            t2 = time.perf_counter()
            builds.append(t1 - t0)
            verifies.append(t2 - t1)
        v = statistics.median(verifies)
        print(f"{p:>6} {schedule.num_transfers:>10} {statistics.median(builds):>8.2f} {v:>9.2f} "
              f"{schedule.num_transfers / v:>12,.0f} {report.ok}")


if __name__ == "__main__":
    main()
