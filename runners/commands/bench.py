"""Benchmark a schedule against torch's native collective, side by side, nccl-tests style.

    torchrun --nproc_per_node=N -m runners.commands.bench --collective K --algorithm A --sizes 1KiB:64MiB \\
        [--iters 20] [--warmup 5] [--dtype float32] [--chunks k] [--json]
    collsched bench --nproc N --collective K --algorithm A --sizes 1KiB:64MiB ...   (spawns N local processes)

Before any rank starts, the parent builds the schedule and verifies it
symbolically: a bad name or parameter is exit 2, an incorrect schedule exit
1 with the verifier's report, and no process is spawned for either.

For each size the schedule and torch's collective each run ``warmup`` times,
then ``iters`` timed times; an iteration's time is the slowest rank's, and
the table shows the median; the two alternate iteration by iteration so that
both see the same machine load. Sizes follow nccl-tests (docs/design.md,
``sim.units.sized_buffer``): the buffer of allreduce, broadcast and reduce,
the output of allgather and gather, the input of reducescatter, scatter and
alltoall. algbw = size / time; busbw = algbw x factor (allreduce 2(p-1)/p;
allgather, reducescatter, alltoall, scatter, gather (p-1)/p; broadcast,
reduce 1). ``ratio`` is schedule busbw / torch busbw.

``#wrong`` (per side, one column each): before timing, each side runs once
on known data (integers from -3 to 3, so every result is a small integer,
exact in every dtype up to 42 ranks); #wrong is the number of result elements, summed over the
ranks that receive a result (only the root for reduce and gather), that are
not exactly equal (no tolerance) to the expected result computed
independently from those inputs. The torch column checks torch's own
collective the same way. Timing then runs on zeros.

Exit status: 0 when the schedule's #wrong is 0 at every size, 1 when it is
not (or the schedule fails verification), 2 for bad input.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from algorithms import registry
from algorithms.errors import CollschedError
from algorithms.ir import Kind, Schedule
from sim import units

__all__ = ["WRONG", "add_parser", "bus_factor", "main", "parse_sizes", "table"]

WRONG = """#wrong: elements of the result, summed over the ranks that receive one, not exactly equal to the
expected result on known data (integers -3..3: every result is exact in every dtype up to 42 ranks; no
tolerance); the schedule and torch's own collective are each checked this way, once per size, before timing."""

class BenchError(CollschedError, ValueError):
    """Benchmark options that cannot work (a count out of range, an unknown dtype)."""


def parse_sizes(text: str) -> list[int]:
    """Whole bytes of ``A:B`` (doubling), ``A:B:F`` or ``A,B,C`` (sim.units.parse_sizes)."""
    return [int(s) for s in units.parse_sizes(text)]


bus_factor = units.busbw_factor


# ---------------------------------------------------------------- the measured side (torch imported lazily)


def _data(rank: int, numel: int, dtype: Any) -> Any:
    import torch

    return (((torch.arange(numel, dtype=torch.int64) * 3 + rank * 5) % 7) - 3).to(dtype)


def _buffers(kind: Kind, p: int, rank: int, root: int | None, n: int, dtype: Any) -> tuple[Any, Any, Any]:
    """(input, output, expected result or None) for per-rank count n on known data."""
    import torch

    wide_in = kind in (Kind.REDUCESCATTER, Kind.SCATTER, Kind.ALLTOALL)
    x = _data(rank, n * (p if wide_in else 1), dtype)
    seg = slice(rank * n, (rank + 1) * n)
    if kind in (Kind.ALLREDUCE, Kind.REDUCE):
        # Each rank's data as its dtype holds it, summed exactly: for bool, a count of the True inputs, so that
        # .to(bool) is their OR, as torch's SUM on bool is (a sum of the raw small integers can cancel to 0).
        expected = sum((_data(r, n, dtype).to(torch.int64) for r in range(p)),
                       torch.zeros(n, dtype=torch.int64)).to(dtype)
        if kind is Kind.REDUCE and rank != root:
            expected = None
        return x, None, expected
    if kind is Kind.BROADCAST:
        return x, None, _data(root or 0, n, dtype)
    if kind is Kind.ALLGATHER or kind is Kind.GATHER:
        out = torch.empty(p * n, dtype=dtype) if kind is Kind.ALLGATHER or rank == root else None
        expected = torch.cat([_data(r, n, dtype) for r in range(p)]) if out is not None else None
        return x, out, expected
    if kind is Kind.REDUCESCATTER:
        total = sum((_data(r, p * n, dtype)[seg].to(torch.int64) for r in range(p)),
                    torch.zeros(n, dtype=torch.int64))
        return x, torch.empty(n, dtype=dtype), total.to(dtype)
    if kind is Kind.SCATTER:
        return (x if rank == root else None), torch.empty(n, dtype=dtype), _data(root or 0, p * n, dtype)[seg]
    if kind is Kind.ALLTOALL:
        return x, torch.empty(p * n, dtype=dtype), torch.cat([_data(s, p * n, dtype)[seg] for s in range(p)])
    return None, None, None


