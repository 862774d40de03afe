"""The runner on nccl with CUDA tensors, against NCCL's own collectives (needs two or more GPUs).

Skipped unless torch sees at least two CUDA devices and has nccl: NCCL allows
one rank per GPU. The same cases as tests/runners/test_runner.py, on the GPU of
each rank's LOCAL_RANK.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from runners.commands.launch import spawn

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(GPUS < 2 or not dist.is_nccl_available(), reason="needs two or more CUDA GPUs and nccl"),
]


def nccl_job(rank: int, dtypes: list[str]) -> list[str]:
    from tests import test_runner

    test_runner.DEVICE[0] = torch.device("cuda", torch.cuda.current_device())
    test_runner.EXECUTORS = ("grouped",)  # nccl's path; "dataflow" is refused for CUDA tensors
    return test_runner.correctness_job(rank, dtypes, None, 11)


def test_every_kind_matches_nccl() -> None:
    # nccl has no complex and no bool reductions of its own beyond what torch maps; keep to the common types.
    failures = [f for r in spawn(nccl_job, min(GPUS, 4), ["float32", "int64", "bfloat16", "float16"],
                                 backend="nccl", timeout=900) for f in r]
    assert failures == [], "\n".join(failures[:20])


def bench_job(rank: int) -> list[dict[str, float]]:
    from algorithms import registry
    from runners.commands.bench import measure

    schedule = registry.get("allreduce", "ring").build(dist.get_world_size(), chunks=4)
    return measure(schedule, [1 << 20, 64 << 20], iters=5, warmup=2)


def test_bench_on_nccl_counts_no_wrong_elements() -> None:
    rows = spawn(bench_job, min(GPUS, 4), backend="nccl", timeout=900)[0]
    assert [r["wrong"] for r in rows] == [0, 0] and [r["native_wrong"] for r in rows] == [0, 0]
