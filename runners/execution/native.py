"""The native executor: ``runners/csrc`` (``executor.cpp``), built on first use, runs compiled plans without the GIL.

Build. The sources (``runners/csrc/*.cpp``: plan, executor, check, work, backend and the one bindings file) are
compiled as one torch C++ extension (``torch.utils.cpp_extension.load`` with ninja and the system C++ compiler)
into a cache directory keyed by torch's version and the hash of every source and header there
(``$COLLSCHED_CACHE``, default ``~/.cache/collsched``), so it is built once per machine and torch; the
build prints its time once. Concurrent ranks share one build (torch locks the build directory). Where no
compiler is found or the build fails, ``available()`` is False, one line says why, and the Python
executor (``runners.execution.executors``) runs.

Choice. ``COLLSCHED_EXECUTOR=native|python`` chooses; unset, native runs wherever it builds.
``native`` that cannot build falls back with the same one line (it never stops a run).

Execution. ``NativePlan`` converts a ``RankPlan`` once (its items as rows of integers: tag, step, role,
peer, staged, source and destination buffer/index, count, reduce; the dependency lists; the staged
receives; the budget) and is cached per plan; ``execute`` runs it on the working buffers over the inner
group's c10d backend (the same ``ProcessGroupGloo`` / ``ProcessGroupNCCL`` the Python executor posts
to), releasing the GIL for the whole run. A failure comes back as (item, text) and is raised through
``Context.failure``, so its ``RunError`` / ``RunTimeout`` is the Python executor's, word for word.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch
from torch.distributed import distributed_c10d as c10d

from algorithms.ir import Buf, Kind, Op
from runners.errors import RunError, RunTimeout, peer_report, report_failure
from runners.execution.arguments import parse_rows, stalled
from runners.execution.executors import Context
from runners.execution.plan import RankPlan, Role
from runners.execution.staging import STAGING

__all__ = ["ENV_EXECUTOR", "MISMATCH", "PEER_FAILED", "NativePlan", "available", "build_note", "chosen", "execute",
           "group_store", "load", "next_call", "transport_rows", "watch"]

ENV_EXECUTOR = "COLLSCHED_EXECUTOR"
ENV_CACHE = "COLLSCHED_CACHE"
CSRC = Path(__file__).resolve().parents[1] / "csrc"
SOURCES = tuple(sorted(CSRC.glob("*.cpp")))  # compiled, linked into one extension
HEADERS = tuple(sorted(CSRC.glob("*.h")))  # hashed with the sources for the build cache's key
_BUF_INDEX = {Buf.INPUT: 0, Buf.OUTPUT: 1, Buf.SCRATCH: 2}
_TOKEN = -2  # plan.h's op code for a barrier token
MISMATCH = 4  # plan.h's status: the stall watch found rows that differ
PEER_FAILED = 5  # plan.h's status: the stall watch found a peer's note that its run of this call failed

_STALE_LOCK_S = 600.0  # a build takes 1-2 minutes even on a loaded machine
_lock = threading.Lock()
_module: Any = None
_note: str | None = None  # why the native executor is not available (None: not tried yet, or available)
_tried = False


def _cache_dir() -> Path:
    digest = hashlib.sha256()
    for path in (*SOURCES, *HEADERS):  # names too: a file renamed changes the build
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    root = Path(os.environ.get(ENV_CACHE) or Path.home() / ".cache" / "collsched")
    py = f"py{sys.version_info.major}{sys.version_info.minor}"
    return root / f"native-torch{torch.__version__.replace('+', '-')}-{py}-{digest.hexdigest()[:16]}"


def _compiler() -> str | None:
    cxx = os.environ.get("CXX") or "c++"
    return shutil.which(cxx) or shutil.which("g++") or shutil.which("clang++")


def load() -> Any:
    """The compiled extension module, building it on first use; None (with ``build_note()``) if it cannot."""
    global _module, _note, _tried
    if _tried:
        return _module
    with _lock:
        if _tried:
            return _module
        try:
            _module = _build()
        except Exception as e:  # any build failure: the Python executor runs
            text = str(e).strip().splitlines()
            _note = f"collsched: native executor unavailable ({text[-1] if text else type(e).__name__}); " \
                    "the Python executor runs"
            print(_note, file=sys.stderr, flush=True)
        _tried = True
    return _module


def _build() -> Any:
    directory = _cache_dir()
    name = "collsched_native"
    so = directory / f"{name}.so"
    # Built before (the directory's name holds the source hash): import it without asking ninja.
    if so.is_file() and not (directory / "lock").exists():
        import torch.distributed  # noqa: F401  (the extension's types derive from c10d's bindings)

        spec = importlib.util.spec_from_file_location(name, so)
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    if _compiler() is None:
        raise RuntimeError("no C++ compiler found (set CXX or install g++)")
    lock = directory / "lock"
    if lock.exists() and time.time() - lock.stat().st_mtime > _STALE_LOCK_S:
        lock.unlink(missing_ok=True)  # a build killed midway: torch would wait on its lock forever
    start = time.perf_counter()
    from torch.utils import cpp_extension

    directory.mkdir(parents=True, exist_ok=True)
    module = cpp_extension.load(name=name, sources=[str(p) for p in SOURCES], build_directory=str(directory),
                                extra_cflags=["-O2"], verbose=False)
    if not so.is_file() or so.stat().st_mtime >= time.time() - (time.perf_counter() - start) - 1:
        print(f"collsched: built the native executor in {time.perf_counter() - start:.1f} s ({directory})",
              file=sys.stderr, flush=True)
    return module


def build_note() -> str | None:
    """Why the native executor is unavailable (after ``load()`` failed), else None."""
    return _note


def available() -> bool:
    """Whether the native executor is built (building it now if needed)."""
    return load() is not None


def chosen() -> str:
    """``native`` or ``python``: what ``COLLSCHED_EXECUTOR`` asks for, native by default where it builds."""
    want = os.environ.get(ENV_EXECUTOR, "").strip().lower() or "native"
    if want not in ("native", "python"):
        raise ValueError(f"{ENV_EXECUTOR} must be 'native' or 'python', got {want!r}")
    if want == "python":
        return "python"
    return "native" if available() else "python"


class NativePlan:
    """A ``RankPlan`` converted once for the native executor (kept with the plan, see ``_native_plan``)."""

    def __init__(self, plan: RankPlan) -> None:
        module = load()
        if module is None:
            raise RuntimeError(build_note() or "collsched: the native executor is not built")
        rows = [[it.tid, it.step, int(it.role), it.peer, int(it.staged), _BUF_INDEX[it.transfer.src_buf],
                 it.transfer.src_index, _BUF_INDEX[it.transfer.dst_buf], it.transfer.dst_index, it.transfer.count,
                 int(it.transfer.op is Op.REDUCE)] for it in plan.items]
        self.plan = plan
        self.compiled = module.Plan(rows, [list(it.deps) for it in plan.items],
                                    [list(it.after) for it in plan.items], [list(d) for d in plan.dependents],
                                    [list(r) for r in plan.readers_of], list(plan.staged_recvs), plan.budget_chunks)


def transport_rows(plan: RankPlan, chunk_bytes: int) -> list[list[int]]:
    """``plan``'s sends and receives as the extension's ``transport_floor`` takes them (step, role, peer, bytes,
    tag), with ``chunk_bytes`` bytes per chunk: the same messages with no plan around them."""
    return [[it.step, int(it.role), it.peer, it.transfer.count * chunk_bytes, it.tid]
            for it in plan.items if it.role in (Role.SEND, Role.RECV)]


_PLANS: dict[int, NativePlan] = {}
_PLANS_SIZE = 64


def _native_plan(plan: RankPlan) -> NativePlan:
    cached = _PLANS.get(id(plan))
    if cached is not None and cached.plan is plan:  # it holds the plan: the id cannot be reused meanwhile
        return cached
    native = NativePlan(plan)
    if len(_PLANS) >= _PLANS_SIZE:
        _PLANS.pop(next(iter(_PLANS)))
    _PLANS[id(plan)] = native
    return native


def next_call(group: Any) -> int:
    """The group's checked-call counter, advanced (shared with the C++ backend's native calls on it); needs
    the extension (``available()``)."""
    return int(load().next_call(group if group is not None else c10d._get_default_group()))


def group_store(group: Any) -> Any:
    """The store of ``group`` (its own prefix store, as torch keeps it): where stalled checked runs meet."""
    pg = group if group is not None else c10d._get_default_group()
    entry = c10d._world.pg_map.get(pg)
    return entry[1] if entry is not None else None


def watch(group: Any, row: list[int], rank: int, p: int, salt: int, counter: int, stall_s: float) -> Any:
    """The stall watch of one checked run (row: metadata's 12 fields and the flag), or None without the
    extension or a store."""
    module = load()
    store = group_store(group)
    if module is None or store is None:
        return None
    return module.Check(store, counter, row, rank, p, salt, stall_s)


def execute(ctx: Context, op: int, dataflow: bool, check: Any = None) -> None:
    """Run ``ctx``'s plan natively (``dataflow``: the dataflow engine, else grouped); raises as the Python one.

    ``check``: the run's stall watch (``watch``), whose salt the tags carry; a mismatch it finds raises
    ``runners.execution.arguments.stalled``'s InputError."""
    native = _native_plan(ctx.plan)
    group = ctx.group if ctx.group is not None else c10d._get_default_group()
    bufs = ctx.bufs.bufs
    ref = bufs[Buf.INPUT if Buf.INPUT in bufs else Buf.OUTPUT]
    # Missing buffers are never addressed by the plan: any tensor stands in.
    tensors = [bufs.get(b, ref) for b in (Buf.INPUT, Buf.OUTPUT, Buf.SCRATCH)]
    kind = ctx.plan.schedule.collective.kind
    code = _TOKEN if kind is Kind.BARRIER else op
    cuda = ref.device.type == "cuda"
    unit = ctx.bufs.s * ref.element_size()
    if cuda:
        arena, shared = torch.empty(0, dtype=torch.uint8, device=ref.device), False
    else:
        arena, shared = STAGING.borrow(ctx.plan.budget_chunks * unit, ref.device)
    ok = False
    try:
        left = ctx.deadline - time.monotonic()
        status, index, text = native.compiled.run(tensors, ctx.bufs.s, group, arena, code, max(left, 0.0),
                                                  dataflow, check)
        if status == 0:
            ok = True
            return
        if status == MISMATCH:
            raise stalled(ctx.plan.schedule, parse_rows(text), len(ctx.globals))
        if status == 3 or index < 0:
            raise RunError(f"rank {ctx.plan.rank}: {ctx.plan.schedule.name}: native executor: {text}")
        if status == PEER_FAILED:
            raise ctx.abandoned(ctx.plan.items[index], text)
        error: BaseException = TimeoutError(text) if status == 2 else RuntimeError(text)
        raise ctx.failure(ctx.plan.items[index], error)
    finally:
        if shared:
            STAGING.give_back(ref.device, keep=ok)


# The tag of the metadata rows (runners.execution.arguments' point-to-point exchange uses it too): above every
# transfer's.
_META_TAG = 1 << 30


def exchange(row: list[int], group: Any, globals_: list[int], rank: int, deadline: float, what: str,
             schedule: Any = None, check: Any = None, counter: int = 0) -> list[list[int]]:
    """Every rank's metadata row (runners.execution.arguments), in one round of messages with every peer, natively.

    The gloo all-gather that ``runners.execution.arguments.exchange`` makes takes p-1 rounds one after another (a
    ring); here every rank sends its row to every peer and receives theirs at once, so the check costs one
    round of tiny messages. A peer that does not answer is named as the all-gather's fallback names it."""
    module = load()
    p = len(globals_)
    pg = group if group is not None else c10d._get_default_group()
    mine = torch.tensor(row, dtype=torch.int64)
    rows = torch.empty(p, len(row), dtype=torch.int64)
    # The tag carries the group's call counter, so rows left unmatched by a call that failed never match a
    # later call's exchange.
    tag = _META_TAG | (counter % _META_TAG)
    status, peer, text = module.exchange_rows(mine, rows, rank, pg, tag, max(deadline - time.monotonic(), 0.0), check)
    if status == 0:
        return rows.tolist()
    if status == MISMATCH:
        raise stalled(schedule, parse_rows(text), p)
    head = (f"rank {rank} (global rank {globals_[rank]}): {what}: before step 0, exchanging metadata with "
            f"peer rank {peer} (global rank {globals_[peer]})")
    if status == PEER_FAILED:
        failed, _, note = text.partition(":")
        report_failure(globals_[rank], f"abandoned exchanging metadata: rank {failed} had failed first")
        raise RunError(f"{head}: abandoned: rank {failed} (global rank {globals_[int(failed)]}) had failed first: "
                       f"{note}")
    # Only our own deadline makes a timeout: gloo also says "timeout" when it closed a pair because a wait
    # timed out earlier ("Application timeout caused pair closure"), which is the peer failing (as
    # runners.execution.executors.Context.failure tells them apart).
    if status == 2 or (("timed out" in text.lower() or "timeout" in text.lower())
                       and time.monotonic() >= deadline - 0.01):
        raise RunTimeout(f"{head} did not complete in time; is rank {peer} running the same run()? ({text})")
    report_failure(globals_[rank], f"exchanging metadata with peer rank {peer} (global rank {globals_[peer]}) "
                   f"failed ({text})")
    raise RunError(f"{head} failed ({peer_report(globals_[peer]) or text})")
