"""``collsched fit --nccl-tests LOG... -t PRESET``: a GPU preset fitted to a user's own nccl-tests logs.

What a log can tell is fitted, each figure apart, and everything else is kept from the preset (its topology, its
other tiers, its switches' capabilities, its fabric's figures):

- ``nvlink_efficiency``: the fraction of NVLink's line rate reached (every NVLink link);
- ``nic_efficiency``: the fraction of the NICs' line rate reached (every network link; only with rows that
  cross nodes);
- ``nvls_rate``: a factor on the NVSwitch's NVLS port rate (only with rows NCCL ran as NVLS or NVLSTree);
- ``latency_LL``, ``latency_LL128``, ``latency_Simple``: a factor on every NCCL latency of that protocol (base
  and per step, NVLink and network).

Several logs fit together: other collectives, other node counts (each log is simulated on the preset with its
own node count, from its ``Rank`` lines or its ``nodes_x_gpus``), each with the NCCL release it prints (or
``nccl_version``). The objective is the squared log ratio of ``-a nccl``'s simulated time to the measured one
over every row (out-of-place times); a figure is fitted only where it moves some row's time by at least
``PINNED`` of its own change (the derivative at the preset's figures), and the others are reported as not
pinned down by these logs and kept. ``scipy.optimize.least_squares`` then fits the pinned ones within
``BOUNDS``; every evaluation simulates every row, so the fit is the simulator's, not a formula's. The result
is a machine file (the preset with the fitted figures: link rates, switch rate, ``nodes.nccl.latency``) that
every command takes as ``-t machine.json``; ``fitted_topology`` builds the same machine at another node count,
which is how one log predicts another (docs/usage.md, "Fit on one log, predict another").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from sim.machine.model import Machine
from sim.machine.published import Table, from_nccl_tests
from sim.topology.graph import Topology

__all__ = ["BOUNDS", "FIGURES", "PINNED", "NcclFit", "fit_logs", "fit_tables", "fitted_topology", "table_nodes"]

FIGURES = ("nvlink_efficiency", "nic_efficiency", "nvls_rate", "latency_LL", "latency_LL128", "latency_Simple")
BOUNDS = {"nvlink_efficiency": (0.2, 1.0), "nic_efficiency": (0.1, 1.0), "nvls_rate": (0.2, 2.0),
          "latency_LL": (0.2, 10.0), "latency_LL128": (0.2, 10.0), "latency_Simple": (0.2, 10.0)}
PINNED = 0.02
"""A figure is fitted when a 1% change of it moves some row's time by at least this many percent."""


def _spec_at(preset: str, nodes: int) -> str:
    name, _, rest = preset.partition(":")
    _, at, options = rest.partition("@")
    return f"{name}:{nodes}" + (f"@{options}" if at else "")


def fitted_topology(preset: str, figures: Mapping[str, float], *, nodes: int | None = None,
                    nccl_version: str | None = None) -> Topology:
    """The GPU preset ``preset`` (``NAME:N[@options]``; ``nodes``: at another node count) with fitted ``figures``
    (any of ``FIGURES``; the others stay the preset's): its links, switches, fabric and tiers otherwise as built."""
    from sim.topology import from_spec
    from sim.topology.gpus import system_of
    from sim.topology.switches import capabilities

    base = from_spec(_spec_at(preset, nodes) if nodes is not None else preset)
    system = system_of(base)
    if system is None:
        raise ValueError(f"-t {preset}: fit needs a GPU preset NAME:N ({_presets()})")
    g = base.graph.copy()
    nvl = figures.get("nvlink_efficiency", system.nvlink_efficiency) / system.nvlink_efficiency
    nic = figures.get("nic_efficiency", system.nic_efficiency) / system.nic_efficiency
    for _u, _v, a in g.edges(data=True):
        a["bandwidth"] = float(a["bandwidth"]) * (nvl if a.get("medium") == "nvlink" else nic)
    g.graph["nvlink_efficiency"] = figures.get("nvlink_efficiency", system.nvlink_efficiency)
    g.graph["fabric"] = {**system.fabric.to_dict(), "efficiency": figures.get("nic_efficiency",
                                                                               system.nic_efficiency)}
    rate = figures.get("nvls_rate", 1.0)
    for n in list(g.nodes):
        caps = capabilities(base, n)
        if caps is not None and caps.domain == "nvls" and rate != 1.0:
            g.nodes[n]["caps"] = replace(caps, bandwidth=caps.bandwidth * rate,
                                         source=f"{caps.source}; x{rate:.3g} fitted (collsched fit)")
    nccl: dict[str, Any] = {"latency": {p: float(figures.get(f"latency_{p}", 1.0)) for p in ("LL", "LL128", "Simple")}}
    if nccl_version is not None:
        nccl["version"] = nccl_version
    g.graph["nccl"] = nccl
    return Topology(g, f"{base.name} (fitted)", base.routes)


