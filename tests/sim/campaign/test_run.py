"""Running a campaign: resumable after a kill, the same rows on a pool and on Dask, failures stored, refusals."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from sim.campaign.run import run_campaign
from sim.campaign.spec import load_campaign, parse_campaign
from sim.campaign.store import AXIS_COLUMNS, RESULT_COLUMNS, Store
from sim.cli.app import main

pytestmark = pytest.mark.multiprocess

ROOT = Path(__file__).resolve().parents[3]
# 720 cheap configurations (a few ms each): long enough on one worker to be killed halfway.
N = 18 * 4 * 10
RESUME = """
name = "resume"
sizes = "1KiB:512KiB"
topologies = ["ring:4", "switch:4", "ring:6", "torus:2x3"]
[algorithms]
allreduce = ["ring", "direct", "recursive_doubling", "rabenseifner", {name = "ring", params = {chunks = [2, 4]}}]
allgather = ["ring", "direct", "bruck", "recursive_doubling"]
broadcast = ["binomial", "linear", "chain", "scatter_allgather", "binary_tree"]
reducescatter = ["ring", "direct", "recursive_halving"]
"""


def _results(path: Path) -> dict[str, tuple[Any, ...]]:
    with Store(path) as s:
        return {r["key"]: tuple(r[c] for c in (*AXIS_COLUMNS, *RESULT_COLUMNS)) for r in s.rows()}


def _count(path: Path) -> int:
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as db:
            return int(db.execute("SELECT COUNT(*) FROM results").fetchone()[0])
    except sqlite3.OperationalError:
        return 0  # not created yet


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The campaign file, and its store from one uninterrupted run on the pool (2 workers)."""
    d = tmp_path_factory.mktemp("reference")
    (d / "resume.toml").write_text(RESUME)
    with Store(d / "ref.sqlite") as store:
        summary = run_campaign(load_campaign(d / "resume.toml"), store, workers=2, progress=False)
    assert summary.computed == summary.total == N and summary.errors == 0
    return d / "resume.toml", d / "ref.sqlite"


@contextmanager
def _running(file: Path, store: Path, workers: int, rows: int) -> Iterator[subprocess.Popen[bytes]]:
    """``collsched campaign`` in its own session and process group, given once ``rows`` rows are stored (it must
    still be running then; the wait gives up after 120 s); afterwards, whatever the test found, every process
    of its group is killed and the driver reaped."""
    code = "import sys; from sim.cli.app import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.Popen([sys.executable, "-c", code, "campaign", str(file), "--store", str(store),
                             "--workers", str(workers), "--no-progress"], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while _count(store) < rows and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert proc.stderr is not None
        assert proc.poll() is None, f"the campaign ended before it could be killed: {proc.stderr.read()!r}"
        yield proc
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # nothing of the group is left
            pass
        proc.wait(timeout=30)
        if proc.stderr is not None:
            proc.stderr.close()


def test_killed_halfway_and_resumed_computes_nothing_twice(reference: tuple[Path, Path], tmp_path: Path) -> None:
    file, ref = reference
    store = tmp_path / "resume.sqlite"
    with _running(file, store, 1, 200) as proc:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its pool worker, as a power cut would
    landed = _count(store)
    assert 200 <= landed < N - 100
    with Store(store) as s:
        summary = run_campaign(load_campaign(file), s, workers=2, progress=False)
        runs = s.runs()
    # The second run computed exactly what the first had not stored, and each key was stored once.
    assert summary.already == landed and summary.computed == N - landed
    assert [r["planned"] for r in runs] == [N, N - landed]
    assert [r["stored"] for r in runs] == [landed, N - landed]
    assert [r["status"] for r in runs] == ["running", "done"]  # the first was killed mid-run
    assert _results(store) == _results(ref)
    with Store(store) as s:  # a third run finds nothing to do
        again = run_campaign(load_campaign(file), s, workers=2, progress=False)
    assert again.computed == 0 and again.already == N and again.run_id is None


