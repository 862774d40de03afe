"""The Swing paper's algorithms at 32 B on its tori: simulated against the paper's model and its published value.

    python benchmarks/bench_swing_paper.py                        # 8x8 64x16 128x8 256x4 8x8x8
    python benchmarks/bench_swing_paper.py --tori 8x8 64x64 --previous

De Sensi, Bonato, Saam & Hoefler, "Swing: Short-cutting Rings for Higher Bandwidth Allreduce", NSDI 2024,
simulate 400 Gb/s links with 100 ns of wire and 300 ns of router per hop. At 32 B the paper runs Swing and
recursive doubling latency-optimal (log2 p steps of the whole vector), the bucket with every part changing
dimension at once, and four rings on two edge-disjoint Hamiltonian cycles (2-D tori only). The paper's model
here, written out by hand: a step costs one per-message overhead o plus 400 ns per hop of its farthest
message, the bytes left out (under 0.1% at 32 B); o = 0.5 us is fitted on one point, the published
latency-optimal Swing on torus:8x8 (7 us: 6 steps, 10 hops). Prints, per torus, each algorithm's steps, the
model, the published value where we have one, the simulated time (``sim.engine.simulate``, dataflow mode,
minimal routes, the overhead o) and simulated / model; ``--previous`` adds what the library ran before
(bandwidth-optimal Swing, the bucket whose parts change dimension independently). Goal (issue 33): every
algorithm within 10% of the paper.

Cases whose schedule would hold more than ``--max-transfers`` transfers (every chunk of the bucket and the
rings is a transfer: about 2·m·p² of them, 134 M on 64x64) are listed as skipped.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from algorithms import registry
from algorithms.library.swing import rho
from sim.engine import simulate
from sim.topology import from_spec

TORI = ["8x8", "64x16", "128x8", "256x4", "8x8x8"]
BANDWIDTH = 400e9 / 8  # bytes/s
HOP = 100e-9 + 300e-9  # seconds per hop: wire and router
OVERHEAD = 0.5e-6  # seconds per message, fitted on PUBLISHED["swing", "8x8"]
SIZE = 32
PUBLISHED = {("swing", "8x8"): 7.0e-6}  # issue 33: the paper's latency-optimal Swing on torus:8x8 at 32 B


def _ring_hops(d: int, q: int) -> int:
    d %= q
    return min(d, q - d)


def _per_dim(qs: list[int], hops: Callable[[int, int], int]) -> list[int]:
    """Hops of each step of a dimension-by-dimension walk: log2 q steps per dimension, t = 0, 1, ..."""
    return [hops(t, q) for q in qs for t in range(q.bit_length() - 1)]


def _swing(qs: list[int]) -> list[int]:
    return _per_dim(qs, lambda t, q: _ring_hops(rho(t), q))


def _doubling(qs: list[int]) -> list[int]:
    return _per_dim(qs, lambda t, q: _ring_hops(1 << t, q))


def _bucket(qs: list[int]) -> list[int]:
    return [1] * (2 * len(qs) * (max(qs) - 1))  # 2·D phases, each the longest ring's q - 1 steps


def _rings(qs: list[int]) -> list[int]:
    return [1] * (2 * (math.prod(qs) - 1))


@dataclass(frozen=True)
class Case:
    """One algorithm of the paper: its name there, the library's, the parameters, and its steps' hops."""

    paper: str
    name: str
    params: dict[str, Any]
    hops: Callable[[list[int]], list[int]]
    note: str = ""

    def model(self, qs: list[int]) -> tuple[int, float]:
        """(steps, the paper's model in seconds): each step o plus its hops at 400 ns."""
        h = self.hops(qs)
        return len(h), sum(OVERHEAD + x * HOP for x in h)


CASES = [
    Case("swing", "swing_torus_latency_optimal", {}, _swing, "latency-optimal"),
    Case("recursive doubling", "recursive_doubling_torus", {}, _doubling, "latency-optimal"),
    Case("bucket", "torus_bucket", {"phases": "synchronized"}, _bucket, "synchronized"),
    Case("hamiltonian rings", "hamiltonian_rings", {}, _rings, "2 cycles x 2 ways"),
]
# What the library ran before, held to the paper's model of the same algorithm.
PREVIOUS = [
    Case("swing", "swing_torus", {}, _swing, "was: bandwidth-optimal"),
    Case("bucket", "torus_bucket", {}, _bucket, "was: independent phases"),
]


def _transfers(case: Case, p: int, qs: list[int]) -> int:
    """About how many transfers the schedule holds (one per chunk moved)."""
    m = 2 * len(qs)
    if case.name in ("torus_bucket", "hamiltonian_rings"):
        return 2 * m * p * (p - 1)
    return m * p * max(1, len(case.hops(qs)))


def run(dims: str, case: Case, max_transfers: int) -> tuple[str, ...]:
    qs = [int(q) for q in dims.split("x") if int(q) > 1]
    p = math.prod(int(q) for q in dims.split("x"))
    steps, model = case.model(qs)
    published = PUBLISHED.get((case.paper, dims))
    pub = "-" if published is None else f"{published * 1e6:.2f}"
    algo = registry.get("allreduce", case.name)
    params = {"dims": dims, **case.params}
    why = algo.unsupported(p, params)
    head = (case.paper, f"{case.name} ({case.note})", str(steps), f"{model * 1e6:.2f}", pub)
    if why is not None:
        return (*head, "-", "-", "n/a: " + why.split(":")[-1].strip()[:40])
    if _transfers(case, p, qs) > max_transfers:
        return (*head, "-", "-", f"skipped: ~{_transfers(case, p, qs) / 1e6:.0f} M transfers")
    start = time.perf_counter()
    topo = from_spec(f"torus:{dims}", bandwidth=BANDWIDTH, latency=HOP)
    r = simulate(algo.build(p, **params), topo, SIZE, overhead=OVERHEAD)
    wall = time.perf_counter() - start
    ratio = r.time / model
    target = published if published is not None else model
    ok = "yes" if abs(r.time / target - 1) <= 0.10 and r.ok else "NO"
    return (*head, f"{r.time * 1e6:.2f}", f"{ratio:.3f}", f"{ok} ({wall:.1f} s)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tori", nargs="+", default=TORI, help="torus sizes, RxC or AxBxC (default: %(default)s)")
    ap.add_argument("--previous", action="store_true", help="also the library's algorithms before issue 33")
    ap.add_argument("--max-transfers", type=float, default=10e6, help="skip larger schedules (default 1e7)")
    args = ap.parse_args(argv)
    cols = ("paper", "library", "model steps", "model us", "published us", "simulated us", "sim/model", "within 10%")
    widths = (18, 48, 11, 9, 12, 12, 9, 20)
    print(f"all-reduce of {SIZE} B: 400 Gb/s, {HOP * 1e9:.0f} ns per hop, o = {OVERHEAD * 1e6} us per message")
    for dims in args.tori:
        print(f"\ntorus:{dims}")
        print("  " + " ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)))
        for case in CASES + (PREVIOUS if args.previous else []):
            row = run(dims, case, int(args.max_transfers))
            print("  " + " ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
