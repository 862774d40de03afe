"""Issue 33's scale goals in one table: each case's simulated time, wall time and peak memory (one subprocess a
case, its own peak RSS).

    python benchmarks/bench_scale.py                 # every row
    python benchmarks/bench_scale.py --only 64x64    # the rows whose label holds the text

Rows (``ROWS``; others, such as NCCL on 16,384 GPUs or synthesis, are added by appending a ``Row``):

- the Swing paper at 32 B (De Sensi et al., NSDI 2024) on 8x8, 64x16, 128x8, 256x4, 8x8x8 and 64x64, every
  algorithm of the paper, against the paper's model and published value as ``bench_swing_paper.py`` writes them
  (400 Gb/s, 400 ns per hop, o = 0.5 us per message). Goal: within 10%; 64x64 in < 30 s;
- torus:64x64 at 512 MiB, every algorithm, the bandwidth-optimal Swing and Rabenseifner (torus-distance order)
  among them, these against their congestion worked out by hand (below) times the all-ports bandwidth term.
  Goal: < 3 min and < 8 GB;
- congestion at 512 MiB on 8x8, 16x16, 32x32 and 8x8x8, the paper's bandwidth-optimal algorithms (Swing,
  Rabenseifner in torus-distance order, the bucket, the rings): the simulated time over the all-reduce's
  bandwidth term on every port, 2(p-1)/p · n / (2D · B), against the paper's congestion factor worked out by hand
  (``congestion_by_hand``, ``CONGESTION_PAPER``; Swing and Rabenseifner only) and their ratio.

The congestion by hand (De Sensi et al. 2024, §2-3: a step's bandwidth term is its message size times the most
messages crossing one link), for the library's multiport algorithms (``algorithms.library.swing.swing_torus``,
``algorithms.library.torus_doubling.rabenseifner_torus``) on a D-dimensional torus of q^D ranks, q a power of two:

- the vector is cut into 2D parts of n/(2D), one a port; at each step every part works along one dimension, two
  parts along each (one mirrored: ρ or δ negated), so that each rank sends one message on each of its 2D ports;
- a part halves: its message at reduce-scatter step s (s = 0 .. log2 p - 1) is n/(2D)/2^(s+1), the all-gather
  mirrors it; step s is step t = ⌊s/D⌋ along its dimension (the dimensions taken in turn);
- a step's messages proceed together, each along the minimal route, which stays in the step's dimension; the load
  of a directed link is the number of the step's messages crossing it, and the step's bandwidth term is the
  message size times the largest load over B (every link of the step carries the same load, so every message
  is equally slowed);
- Swing: along a ring, even coordinates go ρ(t) one way and odd ones the other, the mirrored part the reverse: a
  link is crossed by the messages of |ρ(t)| consecutive senders (of its direction, one part each): load |ρ(t)| =
  1, 1, 3, 5, 11, ..., never half way round (|ρ(t)| < q/2);
- Rabenseifner (recursive halving and doubling, nearest first): c pairs with c XOR 2^t, moving δ = ±2^t, the
  mirrored part -δ: load 2^t, the half-way step (2^t = q/2) included when each message goes round the way δ
  says (the paper's reading of minimal routing, both ways being minimal there).

The congestion factor is Σ_s size_s · load_s / B over both halves, divided by 2(p-1)/p · n/(2D·B):
Σ_s load_s / 2^(s+1) · p/(p-1). Swing: 1.095 on 8x8, 1.141 on 16x16; Rabenseifner: 1.333 and 1.412.

The simulation agrees with the hand for both, the rest being the per-hop and per-message latency (under 1% at
512 MiB). For Rabenseifner that takes ways (``Schedule.ways``, docs/design.md "Topologies and routing"): at its
half-way steps the mirrored part's peer is the unmirrored part's (c + q/2 = c - q/2), and a static route a pair
would send both parts the same way round, idle one of the rank's two ports along that dimension and load the
links with q messages, not q/2; so the mirrored part names way 1, the other way round.
``congestion_by_hand(..., one_route_a_pair=True)`` counts what the schedule without its ways gives (load q at
the half-way steps: 1.524 on 8x8, 1.506 on 16x16). ``tests/algorithms/library/test_torus_congestion.py`` holds
both, exactly at zero latency, on 4x4, 8x8 and 4x4x4.
Measured on this machine (the whole table), Rabenseifner simulated against the paper's factor: 1.337 / 1.333 on
8x8 (0.1 s), 1.418 / 1.412 on 16x16 (0.3 s), 1.466 / 1.455 on 32x32 (5.2 s, 543 MiB; 94 s and 3.1 GB before the
verifier and the engine worked by interned sets and segments), 1.158 / 1.151 on 8x8x8 (1.5 s); Swing on the same
tori is 0.2-0.7% over the paper's, in about the same wall time. On 64x64 at 512 MiB: Swing 6.44 ms against 6.36 by
hand, Rabenseifner 8.04 against 7.93, each in 56 s and 1.9 GB.

A case runs by symmetry (``sim.engine.symmetric``) where its algorithm gives a symmetric form and the quotient
applies, else explicitly; the engine column says which ran.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_swing_paper import BANDWIDTH, CASES, HOP, OVERHEAD, PUBLISHED, Case

PAPER_TORI = ["8x8", "64x16", "128x8", "256x4", "8x8x8", "64x64"]
CONGESTION_TORI = ["8x8", "16x16", "32x32", "8x8x8"]
BIG = 512 << 20


def _rho(t: int) -> int:
    return (1 - (-2) ** (t + 1)) // 3  # Swing's ρ(t) = Σ_{i<=t} (-2)^i, written out again: this is the reference


def congestion_by_hand(algorithm: str, dims: str, *, one_route_a_pair: bool = False) -> float:
    """The bandwidth-term congestion factor of ``swing_torus`` or ``rabenseifner_torus`` on the torus ``dims``
    (q^D, q a power of two >= 4), by hand (module docstring): Σ_s load_s / 2^(s+1) over (p-1)/p.

    ``one_route_a_pair``: Rabenseifner's half-way steps load q, not q/2 (both parts on one route, as without the
    schedule's ways)."""
    qs = [int(q) for q in dims.split("x")]
    q, d = qs[0], len(qs)
    if len(set(qs)) != 1 or q < 4 or q & (q - 1):
        raise ValueError(f"congestion by hand: a torus q^D with q a power of two >= 4, got {dims}")
    if algorithm not in ("swing_torus", "rabenseifner_torus"):
        raise ValueError(f"congestion by hand: swing_torus or rabenseifner_torus, got {algorithm!r}")
    p = q**d
    total = 0.0
    for s in range(p.bit_length() - 1):
        t = s // d
        if algorithm == "swing_torus":
            load = abs(_rho(t))
        else:
            load = q if one_route_a_pair and 2**t == q // 2 else 2**t
        total += load / 2 ** (s + 1)
    return total * p / (p - 1)


