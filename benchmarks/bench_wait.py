"""How the gloo runner waits for a point-to-point operation, side by side: the slow mode of blocking waits.

    python benchmarks/bench_wait.py [--nproc 2 4] [--sizes 1KiB,1MiB] [--iters 100] [--launches 3]

On a host with fewer cores than runnable threads (each rank has its main
thread and gloo's I/O threads), a run's time is bimodal: most blocking
``work.wait()`` calls return within ~100 us of the data arriving, some a few
milliseconds late, when the woken thread waits for a core. This script first
probes whether a gloo ``isend``/``irecv`` work can be polled at all
(``is_completed()`` before any ``wait()``, for 0.2 s after the peer's data is
there), then times ``runners.execution.runner.run`` of a ring all-reduce with each way
of waiting, the variants alternating iteration by iteration after a barrier
in every launch (so all see the same load):

- ``block``: the runner as it is (``work.wait(timeout)`` on the caller's thread);
- ``waiter``: one helper thread per rank blocks in ``work.wait()``, the
  caller spins on a flag with ``os.sched_yield()`` (so its core never idles);
- ``slice``: ``block``, with every thread of every rank given a 100 us
  EEVDF slice (``sched_setattr`` with ``sched_runtime``, Linux 6.12 and
  later), so that a woken thread preempts a running one sooner.

Per launch and variant it prints the median, 90th percentile and p90/median of
the slowest rank's time, then the median over launches. Prints a table;
asserts nothing.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import queue
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

VARIANTS = ("block", "waiter", "slice")


class _SchedAttr(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("sched_policy", ctypes.c_uint32), ("sched_flags", ctypes.c_uint64),
                ("sched_nice", ctypes.c_int32), ("sched_priority", ctypes.c_uint32),
                ("sched_runtime", ctypes.c_uint64), ("sched_deadline", ctypes.c_uint64),
                ("sched_period", ctypes.c_uint64)]


def _set_slice(ns: int) -> bool:
    """Every thread of this process gets an EEVDF slice of ``ns`` (0: the default); False if refused."""
    if sys.platform != "linux" or os.uname().machine != "x86_64":
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    ok = True
    for tid in os.listdir("/proc/self/task"):
        attr = _SchedAttr(size=ctypes.sizeof(_SchedAttr), sched_policy=0, sched_runtime=ns)
        ok &= libc.syscall(314, int(tid), ctypes.byref(attr), 0) == 0  # SYS_sched_setattr on x86_64
    return ok


class _Waiter:
    """A helper thread that blocks in ``work.wait()``; the caller spins with sched_yield until it is done."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[tuple[Any, int]] = queue.SimpleQueue()
        self.done = 0
        self.error: BaseException | None = None
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        while True:
            work, n = self.jobs.get()
            try:
                work.wait()
            except BaseException as e:  # handed to the caller
                self.error = e
            self.done = n

    def wait(self, work: Any, n: int) -> None:
        self.jobs.put((work, n))
        while self.done != n:
            os.sched_yield()
        if self.error is not None:
            raise self.error


def _probe(rank: int) -> bool:
    """Whether a gloo point-to-point work reports completion before wait() (rank 1's receive, 0.2 s after
    rank 0's send completed)."""
    import torch
    import torch.distributed as dist

    x = torch.zeros(256)
    if rank == 0:
        send = dist.isend(x, 1)
        assert send is not None
        send.wait()
    seen = False
    if rank == 1:
        w = dist.irecv(x, 0)
        assert w is not None
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 0.2 and not seen:
            seen = w.is_completed()
        w.wait()
    flag = torch.tensor([int(seen)])
    dist.broadcast(flag, 1)
    return bool(flag.item())


def job(rank: int, sizes: list[int], iters: int) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    import runners.execution.executors as ex
    from algorithms import registry
    from runners.execution.runner import run

    polled = _probe(rank)
    p = dist.get_world_size()
    sched = registry.build("allreduce", "ring", p)
    block = ex.Context.wait
    waiter = _Waiter()
    count = [0]

    def waiter_wait(self: Any, it: Any, work: Any) -> None:
        count[0] += 1
        waiter.wait(work, count[0])

    slice_ok = _set_slice(100_000)
    _set_slice(0)

    def use(variant: str) -> None:
        ex.Context.wait = waiter_wait if variant == "waiter" else block  # type: ignore[method-assign]
        _set_slice(100_000 if variant == "slice" else 0)

    out: dict[str, Any] = {"polled": polled, "slice": slice_ok, "rows": {}}
    try:
        for size in sizes:
            x = torch.zeros(max(size // 4, 1))
            times: dict[str, list[float]] = {v: [] for v in VARIANTS}
            for v in VARIANTS:
                use(v)
                for _ in range(3):
                    run(sched, x, check=False)
            for i in range(iters):
                for v in VARIANTS if i % 2 == 0 else VARIANTS[::-1]:
                    use(v)
                    dist.barrier()
                    t0 = time.perf_counter()
                    run(sched, x, check=False)
                    times[v].append(time.perf_counter() - t0)
            t = torch.tensor([times[v] for v in VARIANTS], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            out["rows"][size] = {v: t[k].tolist() for k, v in enumerate(VARIANTS)}
    finally:
        use("block")
    return out


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def main() -> int:
    from runners.commands.launch import spawn
    from sim import units

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nproc", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--sizes", default="1KiB,1MiB")
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--launches", type=int, default=3)
    args = ap.parse_args()
    sizes = [int(s) for s in units.parse_sizes(args.sizes)]
    print(f"# {__doc__.splitlines()[0]}")
    print(f"#{'ranks':>5} {'size':>8} {'variant':>7} {'launch':>6} {'median':>9} {'p90':>9} {'p90/med':>7}")
    print(f"#{'':>5} {'(B)':>8} {'':>7} {'':>6} {'(ms)':>9} {'(ms)':>9} {'':>7}")
    for p in args.nproc:
        launches = [spawn(job, p, sizes, args.iters, timeout=1800)[0] for _ in range(args.launches)]
        print(f"# {p} ranks: is_completed() true before wait(): {launches[0]['polled']}; "
              f"100 us slices accepted: {launches[0]['slice']}")
        for size in sizes:
            for v in VARIANTS:
                meds, p90s = [], []
                for k, out in enumerate(launches):
                    ts = [x * 1e3 for x in out["rows"][size][v]]
                    meds.append(statistics.median(ts))
                    p90s.append(_pct(ts, 0.9))
                    print(f" {p:>5} {size:>8} {v:>7} {k:>6} {meds[-1]:>9.3f} {p90s[-1]:>9.3f} "
                          f"{p90s[-1] / meds[-1]:>7.2f}")
                print(f" {p:>5} {size:>8} {v:>7} {'median':>6} {statistics.median(meds):>9.3f} "
                      f"{statistics.median(p90s):>9.3f} {'':>7}  (launch medians {min(meds):.3f}-{max(meds):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