def _native(kind: Kind, p: int, rank: int, root: int | None, x: Any, out: Any) -> Callable[[], None]:
    """torch's own collective of this kind on these tensors, as a no-argument call."""
    import torch.distributed as dist

    if kind is Kind.ALLREDUCE:
        return lambda: dist.all_reduce(x)
    if kind is Kind.BROADCAST:
        return lambda: dist.broadcast(x, src=root)
    if kind is Kind.REDUCE:
        return lambda: dist.reduce(x, dst=root)
    if kind is Kind.ALLGATHER:
        return lambda: dist.all_gather_into_tensor(out, x)
    if kind is Kind.REDUCESCATTER:
        return lambda: dist.reduce_scatter_tensor(out, x)
    if kind is Kind.ALLTOALL:
        return lambda: dist.all_to_all_single(out, x)
    if kind is Kind.SCATTER:
        parts = list(x.chunk(p)) if rank == root else None
        return lambda: dist.scatter(out, parts, src=root)
    if kind is Kind.GATHER:
        parts = list(out.chunk(p)) if rank == root else None
        return lambda: dist.gather(x, parts, dst=root)
    return lambda: dist.barrier()


def _scheduled(schedule: Schedule, x: Any, out: Any, timeout: float | None, check: bool,
               executor: str = "auto") -> Callable[[], None]:
    from runners.execution.runner import run

    def call() -> None:
        run(schedule, x, out, timeout=timeout, check=check, executor=executor)

    return call


def _times(calls: Sequence[Callable[[], None]], iters: int, warmup: int,
           sync: Callable[[], None]) -> list[list[float]]:
    """Per call, this rank's time of each iteration; the calls alternate so that both see the same load."""
    import torch.distributed as dist

    for _ in range(warmup):
        for call in calls:
            call()
    sync()
    out: list[list[float]] = [[] for _ in calls]
    for _ in range(iters):
        for call, times in zip(calls, out, strict=True):
            dist.barrier()
            t0 = time.perf_counter()
            call()
            sync()
            times.append(time.perf_counter() - t0)
    return out


def _wrong(result: Any, expected: Any) -> int:
    if expected is None or result is None:
        return 0
    return int((result != expected).sum())


