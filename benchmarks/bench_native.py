"""Benchmark: the C++ backend, the Python backend and gloo side by side in one job (and the two executors).

    python benchmarks/bench_native.py [--nproc 4] [--launches 5] [--iters 7] [--reps auto|N]
        [--sizes 4KiB,64KiB,1MiB,16MiB,64MiB]
        [--kinds allreduce,allgather,reducescatter,broadcast,alltoall] [--no-overlap] [--no-steps] [--json]

Each launch spawns ``--nproc`` ranks whose default group is ``collsched`` (the C++ backend,
runners.backend.cpp) with the default argument check on (``COLLSCHED_CHECK``: exchanged once per signature, then
in band),
a second ``collsched`` group made with ``COLLSCHED_BACKEND=python`` (the Python backend and its worker thread,
with the native executor: what ran before the C++ backend) and a gloo group over the same ranks; in each
iteration the same call runs on gloo, on the C++ backend (``cpp``) and on the Python backend (``pyback``), in
an order that rotates every iteration, after a gloo barrier. An iteration's time is the slowest rank's; a
launch reports the median over its iterations, and the table the median over launches with the spread
(min-max).

- ``busbw`` (one row per kind and size): ratio = gloo time / collsched time (= busbw ratio; above 1
  collsched is faster), for ``dist.all_reduce``, ``all_gather_into_tensor``, ``reduce_scatter_tensor``,
  ``broadcast`` and ``all_to_all_single`` with the policy's algorithm. As nccl-tests times, a sample is
  ``--reps`` calls back to back divided by their number (``auto``: about 20 ms of gloo's time per sample, at
  most 50 calls, one call from 64 MiB up here), after a barrier; ``--reps 1`` times one call alone after
  the barrier, which on a host whose thread wake-ups take tens of microseconds measures mostly those.
- ``per-step``: ``runners.execution.runner.run`` of a pipelined chain reduce with 32 chunks (32 + p - 2 steps; one
  element per chunk, messages of 4 bytes), native and Python, same processes, beside the ``transport floor``:
  the same rank's sends and receives of that plan posted step by step from C++ with nothing else
  (``transport_floor`` in runners/csrc/executor.cpp). Rows: ``wall`` per step; ``process CPU`` (all the rank's
  threads, gloo's included); ``thread CPU`` (the thread that runs the engine: its posting, waiting,
  bookkeeping and arithmetic); ``host overhead`` = thread CPU minus the floor's: what the engine itself
  spends per step beyond the transport, the figure the native/Python ratio is about.
- ``check``: a 4 KiB all-reduce (``runners.execution.runner.run``) with the cross-rank argument check over one
  without, per engine (native: one round of messages; Python: gloo's all-gather, p-1 rounds).
- ``issue``: the caller's host time to issue one ``async_op=True`` all-reduce of 4 bytes (a cached signature),
  until the call returns, on gloo and per backend (its wait is not timed).
- ``overlap``: ``w = dist.all_reduce(x, async_op=True)`` (16 MiB), then 50 ms of pure-Python work, then
  ``w.wait()``; total / max(communication alone, work alone), per backend (gloo, cpp, pyback).
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
from algorithms import registry
from runners.commands.launch import spawn
from runners.execution import native
from runners.execution.plan import rank_plan
from runners.execution.runner import run
from sim import units

SIDES = ("gloo", "cpp", "pyback")
BACKENDS = SIDES[1:]
STEP_SIDES = ("native", "python", "floor")
SAMPLE_S = 0.02  # --reps auto: a busbw sample of about this long per side
MAX_REPS = 50
STEP_CHUNKS = 32  # the per-step rows' chain reduce: chunks + p - 2 steps


def _size(nbytes: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes} B"


def _slowest(times: list[float], gloo: Any) -> list[float]:
    t = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
    return t.tolist()


def _call(kind: str, nbytes: int, p: int) -> Any:
    """A function(group) making one torch call of ``kind`` whose nccl-tests size is ``nbytes``."""
    n = max(nbytes // 4, p)
    n -= n % p
    if kind == "allreduce":
        x = torch.ones(n)
        return lambda g: dist.all_reduce(x, group=g)
    if kind == "broadcast":
        x = torch.ones(n)
        return lambda g: dist.broadcast(x, src=0, group=g)
    if kind == "allgather":
        out, x = torch.empty(n), torch.ones(n // p)
        return lambda g: dist.all_gather_into_tensor(out, x, group=g)
    if kind == "reducescatter":
        x, out = torch.ones(n), torch.empty(n // p)
        return lambda g: dist.reduce_scatter_tensor(out, x, group=g)
    if kind == "alltoall":
        x, out = torch.ones(n), torch.empty(n)
        return lambda g: dist.all_to_all_single(out, x, group=g)
    raise ValueError(f"unknown kind {kind!r}")


def _side(name: str, world: Any, gloo: Any, pyback: Any) -> Any:
    return {"gloo": gloo, "cpp": world, "pyback": pyback}[name]


def _busy(seconds: float) -> int:
    end = time.perf_counter() + seconds
    k = 0
    while time.perf_counter() < end:  # pure Python: holds the GIL but for the interpreter's switches
        k += 1
    return k


def _rank(rank: int, args: dict[str, Any]) -> dict[str, Any]:
    gloo = dist.new_group(backend="gloo")
    world = dist.group.WORLD
    os.environ["COLLSCHED_BACKEND"] = "python"
    pyback = dist.new_group(backend="collsched")
    os.environ.pop("COLLSCHED_BACKEND")
    p = dist.get_world_size()
    iters, warmup = args["iters"], args["warmup"]
    times: dict[str, dict[str, list[float]]] = {}

    def timed(metric: str, i: int, fns: dict[str, Any], reps: int = 1) -> None:
        order = list(SIDES[i % 3:] + SIDES[:i % 3])
        for name in order:
            g = _side(name, world, gloo, pyback)
            dist.barrier(group=gloo)
            start = time.perf_counter()
            for _ in range(reps):
                fns[name](g)
            dt = (time.perf_counter() - start) / reps
            if i >= warmup:
                times.setdefault(metric, {}).setdefault(name, []).append(dt)

    for kind in args["kinds"]:
        for size in args["sizes"]:
            call = _call(kind, size, p)
            reps = args["reps"]
            if reps == 0:  # as nccl-tests: enough calls back to back to fill a sample, the same on every rank
                dist.barrier(group=gloo)
                start = time.perf_counter()
                for _ in range(3):
                    call(gloo)
                once = max(_slowest([(time.perf_counter() - start) / 3], gloo))
                reps = max(1, min(MAX_REPS, int(SAMPLE_S / once)))
            for i in range(warmup + iters):
                timed(f"{kind} {_size(size)}", i, dict.fromkeys(SIDES, call), reps)
    if args["steps"]:
        # Many steps per run, so the per-run cost (runner.run's Python checks and binding, paid by both
        # engines) hardly counts: a pipelined chain reduce, one receive + add and one send per rank and step.
        sched = registry.get("reduce", "chain").build(p, chunks=STEP_CHUNKS)
        x = torch.ones(sched.collective.chunks)
        steps = len(sched.steps)
        # The transport floor: this rank's sends and receives of the same plan, step by step, posted from C++
        # with nothing else (runners/csrc/executor.cpp's transport_floor); what an engine's thread spends
        # beyond it per step is the engine's own host overhead.
        rows = native.transport_rows(rank_plan(sched, dist.get_rank()), x.element_size())
        module = native.load()
        for i in range(warmup + iters):
            for name in ("native", "python", "floor"):
                dist.barrier(group=gloo)
                start, cpu, mine = time.perf_counter(), time.process_time(), time.thread_time()
                if name == "floor":
                    module.transport_floor(rows, gloo, 10)
                else:
                    for _ in range(10):
                        run(sched, x, group=gloo, check=False, engine=name)
                dt = (time.perf_counter() - start) / steps / 10
                dcpu = (time.process_time() - cpu) / steps / 10  # this process's threads, gloo's included
                dthread = (time.thread_time() - mine) / steps / 10  # the thread that runs the engine, alone
                if i >= warmup:
                    times.setdefault("per-step wall", {}).setdefault(name, []).append(dt)
                    times.setdefault("per-step process CPU", {}).setdefault(name, []).append(dcpu)
                    times.setdefault("per-step thread CPU", {}).setdefault(name, []).append(dthread)
    if args["steps"]:  # the default argument check: a checked 4 KiB all-reduce over an unchecked one
        sched = registry.get("allreduce", "recursive_doubling" if p & (p - 1) == 0 else "ring").build(p)
        x = torch.ones(1024)
        for i in range(warmup + iters):
            for name in ("native", "python"):
                for check in (False, True):
                    dist.barrier(group=gloo)
                    start = time.perf_counter()
                    run(sched, x, group=gloo, check=check, engine=name)
                    if i >= warmup:
                        times.setdefault(f"check {name}", {}).setdefault(str(check), []).append(
                            time.perf_counter() - start)
    if args["steps"]:  # issue cost of a cached signature in the calling thread, per backend
        x = torch.ones(1)
        for i in range(warmup + iters):
            for name in SIDES:
                g = _side(name, world, gloo, pyback)
                dist.barrier(group=gloo)
                spent = 0.0
                for _ in range(20):
                    start = time.perf_counter()
                    w = dist.all_reduce(x, group=g, async_op=True)
                    spent += time.perf_counter() - start
                    assert w is not None
                    w.wait()
                if i >= warmup:
                    times.setdefault("issue", {}).setdefault(name, []).append(spent / 20)
    if args["overlap"]:
        x = torch.ones(1 << 22)  # 16 MiB
        for i in range(warmup + iters):
            for name in SIDES:
                g = _side(name, world, gloo, pyback)
                for what in ("comm", "work", "both"):
                    dist.barrier(group=gloo)
                    start = time.perf_counter()
                    if what == "work":
                        _busy(0.05)
                    else:
                        w = dist.all_reduce(x, group=g, async_op=True)
                        if what == "both":
                            _busy(0.05)
                        assert w is not None
                        w.wait()
                    if i >= warmup:
                        times.setdefault(f"overlap {what}", {}).setdefault(name, []).append(
                            time.perf_counter() - start)
    out = {m: {n: statistics.median(_slowest(ts, gloo)) for n, ts in by.items()} for m, by in times.items()}
    found = runners.backend.group.collsched_group(world)
    out["executed"] = dict(found.executed) if found is not None else {}
    dist.barrier(group=gloo)
    dist.destroy_process_group(pyback)
    dist.destroy_process_group(gloo)
    return out


def _rows(launches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    metrics = [m for m in launches[0] if m != "executed" and not m.startswith(("overlap", "check", "issue"))]
    for m in metrics:
        row: dict[str, Any] = {"metric": m}
        if m.startswith("per-step"):
            row.update({f"{e}_us": statistics.median(1e6 * r[m][e] for r in launches) for e in STEP_SIDES})
            row["native_over_python"] = [r[m]["native"] / r[m]["python"] for r in launches]
        else:
            for side in BACKENDS:
                row[side] = [r[m]["gloo"] / r[m][side] for r in launches]
            row["gloo_ms"] = statistics.median(1e3 * r[m]["gloo"] for r in launches)
        rows.append(row)
        if m == "per-step thread CPU":  # the engines' own overhead: their thread's CPU beyond the transport floor
            rows.append({"metric": "per-step host overhead", **{
                f"{e}_us": statistics.median(1e6 * (r[m][e] - r[m]["floor"]) for r in launches)
                for e in ("native", "python")}, "native_over_python": [
                (r[m]["native"] - r[m]["floor"]) / (r[m]["python"] - r[m]["floor"]) for r in launches]})
    for side in ("native", "python"):
        if f"check {side}" in launches[0]:
            rows.append({"metric": f"check {side}", "checked_over_unchecked": [
                r[f"check {side}"]["True"] / r[f"check {side}"]["False"] for r in launches]})
    if "issue" in launches[0]:
        rows.append({"metric": "issue", **{f"{side}_us": statistics.median(1e6 * r["issue"][side] for r in launches)
                                           for side in SIDES},
                     "cpp_over_pyback": [r["issue"]["cpp"] / r["issue"]["pyback"] for r in launches]})
    if "overlap both" in launches[0]:
        for side in SIDES:
            ratios = [r["overlap both"][side] / max(r["overlap comm"][side], r["overlap work"][side])
                      for r in launches]
            rows.append({"metric": f"overlap {side}", "total_over_max": ratios,
                         "comm_ms": statistics.median(1e3 * r["overlap comm"][side] for r in launches)})
    return rows


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--launches", type=int, default=5)
    parser.add_argument("--iters", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--reps", default="auto",
                        help="calls back to back per busbw sample (auto: about 20 ms of gloo's time, at most 50)")
    parser.add_argument("--sizes", default="4KiB,64KiB,1MiB,16MiB,64MiB")
    parser.add_argument("--kinds", default="allreduce,allgather,reducescatter,broadcast,alltoall")
    parser.add_argument("--no-overlap", dest="overlap", action="store_false")
    parser.add_argument("--no-steps", dest="steps", action="store_false")
    parser.add_argument("--json", action="store_true")
    ns = parser.parse_args()
    if ns.reps != "auto" and not (ns.reps.isdigit() and int(ns.reps) > 0):
        parser.error(f"--reps must be a positive integer or auto, got {ns.reps!r}")
    args = vars(ns) | {"sizes": [int(s) for s in units.parse_sizes(ns.sizes)], "kinds": ns.kinds.split(","),
                       "reps": 0 if ns.reps == "auto" else int(ns.reps)}
    os.environ["COLLSCHED_CHECK"] = "1"  # the default check on, whatever the caller's environment says
    launches = [spawn(_rank, ns.nproc, args, backend="collsched", timeout=3000)[0] for _ in range(ns.launches)]
    rows = _rows(launches)
    if ns.json:
        print(json.dumps({"rows": rows, "executed": launches[0]["executed"]}, indent=2))
        return
    print(f"{ns.nproc} ranks, {ns.launches} launches x {ns.iters} iterations; median (min-max) over launches")
    for r in rows:
        if "cpp" in r:
            print(f"{r['metric']:<22} gloo {r['gloo_ms']:8.2f} ms   gloo/cpp {_spread(r['cpp'])}   "
                  f"gloo/pyback {_spread(r['pyback'])}")
        elif "python_us" in r:
            floor = f", transport floor {r['floor_us']:.1f}" if "floor_us" in r else ""
            print(f"{r['metric']:<22} native {r['native_us']:.1f} us/step, python {r['python_us']:.1f} us/step{floor}, "
                  f"native/python {_spread(r['native_over_python'])}")
        elif r["metric"] == "issue":
            print(f"{'issue (async, 4 B)':<22} gloo {r['gloo_us']:.1f} us, cpp {r['cpp_us']:.1f} us, "
                  f"pyback {r['pyback_us']:.1f} us, "
                  f"cpp/pyback {_spread(r['cpp_over_pyback'])}")
        elif "checked_over_unchecked" in r:
            print(f"{r['metric']:<22} checked / unchecked 4 KiB all-reduce {_spread(r['checked_over_unchecked'])}")
        else:
            print(f"{r['metric']:<22} total / max(alone) {_spread(r['total_over_max'])}   comm {r['comm_ms']:.1f} ms")
    print("collsched ran:", ", ".join(f"{k} x{v}" for k, v in sorted(launches[0]["executed"].items())))


if __name__ == "__main__":
    main()
