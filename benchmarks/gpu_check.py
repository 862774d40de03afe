"""One-file GPU check of the runner's nccl path: what this machine's GPUs can show, and what they cannot.

    python benchmarks/gpu_check.py [--nproc N] [--sizes 1MiB:1GiB:4] [--kinds allreduce,allgather,reducescatter]
                                   [--algorithms ring,...] [--iters 5] [--skip-tests] [--p 8]

Always: the table of NCCL communicators each algorithm needs at ``--p`` ranks,
from the schedules themselves: before (one ``isend``/``irecv`` per transfer,
so torch's ProcessGroupNCCL opens a 2-rank communicator for every pair of
ranks that exchange a message) and now (one ``batch_isend_irecv`` group per
step, on the group's own communicator: one).

Two or more GPUs: runs ``tests/gpu`` (the runner against NCCL's collectives),
then ``collsched bench --backend nccl`` with ``NCCL_ALGO=Ring`` for every
registered all-reduce, all-gather and reduce-scatter algorithm that serves
the GPU count, at 1 MiB to 1 GiB, with ``NCCL_DEBUG=INFO``: it prints each
benchmark table, then one line per algorithm with the communicators NCCL
reported creating ("comm 0x... rank r nranks n ... Init COMPLETE" lines),
counted by size.

One GPU: runs what one GPU can show: the runner on a 1-rank nccl group with
CUDA tensors (local copies, local reduces, scratch, same-step snapshots and
every reduce op, the same code paths as on many ranks minus the network),
checked against results computed independently, with timings; and says what
it could not run.

No GPU: prints "skipped: no GPU" with the reason and exits 0 (after the table
from the code). Exit status: 0 when everything that could run passed, 1
when a check failed.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

KINDS = ("allreduce", "allgather", "reducescatter")
_INIT = re.compile(r"comm (0x[0-9a-f]+) rank (\d+) nranks (\d+).*Init COMPLETE")


# ---------------------------------------------------------------- communicators, from the code


def pair_communicators(schedule: Any) -> tuple[int, int]:
    """(2-rank communicators a per-transfer isend/irecv execution opens, the most of them on one rank)."""
    pairs: set[tuple[int, int]] = set()
    for step in schedule.steps:
        for t in step.transfers:
            if t.src != t.dst:
                pairs.add((min(t.src, t.dst), max(t.src, t.dst)))
    per_rank: Counter[int] = Counter()
    for a, b in pairs:
        per_rank[a] += 1
        per_rank[b] += 1
    return len(pairs), max(per_rank.values(), default=0)


def code_table(p: int, kinds: list[str], only: list[str] | None) -> str:
    from algorithms import registry

    lines = [f"# NCCL communicators per algorithm at p={p}, from the schedules (issue 12)",
             "#   before: one isend/irecv per transfer -> torch opens a 2-rank communicator per pair that talks",
             f"#           (plus p(p-1)/2 = {p * (p - 1) // 2} pairs for the old point-to-point metadata check)",
             "#   now:    one batch_isend_irecv group per step on the group's communicator -> 1 (made eagerly)",
             f"{'kind':<14} {'algorithm':<26} {'before: pairs':>14} {'max per rank':>13} {'now':>5}"]
    for kind in kinds:
        for alg in registry.algorithms(kind):
            if (only and alg.name not in only) or alg.unsupported(p, {}) is not None:
                continue
            pairs, most = pair_communicators(alg.build(p))
            lines.append(f"{kind:<14} {alg.name:<26} {pairs:>14} {most:>13} {1:>5}")
    return "\n".join(lines)


# ---------------------------------------------------------------- two or more GPUs


def count_inits(log: str) -> Counter[int]:
    """Communicators created, by size, from NCCL_DEBUG=INFO output of every rank (each rank logs its own)."""
    seen: set[tuple[str, str]] = set()
    ranks_of: Counter[int] = Counter()
    for match in _INIT.finditer(log):
        comm, rank, nranks = match.group(1), match.group(2), int(match.group(3))
        if (comm, rank) not in seen:
            seen.add((comm, rank))
            ranks_of[nranks] += 1
    return Counter({n: k // n for n, k in ranks_of.items()})


def multi_gpu(args: argparse.Namespace, nproc: int) -> int:
    from algorithms import registry

    env = dict(os.environ, NCCL_ALGO="Ring", PYTHONPATH=str(ROOT))
    status = 0
    if not args.skip_tests:
        print("$ NCCL_ALGO=Ring python -m pytest -q tests/gpu", flush=True)
        status |= subprocess.call([sys.executable, "-m", "pytest", "-q", "tests/gpu"], cwd=ROOT, env=env)
    summary = [f"# NCCL communicators created per benchmark job ({nproc} ranks; by size: count)"]
    only = args.algorithms.split(",") if args.algorithms else None
    for kind in args.kinds.split(","):
        for alg in registry.algorithms(kind):
            if (only and alg.name not in only) or alg.unsupported(nproc, {}) is not None:
                continue
            cmd = [sys.executable, "-m", "runners.commands.cli", "bench", "--backend", "nccl", "--nproc", str(nproc),
                   "-c", kind, "-a", alg.name, "--sizes", args.sizes, "--iters", str(args.iters), "--warmup", "2"]
            print("$ NCCL_ALGO=Ring NCCL_DEBUG=INFO " + " ".join(cmd[1:]), flush=True)
            t0 = time.perf_counter()
            done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                                  env=dict(env, NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT"))
            print(done.stdout, end="", flush=True)
            if done.returncode:
                print(done.stderr[-3000:], file=sys.stderr)
                status |= 1
            comms = count_inits(done.stdout + done.stderr)
            shown = ", ".join(f"{n} ranks: {k}" for n, k in sorted(comms.items(), reverse=True)) or "none logged"
            summary.append(f"{kind:<14} {alg.name:<26} {shown}  ({time.perf_counter() - t0:.0f} s, "
                           f"exit {done.returncode})")
    print("\n".join(summary))
    return status


# ---------------------------------------------------------------- one GPU


def local_schedule(k: int = 4) -> Any:
    """A 1-rank schedule through the runner's local paths: copies via scratch, a same-step swap of the
    output's halves (staged snapshots), then output += scratch (a local reduce)."""
    from algorithms.builder import ScheduleBuilder
    from algorithms.ir import Buf, Collective, Kind

    b = ScheduleBuilder(Collective(Kind.ALLGATHER, 1, k), "gpu-local", scratch_chunks=k)
    with b.step():
        b.copy(0, 0, 0, k, dst_buf=Buf.SCRATCH)
    with b.step():
        b.copy(0, 0, 0, k, buf=Buf.SCRATCH, dst_buf=Buf.OUTPUT)
    with b.step():  # each write must see the other's old value
        b.copy(0, 0, 0, k // 2, buf=Buf.OUTPUT, dst_index=k // 2)
        b.copy(0, 0, k // 2, k // 2, buf=Buf.OUTPUT, dst_index=0)
    with b.step():
        b.reduce(0, 0, 0, k, buf=Buf.SCRATCH, dst_buf=Buf.OUTPUT)
    return b.build()


def local_paths(device_type: str, sizes: tuple[int, ...] = (1 << 18, 1 << 26)) -> list[str]:
    """On a 1-rank group: the local paths of the grouped executor for each reduce op, checked against the
    result computed here with plain torch, and timed (5 runs); one line per case, FAIL for a mismatch.

    ``local_schedule`` is no all-gather (it exercises the local paths; its result is checked here, not by the
    verifier), so it runs with ``COLLSCHED_VERIFY=0``, the runner's documented way out."""
    import os

    import torch
    import torch.distributed as dist

    from runners.execution.runner import run

    os.environ["COLLSCHED_VERIFY"] = "0"

    cuda = device_type == "cuda"
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    sched = local_schedule()
    ops = {"SUM": dist.ReduceOp.SUM, "MAX": dist.ReduceOp.MAX, "MIN": dist.ReduceOp.MIN,
           "PRODUCT": dist.ReduceOp.PRODUCT}
    lines = []
    for n in sizes:
        x = torch.randn(n, device=device)
        half = n // 2
        swapped = torch.cat([x[half:], x[:half]])
        for name, op in ops.items():
            want = {"SUM": swapped + x, "MAX": torch.maximum(swapped, x), "MIN": torch.minimum(swapped, x),
                    "PRODUCT": swapped * x}[name]
            out = torch.empty(n, device=device)
            run(sched, x, out, op=op, executor="grouped")
            sync()
            ok = torch.equal(out, want)
            t0 = time.perf_counter()
            for _ in range(5):
                run(sched, x, out, op=op, check=False, executor="grouped")
            sync()
            ms = (time.perf_counter() - t0) / 5 * 1e3
            lines.append(f"{'ok  ' if ok else 'FAIL'} {device_type}: copies via scratch, same-step swap, "
                         f"{name:<7} local reduce, {n * 4 / 2**20:>6.1f} MiB: {ms:8.3f} ms per run")
    return lines


def one_gpu_job(rank: int) -> list[str]:
    return local_paths("cuda")


def one_gpu() -> int:
    from runners.commands.launch import spawn

    print("# one GPU: the runner's CUDA paths on a 1-rank nccl group (no network)", flush=True)
    lines = spawn(one_gpu_job, 1, backend="nccl", timeout=600)[0]
    print("\n".join(lines))
    print("could not run on one GPU: tests/gpu, point-to-point groups between GPUs, the NCCL benchmark and the "
          "communicator count (each needs two or more GPUs)")
    return 1 if any(line.startswith("FAIL") for line in lines) else 0


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nproc", type=int, default=None, help="ranks (default: every GPU, at most 8)")
    parser.add_argument("--sizes", default="1MiB:1GiB:4")
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--algorithms", default=None, help="comma-separated names (default: every one)")
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--skip-tests", action="store_true")
    parser.add_argument("--p", type=int, default=8, help="ranks of the communicator table from the code")
    args = parser.parse_args(argv)
    only = args.algorithms.split(",") if args.algorithms else None
    print(code_table(args.p, args.kinds.split(","), only), flush=True)
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:  # pragma: no cover - torch is a dependency
        print(f"gpu_check: skipped: no GPU (torch cannot be imported: {e})")
        return 0
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus == 0 or not dist.is_nccl_available():
        why = "torch.cuda.is_available() is False" if gpus == 0 else "this torch has no nccl"
        print(f"gpu_check: skipped: no GPU ({why}); nothing of the nccl path ran")
        return 0
    nproc = min(args.nproc or gpus, gpus, 8)
    if nproc < 2:
        return one_gpu()
    return multi_gpu(args, nproc)


if __name__ == "__main__":
    sys.exit(main())
