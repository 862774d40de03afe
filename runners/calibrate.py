"""Calibrate a machine model from measurements, check it against the runner, and tune the policy with it.

    collsched calibrate --nproc N [--out machine.json] [--json]
    collsched validate --machine machine.json --nproc N [--sizes 4KiB:64MiB:4] [--launches 3] [--json] [--plot F]
    collsched tune --machine machine.json --nproc N [--nproc M ...] [-o tuning.json] [--json]

``calibrate`` spawns N local gloo ranks (or runs under torchrun: ``python -m
runners.calibrate --out F``) and measures what the model needs
(docs/design.md, "Machine model and calibration"):

1. point-to-point time against size for every pair of ranks (ping-pong, half
   the round trip), fitted as ``t = α + b/B`` by least squares on relative
   error, with the knee (the size splitting the sizes into two α-β segments
   that fit best) and each fit's residual;
2. concurrent flows: 2 and p-1 flows out of and into one rank, a ring shift
   and pairwise exchanges, each rank's bytes timed together: how bandwidth is
   shared, and the host-wide cap (all ranks' flows together);
3. reduction throughput γ per dtype (``x.add_(y)``, the runner's combine),
   on one rank alone and on every rank at once;
4. the runner's own cost: ``runners.runner.run`` of small schedules, fitted
   (with the simulator) as a fixed cost per call (``launch``) plus a cost per
   message (``message_cpu``);
5. large runner collectives (``COLLECTIVE_CASES`` at 4 to 64 MiB): the
   model's host cap H is the one that best explains the all-gathers, and γ
   the reducing ones (the flow patterns' H and ``x.add_``'s γ stay in the
   record as diagnostics), with the runner's costs refitted after them;
6. the runner's private copy of a buffer (zero-filled, then copied) into
   fresh memory: what an out-of-place schedule that writes its input costs
   before its first transfer, which the engine does not see; predictions
   add it (``copy_seconds``).

It writes a machine file (``sim.machine.model``): the ``host`` topology (per-rank
send/receive links at B, α on the host link, the host cap), the engine
parameters, and the measurements and fits under ``model``.

``validate`` measures the runner (``runners.bench.measure``: schedule and
torch's collective interleaved, median of the slowest rank's time; the
median over ``--launches`` launches) for every algorithm of allreduce,
allgather, reducescatter, broadcast and alltoall at each size, simulates the
same schedule on the machine, and prints measured, predicted and error, then
the median and 90th-percentile absolute error and how often the predicted-
fastest algorithm is measured-fastest or within 10% of it.

``tune`` simulates every algorithm of each kind on the machine at each size
band and writes the ``COLLSCHED_TUNING`` file (``collsched.tuning/1``) with
the fastest, and its predicted time, per band and world size.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from algorithms import registry
from algorithms.errors import CollschedError
from algorithms.ir import BUFS, Buf, Kind, Schedule
from sim import units

__all__ = ["CalibrationError", "Fit", "add_parser", "algorithms_for", "fit_alpha_beta", "fit_host_cap", "fit_knee",
           "fit_linear", "fit_machine", "fit_robust", "fit_runner", "load_machine", "main", "measure", "predict",
           "summarise", "tune", "validate"]

KIB, MIB = 1 << 10, 1 << 20
P2P_SIZES = (8, KIB, 4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB, MIB, 4 * MIB, 16 * MIB)
FLOW_SIZE = 8 * MIB
REDUCE_SIZES = (64 * KIB, MIB, 8 * MIB)
DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "int64")
RUNNER_CASES: tuple[tuple[str, str, int], ...] = (
    ("allgather", "direct", 1), ("allgather", "ring", 1), ("alltoall", "pairwise", 1), ("allreduce", "ring", 1),
    ("allreduce", "ring", 4), ("broadcast", "chain", 8))
"""(kind, algorithm, chunks): few and many messages on the critical path, to tell launch from overhead."""
RUNNER_SIZES = (KIB, 32 * KIB, 512 * KIB)
COLLECTIVE_CASES: tuple[tuple[str, str, int], ...] = (
    ("allgather", "ring", 1), ("allgather", "direct", 1), ("allreduce", "ring", 1), ("reducescatter", "ring", 1))
"""Large runner collectives: what the host cap H (the all-gathers) and γ (the reducing ones) are fitted to."""
COLLECTIVE_SIZES = (4 * MIB, 16 * MIB, 64 * MIB)
COPY_SIZES = (64 * MIB, 128 * MIB)
"""Sizes of the buffer-copy benchmark: above glibc's largest mmap threshold (32 MiB), so that every copy
lands in freshly mapped pages, as the runner's private copies do (smaller sizes would reuse warm heap)."""
VALIDATE_KINDS = ("allreduce", "allgather", "reducescatter", "broadcast", "alltoall")


class CalibrationError(CollschedError, ValueError):
    """Calibration, validation or tuning options that cannot work; the message names the option or file."""


# ---------------------------------------------------------------- fits (numpy only)


Floats = Sequence[float] | np.ndarray
"""Measurements: a list of floats or a numpy array."""


class Fit(dict[str, Any]):
    """A fit's parameters and residual as a JSON-ready dict."""


def fit_linear(x: Floats, y: Floats, *, weights: Floats | None = None,
               ) -> tuple[float, float, float]:
    """Least squares ``y ≈ a + b·x`` with a, b >= 0. ``weights`` default to 1/y, so that each point's
    relative error counts the same. Returns (a, b, rms of the weighted residuals: the rms relative error
    with the default weights)."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(xs) < 2 or len(xs) != len(ys) or not np.all(np.isfinite(ys)):
        raise CalibrationError(f"a fit needs at least 2 finite measurements, got {len(ys)}")
    if weights is None:
        if not np.all(ys > 0):
            raise CalibrationError("a relative fit needs positive measurements")
        w = 1.0 / ys
    else:
        w = np.asarray(weights, dtype=float)

    def sse(ab: tuple[float, float]) -> float:
        return float(np.sum(((ab[0] + ab[1] * xs - ys) * w) ** 2))

    a_mat = np.stack([np.ones_like(xs), xs], axis=1) * w[:, None]
    sol, *_ = np.linalg.lstsq(a_mat, ys * w, rcond=None)
    a, b = float(sol[0]), float(sol[1])
    if a < 0 or b < 0:  # the optimum is outside a, b >= 0: the best fit lies on an edge (a = 0 or b = 0)
        ww = w * w
        b0 = max(float(np.sum(ww * xs * ys) / np.sum(ww * xs * xs)), 0.0) if np.any(xs != 0) else 0.0
        a0 = max(float(np.sum(ww * ys) / np.sum(ww)), 0.0)
        a, b = min([(0.0, b0), (a0, 0.0)], key=sse)
    return a, b, math.sqrt(sse((a, b)) / len(xs))


def fit_robust(x: Floats, y: Floats, *, weights: Floats | None = None,
               ) -> tuple[float, float, float, list[int]]:
    """``fit_linear``, then drop the worst point while its weighted residual is over 20% and over 3x the
    median one (at most a third of the points: load from elsewhere makes outliers, not trends), and refit.
    Returns (a, b, rms over the kept points, indices dropped)."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    w = (1.0 / ys) if weights is None else np.asarray(weights, dtype=float)
    keep = list(range(len(xs)))
    dropped: list[int] = []
    while True:
        a, b, rms = fit_linear(xs[keep], ys[keep], weights=w[keep])
        if len(dropped) >= len(xs) // 3 or len(keep) <= 3:
            return a, b, rms, dropped
        res = np.abs((a + b * xs[keep] - ys[keep]) * w[keep])
        worst = int(np.argmax(res))
        if res[worst] <= max(0.2, 3 * float(np.median(res))):
            return a, b, rms, dropped
        dropped.append(keep.pop(worst))


