"""The walk of one ``dist.all_reduce`` on a ``collsched`` group (the C++ backend, native engine, CPU), traced.

    python benchmarks/first_call_walk.py [--ranks 2] [--numel 1000] [--calls]

Two ranks (gloo underneath) make a ``collsched`` group and all-reduce ``--numel`` floats twice: the first
call of the signature, then a repeat. Each call is traced on rank 0 with ``sys.setprofile``: in the calling
thread around the call, and in whichever thread the C++ backend calls Python from (the Core methods are
wrapped to trace while they run: the worker thread's Python frames are otherwise invisible to a profiler).
For each call it prints

- the Python files the walk visits (the repository's, then torch's and the standard library's), each with
  the number of passes it appears in (a pass: the calling thread's Python before the C++ backend, and each
  time C++ calls Python);
- the crossings between Python and C++ on the walk to the executor: the entry into the C++ backend, each
  call from C++ into Python (``Core``'s methods) and each call from Python into the executor
  (``Plan.run``); beside them the extension's other functions Python called, which return at once
  (constructors, the call counter, the exchange of rows);
- how many times the policy's choice, ``rank_plan`` and the argument checks (``local_check``, ``metadata``,
  the exchange, ``check_table``) ran.

``--calls`` also prints every traced Python call of the repository, in order (the walk itself).
"""

from __future__ import annotations

import argparse
import collections
import functools
import sys
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import torch.distributed as dist

ROOT = Path(__file__).resolve().parents[1]

# What the walk counts: (file relative to the repository, function) -> the name printed.
CHECKS = {
    ("runners/backend/policy.py", "choose"): "policy choice",
    ("runners/execution/plan.py", "rank_plan"): "rank_plan",
    ("runners/execution/arguments.py", "local_check"): "local_check",
    ("runners/execution/arguments.py", "metadata"): "metadata",
    ("runners/execution/arguments.py", "exchange"): "exchange",
    ("runners/execution/native.py", "exchange"): "exchange",
    ("runners/execution/arguments.py", "check_table"): "check_table",
    ("runners/execution/arguments.py", "check_own_row"): "check_own_row",
}
EXTENSION = "collsched_native"
EXECUTOR = "Plan.run"  # the extension's executor entry: a call of it from Python is a crossing
SELF = str(Path(__file__).resolve())


