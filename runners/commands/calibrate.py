"""Calibrate a machine model from measurements, check it against the runner, and tune the policy with it.

    collsched calibrate --nproc N [--out machine.json] [--json]
    collsched validate --machine machine.json --nproc N [--sizes 4KiB:64MiB:4] [--launches 3] [--json] [--plot F]
    collsched tune --machine machine.json --nproc N [--nproc M ...] [-o tuning.json] [--json]

``calibrate`` spawns N local gloo ranks (or runs under torchrun: ``python -m
runners.commands.calibrate --out F``) and measures what the model needs
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
4. the runner's own cost: ``runners.execution.runner.run`` of small schedules, fitted
   (with the simulator) as a fixed cost per call (``launch``) plus a cost per
   message (``message_cpu``);
5. large runner collectives (``COLLECTIVE_CASES`` at 4 to 64 MiB): the
   model's host cap H is the one that best explains the all-gathers, and γ
   the reducing ones (the flow patterns' H and ``x.add_``'s γ stay in the
   record as diagnostics), with the runner's costs refitted after them;
6. the runner's private copy of a buffer (zero-filled, then copied) into
   fresh memory: what an out-of-place schedule that writes its input costs
   before its first transfer, which the engine does not see; predictions
   add it (``sim.machine.predict.copy_seconds``).

The parent process fits the record (``sim.machine.calibration.fit_machine``)
and writes a machine file (``sim.machine.model``): the ``host`` topology
(per-rank send/receive links at B, α on the host link, the host cap), the
engine parameters, and the measurements and fits under ``model``.

``validate`` measures the runner (``runners.commands.bench.measure``: schedule and
torch's collective interleaved, median of the slowest rank's time; the
median over ``--launches`` launches) for every algorithm of allreduce,
allgather, reducescatter, broadcast and alltoall at each size, simulates the
same schedule on the machine, and prints measured, predicted and error, then
the median and 90th-percentile absolute error and how often the predicted-
fastest algorithm is measured-fastest or within 10% of it
(``sim.machine.predict``).

``tune`` simulates every algorithm of each kind on the machine at each size
band and writes the ``COLLSCHED_TUNING`` file (``collsched.tuning/1``) with
the fastest, and its predicted time, per band and world size
(``sim.machine.tune``; within its margin it keeps the policy's hand-made
band, ``hand_made_preference``).

This module holds what runs on gloo ranks (the measurements) and the
command lines; the fitting, prediction and tuning are numpy-only and live in
``sim.machine``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from algorithms import registry
from algorithms.disk import write_output
from algorithms.errors import CollschedError
from algorithms.ir import Kind
from sim import units
from sim.machine.fit import CalibrationError

if TYPE_CHECKING:
    from sim.machine.model import Machine
    from sim.machine.tune import Preference

__all__ = ["COLLECTIVE_CASES", "COPY_SIZES", "RUNNER_CASES", "RUNNER_SIZES", "VALIDATE_KINDS", "CalibrationError",
           "add_parser", "hand_made_preference", "main", "measure", "validate"]

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
    """The runner's private copy of a buffer (``runners.execution.buffers``: ``torch.zeros`` then ``copy_``) into fresh
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

    from runners.commands.bench import _buffers
    from runners.execution.runner import run

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


# ---------------------------------------------------------------- tune's preference (the policy's hand-made bands)


def hand_made_preference() -> Preference:
    """What ``sim.machine.tune.tune`` keeps within its margin: the choice of the policy's hand-made bands
    (``runners.backend.policy.HAND_DEFAULTS``) as (algorithm, chunks)."""
    from runners.backend.policy import HAND_DEFAULTS, Policy

    hand_made = Policy(dict(HAND_DEFAULTS))

    def prefer(kind: Kind, size: int, p: int) -> tuple[str, int]:
        d = hand_made.choose(kind, size, p)
        return d.algorithm, int(dict(d.params).get("chunks", 1))

    return prefer


# ---------------------------------------------------------------- command lines


def _spawn(fn: Callable[..., Any], nproc: int, *args: Any, timeout: float = 3600.0) -> Any:
    from runners.commands.launch import SpawnError, spawn

    if nproc < 2:
        raise CalibrationError(f"--nproc must be >= 2, got {nproc}")
    try:
        return spawn(fn, nproc, *args, timeout=timeout)[0]
    except SpawnError as e:
        first = next(o for o in e.outcomes if not o.ok)
        text = (first.error or "").splitlines()[0] if first.error else str(e)
        raise CalibrationError(f"rank {first.rank}: {text}") from None


