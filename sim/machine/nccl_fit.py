"""``collsched fit --nccl-tests LOG... -t PRESET``: a GPU preset fitted to a user's own nccl-tests logs.

Three figures are fitted, each where the logs can tell it: the NVLink efficiency (the fraction of NVLink's
line rate NCCL's Simple protocol reaches), the NIC efficiency (the same per NIC; only with more than one
node) and one scale on every NCCL latency (``baseLat`` and ``hwLat`` of every algorithm and protocol,
``sim.machine.nccl.latency_scale``). The objective is the squared log ratio of ``-a nccl``'s simulated time
to the measured one, summed over every row of every log (out-of-place times), minimised by
``scipy.optimize.least_squares`` within bounds; every evaluation simulates every row, so the fit is the
simulator's, not a formula's. The result is a machine file (a ``collsched.topology/1`` document with the
preset's nodes, the fitted link rates, the latency scale and the fit's record in ``model``) that every
command takes as ``-t machine.json``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.machine.model import Machine
from sim.machine.published import Table, from_nccl_tests
from sim.topology.gpus import SYSTEMS, GpuSystem, gpu_cluster
from sim.topology.graph import Topology

__all__ = ["NcclFit", "fit_logs", "fitted_topology"]

BOUNDS = {"nvlink_efficiency": (0.2, 1.0), "nic_efficiency": (0.2, 1.0), "latency_scale": (0.2, 5.0)}


def fitted_topology(system: GpuSystem, nodes: int, *, nvlink_efficiency: float, nic_efficiency: float,
                    latency_scale: float) -> Topology:
    """The preset with these figures (``latency_scale`` in the graph, where the NCCL model reads it)."""
    t = gpu_cluster(system.with_figures(nvlink_efficiency=nvlink_efficiency, nic_efficiency=nic_efficiency), nodes)
    g = t.graph.copy()
    g.graph["nccl_latency_scale"] = float(latency_scale)
    return Topology(g, f"{t.name} (fitted)", t.routes)


@dataclass
class NcclFit:
    """The fitted figures, each with its bounds' check, the per-log errors after the fit, and the machine."""

    figures: dict[str, float]
    fitted: tuple[str, ...]
    residual: float
    logs: list[dict[str, Any]]
    machine: Machine


def _errors(tables: list[Table], topo: Topology) -> np.ndarray:
    from sim.machine.nccl import simulate_nccl

    out = []
    for t in tables:
        algo = t.forced_algo
        for size, measured in t.rows:
            run = simulate_nccl(t.collective, topo, size, algo=algo)
            out.append(math.log(run.time / measured))
    return np.array(out)


def fit_logs(paths: list[str], preset: str) -> NcclFit:
    """Fit ``preset`` (``NAME:N``, a GPU preset) to the nccl-tests logs at ``paths`` (module docstring);
    ``ValueError`` naming the problem (a log that cannot be read names its file and line)."""
    from scipy.optimize import least_squares

    name, _, n = preset.partition(":")
    if name not in SYSTEMS or not n.isdigit() or int(n) < 1:
        raise ValueError(f"-t {preset}: fit needs a GPU preset NAME:N ({', '.join(SYSTEMS)})")
    system, nodes = SYSTEMS[name], int(n)
    tables = [from_nccl_tests(p) for p in paths]
    points = sum(len(t.rows) for t in tables)
    if not points:
        raise ValueError("the logs hold no timed rows")
    keys = ["nvlink_efficiency", *(["nic_efficiency"] if nodes > 1 else []), "latency_scale"]
    start = {"nvlink_efficiency": system.nvlink_efficiency, "nic_efficiency": system.nic_efficiency,
             "latency_scale": 1.0}

    def topo_of(x: np.ndarray) -> Topology:
        f = dict(start, **dict(zip(keys, (float(v) for v in x), strict=True)))
        return fitted_topology(system, nodes, **f)

    x0 = np.array([start[k] for k in keys])
    lo = np.array([BOUNDS[k][0] for k in keys])
    hi = np.array([BOUNDS[k][1] for k in keys])
    res = least_squares(lambda x: _errors(tables, topo_of(x)), x0, bounds=(lo, hi), diff_step=1e-3,
                        xtol=1e-6, ftol=1e-8, max_nfev=60)
    figures = dict(start, **dict(zip(keys, (float(v) for v in res.x), strict=True)))
    topo = topo_of(res.x)
    errs = np.exp(res.fun) - 1
    logs = []
    i = 0
    for t in tables:
        e = errs[i:i + len(t.rows)]
        i += len(t.rows)
        logs.append({"log": str(t.path), "collective": t.collective, "points": len(t.rows),
                     "median_abs_error": float(np.median(np.abs(e))) if len(e) else None})
    residual = float(np.sqrt(np.mean(res.fun ** 2)))
    model = {"nccl_fit": {"preset": preset, "figures": figures, "fitted": keys, "rms_log_residual": residual,
                          "logs": logs}}
    return NcclFit(figures, tuple(keys), residual, logs, Machine(topo, model=model))
