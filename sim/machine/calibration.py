"""The machine model fitted to ``collsched calibrate``'s measurements (numpy and the simulator; no torch).

``runners.commands.calibrate.measure`` returns a record of micro-benchmarks on gloo ranks; ``fit_machine`` turns it
into a ``sim.machine.model.Machine``: α and B from point-to-point times, the host cap H and γ from large
runner collectives (the flow patterns' cap and ``x.add_``'s γ as diagnostics), the runner's costs per call
and per message, and its buffer copy (docs/design.md, "Machine model and calibration").
``calibration_report`` describes the result in a few lines.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from algorithms import registry
from algorithms.ir import Kind
from sim.engine.reference import simulate
from sim.machine.fit import Fit, fit_alpha_beta, fit_bandwidth, fit_knee, search_log
from sim.machine.model import RUNNER_IN_FLIGHT, EngineParams, Machine, host
from sim.machine.predict import copy_seconds

__all__ = ["calibration_report", "fit_collectives", "fit_host_cap", "fit_machine", "fit_runner"]


def _flow_time(flows: Sequence[tuple[int, int]], nbytes: float, alpha: float, bw: float, cap: float) -> float:
    """A pattern's time on the host model with equal sharing: α + bytes / the slowest flow's rate."""
    sends: dict[int, int] = {}
    recvs: dict[int, int] = {}
    for s, d in flows:
        sends[s] = sends.get(s, 0) + 1
        recvs[d] = recvs.get(d, 0) + 1
    rate = min(min(bw / sends[s], bw / recvs[d]) for s, d in flows)
    rate = min(rate, cap / len(flows))
    return alpha + nbytes / rate


def fit_host_cap(rec: dict[str, Any], alpha: float, bw: float) -> Fit:
    """The host-wide cap H (bytes/s, inf: none) that best explains the flow patterns, by a search over H."""
    pats, times = rec["patterns"], rec["flows"]
    nbytes = float(rec["flow_bytes"])
    p = int(rec["ranks"])

    def err(cap: float) -> float:
        return float(sum(((_flow_time(pats[k], nbytes, alpha, bw, cap) - t) / t) ** 2 for k, t in times.items()))

    grid = [math.inf, *(bw * f for f in np.geomspace(0.25, 2.0 * p, 200))]
    cap = min(grid, key=err)
    return Fit(host_bandwidth_Bps=cap if math.isfinite(cap) else None, rms_rel=math.sqrt(err(cap) / len(times)),
               predicted_s={k: _flow_time(pats[k], nbytes, alpha, bw, cap) for k in times})


def fit_runner(cases: list[dict[str, Any]], topology: Any, reduce_bw: float | None, p: int,
               copy: Mapping[str, Any] | None = None) -> Fit:
    """The runner's costs: ``launch`` per call and ``message_cpu`` per message (sim.engine.reference), fitted to the
    measured runs of small schedules with the simulator as the model: for each ``message_cpu`` on a grid,
    the best ``launch`` is the weighted mean of what remains; the pair with the least squared relative
    residual wins, after dropping outliers as ``fit_robust`` does."""
    scheds = [registry.build(c["collective"], c["algorithm"], p, root=0 if c["collective"] == "broadcast" else None,
                             chunks=c["chunks"]) for c in cases]
    measured = np.array([c["time_s"] for c in cases])
    w = 1.0 / measured
    grid = [0.0, *np.geomspace(1e-6, 1e-3, 40)]
    copies = np.array([copy_seconds(s, c["size"], copy) for s, c in zip(scheds, cases, strict=True)])
    sims = np.array([[simulate(s, topology, c["size"], reduce_bandwidth=reduce_bw, message_cpu=cpu,
                               in_flight=RUNNER_IN_FLIGHT).time
                      for s, c in zip(scheds, cases, strict=True)] for cpu in grid]) + copies
    keep = np.ones(len(cases), dtype=bool)

    def best(keep: np.ndarray) -> tuple[float, int, float]:
        out = []
        for g, t in enumerate(sims):
            ww = w[keep] ** 2
            launch = max(float(np.sum(ww * (measured[keep] - t[keep])) / np.sum(ww)), 0.0)
            out.append((float(np.sum(((t[keep] + launch - measured[keep]) * w[keep]) ** 2)), g, launch))
        sse, g, launch = min(out)
        return launch, g, math.sqrt(sse / int(keep.sum()))

    while True:
        launch, g, rms = best(keep)
        res = np.abs((sims[g] + launch - measured) * w)
        res[~keep] = 0.0
        worst = int(np.argmax(res))
        if (len(cases) - int(keep.sum()) >= len(cases) // 3 or int(keep.sum()) <= 3
                or res[worst] <= max(0.2, 3 * float(np.median(res[keep])))):
            break
        keep[worst] = False
    for c, t in zip(cases, sims[g], strict=True):
        c["predicted_s"] = float(t + launch)
    return Fit(launch_s=launch, message_cpu_s=float(grid[g]), rms_rel=rms,
               dropped=[i for i in range(len(cases)) if not keep[i]], cases=cases)


def fit_collectives(cases: list[dict[str, Any]], p: int, *, alpha: float, bw: float, host_bw: float,
                    reduce_bw: float | None, launch: float, message_cpu: float,
                    copy: Mapping[str, Any] | None = None) -> Fit:
    """The host cap H and γ that best explain large runner collectives
    (``runners.commands.calibrate.COLLECTIVE_CASES``), with the simulator as the model and the other figures held:
    H by a search for the least squared relative
    error of the cases without reductions, then γ over the reducing ones with that H. Falls back to ``host_bw`` or
    ``reduce_bw`` when no case of that sort was measured, and to ``reduce_bw`` when the reducing cases fit best
    with free reductions."""
    reducing = {Kind.ALLREDUCE, Kind.REDUCESCATTER, Kind.REDUCE}
    scheds = [registry.build(c["collective"], c["algorithm"], p, chunks=c["chunks"]) for c in cases]
    measured = np.array([float(c["time_s"]) for c in cases])
    copies = [copy_seconds(s, c["size"], copy) for s, c in zip(scheds, cases, strict=True)]
    move = [i for i, s in enumerate(scheds) if s.collective.kind not in reducing]
    red = [i for i, s in enumerate(scheds) if s.collective.kind in reducing]

    def times(cap: float, gamma: float | None, idx: list[int]) -> np.ndarray:
        topo = host(p, bandwidth=bw, latency=alpha, host_bandwidth=cap if math.isfinite(cap) else None)
        gamma = gamma if gamma is not None and math.isfinite(gamma) else None  # inf: reductions are free
        return np.array([simulate(scheds[i], topo, cases[i]["size"], reduce_bandwidth=gamma, launch=launch,
                                  message_cpu=message_cpu, in_flight=RUNNER_IN_FLIGHT).time + copies[i]
                         for i in idx])

    def err(t: np.ndarray, idx: list[int]) -> float:
        return float(np.sum(((t - measured[idx]) / measured[idx]) ** 2))

    cap = host_bw
    if move:
        cap = search_log(lambda h: err(times(h, reduce_bw, move), move), bw * 0.25, bw * 2.0 * p)
    gamma = reduce_bw
    if red:
        base = reduce_bw if reduce_bw is not None else bw
        g = search_log(lambda g: err(times(cap, g, red), red), base * 0.01, base * 4.0)
        # inf means the collectives ran no slower than free reductions would: they cannot tell γ, so the
        # direct measurement (the reduce micro-benchmark) stands; None only when there is none.
        gamma = g if math.isfinite(g) else reduce_bw
    every = list(range(len(cases)))
    predicted = times(cap, gamma, every)
    rel = (predicted - measured) / measured
    return Fit(host_bandwidth_Bps=float(cap) if math.isfinite(cap) else None,
               reduce_bandwidth_Bps=None if gamma is None else float(gamma),
               rms_rel=float(np.sqrt(np.mean(rel ** 2))) if len(rel) else 0.0,
               cases=[{**c, "predicted_s": float(t)} for c, t in zip(cases, predicted, strict=True)])


def fit_machine(rec: dict[str, Any]) -> Machine:
    """The machine model (``sim.machine.model.Machine``) fitted to ``runners.commands.calibrate.measure``'s record;
    the fits go under ``model``."""
    p = int(rec["ranks"])
    sizes = [float(s) for s in rec["p2p_sizes"]]
    pairs = {pair: fit_alpha_beta(sizes, t) for pair, t in rec["p2p"].items()}
    pooled = [statistics.median([t[i] for t in rec["p2p"].values()]) for i in range(len(sizes))]
    p2p = fit_alpha_beta(sizes, pooled)
    knee = fit_knee(sizes, pooled)
    alpha, bw = float(p2p["alpha_s"]), float(p2p["bandwidth_Bps"])
    cap = fit_host_cap(rec, alpha, bw)
    host_bw = math.inf if cap["host_bandwidth_Bps"] is None else float(cap["host_bandwidth_Bps"])
    gamma: dict[str, Fit] = {}
    for dtype, rows in rec["reduce"].items():
        gamma[dtype] = Fit({how: fit_alpha_beta([float(s) for s in rec["reduce_sizes"]], t)
                            for how, t in rows.items()})
    reduce_bw = float(gamma["float32"]["together"]["bandwidth_Bps"]) if "float32" in gamma else None
    topo = host(p, bandwidth=bw, latency=alpha, host_bandwidth=host_bw if math.isfinite(host_bw) else None,
                name=f"calibrated:{p}")
    # Through the origin: the two sizes are large, and a copy's own fixed cost is µs (the runner's is `launch`).
    copy = fit_bandwidth([float(x) for x in rec["copy_sizes"]], rec["copies"]) if rec.get("copies") else None
    runner = fit_runner(rec["runner"], topo, reduce_bw, p, copy)
    coll: Fit | None = None
    if rec.get("collectives"):
        # What collectives see, not what the flow patterns suggest, sets H and γ (at 4 ranks the patterns'
        # cap was half of what large collectives reach); the runner's costs are refitted with them, twice.
        for _ in range(2):
            coll = fit_collectives(rec["collectives"], p, alpha=alpha, bw=bw, host_bw=host_bw, reduce_bw=reduce_bw,
                                   launch=float(runner["launch_s"]), message_cpu=float(runner["message_cpu_s"]),
                                   copy=copy)
            hb = coll["host_bandwidth_Bps"]
            host_bw = math.inf if hb is None else float(hb)
            rb = coll["reduce_bandwidth_Bps"]
            reduce_bw = None if rb is None else float(rb)
            topo = host(p, bandwidth=bw, latency=alpha,
                        host_bandwidth=host_bw if math.isfinite(host_bw) else None, name=f"calibrated:{p}")
            runner = fit_runner(rec["runner"], topo, reduce_bw, p, copy)
    engine = EngineParams(reduce_bandwidth=reduce_bw, launch=float(runner["launch_s"]),
                          message_cpu=float(runner["message_cpu_s"]))
    model = {"source": "collsched calibrate", "ranks": p, "seconds": rec.get("seconds"), "rounds": rec.get("rounds"),
             "p2p": {"pooled": p2p, "knee": knee, "pairs": pairs, "sizes": sizes, "times_s": rec["p2p"]},
             "flows": {"bytes": rec["flow_bytes"], "patterns": rec["patterns"], "times_s": rec["flows"], "fit": cap},
             "reduce": {"sizes": rec["reduce_sizes"], "times_s": rec["reduce"], "fit": gamma},
             "runner": runner, "runner_check": rec.get("runner_check", True)}
    if copy is not None:
        model["copies"] = {"sizes": rec["copy_sizes"], "times_s": rec["copies"], "fit": copy}
    if coll is not None:
        model["collectives"] = {"sizes": sorted({c["size"] for c in rec["collectives"]}), "fit": coll}
    return Machine(topo, engine, _finite(model))


def _finite(x: Any) -> Any:
    """``x`` as plain JSON values: numpy numbers as floats, infinities and NaN as None."""
    if isinstance(x, dict):
        return {str(k): _finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_finite(v) for v in x]
    if isinstance(x, float | np.floating):
        return float(x) if math.isfinite(float(x)) else None
    if isinstance(x, np.integer):
        return int(x)
    return x


def _gbps(bw: float | None) -> str:
    return "unlimited" if bw is None else f"{bw / 1e9:.3f} GB/s"


def calibration_report(machine: Machine) -> str:
    """A few lines on a machine fitted by ``fit_machine``: each figure and how well it fits its measurements."""
    m, e = machine.model, machine.engine
    p2p, knee, cap = m["p2p"]["pooled"], m["p2p"]["knee"], m["flows"]["fit"]
    hb = cap["host_bandwidth_Bps"]
    lines = [f"# collsched calibrate: {m['ranks']} ranks, {m['seconds'] or 0:.1f} s of measurements "
             f"({m.get('rounds') or 1} rounds, medians)",
             f"point-to-point  α = {p2p['alpha_s'] * 1e6:.1f} us, B = {_gbps(p2p['bandwidth_Bps'])} "
             f"(rms {p2p['rms_rel']:.1%}, max {p2p['max_rel']:.1%}; "
             f"{len(m['p2p']['pairs'])} pair(s), pooled medians)",
             f"knee            {knee['knee_bytes']:.0f} B: below α = {knee['below']['alpha_s'] * 1e6:.1f} us, "
             f"B = {_gbps(knee['below']['bandwidth_Bps'])}; above α = {knee['above']['alpha_s'] * 1e6:.1f} us, "
             f"B = {_gbps(knee['above']['bandwidth_Bps'])} (rms {knee['rms_rel']:.1%})",
             f"host cap        {'none' if hb is None else f'{hb / 1e9:.3f} GB/s'} over all ranks' flows "
             f"(patterns rms {cap['rms_rel']:.1%}: " + ", ".join(
                 f"{k} {m['flows']['times_s'][k] * 1e3:.2f}/{v * 1e3:.2f} ms" for k, v in cap["predicted_s"].items())
             + " measured/predicted)"]
    if "collectives" in m:
        c = m["collectives"]["fit"]
        lines.append(f"collectives     host cap {_gbps(c['host_bandwidth_Bps'])}, "
                     f"reduce {_gbps(c['reduce_bandwidth_Bps'])} (the model's figures: fitted to "
                     f"{len(c['cases'])} large runner collectives, rms "
                     f"{c['rms_rel']:.1%}; " + ", ".join(
                         f"{x['collective']}/{x['algorithm']} {x['size'] >> 20} MiB {x['time_s'] * 1e3:.1f}/"
                         f"{x['predicted_s'] * 1e3:.1f} ms" for x in c["cases"]) + " measured/predicted)")
    if "copies" in m:
        cf = m["copies"]["fit"]
        lines.append(f"buffer copy     {_gbps(cf['bandwidth_Bps'])} (zero-fill and copy into fresh memory, every rank "
                     f"at once, α = {cf['alpha_s'] * 1e6:.1f} us; rms {cf['rms_rel']:.1%}): the runner's private "
                     "input copy")
    for dtype, g in m["reduce"]["fit"].items():
        lines.append(f"reduce {dtype:<9} γ = {_gbps(g['together']['bandwidth_Bps'])} every rank at once, "
                     f"{_gbps(g['alone']['bandwidth_Bps'])} alone (rms {g['together']['rms_rel']:.1%})")
    r = m["runner"]
    lines.append(f"runner          launch = {(e.launch or 0.0) * 1e6:.1f} us per call, "
                 f"message_cpu = {e.message_cpu * 1e6:.1f} us per message sent or received "
                 f"(rms {r['rms_rel']:.1%} over {len(r['cases'])} runs, "
                 f"{len(r['dropped'])} dropped as outliers)")
    return "\n".join(lines)


