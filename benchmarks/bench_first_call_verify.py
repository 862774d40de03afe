"""What verification costs on the first call of the policy's algorithms (runners.execution.verified).

    python benchmarks/bench_first_call_verify.py [--ranks 2 4 8 16 32 64] [--nproc 8] [--launches 5]

Two tables.

1. **Verify, in one process** (no launch), for every algorithm the default policy picks at each world size of
   ``--ranks`` (at the sizes ``SIZES``): the time of ``verified.require`` on a schedule never seen, with an
   empty disk cache (``cold``: the digest, the verifier, the write of the verdict), with the verdict on disk
   but not in memory (``disk``: a new process on a machine that ran it before: the digest and one small
   file read) and in memory (``memory``: a later call of the process, by identity). Medians of ``--repeats``.
2. **First calls, launched** on ``--nproc`` local ranks with ``init_process_group("collsched")`` (the C++
   backend where it builds): each launch issues the first call of every (kind, size) of ``CALLS`` once, every
   rank waiting on a gloo barrier before each, and records the slowest rank's time of each call and the time
   each rank spent in ``verified.require``. Launches run in rounds of three settings, back to back:
   ``off`` (``COLLSCHED_VERIFY=0``), ``cold`` (verification with an empty verdict directory) and ``disk`` (the
   directory a first launch filled). The table prints each call's median over ``--launches`` rounds, the sum
   of a launch's first calls, the ratio of each setting's sum to ``off``'s in the same round (median over
   rounds: the goal is at most 1.10 at 8 ranks), and verification's own share of the launch's first calls,
   measured inside the ranks (what the ratio would be on a quiet machine: the machine's load moves whole
   launches by 2x, far more than verification costs).

Every launch is a new set of processes, so nothing is in memory at its first call: what the table shows is what
a training job pays at its first collectives.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from algorithms.ir import ROOTED_KINDS, Kind

SIZES = (1024, 1 << 20, 16 << 20, 64 << 20)
"""Sizes at which the policy's choice is looked up for table 1 (every band of the hand-made defaults)."""
CALLS = (("allreduce", 1024), ("allreduce", 4 << 20), ("allgather", 1024), ("allgather", 4 << 20),
         ("reducescatter", 1024), ("reducescatter", 4 << 20), ("broadcast", 1024), ("broadcast", 4 << 20),
         ("reduce", 1024), ("reduce", 4 << 20), ("gather", 1024), ("scatter", 1024), ("alltoall", 1024),
         ("alltoall", 4 << 20), ("barrier", 0))
"""(kind, bytes) of the first calls launched in table 2 (the policy's bands at 8 ranks: latency and bandwidth)."""


def _median_time(fn: Any, repeats: int, before: Any = None) -> float:
    times = []
    for _ in range(repeats):
        if before is not None:
            before()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _three_times(fresh: list[Any], repeats: int, tmp: str, verified: Any) -> tuple[float, float, float]:
    """Medians of ``require`` on schedules never seen: with an empty disk cache, with the verdict on disk, and
    again in memory (``fresh``: equal schedules, distinct objects, ``3 * repeats + 2`` of them)."""
    it = iter(fresh)

    def cold_dir() -> None:
        verified.clear_memory()
        os.environ[verified.ENV_VERIFY_CACHE] = tempfile.mkdtemp(dir=tmp)

    cold = _median_time(lambda: verified.require(next(it)), repeats, cold_dir)
    os.environ[verified.ENV_VERIFY_CACHE] = str(Path(tmp) / "warm")
    verified.require(next(it))
    disk = _median_time(lambda: verified.require(next(it)), repeats, verified.clear_memory)
    last = next(it)
    verified.require(last)
    memory = _median_time(lambda: verified.require(last), repeats)
    return cold, disk, memory


