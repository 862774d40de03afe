"""Benchmark: the collsched backend against gloo, side by side in one run.

    python benchmarks/bench_backend.py [--nproc 4] [--iters 9] [--warmup 2] [--mib 64] [--width 1024] [--json]

Spawns ``--nproc`` ranks whose default group is ``collsched`` and makes a
gloo group over the same ranks. Every iteration times the same work on both,
alternating which goes first, after a gloo barrier that lines the ranks up:

- ``all_reduce``: one fp32 tensor of ``--mib`` MiB (the schedule the policy
  picks for that size, ring by default);
- ``DDP step``: forward, backward (DDP's bucketed all-reduces, overlapped
  with the backward pass) and an SGD step of an MLP with ``--layers`` square
  layers of ``--width``, identical on both groups.

An iteration's time is the slowest rank's; the table shows medians and the
ratio collsched / gloo (goal: at most 1.1). Each rank uses one intra-op
thread, as torchrun does for several processes per node.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import torch.distributed as dist

import runners.backend  # registers collsched in the spawned ranks too
from runners.launch import spawn


def _slowest(times: list[float], gloo: dist.ProcessGroup) -> list[float]:
    t = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
    return t.tolist()


def _timed(fn: Any, gloo: dist.ProcessGroup) -> float:
    dist.barrier(group=gloo)
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _mlp(width: int, layers: int) -> torch.nn.Module:
    torch.manual_seed(0)
    mods: list[torch.nn.Module] = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*mods)


def _rank(rank: int, args: dict[str, Any]) -> dict[str, Any]:
    from torch.nn.parallel import DistributedDataParallel as DDP

    gloo = dist.new_group(backend="gloo")
    groups = {"gloo": gloo, "collsched": dist.group.WORLD}
    iters, warmup = args["iters"], args["warmup"]
    times: dict[str, dict[str, list[float]]] = {}

    for mib in args["mib"]:
        buf = torch.ones(int(mib * (1 << 18)))  # MiB of fp32
        metric = f"all_reduce {mib:g} MiB"
        for i in range(warmup + iters):
            for name in sorted(groups, reverse=i % 2 == 1):
                dt = _timed(lambda g=groups[name], b=buf: dist.all_reduce(b, group=g), gloo)
                if i >= warmup:
                    times.setdefault(metric, {}).setdefault(name, []).append(dt)
    if args["no_ddp"]:
        return _report(times, gloo)

    models = {name: DDP(_mlp(args["width"], args["layers"]), process_group=g) for name, g in groups.items()}
    opts = {name: torch.optim.SGD(m.parameters(), lr=1e-3) for name, m in models.items()}
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(args["batch"], args["width"], generator=g)
    y = torch.randn(args["batch"], args["width"], generator=g)

    def step(name: str) -> None:
        opts[name].zero_grad()
        torch.nn.functional.mse_loss(models[name](x), y).backward()
        opts[name].step()

    for i in range(warmup + iters):
        for name in sorted(groups, reverse=i % 2 == 1):
            dt = _timed(lambda n=name: step(n), gloo)
            if i >= warmup:
                times.setdefault("DDP step", {}).setdefault(name, []).append(dt)
    for g in groups.values():
        dist.barrier(group=g)
    models.clear()  # drop DDP while the groups are alive and idle: see runners.backend.settle
    opts.clear()
    runners.backend.settle()
    return _report(times, gloo)


def _report(times: dict[str, dict[str, list[float]]], gloo: dist.ProcessGroup) -> dict[str, Any]:
    out: dict[str, Any] = {m: {name: _slowest(ts, gloo) for name, ts in by.items()} for m, by in times.items()}
    out["executed"] = dict(dist.group.WORLD.executed)  # type: ignore[union-attr]
    dist.destroy_process_group(gloo)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--iters", type=int, default=9)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--mib", type=float, nargs="+", default=[64.0], help="all_reduce sizes in MiB (fp32)")
    parser.add_argument("--no-ddp", action="store_true", help="time the all_reduce sizes only")
    parser.add_argument("--width", type=int, default=1024, help="MLP width")
    parser.add_argument("--layers", type=int, default=4, help="MLP depth")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = vars(parser.parse_args())
    results = spawn(_rank, args["nproc"], args, backend="collsched", timeout=1800)[0]
    rows = []
    for metric in (m for m in results if m != "executed"):
        gloo_s = statistics.median(results[metric]["gloo"])
        coll_s = statistics.median(results[metric]["collsched"])
        what = "fp32, one tensor" if metric.startswith("all_reduce") else (
            f"MLP {args['layers']}x{args['width']}, batch {args['batch']}")
        rows.append({"metric": metric, "what": what, "nproc": args["nproc"], "gloo_ms": 1e3 * gloo_s,
                     "collsched_ms": 1e3 * coll_s, "ratio": coll_s / gloo_s})
    if args["json"]:
        print(json.dumps({"rows": rows, "executed": results["executed"]}, indent=2))
        return
    print(f"collsched vs gloo, {args['nproc']} ranks, medians of {args['iters']} iterations (slowest rank)")
    print(f"{'metric':<20} {'workload':<26} {'gloo ms':>9} {'collsched ms':>13} {'ratio':>6}")
    for r in rows:
        print(f"{r['metric']:<20} {r['what']:<26} {r['gloo_ms']:>9.1f} {r['collsched_ms']:>13.1f} {r['ratio']:>6.2f}")
    print("collsched ran:", ", ".join(f"{k} x{v}" for k, v in sorted(results["executed"].items())))


if __name__ == "__main__":
    main()
