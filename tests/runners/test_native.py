"""The native executor (runners.execution.native, runners/csrc/executor.cpp): GIL, choice and build fallback.

Correctness against torch runs in tests/runners/test_runner.py, whose cases take turns between the
Python and the native engine, and whose failure tests run on both.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from algorithms import registry
from runners.commands.launch import spawn
from runners.execution import native
from runners.execution.runner import run
from tests.runners import limits

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())


def _in_the_executor(thread: threading.Thread, engine: str) -> bool:
    """Whether ``thread`` is blocked in the native executor's C++ (its Python frame at the call into it, which
    releases the GIL: nothing between reaching that line and the call gives the GIL up); for the Python engine
    whether it is in the executor (the control: its collective cannot finish while the GIL is held)."""
    frame = sys._current_frames().get(thread.ident or -1)
    lines, first = inspect.getsourcelines(native.execute)
    call = first + next(i for i, line in enumerate(lines) if "native.compiled.run(" in line)
    while frame is not None:
        if engine == "native" and frame.f_code is native.execute.__code__ and frame.f_lineno == call:
            return True
        if engine == "python" and frame.f_code.co_filename.endswith("executors.py"):
            return True
        frame = frame.f_back
    return False


def gil_job(rank: int, engines: list[str], cap: float) -> list[tuple[str, bool]]:
    """Rank 0 runs an all-reduce on a thread while its main thread spins in pure Python, never releasing the
    GIL (switch interval raised); whether the collective completed while the spinning went on, per engine.

    Rank 1 joins each run only once rank 0's thread is blocked in the run and its main thread is about to spin
    (a key in the store says so), so the collective can only finish if the executor needs no GIL to take the
    data and reduce it. Setting the key releases the GIL for a moment: a run that finished before the spinning
    began tells nothing, and is tried again (up to 5 times), as is a native run that did not finish. Nothing
    waits on time: ``cap`` only bounds the spinning of the control."""
    sched = registry.get("allreduce", "recursive_doubling").build(2)
    store = dist.distributed_c10d._get_default_store()
    seen = []
    for engine in engines:
        warm = torch.ones(64)
        run(sched, warm, check=False, engine=engine)  # plans, buffers and the extension are ready
        for attempt in range(5):
            dist.barrier()
            x = torch.full((64,), float(rank + 1))
            key = f"gil-job/{engine}/{attempt}"
            if rank == 1:
                store.wait([f"{key}/join"], timedelta(seconds=limits.JOB))
                run(sched, x, check=False, engine=engine, timeout=limits.RUN)
                store.wait([f"{key}/told"], timedelta(seconds=limits.JOB))
                if store.get(f"{key}/told") == b"done":
                    seen.append((engine, True))
                    break
                continue
            worker = threading.Thread(target=run, args=(sched, x), kwargs={"check": False, "engine": engine,
                                                                           "timeout": limits.RUN})
            worker.start()
            # At the call's line for 10 looks 20 ms apart, the GIL free between them: inside the call, not
            # evaluating its arguments (a thread caught there would sit out the spinning below before the call).
            held = 0
            while held < 10:
                held = held + 1 if _in_the_executor(worker, engine) else 0
                time.sleep(0.02)
            view = x.numpy()  # numpy indexing keeps the GIL (torch's item() releases it)
            interval = sys.getswitchinterval()
            sys.setswitchinterval(1000.0)
            try:
                store.set(f"{key}/join", "1")  # rank 1 joins now (the GIL is let go while the store answers)
                early = view[0] == 3.0  # finished before the spinning began: this attempt cannot tell
                end = time.monotonic() + cap
                finished = False
                while not early and time.monotonic() < end:  # pure Python: this thread keeps the GIL
                    if view[0] == 3.0:
                        finished = True
                        break
            finally:
                sys.setswitchinterval(interval)
            worker.join()
            # A native run that did not finish is tried again too: the claim is that it can finish, and one
            # attempt in five is enough to show it (the Python engine never can).
            again = (early or (engine == "native" and not finished)) and attempt < 4
            store.set(f"{key}/told", "again" if again else "done")
            if not again:
                seen.append((engine, finished))
                break
    return seen


@pytest.mark.multiprocess
@pytest.mark.slow
def test_the_native_executor_finishes_a_collective_while_python_holds_the_gil() -> None:
    if not native.available():
        pytest.skip(f"native executor not built: {native.build_note()}")
    # The Python engine is the control: the same collective cannot finish while the GIL is held.
    got = spawn(gil_job, 2, ["native", "python"], limits.BASE / 20, timeout=limits.JOB)
    assert got[0] == [("native", True), ("python", False)], got


@pytest.mark.multiprocess  # native.available() may build the extension (ninja, g++)
def test_collsched_executor_chooses_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(native.ENV_EXECUTOR, "python")
    assert native.chosen() == "python"
    monkeypatch.setenv(native.ENV_EXECUTOR, "fast")
    with pytest.raises(ValueError, match="COLLSCHED_EXECUTOR must be 'native' or 'python', got 'fast'"):
        native.chosen()
    monkeypatch.setenv(native.ENV_EXECUTOR, "native")
    assert native.chosen() == ("native" if native.available() else "python")
    monkeypatch.delenv(native.ENV_EXECUTOR)
    assert native.chosen() == ("native" if native.available() else "python")


@pytest.mark.multiprocess
def test_no_compiler_means_one_line_and_the_python_executor(tmp_path: Path) -> None:
    # A fresh cache and no compiler on PATH: the build cannot start; one line says why and runs go on in Python.
    probe = ("import torch.distributed as dist, torch; from runners.execution import native;"
             "from runners.execution.runner import run;"
             "from algorithms import registry;"
             "dist.init_process_group('gloo', init_method='file://STORE', rank=0, world_size=1);"
             "x = torch.ones(4); run(registry.get('allreduce', 'ring').build(1), x);"
             "print(native.chosen(), x.tolist()); dist.destroy_process_group()")
    probe = probe.replace("STORE", str(tmp_path / "store"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLLSCHED_CACHE": str(tmp_path), "PATH": str(tmp_path),
           "CXX": "no-such-compiler"}
    env.pop(native.ENV_EXECUTOR, None)
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                         timeout=limits.job(0.4))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["python", "[1.0,", "1.0,", "1.0,", "1.0]"], out.stdout
    lines = [line for line in out.stderr.splitlines() if "native executor" in line]
    assert lines == ["collsched: native executor unavailable (no C++ compiler found (set CXX or install g++)); "
                     "the Python executor runs"], out.stderr[-2000:]


def floor_job(rank: int) -> tuple[bool, str]:
    """benchmarks/bench_native.py's transport floor on this rank's part of a 3-rank ring all-reduce: it
    completes only if every row's peer, tag and size match its partner's (a mismatch times out)."""
    from datetime import timedelta

    from runners.execution.plan import rank_plan

    group = dist.new_group(backend="gloo", timeout=timedelta(seconds=limits.RUN))
    rows = native.transport_rows(rank_plan(registry.get("allreduce", "ring").build(3, chunks=2), rank), 4)
    native.load().transport_floor(rows, group, 3)
    try:
        native.load().transport_floor([[0, 0, 1, 4]], group, 1)
        bad = ""
    except RuntimeError as e:
        bad = str(e).splitlines()[0]
    return bool(rows), bad


@pytest.mark.multiprocess
def test_the_transport_floor_posts_a_plans_messages_and_refuses_a_short_row() -> None:
    if not native.available():
        pytest.skip(f"native executor not built: {native.build_note()}")
    got = spawn(floor_job, 3, timeout=limits.JOB)
    assert [ran for ran, _ in got] == [True] * 3
    assert all("a row needs 5 fields, got 4" in bad for _, bad in got), got


def test_a_spec_names_every_field_and_refuses_a_missing_or_unknown_one() -> None:
    """backend.h's Spec, what Core.prepare answers: built by keyword (every field), read back by name."""
    if not native.available():
        pytest.skip(f"native extension not built: {native.build_note()}")
    module = native.load()
    fields = dict(plan=None, s=3, n=7, c=3, in_segs=1, in_copy=True, in_initial=True, out_segs=0, out_copy=False,
                  in_place=True, scratch=0, budget_bytes=24, op=4, dataflow=True, divide=True, clone_input=False,
                  barrier=False, label="allreduce/ring", index=0, checked=True, row=list(range(12)), shift=5,
                  first_check=None)
    spec = module.Spec(**fields)
    assert {name: getattr(spec, name) for name in fields} == fields
    with pytest.raises(TypeError, match="no shift"):
        module.Spec(**{k: v for k, v in fields.items() if k != "shift"})
    with pytest.raises(TypeError, match="unknown fields chunks"):
        module.Spec(**fields, chunks=3)