def verify_table(ranks: list[int], repeats: int) -> list[dict[str, Any]]:
    """Table 1: verify times per (kind, algorithm, p), cold / disk / memory."""
    from algorithms import registry
    from runners.backend.policy import Policy
    from runners.execution import verified

    policy = Policy.from_env()
    rows = []
    saved = os.environ.get(verified.ENV_VERIFY_CACHE)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for p in ranks:
                seen = set()
                for kind in Kind:
                    if kind is Kind.ALLTOALLV:
                        continue
                    for size in SIZES:
                        choice = policy.choose(kind, size, p)
                        if choice.algorithm == "p2p" or (kind, choice) in seen:
                            continue
                        seen.add((kind, choice))
                        root = 0 if kind in ROOTED_KINDS else None
                        algorithm = registry.get(kind, choice.algorithm)  # built as the policy does, unverified
                        fresh = [algorithm.build(p, root=root, **dict(choice.params)) for _ in range(3 * repeats + 2)]
                        cold, disk, memory = _three_times(fresh, repeats, tmp, verified)
                        s = fresh[0]
                        rows.append({"kind": str(kind), "algorithm": str(choice), "p": p,
                                     "transfers": s.num_transfers, "cold": cold, "disk": disk, "memory": memory})
                        print(f"  verified {kind} {choice} p={p}: cold {cold * 1e3:.2f} ms", file=sys.stderr,
                              flush=True)
        finally:
            if saved is None:
                os.environ.pop(verified.ENV_VERIFY_CACHE, None)
            else:
                os.environ[verified.ENV_VERIFY_CACHE] = saved
    return rows


