"""Synthesis on the user's own topology and for all-to-all(v): efficiency against the exact bounds, LP wall time.

    python benchmarks/bench_synthesis.py                 # the efficiency table (1 GiB)
    python benchmarks/bench_synthesis.py --lp            # the all-to-all LP bound's wall time at 256 ranks
    python benchmarks/bench_synthesis.py --rows heldout  # only the held-out topology files

Rows (issue 24's goals): allgather and reducescatter on topology files no builder made
(``benchmarks/heldout/``: a 2x3 two-level cluster whose NICs run at 25, 50 and 100 GB/s, a random 7-GPU graph)
and on a file equal to cluster:2x8 link for link beside the name itself, against the cut bound
(``sim.bounds.cuts``); uniform all-to-all and Zipf(1.2) all-to-allv (``algorithms.matrices.zipf``) against the LP
bound (``sim.bounds.lp``). "eff" is bound / simulated time (dataflow, no overheads); "unpaced" is the same
synthesis with the emission before pacing (trees: ``pace=False``; flows: relays unpaced), for comparison.
Goals: all-to-all within 5% of the LP, all-to-allv within 10%, allgather and reducescatter within 5% on the
held-out files; the LP at 256 ranks under 60 s.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from algorithms import matrices
from sim.bounds import flows
from sim.bounds.cuts import bound
from sim.bounds.lp import bound_alltoall, bound_traffic, uniform_matrix
from sim.bounds.packing import synthesize
from sim.engine.reference import simulate
from sim.topology import Topology, from_spec
from sim.topology.files import as_file

GIB = 2**30
ROOT = Path(__file__).resolve().parents[1]
HELDOUT = ROOT / "benchmarks" / "heldout"


def topology(name: str) -> Topology:
    if name.startswith("file:"):
        return as_file(from_spec(name[5:]), f"file-of-{name[5:]}.json")
    path = HELDOUT / f"{name}.json"
    return from_spec(str(path) if path.is_file() else name)


TREE_ROWS = [("two-level-2x3-unequal-nics", "allgather"), ("two-level-2x3-unequal-nics", "reducescatter"),
             ("random-7gpu", "allgather"), ("random-7gpu", "reducescatter"),
             ("file:cluster:2x8", "allgather"), ("file:cluster:2x8", "reducescatter"),
             ("cluster:2x8", "allgather"), ("cluster:2x8", "reducescatter")]
FLOW_ROWS = [(spec, "uniform") for spec in ("ring:8", "torus:4x4", "fattree:4", "cluster:2x8", "dgx-h100:2",
                                             "random-7gpu")] + \
            [(spec, "zipf:1.2") for spec in ("ring:8", "torus:4x4", "cluster:2x8", "dgx-h100:2")]


def tree_row(name: str, kind: str) -> str:
    t = topology(name)
    b = bound(kind, t, GIB)
    t0 = time.perf_counter()
    s = synthesize(kind, t)
    wall = time.perf_counter() - t0
    r = simulate(s, t, GIB)
    assert r.ok, (name, kind)
    old = simulate(synthesize(kind, t, pace=False), t, GIB)
    return (f"{name:<28} {kind:<13} {b.bound_s * 1e3:>9.4f} {r.time * 1e3:>9.4f} {b.efficiency(r.time):>7.3f} "
            f"{b.efficiency(old.time):>8.3f} {wall:>7.2f}")


def flow_row(name: str, matrix: str) -> str:
    t = topology(name)
    m = None if matrix == "uniform" else matrices.parse(matrix, t.ranks)
    t0 = time.perf_counter()
    s = flows.synthesize_alltoall(t, matrix=m)
    wall = time.perf_counter() - t0
    r = simulate(s, t, GIB)
    assert r.ok, (name, matrix)
    b = bound_traffic(t, s.collective, GIB)
    flows._emit_path.__kwdefaults__ = {"pace_relays": False}
    try:
        old = simulate(flows.synthesize_alltoall(t, matrix=m), t, GIB)
    finally:
        flows._emit_path.__kwdefaults__ = {"pace_relays": True}
    kind = "alltoall" if m is None else f"alltoallv {matrix}"
    return (f"{name:<28} {kind:<13} {b.bound_s * 1e3:>9.4f} {r.time * 1e3:>9.4f} {b.efficiency(r.time):>7.3f} "
            f"{b.efficiency(old.time):>8.3f} {wall:>7.2f}")


def lp_table() -> None:
    print(f"{'topology':<14} {'ranks':>5} {'variables':>9} {'LP s':>7} {'bound ms':>9}")
    for spec in ("switch:256", "cluster:32x8", "torus:16x16"):
        t = from_spec(spec)
        t0 = time.perf_counter()
        b = bound_alltoall(t, uniform_matrix(t.ranks, GIB))
        print(f"{spec:<14} {t.ranks:>5} {b.variables:>9} {time.perf_counter() - t0:>7.2f} {b.bound_s * 1e3:>9.4f}",
              flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--lp", action="store_true", help="only the LP wall-time table at 256 ranks")
    parser.add_argument("--rows", choices=("all", "heldout", "trees", "flows"), default="all")
    args = parser.parse_args()
    if args.lp:
        lp_table()
        return 0
    print(f"{'topology':<28} {'kind':<13} {'bound ms':>9} {'synth ms':>9} {'eff':>7} {'unpaced':>8} {'synth s':>7}")
    rows: list[tuple[str, str, bool]] = []
    if args.rows in ("all", "trees", "heldout"):
        rows += [(n, k, True) for n, k in TREE_ROWS if args.rows != "heldout" or n in ("two-level-2x3-unequal-nics",
                                                                                       "random-7gpu")]
    if args.rows in ("all", "flows", "heldout"):
        rows += [(n, m, False) for n, m in FLOW_ROWS if args.rows != "heldout" or n == "random-7gpu"]
    for name, what, tree in rows:
        print(tree_row(name, what) if tree else flow_row(name, what), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