def _presets() -> str:
    from sim.topology.gpus import SYSTEMS

    return ", ".join(SYSTEMS)


def table_nodes(table: Table, gpus_per_node: int) -> int | None:
    """The node count a log ran on: its ``nodes_x_gpus`` header or its ranks over the preset's GPUs per node."""
    text = table.header.get("nodes_x_gpus", "")
    if "x" in text:
        n, _, g = text.partition("x")
        if n.strip().isdigit() and g.strip().isdigit() and int(g) == gpus_per_node:
            return int(n)
    ranks = table.header.get("ranks")
    if ranks and ranks.isdigit() and int(ranks) % gpus_per_node == 0:
        return int(ranks) // gpus_per_node
    return None


@dataclass
class NcclFit:
    """The figures (fitted and kept), which were fitted and which the logs could not pin down (and why), the
    residual, the per-log errors after the fit, and the machine."""

    figures: dict[str, float]
    fitted: tuple[str, ...]
    unpinned: dict[str, str]
    residual: float
    logs: list[dict[str, Any]]
    machine: Machine
    preset: str = ""
    nccl_version: str | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)

    def topology(self, nodes: int | None = None) -> Topology:
        """The fitted machine at ``nodes`` nodes (default: the fit's own)."""
        return fitted_topology(self.preset, self.figures, nodes=nodes, nccl_version=self.nccl_version)


def _simulate(tables: Sequence[Table], preset: str, figures: Mapping[str, float], nodes: Sequence[int],
              version: str | None) -> tuple[np.ndarray, list[dict[str, Any]]]:
    from sim.machine.nccl import simulate_nccl

    topos: dict[int, Topology] = {}
    logs, rows = [], []
    for t, n in zip(tables, nodes, strict=True):
        topo = topos.get(n) or topos.setdefault(n, fitted_topology(preset, figures, nodes=n))
        for size, measured in t.rows:
            run = simulate_nccl(t.collective, topo, size, algo=t.forced_algo,
                                nccl_version=version or t.nccl_version)
            simulated = run.time + t.host_overhead_s  # a -g N log's host launches (published.HOST_LAUNCH_PER_GPU)
            logs.append(math.log(simulated / measured))
            rows.append({"log": str(t.path), "size": size, "nodes": n, "nccl": run.nccl.algorithm,
                         "protocol": run.simulated.protocol, "measured_s": measured, "simulated_s": simulated})
    return np.array(logs), rows


def _start(preset: str) -> dict[str, float]:
    from sim.topology import TopologyError, from_spec
    from sim.topology.gpus import system_of

    try:
        system = system_of(from_spec(preset))
    except TopologyError as e:
        raise ValueError(f"-t {preset}: {e}") from None
    if system is None:
        raise ValueError(f"-t {preset}: fit needs a GPU preset NAME:N ({_presets()})")
    return {"nvlink_efficiency": system.nvlink_efficiency, "nic_efficiency": system.nic_efficiency,
            "nvls_rate": 1.0, "latency_LL": 1.0, "latency_LL128": 1.0, "latency_Simple": 1.0}


