"""The ``COLLSCHED_TUNING`` rules a machine model predicts best (``collsched tune``; no torch).

``tune`` simulates every algorithm of each kind on the machine at each size and keeps the fastest, unless a
preferred choice (the policy's hand-made band, which ``runners.commands.calibrate`` passes in as ``prefer``) or the
previous size's is within ``TUNE_MARGIN`` of it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from algorithms import registry
from algorithms.ir import Kind, Schedule
from sim.machine.model import Machine
from sim.machine.predict import algorithms_for, build_schedule, copy_fit, copy_seconds

__all__ = ["TUNE_CHUNKS", "TUNE_MARGIN", "Preference", "tune"]

TUNE_CHUNKS = (1, 2, 4)
TUNE_MARGIN = 0.15
"""A choice is kept unless another is predicted faster by more than this fraction: the model's median
validation error on the development machine (14-18% at 2 and 4 ranks, docs/design.md), below which a
predicted gain is not to be trusted. At 5% (the noise between launches) tune picked direct all-reduce at
1 MiB on 4 ranks for a predicted 6% gain, and it was 1.08-2.04x slower than recursive doubling in all of 7
paired launches."""

Preference = Callable[[Kind, int, int], tuple[str, int] | None]
"""(kind, size in bytes, ranks) -> the (algorithm, chunks) to keep when it is within ``TUNE_MARGIN`` of the
fastest, or None: ``runners.commands.calibrate.hand_made_preference`` gives the policy's hand-made bands'."""


def tune(machine: Machine, p: int, sizes: Sequence[int], kinds: Sequence[Kind] | None = None,
         prefer: Preference | None = None) -> dict[str, list[dict[str, Any]]]:
    """Per kind, the rules of a ``collsched.tuning/1`` file for ``p`` ranks: at each size the algorithm (and
    chunks in ``TUNE_CHUNKS``) with the least simulated time; neighbouring sizes with the same choice make
    one rule, which covers calls up to its largest size (the last: every size). Where ``prefer``'s choice
    (``collsched tune``: the policy's hand-made band), or else the previous size's choice, is within
    ``TUNE_MARGIN`` of the least time, it is kept."""
    copy = copy_fit(machine)
    rules: dict[str, list[dict[str, Any]]] = {}
    for kind in kinds or registry.kinds():
        cands: list[tuple[str, int, Schedule]] = []
        for name in algorithms_for(kind, p):
            for c in TUNE_CHUNKS:
                if "chunks" in {q.name for q in registry.get(kind, name).parameters} or c == 1:
                    cands.append((name, c, build_schedule(kind, name, p, c)))
        if not cands:
            continue
        picks: list[tuple[str, int, float, int]] = []
        for size in sizes if kind is not Kind.BARRIER else sizes[:1]:
            times = {(name, c): float(r.time) + copy_seconds(sched, size, copy) for name, c, sched in cands
                     if (r := machine.simulate(sched, size)).ok}
            if not times:
                continue
            best = min(times, key=lambda k: times[k])  # the first of equals, in registry order
            # Within the margin a measurement cannot tell: keep the preferred choice, else the previous.
            for keep in (prefer(kind, size, p) if prefer else None,
                         (picks[-1][0], picks[-1][1]) if picks else None):
                if keep in times and times[keep] <= (1 + TUNE_MARGIN) * times[best]:
                    best = keep
                    break
            picks.append((best[0], best[1], times[best], size))
        kind_rules: list[dict[str, Any]] = []
        for i, (name, c, _t, size) in enumerate(picks):
            last = i + 1 == len(picks)
            if not last and (picks[i + 1][0], picks[i + 1][1]) == (name, c):
                continue
            rule: dict[str, Any] = {"algorithm": name, "min_ranks": p, "max_ranks": p}
            if c != 1:
                rule["params"] = {"chunks": c}
            if not last:
                rule["max_bytes"] = int(size)
            rule["predicted_s"] = {str(int(sz)): tt for nm, cc, tt, sz in picks if (nm, cc) == (name, c)}
            kind_rules.append(rule)
        rules[str(kind)] = kind_rules
    return rules