def fit_alpha_beta(sizes: Floats, times: Floats) -> Fit:
    """``t = α + b/B`` over the sizes (robust, relative): α (s), B (bytes/s), rms and max relative residual
    over the kept sizes, and the sizes dropped as outliers."""
    a, b, rms, dropped = fit_robust(sizes, times)
    xs, ys = np.asarray(sizes, dtype=float), np.asarray(times, dtype=float)
    keep = [i for i in range(len(xs)) if i not in dropped]
    worst = float(np.max(np.abs(a + b * xs[keep] - ys[keep]) / ys[keep]))
    return Fit(alpha_s=a, bandwidth_Bps=(1.0 / b if b > 0 else math.inf), rms_rel=rms, max_rel=worst,
               dropped_sizes=[float(xs[i]) for i in sorted(dropped)])


def fit_knee(sizes: Floats, times: Floats) -> Fit:
    """Two α-β segments split at the knee (the split with the smallest total squared relative residual;
    each segment has at least 2 sizes). ``knee_bytes`` is the first size of the upper segment."""
    order = np.argsort(sizes)
    xs, ys = np.asarray(sizes, dtype=float)[order], np.asarray(times, dtype=float)[order]
    best: tuple[float, int] | None = None
    for k in range(2, len(xs) - 1):
        lo, hi = fit_linear(xs[:k], ys[:k]), fit_linear(xs[k:], ys[k:])
        sse = lo[2] ** 2 * k + hi[2] ** 2 * (len(xs) - k)
        if best is None or sse < best[0]:
            best = (sse, k)
    if best is None:
        raise CalibrationError(f"a knee needs at least 4 sizes, got {len(xs)}")
    k = best[1]
    below, above = fit_alpha_beta(xs[:k], ys[:k]), fit_alpha_beta(xs[k:], ys[k:])
    return Fit(knee_bytes=float(xs[k]), below=below, above=above, rms_rel=math.sqrt(best[0] / len(xs)))


# ---------------------------------------------------------------- measurements (in every rank; torch)


def _median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def _reps(nbytes: int) -> int:
    return 25 if nbytes <= 64 * KIB else 11 if nbytes <= MIB else 5


