"""Chrome/Perfetto traces and matplotlib plots of simulated runs.

The trace is the Trace Event Format (JSON object with ``traceEvents``) that
chrome://tracing and ui.perfetto.dev open. Process "ranks" has one track per
rank: each transfer is a slice on its sending rank, from its start to the
write of its destination (overlapping transfers of one rank go to extra lanes
named after it, since complete events on one thread must nest). Process
"links" has one track per link that carried data: its busy periods, each with
the number of flows it carried.
"""

from __future__ import annotations

import heapq
import io
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from algorithms.disk import write_output
from algorithms.errors import CollschedError
from sim.engine.reference import SimResult

__all__ = ["chrome_trace", "plot_sweep", "plot_timeline", "write_trace"]

_US = 1e6  # trace timestamps are microseconds


def _lanes(intervals: Sequence[tuple[float, float, int]]) -> list[int]:
    """A lane per interval such that intervals in one lane do not overlap (greedy, by start)."""
    order = sorted(range(len(intervals)), key=lambda i: (intervals[i][0], intervals[i][2]))
    free: list[tuple[float, int]] = []  # (end, lane)
    lanes = [0] * len(intervals)
    count = 0
    for i in order:
        s, e, _ = intervals[i]
        if free and free[0][0] <= s:
            _end, lane = heapq.heappop(free)
        else:
            lane = count
            count += 1
        lanes[i] = lane
        heapq.heappush(free, (e, lane))
    return lanes


def chrome_trace(result: SimResult) -> dict[str, Any]:
    """The run as a Trace Event Format document (module docstring)."""
    sched, topo = result.schedule, result.topology
    p = sched.ranks
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "ranks"}},
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "links"}},
        {"ph": "M", "name": "process_sort_index", "pid": 0, "args": {"sort_index": 0}},
        {"ph": "M", "name": "process_sort_index", "pid": 1, "args": {"sort_index": 1}},
    ]
    start, end = result.start.tolist(), result.end.tolist()
    send_start, send_end = result.send_start.tolist(), result.send_end.tolist()
    per_rank: list[list[tuple[float, float, int]]] = [[] for _ in range(p)]
    flat = [(si, ti, t) for si, s in enumerate(sched.steps) for ti, t in enumerate(s.transfers)]
    for i, (_si, _ti, t) in enumerate(flat):
        if start[i] == start[i]:  # not NaN: the transfer ran
            per_rank[t.src].append((start[i], end[i], i))
    lane_tid: dict[tuple[int, int], int] = {}
    for r in range(p):
        lanes = _lanes(per_rank[r])
        for (s, e, i), lane in zip(per_rank[r], lanes, strict=True):
            tid = lane_tid.get((r, lane))
            if tid is None:
                tid = lane_tid[(r, lane)] = len(lane_tid)
                name = f"rank {r}" if lane == 0 else f"rank {r} ({lane + 1})"
                events.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": tid, "args": {"name": name}})
                events.append({"ph": "M", "name": "thread_sort_index", "pid": 0, "tid": tid,
                               "args": {"sort_index": r * 1_000_000 + lane}})
            si, ti, t = flat[i]
            events.append({
                "ph": "X", "pid": 0, "tid": tid, "ts": s * _US, "dur": (e - s) * _US,
                "name": f"{t.op} {t.src}->{t.dst}", "cat": f"step {si}",
                "args": {"step": si, "transfer": ti, "transfer_repr": repr(t),
                         "bytes": t.count * result.chunk_bytes,
                         "send_start_us": send_start[i] * _US, "send_end_us": send_end[i] * _US},
            })
    # Links: merge each link's flow intervals into busy periods.
    per_link: dict[int, list[tuple[float, float]]] = {}
    for i, (_si, _ti, t) in enumerate(flat):
        if t.src == t.dst or not send_end[i] > send_start[i]:
            continue
        way = 0 if sched.ways is None else int(sched.ways[i])
        for lk in topo.route_links(t.src, t.dst, way=way)[0]:
            per_link.setdefault(lk, []).append((send_start[i], send_end[i]))
    for tid, lk in enumerate(sorted(per_link)):
        u, v = topo.links[lk]
        events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": tid, "args": {"name": f"{u}->{v}"}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": 1, "tid": tid, "args": {"sort_index": lk}})
        for s, e, flows in _busy_periods(per_link[lk]):
            events.append({"ph": "X", "pid": 1, "tid": tid, "ts": s * _US, "dur": (e - s) * _US,
                           "name": "busy", "cat": "link", "args": {"flows": flows}})
    _switch_events(result, events)
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {"schedule": sched.name, "collective": sched.collective.describe(),
                      "topology": topo.name, "mode": result.mode, "size_bytes": result.size,
                      "time_s": result.time, "ok": result.ok},
    }


