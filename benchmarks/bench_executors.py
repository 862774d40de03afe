"""The runner's two gloo executors side by side: grouped (one group of sends and receives per step) and dataflow.

    python benchmarks/bench_executors.py [--nproc 4] [--sizes 64KiB,1MiB,16MiB,64MiB] [--iters 7]
                                         [--cases allreduce/ring,allgather/ring,...]

One spawned job; for every case and size the two executors alternate
iteration by iteration (which goes first alternates too), so both see the
same machine load; an iteration's time is the slowest rank's; the table
shows each executor's median and grouped / dataflow (below 1: grouped is
faster). Runs use ``check=False`` so only the executors differ. This is the
measurement behind ``runners.execution.runner.AUTO_CPU`` (docs/backend.md,
"Performance"); on a shared machine repeat it and trust only consistent
ratios.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CASES = ("allreduce/ring", "allreduce/recursive_doubling", "allreduce/direct", "allgather/ring",
         "reducescatter/ring", "broadcast/binomial", "alltoall/direct")
EXECUTORS = ("dataflow", "grouped")


def job(rank: int, cases: list[str], sizes: list[int], iters: int) -> list[tuple[str, int, float, float]]:
    import torch
    import torch.distributed as dist

    from algorithms import registry
    from algorithms.ir import Kind
    from runners.execution.runner import run
    from sim import units

    p = dist.get_world_size()
    rows = []
    for case in cases:
        kind_name, alg = case.split("/")
        algorithm = registry.get(kind_name, alg)
        kind = algorithm.kind
        if algorithm.unsupported(p, {}) is not None:
            continue
        root = 0 if kind in (Kind.BROADCAST, Kind.REDUCE, Kind.SCATTER, Kind.GATHER) else None
        sched = algorithm.build(p, root=root)
        for size in sizes:
            n = units.count_per_rank(kind, size, p, 4)
            wide_in = kind in (Kind.REDUCESCATTER, Kind.SCATTER, Kind.ALLTOALL)
            wide_out = kind in (Kind.ALLGATHER, Kind.ALLTOALL, Kind.GATHER)
            x = torch.zeros(n * (p if wide_in else 1))
            out = None if sched.collective.in_place else torch.zeros(n * (p if wide_out else 1))
            times: dict[str, list[float]] = {e: [] for e in EXECUTORS}
            for e in EXECUTORS:  # warm up both (staging memory, plans)
                run(sched, x, out, check=False, executor=e)
            for i in range(iters):
                for e in EXECUTORS if i % 2 == 0 else EXECUTORS[::-1]:
                    dist.barrier()
                    t0 = time.perf_counter()
                    run(sched, x, out, check=False, executor=e)
                    times[e].append(time.perf_counter() - t0)
            flat = torch.tensor([t for e in EXECUTORS for t in times[e]], dtype=torch.float64)
            dist.all_reduce(flat, op=dist.ReduceOp.MAX)
            slowest = flat.view(len(EXECUTORS), iters).tolist()
            rows.append((case, size, statistics.median(slowest[0]), statistics.median(slowest[1])))
    return rows


def main(argv: list[str] | None = None) -> int:
    from runners.commands.launch import spawn
    from sim import units

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--sizes", default="64KiB,1MiB,16MiB,64MiB")
    parser.add_argument("--iters", type=int, default=7)
    parser.add_argument("--cases", default=",".join(CASES))
    args = parser.parse_args(argv)
    sizes = [int(s) for s in units.parse_sizes(args.sizes)]
    rows = spawn(job, args.nproc, args.cases.split(","), sizes, args.iters, timeout=3600)[0]
    print(f"# grouped vs dataflow executor on gloo, {args.nproc} ranks, check=False, median of {args.iters} "
          "(slowest rank), alternating")
    print(f"{'case':<30} {'size (B)':>10} {'dataflow ms':>12} {'grouped ms':>12} {'grouped/dataflow':>17}")
    for case, size, dataflow, grouped in rows:
        print(f"{case:<30} {size:>10} "
              f"{dataflow * 1e3:>12.2f} {grouped * 1e3:>12.2f} {grouped / dataflow:>17.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
