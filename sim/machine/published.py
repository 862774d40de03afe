"""Published nccl-tests tables against ``-a nccl``: reading the tables, scoring the simulator on them.

A table is a ``.tsv`` file (the format of the shared published tables' README, beside the repository):
``# key: value`` header lines (``preset``, ``collective``, ``nccl_algo``, ``source``, ...), a tab-separated
header row
``size_bytes time_us algbw_GBps busbw_GBps`` and one row per size, sizes in the nccl-tests convention.
``score`` simulates NCCL's pick for every row on the table's preset (``sim.machine.nccl.simulate_nccl``; a
table whose ``nccl_algo`` forces an algorithm, e.g. ``Ring (NCCL_ALGO=Ring)``, forces it here too) and
gives the relative errors, their median and 90th percentile, and the median ratio simulated / measured per
regime (<= 64 KiB, between, >= 64 MiB); a table run with ``-g N`` (one thread launching N GPUs) has the host's
launch cost for the N - 1 GPUs beyond the first added to every call (``HOST_LAUNCH_PER_GPU``). Rows where
NCCL runs an in-switch reduction (NVLS, NVLSTree) are scored apart (``nvls_rows``), whether simulated with the
in-switch schedules or, where those are not registered, with the best other pair.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["HOST_LAUNCH_PER_GPU", "REGIMES", "Table", "TableScore", "from_nccl_tests", "load_table", "score",
           "skip_reason", "tables_in"]

REGIMES = (("<=64KiB", 0, 64 << 10), ("between", (64 << 10) + 1, (64 << 20) - 1), (">=64MiB", 64 << 20, math.inf))
HOST_LAUNCH_PER_GPU = 2.55e-6
"""Seconds a call costs on the host for each GPU a thread drives beyond its first (nccl-tests ``-g N``: one thread
launches the call on N GPUs in one group, src/common.cu; NCCL's maintainers put the higher latency of ``-g 8``
down to CUDA's single-process launch overheads, nccl-tests issue #333). The figure is the slope, through the
origin, of nccl-tests issue #123's DGX-A100 curve (``NCCL_ALGO=Ring NCCL_MAX_NCHANNELS=1 all_reduce_perf -b 8 -e
128 -g N``: 10.0, 13.76, 16.88, 20.8, 25.2, 29.5, 33.7 us for N = 2 to 8) above NCCL's LL ring model of the same
calls (6.6 + 2 (N - 1) x 0.6 us): 2.2 to 18.7 us, 2.55 us per GPU beyond the first. It is added to every call of
a table that ran with ``-g`` above 1 (``Table.gpus_per_thread``); MPI's one GPU a process adds none."""


@dataclass
class Table:
    path: Path
    header: dict[str, str]
    rows: list[tuple[int, float]]  # (size bytes, measured seconds)

    @property
    def preset(self) -> str:
        return self.header.get("preset", "")

    @property
    def collective(self) -> str:
        return self.header.get("collective", "")

    @property
    def nccl_version(self) -> str | None:
        """``MAJOR.MINOR`` of the NCCL release the table's header names (``nccl_version``, or the nccl-tests
        log's ``NCCL version`` line), or None where it names none (``not printed``)."""
        from sim.machine.nccl_versions import parse_version

        text = self.header.get("nccl_version", "")
        return None if text.strip().lower().startswith("not printed") else parse_version(text)

    @property
    def gpus_per_thread(self) -> int:
        """GPUs each nccl-tests thread drives (``-g``): the log's ``nGpus`` header value, else the ``-g N`` of the
        table's ``command`` line; 1 where neither says."""
        if "nGpus" in self.header:
            return max(1, int(float(self.header["nGpus"])))
        m = re.search(r"(?:^|\s)-g\s*(\d+)\b", self.header.get("command", ""))
        return max(1, int(m.group(1))) if m else 1

    @property
    def host_overhead_s(self) -> float:
        """The host's cost per call of the harness the table ran under (``HOST_LAUNCH_PER_GPU``)."""
        return HOST_LAUNCH_PER_GPU * (self.gpus_per_thread - 1)

    @property
    def forced_algo(self) -> str | None:
        """The algorithm the table forced (``NCCL_ALGO=Ring`` -> ``ring``), or None for NCCL's default."""
        text = self.header.get("nccl_algo", "")
        m = re.search(r"NCCL_ALGO=(\w+)", text)
        if m:
            return m.group(1).lower()
        m = re.match(r"\s*(ring|tree|nvls|nvlstree|pat)\b", text, re.IGNORECASE)  # e.g. "Ring (NCCL_NVLS_ENABLE=0)"
        return m.group(1).lower().replace("nvlstree", "nvls_tree") if m else None


