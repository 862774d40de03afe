"""Rank functions for tests/runners/test_verified_runs.py: wrong schedules that must never run.

Each function runs in every rank under ``runners.commands.launch.spawn`` (which reports every rank's outcome);
it makes the call a user would make and lets the error escape, so each rank's outcome says what it raised.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist

from tests.runners import limits

# A user's all-gather with one wrong chunk index: rank 1 sends rank 0 its chunk 1 where chunk 0 belongs.
BROKEN_ALLGATHER = '''
from algorithms import Collective, Kind, ScheduleBuilder
from algorithms.ir import Buf
from algorithms.registry import register
from tests.runners import limits


@register(Kind.ALLGATHER, "broken_gather", source="a user's module with one wrong chunk index")
def broken_gather(ranks: int, *, chunks: int = 1):
    chunks *= 2  # two chunks a rank at least, so that one can be sent in place of the other
    b = ScheduleBuilder(Collective(Kind.ALLGATHER, ranks, chunks), "broken_gather")
    with b.step():
        for src in range(ranks):
            for dst in range(ranks):
                for c in range(chunks):
                    wrong = src == 1 and dst == 0 and c == 0
                    b.copy(src, dst, 1 if wrong else c, buf=Buf.INPUT, dst_buf=Buf.OUTPUT,
                           dst_index=src * chunks + c)
    return b.build()
'''


def write_module(directory: Path) -> Path:
    """The user's module, as a file ``COLLSCHED_IMPORT`` can name."""
    path = directory / "broken_gather.py"
    path.write_text(BROKEN_ALLGATHER)
    return path


def dropped_ring(directory: Path, ranks: int = 4) -> Path:
    """``collsched export`` of the ring all-reduce with one transfer dropped (the first of step 1)."""
    import json
    import subprocess

    path = directory / "ring.json"
    done = subprocess.run([sys.executable, "-m", "runners.commands.cli", "export", "-c", "allreduce", "-a", "ring",
                           "-p", str(ranks), "-o", str(path)], capture_output=True, text=True, timeout=limits.JOB,
                          cwd=Path(__file__).resolve().parents[2])
    if done.returncode != 0:
        raise AssertionError(f"collsched export failed: {done.stderr[-2000:]}")
    doc = json.loads(path.read_text())
    del doc["steps"][1][0]
    dropped = directory / "dropped.json"
    dropped.write_text(json.dumps(doc))
    return dropped


def all_gather_into_tensor(rank: int) -> list[float]:
    """The issue's reproducer: ``all_gather_into_tensor`` of one value per chunk; returns the output."""
    world = dist.get_world_size()
    x = torch.tensor([float(2 * rank), float(2 * rank + 1)])
    out = torch.empty(2 * world)
    dist.all_gather_into_tensor(out, x)
    return out.tolist()


def all_reduce_ones(rank: int) -> list[float]:
    """An all-reduce of 8 elements of 1.0 (the answer is the world size everywhere)."""
    x = torch.ones(8)
    dist.all_reduce(x)
    return x.tolist()


def run_dropped(rank: int, path: str) -> list[float]:
    """``runners.execution.runner.run`` of a schedule file directly, without the backend."""
    from algorithms import formats
    from runners.execution.runner import run

    x = torch.ones(8)
    run(formats.load(path), x)
    return x.tolist()