CONGESTION_PAPER: dict[tuple[str, str], float] = {
    (alg, dims): congestion_by_hand(alg, dims) for alg in ("swing_torus", "rabenseifner_torus") for dims in
    CONGESTION_TORI}
"""(library algorithm, torus) -> the paper's congestion factor at 512 MiB (``congestion_by_hand``)."""


@dataclass(frozen=True)
class Row:
    """One goal case: what to simulate, and its goals (None: none)."""

    label: str
    algorithm: str
    params: dict[str, Any]
    dims: str
    size: int
    reference_s: float | None = None
    reference: str = ""
    goal_s: float | None = None
    goal_bytes: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _qs(dims: str) -> list[int]:
    return [int(q) for q in dims.split("x") if int(q) > 1]


def _rows() -> list[Row]:
    rows = []
    for dims in PAPER_TORI:
        for case in CASES:
            _steps, model = case.model(_qs(dims))
            pub = PUBLISHED.get((case.paper, dims))
            rows.append(Row(f"32 B {dims} {case.paper}", case.name, case.params, dims, 32,
                            pub if pub is not None else model, "published" if pub is not None else "model",
                            30.0 if dims == "64x64" else None))
    for case in CASES:
        rows.append(Row(f"512 MiB 64x64 {case.paper}", case.name, case.params, "64x64", BIG, None, "", 180.0, 8e9))
    bandwidth_optimal = [Case("swing", "swing_torus", {}, CASES[0].hops),
                         Case("rabenseifner", "rabenseifner_torus", {}, CASES[1].hops), *CASES[2:]]
    # the paper's bandwidth-optimal algorithms at its headline size, against their congestion worked out by hand
    p64 = 64 * 64
    for case in bandwidth_optimal[:2]:
        hand = congestion_by_hand(case.name, "64x64") * 2 * (p64 - 1) / p64 * BIG / (4 * BANDWIDTH)
        rows.append(Row(f"512 MiB 64x64 {case.paper} (bandwidth-optimal)", case.name, case.params, "64x64", BIG,
                        hand, "congestion by hand", 180.0, 8e9))
    for dims in CONGESTION_TORI:
        p, d = math.prod(int(q) for q in dims.split("x")), len(_qs(dims))
        bound = 2 * (p - 1) / p * BIG / (2 * d * BANDWIDTH)  # every rank's 2D ports busy the whole time
        for case in bandwidth_optimal:
            rows.append(Row(f"congestion {dims} {case.paper}", case.name, case.params, dims, BIG, bound,
                            "2(p-1)/p·n/(2D·B)", extra={"paper": CONGESTION_PAPER.get((case.name, dims))}))
    return rows


