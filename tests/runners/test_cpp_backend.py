"""The C++ ``collsched`` backend (runners/csrc/backend.h, runners.backend.cpp): GIL-free hits, the signature cache,
issue order across its two paths, errors raised again at every wait.

Its results against gloo are checked by tests/runners/test_backend.py, whose cases run on it (the native engine)
and on the Python backend (the Python engine) in turns.
"""

from __future__ import annotations

import collections
import functools
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from runners.commands.launch import spawn
from runners.execution import native
from tests.runners import limits

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())

pytestmark = pytest.mark.multiprocess


def _finishes_while_python_spins(rank: int, group: dist.ProcessGroup, cap: float, key: str) -> bool:
    """Rank 0: an async all_reduce in flight (rank 1 joins once rank 0 is about to spin, told by a key in the
    store) while this thread spins in pure Python holding the GIL (switch interval raised); whether its Work
    completed, with the result, during the spinning (``cap`` only bounds the control's spinning). Setting the
    key lets the GIL go for a moment: a Work that completed before the spinning began tells nothing, and the
    attempt is made again (up to 5 times).

    Under the Python backend the native executor moves the data without the GIL too, but its worker thread
    needs the GIL to complete the Work: the Work is the difference."""
    # 512 KiB: above COLLSCHED_INLINE_BYTES, and async: the call returns at once and the worker thread runs it.
    n = 1 << 17
    store = dist.distributed_c10d._get_default_store()
    dist.all_reduce(torch.ones(n), group=group)  # the signature is prepared: the next call is a cache hit
    for attempt in range(5):
        dist.barrier()
        x = torch.full((n,), float(rank + 1))
        at = f"{key}/{attempt}"
        if rank == 1:
            store.wait([f"{at}/join"], timedelta(seconds=limits.JOB))
            dist.all_reduce(x, group=group)
            store.wait([f"{at}/told"], timedelta(seconds=limits.JOB))
            if store.get(f"{at}/told") == b"done":
                return True
            continue
        work = dist.all_reduce(x, group=group, async_op=True)
        view = x.numpy()  # numpy indexing keeps the GIL
        done = work.is_completed
        interval = sys.getswitchinterval()
        sys.setswitchinterval(1000.0)
        try:
            store.set(f"{at}/join", "1")  # rank 1 joins now
            early = done()
            end = time.monotonic() + cap
            finished = False
            while not early and time.monotonic() < end:
                if done() and view[0] == 3.0:
                    finished = True
                    break
        finally:
            sys.setswitchinterval(interval)
        work.wait()
        store.set(f"{at}/told", "again" if early and attempt < 4 else "done")
        if not early or attempt == 4:
            return finished
    raise AssertionError("unreachable")


def backend_job(rank: int) -> dict[str, object]:
    from runners.backend import cpp as cpp_backend

    got: dict[str, object] = {}
    calls: list[int] = []
    prepare = cpp_backend.Core.prepare

    def counted(self: cpp_backend.Core, *args: object) -> object:
        calls.append(int(args[0]))  # type: ignore[call-overload]
        return prepare(self, *args)  # type: ignore[arg-type]

    cpp_backend.Core.prepare = counted  # type: ignore[method-assign]
    os.environ[cpp_backend.ENV_BACKEND] = "cpp"
    g = dist.new_group(backend="collsched")
    got["backend"] = type(g._get_backend(torch.device("cpu"))).__name__
    # Five all-reduces of one signature, one of another: two questions to Python. Closed form: sum of ranks + i.
    sums = []
    for i in range(5):
        x = torch.full((1000,), float(rank + i))
        dist.all_reduce(x, group=g)
        sums.append(x[0].item())
    y = torch.arange(10, dtype=torch.int64) * (rank + 1)
    dist.all_reduce(y, group=g, op=dist.ReduceOp.MAX)
    got["sums"], got["max"], got["prepared"] = sums, y.tolist(), list(calls)
    # Issue order across the two paths: native, Python (an all_gather into a list), native; waited in reverse.
    a, b = torch.full((1000,), 1.0), torch.full((1000,), 2.0)
    outs = [torch.empty(3) for _ in range(2)]
    works = [dist.all_reduce(a, group=g, async_op=True),
             dist.all_gather(outs, torch.full((3,), float(rank)), group=g, async_op=True),
             dist.all_reduce(b, group=g, async_op=True)]
    order: list[int] = []
    callbacks = []
    for i, w in enumerate(works):
        assert w is not None
        callbacks.append(w.get_future().then(lambda _f, i=i: order.append(i)))
    for w in reversed(works):
        assert w is not None
        w.wait()
    torch.futures.wait_all(callbacks)  # they run on the worker thread: every one has now
    got["order"], got["mixed"] = order, [a[0].item(), [o[0].item() for o in outs], b[0].item()]
    # A failed collective raises its own error type at every wait(), then the group goes on.
    bad = dist.all_reduce(torch.ones(4), group=g, op=dist.ReduceOp.BAND, async_op=True)
    assert bad is not None
    raised = []
    for _ in range(2):
        try:
            bad.wait()
        except Exception as e:  # the runner's InputError, not a RuntimeError wrapping it
            raised.append(type(e).__name__)
    got["raised"] = raised
    backend = g._get_backend(torch.device("cpu"))
    got["signatures"] = native.load().native_signatures(backend)
    # A small synchronous collective (up to COLLSCHED_INLINE_BYTES) runs in the calling thread once the queue
    # has drained; an async one goes to the worker (it returns at once, and wait(timeout) holds); never ahead
    # of one issued before it (16 MiB, on the worker).
    big, small = torch.ones(1 << 22), torch.ones(1024)
    dist.all_reduce(big, group=g)
    dist.all_reduce(small, group=g)  # both signatures prepared
    inline = native.load().cache_counts(backend)[3]
    dist.all_reduce(small, group=g)
    after_sync = native.load().cache_counts(backend)[3]
    alone = dist.all_reduce(small, group=g, async_op=True)
    assert alone is not None
    alone.wait()
    got["inline"] = (after_sync - inline, native.load().cache_counts(backend)[3] - after_sync)
    big.fill_(rank + 1.0)
    small.fill_(rank + 1.0)
    wb = dist.all_reduce(big, group=g, async_op=True)
    ws = dist.all_reduce(small, group=g, async_op=True)
    assert wb is not None and ws is not None
    got["behind"] = (wb.is_completed(), ws.is_completed())
    ws.wait()
    wb.wait()
    got["behind_values"] = (big[0].item(), big[-1].item(), small[0].item())
    # A collective in flight finishes while Python holds the GIL, on the C++ backend only (the control: Python's).
    got["gil_cpp"] = _finishes_while_python_spins(rank, g, limits.BASE / 20, "spin/cpp")
    os.environ[cpp_backend.ENV_BACKEND] = "python"
    control = dist.new_group(backend="collsched")
    got["gil_python"] = _finishes_while_python_spins(rank, control, limits.BASE / 20, "spin/python")
    dist.destroy_process_group(g)
    dist.destroy_process_group(control)
    return got


