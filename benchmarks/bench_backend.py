"""Benchmark: the collsched backend against gloo, side by side in one run.

    python benchmarks/bench_backend.py [--nproc 4] [--launches 5] [--iters 9] [--warmup 2] [--mib 64]
        [--width 1024] [--json]

Spawns ``--nproc`` ranks whose default group is ``collsched`` (the C++ backend, ``cpp``), makes a second
``collsched`` group with ``COLLSCHED_BACKEND=python`` (the Python backend, ``pyback``) and a gloo group over the
same ranks, ``--launches`` times. Every iteration times the same work on the three, rotating which goes
first, after a gloo barrier that lines the ranks up:

- ``all_reduce``: one fp32 tensor of ``--mib`` MiB (the schedule the policy
  picks for that size, ring by default);
- ``DDP step``: forward, backward (DDP's bucketed all-reduces, overlapped
  with the backward pass) and an SGD step of an MLP with ``--layers`` square
  layers of ``--width``, identical on both groups.

An iteration's time is the slowest rank's; a launch's time is the median over its iterations; the table
shows the ratio backend / gloo (goal: at most 1.0 for the DDP step), median (min-max) over launches.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import torch.distributed as dist

import runners.backend.group  # registers collsched in the spawned ranks too
from runners.commands.launch import spawn


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
    os.environ["COLLSCHED_BACKEND"] = "python"
    pyback = dist.new_group(backend="collsched")
    os.environ.pop("COLLSCHED_BACKEND")
    groups = {"gloo": gloo, "cpp": dist.group.WORLD, "pyback": pyback}
    names = list(groups)
    iters, warmup = args["iters"], args["warmup"]
    times: dict[str, dict[str, list[float]]] = {}

    for mib in args["mib"]:
        buf = torch.ones(int(mib * (1 << 18)))  # MiB of fp32
        metric = f"all_reduce {mib:g} MiB"
        for i in range(warmup + iters):
            for name in names[i % 3:] + names[:i % 3]:
                dt = _timed(lambda g=groups[name], b=buf: dist.all_reduce(b, group=g), gloo)
                if i >= warmup:
                    times.setdefault(metric, {}).setdefault(name, []).append(dt)
    if args["no_ddp"]:
        dist.destroy_process_group(pyback)
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
        for name in names[i % 3:] + names[:i % 3]:
            dt = _timed(lambda n=name: step(n), gloo)
            if i >= warmup:
                times.setdefault("DDP step", {}).setdefault(name, []).append(dt)
    for g in groups.values():
        dist.barrier(group=g)
    models.clear()  # drop DDP while the groups are alive and idle: see runners.backend.group.settle
    opts.clear()
    runners.backend.group.settle()
    dist.destroy_process_group(pyback)
    return _report(times, gloo)


def _report(times: dict[str, dict[str, list[float]]], gloo: dist.ProcessGroup) -> dict[str, Any]:
    out: dict[str, Any] = {m: {name: _slowest(ts, gloo) for name, ts in by.items()} for m, by in times.items()}
    found = runners.backend.group.collsched_group()
    out["executed"] = dict(found.executed) if found is not None else {}
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
    parser.add_argument("--launches", type=int, default=5)
    args = vars(parser.parse_args())
    launches = [spawn(_rank, args["nproc"], args, backend="collsched", timeout=1800)[0]
                for _ in range(args["launches"])]
    rows = []
    for metric in (m for m in launches[0] if m != "executed"):
        row: dict[str, Any] = {"metric": metric, "nproc": args["nproc"], "what": "fp32, one tensor" if
                               metric.startswith("all_reduce") else
                               f"MLP {args['layers']}x{args['width']}, batch {args['batch']}"}
        for name in ("gloo", "cpp", "pyback"):
            row[f"{name}_ms"] = [1e3 * statistics.median(r[metric][name]) for r in launches]
        for name in ("cpp", "pyback"):
            row[f"{name}_over_gloo"] = [c / g for c, g in zip(row[f"{name}_ms"], row["gloo_ms"], strict=True)]
        rows.append(row)
    if args["json"]:
        print(json.dumps({"rows": rows, "executed": launches[0]["executed"]}, indent=2))
        return

    def spread(v: list[float]) -> str:
        return f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})"

    print(f"backend / gloo, {args['nproc']} ranks, {args['launches']} launches x {args['iters']} iterations "
          "(slowest rank); median (min-max) over launches")
    for r in rows:
        print(f"{r['metric']:<18} {r['what']:<26} gloo {statistics.median(r['gloo_ms']):8.1f} ms   "
              f"cpp/gloo {spread(r['cpp_over_gloo'])}   pyback/gloo {spread(r['pyback_over_gloo'])}")
    print("collsched ran:", ", ".join(f"{k} x{v}" for k, v in sorted(launches[0]["executed"].items())))


if __name__ == "__main__":
    main()
