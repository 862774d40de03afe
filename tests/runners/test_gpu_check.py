"""benchmarks/gpu_check.py on a machine without GPUs: it runs end to end and says plainly what it skipped.

Its GPU parts cannot run here; what they compute is checked on hand-made input: the communicator counts
from the schedules against closed forms, the NCCL log parser on synthetic INFO lines, and the one-GPU
local-path check on CPU tensors (the same code, device aside).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from algorithms import registry
from runners.commands.launch import spawn
from tests.runners import limits

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())  # the repository
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.multiprocess
def test_runs_end_to_end_without_a_gpu() -> None:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, str(SCRIPT), "--p", "8", "--kinds", "allreduce,allgather"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=limits.JOB)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "gpu_check: skipped: no GPU (torch.cuda.is_available() is False)" in done.stdout, done.stdout
    rows = {tuple(line.split()[:2]): line.split()[2:] for line in done.stdout.splitlines()
            if line and not line.startswith("#") and not line.startswith("gpu_check") and not line.startswith("kind")}
    # Ring: p pairs, 2 peers per rank; direct: every pair, p-1 peers per rank; now one communicator for each.
    assert rows[("allreduce", "ring")] == ["8", "2", "1"]
    assert rows[("allgather", "direct")] == ["28", "7", "1"]
    assert not any(kind == "reducescatter" for kind, _ in rows)  # --kinds is honoured


@pytest.mark.parametrize("p", [2, 5, 8])
def test_communicators_from_the_code_match_closed_forms(p: int) -> None:
    gpu_check = _module()
    ring = registry.get("allreduce", "ring").build(p)
    assert gpu_check.pair_communicators(ring) == (p if p > 2 else 1, min(2, p - 1))
    assert gpu_check.pair_communicators(registry.get("reducescatter", "direct").build(p)) == (p * (p - 1) // 2, p - 1)


def test_nccl_log_parser_counts_each_communicator_once() -> None:
    gpu_check = _module()
    log = "\n".join([
        # One 4-rank communicator (every rank logs it), one 2-rank communicator of ranks 0 and 1, a repeated line,
        # and lines that are not an init.
        *(f"host:{r}:{r} [0] NCCL INFO comm 0x5a1 rank {r} nranks 4 cudaDev {r} busId 100 - Init COMPLETE"
          for r in range(4)),
        "host:0:0 [0] NCCL INFO comm 0xb2 rank 0 nranks 2 cudaDev 0 busId 100 - Init COMPLETE",
        "host:1:1 [1] NCCL INFO comm 0xc3 rank 1 nranks 2 cudaDev 1 busId 200 - Init COMPLETE",
        "host:1:1 [1] NCCL INFO comm 0xc3 rank 1 nranks 2 cudaDev 1 busId 200 - Init COMPLETE",
        "host:0:0 [0] NCCL INFO comm 0x5a1 rank 0 nranks 4 - Init START",
        "host:0:0 [0] NCCL INFO Using network Socket",
    ])
    assert gpu_check.count_inits(log) == {4: 1, 2: 1}


def _local_paths(rank: int) -> list[str]:
    return _module().local_paths("cpu", sizes=(1 << 10, 3 << 12))


@pytest.mark.multiprocess
def test_the_one_gpu_check_passes_on_cpu_tensors() -> None:
    lines = spawn(_local_paths, 1, timeout=limits.JOB)[0]
    assert len(lines) == 8 and all(line.startswith("ok") for line in lines), "\n".join(lines)