class Walk:
    """The trace of one call: passes of Python frames and the extension's functions called from Python."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.passes: list[list[tuple[str, str]]] = []  # (file, function) of every Python call, per pass
        self.extension: list[tuple[int, str]] = []  # (pass, name) of each call into collsched's extension
        self.entries: list[str] = []  # how each pass was entered ("caller", or the Core method C++ called)
        self.current = threading.local()  # the pass of this thread

    def profiler(self, index: int) -> Any:
        self.current.index = index

        def profile(frame: Any, event: str, arg: Any) -> None:
            if event == "call":
                name = frame.f_code.co_filename
                if name != SELF:
                    with self.lock:
                        self.passes[index].append((name, frame.f_code.co_name))
            elif event == "c_call" and getattr(arg, "__module__", None) == EXTENSION:
                name = arg.__name__
                self.called(EXECUTOR if name == "run" else f"{name}()" if name[0].isupper() else name)

        return profile

    def called(self, name: str) -> None:
        index = getattr(self.current, "index", None)
        if index is not None:
            with self.lock:
                self.extension.append((index, name))

    def begin(self, entry: str) -> int:
        with self.lock:
            self.passes.append([])
            self.entries.append(entry)
            return len(self.passes) - 1


_WALK: Walk | None = None


def _traced_core_method(method: Any) -> Any:
    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        walk = _WALK
        if walk is None:
            return method(*args, **kwargs)
        index = walk.begin(f"C++ -> Core.{method.__name__}")
        sys.setprofile(walk.profiler(index))
        try:
            return method(*args, **kwargs)
        finally:
            sys.setprofile(None)
            walk.current.index = None

    return wrapper


def _traced_constructor(cls: Any) -> Any:
    """``cls`` (a class of the extension) behind a function that notes each construction: a profiler sees
    no event for calling a type."""

    def make(*args: Any, **kwargs: Any) -> Any:
        if _WALK is not None:
            _WALK.called(f"{cls.__name__}()")
        return cls(*args, **kwargs)

    return make


def _traced(call: Any) -> Walk:
    global _WALK
    walk = _WALK = Walk()
    index = walk.begin("caller")
    sys.setprofile(walk.profiler(index))
    try:
        call()
    finally:
        sys.setprofile(None)
        walk.current.index = None
        _WALK = None
    return walk


def _relative(name: str) -> str:
    """A repository file relative to the repository; torch's as ``torch/...``; the standard library's as
    ``python/...``."""
    for marker, prefix in (("site-packages/", ""), ("/lib/python3.", "python/")):
        if marker in name:
            tail = name.split(marker, 1)[1]
            return prefix + (tail.split("/", 1)[1] if prefix else tail)
    try:
        return str(Path(name).resolve().relative_to(ROOT))
    except ValueError:
        return name


def summary(walk: Walk) -> dict[str, Any]:
    """The walk as numbers: files (repository / other) with their passes, crossings, check counts."""
    files: dict[str, set[int]] = collections.defaultdict(set)
    counts: collections.Counter[str] = collections.Counter()
    calls: list[str] = []
    for index, frames in enumerate(walk.passes):
        for name, function in frames:
            rel = _relative(name)
            if rel.startswith("<"):
                continue
            files[rel].add(index)
            counts[CHECKS.get((rel, function), "")] += 1
            if rel.split("/")[0] in ("runners", "algorithms", "sim"):
                calls.append(f"[{index}] {rel}:{function}")
    counts.pop("", None)
    ours = {f: len(p) for f, p in files.items() if f.split("/")[0] in ("runners", "algorithms", "sim")}
    others = {f: len(p) for f, p in files.items() if f not in ours}
    executor = [n for _, n in walk.extension if n == EXECUTOR]
    helpers = [f"{n} (pass {i})" for i, n in walk.extension if n != EXECUTOR]
    from_cpp = [e for e in walk.entries if e != "caller"]
    return {
        "passes": walk.entries,
        "repository files": ours,
        "other files": others,
        # The entry (dist.all_reduce's binding into the C++ backend), each call from C++ into Python, and
        # each call from Python into the executor.
        "crossings": 1 + len(from_cpp) + len(executor),
        "crossings, in order": ["Python -> C++ backend", *from_cpp, *(["Python -> C++ Plan.run"] * len(executor))],
        "extension calls from Python that return at once": helpers,
        "runs": dict(sorted(counts.items())),
        "calls": calls,
    }


def job(rank: int, numel: int) -> list[dict[str, Any]]:
    import os

    from runners.backend import cpp as cpp_backend
    from runners.execution import native

    module = native.load()
    for name in ("Plan", "Check", "Spec"):
        if hasattr(module, name):
            setattr(module, name, _traced_constructor(getattr(module, name)))
    for name in ("prepare", "serve", "native_failure", "send", "recv", "monitored_barrier"):
        setattr(cpp_backend.Core, name, _traced_core_method(getattr(cpp_backend.Core, name)))
    os.environ[cpp_backend.ENV_BACKEND] = "cpp"
    group = dist.new_group(backend="collsched")
    out = []
    for _ in range(2):
        x = torch.ones(numel)
        dist.barrier()
        walk = _traced(lambda x=x: dist.all_reduce(x, group=group))
        assert x[0].item() == dist.get_world_size(), x[0].item()
        out.append(summary(walk))
    dist.barrier()
    dist.destroy_process_group(group)
    return out


def report(result: dict[str, Any], title: str, calls: bool) -> None:
    print(f"== {title}")
    ours, others = result["repository files"], result["other files"]
    runners = {f: n for f, n in ours.items() if f.startswith("runners/")}
    twice = sum(1 for n in ours.values() if n > 1)
    print(f"  repository files visited: {len(ours)} ({twice} of them in more than one pass); runners/: "
          f"{len(runners)} ({sum(1 for n in runners.values() if n > 1)} in more than one pass)")
    for f, n in sorted(ours.items()):
        print(f"    {f}" + (f"  ({n} passes)" if n > 1 else ""))
    print(f"  other Python files visited: {len(others)} (" + ", ".join(sorted(others)) + ")")
    print(f"  passes: {', '.join(result['passes'])}")
    print(f"  crossings on the walk to the executor: {result['crossings']} ("
          + ", ".join(result["crossings, in order"]) + ")")
    helpers = result["extension calls from Python that return at once"]
    print(f"  extension calls from Python that return at once: {len(helpers)}"
          + (f" ({', '.join(helpers)})" if helpers else ""))
    runs = result["runs"]
    names = ("policy choice", "rank_plan", "local_check", "metadata", "exchange", "check_table", "check_own_row")
    print("  runs: " + ", ".join(f"{n} {runs.get(n, 0)}" for n in names))
    if calls:
        for line in result["calls"]:
            print(f"    {line}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--numel", type=int, default=1000)
    parser.add_argument("--calls", action="store_true", help="print every traced call of the repository")
    args = parser.parse_args(argv)
    from runners.commands.launch import spawn
    from runners.execution import native

    if not native.available():
        print(f"the native extension is not built: {native.build_note()}")
        return 1
    got = spawn(job, args.ranks, args.numel, timeout=300)
    first, repeat = got[0]
    report(first, f"first call of a signature (rank 0 of {args.ranks}, {args.numel} floats)", args.calls)
    report(repeat, "the same call again", args.calls)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
