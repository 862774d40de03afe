"""Published nccl-tests tables against ``-a nccl`` on their presets: per size, per table, per regime.

    python benchmarks/published.py [DIR ...] [--rows]
    python benchmarks/published.py --scale      # -a nccl all-reduce on dgx-h100:128 (1,024 GPUs) at 1 GiB

Reads every ``.tsv`` table of the published tables in tests/data/published and in each DIR given
(the format of that folder's README.md), simulates what NCCL runs for every size on the table's preset
(``sim.machine.published.score``; a table that forced ``NCCL_ALGO`` forces it here too; no fitting), and
prints per table the median and 90th-percentile |simulated - measured| / measured and the median ratio
simulated / measured per regime (<= 64 KiB, between, >= 64 MiB). Sizes where NCCL ran NVLS or NVLSTree
are scored apart too (the "NVLS" columns), and every size together ("all"). ``--rows`` also prints every size.
Prints tables; asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="*", help="more folders of .tsv tables")
    ap.add_argument("--rows", action="store_true", help="print every size too")
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
    head = ["table", "preset", "points", "median", "p90", "worst", *(name for name, _, _ in REGIMES), "NVLS points",
            "NVLS median", "all median", "all p90"]
    lines = [head]
    skipped: list[str] = []
    for t in tables:
        why = skip_reason(t)
        if why is not None:
            skipped.append(f"  {t.path.stem}: {why}")
            continue
        s = score(t)
        if args.rows:
            print(f"# {t.path.name} ({t.preset}, {t.collective}): size, measured us, simulated us, error, "
                  "NCCL runs, simulated")
            for r in s.rows:
                print(f"  {r['size']:>12} {r['measured_s'] * 1e6:>10.1f} {r['simulated_s'] * 1e6:>10.1f} "
                      f"{r['error']:>+7.1%}  {r['nccl']:<16} {r['simulated'] if r['nvls'] else ''}")
        st, nv, everything = s.stats(), s.stats(s.nvls_rows), s.stats(s.rows)
        worst = everything["worst"]
        lines.append([t.path.stem, t.preset, str(st["points"]), _pct(st["median"]), _pct(st["p90"]),
                      "-" if worst is None else f"{_pct(worst[0])} at {human_size(worst[1])}",
                      *(_ratio(st[name]) for name, _, _ in REGIMES), str(nv["points"]), _pct(nv["median"]),
                      _pct(everything["median"]), _pct(everything["p90"])])
    widths = [max(len(r[i]) for r in lines) for i in range(len(head))]
    print("# measured (nccl-tests, out-of-place) vs collsched -a nccl; regimes: median simulated / measured")
    for line in lines:
        print("  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(line, widths, strict=True))))
    if skipped:
        print("# left out (the table's own # preset_fit / # note line):")
        print("\n".join(skipped))
    return 0


if __name__ == "__main__":
    sys.exit(main())
