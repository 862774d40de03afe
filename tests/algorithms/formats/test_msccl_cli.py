"""``collsched verify --file F.xml`` says what the MSCCL-IR executability check found, also when it found nothing.

The CLI is called in-process (``sim.cli.main``). References: files written by hand-edits whose findings are
known (a deadlock: both ranks receive first; a warning: attributes the MSCCL executor needs left out), and
the JSON keys ``verify`` printed before this line existed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from algorithms import build
from algorithms.formats.msccl import dumps_msccl
from sim.cli import main


@pytest.fixture
def ring_xml(tmp_path: Path) -> Path:
    path = tmp_path / "ring.xml"
    path.write_text(dumps_msccl(build("allreduce", "ring", 2)))
    return path


def _verify(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["verify", *args])
    return code, capsys.readouterr().out


def test_a_clean_file_says_the_check_found_nothing(ring_xml: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _verify(capsys, "--file", str(ring_xml))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].endswith(": OK")
    assert lines[1].strip() == "MSCCL check: 0 errors, 0 warnings"
    assert len(lines) == 2


def test_the_count_comes_before_the_findings(ring_xml: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = ring_xml.with_name("old.xml")
    old.write_text(ring_xml.read_text().replace(' outofplace="0" minBytes="0" maxBytes="0"', ""))
    code, out = _verify(capsys, "--file", str(old))
    assert code == 0  # a warning does not fail the verdict
    lines = [x.strip() for x in out.splitlines()]
    assert lines[1] == "MSCCL check: 0 errors, 1 warning"
    assert lines[2].startswith("MSCCL warning: algo: no outofplace, minBytes, maxBytes attribute(s)")
    assert len(lines) == 3


def test_a_file_that_cannot_run_gives_the_count_too(ring_xml: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hang = ring_xml.with_name("hang.xml")
    # Each gpu's first send waits for its first receive, which waits for the other gpu's first send.
    hang.write_text(re.sub(r'(type="s" [^>]*)depid="-1" deps="-1"', r'\1depid="1" deps="0"', ring_xml.read_text()))
    code, out = _verify(capsys, "--file", str(hang))
    assert code == 1
    lines = [x.strip() for x in out.splitlines()]
    assert "cannot run" in lines[0]
    n = sum(1 for x in lines if x.startswith("MSCCL error:"))
    w = sum(1 for x in lines if x.startswith("MSCCL warning:"))
    assert n >= 1 and lines[1] == f"MSCCL check: {n} error{'s' if n != 1 else ''}, {w} warnings"


def test_json_keeps_its_keys(ring_xml: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _verify(capsys, "--file", str(ring_xml), "--json")
    assert code == 0
    # The keys verify --json printed for a clean MSCCL-IR file before the count line existed.
    assert set(json.loads(out)) == {"ok", "violations", "transfers", "steps"}
    assert "MSCCL check" not in out


def test_other_schedules_get_no_msccl_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _verify(capsys, "-c", "allreduce", "-a", "ring", "-p", "2")
    assert code == 0 and "MSCCL" not in out