def load_table(path: str | Path) -> Table:
    """Read one published ``.tsv`` table (``sim.machine.nccl_tests.read_published``, which checks its rows); its
    header lines and out-of-place times. ``ValueError`` naming the file and line when it cannot be read."""
    from sim.machine.nccl_tests import read_published

    t = read_published(path)
    header = {str(k): str(v) for k, v in dict(t.params).items()}
    for key in ("preset", "collective"):
        if key not in header:
            raise ValueError(f"{path}: no '# {key}:' header line")
    header["collective"] = str(t.collective)
    return Table(Path(path), header, [(int(r.size), float(r.oop.time_us) * 1e-6) for r in t.rows
                                        if r.oop.time_us is not None])


def skip_reason(table: Table) -> str | None:
    """Why ``table`` cannot be scored on its preset (its own ``# preset_fit`` line where the preset is not a SPEC
    this model builds), or None."""
    from sim.topology.forms import from_spec
    from sim.topology.gpus import node_size

    try:
        topo = from_spec(table.preset)
    except Exception:
        return f"preset {table.preset!r}: {table.header.get('preset_fit', 'not a GPU preset')}"
    if node_size(topo) is None:
        return f"preset {table.preset!r} is not a GPU preset"
    return None


def tables_in(dirs: Iterable[str | Path]) -> list[Table]:
    """Every ``.tsv`` table in the directories (sorted by name)."""
    out = []
    for d in dirs:
        for p in sorted(Path(d).glob("*.tsv")):
            out.append(load_table(p))
    return out


@dataclass
class TableScore:
    table: Table
    rows: list[dict[str, Any]] = field(default_factory=list)

    def _kept(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if not r["nvls"]]

    @property
    def nvls_rows(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["nvls"]]

    def stats(self, rows: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        rows = self._kept() if rows is None else rows
        errs = [abs(r["error"]) for r in rows]
        worst = max(rows, key=lambda r: abs(r["error"]), default=None)
        out: dict[str, Any] = {"points": len(rows),
                               "median": float(np.percentile(errs, 50)) if errs else None,
                               "p90": float(np.percentile(errs, 90)) if errs else None,
                               "worst": None if worst is None else (abs(worst["error"]), worst["size"])}
        for name, lo, hi in REGIMES:
            rs = [r["simulated_s"] / r["measured_s"] for r in rows if lo <= r["size"] <= hi]
            out[name] = float(np.median(rs)) if rs else None
        return out


def from_nccl_tests(path: str | Path) -> Table:
    """A table from an nccl-tests log as printed (or a published ``.tsv``), through the nccl-tests parser
    (``sim.machine.nccl_tests``): its out-of-place times; ``ValueError`` naming the file and line when it
    cannot be read."""
    from sim.machine import nccl_tests

    t = nccl_tests.load(path)
    rows = [(int(r.size), float(r.oop.time_us) * 1e-6) for r in t.rows if r.oop.time_us]
    header = {str(k): str(v) for k, v in dict(t.params).items()}
    header["collective"] = str(t.collective)
    if t.nccl_version and "nccl_version" not in header:
        header["nccl_version"] = t.nccl_version
    if t.ranks and "ranks" not in header:
        header["ranks"] = str(t.ranks)
    if t.ranks and t.nodes and t.gpus_per_node and "nodes_x_gpus" not in header:
        header["nodes_x_gpus"] = f"{t.nodes}x{t.gpus_per_node}"
    # A forced algorithm shows in the log as NCCL prints it with NCCL_DEBUG=INFO ("NCCL INFO NCCL_ALGO set by
    # environment to Ring") or as the variable itself (a launcher echoing NCCL_ALGO=Ring).
    m = re.search(r"NCCL_ALGO(?:=| set by environment to )\s*(\w+)", nccl_tests.read_text(path))
    if m:
        header["nccl_algo"] = f"NCCL_ALGO={m.group(1)}"
    return Table(Path(path), header, rows)


def score(table: Table, topology: Any = None, *, algo: str | None = None, **engine: Any) -> TableScore:
    """Simulate ``-a nccl`` for every row of ``table`` (module docstring) on ``topology`` (default: the table's
    preset); ``algo`` forces NCCL's algorithm (default: what the table forced, if anything)."""
    from sim.machine.nccl import simulate_nccl
    from sim.topology.forms import from_spec

    topo = topology if topology is not None else from_spec(table.preset)
    algo = algo or table.forced_algo
    engine.setdefault("nccl_version", table.nccl_version)
    out = TableScore(table)
    for size, measured in table.rows:
        run = simulate_nccl(table.collective, topo, size, algo=algo, **engine)
        t = run.time + table.host_overhead_s
        out.rows.append({"size": size, "measured_s": measured, "simulated_s": t, "error": (t - measured) / measured,
                         "nccl": f"{run.nccl.algorithm}/{run.nccl.protocol}",
                         "simulated": f"{run.simulated.algorithm}/{run.simulated.protocol}",
                         "schedule": run.schedule,
                         "nvls": run.nccl.algorithm in ("nvls", "nvls_tree")})
    return out