def measure(schedule: Schedule, sizes: Sequence[int], *, dtype: str = "float32", iters: int = 20, warmup: int = 5,
            timeout: float | None = None, check: bool = True, executor: str = "auto") -> list[dict[str, Any]]:
    """Run the benchmark on the current process group; every rank gets the same rows.

    ``check`` and ``executor`` are ``run``'s; the defaults are what a user of ``run`` gets."""
    import torch
    import torch.distributed as dist

    tdtype, rank, device, sync = _place(dtype)
    coll = schedule.collective
    kind, p, root = coll.kind, coll.ranks, coll.root
    elsize = torch.empty(0, dtype=tdtype).element_size()
    wide = units.sized_buffer(kind) != "buffer"
    rows = []
    for size in sizes if kind is not Kind.BARRIER else sizes[:1]:
        n = units.count_per_rank(kind, size, p, elsize)
        x, out, expected = _buffers(kind, p, rank, root, n, tdtype)
        x, out = (None if t is None else t.to(device) for t in (x, out))
        expected = None if expected is None else expected.to(device)
        # Correctness on known data, then timing on zeros (sums of zeros never overflow).
        wrong = [_wrong(result, expected) for result in _both(schedule, x, out, timeout, executor, sync)]
        if x is not None:
            x.zero_()
        t_sched, t_native = _times([_scheduled(schedule, x, out, timeout, check, executor),
                                    _native(kind, p, rank, root, x, out)], iters, warmup, sync)
        stats = torch.tensor([*t_sched, *t_native], dtype=torch.float64, device=device)
        dist.all_reduce(stats, op=dist.ReduceOp.MAX)
        counts = torch.tensor(wrong, dtype=torch.int64, device=device)
        dist.all_reduce(counts)
        slowest = stats.tolist()
        med_s, med_n = statistics.median(slowest[:iters]), statistics.median(slowest[iters:])
        nbytes = n * elsize * (p if wide else 1)
        factor = bus_factor(kind, p)
        alg_s, alg_n = nbytes / med_s / 1e9, nbytes / med_n / 1e9
        rows.append({
            "checked": check, "executor": _chosen(executor, device, kind),
            "collective": kind.value, "algorithm": schedule.name, "ranks": p, "chunks": coll.chunks,
            "size": nbytes, "count": n * (p if wide else 1), "type": dtype,
            "time_us": med_s * 1e6, "algbw": alg_s, "busbw": alg_s * factor, "wrong": int(counts[0]),
            "native_time_us": med_n * 1e6, "native_algbw": alg_n, "native_busbw": alg_n * factor,
            "native_wrong": int(counts[1]), "ratio": med_n / med_s,
        })
    return rows


def _chosen(executor: str, device: Any, kind: Kind) -> str:
    """The executor ``run`` uses for ``executor`` here (``auto`` resolved as the runner resolves it)."""
    from runners.execution.runner import AUTO_CPU

    if executor != "auto":
        return executor
    return "grouped" if device.type == "cuda" else AUTO_CPU.get(kind, "dataflow")


def max_difference(schedule: Schedule, size: int, *, dtype: str = "float32", seed: int = 0,
                   timeout: float | None = None) -> float:
    """The largest |schedule's result - torch's result| over every rank and element, on random normal data.

    Run on the current process group; every rank gets the same value. For
    float dtypes the two sum in different orders, so a small difference is
    expected; 0.0 means bitwise-identical results.
    """
    import torch
    import torch.distributed as dist

    tdtype, rank, device, sync = _place(dtype)
    coll = schedule.collective
    kind, p, root = coll.kind, coll.ranks, coll.root
    n = units.count_per_rank(kind, size, p, torch.empty(0, dtype=tdtype).element_size())
    x, out, _ = _buffers(kind, p, rank, root, n, tdtype)
    gen = torch.Generator().manual_seed(seed * 1000 + rank)
    if x is not None:
        x = torch.randn(x.shape, generator=gen, dtype=torch.float64).to(tdtype).to(device)
    out = None if out is None else out.to(device).zero_()
    a, b = _both(schedule, x, out, timeout, "auto", sync)
    diff = 0.0
    receives = kind not in (Kind.REDUCE, Kind.GATHER) or rank == root  # only the root receives those results
    if a is not None and b is not None and a.numel() > 0 and kind is not Kind.BARRIER and receives:
        diff = float((a.double() - b.double()).abs().max())
    t = torch.tensor([diff], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t[0])


def _place(dtype: str) -> tuple[Any, int, Any, Callable[[], None]]:
    """(torch dtype, rank, device, a function that waits for the device) on the current process group."""
    import torch
    import torch.distributed as dist

    cuda = "nccl" in str(dist.get_backend())
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    return _dtype(dtype), dist.get_rank(), device, sync


def _both(schedule: Schedule, x: Any, out: Any, timeout: float | None, executor: str,
          sync: Callable[[], None]) -> list[Any]:
    """The schedule's and torch's native results, each computed on fresh copies of ``x`` and ``out``."""
    import torch.distributed as dist

    from runners.execution.runner import run

    coll = schedule.collective
    results = []
    for side in ("schedule", "native"):
        xi = None if x is None else x.clone()
        oi = None if out is None else out.clone()
        if side == "schedule":
            run(schedule, xi, oi, timeout=timeout, executor=executor)
        else:
            _native(coll.kind, coll.ranks, dist.get_rank(), coll.root, xi, oi)()
        sync()
        results.append(xi if coll.in_place else oi)
    return results


