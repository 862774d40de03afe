"""Predictions of the gloo runner's time from a machine model, and how they compare with measurements.

``predict`` simulates one algorithm on a machine (``sim.machine.model.Machine``) and adds the runner's
private input copy the engine does not see (``copy_seconds``); ``load_machine`` reads a machine file for a
world size, resizing a calibrated host; ``validation_stats``, ``validation_table`` and ``plot_validation``
score and show ``collsched validate``'s measured-against-predicted rows. This module imports no torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from algorithms import registry
from algorithms.errors import CollschedError
from algorithms.ir import BUFS, ROOTED_KINDS, Buf, Kind, Schedule
from sim import units
from sim.engine.trace import save_figure
from sim.machine.fit import CalibrationError
from sim.machine.model import Machine, host, load
from sim.topology.graph import TopologyError

__all__ = ["algorithms_for", "build_schedule", "copy_fit", "copy_seconds", "load_machine", "plot_validation",
           "predict", "validation_stats", "validation_table"]


def copy_seconds(schedule: Schedule, size: float, copy: Mapping[str, Any] | None) -> float:
    """The gloo runner's memory copies outside the schedule, which the engine does not see: when an
    out-of-place schedule writes its input, the runner first makes a private copy of it
    (``runners.execution.buffers``: zero-filled, then copied), costing ``copy``'s α + bytes/B on the rank with the
    largest input (0 when ``copy`` is None). Local copy transfers are not counted (the engine leaves them free)."""
    if not copy or schedule.collective.in_place:
        return 0.0
    coll = schedule.collective
    p = coll.ranks
    piece = size if units.sized_buffer(coll.kind) == "buffer" else size / p
    chunk = piece / coll.chunks
    cols = schedule.columns()
    writers = np.unique(cols.dst[cols.dst_buf == BUFS.index(Buf.INPUT)])
    if not writers.size:
        return 0.0
    nbytes = max(coll.input_chunks(int(r)) for r in writers) * chunk
    bw = copy.get("bandwidth_Bps")
    return float(copy.get("alpha_s") or 0.0) + (nbytes / float(bw) if bw else 0.0)


def load_machine(path: str, ranks: int | None = None) -> Machine:
    """The machine file at ``path``, for ``ranks`` ranks: a calibrated host (switches tx and rx) is rebuilt
    with the same figures for another world size; any other topology must have ``ranks`` ranks."""
    try:
        m = load(path)
    except TopologyError as e:
        raise CalibrationError(f"--machine: {e}") from None
    topo = m.topology
    if ranks is None or ranks == topo.ranks:
        return m
    switches = {n for n in topo.graph.nodes if isinstance(n, str)}
    if switches != {"tx", "rx"}:
        raise CalibrationError(f"--machine {path}: {topo.ranks} ranks, not {ranks}, and not a calibrated host "
                               "topology that can be resized")
    bw = topo.bandwidth(0, "tx")
    return Machine(host(ranks, bandwidth=bw, latency=topo.graph.edges["tx", "rx"]["latency"],
                        host_bandwidth=topo.bandwidth("tx", "rx"), name=f"{topo.name} as {ranks} ranks"),
                   m.engine, m.model)


def algorithms_for(kind: Kind | str, p: int) -> list[str]:
    """Names of the registered algorithms of ``kind`` that can serve ``p`` ranks with default parameters."""
    return [a.name for a in registry.algorithms(kind) if a.unsupported(p) is None]


def build_schedule(kind: Kind | str, name: str, p: int, chunks: int = 1) -> Schedule:
    """``kind``/``name`` for ``p`` ranks with ``chunks`` (when the algorithm takes it), rooted at 0 if rooted."""
    algorithm = registry.get(kind, name)
    params = {"chunks": chunks} if any(q.name == "chunks" for q in algorithm.parameters) else {}
    return algorithm.build(p, root=0 if Kind(kind) in ROOTED_KINDS else None, **params)


def predict(machine: Machine, kind: str, name: str, p: int, size: float, chunks: int = 1, *,
            runtime: str | None = None, protocol: str | None = None) -> float:
    """Simulated seconds of one algorithm on the machine (dataflow, as the gloo runner executes).

    ``runtime``/``protocol``: price it as that runtime would (``sim.machine.runtime``; None: the machine's
    links as they are, as the gloo runner sees them)."""
    sched = build_schedule(kind, name, p, chunks)
    if runtime is None and protocol is None:
        r = machine.simulate(sched, size)
    else:
        from sim.machine.runtime import simulate_under

        # A machine without a launch of its own takes the protocol's base latency.
        engine = machine.engine if machine.engine.launch else machine.engine.replace(launch=None)
        r, _model = simulate_under(runtime or "plain", sched, machine.topology, size, engine, protocol=protocol)
    if not r.ok:
        raise CalibrationError(f"{kind}/{name} on {p} ranks failed its postcondition in simulation")
    return float(r.time) + copy_seconds(sched, size, copy_fit(machine))


def copy_fit(machine: Machine) -> dict[str, Any] | None:
    """The machine's fit of the runner's buffer copies (``collsched calibrate``'s ``model.copies``), if any."""
    copies = (machine.model or {}).get("copies")
    return copies.get("fit") if isinstance(copies, dict) else None


def validation_stats(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """How well ``collsched validate``'s predictions match its measurements: the median and 90th-percentile
    absolute relative error; how often the predicted-fastest algorithm of a (kind, size) is measured-fastest
    (``exact``) or within 10% of it (``within_10pct``)."""
    errs = sorted(abs(r["error"]) for r in rows)
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["collective"], r["size"]), []).append(r)
    exact = near = 0
    for g in groups.values():
        pick = min(g, key=lambda r: r["predicted_s"])
        fastest = min(g, key=lambda r: r["measured_s"])
        exact += pick is fastest
        near += pick["measured_s"] <= 1.1 * fastest["measured_s"]
    n = len(groups)
    return {"points": len(rows), "median_abs_error": float(np.percentile(errs, 50)) if errs else None,
            "p90_abs_error": float(np.percentile(errs, 90)) if errs else None, "groups": n,
            "predicted_fastest_is_fastest": exact / n if n else None,
            "predicted_fastest_within_10pct": near / n if n else None}


