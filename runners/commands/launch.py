"""Process-group setup: under torchrun (from its environment) or locally with ``spawn``.

``init()`` reads torchrun's ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR`` and ``MASTER_PORT``; with nccl each process uses the GPU of
its ``LOCAL_RANK``. ``spawn(fn, nprocs, *args)`` starts ``nprocs`` local
processes on a free port (from a fork server with torch imported, where the
platform has one), runs ``fn(rank, *args)`` in each inside an
initialised group, destroys the group at the end of each process (a gloo
group alive at interpreter exit can abort it), and returns every rank's
return value, or raises ``SpawnError`` with every rank's outcome.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import socket
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from algorithms.errors import CollschedError
from sim.guards import ResourceError, memory_budget

__all__ = ["ENV_START", "RANK_BYTES", "Outcome", "SpawnError", "check_ranks", "free_port", "init", "spawn",
           "start_method"]

RANK_BYTES = 180e6
"""Memory of one local rank: the interpreter with torch and a gloo group (175 MB RSS measured after an all_reduce
on a rank started by ``spawn``, torch 2.13.0+cpu)."""


def check_ranks(nprocs: int, per_rank_bytes: float = 0.0, what: str = "--nproc") -> None:
    """Refuse ``nprocs`` local ranks that would not fit in ``sim.guards.memory_budget()``: each needs
    ``RANK_BYTES`` plus ``per_rank_bytes`` (its buffers), with the estimate and how many would fit."""
    each = RANK_BYTES + per_rank_bytes
    budget = memory_budget()
    if nprocs * each > budget:
        raise ResourceError(f"{what} {nprocs}: {nprocs} local ranks need about {nprocs * each / 1e9:.3g} GB "
                            f"({each / 1e6:.0f} MB each: the interpreter with torch and gloo"
                            f"{', and its buffers' if per_rank_bytes else ''}); this machine has "
                            f"{budget / 1e9:.3g} GB to spare (COLLSCHED_MEMORY overrides): about "
                            f"{int(budget // each)} would fit")


class SpawnError(CollschedError, RuntimeError):
    """A spawned rank raised, died or did not finish; ``outcomes`` holds every rank's."""

    def __init__(self, message: str, outcomes: list[Outcome]) -> None:
        super().__init__(message)
        self.outcomes = outcomes


@dataclass(frozen=True)
class Outcome:
    """What one spawned rank did: returned ``value``, raised ``error`` (text), or exited with ``exitcode``."""

    rank: int
    ok: bool
    value: Any = None
    error: str | None = None
    exitcode: int | None = None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def init(backend: str | None = None, *, timeout: float | None = None) -> tuple[int, int]:
    """Initialise the default process group from torchrun's environment; returns (rank, world size).

    ``backend`` defaults to nccl when CUDA is available and gloo otherwise.
    With nccl, the current CUDA device becomes ``LOCAL_RANK``'s and is passed
    as ``device_id``: torch then makes the group's nccl communicator at once
    (eager initialisation), so every later operation, point-to-point included,
    runs on it. With collsched on a machine with a GPU per local rank, the same
    ``device_id`` makes collsched's inner nccl group connect eagerly. Already
    initialised: returns the current rank and size.
    """
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    missing = [v for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if v not in os.environ]
    if missing:
        raise CollschedError(f"not under torchrun: environment lacks {', '.join(missing)} "
                             "(launch with `torchrun --nproc_per_node=N` or use runners.commands.launch.spawn)")
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
    kwargs: dict[str, Any] = {}
    if timeout is not None:
        kwargs["timeout"] = timedelta(seconds=timeout)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"]))
    gpu_per_rank = torch.cuda.is_available() and local_world <= torch.cuda.device_count()
    if "nccl" in backend or ("collsched" in backend and gpu_per_rank and dist.is_nccl_available()):
        torch.cuda.set_device(local_rank)
        kwargs["device_id"] = torch.device("cuda", local_rank)
    dist.init_process_group(backend, **kwargs)
    return dist.get_rank(), dist.get_world_size()


ENV_START = "COLLSCHED_START_METHOD"
# Imported once by the fork server, so that a rank starts without importing them (seconds each, on few cores).
PRELOAD = ("torch", "torch.distributed")


