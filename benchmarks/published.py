"""Published nccl-tests tables against ``-a nccl`` on their presets: per size, per table, per regime.

    python benchmarks/published.py [DIR ...] [--rows]
    python benchmarks/published.py --scale      # -a nccl all-reduce on dgx-h100:128 (1,024 GPUs) at 1 GiB

Reads every ``.tsv`` table of the published tables in tests/data/published and in each DIR given
(the format of that folder's README.md), simulates what NCCL runs for every size on the table's preset
(``sim.machine.published.score``; a table that forced ``NCCL_ALGO`` forces it here too; no fitting), and
prints per table the median, 90th-percentile and worst |simulated - measured| / measured over every size, the
median ratio simulated / measured per regime (<= 64 KiB, between, >= 64 MiB), how many sizes NCCL ran NVLS or
NVLSTree at, and what it ran. A table whose header names its NCCL version runs that release's model. Then the
same on the spec that describes each table's hardware where its preset is only the nearest DGX (``DESCRIBED``:
the fabric of its '# hardware' line, the NVLink domain, the GPU). A table with no preset is left out with its
own '# preset_fit' reason unless it has a described spec. ``--rows`` also prints every size; ``--fit`` runs
the fit-and-predict pairs (benchmarks/fit_pairs.py). Prints tables; asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.cli.common import human_size  # noqa: E402
from sim.machine.published import REGIMES, score, skip_reason, tables_in  # noqa: E402


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _scale() -> int:
    import json
    import subprocess
    import time

    cmd = [sys.executable, "-c", "import sys; from sim.cli.app import main; sys.exit(main())", "simulate", "-c",
           "allreduce", "-a", "nccl", "-t", "dgx-h100:128", "-s", "1GiB", "--json", "--no-progress"]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    wall = time.perf_counter() - t0
    out = json.loads(r.stdout) if r.stdout.strip() else {}
    if r.returncode or not out.get("ok", True) or "time_s" not in out:
        print(r.stderr or r.stdout, file=sys.stderr)
        return 1
    print(f"-a nccl allreduce dgx-h100:128 (1024 GPUs) 1 GiB: NCCL runs {out['nccl']['algorithm']}/"
          f"{out['nccl']['protocol']}, simulated {out['simulated']['schedule']} ({out['transfers']} transfers): "
          f"{out['time_s'] * 1e3:.3f} ms (NCCL's model {out['simulated']['model_time_s'] * 1e3:.3f} ms); "
          f"whole command {wall:.1f} s, peak {out['peak_rss_MiB']:.0f} MiB")
    return 0


DESCRIBED = {
    # The spec that describes each table's machine as its own '# hardware' line gives it, where the table's preset
    # (its nearest DGX) differs: the fabric, the NVLink domain, the GPU. Figures from sim.topology.fabrics.
    "a100_2x8_allreduce_awsome_p4de": "dgx-a100:2@fabric=efa,nics=4",       # 4 x 100 Gb/s EFA per instance
    "b200_2x8_allgather_gcpdocs_a4vms": "dgx-b200:2@fabric=roce",           # 8 x 400 Gb/s RoCE (gIB)
    "h100_2x8_allgather_dstack_a3mega": "dgx-h100:2@fabric=tcpxo",          # 8 x 200 Gb/s TCPXO
    "gb200_2x4_allgather_gcpdocs_a4x_default": "gb200-nvl72:1@domain=8",    # 8 GB200 in one NVLink domain
    "h200_1x8_allgather_16G_mlengineering": "hgx-h200:1",                   # 8 H200
    "h200_1x8_allreduce_ring_16G_mlengineering": "hgx-h200:1",
    "h200_1x8_reducescatter_16G_mlengineering": "hgx-h200:1",
}
"""Table stem -> the SPEC of its hardware (the benchmark scores both; the goal is on the described one)."""


def _line(name: str, spec: str, s: Any) -> list[str]:
    everything = s.stats(s.rows)
    worst = everything["worst"]
    return [name, spec, str(everything["points"]), _pct(everything["median"]), _pct(everything["p90"]),
            "-" if worst is None else f"{_pct(worst[0])} at {human_size(worst[1])}",
            *(_ratio(everything[n]) for n, _, _ in REGIMES), str(len(s.nvls_rows)),
            ",".join(sorted({r["nccl"] for r in s.rows}))]


def _print(lines: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in lines) for i in range(len(lines[0]))]
    for line in lines:
        print("  ".join(c.ljust(w) if i < 2 or i == len(line) - 1 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(line, widths, strict=True))))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="*", help="more folders of .tsv tables")
    ap.add_argument("--rows", action="store_true", help="print every size too")
    ap.add_argument("--fit", action="store_true", help="also the fit-and-predict pairs (sim.machine.nccl_fit)")
    ap.add_argument("--scale", action="store_true",
                    help="instead: the whole `collsched simulate -c allreduce -a nccl -t dgx-h100:128 -s 1GiB`, "
                         "its wall seconds and peak memory (the issue's bound: 30 s and 4 GB)")
    args = ap.parse_args(argv)
    if args.scale:
        return _scale()
    published = ROOT / "tests" / "data" / "published"
    dirs = ([published] if published.is_dir() else []) + [Path(d) for d in args.dirs]
    if not dirs:
        print(f"no tables: {published} is absent and no DIR was given", file=sys.stderr)
        return 2
    try:
        tables = tables_in(dirs)
    except ValueError as e:
        print(f"published.py: {e}", file=sys.stderr)
        return 2
    from sim.topology import from_spec

    head = ["table", "spec", "points", "median", "p90", "worst", *(name for name, _, _ in REGIMES), "NVLS",
            "NCCL runs"]
    lines, described = [head], [head]
    skipped: list[str] = []
    for t in tables:
        runs = []
        why = skip_reason(t)
        if why is None:
            runs.append((lines, t.preset, score(t)))
        elif t.path.stem not in DESCRIBED:
            skipped.append(f"  {t.path.stem}: {why}")
        if t.path.stem in DESCRIBED:
            spec = DESCRIBED[t.path.stem]
            runs.append((described, spec, score(t, from_spec(spec))))
        for where, spec, s in runs:
            where.append(_line(t.path.stem, spec, s))
            if args.rows:
                print(f"# {t.path.name} on {spec} ({t.collective}, NCCL {t.nccl_version or 'default'}): size, "
                      "measured us, simulated us, error, NCCL runs, simulated")
                for r in s.rows:
                    other = r["simulated"] if r["simulated"] != r["nccl"] else ""
                    print(f"  {r['size']:>12} {r['measured_s'] * 1e6:>10.1f} {r['simulated_s'] * 1e6:>10.1f} "
                          f"{r['error']:>+7.1%}  {r['nccl']:<16} {other}")
    print("# measured (nccl-tests, out-of-place) vs collsched -a nccl on each table's preset, every size; "
          "regimes: median simulated / measured")
    _print(lines)
    print("# ... on the spec that describes each table's hardware (DESCRIBED: fabric, NVLink domain, GPU)")
    _print(described)
    if skipped:
        print("# left out (the table's own # preset_fit / # note line):")
        print("\n".join(skipped))
    harness = [f"{t.path.stem} (-g {t.gpus_per_thread}: +{t.host_overhead_s * 1e6:.1f} us)" for t in tables
               if t.gpus_per_thread > 1]
    if harness:
        print("# one thread launching several GPUs, its host launches added to every call "
              "(sim.machine.published.HOST_LAUNCH_PER_GPU): " + ", ".join(harness))
    if args.fit:
        from fit_pairs import run_pairs  # benchmarks/fit_pairs.py

        run_pairs(tables)
    return 0


if __name__ == "__main__":
    sys.exit(main())