def _dtype(dtype: str) -> Any:
    import torch

    tdtype = getattr(torch, dtype, None)
    if not isinstance(tdtype, torch.dtype):
        raise BenchError(f"--dtype: unknown dtype {dtype!r}")
    return tdtype


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The nccl-tests-style table of ``measure``'s rows."""
    if not rows:
        return "(no sizes)"
    r0 = rows[0]
    check = "on (run's default)" if r0.get("checked", True) else "off (--no-check)"
    lines = [f"# collsched bench: {r0['collective']} / {r0['algorithm']} (C={r0['chunks']}) vs torch native, "
             f"{r0['ranks']} ranks; time is the median of the slowest rank's",
             f"# executor {r0.get('executor', 'auto')}; cross-rank argument check {check}",
             f"#{'':>36}{'schedule':^40}{'torch native':^40}",
             f"#{'size':>12} {'count':>12} {'type':>9}" + f"{'time':>10} {'algbw':>9} {'busbw':>9} {'#wrong':>9}" * 2
             + f" {'ratio':>7}",
             f"#{'(B)':>12} {'(elements)':>12} {'':>9}" + f"{'(us)':>10} {'(GB/s)':>9} {'(GB/s)':>9} {'':>9}" * 2
             + f" {'busbw':>7}"]
    for r in rows:
        lines.append(
            f" {r['size']:>12} {r['count']:>12} {r['type']:>9}"
            f"{r['time_us']:>10.1f} {r['algbw']:>9.3f} {r['busbw']:>9.3f} {r['wrong']:>9}"
            f"{r['native_time_us']:>10.1f} {r['native_algbw']:>9.3f} {r['native_busbw']:>9.3f} {r['native_wrong']:>9}"
            f" {r['ratio']:>7.3f}")
    return "\n".join(lines)


# ---------------------------------------------------------------- command lines


def _add_options(parser: argparse.ArgumentParser) -> None:
    from sim.cli.common import add_common_args, add_schedule_args

    add_schedule_args(parser, ranks=False)
    parser.add_argument("--sizes", "-s", default="1KiB:64MiB", help="MIN:MAX[:FACTOR] or a list A,B,C "
                        "(units B, KiB, MiB, GiB; default 1KiB:64MiB)")
    parser.add_argument("--iters", "-n", type=int, default=20, help="timed iterations per size (default 20)")
    parser.add_argument("--warmup", "-w", type=int, default=5, help="untimed iterations first (default 5)")
    parser.add_argument("--dtype", "-d", default="float32", help="element type (default float32)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds before a run gives up")
    parser.add_argument("--no-check", dest="check", action="store_false",
                        help="time runs without the cross-rank argument check (run(check=False)); by default "
                             "it is on, as for any caller of run()")
    parser.add_argument("--executor", choices=["auto", "grouped", "dataflow"], default="auto",
                        help="run()'s executor (default auto: grouped on nccl; on gloo what measured faster)")
    add_common_args(parser, json_help='print {"ok", "rows": [...]} instead of the table; ok: #wrong is 0 '
                                      'everywhere')


def _check_counts(args: argparse.Namespace) -> None:
    if args.iters < 1 or args.warmup < 0:
        raise BenchError(f"--iters must be >= 1 and --warmup >= 0, got {args.iters} and {args.warmup}")
    parse_sizes(args.sizes)


def _checked_schedule(args: argparse.Namespace, ranks: int) -> tuple[Schedule, Any]:
    """The schedule the options name for ``ranks`` ranks, and the verifier's report on it."""
    from sim.cli.common import schedule_from_args
    from sim.verify.verifier import verify

    registry.import_modules(args.imports)
    schedule = schedule_from_args(args, ranks=ranks)
    if schedule.collective.ranks != ranks:
        raise BenchError(f"the schedule has {schedule.collective.ranks} ranks, the job {ranks}")
    return schedule, verify(schedule)