def _save(machine: Machine, path: str) -> None:
    from sim.machine.model import save

    try:
        save(machine, path)
    except OSError as e:
        raise CalibrationError(f"--out {path}: cannot write: {e.strerror or e}") from None


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from sim.machine.calibration import calibration_report, fit_machine

    t0 = time.perf_counter()
    rec = _spawn(measure, args.nproc, args.check, args.rounds, timeout=args.job_timeout)
    machine = fit_machine(rec)
    _save(machine, args.out)
    wall = time.perf_counter() - t0
    if args.json:
        print(json.dumps({"ok": True, "out": args.out, "wall_s": wall, "engine": machine.engine.to_dict(),
                          "model": machine.model}))
    else:
        print(calibration_report(machine))
        print(f"wrote {args.out} ({wall:.1f} s in all)")
    return 0


def _validate_worker(rank: int, cases: list[tuple[str, str]], sizes: list[int], iters: int, warmup: int,
                     check: bool) -> list[dict[str, Any]]:
    import torch.distributed as dist

    from runners.commands.bench import measure as bench_measure
    from sim.machine.predict import build_schedule

    p = dist.get_world_size()
    rows = []
    for kind, name in cases:
        rows += bench_measure(build_schedule(kind, name, p), sizes, iters=iters, warmup=warmup, check=check)
    return rows


def validate(machine: Machine, p: int, sizes: Sequence[int], *, launches: int = 3, iters: int = 5, warmup: int = 1,
             kinds: Sequence[str] = VALIDATE_KINDS, check: bool = True, job_timeout: float = 3600.0,
             runtime: str | None = None, protocol: str | None = None) -> list[dict[str, Any]]:
    """Measured (median over launches of bench's medians) and predicted time of every algorithm of each kind."""
    from sim.machine.predict import algorithms_for, predict

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
        predicted = predict(machine, r["collective"], r["algorithm"], p, r["size"], runtime=runtime,
                            protocol=protocol)
        rows.append({"collective": r["collective"], "algorithm": r["algorithm"], "ranks": p, "size": r["size"],
                     "measured_s": measured, "predicted_s": predicted, "error": predicted / measured - 1,
                     "native_s": _median([x["native_time_us"] * 1e-6 for x in runs]),
                     "launches_s": [x["time_us"] * 1e-6 for x in runs]})
    return rows


