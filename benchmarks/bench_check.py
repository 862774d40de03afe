"""What the runner's cross-rank argument check costs: one all-gather (today) against the point-to-point
exchange it replaced (p(p-1) messages, still the fallback that names a missing peer).

    python benchmarks/bench_check.py [--ranks 2 4 8] [--iters 200]

One spawned job per rank count, on gloo. The two exchanges of the same
12-integer metadata row alternate call by call (after a barrier); a call's
time is the slowest rank's; the table shows medians and the 90th
percentile, in microseconds. The end-to-end view is
``torchrun --nproc_per_node=P -m runners.commands.bench -c allreduce -a recursive_doubling --sizes 4KiB [--no-check]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def job(rank: int, iters: int) -> list[list[float]]:
    import torch
    import torch.distributed as dist

    from runners.execution import arguments

    p = dist.get_world_size()
    row = list(range(12))
    device = torch.device("cpu")
    ranks = list(range(p))

    def collective() -> None:
        arguments.exchange(row, None, ranks, device, rank, time.monotonic() + 60, "bench")

    def point_to_point() -> None:
        arguments._exchange_p2p(row, None, ranks, device, rank, time.monotonic() + 60, "bench", "", False)

    calls = (collective, point_to_point)
    times: list[list[float]] = [[], []]
    for call in calls:
        for _ in range(5):
            call()
    for i in range(iters):
        for k in (0, 1) if i % 2 == 0 else (1, 0):
            dist.barrier()
            t0 = time.perf_counter()
            calls[k]()
            times[k].append(time.perf_counter() - t0)
    flat = torch.tensor(times[0] + times[1], dtype=torch.float64)
    dist.all_reduce(flat, op=dist.ReduceOp.MAX)
    slowest: list[list[float]] = flat.view(2, iters).tolist()
    return slowest


def main(argv: list[str] | None = None) -> int:
    from runners.commands.launch import spawn

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--iters", type=int, default=200)
    args = parser.parse_args(argv)
    print(f"# the cross-rank check on gloo: one all-gather vs p(p-1) point-to-point messages; slowest rank, "
          f"{args.iters} calls each, alternating (us)")
    print(f"{'ranks':>5} {'all-gather median':>18} {'p90':>8} {'point-to-point median':>22} {'p90':>8} {'ratio':>6}")
    for p in args.ranks:
        coll, p2p = spawn(job, p, args.iters, timeout=1800)[0]

        def q(xs: list[float], f: float) -> float:
            return sorted(xs)[min(len(xs) - 1, int(f * len(xs)))] * 1e6

        mc, mp = statistics.median(coll) * 1e6, statistics.median(p2p) * 1e6
        print(f"{p:>5} {mc:>18.0f} {q(coll, 0.9):>8.0f} {mp:>22.0f} {q(p2p, 0.9):>8.0f} {mc / mp:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
