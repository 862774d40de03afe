"""MSCCL-IR interop: import and export speed, and what a round trip through the XML costs in time.

    .venv/bin/python benchmarks/bench_msccl.py [--corpus DIR] [--repeat N]

Prints three tables:

1. import of the largest file of the foreign corpus (16 ranks, about 17 k transfers)
   and export of ring all-reduce at p = 64, chunks 4: best wall and CPU seconds of N runs;
2. simulated time of library schedules and of import(export(schedule)) in lockstep mode
   (equal when the round trip keeps every transfer in its step);
3. the same in dataflow mode, side by side with the order the XML imposes on the GPU: the
   thread blocks run their steps in order and wait where ``depid`` says, which can only add
   waits to the schedule's own dataflow (``load_msccl``'s thread-block order, fed to the
   simulator's dataflow readiness in place of the schedule's own dependencies plus it).
   "staged" rows export with ``staged=True`` (``algorithms.formats.msccl.stage_reductions``).

The corpus is read from ``tests/data/foreign/msccl`` unless --corpus names it.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sim.verify.dataflow
from algorithms import build
from algorithms.formats.msccl import dumps_msccl, parse_msccl, to_schedule
from algorithms.ir import Schedule
from sim.engine.reference import simulate
from sim.topology import Topology, fully_connected

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "data" / "foreign" / "msccl"
LARGEST = "rccl_unittest_allreduce_ring_simple_16n.xml"


def best(fn: object, repeat: int) -> tuple[float, float]:
    """Best wall and CPU seconds of ``repeat`` calls."""
    wall = cpu = float("inf")
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        fn()  # type: ignore[operator]
        wall = min(wall, time.perf_counter() - w)
        cpu = min(cpu, time.process_time() - c)
    return wall, cpu


@contextmanager
def with_extra_order(order: list[tuple[int, ...]]) -> Iterator[None]:
    """Make the simulator's dataflow mode also wait for ``order`` (per transfer, transfers to finish first)."""
    original = sim.verify.dataflow.dataflow_graph

    def graph(schedule: Schedule) -> sim.verify.dataflow.DataflowGraph:
        g = original(schedule)
        deps = tuple(tuple(sorted(set(d) | set(o))) for d, o in zip(g.deps, order, strict=True))
        return sim.verify.dataflow.DataflowGraph(g.steps, g.transfers, deps, g.write_after)

    sim.verify.dataflow.dataflow_graph = graph  # type: ignore[assignment]
    try:
        yield
    finally:
        sim.verify.dataflow.dataflow_graph = original  # type: ignore[assignment]


def speed(corpus: Path, repeat: int) -> None:
    print("| what | wall s (best) | CPU s (best) | size |")
    print("|---|---|---|---|")
    largest = corpus / LARGEST
    if largest.is_file():
        from algorithms.formats.msccl import load_msccl

        s = load_msccl(largest)
        wall, cpu = best(lambda: load_msccl(largest), repeat)
        print(f"| import {LARGEST} | {wall:.3f} | {cpu:.3f} | {s.ranks} ranks, {s.num_transfers} transfers |")
    else:
        print(f"| import {LARGEST} | - | - | corpus not found at {corpus} |")
    ring = build("allreduce", "ring", 64, chunks=4)
    wall, cpu = best(lambda: dumps_msccl(ring), repeat)
    print(f"| export allreduce ring p=64 chunks=4 | {wall:.3f} | {cpu:.3f} | {ring.num_transfers} transfers, "
          f"{len(dumps_msccl(ring)) / 1e6:.1f} MB |")


def round_trips(cases: list[tuple[str, str, int, int, bool]], topo_of: dict[int, Topology], sizes: list[int]) -> None:
    print()
    print("| schedule | size | lockstep s | round trip lockstep s | equal | dataflow s | XML thread-block order s"
          " | cost |")
    print("|---|---|---|---|---|---|---|---|")
    for kind, name, p, chunks, staged in cases:
        s = build(kind, name, p, chunks=chunks)
        order: list[tuple[int, ...]] = []
        s2 = to_schedule(parse_msccl(dumps_msccl(s, staged=staged)), order=order)
        topo = topo_of[p]
        for size in sizes:
            a = simulate(s, topo, size, mode="lockstep").time
            b = simulate(s2, topo, size, mode="lockstep").time
            d = simulate(s, topo, size, mode="dataflow").time
            with with_extra_order(order):
                e = simulate(s2, topo, size, mode="dataflow").time
            same = abs(a - b) <= 1e-9 * max(a, 1e-30)
            label = f"{kind} {name} p={p} chunks={chunks}{' staged' if staged else ''}"
            print(f"| {label} | {size} | {a:.4e} | {b:.4e} | {'yes' if same else 'NO'} "
                  f"| {d:.4e} | {e:.4e} | {100 * (e / d - 1):+.1f}% |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    speed(args.corpus, args.repeat)
    cases = [("allreduce", n, 8, c, False) for n in ("ring", "recursive_doubling", "direct") for c in (1, 4)]
    cases += [("allreduce", "direct", 8, c, True) for c in (1, 4)]
    round_trips(cases, {8: fully_connected(8)}, [1 << 10, 1 << 20, 64 << 20])


if __name__ == "__main__":
    main()