def _validate_nccl_tests(args: argparse.Namespace) -> int:
    """``collsched validate --nccl-tests LOG -t TOPO``: the log's measured times against ``-a nccl`` on TOPO."""
    from sim.machine.published import from_nccl_tests, score
    from sim.topology import from_spec

    if not args.topology:
        raise CalibrationError("--nccl-tests needs --topology TOPO (a GPU preset such as dgx-h100:2)")
    try:
        topo = from_spec(args.topology)
    except CollschedError as e:
        raise CalibrationError(f"--topology: {e}") from None
    out: list[dict[str, Any]] = []
    for path in args.nccl_tests:
        try:
            table = from_nccl_tests(path)
            s = score(table, topo, algo=args.algo)
        except (CollschedError, ValueError, OSError) as e:
            raise CalibrationError(str(e)) from None
        out.append({"log": str(path), "collective": table.collective, "rows": s.rows, "summary": s.stats(s.rows)})
    if args.json:
        print(json.dumps({"ok": True, "topology": topo.name, "logs": out}))
        return 0
    for o in out:
        print(f"# collsched validate: {o['log']} ({o['collective']}) measured vs -a nccl on {topo.name}")
        print(f"#{'size (B)':>13} {'measured us':>12} {'predicted us':>13} {'error':>8}  NCCL runs")
        for r in o["rows"]:
            print(f" {r['size']:>13} {r['measured_s'] * 1e6:>12.1f} {r['simulated_s'] * 1e6:>13.1f} "
                  f"{r['error']:>+8.1%}  {r['nccl']}" + (f" (simulated {r['simulated']})"
                                                        if r["simulated"] != r["nccl"] else ""))
        sm = o["summary"]
        med = "-" if sm["median"] is None else f"{sm['median']:.1%}"
        p90 = "-" if sm["p90"] is None else f"{sm['p90']:.1%}"
        print(f"# {sm['points']} points: median |error| {med}, 90th percentile {p90}")
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from sim.machine.predict import load_machine, plot_validation, validation_stats, validation_table

    if args.nccl_tests:
        return _validate_nccl_tests(args)
    if args.machine is None or args.nproc is None:
        raise CalibrationError("validate needs --machine and --nproc (or --nccl-tests LOG --topology TOPO)")
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
                    kinds=kinds, check=args.check, job_timeout=args.job_timeout, runtime=args.runtime,
                    protocol=args.protocol)
    summ = validation_stats(rows)
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
    from runners.backend.policy import TUNING_FORMAT, parse_tuning
    from sim.machine.predict import load_machine
    from sim.machine.tune import tune

    sizes = [int(x) for x in units.parse_sizes(args.sizes)]
    machines = [load_machine(path) for path in args.machine]
    nprocs = args.nproc or [m.topology.ranks for m in machines]
    rules: dict[str, list[dict[str, Any]]] = {}
    for p in nprocs:
        if p < 1:
            raise CalibrationError(f"--nproc must be >= 1, got {p}")
        own = [i for i, m in enumerate(machines) if m.topology.ranks == p]
        m = machines[own[0]] if own else load_machine(args.machine[0], p)
        for kind, kind_rules in tune(m, p, sizes, prefer=hand_made_preference()).items():
            rules.setdefault(kind, []).extend(kind_rules)
    doc = {"format": TUNING_FORMAT,
           "comment": f"collsched tune --machine {' --machine '.join(args.machine)} "
                      + " ".join(f"--nproc {p}" for p in nprocs) + f" --sizes {args.sizes}: the least simulated "
                      "time per size band; predicted_s gives each rule's simulated seconds by size in bytes",
           "rules": rules}
    parse_tuning(doc, where="tune")  # what we write must load
    text = json.dumps(doc, indent=1) + "\n"
    if args.output:
        write_output(args.output, text, CalibrationError)
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
    p.add_argument("--machine", "-m", help="machine file (collsched calibrate)")
    p.add_argument("--nproc", "-N", type=int, help="number of local processes (ranks), >= 2")
    p.add_argument("--nccl-tests", action="append", default=[], metavar="LOG",
                   help="instead of measuring: an nccl-tests log as printed (or a published .tsv table), its "
                        "measured times against -a nccl on --topology (repeatable)")
    p.add_argument("--topology", "-t", metavar="SPEC", help="with --nccl-tests: the GPU preset the log ran on")
    p.add_argument("--algo", choices=("ring", "tree", "pat", "nvls", "nvls_tree"), default=None,
                   help="with --nccl-tests: the algorithm NCCL_ALGO forced in the log")
    p.add_argument("--sizes", "-s", default="4KiB:64MiB:4", help="MIN:MAX[:FACTOR] or A,B,C (default 4KiB:64MiB:4)")
    p.add_argument("--collectives", default=",".join(VALIDATE_KINDS),
                   help=f"comma-separated kinds (default {','.join(VALIDATE_KINDS)})")
    p.add_argument("--launches", type=int, default=3, help="separate launches; their median counts (default 3)")
    p.add_argument("--iters", "-n", type=int, default=5, help="timed iterations per size and launch (default 5)")
    p.add_argument("--warmup", "-w", type=int, default=1, help="untimed iterations first (default 1)")
    p.add_argument("--no-check", dest="check", action="store_false", help="run(check=False) when timing")
    p.add_argument("--plot", metavar="F.png", help="write predicted vs measured (log-log, a colour per algorithm)")
    p.add_argument("--job-timeout", type=float, default=3600.0, help="seconds before one launch is killed")
    p.add_argument("--runtime", choices=("nccl", "msccl", "collsched", "plain"), default=None,
                   help="price the predictions as this runtime would (its protocol; sim.machine.runtime); default: "
                        "the machine's links as they are, as the gloo runner sees them")
    p.add_argument("--protocol", choices=("LL", "LL128", "Simple"), default=None,
                   help="force one NCCL protocol in the predictions")
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
    from sim.machine.calibration import calibration_report, fit_machine

    parser = argparse.ArgumentParser(prog="python -m runners.commands.calibrate", description=__doc__.splitlines()[0])
    parser.add_argument("--out", "-o", default="machine.json")
    parser.add_argument("--no-check", dest="check", action="store_false")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    from runners.commands.launch import init

    try:
        rank, _ = init("gloo")
        rec = measure(rank, args.check, args.rounds)
    except CollschedError as e:
        print(f"runners.commands.calibrate: error: {e}", file=sys.stderr)
        return 2
    import torch.distributed as dist

    try:
        if rank == 0:
            machine = fit_machine(rec)
            _save(machine, args.out)
            print(calibration_report(machine))
        return 0
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
