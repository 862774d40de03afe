"""``collsched verify``'s text report: hints first, then at most ``--max-violations`` violations (default 20)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from algorithms import Buf, Collective, Kind, ScheduleBuilder
from algorithms import formats as fileformat
from sim.cli import main


def _misplaced_allgather(tmp_path: Path) -> str:
    # All-gather, p = 6, C = 1. Step 0: rank 0 sends its chunk to rank 1's output[1] (it belongs in output[0]);
    # step 1: rank 1 places its own chunk in output[1], overwriting it unread (a dead write, the one hint).
    # Nothing else moves: of the 36 output slots only rank 1's output[1] ends right, so 35 are wrong.
    b = ScheduleBuilder(Collective(Kind.ALLGATHER, 6, 1), "misplaced")
    with b.step():
        b.copy(0, 1, 0, dst_buf=Buf.OUTPUT, dst_index=1)
    with b.step():
        b.copy(1, 1, 0, dst_buf=Buf.OUTPUT, dst_index=1)
    path = tmp_path / "misplaced.json"
    fileformat.save(b.build(), path)
    return str(path)


def _verify(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    code = main(["verify", *argv])
    return code, capsys.readouterr().out.splitlines()


def test_verify_caps_the_violations_and_prints_hints_first(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = _misplaced_allgather(tmp_path)
    code, lines = _verify(capsys, "--file", path)
    assert code == 1
    assert lines[0].endswith(": 35 violation(s)")
    # The hint comes right after the head line, before any violation.
    assert lines[1].startswith("  hint: step 0 transfer 0 ") and "dead write" in lines[1]
    listed = [x for x in lines if "expected chunk" in x]
    assert len(listed) == 20 and lines.index(listed[0]) == 2
    assert "  ... and 15 more (--max-violations 0 for all)" in lines
    assert lines[-1] == "  summary: 35 wrong_slot"
    assert len(lines) == 1 + 1 + 20 + 1 + 1


def test_max_violations_sets_the_cap_and_0_lists_all(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _misplaced_allgather(tmp_path)
    code, lines = _verify(capsys, "--file", path, "--max-violations", "5")
    assert code == 1 and sum("expected chunk" in x for x in lines) == 5
    assert "  ... and 30 more (--max-violations 0 for all)" in lines
    code, lines = _verify(capsys, "--file", path, "--max-violations", "0")
    assert code == 1 and sum("expected chunk" in x for x in lines) == 35
    assert not any("more (--max-violations" in x for x in lines)
    # JSON lists every violation whatever the cap.
    code, lines = _verify(capsys, "--file", path, "--max-violations", "3", "--json")
    assert code == 1 and len(json.loads(lines[0])["violations"]) == 35
    assert main(["verify", "--file", path, "--max-violations", "-1"]) == 2