def _refuse(report: Any, as_json: bool, prog: str) -> int:
    """Print why an incorrect schedule is not benchmarked; exit status 1."""
    if as_json:
        print(json.dumps({"ok": False, "error": f"the schedule is incorrect: {len(report.violations)} violation(s)",
                          "verify": report.to_dict()}))
    else:
        print(report)
        print(f"{prog}: the schedule is incorrect; not benchmarked", file=sys.stderr)
    return 1


def _worker(rank: int, schedule: Schedule, args: argparse.Namespace) -> list[dict[str, Any]]:
    registry.import_modules(args.imports)  # the user's modules in every rank, as in the parent
    return measure(schedule, parse_sizes(args.sizes), dtype=args.dtype, iters=args.iters, warmup=args.warmup,
                   timeout=args.timeout, check=args.check, executor=args.executor)


def _print(rows: list[dict[str, Any]], as_json: bool) -> int:
    ok = all(r["wrong"] == 0 for r in rows)
    print(json.dumps({"ok": ok, "rows": rows}, indent=1) if as_json else table(rows))
    return 0 if ok else 1


def _cmd_bench(args: argparse.Namespace) -> int:
    import os

    from runners.commands.launch import SpawnError, check_ranks, spawn

    _check_counts(args)
    if args.nproc < 1:
        raise BenchError(f"--nproc must be >= 1, got {args.nproc}")
    # Per rank: the largest size's input, output and expected result, and torch's own side's copies.
    check_ranks(args.nproc, 6.0 * max(parse_sizes(args.sizes)))
    schedule, report = _checked_schedule(args, args.nproc)
    if not report.ok:
        return _refuse(report, args.json, "collsched bench")
    if args.imports:  # the ranks inherit the environment: they import the user's modules too
        os.environ[registry.ENV_IMPORT] = ",".join([*registry.env_modules(), *args.imports])
    try:
        results = spawn(_worker, args.nproc, schedule, args, backend=args.backend, timeout=args.job_timeout)
    except SpawnError as e:
        first = next(o for o in e.outcomes if not o.ok)
        text = (first.error or "").splitlines()[0] if first.error else str(e)
        raise BenchError(f"rank {first.rank}: {text}") from None
    return _print(results[0], args.json)


def add_parser(subparsers: Any) -> None:
    """Register ``collsched bench``."""
    p = subparsers.add_parser("bench", help="time a schedule against torch's native collective on local processes",
                              description=__doc__.splitlines()[0] + " " + WRONG)
    p.add_argument("--nproc", "-N", type=int, required=True, help="number of local processes (ranks)")
    p.add_argument("--backend", default="gloo", choices=["gloo", "nccl"], help="process-group backend (default gloo)")
    p.add_argument("--job-timeout", type=float, default=3600.0, help="seconds before the whole job is killed")
    _add_options(p)
    p.set_defaults(func=_cmd_bench)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point under torchrun: the schedule is built and verified before the process group; every rank
    measures, rank 0 prints."""
    import os

    parser = argparse.ArgumentParser(prog="python -m runners.commands.bench",
                                     description=__doc__.splitlines()[0] + " " + WRONG)
    parser.add_argument("--backend", default=None, help="gloo or nccl (default: nccl when CUDA is available)")
    _add_options(parser)
    args = parser.parse_args(argv)
    prog = "runners.commands.bench"
    try:
        _check_counts(args)
        from runners.commands.launch import init

        world = os.environ.get("WORLD_SIZE", "")
        if not world.isdigit():
            init(args.backend)  # raises the "not under torchrun" error
        schedule, report = _checked_schedule(args, int(world))
        if not report.ok:
            return _refuse(report, args.json, prog) if os.environ.get("RANK", "0") == "0" else 1
        init(args.backend)
    except CollschedError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    import torch.distributed as dist

    try:
        rows = _worker(dist.get_rank(), schedule, args)
        return _print(rows, args.json) if dist.get_rank() == 0 else 0
    except CollschedError as e:
        print(f"{prog}: rank {dist.get_rank()}: error: {e}", file=sys.stderr)
        return 2
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
