"""Nothing unverified runs: the issue's reproducers, each refused on every rank before any data moves.

(a) A user's all-gather with one wrong chunk index, registered by a module named in ``COLLSCHED_IMPORT`` and
pinned with ``COLLSCHED_ALGORITHMS``, under ``all_gather_into_tensor``; (b) an exported ring all-reduce with one
transfer dropped, named as ``allreduce=file:dropped.json``; (c) the same file given to ``run()`` directly.
Before verification ran, each returned wrong data on some rank and exited 0.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runners.commands.launch import SpawnError, spawn
from tests.runners import limits
from tests.runners import verify_cases as cases

pytestmark = pytest.mark.multiprocess

ROOT = Path(__file__).resolve().parents[2]


def _refused_everywhere(fn: object, world: int, *args: object, backend: str = "collsched") -> list[str]:
    """Every rank's error text; fails if any rank returned (ran the wrong schedule)."""
    with pytest.raises(SpawnError) as caught:
        spawn(fn, world, *args, backend=backend, timeout=limits.JOB)
    outcomes = caught.value.outcomes
    assert [o.ok for o in outcomes] == [False] * world, [(o.rank, o.value) for o in outcomes]
    return [o.error or "" for o in outcomes]


@pytest.mark.parametrize("engine", ["native", "python"])
def test_a_user_algorithm_with_a_wrong_chunk_is_refused_on_every_rank(tmp_path: Path, engine: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    module = cases.write_module(tmp_path)
    monkeypatch.setenv("COLLSCHED_IMPORT", str(module))
    monkeypatch.setenv("COLLSCHED_ALGORITHMS", "allgather=broken_gather")
    monkeypatch.setenv("COLLSCHED_EXECUTOR", engine)
    monkeypatch.setenv("COLLSCHED_VERIFY_CACHE", str(tmp_path / "verified"))
    for error in _refused_everywhere(cases.all_gather_into_tensor, 2):
        first = error.splitlines()[0]
        assert "UnverifiedSchedule" in first and "allgather=broken_gather at p=2" in first, error[:1500]
        assert "algorithm 'broken_gather'" in first and "parameters: none" in first, error[:1500]
        assert "rank 0 output[2]: expected chunk 0 from rank 1" in error, error[:1500]
        assert "1 violation(s)" in error


def test_the_reproducer_script_exits_non_zero(tmp_path: Path) -> None:
    # As the user ran it: a script whose collective raises exits non-zero, the error on stderr.
    module = cases.write_module(tmp_path)
    script = ("import sys; from runners.commands.launch import spawn; from tests.runners import verify_cases as c; "
              "print(spawn(c.all_gather_into_tensor, 2, backend='collsched'))")
    env = {**os.environ, "COLLSCHED_IMPORT": str(module), "COLLSCHED_ALGORITHMS": "allgather=broken_gather",
           "COLLSCHED_VERIFY_CACHE": str(tmp_path / "verified"), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=limits.JOB)
    assert done.returncode != 0, done.stdout
    assert "2 of 2 ranks failed" in done.stderr and "broken_gather" in done.stderr, done.stderr[-2000:]


def test_an_exported_ring_with_a_dropped_transfer_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dropped = cases.dropped_ring(tmp_path)
    monkeypatch.setenv("COLLSCHED_ALGORITHMS", f"allreduce=file:{dropped}")
    monkeypatch.setenv("COLLSCHED_VERIFY_CACHE", str(tmp_path / "verified"))
    for error in _refused_everywhere(cases.all_reduce_ones, 4):
        first = error.splitlines()[0]
        assert f"allreduce=file:{dropped} at p=4 (schedule file {dropped})" in first, error[:1500]
        assert "violation(s)" in error and "expected" in error, error[:1500]


def test_run_refuses_a_broken_schedule_on_every_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dropped = cases.dropped_ring(tmp_path)
    monkeypatch.setenv("COLLSCHED_VERIFY_CACHE", str(tmp_path / "verified"))
    for error in _refused_everywhere(cases.run_dropped, 4, str(dropped), backend="gloo"):
        first = error.splitlines()[0]
        assert "UnverifiedSchedule" in first and "schedule 'ring' (allreduce p=4 C=4)" in first, error[:1500]
        assert "InputError" not in first  # the subclass names itself; it is an InputError (test_verified.py)


def test_verify_0_runs_it_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The documented way out: the schedule runs (here: wrong data on some rank), with one warning per process.
    dropped = cases.dropped_ring(tmp_path)
    monkeypatch.setenv("COLLSCHED_ALGORITHMS", f"allreduce=file:{dropped}")
    monkeypatch.setenv("COLLSCHED_VERIFY", "0")
    results = spawn(cases.all_reduce_ones, 4, backend="collsched")
    assert any(r != [4.0] * 8 for r in results), results
