"""``--matrix`` on the torch-free commands: simulate, sweep, bound, export; bad matrices exit 2 naming the row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim.cli.app import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_simulate_zipf_on_a_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "simulate", "-c", "alltoallv", "-a", "hierarchical", "--param", "group=2",
                       "-t", "cluster:2x2", "--matrix", "zipf:1.2,tokens=64", "-s", "1MiB", "--no-progress", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["ok"] and 0 < doc["efficiency"] <= 1


def test_bound_and_sweep_take_a_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "t.csv"
    f.write_text("0,4,0\n0,0,0\n1,1,1\n")
    code, out, _ = run(capsys, "bound", "-c", "alltoallv", "-t", "switch:3", "--bandwidth", "1GB/s",
                       "--latency", "0", "--matrix", str(f), "-s", "7KB", "--json")
    # 7 chunks, a mean input of 7000 B over 3 ranks: chunk = 3000 B; rank 1 receives 4 + 1 chunks over its
    # one downlink: 15 us (rank 0 sends only 4).
    assert code == 0 and json.loads(out)["bound_s"] == pytest.approx(15e-6)
    code, out, _ = run(capsys, "sweep", "-c", "alltoallv", "-t", "switch:3", "--matrix", str(f),
                       "--sizes", "1KiB,1MiB", "--no-progress", "--json")
    assert code == 0 and {r["algorithm"] for r in json.loads(out)["results"]} >= {"direct", "bruck", "pairwise"}


def test_bad_matrix_exits_2_naming_the_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "t.csv"
    f.write_text("0,4,0\n0,-1,0\n1,1,1\n")
    code, _, err = run(capsys, "simulate", "-c", "alltoallv", "-a", "direct", "-t", "ring:3", "--matrix", str(f),
                       "-s", "1MiB", "--no-progress")
    assert code == 2 and "line 2: row 1: entry 1 is -1" in err and "Traceback" not in err
    f.write_text("0,4\n0,1\n")
    code, _, err = run(capsys, "bound", "-c", "alltoallv", "-t", "ring:3", "--matrix", str(f), "-s", "1MiB")
    assert code == 2 and "2 rows, expected 3" in err
    code, _, err = run(capsys, "simulate", "-c", "alltoall", "-a", "direct", "-t", "ring:3", "--matrix", "uniform",
                       "-s", "1MiB", "--no-progress")
    assert code == 2 and "--matrix is for -c alltoallv" in err