@pytest.mark.slow
def test_the_cpp_backend_caches_signatures_keeps_order_and_needs_no_gil() -> None:
    if not native.available():
        pytest.skip(f"native extension not built: {native.build_note()}")
    got = spawn(backend_job, 2, timeout=limits.JOB)
    for rank, r in enumerate(got):
        assert r["backend"] == "Backend", r  # a C++ c10d::Backend, not the Python ProcessGroup
        assert r["sums"] == [float(0 + 1 + 2 * i) for i in range(5)], r
        assert r["max"] == [2 * k for k in range(10)], r
        assert r["prepared"] == [0, 0], r  # one question per signature (KINDS[0]: allreduce), then hits
        assert r["order"] == [0, 1, 2], r
        assert r["mixed"] == [2.0, [0.0, 1.0], 4.0], r
        assert r["raised"] == ["InputError", "InputError"], r
        assert r["signatures"] == 2, r  # BAND on floats is refused in Python: no native signature for it
        assert r["inline"] == (1, 0), r  # the synchronous call ran in this thread, the async one did not
        assert r["behind"] != (False, True), r  # the small call did not overtake the big one
        assert r["behind_values"] == (3.0, 3.0, 3.0), r
        if rank == 0:
            assert (r["gil_cpp"], r["gil_python"]) == (True, False), r


# What the first call of a signature should run once each, and a repeat not at all: (module, function) pairs,
# counted wherever runners' modules hold them (imported by name or called through the module).
_FIRST_CALL_STEPS = {
    "policy choice": ("runners.backend.policy", "Policy.choose"),
    "rank_plan": ("runners.execution.plan", "rank_plan"),
    "local_check": ("runners.execution.arguments", "local_check"),
    "metadata": ("runners.execution.arguments", "metadata"),
    "exchange": ("runners.execution.native", "exchange"),
    "exchange (all-gather)": ("runners.execution.arguments", "exchange"),
    "check_table": ("runners.execution.arguments", "check_table"),
    "executor entered from Python": ("runners.execution.native", "execute"),
}


def _count_everywhere(counts: collections.Counter[str], name: str, module: str, attr: str) -> None:
    import importlib

    owner: Any = importlib.import_module(module)
    parts = attr.split(".")
    for part in parts[:-1]:
        owner = getattr(owner, part)
    original = getattr(owner, parts[-1])

    @functools.wraps(original)
    def counted(*args: Any, **kwargs: Any) -> Any:
        counts[name] += 1
        return original(*args, **kwargs)

    if len(parts) > 1:  # a method: patched on its class
        setattr(owner, parts[-1], counted)
        return
    for mod in list(sys.modules.values()):
        if getattr(mod, "__name__", "").startswith("runners"):
            for key, value in list(vars(mod).items()):
                if value is original:
                    setattr(mod, key, counted)


