"""Resource guards: what a request needs (transfers, memory), estimated before anything is built.

Every command asks here before it builds a schedule, packs a synthesis or
solves an LP; a request whose estimate does not fit in this machine's memory
is refused up front (``ResourceError``: the estimate, the memory there is,
and the largest world that would fit), rather than being killed by the
kernel's OOM killer half an hour later.

Estimates, each an honest order of magnitude rather than a promise:

- a library schedule: its transfers, extrapolated from builds at 32 and 64
  ranks (transfers ~ p^a, a fitted, 1 <= a <= 3), times ``TRANSFER_BYTES``
  (what a transfer costs through the simulator), plus the chunks its transfers
  move (the sum of their counts, extrapolated the same way) times ``MOVE_BYTES``,
  plus its chunk slots (the built collective's chunks, which may grow with p,
  over every rank) times ``SLOT_BYTES`` (the verifier's state), plus the step
  the verifier holds at once (the largest step it runs whole, and the largest
  it runs in parts up to ``BATCH_MOVES``, extrapolated the same way) times
  ``STEP_MOVE_BYTES`` (``sim.verify.fast.largest_steps``); a world of at most
  ``BUILD_RANKS`` is simply built;
- the tree packing (``sim.bounds.packing``): every rank pair's route as link ids
  (p² times the route length) and a few p x p price matrices, plus its about
  2·p²·chunks transfers (4 for allreduce);
- the flow synthesis (``sim.bounds.flows``) and the LP bound (``sim.bounds.lp``):
  the LP's nonzeros (``LP_NONZERO_BYTES`` each, HiGHS's copies included) and the
  synthesis's messages;
- the cut bound guards its own time (``sim.bounds.budget``).

The memory there is: ``COLLSCHED_MEMORY`` (a size such as ``8GiB``) when set,
else ``MEMORY_FRACTION`` of what the kernel reports available (``MemAvailable``).
This module imports neither networkx nor torch.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass

from algorithms.errors import CollschedError

__all__ = ["BUILD_RANKS", "Estimate", "ResourceError", "check", "estimate_library", "estimate_lp",
           "estimate_packing", "guard_build", "guard_lp", "guard_synthesize", "memory_budget", "spec_ranks"]

TRANSFER_BYTES = 2048
"""Bytes one transfer costs from build to simulated result: measured 1.6 KiB with the simpy engine and
0.8 KiB with the fast one (direct all-to-all on switch:512, 262 144 transfers, peak RSS less the interpreter's)."""
BUILT_TRANSFER_BYTES = 200
"""Bytes a built transfer costs (its columns and its Transfer value: 160 B measured on the same schedule)."""
SLOT_BYTES = 16
"""Bytes per chunk slot: the compact verifier's state, 12 B (``sim.verify.fast``)."""
MOVE_BYTES = 8
"""Bytes per chunk a transfer moves, beyond the transfer itself and the step being verified: the dataflow
engine's keys, one per segment of slots (``sim.engine.fast.segments``; at most one a chunk)."""
LP_NONZERO_BYTES = 200
"""Bytes per LP nonzero, scipy's sparse matrices and HiGHS's own copies together."""
MEMORY_FRACTION = 0.75
"""Share of the available memory a request may plan to use: the rest is the interpreter's and the machine's."""
BUILD_RANKS = 64
"""Worlds this small are built to be estimated; larger ones are extrapolated from builds at 32 and 64 ranks."""


class ResourceError(CollschedError, ValueError):
    """A request that would not fit in this machine's memory; the message gives the estimate and what fits."""


@dataclass(frozen=True)
class Estimate:
    """What a request needs: ``transfers`` (messages in the schedule) and ``memory`` (bytes at its peak)."""

    transfers: float
    memory: float


def memory_budget() -> float:
    """Bytes a request may use (module docstring)."""
    text = os.environ.get("COLLSCHED_MEMORY")
    if text:
        from sim.units import parse_size

        return float(parse_size(text))
    available = None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    if available is None:
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return math.inf
    return MEMORY_FRACTION * available


def _gb(x: float) -> str:
    return f"{x / 1e9:.3g} GB" if x >= 1e8 else f"{x / 1e6:.3g} MB"


def _count(x: float) -> str:
    return f"{x:.3g}" if x >= 1e6 else f"{round(x)}"


def check(what: str, ranks: int, estimate: Callable[[int], Estimate]) -> Estimate:
    """``estimate(ranks)`` if it fits ``memory_budget``; else ``ResourceError`` with the estimate and the largest
    world (found by bisection on ``estimate``) that fits."""
    est = estimate(ranks)
    budget = memory_budget()
    if est.memory <= budget:
        return est
    lo, hi = 1, ranks
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if estimate(mid).memory <= budget:
            lo = mid
        else:
            hi = mid
    fits = f"about {lo} ranks would fit" if estimate(lo).memory <= budget else "no world size fits"
    raise ResourceError(f"{what} on {ranks} ranks needs about {_count(est.transfers)} transfers and "
                        f"{_gb(est.memory)} of memory; this machine has {_gb(budget)} to spare "
                        f"(COLLSCHED_MEMORY overrides): {fits}")


def estimate_packing(kind: str, ranks: int, chunks: int, route_hops: int) -> Estimate:
    """The tree packing of ``kind`` on ``ranks`` ranks with ``chunks`` a root and routes of about ``route_hops``
    links (module docstring)."""
    n = float(ranks)
    per = {"allreduce": 4.0, "broadcast": 2.0 / max(n, 1.0), "reduce": 2.0 / max(n, 1.0)}.get(kind, 2.0)
    transfers = per * n * max(n - 1, 0) * chunks
    memory = n * n * 8.0 * (max(route_hops, 1) + 6) + transfers * TRANSFER_BYTES
    return Estimate(transfers, memory)


def estimate_lp(ranks: int, links: int, *, overlay: bool = False, route_hops: int = 1) -> Estimate:
    """The all-to-all LP: p sources times ``links`` link flows (``overlay``: p x p(p-1) pair flows loading
    ``route_hops`` links each)."""
    n = float(ranks)
    nonzeros = n * n * (n - 1) * (2 + route_hops) if overlay else n * links * 3.0
    return Estimate(0.0, nonzeros * LP_NONZERO_BYTES)


def _measure(schedule: object) -> tuple[float, float, int, float, float]:
    """(transfers, chunks they move, the collective's chunks, the most chunks a step run whole moves, the most a
    step run in parts moves: ``sim.verify.fast.largest_steps``) of a built schedule."""
    n = float(schedule.num_transfers)  # type: ignore[attr-defined]
    try:
        moved = float(schedule.columns().count.sum())  # type: ignore[attr-defined]
    except AttributeError:  # not a library Schedule: one chunk a transfer, every one in one step
        moved = n
    chunks = getattr(getattr(schedule, "collective", None), "chunks", 1)
    try:
        from sim.verify.fast import largest_steps

        whole, parted = largest_steps(schedule)  # type: ignore[arg-type]
    except (AttributeError, TypeError):
        whole, parted = int(moved), 0
    return n, moved, int(chunks) if isinstance(chunks, int) else 1, float(whole), float(parted)


def _grow(small: float, large: float, ranks: int) -> float:
    """``large`` (at BUILD_RANKS) extrapolated to ``ranks`` as p^a, a from ``small`` (at half), 1 <= a <= 3."""
    a = min(3.0, max(1.0, math.log2(large / small))) if small > 0 and large > 0 else 2.0
    return max(large, 1.0) * (ranks / BUILD_RANKS) ** a


def estimate_library(build: Callable[[int], object], ranks: int,
                     chunk_slots: Callable[[int, int], float]) -> Estimate:
    """A library schedule on ``ranks`` ranks: transfers and the chunks they move from builds at 32 and 64 ranks
    (``build(p)`` returns a Schedule), extrapolated (module docstring); ``chunk_slots(p, chunks)`` is the
    slots over all ranks of its collective with that many chunks (the built one's, extrapolated)."""
    from sim.verify.fast import BATCH_MOVES, STEP_MOVE_BYTES

    if ranks <= BUILD_RANKS:
        t, moved, chunks, whole, parted = _measure(build(ranks))
    else:
        t0, m0, c0, w0, q0 = _measure(build(BUILD_RANKS // 2))
        t1, m1, c1, w1, q1 = _measure(build(BUILD_RANKS))
        t, moved = _grow(t0, t1, ranks), _grow(m0, m1, ranks)
        whole = _grow(w0, w1, ranks) if w1 else 0.0
        parted = _grow(q0, q1, ranks) if q1 else 0.0
        # the collective's chunks: constant, or growing with p (blocks of p chunks): p^a again, a in [0, 3]
        b = min(3.0, max(0.0, math.log2(c1 / c0))) if c0 > 0 and c1 > 0 else 0.0
        chunks = max(1, round(c1 * (ranks / BUILD_RANKS) ** b))
    step = (whole + min(parted, BATCH_MOVES)) * STEP_MOVE_BYTES
    return Estimate(t, t * TRANSFER_BYTES + moved * MOVE_BYTES + chunk_slots(ranks, chunks) * SLOT_BYTES + step)


def guard_lp(ranks: int, links: int) -> None:
    """Refuse an all-to-all LP bound that will not fit (``estimate_lp``)."""
    check("the all-to-all LP bound", ranks, lambda p: estimate_lp(p, max(1, links * p // max(ranks, 1))))


def guard_synthesize(kind: str, topology: object, chunks: int | None, *, ranks: int | None = None) -> None:
    """Refuse a synthesis on ``topology`` that will not fit: the tree packing, or the all-to-all flow synthesis
    (its overlay LP where it relays, its messages). ``topology`` None: before it is built, on ``ranks`` ranks
    with one-hop routes (the least it can need)."""
    if topology is None:
        if ranks is None:
            return
        hops = 1
    else:
        ranks = int(topology.ranks)  # type: ignore[attr-defined]
        hops = _route_hops(topology)
    if kind in ("alltoall", "alltoallv"):
        from sim.bounds.flows import MESSAGES_PER_PATH, RELAY_MAX_RANKS, alltoall_chunks

        def flows(p: int) -> Estimate:
            c = alltoall_chunks(p) if chunks is None else chunks
            pieces = min(c, MESSAGES_PER_PATH) if kind == "alltoall" else MESSAGES_PER_PATH
            transfers = 2.0 * p * (p - 1) * pieces
            lp = estimate_lp(p, 0, overlay=True, route_hops=hops).memory if p <= RELAY_MAX_RANKS else 0.0
            return Estimate(transfers, transfers * TRANSFER_BYTES + lp + 8.0 * p * p * (hops + 6))

        check(f"synthesize {kind}", ranks, flows)
        return
    from sim.bounds.packing import default_chunks

    def packing(p: int) -> Estimate:
        return estimate_packing(kind, p, default_chunks(kind, p) if chunks is None else chunks,
                                max(1, hops * p // max(ranks, 1)) if hops > 8 else hops)

    check(f"synthesize {kind}", ranks, packing)


def spec_ranks(spec: str) -> int | None:
    """The world a topology SPEC names, from its form's arguments alone (nothing is built); None for a file or
    a form that does not say."""
    from sim.topology.forms import _SPEC, form

    m = _SPEC.fullmatch(spec.strip()) if isinstance(spec, str) else None
    found = form(m.group(1)) if m else None
    if found is None or found.ranks is None or m is None or os.path.exists(spec):
        return None
    return int(found.ranks(found.arguments(m.group(2), spec)))


def guard_build(kind: str, algorithm: str, ranks: int, build: Callable[[int], object], chunks: int, *,
                per_orbit: int = 1) -> None:
    """Refuse building ``kind/algorithm`` (``build(p)`` builds it at p ranks) on ``ranks`` ranks when its
    extrapolated transfers and chunk slots will not fit (``estimate_library``). ``per_orbit``: the run is by
    symmetry (``sim.engine.symmetric``), one transfer and one slot per orbit of a group of that many
    translations: the estimate is divided by it."""
    if ranks <= BUILD_RANKS:
        return
    from algorithms.ir import Collective, Kind

    def slots(p: int, built: int | None = None) -> float:
        n = chunks if built is None else max(chunks, built)
        k = Kind(kind)
        if k is Kind.ALLTOALLV:
            return 2.0 * p * p * n
        root = 0 if k in (Kind.BROADCAST, Kind.REDUCE, Kind.SCATTER, Kind.GATHER) else None
        try:
            c = Collective(k, p, n, root)
        except CollschedError:
            return 2.0 * p * p * n
        return float(c.input_chunks(0) + c.output_chunks(0)) * p

    def small(p: int) -> object:
        return build(p)

    try:
        est = estimate_library(small, ranks, slots)
    except CollschedError:  # the algorithm cannot be built at 32 or 64 ranks: the slots alone
        est = Estimate(0.0, slots(ranks) * SLOT_BYTES)

    est = Estimate(est.transfers / per_orbit, est.memory / per_orbit)

    def at(p: int) -> Estimate:
        if p == ranks:
            return est
        r = (p / ranks) ** 2
        return Estimate(est.transfers * r, est.memory * r)

    check(f"{kind}/{algorithm}" + (" by symmetry" if per_orbit > 1 else ""), ranks, at)


def _route_hops(topology: object) -> int:
    """The hops from rank 0 to the farthest node (breadth first over the links): a route's length, roughly."""
    g = topology.graph  # type: ignore[attr-defined]
    seen = {0: 0}
    frontier = [0]
    depth = 0
    while frontier:
        depth += 1
        nxt = []
        for u in frontier:
            for v in g.successors(u):
                if v not in seen:
                    seen[v] = depth
                    nxt.append(v)
        frontier = nxt
    return max(seen.values(), default=1) or 1
