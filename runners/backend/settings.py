"""The settings every rank of a collsched group must share, compared once when the group is made.

Ranks whose executor, argument check or verification differ run different code for the same collective:
one posts salted tags the other never matches, one exchanges rows the other skips, one refuses a schedule
the other runs. They do not fail: they wait on each other until torch's group timeout (30 minutes by
default) and then blame a peer. A rank whose native build failed looks exactly like that (it runs the
Python executor). So each rank writes a small row of its settings to the group's store when the group is
made (after the inner gloo groups connect, so every rank is there), reads every rank's row, and every rank
raises the same ``SettingsMismatch`` naming each setting that differs and the ranks on each side.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from datetime import timedelta
from importlib import metadata
from typing import Any

from algorithms.errors import CollschedError
from runners.backend.cpp import unavailable
from runners.execution import native, verified
from runners.execution.arguments import signature_cache

__all__ = ["SETTINGS", "SettingsMismatch", "compare", "exchange", "mine"]


class SettingsMismatch(CollschedError, RuntimeError):
    """The ranks of a group were started with different settings; the message names each one and the ranks."""


def _version() -> str:
    try:
        return metadata.version("collsched")
    except metadata.PackageNotFoundError:
        return "unknown"


def _native_build() -> str:
    return "built" if native.available() else (native.build_note() or "not built")


SETTINGS: dict[str, tuple[str, Callable[[], Any]]] = {
    "executor": ("the executor engine (COLLSCHED_EXECUTOR, or Python where the native build failed)",
                 native.chosen),
    "backend": ("the backend's front (COLLSCHED_BACKEND, or Python where the native build failed)",
                lambda: "cpp" if unavailable() is None else "python"),
    "native build": ("the native build", _native_build),
    "check": ("the argument check (COLLSCHED_CHECK)", lambda: os.environ.get("COLLSCHED_CHECK", "").strip() or "1"),
    "verify": ("verification (COLLSCHED_VERIFY)", lambda: "1" if verified.enabled() else "0"),
    "signature cache": ("the signature cache (COLLSCHED_SIGNATURE_CACHE)", signature_cache),
    "version": ("the collsched version", _version),
}
"""What is compared: name -> (what the error calls it, how this rank reads it)."""


def mine() -> dict[str, Any]:
    """This rank's row (a setting it cannot read is its error's text: the ranks still compare, and all fail)."""
    row = {}
    for name, (_, read) in SETTINGS.items():
        try:
            row[name] = read()
        except (ValueError, CollschedError) as e:
            row[name] = f"invalid ({e})"
    return row


def compare(rows: Mapping[int, Mapping[str, Any]], size: int) -> str | None:
    """What differs between the ranks' rows, described; None when they agree."""
    lines = []
    for name, (what, _) in SETTINGS.items():
        by_value: dict[str, list[int]] = {}
        for rank in range(size):
            by_value.setdefault(str(rows[rank].get(name)), []).append(rank)
        if len(by_value) > 1:
            sides = "; ".join(f"{_ranks(ranks)}: {value}" for value, ranks in by_value.items())
            lines.append(f"  {what}: {sides}")
    if not lines:
        return None
    return "\n".join(lines)


def _ranks(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(str(r) for r in ranks)


def exchange(store: Any, rank: int, size: int, timeout: timedelta, global_ranks: tuple[int, ...]) -> None:
    """Write this rank's row to the group's ``store``, read every rank's, raise ``SettingsMismatch`` (the same
    on every rank) when they differ. Every rank of the group has connected already: the wait is short."""
    key = "collsched/settings/"
    store.set(f"{key}{rank}", json.dumps(mine()))
    keys = [f"{key}{r}" for r in range(size)]
    store.wait(keys, timeout)
    rows = {r: json.loads(store.get(k)) for r, k in enumerate(keys)}
    differ = compare(rows, size)
    if differ is not None:
        where = ", ".join(f"{r} (global rank {g})" for r, g in enumerate(global_ranks))
        raise SettingsMismatch(
            f"collsched group of {size} ranks ({where}): the ranks' settings differ, so they would run "
            f"different code for the same collective and wait on each other until the group's timeout:\n{differ}\n"
            "Start every rank with the same environment (and the same native build).")