def first_call_job(rank: int) -> list[dict[str, int]]:
    """Rank r: per call (a first all_reduce of a signature, the same again, a second signature's first), how
    many times each step of _FIRST_CALL_STEPS ran and which Core methods C++ called (``from C++: name``)."""
    from runners.backend import cpp as cpp_backend

    counts: collections.Counter[str] = collections.Counter()
    for name, (module, attr) in _FIRST_CALL_STEPS.items():
        _count_everywhere(counts, name, module, attr)
    for method in ("prepare", "serve", "native_failure"):
        _count_everywhere(counts, f"from C++: {method}", "runners.backend.cpp", f"Core.{method}")
    os.environ[cpp_backend.ENV_BACKEND] = "cpp"
    g = dist.new_group(backend="collsched")
    seen = []
    for numel in (1000, 1000, 4000):
        counts.clear()
        x = torch.full((numel,), float(rank + 1))
        dist.all_reduce(x, group=g)
        assert x.eq(3.0).all(), x
        seen.append(dict(counts))
    dist.destroy_process_group(g)
    return seen


def test_the_first_call_of_a_signature_prepares_once_and_crosses_twice() -> None:
    """Issue 31: policy, plan and each argument check run once on a signature's first call and not on a repeat;
    C++ calls Python once (prepare) and runs the executor itself: the walk crosses twice (into the C++ backend,
    into prepare)."""
    if not native.available():
        pytest.skip(f"native extension not built: {native.build_note()}")
    got = spawn(first_call_job, 2, timeout=limits.JOB)
    once = {"policy choice": 1, "rank_plan": 1, "local_check": 1, "metadata": 1, "exchange": 1, "check_table": 1,
            "from C++: prepare": 1}
    for r in got:
        first, repeat, other = r
        assert first == once, first
        assert repeat == {}, repeat
        assert other == once, other


def test_inline_bytes_reads_a_size_and_names_a_bad_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from runners.backend import cpp as cpp_backend

    monkeypatch.delenv(cpp_backend.ENV_INLINE, raising=False)
    assert cpp_backend.inline_bytes() == 256 * 1024
    for text, want in (("0", 0), ("4KiB", 4096), ("1MiB", 1 << 20)):
        monkeypatch.setenv(cpp_backend.ENV_INLINE, text)
        assert cpp_backend.inline_bytes() == want
    for bad in ("-1", "lots"):
        monkeypatch.setenv(cpp_backend.ENV_INLINE, bad)
        with pytest.raises(ValueError, match="COLLSCHED_INLINE_BYTES"):
            cpp_backend.inline_bytes()


def cache_job(rank: int, sizes: int, limit: str | None) -> dict[str, object]:
    """``sizes`` all-reduces of distinct sizes, then the first 20 again; what both sides of the signature cache
    hold afterwards, and whether every result was right (with ``limit``: ``COLLSCHED_SIGNATURE_CACHE``)."""
    from runners.backend import cpp as cpp_backend

    os.environ[cpp_backend.ENV_BACKEND] = "cpp"
    if limit is not None:
        os.environ["COLLSCHED_SIGNATURE_CACHE"] = limit
    g = dist.new_group(backend="collsched")
    backend = g._get_backend(torch.device("cpu"))
    core = native.load().core_of(backend)
    wrong = []
    for n in [*range(1, sizes + 1), *range(1, 21)]:
        x = torch.full((n,), float(rank + 1))
        dist.all_reduce(x, group=g)
        if not x.eq(3.0).all():
            wrong.append(n)
    got = {"wrong": wrong, "python": len(core._prepared), "cpp": native.load().native_signatures(backend)}
    dist.destroy_process_group(g)
    return got


def test_the_signature_cache_is_bounded_on_both_sides() -> None:
    """Issue 34: Core._prepared grew by one plan per signature forever (20,000 sizes: +75 MiB) while C++
    emptied its cache at 256; both now keep at most COLLSCHED_SIGNATURE_CACHE (default 256), and results stay
    right across the evictions."""
    if not native.available():
        pytest.skip(f"native extension not built: {native.build_note()}")
    for r in spawn(cache_job, 2, 300, None, timeout=limits.JOB):
        assert r["wrong"] == [], r
        assert 0 < r["cpp"] <= 256 and 0 < r["python"] <= 256, r  # before: python 320
    for r in spawn(cache_job, 2, 30, "8", timeout=limits.JOB):
        assert r["wrong"] == [], r
        assert 0 < r["cpp"] <= 8 and 0 < r["python"] <= 8, r


def test_signature_cache_reads_a_positive_integer(monkeypatch: pytest.MonkeyPatch) -> None:
    from runners.backend import cpp as cpp_backend
    from runners.errors import InputError

    monkeypatch.delenv("COLLSCHED_SIGNATURE_CACHE", raising=False)
    assert cpp_backend.signature_cache() == cpp_backend.SIGNATURE_CACHE == 256
    monkeypatch.setenv("COLLSCHED_SIGNATURE_CACHE", "32")
    assert cpp_backend.signature_cache() == 32
    for bad in ("0", "-1", "many"):
        monkeypatch.setenv("COLLSCHED_SIGNATURE_CACHE", bad)
        with pytest.raises(InputError, match="COLLSCHED_SIGNATURE_CACHE must be a positive integer"):
            cpp_backend.signature_cache()
