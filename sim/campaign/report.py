"""A campaign's report from its store: the winners, heatmaps, CSV.

For each collective, topology, mode, runtime and size: the winner (least simulated time among the correct
runs), the runner-up and its margin (runner-up time / winner time - 1), and the winner's efficiency against
the bound (``sim.bounds``: bound / time). Heatmaps: per collective, topology, mode and runtime, algorithm
variant x size, each cell the variant's time over the fastest at that size. CSV: every row, or the winners.
Only the campaign's own configurations are read (their keys), so one store may hold several campaigns.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sim.campaign.spec import Campaign, Config
from sim.campaign.store import Store

__all__ = ["CSV_COLUMNS", "Report", "Winner", "heatmaps", "load_report", "write_csv", "write_winners_csv"]

CSV_COLUMNS = ("key", "collective", "variant", "algorithm", "params", "topology", "spec", "ranks", "size", "mode",
               "runtime", "status", "time_s", "algbw_GBps", "busbw_GBps", "transfers", "engine", "bound_s",
               "efficiency", "error", "wall_s", "code")


@dataclass(frozen=True)
class Winner:
    """The fastest correct variant of one (collective, topology, mode, runtime, size), and who came second."""

    collective: str
    topology: str
    ranks: int
    mode: str
    runtime: str
    size: int
    winner: str
    algorithm: str
    params: dict[str, Any]
    """The winner's parameters as it ran (``group`` set to a GPU preset's node size where the algorithm takes
    one): what a tuning table's rule names."""
    time_s: float
    runner_up: str | None
    runner_up_s: float | None
    margin: float | None
    """Runner-up time over the winner's, less one (0.25: the runner-up takes 25% longer)."""
    bound_s: float | None
    efficiency: float | None
    candidates: int


@dataclass
class Report:
    """The campaign's stored rows (each with its ``variant`` and ``topology`` labels) and its winners."""

    campaign: Campaign
    rows: list[dict[str, Any]]
    winners: list[Winner]
    missing: int

    def codes(self) -> dict[str, int]:
        """Rows per source hash (``simulate.code_hash``): more than one means the rows were computed by
        different code (the tree changed during the campaign, or workers run another checkout)."""
        out: dict[str, int] = {}
        for r in self.rows:
            key = r.get("code") or "?"
            out[key] = out.get(key, 0) + 1
        return out

    def statuses(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows:
            out[r["status"]] = out.get(r["status"], 0) + 1
        return out


def load_report(campaign: Campaign, store: Store) -> Report:
    """The report of ``campaign`` from what ``store`` holds of it (configurations not computed yet are counted
    in ``missing``)."""
    configs: dict[str, Config] = {}
    for c in campaign.configs():
        configs.setdefault(c.key, c)
    rows = []
    for stored in store.rows(configs):
        c = configs[stored["key"]]
        rows.append({**stored, "variant": c.variant.label, "topology": c.topology.label, "spec": c.topology.spec,
                     "runtime": stored["runtime"] or c.runtime or "default",
                     "_runtime_axis": c.runtime or "default"})
    order = {c.key: i for i, c in enumerate(configs.values())}
    rows.sort(key=lambda r: order[r["key"]])
    return Report(campaign, rows, _winners(rows), len(configs) - len(rows))


def _group(r: dict[str, Any]) -> tuple[str, str, str, str, int]:
    return (r["collective"], r["topology"], r["mode"], r["_runtime_axis"], r["size"])


def _winners(rows: Sequence[dict[str, Any]]) -> list[Winner]:
    groups: dict[tuple[str, str, str, str, int], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(_group(r), [])
        if r["status"] == "ok" and r["time_s"] is not None:
            groups[_group(r)].append(r)
    out = []
    for (coll, topo, mode, _rt, size), cands in groups.items():
        if not cands:
            continue
        cands.sort(key=lambda r: (r["time_s"], r["variant"]))
        w = cands[0]
        second = cands[1] if len(cands) > 1 else None
        out.append(Winner(
            collective=coll, topology=topo, ranks=int(w["ranks"]), mode=mode, runtime=w["runtime"], size=size,
            winner=w["variant"], algorithm=w["algorithm"], params=json.loads(w["params"] or "{}"),
            time_s=w["time_s"], runner_up=second["variant"] if second else None,
            runner_up_s=second["time_s"] if second else None,
            margin=second["time_s"] / w["time_s"] - 1 if second and w["time_s"] > 0 else None,
            bound_s=w["bound_s"], efficiency=w["efficiency"], candidates=len(cands)))
    return out


def _write(path: str | Path, columns: Sequence[str], rows: Iterable[dict[str, Any]]) -> None:
    from algorithms.errors import UsageError

    try:
        with open(path, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
            w.writeheader()
            for r in rows:
                w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in columns})
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from None


def write_csv(report: Report, path: str | Path) -> None:
    """Every stored row of the campaign, one line each (``CSV_COLUMNS``)."""
    _write(path, CSV_COLUMNS, report.rows)


def write_winners_csv(report: Report, path: str | Path) -> None:
    """The winners, one line per (collective, topology, mode, runtime, size)."""
    cols = [f for f in Winner.__dataclass_fields__]
    _write(path, cols, ({**asdict(w), "params": _params_text(w.params)} for w in report.winners))


def _params_text(params: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(params.items()))


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=+-]+", "_", text).strip("_") or "x"


