"""A tuning file's choices against the policy's hand-made bands, band by band, in paired launches.

    python benchmarks/compare_tuning.py --tuning tuning.json --nproc 4 [--launches 4] [--sizes 4KiB:64MiB:4]

For each collective and size where the tuning file (``collsched tune``) and
the policy's hand-made bands (``runners.backend.policy.HAND_DEFAULTS``, what the
built-in defaults were before the tuned table, and what ``tune`` keeps
within its margin) pick different algorithms, both schedules run
in the same launch, alternating iteration by iteration after a barrier (so
both see the same machine load); a launch's figure is the ratio of the
medians of the slowest rank's times, tuned / default. Each launch is a fresh
set of ``--nproc`` gloo processes. The table prints every launch's ratio and
their median; ``slower`` marks a band where the tuned choice is slower in
every launch by more than 5%, the noise between launches on a shared machine
(docs/backend.md). Prints a table; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from algorithms.ir import ROOTED_KINDS, Kind
from runners.backend.policy import HAND_DEFAULTS, Choice, Policy, load_tuning, schedule
from runners.commands.launch import spawn
from sim import units

KINDS = ("allreduce", "allgather", "reducescatter", "broadcast", "alltoall", "reduce", "scatter", "gather")


def _pairs(tuning: str, p: int, sizes: list[int]) -> list[tuple[str, int, Choice, Choice]]:
    default, tuned = Policy(dict(HAND_DEFAULTS)), Policy(dict(HAND_DEFAULTS)).override(load_tuning(tuning))
    out = []
    for kind in KINDS:
        for size in sizes:
            a, b = default.choose(kind, size, p), tuned.choose(kind, size, p)
            if a != b:
                out.append((kind, size, a, b))
    return out


def _worker(rank: int, pairs: list[tuple[str, int, Choice, Choice]], iters: int) -> list[tuple[float, float]]:
    import torch
    import torch.distributed as dist

    from runners.commands.bench import _buffers
    from runners.execution.runner import run

    p = dist.get_world_size()
    out = []
    for kind_name, size, a, b in pairs:
        kind = Kind(kind_name)
        root = 0 if kind in ROOTED_KINDS else None
        n = units.count_per_rank(kind, size, p, 4)
        x, o, _ = _buffers(kind, p, rank, root, n, torch.float32)
        scheds = [schedule(kind, c, p, root) for c in (a, b)]
        times: list[list[float]] = [[], []]
        for it in range(iters + 1):
            for k, s in enumerate(scheds):
                dist.barrier()
                t0 = time.perf_counter()
                run(s, x, o)
                if it:
                    times[k].append(time.perf_counter() - t0)
        t = torch.tensor(times, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        out.append((statistics.median(t[0].tolist()), statistics.median(t[1].tolist())))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tuning", required=True)
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--launches", type=int, default=4)
    ap.add_argument("--iters", type=int, default=7)
    ap.add_argument("--sizes", default="4KiB:64MiB:4")
    args = ap.parse_args()
    sizes = [int(s) for s in units.parse_sizes(args.sizes)]
    pairs = [q for q in _pairs(args.tuning, args.nproc, sizes) if "p2p" not in (q[2].algorithm, q[3].algorithm)]
    if not pairs:
        print("the tuning file picks what the defaults pick at every size")
        return 0
    runs: list[list[tuple[float, float]]] = [spawn(_worker, args.nproc, pairs, args.iters, timeout=3600)[0]
                                             for _ in range(args.launches)]
    print(f"# {args.nproc} ranks, {args.launches} launches; ratio = tuned / default time (median of the slowest "
          "rank's), per launch")
    print(f"#{'collective':>13} {'size':>10} {'default':>28} {'tuned':>28} {'default us':>11} {'tuned us':>10}"
          f"  ratios (median)")
    for i, (kind, size, a, b) in enumerate(pairs):
        ratios = [r[i][1] / r[i][0] for r in runs]
        med_a = statistics.median(r[i][0] for r in runs) * 1e6
        med_b = statistics.median(r[i][1] for r in runs) * 1e6
        verdict = "slower" if min(ratios) > 1.05 else ("faster" if max(ratios) < 0.95 else "")
        print(f" {kind:>13} {size:>10} {a!s:>28} {b!s:>28} {med_a:>11.0f} {med_b:>10.0f}  "
              + " ".join(f"{x:.2f}" for x in ratios) + f" ({statistics.median(ratios):.2f}) {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