def start_method() -> str:
    """How ranks start: ``forkserver`` with torch preloaded where the platform has it (each rank is forked from
    one clean, single-threaded server process, so it starts in a fraction of a second instead of importing
    torch anew), else ``spawn``; ``COLLSCHED_START_METHOD`` chooses. A rank of a fork server does not see the
    caller's environment by itself: pass ``dict(os.environ)`` along (``spawn`` does)."""
    methods = mp.get_all_start_methods()
    method = os.environ.get(ENV_START) or ("forkserver" if "forkserver" in methods else "spawn")
    if method not in ("forkserver", "spawn") or method not in methods:
        raise CollschedError(f"{ENV_START}={method!r}: expected forkserver or spawn (this platform has "
                             f"{', '.join(m for m in methods if m in ('forkserver', 'spawn'))})")
    if method == "forkserver":
        mp.get_context(method).set_forkserver_preload(list(PRELOAD))
    return method


def _child(rank: int, nprocs: int, port: int, backend: str, timeout: float | None, fn: Callable[..., Any],
           args: tuple[Any, ...], results: Any, env: dict[str, str]) -> None:
    # The caller's environment as it is now (a fork server keeps the one it started with), then the rank's.
    os.environ.clear()
    os.environ.update(env)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(nprocs), LOCAL_WORLD_SIZE=str(nprocs))
    import torch
    import torch.distributed as dist

    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)  # as torchrun does for several processes per node
    try:
        init(backend, timeout=timeout)
        _started(dist, nprocs, timeout)
        value = fn(rank, *args)
        results.put((rank, True, value, None))
    except BaseException as e:  # report everything, including KeyboardInterrupt, to the parent
        text = "".join(traceback.format_exception_only(type(e), e)).strip()
        results.put((rank, False, None, f"{text}\n{traceback.format_exc()}"))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _started(dist: Any, nprocs: int, timeout: float | None) -> None:
    """Wait until every rank's group is made: a rank whose ``fn`` returns at once must not destroy its group
    (closing its connections) while a peer is still connecting to it (gloo's connectFullMesh then fails,
    "Connection closed by peer"). Through the store, so no collective runs before ``fn``; up to the group's
    timeout (a rank whose group failed fails the job anyway)."""
    store = dist.distributed_c10d._get_default_store()
    store.add("collsched/launch/started", 1)
    end = time.monotonic() + (timeout or dist.default_pg_timeout.total_seconds())
    while store.add("collsched/launch/started", 0) < nprocs and time.monotonic() < end:
        time.sleep(0.01)


def spawn(fn: Callable[..., Any], nprocs: int, *args: Any, backend: str = "gloo", timeout: float = 300.0,
          group_timeout: float | None = None) -> list[Any]:
    """Run ``fn(rank, *args)`` in ``nprocs`` fresh processes with a process group; their return values.

    The processes start from a fork server with torch imported (``start_method``; ``COLLSCHED_START_METHOD=spawn``
    starts fresh interpreters instead) and see this process's environment as it is at the call.

    ``fn`` and its arguments must be picklable (a module-level function).
    ``timeout`` bounds the whole job: ranks still running then are killed.
    ``group_timeout`` is the process group's own timeout (torch's default when None).
    Raises ``SpawnError`` when any rank raises, dies or times out.
    """
    if nprocs < 1:
        raise CollschedError(f"nprocs must be >= 1, got {nprocs}")
    check_ranks(nprocs, what="nprocs")
    ctx: Any = mp.get_context(start_method())
    results = ctx.Queue()
    port = free_port()
    env = dict(os.environ)
    procs = [ctx.Process(target=_child, args=(r, nprocs, port, backend, group_timeout, fn, args, results, env),
                         daemon=False) for r in range(nprocs)]
    for proc in procs:
        proc.start()
    got: dict[int, tuple[bool, Any, str | None]] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(got) < nprocs and time.monotonic() < deadline:
            try:
                r, ok, value, err = results.get(timeout=0.2)
                got[r] = (ok, value, err)
            except queue.Empty:
                if all(not p.is_alive() for p in procs) and results.empty():
                    break
    finally:
        for proc in procs:
            proc.join(timeout=max(0.0, min(10.0, deadline - time.monotonic())) if len(got) == nprocs else 0.5)
            if proc.is_alive():
                proc.kill()
                proc.join()
    outcomes = []
    for r, proc in enumerate(procs):
        if r in got:
            ok, value, err = got[r]
            outcomes.append(Outcome(r, ok, value, err, proc.exitcode))
        else:
            why = "did not finish in time (killed)" if proc.exitcode in (None, -9) and time.monotonic() >= deadline \
                else f"exited with code {proc.exitcode}"
            outcomes.append(Outcome(r, False, None, f"rank {r} {why}", proc.exitcode))
    failed = [o for o in outcomes if not o.ok]
    if failed:
        first = failed[0]
        summary = (first.error or "").splitlines()[0] if first.error else ""
        raise SpawnError(f"{len(failed)} of {nprocs} ranks failed; rank {first.rank}: {summary}", outcomes)
    return [o.value for o in outcomes]