def validation_table(rows: Sequence[dict[str, Any]], summ: dict[str, Any]) -> str:
    """``collsched validate``'s table: a line per row, then ``summ`` (``validation_stats``) in one line."""
    lines = ["# collsched validate: measured (runner, median of launches) vs predicted (simulated on the machine)",
             f"#{'collective':>13} {'algorithm':>20} {'size':>10} {'measured':>12} {'predicted':>12} {'error':>8}"
             f" {'torch':>12}",
             f"#{'':>13} {'':>20} {'(B)':>10} {'(us)':>12} {'(us)':>12} {'':>8} {'(us)':>12}"]
    for r in rows:
        lines.append(f" {r['collective']:>13} {r['algorithm']:>20} {r['size']:>10} {r['measured_s'] * 1e6:>12.1f} "
                     f"{r['predicted_s'] * 1e6:>12.1f} {r['error']:>+8.1%} {r['native_s'] * 1e6:>12.1f}")
    lines.append(f"# {summ['points']} points: median |error| {summ['median_abs_error']:.1%}, 90th percentile "
                 f"{summ['p90_abs_error']:.1%}; predicted-fastest is measured-fastest at "
                 f"{summ['predicted_fastest_is_fastest']:.0%} of {summ['groups']} (collective, size) points, "
                 f"within 10% of it at {summ['predicted_fastest_within_10pct']:.0%}")
    return "\n".join(lines)


def plot_validation(rows: Sequence[dict[str, Any]], path: str) -> None:
    """Predicted against measured, log-log, one colour per (collective, algorithm), and the diagonal."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 7))
    labels = sorted({(r["collective"], r["algorithm"]) for r in rows})
    cmap = plt.get_cmap("tab20")
    for i, (kind, name) in enumerate(labels):
        pts = [r for r in rows if (r["collective"], r["algorithm"]) == (kind, name)]
        ax.scatter([r["measured_s"] * 1e6 for r in pts], [r["predicted_s"] * 1e6 for r in pts], s=18,
                   color=cmap(i % 20), marker="os^vD"[i // 20 % 5], label=f"{kind}/{name}")
    lo = min(min(r["measured_s"], r["predicted_s"]) for r in rows) * 1e6 / 1.5
    hi = max(max(r["measured_s"], r["predicted_s"]) for r in rows) * 1e6 * 1.5
    ax.plot([lo, hi], [lo, hi], color="black", lw=0.8)
    ax.set(xscale="log", yscale="log", xlabel="measured (us)", ylabel="predicted (us)",
           title=f"collsched validate, {rows[0]['ranks']} ranks")
    ax.legend(fontsize=6, ncol=2)
    try:
        save_figure(fig, path, dpi=120, bbox_inches="tight")
    except CollschedError as e:
        raise CalibrationError(f"--plot: {e}") from None
    finally:
        plt.close(fig)

