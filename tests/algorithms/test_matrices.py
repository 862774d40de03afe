"""Traffic matrix sources: uniform, Zipf-routed experts, files and router traces, and their errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from algorithms import matrices
from algorithms.errors import ScheduleError


def test_uniform() -> None:
    assert matrices.parse("uniform", 2) == ((1, 1), (1, 1))
    assert matrices.parse("uniform:3", 3) == ((3, 3, 3),) * 3


def test_zipf_rows_count_every_token_copy() -> None:
    t = np.array(matrices.zipf(4, 1.2, tokens=100, experts=8, top_k=2, seed=5))
    assert t.shape == (4, 4) and (t.sum(axis=1) == 200).all()
    assert matrices.zipf(4, 1.2, tokens=100, seed=5) == matrices.zipf(4, 1.2, tokens=100, seed=5)
    assert matrices.zipf(4, 1.2, tokens=100, seed=5) != matrices.zipf(4, 1.2, tokens=100, seed=6)


def test_zipf_shares_follow_the_law() -> None:
    # 4 experts, one a rank, s = 1: shares 1 : 1/2 : 1/3 : 1/4 = 12/25, 6/25, 4/25, 3/25 (in some order).
    t = np.array(matrices.zipf(4, 1.0, tokens=200_000, seed=1))
    shares = sorted((t.sum(axis=0) / t.sum()).tolist(), reverse=True)
    assert shares == pytest.approx([12 / 25, 6 / 25, 4 / 25, 3 / 25], abs=0.005)
    # s = 0: uniform routing.
    flat = np.array(matrices.zipf(4, 0.0, tokens=200_000, seed=1))
    assert (flat.sum(axis=0) / flat.sum()).tolist() == pytest.approx([0.25] * 4, abs=0.005)


def test_zipf_top_k_picks_distinct_experts() -> None:
    # top_k = E: every token goes to every expert once, so each rank sends tokens x (experts it holds).
    t = np.array(matrices.zipf(2, 1.5, tokens=10, experts=4, top_k=4))
    assert t.tolist() == [[20, 20], [20, 20]]


def test_files(tmp_path: Path) -> None:
    j = tmp_path / "m.json"
    j.write_text(json.dumps({"matrix": [[0, 1], [2, 0]]}))
    assert matrices.parse(str(j), 2) == ((0, 1), (2, 0))
    c = tmp_path / "m.csv"
    c.write_text("# a comment\n0, 1\n2,0\n")
    assert matrices.parse(str(c), 2) == ((0, 1), (2, 0))
    c.write_text("0,1\n2,-3\n")
    with pytest.raises(ScheduleError, match=r"m.csv line 2: row 1: entry 1 is -3"):
        matrices.parse(str(c), 2)
    c.write_text("0,1\n2,x\n")
    with pytest.raises(ScheduleError, match=r"m.csv line 2: expected integers"):
        matrices.parse(str(c), 2)
    j.write_text("[[0, 1, 1], [2, 0]]")
    with pytest.raises(ScheduleError, match=r"m.json: matrix: has 2 rows, expected 3"):
        matrices.parse(str(j), 3)
    j.write_text("[[0, 1, 1], [2, 0], [1, 1, 1]]")
    with pytest.raises(ScheduleError, match=r"m.json: matrix row 1: has 2 entries, expected 3"):
        matrices.parse(str(j), 3)


def test_router_traces(tmp_path: Path) -> None:
    # 4 experts on 2 ranks: experts 0-1 on rank 0, 2-3 on rank 1.
    tr = tmp_path / "t.csv"
    tr.write_text("rank,expert\n# experts=4\n0,0\n0,3\n1,2\n1,3\n1,1\n")
    assert matrices.parse(f"trace:{tr}", 2) == ((1, 1), (1, 2))
    tj = tmp_path / "t.json"
    tj.write_text(json.dumps({"experts": 4, "routes": [[0, 0], [0, 3], [1, 2]]}))
    assert matrices.parse(f"trace:{tj}", 2) == ((1, 1), (0, 1))
    tr.write_text("0,0\n5,1\n")
    with pytest.raises(ScheduleError, match="route 1 comes from rank 5"):
        matrices.parse(f"trace:{tr}", 2)
    tr.write_text("0,0\n1\n")
    with pytest.raises(ScheduleError, match=r"t\.csv line 2: expected SOURCE_RANK,EXPERT"):
        matrices.parse(f"trace:{tr}", 2)


@pytest.mark.parametrize(("spec", "message"), [
    ("zipf:x", "S must be a number"), ("zipf:1,bogus=2", "unknown option"), ("nofile.json", "no file"),
    ("zipf:1,top_k=9", "top_k 9 is more than the 2 experts"),
])
def test_bad_specs(spec: str, message: str) -> None:
    with pytest.raises(ScheduleError, match=message):
        matrices.parse(spec, 2)