def heatmaps(report: Report, directory: str | Path) -> list[Path]:
    """One PNG per (collective, topology, mode, runtime): algorithm variant x size, each cell the variant's
    time over the fastest correct one at that size (1 = the winner, marked *); blank where it did not run,
    failed, or cannot serve the world size. The paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    from sim.cli.common import human_size

    out_dir = Path(directory)
    out_dir.mkdir(parents=True, exist_ok=True)
    panels: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    for r in report.rows:
        panels.setdefault((r["collective"], r["topology"], r["mode"], r["_runtime_axis"]), []).append(r)
    written = []
    for (coll, topo, mode, rt), rows in panels.items():
        variants = list(dict.fromkeys(r["variant"] for r in rows))
        sizes = sorted({r["size"] for r in rows})
        best = {s: min((r["time_s"] for r in rows if r["size"] == s and r["status"] == "ok" and r["time_s"]),
                       default=math.nan) for s in sizes}
        grid = [[math.nan] * len(sizes) for _ in variants]
        for r in rows:
            if r["status"] == "ok" and r["time_s"]:
                grid[variants.index(r["variant"])][sizes.index(r["size"])] = r["time_s"] / best[r["size"]]
        finite = [v for line in grid for v in line if math.isfinite(v)]
        fig, ax = plt.subplots(figsize=(max(4.0, 0.7 * len(sizes) + 3), max(2.5, 0.32 * len(variants) + 1.5)))
        hi = max(finite, default=1.0)
        im = ax.imshow(grid, aspect="auto", cmap="viridis_r", norm=LogNorm(vmin=1.0, vmax=max(hi, 1.01)))
        ax.set_xticks(range(len(sizes)), [human_size(s) for s in sizes], rotation=45, ha="right", fontsize=7)
        ax.set_yticks(range(len(variants)), variants, fontsize=7)
        if len(variants) * len(sizes) <= 600:
            for i, line in enumerate(grid):
                for j, v in enumerate(line):
                    if math.isfinite(v):
                        ax.text(j, i, "*" if v == 1.0 else f"{v:.2g}", ha="center", va="center", fontsize=6,
                                color="white" if v > math.sqrt(max(hi, 1.01)) else "black")
        from matplotlib.ticker import FormatStrFormatter

        cbar = fig.colorbar(im, ax=ax, label="time / fastest")
        cbar.ax.yaxis.set_major_formatter(FormatStrFormatter("%.3g"))
        cbar.ax.yaxis.set_minor_formatter(FormatStrFormatter("%.2g"))
        ax.set_title(f"{coll} on {topo} ({mode}, {rt})", fontsize=9)
        fig.tight_layout()
        path = out_dir / f"{_slug(coll)}-{_slug(topo)}-{mode}-{_slug(rt)}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
