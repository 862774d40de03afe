"""Nothing unverified runs: the verifier's verdict on a schedule, paid once per content.

``require(schedule, source)`` runs ``sim.verify.verify`` on a schedule the first time it is seen and raises
``UnverifiedSchedule`` (an ``InputError``) when the verifier finds a violation: the message names
``source`` (the algorithm, p and its parameters, or the file), the number of violations and the first
``SHOWN`` of them. ``runners.execution.runner.prepare`` calls it for every schedule it runs, the backend's
policy when it builds one (``runners.backend.policy.schedule``), so that its error names the choice. Every
rank verifies the same schedule and so raises the same error, before any data moves.

The verdict is kept by the schedule's content (``digest``: a SHA-256 of its collective, scratch, switch
operations and transfer columns; the name is left out), so it is paid

- once per process: verdicts, good and bad, are remembered in memory (and the schedule objects last seen,
  by identity, so that a cache hit does not even hash);
- once per machine for a schedule that verifies and whose verification is work (``work``: at least
  ``DISK_FROM``; a smaller one verifies in about a millisecond, less than creating a file costs): its digest
  is written under
  ``$COLLSCHED_VERIFY_CACHE/<verifier>/`` (default ``$COLLSCHED_CACHE/verified``, under the native build's
  root ``~/.cache/collsched``), where ``<verifier>`` hashes the verifier's own sources, so a changed
  verifier starts afresh. A
  schedule that fails is never written: it is verified again in a new process and fails again. The
  directory is only a cache: an unwritable one costs a verification per process, nothing else.

``COLLSCHED_VERIFY=0`` turns verification off (for a schedule too large to verify in the time one can
wait); the first schedule that runs unverified in a process says so once, as a ``UserWarning``.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from algorithms.ir import Schedule
from runners.errors import InputError

__all__ = ["DISK_FROM", "ENV_VERIFY", "ENV_VERIFY_CACHE", "SHOWN", "UnverifiedSchedule", "cache_dir",
           "clear_memory", "digest", "enabled", "require", "stats", "warn_unverified", "work"]

ENV_VERIFY = "COLLSCHED_VERIFY"
ENV_CACHE = "COLLSCHED_CACHE"  # the native build's root too (runners.execution.native)
ENV_VERIFY_CACHE = "COLLSCHED_VERIFY_CACHE"
SHOWN = 5
"""Violations listed in the error (then how many more)."""
DISK_FROM = 16384
"""``work`` from which a verdict is looked up and kept on disk: below, verifying (0.05-1 ms measured by
benchmarks/bench_first_call_verify.py) costs about what the file does (0.1 ms to read, 1-2 ms to write)."""
_FORMAT = "collsched.verified/1"
_VERIFIER_SOURCES = ("verifier.py", "semantics.py", "fast.py", "report.py")
_IDENTITY_SIZE = 64
_VERDICT_SIZE = 4096
_ENTRY_BYTES = 4096


class UnverifiedSchedule(InputError):
    """A schedule the verifier rejects; the message names it and its first violations."""


_lock = threading.Lock()
_by_id: OrderedDict[int, Schedule] = OrderedDict()  # schedules known good, held (so their ids stay theirs)
_verdicts: OrderedDict[str, str | None] = OrderedDict()  # digest -> None (good) or the violations, as text
_warned = False
_verifier_key: str | None = None
_stats = {"verified": 0, "memory": 0, "disk": 0}


def enabled() -> bool:
    """``COLLSCHED_VERIFY``: 1 (default) verifies, 0 does not; anything else is an ``InputError``."""
    value = os.environ.get(ENV_VERIFY, "").strip() or "1"
    if value not in ("0", "1"):
        raise InputError(f"{ENV_VERIFY} must be 0 or 1, got {value!r}")
    return value == "1"


def warn_unverified() -> None:
    """Say once per process that schedules run unverified (``COLLSCHED_VERIFY=0``)."""
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(f"collsched: {ENV_VERIFY}=0: schedules run without verification; a wrong schedule "
                      "returns wrong data", UserWarning, stacklevel=3)


def digest(schedule: Schedule) -> str:
    """A SHA-256 of what the schedule does (not its name): equal on every process for equal schedules."""
    coll = schedule.collective
    h = hashlib.sha256(repr((_FORMAT, coll.kind.value, coll.ranks, coll.chunks, coll.root, coll.matrix,
                             schedule.scratch_chunks, schedule.switch_ops)).encode())
    for column in schedule.columns():
        a = np.ascontiguousarray(column)
        h.update(f"|{a.dtype.str}{a.shape}|".encode())
        h.update(a.data)
    return h.hexdigest()


def work(schedule: Schedule) -> int:
    """The verifier's work, roughly: chunks moved (summed over transfers) times p (what a slot's contents hold)."""
    return int(schedule.columns().count.sum()) * schedule.ranks


def _verifier() -> str:
    """A hash of the verifier's sources: the disk cache's subdirectory."""
    global _verifier_key
    if _verifier_key is None:
        import sim.verify

        here = Path(sim.verify.__file__).parent
        h = hashlib.sha256(_FORMAT.encode())
        for name in _VERIFIER_SOURCES:
            path = here / name
            h.update(name.encode() + b"\0" + (path.read_bytes() if path.is_file() else b"") + b"\0")
        _verifier_key = h.hexdigest()[:16]
    return _verifier_key


def cache_dir() -> Path:
    """Where verdicts of schedules that verified are kept on disk (``$COLLSCHED_VERIFY_CACHE/<verifier>``)."""
    root = os.environ.get(ENV_VERIFY_CACHE)
    if not root:
        root = str(Path(os.environ.get(ENV_CACHE) or Path.home() / ".cache" / "collsched") / "verified")
    return Path(root) / _verifier()


def _on_disk(key: str) -> bool:
    try:
        with open(cache_dir() / key, "rb") as f:
            entry = json.loads(f.read(_ENTRY_BYTES))
        return isinstance(entry, dict) and entry.get("digest") == key and entry.get("ok") is True
    except (OSError, ValueError):
        return False


def _write_disk(key: str, schedule: Schedule) -> None:
    """Record a good verdict (atomically: a fresh temporary file renamed); a failure only costs a cache miss."""
    try:
        directory = cache_dir()
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump({"digest": key, "ok": True, "name": schedule.name,
                           "collective": schedule.collective.describe(), "format": _FORMAT}, f)
            os.replace(tmp, directory / key)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass


def _remember(key: str, verdict: str | None) -> None:
    _verdicts[key] = verdict
    _verdicts.move_to_end(key)
    while len(_verdicts) > _VERDICT_SIZE:
        _verdicts.popitem(last=False)


def _known_good(schedule: Schedule) -> None:
    _by_id[id(schedule)] = schedule
    _by_id.move_to_end(id(schedule))
    while len(_by_id) > _IDENTITY_SIZE:
        _by_id.popitem(last=False)


def _violations(schedule: Schedule) -> str | None:
    """None when the verifier accepts ``schedule``, else its report (the first ``SHOWN`` violations)."""
    from sim.verify import verify

    report = verify(schedule)
    _stats["verified"] += 1
    if report.ok:
        return None
    text = report.text(SHOWN, see_all="`collsched verify` lists them all")
    return text


def require(schedule: Schedule, source: str | None = None) -> None:
    """Raise ``UnverifiedSchedule`` unless the verifier accepts ``schedule`` (see the module docstring).

    ``source`` names where the schedule comes from (e.g. ``algorithm 'ring' for allreduce at p=8 with
    chunks=4``); by default its name and collective. A no-op, after one warning, with ``COLLSCHED_VERIFY=0``.
    """
    if not enabled():
        warn_unverified()
        return
    with _lock:
        known = _by_id.get(id(schedule))
        if known is schedule:
            _by_id.move_to_end(id(schedule))
            _stats["memory"] += 1
            return
        key = digest(schedule)
        verdict: Any = _verdicts.get(key, False)
        disk = work(schedule) >= DISK_FROM
        if verdict is not False:
            _stats["memory"] += 1
        elif disk and _on_disk(key):
            verdict = None
            _stats["disk"] += 1
        else:
            verdict = _violations(schedule)
            if verdict is None and disk:
                _write_disk(key, schedule)
        _remember(key, verdict)
        if verdict is None:
            _known_good(schedule)
            return
    where = source or f"schedule {schedule.name!r} ({schedule.collective.describe()})"
    raise UnverifiedSchedule(f"collsched refuses to run {where}: it fails verification, so it would return "
                             f"wrong data (set {ENV_VERIFY}=0 to run schedules unverified):\n{verdict}")


def stats() -> dict[str, int]:
    """How many ``require`` calls verified, found the verdict in memory, or on disk (for tests and benchmarks)."""
    return dict(_stats)


def clear_memory() -> None:
    """Forget the verdicts held in memory (the disk cache stays): for tests and benchmarks."""
    global _warned
    with _lock:
        _by_id.clear()
        _verdicts.clear()
        for k in _stats:
            _stats[k] = 0
        _warned = False