def _call(kind: str, nbytes: int, rank: int, world: int) -> None:
    import torch
    import torch.distributed as dist

    n = max(1, nbytes // 4)
    if kind == "allreduce":
        dist.all_reduce(torch.ones(n))
    elif kind == "allgather":
        each = max(1, n // world)
        dist.all_gather_into_tensor(torch.empty(each * world), torch.ones(each))
    elif kind == "reducescatter":
        dist.reduce_scatter_tensor(torch.empty(max(1, n // world)), torch.ones(max(1, n // world) * world))
    elif kind == "broadcast":
        dist.broadcast(torch.ones(n), src=0)
    elif kind == "reduce":
        dist.reduce(torch.ones(n), dst=0)
    elif kind == "gather":
        each = max(1, n // world)
        dist.gather(torch.ones(each), [torch.empty(each) for _ in range(world)] if rank == 0 else None, dst=0)
    elif kind == "scatter":
        each = max(1, n // world)
        dist.scatter(torch.empty(each), [torch.ones(each) for _ in range(world)] if rank == 0 else None, src=0)
    elif kind == "alltoall":
        each = max(1, n // world)
        dist.all_to_all_single(torch.empty(each * world), torch.ones(each * world))
    elif kind == "barrier":
        dist.barrier()
    else:
        raise ValueError(kind)


def first_calls(rank: int, calls: tuple[tuple[str, int], ...]) -> tuple[list[float], float]:
    """One launch's rank: the time of each call, the first of its signature in this process, and the time spent
    in ``verified.require`` during them (every caller reaches it through the module's attribute)."""
    import torch.distributed as dist

    from runners.execution import verified

    spent = [0.0]
    require = verified.require

    def timed(*args: Any, **kwargs: Any) -> None:
        start = time.perf_counter()
        try:
            require(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - start

    verified.require = timed
    world = dist.get_world_size()
    sync = dist.new_group(backend="gloo")
    times = []
    for kind, nbytes in calls:
        dist.barrier(group=sync)
        start = time.perf_counter()
        _call(kind, nbytes, rank, world)
        times.append(time.perf_counter() - start)
    dist.barrier(group=sync)
    dist.destroy_process_group(sync)
    return times, spent[0]


SETTINGS = ("off", "cold", "disk")


def launch_table(nproc: int, launches: int) -> dict[str, list[tuple[list[float], float]]]:
    """Table 2: per setting, per launch, the slowest rank's time of each first call, and the most time one rank
    spent verifying in that launch. Launches run in rounds of the three settings, back to back."""
    from runners.commands.launch import spawn
    from runners.execution import verified

    out: dict[str, list[tuple[list[float], float]]] = {name: [] for name in SETTINGS}
    with tempfile.TemporaryDirectory() as tmp:
        warm = str(Path(tmp) / "warm")
        settings = {"off": {verified.ENV_VERIFY: "0"}, "cold": {verified.ENV_VERIFY: "1"},
                    "disk": {verified.ENV_VERIFY: "1", verified.ENV_VERIFY_CACHE: warm}}
        saved = {k: os.environ.get(k) for k in (verified.ENV_VERIFY, verified.ENV_VERIFY_CACHE)}
        try:
            os.environ.update(settings["disk"])
            spawn(first_calls, nproc, CALLS, backend="collsched")  # fills the warm directory (not counted)
            for i in range(launches):
                order = list(SETTINGS[i % 3:] + SETTINGS[:i % 3])  # each setting first, second and third in turn
                for name in order:
                    for k in saved:
                        os.environ.pop(k, None)
                    os.environ.update(settings[name])
                    if name == "cold":
                        os.environ[verified.ENV_VERIFY_CACHE] = tempfile.mkdtemp(dir=tmp)
                    per_rank = spawn(first_calls, nproc, CALLS, backend="collsched")
                    slowest = [max(ts) for ts in zip(*(r[0] for r in per_rank), strict=True)]
                    out[name].append((slowest, max(r[1] for r in per_rank)))
                    print(f"  launch {i + 1}/{launches} {name}: {sum(slowest) * 1e3:.0f} ms", file=sys.stderr,
                          flush=True)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    return out


def print_launches(nproc: int, got: dict[str, list[tuple[list[float], float]]]) -> None:
    launches = len(got["off"])
    print(f"\n## First calls on {nproc} ranks, collsched backend (ms; slowest rank; median of {launches} launches "
          "per setting)")
    print(f"{'call':22s} {'off':>8s} {'cold':>8s} {'disk':>8s}")
    for i, (kind, nbytes) in enumerate(CALLS):
        med = {k: statistics.median(launch[0][i] for launch in v) for k, v in got.items()}
        print(f"{f'{kind} {nbytes} B':22s} {_ms(med['off']):>8s} {_ms(med['cold']):>8s} {_ms(med['disk']):>8s}")
    sums = {k: [sum(launch[0]) for launch in v] for k, v in got.items()}
    print(f"{'all first calls':22s} " + " ".join(f"{_ms(statistics.median(sums[k])):>8s}" for k in SETTINGS))
    print("range of the sums (ms): " + ", ".join(f"{k} {_ms(min(v))}-{_ms(max(v))}" for k, v in sums.items()))
    for name in ("cold", "disk"):
        ratios = [a / b for a, b in zip(sums[name], sums["off"], strict=True)]
        share = [launch[1] / sum(launch[0]) for launch in got[name]]
        verify_ms = [launch[1] * 1e3 for launch in got[name]]
        print(f"{name}: sum {name}/off paired by round, median {statistics.median(ratios):.3f} "
              f"(range {min(ratios):.2f}-{max(ratios):.2f}); time in verified.require on the rank that spent most, "
              f"median {statistics.median(verify_ms):.1f} ms = {100 * statistics.median(share):.1f}% of the launch's "
              f"first calls (range {100 * min(share):.1f}-{100 * max(share):.1f}%)")


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8, 16, 32, 64],
                        help="world sizes of table 1 (default 2 4 8 16 32 64)")
    parser.add_argument("--repeats", type=int, default=5, help="repetitions per cell of table 1 (median)")
    parser.add_argument("--nproc", type=int, nargs="*", default=[8],
                        help="world sizes launched for table 2 (default 8; none: skip it)")
    parser.add_argument("--launches", type=int, default=5, help="launches per setting of table 2 (default 5)")
    args = parser.parse_args(argv)

    rows = verify_table(args.ranks, args.repeats)
    print("## Verify, one process (ms; median of", args.repeats, "each)")
    print(f"{'kind':14s} {'algorithm':22s} {'p':>3s} {'transfers':>9s} {'cold':>9s} {'disk':>7s} {'memory':>7s}")
    for r in rows:
        print(f"{r['kind']:14s} {r['algorithm']:22s} {r['p']:3d} {r['transfers']:9d} {_ms(r['cold']):>9s} "
              f"{_ms(r['disk']):>7s} {_ms(r['memory']):>7s}")
    for nproc in args.nproc:
        print_launches(nproc, launch_table(nproc, args.launches))
    return 0


if __name__ == "__main__":
    sys.exit(main())
