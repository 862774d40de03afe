"""The benchmark: size parsing, bus factors, and `collsched bench` end to end on gloo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from algorithms import build
from algorithms import formats as fileformat
from algorithms.errors import CollschedError
from algorithms.ir import Kind
from runners.commands import launch
from runners.commands.bench import bus_factor, parse_sizes, table
from runners.commands.cli import main
from tests.runners import limits


@pytest.mark.parametrize(("text", "size"), [("512", 512), ("1KiB", 1024), ("64MiB", 64 << 20), ("2GiB", 2 << 30),
                                             ("3 MiB", 3 << 20), ("4k", 4096)])
def test_parse_size(text: str, size: int) -> None:
    assert parse_sizes(text) == [size]


def test_parse_sizes_doubles_or_lists() -> None:
    assert parse_sizes("1KiB:8KiB") == [1024, 2048, 4096, 8192]
    assert parse_sizes("1KiB:64KiB:4") == [1024, 4096, 16384, 65536]
    assert parse_sizes("1KiB,1MiB") == [1024, 1 << 20]


@pytest.mark.parametrize("bad", ["1XiB", "KiB", "8KiB:1KiB", "1KiB:2KiB:1", "1:2:3:4", "0:4", "1KBB"])
def test_bad_sizes_are_clear_errors(bad: str) -> None:
    with pytest.raises(CollschedError, match="--sizes"):
        parse_sizes(bad)


def test_bus_factors_follow_nccl_tests() -> None:
    assert bus_factor(Kind.ALLREDUCE, 4) == 1.5
    assert bus_factor(Kind.ALLGATHER, 4) == bus_factor(Kind.ALLTOALL, 4) == 0.75
    assert bus_factor(Kind.BROADCAST, 4) == bus_factor(Kind.REDUCE, 8) == 1.0


@pytest.mark.multiprocess
def test_collsched_bench_json_on_two_ranks(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "--nproc", "2", "-c", "reducescatter", "-a", "ring", "--sizes", "1KiB,64KiB",
                 "--iters", "2", "--warmup", "1", "--json", "--dtype", "int32"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True
    rows = doc["rows"]
    assert [r["size"] for r in rows] == [1024, 65536]
    for r in rows:
        assert r["count"] == r["size"] // 4 and r["type"] == "int32" and r["ranks"] == 2
        assert r["wrong"] == 0 and r["native_wrong"] == 0
        assert r["busbw"] == pytest.approx(r["algbw"] * 0.5)
        assert r["ratio"] == pytest.approx(r["native_time_us"] / r["time_us"])
    assert "#wrong" in table(rows) and "ratio" in table(rows)


def test_collsched_bench_usage_errors_exit_2(capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    def no_spawn(*args: object, **kwargs: object) -> None:
        raise AssertionError("bench spawned ranks for a command that cannot work")

    monkeypatch.setattr(launch, "spawn", no_spawn)
    assert main(["bench", "--nproc", "2", "-c", "allreduce", "-a", "ring", "--sizes", "1XiB"]) == 2
    assert "--sizes" in capsys.readouterr().err
    assert main(["bench", "--nproc", "2", "-c", "allreduce", "-a", "nosuch", "--sizes", "1KiB",
                 "--iters", "1"]) == 2
    assert "nosuch" in capsys.readouterr().err
    assert main(["bench", "--nproc", "2", "-c", "allreduce", "-a", "ring", "--param", "group=2"]) == 2
    assert "unknown parameter 'group'" in capsys.readouterr().err
    assert main(["bench", "--nproc", "2", "-c", "allreduce", "-a", "ring", "--import", "no_such_module_x"]) == 2
    assert "--import: cannot import module 'no_such_module_x'" in capsys.readouterr().err


def test_bench_refuses_an_incorrect_schedule_without_spawning(capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    def no_spawn(*args: object, **kwargs: object) -> None:
        raise AssertionError("bench spawned ranks for an incorrect schedule")

    monkeypatch.setattr(launch, "spawn", no_spawn)
    doc = fileformat.to_dict(build("allreduce", "ring", 2))
    doc["steps"] = doc["steps"][:-1]  # the last step of the ring's allgather phase is gone
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(doc))
    assert main(["bench", "--nproc", "2", "--file", str(path), "--sizes", "1KiB", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and "incorrect" in out["error"] and out["verify"]["violations"]
    assert main(["bench", "--nproc", "3", "--file", str(path), "--sizes", "1KiB"]) == 2
    assert "the schedule has 2 ranks, the job 3" in capsys.readouterr().err


@pytest.mark.multiprocess
def test_runners_bench_under_torchrun() -> None:
    root = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
           "runners.commands.bench", "-c", "allgather", "-a", "ring", "--sizes", "4KiB", "--iters", "2",
           "--warmup", "1", "--json"]
    done = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=limits.JOB,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(done.stdout)["rows"]
    assert len(rows) == 1 and rows[0]["ranks"] == 2 and rows[0]["wrong"] == 0 and rows[0]["size"] == 4096
