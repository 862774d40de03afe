"""Where a gloo all-reduce's time goes: wall and CPU time per rank, for torch, the runner and a bare Python ring.

    python benchmarks/bench_runner_cpu.py                       # 4 ranks, 64 MiB, ring
    python benchmarks/bench_runner_cpu.py --nproc 2 --mib 16 --algorithms ring ring:chunks=2
    python benchmarks/bench_runner_cpu.py --nproc 8 --mib 1 4 16 --algorithms ring direct

Spawns ``--nproc`` gloo ranks and times, for each size, side by side in one
run (the variants alternate iteration by iteration, after a barrier):

- ``torch``: ``dist.all_reduce``, gloo's own C++ ring;
- each of ``--algorithms`` (``name`` or ``name:chunks=k``, default ``ring``):
  ``runners.execution.runner.run`` of the registry's all-reduce schedule
  (``check=False``: no metadata exchange);
- ``bare ring``: the smallest Python ring over the same ``isend``/``irecv``
  calls (reduce-scatter then all-gather, one message per step, staging
  allocated once), the floor for any engine that drives gloo's
  point-to-point calls from Python.

For each variant it prints the median wall time of the slowest rank and the
median CPU time (user and system, whole process: gloo's threads included)
per rank per call, and the wall ratio torch / variant (busbw ratio, as
``collsched bench`` reports it). When ranks outnumber cores, wall time
follows the CPU time all ranks spend, so a variant's extra CPU per call is
what its ratio loses.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import torch.distributed as dist

from algorithms.errors import RegistryError
from algorithms.ir import Kind
from runners.backend.policy import Choice, PolicyError, parse_algorithms, schedule
from runners.commands.launch import spawn


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _bare_ring(x: torch.Tensor, stage: torch.Tensor, p: int, r: int) -> None:
    """Ring all-reduce (sum) of x in place: p-1 reduce-scatter steps, then p-1 all-gather steps."""
    c = x.numel() // p
    nxt, prv = (r + 1) % p, (r - 1) % p
    for k in range(p - 1):
        send, recv = (r - k) % p, (r - k - 1) % p
        rw = dist.irecv(stage, prv, tag=k)
        sw = dist.isend(x[send * c:(send + 1) * c], nxt, tag=k)
        rw.wait()
        x[recv * c:(recv + 1) * c].add_(stage)
        sw.wait()
    for k in range(p - 1):
        send, recv = (r + 1 - k) % p, (r - k) % p
        rw = dist.irecv(x[recv * c:(recv + 1) * c], prv, tag=p + k)
        sw = dist.isend(x[send * c:(send + 1) * c], nxt, tag=p + k)
        rw.wait()
        sw.wait()


def _choice(spec: str) -> Choice:
    """``"ring:chunks=2"`` as the policy's checked Choice: the same syntax as COLLSCHED_ALGORITHMS."""
    (rule,) = parse_algorithms(f"allreduce={spec}", where=f"--algorithms {spec}")[Kind.ALLREDUCE]
    return rule.candidates[0]


def _rank(rank: int, args: dict[str, Any]) -> dict[str, dict[str, dict[str, list[float]]]]:
    return {f"{mib:g}": _one_size(rank, args, mib) for mib in args["mib"]}


def _one_size(rank: int, args: dict[str, Any], mib: float) -> dict[str, dict[str, list[float]]]:
    from runners.execution.runner import run

    p = dist.get_world_size()
    n = int(mib * (1 << 18)) // p * p  # fp32 elements, a multiple of p
    x = torch.ones(n)
    stage = torch.empty(n // p)
    variants: dict[str, Any] = {"torch": lambda: dist.all_reduce(x)}
    for spec in args["algorithms"]:
        sched = schedule(Kind.ALLREDUCE, _choice(spec), p)
        variants[spec] = lambda s=sched: run(s, x, check=False)
    variants["bare ring"] = lambda: _bare_ring(x, stage, p, rank)
    wall: dict[str, list[float]] = {v: [] for v in variants}
    cpu: dict[str, list[float]] = {v: [] for v in variants}
    for i in range(args["warmup"] + args["iters"]):
        for name in sorted(variants, reverse=i % 2 == 1):
            dist.barrier()
            c0, t0 = _cpu(), time.perf_counter()
            variants[name]()
            t1, c1 = time.perf_counter(), _cpu()
            if i >= args["warmup"]:
                wall[name].append(t1 - t0)
                cpu[name].append(c1 - c0)
    out: dict[str, dict[str, list[float]]] = {}
    for name in variants:
        w = torch.tensor(wall[name], dtype=torch.float64)
        dist.all_reduce(w, op=dist.ReduceOp.MAX)  # an iteration lasts as long as its slowest rank
        out[name] = {"wall": w.tolist(), "cpu": cpu[name]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--mib", type=float, nargs="+", default=[64.0], help="all-reduce sizes in MiB (fp32)")
    parser.add_argument("--algorithms", nargs="+", default=["ring"], metavar="NAME[:chunks=k]",
                        help="all-reduce schedules of the registry to time (default: ring)")
    parser.add_argument("--iters", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    args = vars(parser.parse_args())
    if args["nproc"] < 2 or args["iters"] < 1 or args["warmup"] < 0 or min(args["mib"]) <= 0:
        parser.error("need --nproc >= 2, --iters >= 1, --warmup >= 0 and --mib > 0")
    for spec in args["algorithms"]:  # a bad name or parameter fails here, before any rank starts
        try:
            schedule(Kind.ALLREDUCE, _choice(spec), args["nproc"])
        except PolicyError as e:  # names the option and the spec
            parser.error(str(e))
        except RegistryError as e:  # p2p: a name the policy knows but no schedule
            parser.error(f"--algorithms {spec}: {e}")
    per_rank = spawn(_rank, args["nproc"], args, backend="gloo", timeout=1800)
    width = max(12, *(len(a) for a in args["algorithms"]))
    for size, by_variant in per_rank[0].items():
        base = statistics.median(by_variant["torch"]["wall"])
        print(f"all-reduce {size} MiB fp32, {args['nproc']} gloo ranks; medians of {args['iters']} iterations")
        print(f"{'variant':<{width}} {'wall ms':>9} {'ratio':>6} " + " ".join(f"{'cpu ms r' + str(r):>10}"
                                                                   for r in range(args["nproc"])))
        for name in by_variant:
            w = statistics.median(by_variant[name]["wall"])
            cpus = [statistics.median(rank_out[size][name]["cpu"]) * 1e3 for rank_out in per_rank]
            print(f"{name:<{width}} {w * 1e3:>9.1f} {base / w:>6.3f} " + " ".join(f"{c:>10.1f}" for c in cpus))


if __name__ == "__main__":
    main()
