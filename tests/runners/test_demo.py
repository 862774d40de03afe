"""`collsched demo`, the README's main job: every stage runs and its outputs are real."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from algorithms import build, registry
from algorithms import formats as fileformat
from runners.backend.policy import Policy
from runners.commands.cli import main
from tests.runners import limits

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())  # the repository


@pytest.mark.multiprocess
def test_demo_runs_every_stage_and_writes_its_outputs(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    proc = subprocess.run(
        [sys.executable, "-m", "runners.commands.cli", "demo", "--ranks", "3", "--run-size", "64KiB", "--iters", "2",
         "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=limits.job(2),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = proc.stdout
    assert "ring (allreduce p=3 C=3): 4 steps, 12 transfers: OK" in text
    assert "simulated / closed form 1.0000" in text  # ring on a ring: exactly the closed form
    # The run step runs the schedule the stages before verified and simulated (the researcher's friction list: it
    # verified ring, then ran the policy's direct), and names the policy's choice beside it; float32, so a largest
    # difference, not "identical".
    choice = Policy.from_env().choose("allreduce", 64 * 1024, 3)
    assert choice.algorithm != "ring"  # else this test could not tell the two apart
    assert "[4/4] run ring, the schedule verified above (the backend's policy would run" in text
    assert f"{choice} for 65536 bytes on 3 ranks)" in text or "p2p, no schedule" in text
    assert "#wrong 0 on small-integer data" in text and "largest |" in text and "identical" not in text
    assert "demo OK" in text
    assert fileformat.load(out / "schedule.json") == build("allreduce", "ring", 3)
    trace = json.loads((out / "trace.json").read_text())
    assert any(e.get("ph") == "X" for e in trace["traceEvents"])
    assert (out / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_demo_refuses_a_topology_of_the_wrong_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["demo", "--ranks", "4", "--topology", "ring:3", "--no-run", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "ring:3 has 3 ranks, --ranks is 4" in err


def test_demo_without_the_real_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["demo", "-c", "broadcast", "-a", "chain", "--ranks", "5", "--chunks", "4", "--topology", "uring:5",
                 "--no-run", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0 and "skipped (--no-run)" in out and "postcondition OK" in out


@pytest.mark.multiprocess
def test_demo_on_integers_with_a_named_algorithm(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "runners.commands.cli", "demo", "--ranks", "2", "-a", "ring", "--run-size", "4KiB",
         "--dtype", "int32", "--iters", "1", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=limits.job(2),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "run ring, named with --algorithm (the backend's policy would run" in proc.stdout
    assert "#wrong 0: identical to torch" in proc.stdout and "largest" not in proc.stdout


def test_demo_of_a_kind_without_a_ring(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "ring" not in [a.name for a in registry.algorithms("broadcast")]
    first = next(a.name for a in registry.algorithms("broadcast") if a.unsupported(4) is None)
    code = main(["demo", "-c", "broadcast", "--ranks", "4", "--no-run", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0 and f"[1/4] verify {first} (broadcast p=4" in out


def test_demo_prices_the_closed_form_on_the_routes_it_uses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Ring on two DGX H100 nodes: every step waits on a NIC crossing, so the closed form with the slowest route's
    # terms is close to the simulation (route 0->1, NVLink, made it read 6.6).
    code = main(["demo", "--ranks", "16", "--topology", "dgx-h100:2", "--no-run", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    ratio = float(out.split("simulated / closed form ")[1].split()[0])
    assert code == 0 and 0.8 <= ratio <= 1.25, out
    assert "the 16 routes this schedule uses differ" in out
