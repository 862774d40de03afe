"""Synthesis on the user's own topology and for all-to-all(v): efficiency against the exact bounds, LP wall time.

    python benchmarks/bench_synthesis.py                 # the efficiency table (1 GiB)
    python benchmarks/bench_synthesis.py --lp            # the all-to-all LP bound's wall time at 256 ranks
    python benchmarks/bench_synthesis.py --rows heldout  # only the held-out topology files
    python benchmarks/bench_synthesis.py --rows random [--graphs 20] [--before]  # random graphs (issue 33)

Rows (issue 24's goals): allgather and reducescatter on topology files no builder made
(``benchmarks/heldout/``: a 2x3 two-level cluster whose NICs run at 25, 50 and 100 GB/s, a random 7-GPU graph)
and on a file equal to cluster:2x8 link for link beside the name itself, against the cut bound
(``sim.bounds.cuts``); uniform all-to-all and Zipf(1.2) all-to-allv (``algorithms.matrices.zipf``) against the LP
bound (``sim.bounds.lp``). "eff" is bound / simulated time (dataflow, no overheads); "unpaced" is the same
synthesis with the emission before pacing (trees: ``pace=False``; flows: relays unpaced), for comparison.
``--rows random``: allgather and reducescatter on seeded random strongly connected graphs of 4 to 16 ranks (the
family of tests/sim/bounds/test_synth_any_graph.py: a Hamiltonian cycle, some links one way, extra links, speeds
12.5-100 GB/s, 1 us), efficiency in the default options per graph, then the median and the minimum; ``--before``
adds the greedy packing that served these graphs before (``packing.FOREST_MAX_RANKS = 0``; slow at 16 ranks).
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


def random_graph(seed: int) -> Topology:
    """A seeded random strongly connected graph of 4 to 16 ranks (module docstring)."""
    import random

    import networkx as nx

    rng = random.Random(seed)
    n = rng.randint(4, 16)
    order = list(range(n))
    rng.shuffle(order)
    speeds = (12.5e9, 25e9, 50e9, 100e9)
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    for i in range(n):
        u, v = order[i], order[(i + 1) % n]
        g.add_edge(u, v, bandwidth=rng.choice(speeds), latency=1e-6)
        if rng.random() < 0.7:
            g.add_edge(v, u, bandwidth=rng.choice(speeds), latency=1e-6)
    for _ in range(rng.randint(0, 2 * n)):
        u, v = rng.sample(range(n), 2)
        g.add_edge(u, v, bandwidth=rng.choice(speeds), latency=1e-6)
        if rng.random() < 0.5:
            g.add_edge(v, u, bandwidth=rng.choice(speeds), latency=1e-6)
    return Topology(g, f"random-{seed}")


def random_rows(graphs: int, before: bool) -> None:
    from statistics import median

    from sim.bounds import packing

    print(f"{'graph':<12} {'ranks':>5} {'links':>5} {'kind':<13} {'bound ms':>9} {'synth ms':>9} {'eff':>7} "
          f"{'before':>7} {'synth s':>7} {'transfers':>9}")
    effs: dict[str, list[float]] = {"allgather": [], "reducescatter": []}
    for seed in range(graphs):
        t = random_graph(seed)
        for kind in effs:
            b = bound(kind, t, GIB)
            t0 = time.perf_counter()
            s = synthesize(kind, t)
            wall = time.perf_counter() - t0
            r = simulate(s, t, GIB)
            assert r.ok, (t.name, kind)
            effs[kind].append(b.efficiency(r.time))
            old = "-"
            if before:
                keep, packing.FOREST_MAX_RANKS = packing.FOREST_MAX_RANKS, 0
                try:
                    old = f"{b.efficiency(simulate(synthesize(kind, t), t, GIB).time):.3f}"
                finally:
                    packing.FOREST_MAX_RANKS = keep
            print(f"{t.name:<12} {t.ranks:>5} {t.graph.number_of_edges():>5} {kind:<13} {b.bound_s * 1e3:>9.4f} "
                  f"{r.time * 1e3:>9.4f} {b.efficiency(r.time):>7.3f} {old:>7} {wall:>7.2f} {s.num_transfers:>9}",
                  flush=True)
    for kind, e in effs.items():
        print(f"{kind}: {len(e)} graphs, median {median(e):.3f}, min {min(e):.3f}")


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
    parser.add_argument("--rows", choices=("all", "heldout", "trees", "flows", "random"), default="all")
    parser.add_argument("--graphs", type=int, default=20, help="random graphs (--rows random)")
    parser.add_argument("--before", action="store_true", help="also the greedy packing before (--rows random)")
    args = parser.parse_args()
    if args.lp:
        lp_table()
        return 0
    if args.rows == "random":
        random_rows(args.graphs, args.before)
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
