"""``collsched demo``: the whole chain on one schedule, end to end.

1. build a schedule and verify it symbolically against its postcondition;
2. export it as a ``collsched.schedule/1`` file;
3. simulate it on a topology, compare with its closed-form cost, and write a
   Chrome/Perfetto trace and a timeline plot;
4. run it on local gloo processes against torch's own collective, and print
   the nccl-tests-style table (time, algbw, busbw, #wrong, ratio).

Exit status 0 when every stage agrees (verified, postcondition held in the
simulation, no wrong element on real tensors), 1 otherwise, 2 on bad input.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from algorithms import fileformat, registry
from algorithms.errors import CollschedError
from algorithms.ir import Schedule

__all__ = ["add_parser"]


def _worker(rank: int, schedule: Schedule, size: int, iters: int) -> list[dict[str, Any]]:
    from runners.bench import measure

    return measure(schedule, [size], iters=iters, warmup=2)


def _stage(n: int, text: str) -> None:
    print(f"\n[{n}/4] {text}")


def _cmd_demo(args: argparse.Namespace) -> int:
    from runners.bench import table
    from runners.cli import UsageError, schedule_from_args
    from runners.launch import SpawnError, spawn
    from runners.units import parse_size
    from sim.cost import predict, route_alpha_beta
    from sim.engine import simulate
    from sim.topology import from_spec
    from sim.trace import plot_timeline, write_trace
    from sim.verify import verify

    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create {out}: {e.strerror or e}") from None
    size, run_size = int(parse_size(args.size)), int(parse_size(args.run_size, "--run-size"))
    topology = from_spec(args.topology or f"ring:{args.ranks}")
    if topology.ranks != args.ranks:
        raise UsageError(f"topology {args.topology} has {topology.ranks} ranks, --ranks is {args.ranks}")
    schedule = schedule_from_args(args)
    ok = True

    _stage(1, f"verify {schedule.name} ({schedule.collective.describe()})")
    report = verify(schedule)
    print(report)
    ok &= report.ok

    _stage(2, "export")
    path = out / "schedule.json"
    fileformat.save(schedule, path)
    print(f"wrote {path} ({path.stat().st_size} bytes); check it with `collsched verify --file {path}`")

    _stage(3, f"simulate {size} bytes on {topology.describe()} ({args.mode})")
    t0 = time.perf_counter()
    result = simulate(schedule, topology, size, mode=args.mode)
    wall = time.perf_counter() - t0
    print(f"time {result.time * 1e6:.2f} us, algbw {result.algbw / 1e9:.3f} GB/s, busbw {result.busbw / 1e9:.3f} GB/s, "
          f"{result.transfers} transfers, {result.events} events, simulated in {wall:.2f} s; "
          f"postcondition {'OK' if result.ok else 'BROKEN'}")
    alg = registry.get(schedule.collective.kind, schedule.name)
    if alg.cost is not None and topology.ranks > 1:
        alpha, beta = route_alpha_beta(topology)
        params = {} if args.chunks is None else {"chunks": args.chunks}
        params.update(dict(args.param))
        pred = predict(alg.kind, alg.name, topology.ranks, size, alpha=alpha, beta=beta, params=params)
        print(f"closed form {pred.time * 1e6:.2f} us ({pred.formula}), simulated / closed form "
              f"{result.time / pred.time:.4f}")
    trace, plot = out / "trace.json", out / "timeline.png"
    write_trace(result, trace)
    plot_timeline(result, plot)
    print(f"wrote {trace} (open in https://ui.perfetto.dev or chrome://tracing) and {plot}")
    ok &= result.ok

    _stage(4, f"run on {args.ranks} local gloo processes, {run_size} bytes, against torch's own collective")
    if args.no_run:
        print("skipped (--no-run)")
    else:
        try:
            rows = spawn(_worker, args.ranks, schedule, run_size, args.iters, timeout=600.0)[0]
        except SpawnError as e:
            first = next(o for o in e.outcomes if not o.ok)
            raise CollschedError(f"rank {first.rank}: {(first.error or str(e)).splitlines()[0]}") from None
        print(table(rows))
        wrong = sum(r["wrong"] for r in rows)
        print(f"#wrong {wrong}: {'identical to torch' if wrong == 0 else 'DIFFERS from torch'}")
        ok &= wrong == 0
    print(f"\ndemo {'OK' if ok else 'FAILED'}: outputs in {out}{os.sep}")
    return 0 if ok else 1


def add_parser(subparsers: Any) -> None:
    """Register ``collsched demo``."""
    from runners.cli import add_schedule_args

    p = subparsers.add_parser("demo", help="verify, export, simulate and run one schedule, end to end")
    add_schedule_args(p, file=False)
    p.set_defaults(collective="allreduce", algorithm="ring", ranks=4)
    p.add_argument("--topology", "-t", metavar="SPEC", help="topology for the simulation (default ring:P)")
    p.add_argument("--size", default="64MiB", help="simulated message size (default 64MiB)")
    p.add_argument("--mode", choices=["dataflow", "lockstep"], default="dataflow", help="simulation mode")
    p.add_argument("--run-size", default="4MiB", help="message size of the real run (default 4MiB)")
    p.add_argument("--iters", type=int, default=5, help="timed iterations of the real run (default 5)")
    p.add_argument("--no-run", action="store_true", help="skip the real run on local processes")
    p.add_argument("--out", "-o", default="collsched-demo", help="folder for the outputs (default collsched-demo)")
    p.set_defaults(func=_cmd_demo)
