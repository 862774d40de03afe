"""Chrome/Perfetto traces: one track per rank and per link, consistent with the run."""

from __future__ import annotations

import itertools

import pytest

from algorithms import registry
from sim import topology as T
from sim.engine.reference import simulate
from sim.engine.trace import chrome_trace


def test_link_tracks_add_up_to_link_busy_time() -> None:
    # Several flows per link at once (chunks=3 on a switch): busy periods merge overlapping flows.
    r = simulate(registry.build("allreduce", "ring", 5, chunks=3), T.single_switch(5), 3e6)
    doc = chrome_trace(r)
    names = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e.get("pid") == 1
             and e["name"] == "thread_name"}
    busy: dict[str, float] = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["pid"] == 1:
            busy[names[e["tid"]]] = busy.get(names[e["tid"]], 0.0) + e["dur"] / 1e6
    assert set(busy) == {f"{u}->{v}" for u, v in r.link_busy}
    for (u, v), seconds in r.link_busy.items():
        assert busy[f"{u}->{v}"] == pytest.approx(seconds, rel=1e-9)


def test_overlapping_transfers_of_a_rank_get_lanes_that_never_overlap() -> None:
    r = simulate(registry.build("allreduce", "ring", 4, chunks=4), T.ring(4), 1e6)
    doc = chrome_trace(r)
    by_tid: dict[int, list[tuple[float, float]]] = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["pid"] == 0:
            by_tid.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"]))
    assert len(by_tid) > 4  # four chunks in flight per rank: extra lanes
    for spans in by_tid.values():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    assert doc["otherData"]["ok"] is True