def _p2p(rank: int, p: int) -> dict[str, list[float]]:
    """Ping-pong between every pair: half the round trip's median, per pair, per size (every rank returns it).

    The repetitions go round the sizes (one of each size, then the next round), so a burst of load from
    elsewhere spreads over the sizes instead of skewing one."""
    import torch
    import torch.distributed as dist

    out: dict[str, list[float]] = {}
    bufs = [torch.zeros(size, dtype=torch.uint8) for size in P2P_SIZES]
    for i in range(p):
        for j in range(i + 1, p):
            times: list[list[float]] = [[] for _ in P2P_SIZES]
            for it in range(_reps(0) + 2):
                for k, buf in enumerate(bufs):
                    if it >= _reps(buf.numel()) + 2:
                        continue
                    dist.barrier()
                    if rank == i:
                        t0 = time.perf_counter()
                        dist.send(buf, j, tag=k)
                        dist.recv(buf, j, tag=k)
                        times[k].append((time.perf_counter() - t0) / 2)
                    elif rank == j:
                        dist.recv(buf, i, tag=k)
                        dist.send(buf, i, tag=k)
            t = torch.tensor([_median(ts[2:]) if ts else 0.0 for ts in times], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            out[f"{i}-{j}"] = t.tolist()
    return out


def _patterns(p: int) -> dict[str, list[tuple[int, int]]]:
    """Flow patterns: (src, dst) pairs that run at once."""
    pats: dict[str, list[tuple[int, int]]] = {"one": [(0, 1)], "exchange": [(0, 1), (1, 0)]}
    if p > 2:
        pats["out"] = [(0, r) for r in range(1, p)]
        pats["in"] = [(r, 0) for r in range(1, p)]
        pats["shift"] = [(r, (r + 1) % p) for r in range(p)]
    if p >= 4:
        pats["pairs"] = [(r, r ^ 1) for r in range(p - p % 2)]
    return pats


def _flows(rank: int, p: int) -> dict[str, float]:
    """Median time of each pattern with FLOW_SIZE bytes per flow (the slowest rank's), patterns interleaved."""
    import torch
    import torch.distributed as dist

    pats = _patterns(p)
    sbuf = torch.zeros(FLOW_SIZE, dtype=torch.uint8)
    rbufs = [torch.empty(FLOW_SIZE, dtype=torch.uint8) for _ in range(p)]
    times: dict[str, list[float]] = {name: [] for name in pats}
    for _ in range(7):
        for name, flows in pats.items():
            sends = [(k, d) for k, (s, d) in enumerate(flows) if s == rank]
            recvs = [(k, s) for k, (s, d) in enumerate(flows) if d == rank]
            dist.barrier()
            t0 = time.perf_counter()
            works = [dist.irecv(rbufs[i], s, tag=k) for i, (k, s) in enumerate(recvs)]
            works += [dist.isend(sbuf, d, tag=k) for k, d in sends]
            for w in works:
                if w is not None:
                    w.wait()
            times[name].append(time.perf_counter() - t0)
    t = torch.tensor([times[name][1:] for name in pats], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return {name: _median(row) for name, row in zip(pats, t.tolist(), strict=True)}


def _reductions(rank: int, p: int) -> dict[str, dict[str, list[float]]]:
    """x.add_(y) time per dtype and size: rank 0 alone, and every rank at once (the slowest)."""
    import torch
    import torch.distributed as dist

    out: dict[str, dict[str, list[float]]] = {}
    for dtype in DTYPES:
        td = getattr(torch, dtype)
        el = torch.empty(0, dtype=td).element_size()
        rows: dict[str, list[float]] = {"alone": [], "together": []}
        for size in REDUCE_SIZES:
            x, y = torch.ones(size // el, dtype=td), torch.ones(size // el, dtype=td)
            for how in ("alone", "together"):
                times = []
                for _ in range(_reps(size) + 1):
                    dist.barrier()
                    if how == "together" or rank == 0:
                        t0 = time.perf_counter()
                        x.add_(y)
                        times.append(time.perf_counter() - t0)
                t = torch.tensor([_median(times[1:]) if times else 0.0], dtype=torch.float64)
                dist.all_reduce(t, op=dist.ReduceOp.MAX)
                rows[how].append(float(t[0]))
        out[dtype] = rows
    return out


def _copies(rank: int, p: int) -> list[float]:
    """The runner's private copy of a buffer (``runners.buffers``: ``torch.zeros`` then ``copy_``) into fresh
    memory, every rank at once: the slowest rank's median per size in ``COPY_SIZES``."""
    import torch
    import torch.distributed as dist

    out = []
    for size in COPY_SIZES:
        src = torch.ones(size, dtype=torch.uint8)
        times = []
        for _ in range(_reps(size) + 1):
            dist.barrier()
            t0 = time.perf_counter()
            torch.zeros(size, dtype=torch.uint8).copy_(src)
            times.append(time.perf_counter() - t0)
        out.append(_median(times[1:]))
    t = torch.tensor(out, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [float(x) for x in t]


def _runner(rank: int, p: int, check: bool, specs: Sequence[tuple[str, str, int]] = RUNNER_CASES,
            sizes: Sequence[int] = RUNNER_SIZES) -> list[dict[str, Any]]:
    """The runner's time on ``specs`` at ``sizes`` (median of the slowest rank's), cases interleaved."""
    import torch
    import torch.distributed as dist

    from runners.bench import _buffers
    from runners.runner import run

    cases = []
    for kind_name, name, chunks in specs:
        s = registry.build(kind_name, name, p, root=0 if kind_name == "broadcast" else None, chunks=chunks)
        kind = s.collective.kind
        for size in sizes:
            n = units.count_per_rank(kind, size, p, 4)
            x, o, _ = _buffers(kind, p, rank, 0 if kind is Kind.BROADCAST else None, n, torch.float32)
            cases.append(({"collective": kind_name, "algorithm": name, "chunks": chunks, "size": size}, s, x, o))
    times: list[list[float]] = [[] for _ in cases]
    for _ in range(_reps(max(sizes)) + 2):
        for (_, s, x, o), ts in zip(cases, times, strict=True):
            dist.barrier()
            t0 = time.perf_counter()
            run(s, x, o, check=check)
            ts.append(time.perf_counter() - t0)
    t = torch.tensor([ts[2:] for ts in times], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [{**row, "time_s": _median(ts)} for (row, *_), ts in zip(cases, t.tolist(), strict=True)]


def _median_of(values: list[Any]) -> Any:
    """Element by element, the median of equally shaped records (numbers; dicts and lists recursively)."""
    first = values[0]
    if isinstance(first, dict):
        return {k: (_median_of([v[k] for v in values]) if k not in ("collective", "algorithm") else first[k])
                for k in first}
    if isinstance(first, list):
        return [_median_of([v[i] for v in values]) for i in range(len(first))]
    if isinstance(first, float):
        return _median(values)
    return first


def measure(rank: int, check: bool = True, rounds: int = 3) -> dict[str, Any]:
    """Every micro-benchmark on the current process group, ``rounds`` times; each figure is the median over
    the rounds, so a burst of load from elsewhere during one round does not skew the fit (every rank
    returns the same record)."""
    import torch
    import torch.distributed as dist

    p = dist.get_world_size()
    if p < 2:
        raise CalibrationError("calibration needs at least 2 ranks")
    if rounds < 1:
        raise CalibrationError(f"--rounds must be >= 1, got {rounds}")
    torch.manual_seed(0)
    t0 = time.perf_counter()
    rec: dict[str, Any] = {"ranks": p, "p2p_sizes": list(P2P_SIZES), "flow_bytes": FLOW_SIZE,
                           "copy_sizes": list(COPY_SIZES),
                           "reduce_sizes": list(REDUCE_SIZES), "runner_check": check, "rounds": rounds}
    runs = [{"p2p": _p2p(rank, p), "flows": _flows(rank, p), "reduce": _reductions(rank, p),
             "runner": _runner(rank, p, check),
             "copies": _copies(rank, p),
             "collectives": _runner(rank, p, check, COLLECTIVE_CASES, COLLECTIVE_SIZES)} for _ in range(rounds)]
    rec.update(_median_of(runs))
    rec["patterns"] = {k: [list(f) for f in v] for k, v in _patterns(p).items()}
    rec["seconds"] = time.perf_counter() - t0
    return rec


# ---------------------------------------------------------------- the model (parent side, no torch)


def _flow_time(flows: Sequence[tuple[int, int]], nbytes: float, alpha: float, bw: float, cap: float) -> float:
    """A pattern's time on the host model with equal sharing: α + bytes / the slowest flow's rate."""
    sends: dict[int, int] = {}
    recvs: dict[int, int] = {}
    for s, d in flows:
        sends[s] = sends.get(s, 0) + 1
        recvs[d] = recvs.get(d, 0) + 1
    rate = min(min(bw / sends[s], bw / recvs[d]) for s, d in flows)
    rate = min(rate, cap / len(flows))
    return alpha + nbytes / rate


def fit_host_cap(rec: dict[str, Any], alpha: float, bw: float) -> Fit:
    """The host-wide cap H (bytes/s, inf: none) that best explains the flow patterns, by a search over H."""
    pats, times = rec["patterns"], rec["flows"]
    nbytes = float(rec["flow_bytes"])
    p = int(rec["ranks"])

    def err(cap: float) -> float:
        return float(sum(((_flow_time(pats[k], nbytes, alpha, bw, cap) - t) / t) ** 2 for k, t in times.items()))

    grid = [math.inf, *(bw * f for f in np.geomspace(0.25, 2.0 * p, 200))]
    cap = min(grid, key=err)
    return Fit(host_bandwidth_Bps=cap if math.isfinite(cap) else None, rms_rel=math.sqrt(err(cap) / len(times)),
               predicted_s={k: _flow_time(pats[k], nbytes, alpha, bw, cap) for k in times})


def copy_seconds(schedule: Schedule, size: float, copy: Fit | dict[str, Any] | None) -> float:
    """The gloo runner's memory copies outside the schedule, which the engine does not see: when an
    out-of-place schedule writes its input, the runner first makes a private copy of it
    (``runners.buffers``: zero-filled, then copied), costing ``copy``'s α + bytes/B on the rank with the
    largest input (0 when ``copy`` is None). Local copy transfers are not counted (the engine leaves them free)."""
    if not copy or schedule.collective.in_place:
        return 0.0
    coll = schedule.collective
    p = coll.ranks
    piece = size if units.sized_buffer(coll.kind) == "buffer" else size / p
    chunk = piece / coll.chunks
    cols = schedule.columns()
    writers = np.unique(cols.dst[cols.dst_buf == BUFS.index(Buf.INPUT)])
    if not writers.size:
        return 0.0
    nbytes = max(coll.input_chunks(int(r)) for r in writers) * chunk
    bw = copy.get("bandwidth_Bps")
    return float(copy.get("alpha_s") or 0.0) + (nbytes / float(bw) if bw else 0.0)


def fit_runner(cases: list[dict[str, Any]], topology: Any, reduce_bw: float | None, p: int,
               copy: Fit | None = None) -> Fit:
    """The runner's costs: ``launch`` per call and ``message_cpu`` per message (sim.engine.reference), fitted to the
    measured runs of small schedules with the simulator as the model: for each ``message_cpu`` on a grid,
    the best ``launch`` is the weighted mean of what remains; the pair with the least squared relative
    residual wins, after dropping outliers as ``fit_robust`` does."""
    from sim.engine.reference import simulate

    scheds = [registry.build(c["collective"], c["algorithm"], p, root=0 if c["collective"] == "broadcast" else None,
                             chunks=c["chunks"]) for c in cases]
    measured = np.array([c["time_s"] for c in cases])
    w = 1.0 / measured
    grid = [0.0, *np.geomspace(1e-6, 1e-3, 40)]
    copies = np.array([copy_seconds(s, c["size"], copy) for s, c in zip(scheds, cases, strict=True)])
    sims = np.array([[simulate(s, topology, c["size"], reduce_bandwidth=reduce_bw, message_cpu=cpu).time
                      for s, c in zip(scheds, cases, strict=True)] for cpu in grid]) + copies
    keep = np.ones(len(cases), dtype=bool)

    def best(keep: np.ndarray) -> tuple[float, int, float]:
        out = []
        for g, t in enumerate(sims):
            ww = w[keep] ** 2
            launch = max(float(np.sum(ww * (measured[keep] - t[keep])) / np.sum(ww)), 0.0)
            out.append((float(np.sum(((t[keep] + launch - measured[keep]) * w[keep]) ** 2)), g, launch))
        sse, g, launch = min(out)
        return launch, g, math.sqrt(sse / int(keep.sum()))

    while True:
        launch, g, rms = best(keep)
        res = np.abs((sims[g] + launch - measured) * w)
        res[~keep] = 0.0
        worst = int(np.argmax(res))
        if (len(cases) - int(keep.sum()) >= len(cases) // 3 or int(keep.sum()) <= 3
                or res[worst] <= max(0.2, 3 * float(np.median(res[keep])))):
            break
        keep[worst] = False
    for c, t in zip(cases, sims[g], strict=True):
        c["predicted_s"] = float(t + launch)
    return Fit(launch_s=launch, message_cpu_s=float(grid[g]), rms_rel=rms,
               dropped=[i for i in range(len(cases)) if not keep[i]], cases=cases)


def _search(f: Callable[[float], float], lo: float, hi: float, points: int = 60) -> float:
    """The x in [lo, hi] (or inf) with the least f(x): a geometric grid, then golden-section search in
    log x between the best point's neighbours."""
    grid = list(np.geomspace(lo, hi, points))
    vals = [f(x) for x in grid]
    k = int(np.argmin(vals))
    if f(math.inf) < vals[k]:
        return math.inf
    a, b = math.log(grid[max(k - 1, 0)]), math.log(grid[min(k + 1, points - 1)])
    ratio = (math.sqrt(5) - 1) / 2
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = f(math.exp(c)), f(math.exp(d))
    for _ in range(25):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = f(math.exp(c))
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = f(math.exp(d))
    best = min((fc, math.exp(c)), (fd, math.exp(d)), (vals[k], grid[k]))
    return float(best[1])


def fit_collectives(cases: list[dict[str, Any]], p: int, *, alpha: float, bw: float, host_bw: float,
                    reduce_bw: float | None, launch: float, message_cpu: float, copy: Fit | None = None) -> Fit:
    """The host cap H and γ that best explain large runner collectives (``COLLECTIVE_CASES``), with the
    simulator as the model and the other figures held: H by a search for the least squared relative error
    of the cases without reductions, then γ over the reducing ones with that H. Falls back to ``host_bw`` or
    ``reduce_bw`` when no case of that sort was measured."""
    from sim.engine.reference import simulate
    from sim.machine.model import host

    reducing = {Kind.ALLREDUCE, Kind.REDUCESCATTER, Kind.REDUCE}
    scheds = [registry.build(c["collective"], c["algorithm"], p, chunks=c["chunks"]) for c in cases]
    measured = np.array([float(c["time_s"]) for c in cases])
    copies = [copy_seconds(s, c["size"], copy) for s, c in zip(scheds, cases, strict=True)]
    move = [i for i, s in enumerate(scheds) if s.collective.kind not in reducing]
    red = [i for i, s in enumerate(scheds) if s.collective.kind in reducing]

    def times(cap: float, gamma: float | None, idx: list[int]) -> np.ndarray:
        topo = host(p, bandwidth=bw, latency=alpha, host_bandwidth=cap if math.isfinite(cap) else None)
        gamma = gamma if gamma is not None and math.isfinite(gamma) else None  # inf: reductions are free
        return np.array([simulate(scheds[i], topo, cases[i]["size"], reduce_bandwidth=gamma, launch=launch,
                                  message_cpu=message_cpu).time + copies[i] for i in idx])

    def err(t: np.ndarray, idx: list[int]) -> float:
        return float(np.sum(((t - measured[idx]) / measured[idx]) ** 2))

    cap = host_bw
    if move:
        cap = _search(lambda h: err(times(h, reduce_bw, move), move), bw * 0.25, bw * 2.0 * p)
    gamma = reduce_bw
    if red:
        base = reduce_bw if reduce_bw is not None else bw
        g = _search(lambda g: err(times(cap, g, red), red), base * 0.01, base * 4.0)
        gamma = g if math.isfinite(g) else None
    every = list(range(len(cases)))
    predicted = times(cap, gamma, every)
    rel = (predicted - measured) / measured
    return Fit(host_bandwidth_Bps=float(cap) if math.isfinite(cap) else None,
               reduce_bandwidth_Bps=None if gamma is None else float(gamma),
               rms_rel=float(np.sqrt(np.mean(rel ** 2))) if len(rel) else 0.0,
               cases=[{**c, "predicted_s": float(t)} for c, t in zip(cases, predicted, strict=True)])


def fit_machine(rec: dict[str, Any]) -> Any:
    """The machine model (``sim.machine.model.Machine``) fitted to ``measure``'s record; fits under ``model``."""
    from sim.machine.model import EngineParams, Machine, host

    p = int(rec["ranks"])
    sizes = [float(s) for s in rec["p2p_sizes"]]
    pairs = {pair: fit_alpha_beta(sizes, t) for pair, t in rec["p2p"].items()}
    pooled = [_median([t[i] for t in rec["p2p"].values()]) for i in range(len(sizes))]
    p2p = fit_alpha_beta(sizes, pooled)
    knee = fit_knee(sizes, pooled)
    alpha, bw = float(p2p["alpha_s"]), float(p2p["bandwidth_Bps"])
    cap = fit_host_cap(rec, alpha, bw)
    host_bw = math.inf if cap["host_bandwidth_Bps"] is None else float(cap["host_bandwidth_Bps"])
    gamma: dict[str, Fit] = {}
    for dtype, rows in rec["reduce"].items():
        gamma[dtype] = Fit({how: fit_alpha_beta([float(s) for s in rec["reduce_sizes"]], t)
                            for how, t in rows.items()})
    reduce_bw = float(gamma["float32"]["together"]["bandwidth_Bps"]) if "float32" in gamma else None
    topo = host(p, bandwidth=bw, latency=alpha, host_bandwidth=host_bw if math.isfinite(host_bw) else None,
                name=f"calibrated:{p}")
    copy = fit_alpha_beta([float(x) for x in rec["copy_sizes"]], rec["copies"]) if rec.get("copies") else None
    runner = fit_runner(rec["runner"], topo, reduce_bw, p, copy)
    coll: Fit | None = None
    if rec.get("collectives"):
        # What collectives see, not what the flow patterns suggest, sets H and γ (at 4 ranks the patterns'
        # cap was half of what large collectives reach); the runner's costs are refitted with them, twice.
        for _ in range(2):
            coll = fit_collectives(rec["collectives"], p, alpha=alpha, bw=bw, host_bw=host_bw, reduce_bw=reduce_bw,
                                   launch=float(runner["launch_s"]), message_cpu=float(runner["message_cpu_s"]),
                                   copy=copy)
            hb = coll["host_bandwidth_Bps"]
            host_bw = math.inf if hb is None else float(hb)
            rb = coll["reduce_bandwidth_Bps"]
            reduce_bw = None if rb is None else float(rb)
            topo = host(p, bandwidth=bw, latency=alpha,
                        host_bandwidth=host_bw if math.isfinite(host_bw) else None, name=f"calibrated:{p}")
            runner = fit_runner(rec["runner"], topo, reduce_bw, p, copy)
    engine = EngineParams(reduce_bandwidth=reduce_bw, launch=float(runner["launch_s"]),
                          message_cpu=float(runner["message_cpu_s"]))
    model = {"source": "collsched calibrate", "ranks": p, "seconds": rec.get("seconds"), "rounds": rec.get("rounds"),
             "p2p": {"pooled": p2p, "knee": knee, "pairs": pairs, "sizes": sizes, "times_s": rec["p2p"]},
             "flows": {"bytes": rec["flow_bytes"], "patterns": rec["patterns"], "times_s": rec["flows"], "fit": cap},
             "reduce": {"sizes": rec["reduce_sizes"], "times_s": rec["reduce"], "fit": gamma},
             "runner": runner, "runner_check": rec.get("runner_check", True)}
    if copy is not None:
        model["copies"] = {"sizes": rec["copy_sizes"], "times_s": rec["copies"], "fit": copy}
    if coll is not None:
        model["collectives"] = {"sizes": sorted({c["size"] for c in rec["collectives"]}), "fit": coll}
    return Machine(topo, engine, _finite(model))


def _finite(x: Any) -> Any:
    """``x`` as plain JSON values: numpy numbers as floats, infinities and NaN as None."""
    if isinstance(x, dict):
        return {str(k): _finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_finite(v) for v in x]
    if isinstance(x, float | np.floating):
        return float(x) if math.isfinite(float(x)) else None
    if isinstance(x, np.integer):
        return int(x)
    return x


def _gbps(bw: float | None) -> str:
    return "unlimited" if bw is None else f"{bw / 1e9:.3f} GB/s"


def summary(machine: Any) -> str:
    """A few lines on the fitted machine."""
    m, e = machine.model, machine.engine
    p2p, knee, cap = m["p2p"]["pooled"], m["p2p"]["knee"], m["flows"]["fit"]
    hb = cap["host_bandwidth_Bps"]
    lines = [f"# collsched calibrate: {m['ranks']} ranks, {m['seconds'] or 0:.1f} s of measurements "
             f"({m.get('rounds') or 1} rounds, medians)",
             f"point-to-point  α = {p2p['alpha_s'] * 1e6:.1f} us, B = {_gbps(p2p['bandwidth_Bps'])} "
             f"(rms {p2p['rms_rel']:.1%}, max {p2p['max_rel']:.1%}; "
             f"{len(m['p2p']['pairs'])} pair(s), pooled medians)",
             f"knee            {knee['knee_bytes']:.0f} B: below α = {knee['below']['alpha_s'] * 1e6:.1f} us, "
             f"B = {_gbps(knee['below']['bandwidth_Bps'])}; above α = {knee['above']['alpha_s'] * 1e6:.1f} us, "
             f"B = {_gbps(knee['above']['bandwidth_Bps'])} (rms {knee['rms_rel']:.1%})",
             f"host cap        {'none' if hb is None else f'{hb / 1e9:.3f} GB/s'} over all ranks' flows "
             f"(patterns rms {cap['rms_rel']:.1%}: " + ", ".join(
                 f"{k} {m['flows']['times_s'][k] * 1e3:.2f}/{v * 1e3:.2f} ms" for k, v in cap["predicted_s"].items())
             + " measured/predicted)"]
    if "collectives" in m:
        c = m["collectives"]["fit"]
        lines.append(f"collectives     host cap {_gbps(c['host_bandwidth_Bps'])}, "
                     f"reduce {_gbps(c['reduce_bandwidth_Bps'])} (the model's figures: fitted to "
                     f"{len(c['cases'])} large runner collectives, rms "
                     f"{c['rms_rel']:.1%}; " + ", ".join(
                         f"{x['collective']}/{x['algorithm']} {x['size'] >> 20} MiB {x['time_s'] * 1e3:.1f}/"
                         f"{x['predicted_s'] * 1e3:.1f} ms" for x in c["cases"]) + " measured/predicted)")
    if "copies" in m:
        cf = m["copies"]["fit"]
        lines.append(f"buffer copy     {_gbps(cf['bandwidth_Bps'])} (zero-fill and copy into fresh memory, every rank "
                     f"at once, α = {cf['alpha_s'] * 1e6:.1f} us; rms {cf['rms_rel']:.1%}): the runner's private "
                     "input copy")
    for dtype, g in m["reduce"]["fit"].items():
        lines.append(f"reduce {dtype:<9} γ = {_gbps(g['together']['bandwidth_Bps'])} every rank at once, "
                     f"{_gbps(g['alone']['bandwidth_Bps'])} alone (rms {g['together']['rms_rel']:.1%})")
    r = m["runner"]
    lines.append(f"runner          launch = {e.launch * 1e6:.1f} us per call, message_cpu = {e.message_cpu * 1e6:.1f} "
                 f"us per message sent or received (rms {r['rms_rel']:.1%} over {len(r['cases'])} runs, "
                 f"{len(r['dropped'])} dropped as outliers)")
    return "\n".join(lines)


# ---------------------------------------------------------------- validate and tune (simulation side: no torch)


def load_machine(path: str, ranks: int | None = None) -> Any:
    """The machine file at ``path``, for ``ranks`` ranks: a calibrated host (switches tx and rx) is rebuilt
    with the same figures for another world size; any other topology must have ``ranks`` ranks."""
    from sim.machine.model import Machine, host, load
    from sim.topology import TopologyError

    try:
        m = load(path)
    except TopologyError as e:
        raise CalibrationError(f"--machine: {e}") from None
    topo = m.topology
    if ranks is None or ranks == topo.ranks:
        return m
    switches = {n for n in topo.graph.nodes if isinstance(n, str)}
    if switches != {"tx", "rx"}:
        raise CalibrationError(f"--machine {path}: {topo.ranks} ranks, not {ranks}, and not a calibrated host "
                               "topology that can be resized")
    bw = topo.bandwidth(0, "tx")
    return Machine(host(ranks, bandwidth=bw, latency=topo.graph.edges["tx", "rx"]["latency"],
                        host_bandwidth=topo.bandwidth("tx", "rx"), name=f"{topo.name} as {ranks} ranks"),
                   m.engine, m.model)


def algorithms_for(kind: Kind | str, p: int) -> list[str]:
    """Names of the registered algorithms of ``kind`` that can serve ``p`` ranks with default parameters."""
    return [a.name for a in registry.algorithms(kind) if a.unsupported(p) is None]


def _build(kind: Kind | str, name: str, p: int, chunks: int = 1) -> Schedule:
    from algorithms.ir import ROOTED_KINDS

    algorithm = registry.get(kind, name)
    params = {"chunks": chunks} if any(q.name == "chunks" for q in algorithm.parameters) else {}
    return algorithm.build(p, root=0 if Kind(kind) in ROOTED_KINDS else None, **params)


def predict(machine: Any, kind: str, name: str, p: int, size: float, chunks: int = 1) -> float:
    """Simulated seconds of one algorithm on the machine (dataflow, as the gloo runner executes)."""
    sched = _build(kind, name, p, chunks)
    r = machine.simulate(sched, size)
    if not r.ok:
        raise CalibrationError(f"{kind}/{name} on {p} ranks failed its postcondition in simulation")
    return float(r.time) + copy_seconds(sched, size, _copy_fit(machine))


def _copy_fit(machine: Any) -> dict[str, Any] | None:
    """The machine's fit of the runner's buffer copies (``collsched calibrate``'s ``model.copies``), if any."""
    copies = (machine.model or {}).get("copies")
    return copies.get("fit") if isinstance(copies, dict) else None


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Median and 90th-percentile absolute relative error; how often the predicted-fastest algorithm of a
    (kind, size) is measured-fastest (``exact``) or within 10% of it (``within_10pct``)."""
    errs = sorted(abs(r["error"]) for r in rows)
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["collective"], r["size"]), []).append(r)
    exact = near = 0
    for g in groups.values():
        pick = min(g, key=lambda r: r["predicted_s"])
        fastest = min(g, key=lambda r: r["measured_s"])
        exact += pick is fastest
        near += pick["measured_s"] <= 1.1 * fastest["measured_s"]
    n = len(groups)
    return {"points": len(rows), "median_abs_error": float(np.percentile(errs, 50)) if errs else None,
            "p90_abs_error": float(np.percentile(errs, 90)) if errs else None, "groups": n,
            "predicted_fastest_is_fastest": exact / n if n else None,
            "predicted_fastest_within_10pct": near / n if n else None}


def validation_table(rows: Sequence[dict[str, Any]], summ: dict[str, Any]) -> str:
    lines = ["# collsched validate: measured (runner, median of launches) vs predicted (simulated on the machine)",
             f"#{'collective':>13} {'algorithm':>20} {'size':>10} {'measured':>12} {'predicted':>12} {'error':>8}"
             f" {'torch':>12}",
             f"#{'':>13} {'':>20} {'(B)':>10} {'(us)':>12} {'(us)':>12} {'':>8} {'(us)':>12}"]
    for r in rows:
        lines.append(f" {r['collective']:>13} {r['algorithm']:>20} {r['size']:>10} {r['measured_s'] * 1e6:>12.1f} "
                     f"{r['predicted_s'] * 1e6:>12.1f} {r['error']:>+8.1%} {r['native_s'] * 1e6:>12.1f}")
    lines.append(f"# {summ['points']} points: median |error| {summ['median_abs_error']:.1%}, 90th percentile "
                 f"{summ['p90_abs_error']:.1%}; predicted-fastest is measured-fastest at "
                 f"{summ['predicted_fastest_is_fastest']:.0%} of {summ['groups']} (collective, size) points, "
                 f"within 10% of it at {summ['predicted_fastest_within_10pct']:.0%}")
    return "\n".join(lines)


def plot_validation(rows: Sequence[dict[str, Any]], path: str) -> None:
    """Predicted against measured, log-log, one colour per (collective, algorithm), and the diagonal."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 7))
    labels = sorted({(r["collective"], r["algorithm"]) for r in rows})
    cmap = plt.get_cmap("tab20")
    for i, (kind, name) in enumerate(labels):
        pts = [r for r in rows if (r["collective"], r["algorithm"]) == (kind, name)]
        ax.scatter([r["measured_s"] * 1e6 for r in pts], [r["predicted_s"] * 1e6 for r in pts], s=18,
                   color=cmap(i % 20), marker="os^vD"[i // 20 % 5], label=f"{kind}/{name}")
    lo = min(min(r["measured_s"], r["predicted_s"]) for r in rows) * 1e6 / 1.5
    hi = max(max(r["measured_s"], r["predicted_s"]) for r in rows) * 1e6 * 1.5
    ax.plot([lo, hi], [lo, hi], color="black", lw=0.8)
    ax.set(xscale="log", yscale="log", xlabel="measured (us)", ylabel="predicted (us)",
           title=f"collsched validate, {rows[0]['ranks']} ranks")
    ax.legend(fontsize=6, ncol=2)
    try:
        fig.savefig(path, dpi=120, bbox_inches="tight")
    except OSError as e:
        raise CalibrationError(f"--plot {path}: cannot write: {e.strerror or e}") from None
    finally:
        plt.close(fig)


TUNE_CHUNKS = (1, 2, 4)
TUNE_MARGIN = 0.15
"""A choice is kept unless another is predicted faster by more than this fraction: the model's median
validation error on the development machine (14-18% at 2 and 4 ranks, docs/design.md), below which a
predicted gain is not to be trusted. At 5% (the noise between launches) tune picked direct all-reduce at
1 MiB on 4 ranks for a predicted 6% gain, and it was 1.08-2.04x slower than recursive doubling in all of 7
paired launches."""


def tune(machine: Any, p: int, sizes: Sequence[int], kinds: Sequence[Kind] | None = None,
         ) -> dict[str, list[dict[str, Any]]]:
    """Per kind, the rules of a ``collsched.tuning/1`` file for ``p`` ranks: at each size the algorithm (and
    chunks in ``TUNE_CHUNKS``) with the least simulated time; neighbouring sizes with the same choice make
    one rule, which covers calls up to its largest size (the last: every size). Where the policy's hand-made
    band (``runners.policy.HAND_DEFAULTS``), or else the previous size's choice, is within ``TUNE_MARGIN`` of
    the least time, it is kept."""
    from runners.policy import HAND_DEFAULTS, Policy

    hand_made = Policy(dict(HAND_DEFAULTS))
    copy = _copy_fit(machine)
    rules: dict[str, list[dict[str, Any]]] = {}
    for kind in kinds or registry.kinds():
        cands: list[tuple[str, int, Schedule]] = []
        for name in algorithms_for(kind, p):
            for c in TUNE_CHUNKS:
                if "chunks" in {q.name for q in registry.get(kind, name).parameters} or c == 1:
                    cands.append((name, c, _build(kind, name, p, c)))
        if not cands:
            continue
        picks: list[tuple[str, int, float, int]] = []
        for size in sizes if kind is not Kind.BARRIER else sizes[:1]:
            times = {(name, c): float(r.time) + copy_seconds(sched, size, copy) for name, c, sched in cands
                     if (r := machine.simulate(sched, size)).ok}
            if not times:
                continue
            best = min(times, key=lambda k: times[k])  # the first of equals, in registry order
            # Within the margin a measurement cannot tell: keep the hand-made band's choice, else the previous.
            d = hand_made.choose(kind, size, p)
            for keep in ((d.algorithm, dict(d.params).get("chunks", 1)),
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


# ---------------------------------------------------------------- command lines


def _spawn(fn: Callable[..., Any], nproc: int, *args: Any, timeout: float = 3600.0) -> Any:
    from runners.launch import SpawnError, spawn

    if nproc < 2:
        raise CalibrationError(f"--nproc must be >= 2, got {nproc}")
    try:
        return spawn(fn, nproc, *args, timeout=timeout)[0]
    except SpawnError as e:
        first = next(o for o in e.outcomes if not o.ok)
        text = (first.error or "").splitlines()[0] if first.error else str(e)
        raise CalibrationError(f"rank {first.rank}: {text}") from None


def _save(machine: Any, path: str) -> None:
    from sim.machine.model import save

    try:
        save(machine, path)
    except OSError as e:
        raise CalibrationError(f"--out {path}: cannot write: {e.strerror or e}") from None


def _cmd_calibrate(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    rec = _spawn(measure, args.nproc, args.check, args.rounds, timeout=args.job_timeout)
    machine = fit_machine(rec)
    _save(machine, args.out)
    wall = time.perf_counter() - t0
    if args.json:
        print(json.dumps({"ok": True, "out": args.out, "wall_s": wall, "engine": machine.engine.to_dict(),
                          "model": machine.model}))
    else:
        print(summary(machine))
        print(f"wrote {args.out} ({wall:.1f} s in all)")
    return 0


def _validate_worker(rank: int, cases: list[tuple[str, str]], sizes: list[int], iters: int, warmup: int,
                     check: bool) -> list[dict[str, Any]]:
    import torch.distributed as dist

    from runners.bench import measure as bench_measure

    p = dist.get_world_size()
    rows = []
    for kind, name in cases:
        rows += bench_measure(_build(kind, name, p), sizes, iters=iters, warmup=warmup, check=check)
    return rows


def validate(machine: Any, p: int, sizes: Sequence[int], *, launches: int = 3, iters: int = 5, warmup: int = 1,
             kinds: Sequence[str] = VALIDATE_KINDS, check: bool = True, job_timeout: float = 3600.0,
             ) -> list[dict[str, Any]]:
    """Measured (median over launches of bench's medians) and predicted time of every algorithm of each kind."""
    cases = [(k, a) for k in kinds for a in algorithms_for(k, p)]
    launch_rows = [_spawn(_validate_worker, p, cases, list(sizes), iters, warmup, check, timeout=job_timeout)
                   for _ in range(launches)]
    rows = []
    for i, r in enumerate(launch_rows[0]):
        runs = [lr[i] for lr in launch_rows]
        if any(x["wrong"] for x in runs):
            raise CalibrationError(f"{r['collective']}/{r['algorithm']} at {r['size']} B: the runner's result "
                                   "was wrong")
        measured = _median([x["time_us"] * 1e-6 for x in runs])
        predicted = predict(machine, r["collective"], r["algorithm"], p, r["size"])
        rows.append({"collective": r["collective"], "algorithm": r["algorithm"], "ranks": p, "size": r["size"],
                     "measured_s": measured, "predicted_s": predicted, "error": predicted / measured - 1,
                     "native_s": _median([x["native_time_us"] * 1e-6 for x in runs]),
                     "launches_s": [x["time_us"] * 1e-6 for x in runs]})
    return rows


def _cmd_validate(args: argparse.Namespace) -> int:
    if args.launches < 1 or args.iters < 1 or args.warmup < 0:
        raise CalibrationError("--launches and --iters must be >= 1, --warmup >= 0")
    kinds = [k.strip() for k in args.collectives.split(",") if k.strip()]
    for k in kinds:
        if k not in {str(x) for x in Kind}:
            raise CalibrationError(f"--collectives: unknown collective {k!r}")
    sizes = [int(x) for x in units.parse_sizes(args.sizes)]
    machine = load_machine(args.machine, args.nproc)
    t0 = time.perf_counter()
    rows = validate(machine, args.nproc, sizes, launches=args.launches, iters=args.iters, warmup=args.warmup,
                    kinds=kinds, check=args.check, job_timeout=args.job_timeout)
    summ = summarise(rows)
    summ["wall_s"] = time.perf_counter() - t0
    if args.plot:
        plot_validation(rows, args.plot)
    if args.json:
        print(json.dumps({"ok": True, "summary": summ, "rows": rows}))
    else:
        print(validation_table(rows, summ))
        print(f"# {summ['wall_s']:.0f} s")
    return 0


def _cmd_tune(args: argparse.Namespace) -> int:
    from runners.policy import TUNING_FORMAT, parse_tuning

    sizes = [int(x) for x in units.parse_sizes(args.sizes)]
    machines = [load_machine(path) for path in args.machine]
    nprocs = args.nproc or [m.topology.ranks for m in machines]
    rules: dict[str, list[dict[str, Any]]] = {}
    for p in nprocs:
        if p < 1:
            raise CalibrationError(f"--nproc must be >= 1, got {p}")
        own = [i for i, m in enumerate(machines) if m.topology.ranks == p]
        m = machines[own[0]] if own else load_machine(args.machine[0], p)
        for kind, kind_rules in tune(m, p, sizes).items():
            rules.setdefault(kind, []).extend(kind_rules)
    doc = {"format": TUNING_FORMAT,
           "comment": f"collsched tune --machine {' --machine '.join(args.machine)} "
                      + " ".join(f"--nproc {p}" for p in nprocs) + f" --sizes {args.sizes}: the least simulated "
                      "time per size band; predicted_s gives each rule's simulated seconds by size in bytes",
           "rules": rules}
    parse_tuning(doc, where="tune")  # what we write must load
    text = json.dumps(doc, indent=1) + "\n"
    if args.output:
        try:
            Path(args.output).write_text(text)
        except OSError as e:
            raise CalibrationError(f"-o {args.output}: cannot write: {e.strerror or e}") from None
    if args.json:
        print(json.dumps({"ok": True, "output": args.output, "tuning": doc}))
    elif args.output:
        n = sum(len(v) for v in rules.values())
        print(f"wrote {args.output}: {n} rules for {len(rules)} collectives on " + ", ".join(map(str, nprocs))
              + " ranks")
        for kind, kr in rules.items():
            print(f"  {kind:<14} " + "; ".join(
                f"p={r['min_ranks']} {r['algorithm']}{':chunks=' + str(r['params']['chunks']) if 'params' in r else ''}"
                f"{' <= ' + str(r['max_bytes']) if 'max_bytes' in r else ''}" for r in kr))
    else:
        print(text, end="")
    return 0


def add_parser(subparsers: Any) -> None:
    """Register ``collsched calibrate``, ``validate`` and ``tune``."""
    from sim.cli.common import add_common_args

    p = subparsers.add_parser("calibrate", help="measure this machine and fit a machine model (machine file)",
                              description=__doc__.splitlines()[0])
    p.add_argument("--nproc", "-N", type=int, required=True, help="number of local processes (ranks), >= 2")
    p.add_argument("--out", "-o", default="machine.json", help="machine file to write (default machine.json)")
    p.add_argument("--no-check", dest="check", action="store_false",
                   help="time the runner without its cross-rank argument check (run(check=False))")
    p.add_argument("--rounds", type=int, default=3, help="times every micro-benchmark runs; each figure is the "
                                                         "median over them (default 3)")
    p.add_argument("--job-timeout", type=float, default=1800.0, help="seconds before the whole job is killed")
    add_common_args(p, json_help='print {"ok", "out", "wall_s", "engine", "model"}')
    p.set_defaults(func=_cmd_calibrate)

    p = subparsers.add_parser("validate", help="measure every algorithm on local processes and compare with the "
                                               "machine model's predictions")
    p.add_argument("--machine", "-m", required=True, help="machine file (collsched calibrate)")
    p.add_argument("--nproc", "-N", type=int, required=True, help="number of local processes (ranks), >= 2")
    p.add_argument("--sizes", "-s", default="4KiB:64MiB:4", help="MIN:MAX[:FACTOR] or A,B,C (default 4KiB:64MiB:4)")
    p.add_argument("--collectives", default=",".join(VALIDATE_KINDS),
                   help=f"comma-separated kinds (default {','.join(VALIDATE_KINDS)})")
    p.add_argument("--launches", type=int, default=3, help="separate launches; their median counts (default 3)")
    p.add_argument("--iters", "-n", type=int, default=5, help="timed iterations per size and launch (default 5)")
    p.add_argument("--warmup", "-w", type=int, default=1, help="untimed iterations first (default 1)")
    p.add_argument("--no-check", dest="check", action="store_false", help="run(check=False) when timing")
    p.add_argument("--plot", metavar="F.png", help="write predicted vs measured (log-log, a colour per algorithm)")
    p.add_argument("--job-timeout", type=float, default=3600.0, help="seconds before one launch is killed")
    add_common_args(p, json_help='print {"ok", "summary", "rows": [...]}')
    p.set_defaults(func=_cmd_validate)

    p = subparsers.add_parser("tune", help="write the COLLSCHED_TUNING file that the machine model predicts best")
    p.add_argument("--machine", "-m", action="append", required=True,
                   help="machine file (repeatable: each tunes its own world size)")
    p.add_argument("--nproc", "-N", type=int, action="append", default=[],
                   help="world size to tune (repeatable; default: each machine's own); a calibrated host is "
                        "resized when no machine has that many ranks")
    p.add_argument("--sizes", "-s", default="1KiB:1GiB:2", help="size bands (default 1KiB:1GiB:2)")
    p.add_argument("--output", "-o", help="tuning file to write (default: print it)")
    add_common_args(p, json_help='print {"ok", "output", "tuning"}')
    p.set_defaults(func=_cmd_tune)


def main(argv: Sequence[str] | None = None) -> int:
    """Under torchrun: every rank measures, rank 0 fits and writes the machine file."""
    parser = argparse.ArgumentParser(prog="python -m runners.calibrate", description=__doc__.splitlines()[0])
    parser.add_argument("--out", "-o", default="machine.json")
    parser.add_argument("--no-check", dest="check", action="store_false")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    from runners.launch import init

    try:
        rank, _ = init("gloo")
        rec = measure(rank, args.check, args.rounds)
    except CollschedError as e:
        print(f"runners.calibrate: error: {e}", file=sys.stderr)
        return 2
    import torch.distributed as dist

    try:
        if rank == 0:
            machine = fit_machine(rec)
            _save(machine, args.out)
            print(summary(machine))
        return 0
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