def _switch_events(result: SimResult, events: list[dict[str, Any]]) -> None:
    """One lane per switch, an event per switch op (first leg's start to last leg's end)."""
    ops = result.schedule.switch_ops
    if not ops:
        return
    events.append({"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "switch ops"}})
    lanes: dict[str, int] = {}
    for op, (s, e) in zip(ops, result.switch_spans, strict=True):
        tid = lanes.setdefault(op.switch, len(lanes))
        if tid == len(lanes) - 1 and not any(ev.get("pid") == 2 and ev.get("tid") == tid for ev in events):
            events.append({"ph": "M", "name": "thread_name", "pid": 2, "tid": tid, "args": {"name": op.switch}})
        if s == s:  # not NaN: it ran
            events.append({"ph": "X", "pid": 2, "tid": tid, "ts": s * _US, "dur": (e - s) * _US,
                           "name": f"{op.op} @{op.switch}", "cat": f"step {op.step}",
                           "args": {"step": op.step, "op": op.describe(), "bytes": op.count * result.chunk_bytes}})


def _busy_periods(intervals: list[tuple[float, float]]) -> list[tuple[float, float, int]]:
    intervals.sort()
    out: list[tuple[float, float, int]] = []
    cs, ce = intervals[0]
    flows = 1
    for s, e in intervals[1:]:
        if s <= ce:
            ce = max(ce, e)
            flows += 1
        else:
            out.append((cs, ce, flows))
            cs, ce, flows = s, e, 1
    out.append((cs, ce, flows))
    return out


def write_trace(result: SimResult, path: str | os.PathLike[str]) -> None:
    """Write ``chrome_trace(result)`` as JSON to ``path`` (``algorithms.disk.write_output``)."""
    write_output(path, json.dumps(chrome_trace(result), separators=(",", ":")), CollschedError)


def save_figure(fig: Any, path: str | os.PathLike[str], **options: Any) -> None:
    """Save a matplotlib figure to ``path`` in the format its name ends in (PNG when none), through
    ``algorithms.disk.write_output``: only a regular file is replaced."""
    buf = io.BytesIO()
    fig.savefig(buf, format=Path(path).suffix.lstrip(".").lower() or "png", **options)
    write_output(path, buf.getvalue(), CollschedError)


def plot_timeline(result: SimResult, path: str | os.PathLike[str], *, max_ranks: int = 32) -> None:
    """A PNG (or any matplotlib format) timeline: one row per rank, a bar per transfer it sends.

    Copies and reduces have their own colours; only the first ``max_ranks``
    ranks are drawn on large runs.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    sched = result.schedule
    shown = min(sched.ranks, max_ranks)
    start, send_start = result.start.tolist(), result.send_start.tolist()
    send_end, end = result.send_end.tolist(), result.end.tolist()
    bars: dict[tuple[int, str], list[tuple[float, float]]] = {}
    i = 0
    for s in sched.steps:
        for t in s.transfers:
            if t.src < shown and start[i] == start[i]:
                bars.setdefault((t.src, t.op.value), []).append((start[i] * _US, max(end[i] - start[i], 0) * _US))
                if send_end[i] > send_start[i]:
                    bars.setdefault((t.src, "wire"), []).append(
                        (send_start[i] * _US, (send_end[i] - send_start[i]) * _US))
            i += 1
    for op, (a, z) in zip(sched.switch_ops, result.switch_spans, strict=True):  # on the row of every source
        for e in op.sources:
            if e.rank < shown and a == a:
                bars.setdefault((e.rank, f"switch {op.op}"), []).append((a * _US, max(z - a, 0) * _US))
    colours = {"copy": "tab:blue", "reduce": "tab:orange", "wire": "black", "switch multicast": "tab:green",
               "switch reduce": "tab:red"}
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.28 * shown))
    for (r, kind), xs in bars.items():
        if kind == "wire":
            ax.broken_barh(xs, (r - 0.12, 0.24), facecolors=colours[kind], alpha=0.35)
        else:
            ax.broken_barh(xs, (r - 0.4, 0.8), facecolors=colours[kind], edgecolors="white", linewidth=0.3)
    ax.set_ylim(shown - 0.5, -0.5)
    ax.set_yticks(range(shown))
    ax.set_yticklabels([str(r) for r in range(shown)], fontsize=7)
    ax.set_ylabel("sending rank")
    ax.set_xlabel("time (us)")
    more = f", first {shown} of {sched.ranks} ranks" if shown < sched.ranks else ""
    ax.set_title(f"{sched.name} {sched.collective.describe()} on {result.topology.name}, "
                 f"{result.mode}: {result.time * 1e3:.4g} ms{more}", fontsize=9)
    ax.legend(handles=[Patch(color=colours["copy"], label="copy"), Patch(color=colours["reduce"], label="reduce"),
                       Patch(color=colours["wire"], alpha=0.35, label="on the wire"),
                       *(Patch(color=colours[k], label=k) for k in ("switch multicast", "switch reduce")
                         if any(kind == k for _r, kind in bars))],
              loc="upper right", fontsize=7)
    fig.tight_layout()
    try:
        save_figure(fig, path, dpi=110)
    finally:
        plt.close(fig)


def plot_sweep(rows: Sequence[tuple[str, float, float]], path: str | os.PathLike[str], *, title: str = "") -> None:
    """Time vs message size, one line per algorithm, log-log; ``rows`` are (algorithm, size, seconds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, list[tuple[float, float]]] = {}
    for name, size, seconds in rows:
        series.setdefault(name, []).append((size, seconds))
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, pts in sorted(series.items()):
        pts.sort()
        ax.plot([s for s, _ in pts], [t * _US for _, t in pts], marker="o", markersize=3, label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("time (us)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    try:
        save_figure(fig, path, dpi=110)
    finally:
        plt.close(fig)