def _session(sid: int) -> list[int]:
    """The live processes of session ``sid`` (Linux /proc; zombies left out)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_bytes().rsplit(b")", 1)[1].split()
                if int(stat[3]) == sid and stat[0] != b"Z":  # field 6 of stat: the session id
                    out.append(int(d.name))
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
    return out


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from Linux's /proc")
def test_a_killed_driver_leaves_no_worker(reference: tuple[Path, Path], tmp_path: Path) -> None:
    # only the driver is killed (not its process group): its pool, the fork server included, must follow
    file, _ = reference
    store = tmp_path / "orphans.sqlite"
    with _running(file, store, 2, 100) as proc:
        assert len(_session(proc.pid)) >= 3  # the driver, a fork server or spawned workers, and workers
        proc.kill()
        proc.wait(timeout=30)
        deadline = time.monotonic() + 60  # a worker notices within half a second of its task's end
        while _session(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = _session(proc.pid)
    assert left == []


def test_dask_localcluster_gives_the_pool_s_rows(reference: tuple[Path, Path], tmp_path: Path) -> None:
    from distributed import LocalCluster

    file, ref = reference
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Store(tmp_path / "dask.sqlite") as s:  # by its address, as --scheduler ADDRESS
        summary = run_campaign(load_campaign(file), s, scheduler=cluster.scheduler_address, progress=False)
    assert summary.executor == "dask" and summary.workers == 2 and summary.computed == N
    assert _results(tmp_path / "dask.sqlite") == _results(ref)


def test_a_failing_configuration_is_stored_and_the_campaign_goes_on(tmp_path: Path) -> None:
    c = parse_campaign({"collectives": ["allreduce"], "algorithms": ["ring", "direct"],
                        "topologies": ["ring:4", {"spec": "ring:4", "placement": str(tmp_path / "none.json"),
                                                  "label": "broken"}, "ring:3"],
                        "sizes": ["1KiB", "1MiB"],
                        "runtimes": ["default"]})
    with Store(tmp_path / "s.sqlite") as s:
        summary = run_campaign(c, s, workers=2, progress=False)
        rows = list(s.rows())
    assert summary.computed == 12 and summary.errors == 4
    errors = [r for r in rows if r["status"] == "error"]
    assert len(errors) == 4 and all("none.json" in r["error"] for r in errors)
    assert sum(r["status"] == "ok" for r in rows) == 8


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = main(list(argv))
    return code, json.loads(capsys.readouterr().out)


def test_too_big_campaigns_are_refused_with_the_estimate(small: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "s.sqlite"
    code, doc = _cli(capsys, "campaign", str(small), "--store", str(store), "--max-configs", "100", "--json")
    assert code == 2 and "expands to 180 configurations, more than the cap of 100" in doc["error"]
    assert _count(store) == 0  # refused before anything ran
    code, doc = _cli(capsys, "campaign", str(small), "--store", str(store), "--max-hours", "1e-9", "--json")
    assert code == 2 and doc["error"].startswith("refused: 180 configurations, 180 to compute")
    assert "more than --max-hours 1e-09" in doc["error"]
    assert _count(store) == 13  # the sample: stored, never computed again
    code, doc = _cli(capsys, "campaign", str(small), "--store", str(store), "--max-memory", "1MiB", "--json")
    assert code == 2 and "more than the memory there is (1 MiB" in doc["error"]
    code, doc = _cli(capsys, "campaign", str(small), "--store", str(store), "--estimate", "--json")
    assert code == 0 and doc["run"]["estimate"]["missing"] == 180 - 13 - 13
    # the pool started beside each sample (its workers warm while the driver samples) is gone with the refusal
    assert multiprocessing.active_children() == []


def test_the_command_runs_and_reports(small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "s.sqlite"
    code, doc = _cli(capsys, "campaign", str(small), "--store", str(store), "--workers", "2", "--json",
                     "--csv", str(tmp_path / "rows.csv"), "--heatmaps", str(tmp_path / "maps"),
                     "--table", str(tmp_path / "t.json"), "--table-topology", "ring:4")
    assert code == 0 and doc["ok"] and doc["run"]["computed"] == 180 and doc["statuses"] == {"ok": 180}
    assert len(doc["winners"]) == 3 * 3 * 4  # collectives x topologies x sizes
    assert len(doc["outputs"]["heatmaps"]) == 9
    assert len((tmp_path / "rows.csv").read_text().splitlines()) == 181
    code, doc = _cli(capsys, "campaign", str(small), "--store", str(store), "--report-only", "--json")
    assert code == 0 and "run" not in doc and doc["missing"] == 0