def fit_tables(tables: Sequence[Table], preset: str, *, nccl_version: str | None = None,
               max_evaluations: int = 15) -> NcclFit:
    """Fit ``preset`` (``NAME:N[@options]``) to ``tables`` (module docstring); ``ValueError`` naming the problem."""
    from scipy.optimize import least_squares

    from sim.topology import from_spec
    from sim.topology.gpus import node_size

    count = preset.partition(":")[2].partition("@")[0]
    if not count.isdigit() or int(count) < 1:
        raise ValueError(f"-t {preset}: fit needs a GPU preset NAME:N ({_presets()})")
    start = _start(preset)
    gpn = node_size(from_spec(preset)) or 1
    nodes = [table_nodes(t, gpn) or int(count) for t in tables]
    if not sum(len(t.rows) for t in tables):
        raise ValueError("the logs hold no timed rows")
    base, rows = _simulate(tables, preset, start, nodes, nccl_version)
    # Which figures the logs pin down: d log(time) / d log(figure) at the preset's figures, by a 5% step.
    sensitivity: dict[str, float] = {}
    for k in FIGURES:
        if k == "nic_efficiency" and max(nodes) == 1:
            sensitivity[k] = 0.0
            continue
        moved = dict(start, **{k: start[k] * 1.05})
        if moved[k] > BOUNDS[k][1]:
            moved[k] = start[k] / 1.05
        after, _ = _simulate(tables, preset, moved, nodes, nccl_version)
        sensitivity[k] = float(np.max(np.abs(after - base))) / abs(math.log(moved[k] / start[k]))
    keys = [k for k in FIGURES if sensitivity[k] >= PINNED]
    unpinned = {k: ("the logs have no row across nodes" if k == "nic_efficiency" and max(nodes) == 1 else
                    f"no row's time moves with it (at most {sensitivity[k]:.3f}% per 1%)")
                for k in FIGURES if k not in keys}
    figures = dict(start)
    residual = float(np.sqrt(np.mean(base ** 2)))
    errs = base
    if keys:
        def f(x: np.ndarray) -> np.ndarray:
            fig = dict(start, **{k: float(math.exp(v)) for k, v in zip(keys, x, strict=True)})
            return _simulate(tables, preset, fig, nodes, nccl_version)[0]

        x0 = np.array([math.log(start[k]) for k in keys])
        lo = np.array([math.log(BOUNDS[k][0]) for k in keys])
        hi = np.array([math.log(BOUNDS[k][1]) for k in keys])
        res = least_squares(f, np.clip(x0, lo + 1e-9, hi - 1e-9), bounds=(lo, hi), diff_step=1e-2, xtol=1e-3,
                            ftol=1e-4, max_nfev=max_evaluations)
        figures.update({k: float(math.exp(v)) for k, v in zip(keys, res.x, strict=True)})
        errs, rows = _simulate(tables, preset, figures, nodes, nccl_version)
        residual = float(np.sqrt(np.mean(errs ** 2)))
    logs, i = [], 0
    for t, n in zip(tables, nodes, strict=True):
        e = np.exp(errs[i:i + len(t.rows)]) - 1
        i += len(t.rows)
        logs.append({"log": str(t.path), "collective": t.collective, "nodes": n, "points": len(t.rows),
                     "nccl_version": nccl_version or t.nccl_version,
                     "median_abs_error": float(np.median(np.abs(e))) if len(e) else None})
    topo = fitted_topology(preset, figures, nccl_version=nccl_version)
    model = {"nccl_fit": {"preset": preset, "figures": figures, "fitted": keys, "not_pinned": unpinned,
                          "rms_log_residual": residual, "logs": logs}}
    return NcclFit(figures, tuple(keys), unpinned, residual, logs, Machine(topo, model=model), preset,
                   nccl_version, rows)


def fit_logs(paths: list[str], preset: str, *, nccl_version: str | None = None) -> NcclFit:
    """``fit_tables`` of the nccl-tests logs (or published ``.tsv`` tables) at ``paths``; a log that cannot be read
    is a ``ValueError`` naming its file and line."""
    _start(preset)  # a GPU preset, before any log is read
    return fit_tables([from_nccl_tests(p) for p in paths], preset, nccl_version=nccl_version)