ROWS = _rows()


def run_case(row: Row) -> dict[str, Any]:
    """Simulate one row here (the subprocess's work): time, engine, wall and peak RSS."""
    from algorithms import registry
    from sim.engine import simulate
    from sim.topology import from_spec

    t0 = time.perf_counter()
    p = math.prod(int(q) for q in row.dims.split("x"))
    alg = registry.get("allreduce", row.algorithm)
    params = {"dims": row.dims, **row.params}
    why = alg.unsupported(p, params)
    if why is not None:
        return {"skipped": why.split(":")[-1].strip()[:50]}
    form = alg.symmetric_form(p, **params)
    topo = from_spec(f"torus:{row.dims}", bandwidth=BANDWIDTH, latency=HOP)
    r = simulate(form if form is not None else alg.build(p, **params), topo, row.size, overhead=OVERHEAD)
    return {"time": r.time, "engine": r.engine, "transfers": r.transfers, "ok": r.ok,
            "wall": time.perf_counter() - t0, "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def _in_subprocess(row: Row, timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--case", row.label]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"skipped": f"over {timeout:.0f} s"}
    if out.returncode != 0:
        return {"skipped": (out.stderr.strip().splitlines() or ["failed"])[-1][:60]}
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def _line(row: Row, got: dict[str, Any]) -> str:
    if "skipped" in got:
        return f"  {row.label:34} skipped: {got['skipped']}"
    t = got["time"]

    def ratio_of(time: float, factor: float) -> str:
        return f"{time / (factor * row.reference_s):.3f}" if row.reference_s else "-"

    ref = f"{row.reference_s * 1e6:12.2f} ({row.reference})" if row.reference_s is not None else f"{'-':>12}"
    ratio = f"{t / row.reference_s:7.3f}" if row.reference_s else f"{'-':>7}"
    goals = []
    if row.reference_s is not None and row.label.startswith("32 B"):
        goals.append("within 10%" if abs(t / row.reference_s - 1) <= 0.10 else "NOT within 10%")
    if row.goal_s is not None:
        goals.append(f"{'<' if got['wall'] < row.goal_s else 'NOT <'} {row.goal_s:.0f} s")
    if row.goal_bytes is not None:
        goals.append(f"{'<' if got['rss'] < row.goal_bytes else 'NOT <'} {row.goal_bytes / 1e9:.0f} GB")
    if "paper" in row.extra:
        paper = row.extra["paper"]
        goals.append("paper: -" if paper is None else f"paper {paper:.3f}, simulated/paper {ratio_of(t, paper)}")
    return (f"  {row.label:34} {t * 1e6:14.2f} {ref} {ratio} {got['engine']:9} {got['transfers']:>11} "
            f"{got['wall']:8.1f} {got['rss'] / 2**20:9.0f}  {', '.join(goals)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="run the rows whose label holds this text")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds a case may take (default %(default)s)")
    ap.add_argument("--case", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.case is not None:
        row = next((r for r in ROWS if r.label == args.case), None)
        if row is None:
            print(f"no row {args.case!r}", file=sys.stderr)
            return 2
        print(json.dumps(run_case(row)))
        return 0
    print(f"all-reduce: 400 Gb/s links, {HOP * 1e9:.0f} ns per hop, o = {OVERHEAD * 1e6} us per message, dataflow")
    print(f"  {'case':34} {'simulated us':>14} {'reference us':>12} {'':>11} {'ratio':>7} {'engine':9} "
          f"{'transfers':>11} {'wall s':>8} {'peak MiB':>9}  goals")
    for row in ROWS:
        if args.only in row.label:
            print(_line(row, _in_subprocess(row, args.timeout)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
