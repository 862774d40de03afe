"""One-file GPU check: the runner on nccl against NCCL's ring, at 1 MiB to 1 GiB.

    python benchmarks/gpu_check.py [--nproc N] [--sizes 1MiB:1GiB] [--chunks 4]

Runs tests/gpu (correctness against NCCL's collectives), then the benchmark
of ring all-reduce, all-gather and reduce-scatter against torch's native
collectives with NCCL_ALGO=Ring, and prints each table. The goal (issue 5):
schedule busbw at least 0.8 x NCCL's ring at 64 MiB and above. Needs two or
more GPUs; exits 0 after printing the tables, 1 when a check fails.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=min(torch.cuda.device_count(), 8))
    parser.add_argument("--sizes", default="1MiB:1GiB:4")
    parser.add_argument("--chunks", type=int, default=4)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--skip-tests", action="store_true")
    args = parser.parse_args()
    if args.nproc < 2:
        print(f"gpu_check: needs two or more GPUs, found {torch.cuda.device_count()}", file=sys.stderr)
        return 1
    env = dict(os.environ, NCCL_ALGO="Ring", PYTHONPATH=str(ROOT))
    status = 0
    if not args.skip_tests:
        status |= subprocess.call([sys.executable, "-m", "pytest", "-q", "tests/gpu"], cwd=ROOT, env=env)
    for kind in ("allreduce", "allgather", "reducescatter"):
        cmd = [sys.executable, "-m", "runners.cli", "bench", "--backend", "nccl", "--nproc", str(args.nproc),
               "-c", kind, "-a", "ring", "--chunks", str(args.chunks), "--sizes", args.sizes,
               "--iters", str(args.iters), "--warmup", "3"]
        print("$ NCCL_ALGO=Ring " + " ".join(cmd[1:]), flush=True)
        status |= subprocess.call(cmd, cwd=ROOT, env=env)
    return 1 if status else 0


if __name__ == "__main__":
    sys.exit(main())
