"""The runner's errors, and the notes a failing rank leaves in the store for the peers it fails."""

from __future__ import annotations

from typing import Any

import torch.distributed as dist

from algorithms.errors import CollschedError

__all__ = ["InputError", "RunError", "RunTimeout", "peer_report", "report_failure"]


class RunError(CollschedError, RuntimeError):
    """A run failed while moving data; the message names the rank, step, transfer and peer."""


class RunTimeout(RunError, TimeoutError):
    """A run did not finish within its timeout; the message names the step and the peer waited on."""


class InputError(CollschedError, ValueError):
    """The arguments of a run are invalid; raised on every rank of the group with the same message."""


def _store() -> Any:
    try:
        return dist.distributed_c10d._get_default_store()
    except Exception:
        return None


def report_failure(me: int, text: str) -> None:
    """Leave a note in the group's store that this rank failed, for peers that fail because it exits."""
    store = _store()
    if store is not None:
        try:
            store.set(f"collsched/run-failed/{me}", text)
        except Exception:  # the store may be gone with the rank that hosted it
            pass


def peer_report(peer: int) -> str | None:
    """The note of a peer that failed first, if it left one."""
    store = _store()
    key = f"collsched/run-failed/{peer}"
    try:
        if store is not None and store.check([key]):
            return f"rank {peer} had failed first: {store.get(key).decode(errors='replace')}"
    except Exception:
        pass
    return None
