"""Simulator throughput: ring all-reduce on a bidirectional ring, one chunk per rank.

    python benchmarks/bench_sim.py                    # p = 16, 64, 256, 1024, dataflow
    python benchmarks/bench_sim.py --ranks 16 64 256 --mode lockstep

Prints, per p: transfers, simpy events, the time to build the schedule, the
wall time of ``simulate`` (dependency graph, simulation and postcondition
check included), transfers per second, and the simulated time as a sanity
check against the closed form 2(p-1)(α + n/(pB)) (contention-free here: on
a bidirectional ring the ring schedule only uses the r -> r+1 links).
Goals (issue 4): p = 256 under 10 s, p = 1024 under 2 minutes on 2 cores,
and cost growing no worse than linearly in transfers.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from algorithms import registry
from sim import topology as T
from sim.engine import simulate

SIZE = 256 * 2**20
BANDWIDTH = 50e9
LATENCY = 1e-6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--ranks", type=int, nargs="+", default=[16, 64, 256, 1024])
    parser.add_argument("--mode", choices=("dataflow", "lockstep"), default="dataflow")
    args = parser.parse_args()
    head = f"{'p':>6} {'transfers':>10} {'events':>10} {'build s':>8} {'wall s':>8} {'transfers/s':>12} " \
           f"{'us/transfer':>11} {'sim time':>12} {'closed form':>12} ok"
    print(f"ring all-reduce, bidirectional ring, {SIZE / 2**20:.0f} MiB, {BANDWIDTH / 1e9:g} GB/s, "
          f"{LATENCY * 1e6:g} us per link, mode {args.mode}")
    print(head)
    for p in args.ranks:
        t0 = time.perf_counter()
        schedule = registry.build("allreduce", "ring", p)
        topo = T.ring(p, bandwidth=BANDWIDTH, latency=LATENCY)
        built = time.perf_counter() - t0
        gc.collect()
        t0 = time.perf_counter()
        r = simulate(schedule, topo, SIZE, mode=args.mode)
        wall = time.perf_counter() - t0
        want = 2 * (p - 1) * (LATENCY + SIZE / (p * BANDWIDTH))
        n = r.transfers
        print(f"{p:>6} {n:>10} {r.events:>10} {built:>8.2f} {wall:>8.2f} {n / wall:>12.0f} "
              f"{1e6 * wall / n:>11.2f} {r.time:>12.6e} {want:>12.6e} {r.ok}", flush=True)
        del r, schedule
        gc.collect()
    return 0


if __name__ == "__main__":
    sys.exit(main())
