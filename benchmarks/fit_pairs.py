"""Fit on one log, predict another of the same machine: ``collsched fit``'s documented use, on the published tables.

    python benchmarks/fit_pairs.py            # or: python benchmarks/published.py --fit

For every machine with several logs in tests/data/published (``PAIRS``: the same machine type, another collective,
node count or source), fits the spec that describes it (``published.DESCRIBED``, else the table's preset) to one
log (``sim.machine.nccl_fit.fit_tables``) and scores ``-a nccl`` on the fitted machine against the other log(s),
each at its own node count. Prints the fitted figures, what the log could not pin down, the fit's own error and
each prediction's median, p90 and worst |error|. Asserts nothing. A fit takes about a minute here (every
evaluation simulates every row).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.machine.nccl_fit import fit_tables, table_nodes  # noqa: E402
from sim.machine.published import Table, load_table, score  # noqa: E402

PAIRS = (
    # (fit on, predict, why they are the same machine)
    ("b200_2x8_allgather_gcpdocs_a4vms", ("b200_1x8_allreduce_gputpupedia_gcpa4",), "GCP A4 (a4-highgpu-8g)"),
    ("b200_1x8_allreduce_gputpupedia_gcpa4", ("b200_2x8_allgather_gcpdocs_a4vms",), "GCP A4 (a4-highgpu-8g)"),
    ("h100_2x8_allreduce_nccltests309_default", ("h100_2x8_allreduce_nccltests309_ring",),
     "2 x 8 H100 + 8 x 400G IB, nccl-tests #309"),
    ("h100_2x8_allreduce_nccltests309_ring", ("h100_2x8_allreduce_nccltests309_default",),
     "2 x 8 H100 + 8 x 400G IB, nccl-tests #309"),
    ("h200_1x8_allgather_16G_mlengineering", ("h200_1x8_allreduce_ring_16G_mlengineering",
                                              "h200_1x8_reducescatter_16G_mlengineering"), "the same 8 x H200 node"),
)


def _spec(t: Table) -> str:
    from published import DESCRIBED  # benchmarks/published.py

    return DESCRIBED.get(t.path.stem, t.preset)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def run_pairs(tables: list[Table] | None = None) -> list[dict[str, Any]]:
    """Fit and predict every pair whose tables are at hand; print and return the scores."""
    folder = ROOT / "tests" / "data" / "published"
    by_name = {t.path.stem: t for t in tables} if tables else {}
    out = []
    print("# fit on one log, predict another of the same machine (collsched fit; benchmarks/fit_pairs.py)")
    for fit_on, predict, machine in PAIRS:
        names = (fit_on, *predict)
        got = {n: by_name.get(n) or load_table(folder / f"{n}.tsv") for n in names if
               n in by_name or (folder / f"{n}.tsv").is_file()}
        if len(got) != len(names):
            continue
        spec = _spec(got[fit_on])
        t0 = time.perf_counter()
        f = fit_tables([got[fit_on]], spec)
        wall = time.perf_counter() - t0
        figures = ", ".join(f"{k} {f.figures[k]:.3g}" for k in f.fitted)
        print(f"{machine}: fit {fit_on} on {spec} ({wall:.0f} s): {figures}; fit's own median "
              f"{_pct(f.logs[0]['median_abs_error'])}; not pinned: {', '.join(f.unpinned) or 'none'}")
        for n in predict:
            t = got[n]
            nodes = table_nodes(t, 8) or 1
            s = score(t, f.topology(nodes))
            st = s.stats(s.rows)
            worst = st["worst"]
            print(f"  predict {n} ({t.collective}, {nodes} node(s)): median {_pct(st['median'])}, p90 "
                  f"{_pct(st['p90'])}, worst {_pct(worst[0]) if worst else '-'}")
            out.append({"fit": fit_on, "predict": n, "median": st["median"], "p90": st["p90"]})
    return out


if __name__ == "__main__":
    run_pairs()
