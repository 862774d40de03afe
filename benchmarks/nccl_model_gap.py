"""``-a nccl``'s simulated time against NCCL's own prediction, preset by preset, collective by collective, size by size.

    python benchmarks/nccl_model_gap.py [--presets dgx-h100:1,dgx-h100:2] [--sizes 8,64KiB,1MiB,...] [--rows]

For each call ``simulate -a nccl`` runs, NCCL's tuning model of that release predicts a time (latency + size over
its algorithm bandwidth, ``sim.machine.nccl.compare``); the simulation prices the same algorithm and protocol on
the preset's links instead. This prints, per preset and collective, how many calls agree within 5% (the issue's
goal where the simulated schedule is what NCCL runs), the median and worst ratio simulated / predicted, and every
gap past 5% grouped by its cause as ``compare`` names it: another pair simulated than NCCL runs; NCCL launching
fewer channels than its model prices (``launch_shape``); the broadcast and reduce chains' pipeline (NCCL's model
charges one step's latency, the chain p - 1 hops and its fill); latency-bound (the schedule's per-hop steps
against NCCL's per-call latency); bandwidth-bound (the links' rates against NCCL's graph rate). Prints tables;
asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim.cli.common import parse_size
from sim.machine.nccl import AGREEMENT, compare, simulate_nccl
from sim.topology import from_spec

PRESETS = ("dgx-a100:1", "dgx-a100:2", "dgx-h100:1", "dgx-h100:2", "dgx-h100:4", "dgx-b200:1", "dgx-b200:2",
           "gb200-nvl72:1@domain=8")
KINDS = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce")
SIZES = ("8", "1KiB", "64KiB", "1MiB", "16MiB", "256MiB", "4GiB")


def cause(why: list[str]) -> str:
    """The first reason ``compare`` gives, by its kind."""
    if not why:
        return "-"
    w = why[0]
    for key, name in (("the simulation runs", "another pair"), ("NCCL launches", "channels launched"),
                      ("NCCL's model of its ring", "chain pipeline"),
                      ("latency-bound", "latency"), ("bandwidth-bound", "bandwidth")):
        if w.startswith(key):
            return name
    return "other"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--sizes", default=",".join(SIZES))
    ap.add_argument("--rows", action="store_true", help="print every call past 5%% with its reason")
    args = ap.parse_args(argv)
    sizes = [int(parse_size(s)) for s in args.sizes.split(",")]
    t0 = time.perf_counter()
    print("# -a nccl simulated / NCCL's own prediction (same release, algorithm, protocol, channels); agree: within "
          f"{AGREEMENT:.0%}")
    print(f"{'preset':24} {'collective':14} {'calls':>5} {'agree':>6} {'median':>7} {'worst':>7}  "
          "gaps past 5% by cause")
    total, agree, causes = 0, 0, Counter[str]()
    rows: list[str] = []
    for spec in args.presets.split(","):
        topo = from_spec(spec)
        for kind in args.kinds.split(","):
            ratios: list[float] = []
            here = Counter[str]()
            for size in sizes:
                try:
                    run = simulate_nccl(kind, topo, size)
                except ValueError as e:
                    rows.append(f"  {spec} {kind} {size}: not simulated ({e})")
                    continue
                c = compare(run, kind, topo, size)
                ratios.append(c["ratio"])
                if abs(c["ratio"] - 1) > AGREEMENT:
                    here[cause(c["why"])] += 1
                    rows.append(f"  {spec:24} {kind:14} {size:>12} {c['algorithm']}/{c['protocol']:7} "
                                f"{c['ratio']:6.2f}x  {c['why'][0] if c['why'] else ''}")
            if not ratios:
                continue
            ok = sum(abs(r - 1) <= AGREEMENT for r in ratios)
            total, agree = total + len(ratios), agree + ok
            causes.update(here)
            worst = max(ratios, key=lambda r: abs(r - 1))
            print(f"{spec:24} {kind:14} {len(ratios):5} {ok:6} {statistics.median(ratios):7.2f} {worst:7.2f}  "
                  + ", ".join(f"{k} {n}" for k, n in here.most_common()))
    print(f"# all: {agree} of {total} calls within {AGREEMENT:.0%}; gaps by cause: "
          + ", ".join(f"{k} {n}" for k, n in causes.most_common()) + f"; {time.perf_counter() - t0:.0f} s")
    if args.rows:
        print("# every gap past 5%, with compare's first reason")
        print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
