"""Benchmark and check: ``all_to_all_single`` with split sizes on the collsched backend against gloo.

    python benchmarks/bench_alltoallv.py bench [--nproc 4] [--sizes 4KiB:64MiB:4] [--zipf 1.2] [--iters 7] [--json]
    python benchmarks/bench_alltoallv.py random [--count 100] [--seed 0] [--json]

``bench``: for each size (the mean rank's input, as ``collsched simulate`` sizes an alltoallv), the split
sizes come from ``algorithms.matrices.zipf`` (tokens routed to experts of Zipf(S) popularity, one expert a
rank) scaled to that many fp32 elements; every iteration times the collsched group's call and gloo's on the
same tensors, alternating which goes first, after a gloo barrier. An iteration's time is the slowest rank's;
the table shows medians and ``ratio`` = gloo time / collsched time (the busbw ratio: above 1 is faster than
gloo). The first call of each side is checked against the other, exactly.

``random``: ``--count`` random split matrices (entries 0..6 rows of 1..3 fp32 or int64 elements, whole rows
and columns sometimes zero) on 2, 3 and 4 ranks in turn; each matrix's result on collsched (single and list
calls) is compared exactly with gloo's; prints how many matched.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import torch.distributed as dist

import runners.backend.group  # noqa: F401  (registers collsched in the spawned ranks too)
from algorithms import matrices
from runners.commands.launch import spawn
from sim.units import parse_sizes


def _splits(size: int, p: int, s: float, seed: int) -> list[list[int]]:
    """A Zipf(s) routing matrix scaled so that the mean rank's input is about ``size`` bytes of fp32."""
    t = matrices.zipf(p, s, tokens=1024, seed=seed)
    total = sum(map(sum, t))
    want = size * p // 4  # fp32 elements in all
    return [[v * want // total for v in row] for row in t]


def _bench_rank(rank: int, args: dict[str, Any]) -> list[dict[str, Any]]:
    torch.set_num_threads(1)
    p = dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    rows = []
    groups = {"collsched": None, "gloo": gloo}
    for size in args["sizes"]:
        t = _splits(size, p, args["zipf"], args["seed"])
        send, recv = t[rank], [t[i][rank] for i in range(p)]
        x = torch.randn(sum(send))
        out = {name: torch.empty(sum(recv)) for name in ("collsched", "gloo")}

        def call(name: str, out: dict[str, torch.Tensor] = out, x: torch.Tensor = x, recv: list[int] = recv,
                 send: list[int] = send) -> None:
            dist.all_to_all_single(out[name], x, recv, send, group=groups[name])

        for name in groups:
            call(name)
        same = bool(torch.equal(out["collsched"], out["gloo"]))
        times: dict[str, list[float]] = {"collsched": [], "gloo": []}
        for it in range(args["warmup"] + args["iters"]):
            order = ("collsched", "gloo") if it % 2 else ("gloo", "collsched")
            for name in order:
                dist.barrier(group=gloo)
                start = time.perf_counter()
                call(name)
                elapsed = time.perf_counter() - start
                if it >= args["warmup"]:
                    times[name].append(elapsed)
        slow = {}
        for name, ts in times.items():
            v = torch.tensor(ts, dtype=torch.float64)
            dist.all_reduce(v, op=dist.ReduceOp.MAX, group=gloo)
            slow[name] = statistics.median(v.tolist())
        ok = torch.tensor([int(same)])
        dist.all_reduce(ok, op=dist.ReduceOp.MIN, group=gloo)
        pg = dist.group.WORLD
        chosen = sorted(k for k, n in getattr(pg, "executed", {}).items() if k.startswith("alltoallv/") and n)
        rows.append({"size": size, "collsched_s": slow["collsched"], "gloo_s": slow["gloo"],
                     "ratio": slow["gloo"] / slow["collsched"], "equal": bool(ok.item()), "ran": chosen})
    dist.destroy_process_group(gloo)
    return rows


def _random_rank(rank: int, mats: list[list[list[int]]]) -> int:
    torch.set_num_threads(1)
    p = dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    good = 0
    for k, t in enumerate(mats):
        width, dtype = 1 + k % 3, (torch.float32, torch.int64)[k % 2]
        send, recv = t[rank], [t[i][rank] for i in range(p)]
        g = torch.Generator().manual_seed(k * 101 + rank)
        x = torch.randint(-99, 99, (sum(send), width), generator=g).to(dtype)
        a, b = torch.full((sum(recv), width), -1, dtype=dtype), torch.full((sum(recv), width), -1, dtype=dtype)
        dist.all_to_all_single(a, x, recv, send)
        dist.all_to_all_single(b, x, recv, send, group=gloo)
        la = [torch.empty(n, width, dtype=dtype) for n in recv]
        dist.all_to_all(la, list(x.split(send)))
        ok = torch.tensor([int(torch.equal(a, b) and torch.equal(torch.cat(la), b))])
        dist.all_reduce(ok, op=dist.ReduceOp.MIN, group=gloo)
        good += int(ok.item())
    dist.destroy_process_group(gloo)
    return good


def _random_matrices(p: int, count: int, rng: random.Random) -> list[list[list[int]]]:
    out = []
    for _ in range(count):
        t = [[rng.randint(0, 6) for _ in range(p)] for _ in range(p)]
        if rng.random() < 0.3:
            t[rng.randrange(p)] = [0] * p
        if rng.random() < 0.3:
            col = rng.randrange(p)
            for row in t:
                row[col] = 0
        out.append(t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    b = sub.add_parser("bench")
    b.add_argument("--nproc", type=int, default=4)
    b.add_argument("--sizes", default="4KiB:64MiB:4")
    b.add_argument("--zipf", type=float, default=1.2)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--iters", type=int, default=7)
    b.add_argument("--warmup", type=int, default=2)
    b.add_argument("--json", action="store_true")
    r = sub.add_parser("random")
    r.add_argument("--count", type=int, default=100)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.what == "bench":
        opts = {"sizes": [int(s) for s in parse_sizes(args.sizes)], "zipf": args.zipf, "seed": args.seed,
                "iters": args.iters, "warmup": args.warmup}
        rows = spawn(_bench_rank, args.nproc, opts, backend="collsched", timeout=3600)[0]
        if args.json:
            print(json.dumps({"nproc": args.nproc, "zipf": args.zipf, "results": rows}))
            return
        print(f"all_to_all_single with Zipf({args.zipf}) split sizes, {args.nproc} ranks, fp32, median of "
              f"{args.iters} (slowest rank); ratio = gloo / collsched")
        print(f"{'size':>10} {'collsched':>12} {'gloo':>12} {'ratio':>7} equal  schedule")
        for row in rows:
            print(f"{row['size']:>10} {row['collsched_s'] * 1e3:>10.3f}ms {row['gloo_s'] * 1e3:>10.3f}ms "
                  f"{row['ratio']:>7.2f} {row['equal']!s:>5}  {','.join(row['ran'])}")
        return
    rng = random.Random(args.seed)
    worlds = (2, 3, 4)
    per = [args.count // 3 + (1 if i < args.count % 3 else 0) for i in range(3)]
    good = total = 0
    for p, n in zip(worlds, per, strict=True):
        mats = _random_matrices(p, n, rng)
        good += spawn(_random_rank, p, mats, backend="collsched", timeout=1800)[0]
        total += n
    if args.json:
        print(json.dumps({"matrices": total, "equal_to_gloo": good}))
    else:
        print(f"{good} of {total} random split matrices (2-4 ranks) equal gloo on all_to_all_single and all_to_all")
    sys.exit(0 if good == total else 1)


if __name__ == "__main__":
    main()
