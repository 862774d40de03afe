"""All-reduce on tori: every library algorithm's simulated time against the bound.

    python benchmarks/bench_torus.py                                  # torus:4x4 and torus:8x8, 1MiB 64MiB 1GiB
    python benchmarks/bench_torus.py --topologies torus:4x4 --sizes 1GiB

Prints, per topology and size, each registered all-reduce algorithm at its
default parameters (the torus algorithms take their grid from the
topology's name: ``dims=RxC``): the simulated time (dataflow mode, no
overheads, ``sim.engine.simulate``), the bound (``sim.bounds.bound``) and the
efficiency, bound / time, best first. Goal (issue item 6): multiport Swing
at 99.9% of the bound on torus:4x4 at 1 GiB, where the library's best was 28%.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from algorithms import registry
from sim.bounds import bound
from sim.engine import simulate
from sim.topology import from_spec
from sim.units import parse_size

TOPOLOGIES = ["torus:4x4", "torus:8x8"]
SIZES = ["1MiB", "64MiB", "1GiB"]


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.4f} ms"


def rows(spec: str, size: int) -> tuple[float, list[tuple[str, float, float]]]:
    """(bound, [(algorithm, simulated seconds, efficiency)]) for every all-reduce algorithm, best first."""
    topo = from_spec(spec)
    m = re.fullmatch(r"torus:(\d+x\d+)", spec)
    lower = bound("allreduce", topo, size).bound_s
    out = []
    for algo in registry.algorithms("allreduce"):
        params: dict[str, Any] = {}
        if m and any(prm.name == "dims" for prm in algo.parameters):
            params["dims"] = m.group(1)
        if algo.unsupported(topo.ranks, params) is not None:
            continue
        t = simulate(algo.build(topo.ranks, **params), topo, size).time
        out.append((algo.name, t, lower / t))
    return lower, sorted(out, key=lambda r: r[1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topologies", nargs="+", default=TOPOLOGIES)
    ap.add_argument("--sizes", nargs="+", default=SIZES)
    args = ap.parse_args(argv)
    for spec in args.topologies:
        for text in args.sizes:
            size = int(parse_size(text))
            start = time.perf_counter()
            lower, table = rows(spec, size)
            print(f"allreduce on {spec}, {text}: bound {ms(lower)} "
                  f"({time.perf_counter() - start:.1f} s wall)")
            print(f"  {'algorithm':<20} {'time':>14} {'efficiency':>10}")
            for name, t, eff in table:
                print(f"  {name:<20} {ms(t):>14} {eff:>10.2%}")
            print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
