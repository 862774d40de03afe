"""A 10,000-configuration campaign: throughput on 1 and 2 pool workers, kill-and-resume, Dask against the pool.

    .venv/bin/python benchmarks/bench_campaign.py [--configs-only] [--no-resume] [--no-dask] [--keep DIR]

The campaign (written as JSON in a temporary folder): allreduce, allgather, reducescatter and broadcast, 25
algorithm variants in all, on 8 small topologies (4 to 8 ranks), at 25 sizes from 1 KiB to 4 MiB, in both
modes: 25 x 8 x 25 x 2 = 10,000 configurations of a few milliseconds each. It runs

1. on a pool of 1 worker, then of 2, each into an empty store, alternating ``--repeat`` times:
   configurations per second and the ratio of the medians (the goal: at least 1.8x); the CPU seconds the
   workers got over the wall time (how many cores they actually had) and the load average before and
   after each, since other work shares the cores;
2. with 2 workers in a subprocess killed (SIGKILL, driver and workers) once about half the rows are stored,
   then resumed: what the second run computed, and whether the final store equals the uninterrupted one's;
3. on a Dask ``LocalCluster`` of 2 worker processes: whether its store equals the pool's.

Every pool, cluster and subprocess is closed before it returns.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.campaign import simulate  # noqa: E402
from sim.campaign.run import run_campaign  # noqa: E402
from sim.campaign.spec import load_campaign  # noqa: E402
from sim.campaign.store import AXIS_COLUMNS, RESULT_COLUMNS, Store  # noqa: E402

CAMPAIGN: dict[str, Any] = {
    "name": "bench10k",
    "modes": ["dataflow", "lockstep"],
    "topologies": ["ring:4", "switch:4", "ring:6", "switch:6", "ring:8", "switch:8", "torus:2x4", "torus:2x3"],
    "sizes": [int(1024 * 2 ** (k / 2)) for k in range(25)],
    "algorithms": {
        "allreduce": [{"name": "ring", "params": {"chunks": [1, 2, 4]}},
                      {"name": "direct", "params": {"chunks": [1, 2]}}, "recursive_doubling", "rabenseifner"],
        "allgather": [{"name": "ring", "params": {"chunks": [1, 2, 4]}}, "direct", "bruck", "recursive_doubling"],
        "reducescatter": [{"name": "ring", "params": {"chunks": [1, 2, 4]}}, "direct", "recursive_halving"],
        "broadcast": ["binomial", "linear", {"name": "chain", "params": {"chunks": [1, 2, 4]}}, "scatter_allgather",
                      "binary_tree"],
    },
}


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _rows(path: Path) -> dict[str, tuple[Any, ...]]:
    with Store(path) as s:
        return {r["key"]: tuple(r[c] for c in (*AXIS_COLUMNS, *RESULT_COLUMNS)) for r in s.rows()}


def _codes(*paths: Path) -> int:
    """How many versions of the sources computed the rows of these stores (``simulate.code_hash``): more than
    one, and rows may differ for that reason alone (other work edits this tree while the benchmark runs)."""
    codes: set[str] = set()
    for path in paths:
        with sqlite3.connect(path) as db:
            codes |= {c for (c,) in db.execute("SELECT DISTINCT code FROM results")}
    return len(codes)


def _count(path: Path) -> int:
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as db:
            return int(db.execute("SELECT COUNT(*) FROM results").fetchone()[0])
    except sqlite3.OperationalError:
        return 0


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _stop_fork_server() -> None:
    """Stop the fork server the pool's workers came from (it outlives a run), so that its CPU and its
    workers' reach this process's children's total (a private hook of multiprocessing: a benchmark's
    measurement only)."""
    import multiprocessing.forkserver as forkserver

    stop = getattr(getattr(forkserver, "_forkserver", None), "_stop", None)
    if stop is not None:
        stop()


def _own_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def throughput(file: Path, store: Path, workers: int) -> float:
    """One run into an empty store; its rate. The driver's caches are emptied first, so each run's sample
    (computed in the driver) starts cold, as a fresh ``collsched campaign`` does."""
    for cache in simulate._caches.values():
        cache.clear()
    for f in store.parent.glob(store.name + "*"):
        f.unlink()
    before, cpu0, own0 = _load(), _children_cpu(), _own_cpu()
    with Store(store) as s:
        summary = run_campaign(load_campaign(file), s, workers=workers, progress=False)
    _stop_fork_server()
    cpu = _children_cpu() - cpu0  # the pool's workers, counted once they and the fork server have exited
    own = _own_cpu() - own0  # the driver: its sample, the store, the hand-over of tasks
    rate = summary.computed / summary.wall_s
    est = summary.estimate
    print(f"  {workers} worker{'s' if workers > 1 else ' '}: {summary.computed:,} configurations in "
          f"{summary.wall_s:6.1f} s = {rate:6.1f}/s; workers' CPU {cpu:5.1f} s = {cpu / summary.wall_s:.2f} cores "
          f"busy, driver's {own:4.1f} s (estimate before: "
          f"{est.seconds + est.sampled * est.seconds_each if est else 0:.0f} s; errors "
          f"{summary.errors}; load average before {before}, after {_load()})")
    return rate


def kill_and_resume(file: Path, store: Path, reference: Path, total: int) -> None:
    code = "import sys; from sim.cli.app import main; sys.exit(main(sys.argv[1:]))"
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code, "campaign", str(file), "--store", str(store), "--workers",
                             "2", "--no-progress"], cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        while _count(store) < total // 2 and proc.poll() is None:
            time.sleep(0.05)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    landed = _count(store)
    print(f"  killed after {time.perf_counter() - t0:.1f} s with {landed:,} of {total:,} rows stored")
    with Store(store) as s:
        summary = run_campaign(load_campaign(file), s, workers=2, progress=False)
        runs = s.runs()
    same = _rows(store) == _rows(reference)
    print(f"  resumed: {summary.already:,} found stored, {summary.computed:,} computed in {summary.wall_s:.1f} s "
          f"(runs planned {[r['planned'] for r in runs]}, stored {[r['stored'] for r in runs]}); computed twice: "
          f"{landed + summary.computed - total}; final store equals the uninterrupted run's: {same} (source versions "
          f"among their rows: {_codes(store, reference)})")


def dask_check(file: Path, store: Path, reference: Path) -> None:
    from distributed import Client, LocalCluster

    t0 = time.perf_counter()
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client, Store(store) as s:
        summary = run_campaign(load_campaign(file), s, client=client, progress=False)
    print(f"  Dask LocalCluster (2 worker processes): {summary.computed:,} in {summary.wall_s:.1f} s "
          f"({summary.computed / summary.wall_s:.1f}/s, {time.perf_counter() - t0:.1f} s with the cluster's start); "
          f"rows equal the pool's: {_rows(store) == _rows(reference)} (source versions: {_codes(store, reference)})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-resume", action="store_true", help="skip the kill-and-resume check")
    ap.add_argument("--no-dask", action="store_true", help="skip the Dask check")
    ap.add_argument("--repeat", type=int, default=2, metavar="N", help="alternate 1 and 2 workers N times (default 2)")
    ap.add_argument("--keep", metavar="DIR", help="write the campaign and stores here (default: a temporary folder)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(args.keep or tmp)
        d.mkdir(parents=True, exist_ok=True)
        file = d / "bench10k.json"
        file.write_text(json.dumps(CAMPAIGN))
        for f in d.glob("*.sqlite*"):
            f.unlink()
        total = load_campaign(file).count()
        print(f"campaign: {total:,} configurations; {os.cpu_count()} CPUs; load average {_load()}")
        ones, twos = [], []
        for _ in range(max(1, args.repeat)):
            ones.append(throughput(file, d / "w1.sqlite", 1))
            twos.append(throughput(file, d / "w2.sqlite", 2))
        one, two = statistics.median(ones), statistics.median(twos)
        pairs = ", ".join(f"{b / a:.2f}x" for a, b in zip(ones, twos, strict=True))
        print(f"  2 workers / 1 worker: {two / one:.2f}x of the medians ({pairs} pair by pair; goal 1.8x); "
              f"stores equal: {_rows(d / 'w1.sqlite') == _rows(d / 'w2.sqlite')} (source versions: "
              f"{_codes(d / 'w1.sqlite', d / 'w2.sqlite')})")
        if not args.no_resume:
            kill_and_resume(file, d / "resume.sqlite", d / "w2.sqlite", total)
        if not args.no_dask:
            dask_check(file, d / "dask.sqlite", d / "w2.sqlite")
    return 0


if __name__ == "__main__":
    sys.exit(main())
