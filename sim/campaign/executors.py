"""Where a campaign's tasks run: a local process pool (the default) or a Dask cluster.

A task is a list of ``(key, canonical config)``; a worker runs ``simulate.run_chunk`` on it and returns
``(key, row)`` pairs, which ``sink`` (the driver: the store and the progress bar) receives in this process
as each task completes. Both executors run the same function on the same tasks, so they store the same rows.

The pool keeps at most two tasks per worker in flight, so a pool that breaks (a worker killed by the
kernel, a crash in native code) loses only those: they run again one configuration per task, and a
configuration that breaks the pool alone is stored as an error. Workers leave when the process that
started them does (a thread in each watches it), so a driver killed with SIGKILL leaves no orphans
computing.

Workers are forked from a fork server that has imported the simulator once (``forkserver``, where the
platform has it; else each is spawned and imports it itself): a second worker then costs a fork, not
another half second of imports on a core the first one needs. No state of the driver is shared either way:
the server is a fresh interpreter. The server leaves once the driver and every worker have.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.context import BaseContext
from typing import Any

from sim.campaign.simulate import run_chunk

__all__ = ["Sink", "Task", "error_rows", "run_dask", "run_pool", "start_pool"]

Task = Sequence[tuple[str, Mapping[str, Any]]]
Sink = Callable[[list[tuple[str, dict[str, Any]]]], None]
DIED = "the worker process died while simulating this configuration (killed for memory, or a crash)"


def error_rows(task: Task, message: str) -> list[tuple[str, dict[str, Any]]]:
    """A task's configurations stored as errors with ``message`` (the task itself could not run)."""
    return [(key, {"status": "error", "error": message}) for key, _ in task]


PRELOAD = ("sim.campaign.simulate", "sim.cli.common", "sim.cli.runtime")
"""What every configuration needs: imported once by the fork server (or by each spawned worker)."""


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, killed but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True  # no /proc: the signal's answer stands


def _watch_driver(driver: int) -> None:
    parent = os.getppid()
    while os.getppid() == parent and _alive(driver):
        time.sleep(0.5)
    os._exit(3)  # the driver is gone: nobody will read what this worker computes


def _worker_init(driver: int, imports: Sequence[str]) -> None:
    # The driver, not the parent, is watched: a fork server lives as long as any worker holds its
    # liveness pipe, so it would outlive a killed driver for as long as the workers wait for it.
    threading.Thread(target=_watch_driver, args=(driver,), daemon=True, name="campaign-driver-watch").start()
    try:  # warm: what every configuration needs, before the first task arrives
        for module in PRELOAD:
            importlib.import_module(module)
        run_chunk([], imports)
    except Exception:
        pass  # a failing import is reported by the first task that needs it, as that task's error


def _ready() -> int:
    return os.getpid()


def start_pool(workers: int, imports: Sequence[str]) -> ProcessPoolExecutor:
    """A pool of ``workers`` processes (module docstring: forked from the fork server, or spawned), started
    now: each warms up while the caller goes on (the driver times its sample meanwhile)."""
    ctx: BaseContext
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(list(PRELOAD))
    else:
        ctx = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init,
                               initargs=(os.getpid(), tuple(imports)))
    for _ in range(workers):  # a spawning pool starts a process per task waiting for one
        pool.submit(_ready)
    return pool


def run_pool(tasks: Sequence[Task], workers: int, imports: Sequence[str], sink: Sink,
             pool: ProcessPoolExecutor | None = None) -> None:
    """Run ``tasks`` on a pool of ``workers`` processes (``pool``, from ``start_pool``, or a new one), handing
    each task's rows to ``sink`` as it completes. The pool is shut down when it returns."""
    queue: deque[tuple[Task, bool]] = deque((t, False) for t in tasks)
    started = pool
    while queue:
        pool, started = started or start_pool(workers, imports), None
        inflight: dict[Future[Any], tuple[Task, bool]] = {}
        broken: list[tuple[Task, bool]] = []
        try:
            while (queue or inflight) and not broken:
                while queue and len(inflight) < 2 * workers:
                    task, alone = queue.popleft()
                    inflight[pool.submit(run_chunk, task, tuple(imports))] = (task, alone)
                done, _ = wait(inflight, return_when=FIRST_COMPLETED)
                for f in done:
                    task, alone = inflight.pop(f)
                    try:
                        rows = f.result()
                    except BrokenProcessPool:
                        broken.append((task, alone))
                        continue
                    except Exception as e:  # the task could not run at all (an import it needs failed)
                        rows = error_rows(task, f"{type(e).__name__}: {e}")
                    sink(rows)
        finally:
            if broken:
                broken += list(inflight.values())  # a broken pool fails everything it held
            pool.shutdown(wait=not broken, cancel_futures=True)
        for task, alone in reversed(broken):
            if alone:
                sink(error_rows(task, DIED))
            else:  # once more, one configuration a task, to find the one that kills its worker
                queue.extendleft(([item], True) for item in reversed(task))
    if started is not None:  # there was nothing to run on it
        started.shutdown(wait=True)


def run_dask(tasks: Sequence[Task], imports: Sequence[str], sink: Sink, *, address: str | None = None,
             client: Any = None) -> None:
    """Run ``tasks`` on the Dask cluster whose scheduler is at ``address`` (or through ``client``), handing
    each task's rows to ``sink`` as it completes. A task that Dask gives up on (a worker lost three times:
    ``KilledWorker``) is stored as errors."""
    from distributed import Client, as_completed

    own = client is None
    if own:
        try:
            client = Client(address, timeout="30s")
        except OSError as e:
            from algorithms.errors import UsageError

            raise UsageError(f"--scheduler {address}: cannot connect: {e}") from None
    futures: dict[Any, Task] = {}
    try:
        for f, task in zip(client.map(run_chunk, list(tasks), imports=tuple(imports), pure=False), tasks,
                           strict=True):
            futures[f] = task
        for f in as_completed(list(futures)):
            task = futures.pop(f)
            try:
                rows = f.result()
            except Exception as e:
                rows = error_rows(task, f"{type(e).__name__}: {e}")
            sink(rows)
    finally:
        if futures:
            client.cancel(list(futures))
        if own:
            client.close()


def dask_threads(address: str | None = None, client: Any = None) -> int:
    """The worker threads of a Dask cluster (what a campaign's estimate divides by)."""
    from distributed import Client

    own = client is None
    c = Client(address, timeout="30s") if own else client
    try:
        return max(1, sum(c.nthreads().values()))
    finally:
        if own:
            c.close()
