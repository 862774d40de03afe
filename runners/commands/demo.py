"""``collsched demo``: the whole chain on one schedule, end to end.

1. build a schedule and verify it symbolically against its postcondition;
2. export it as a ``collsched.schedule/1`` file;
3. simulate it on a topology, compare with its closed-form cost, and write a
   Chrome/Perfetto trace and a timeline plot;
4. run on local gloo processes against torch's own collective, and print the
   nccl-tests-style table (time, algbw, busbw, #wrong, ratio). The run uses
   the schedule of the stages before (``--algorithm``, else ring where the kind
   has one), and says which algorithm the backend's policy
   (``runners.backend.policy``) would choose for the run's size instead. For
   integer ``--dtype`` it says whether the results are identical to torch's;
   for floats it reports the largest absolute difference from torch's result
   on random data.

Exit status 0 when every stage agrees (verified, postcondition held in the
simulation, no wrong element on real tensors), 1 otherwise, 2 on bad input.
With ``--json`` the stages print nothing and one JSON object sums them up.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from algorithms import formats as fileformat
from algorithms import registry
from algorithms.errors import CollschedError, UsageError
from algorithms.ir import Schedule

__all__ = ["add_parser"]

DEFAULT_ALGORITHM = "ring"


def _worker(rank: int, schedule: Schedule, size: int, iters: int, dtype: str) -> dict[str, Any]:
    from runners.commands.bench import max_difference, measure

    rows = measure(schedule, [size], iters=iters, warmup=2, dtype=dtype)
    diff = None if dtype.startswith(("int", "uint", "bool")) else max_difference(schedule, size, dtype=dtype)
    return {"rows": rows, "max_difference": diff}


def _stage(n: int, text: str) -> None:
    print(f"\n[{n}/4] {text}")


def _why(args: argparse.Namespace, schedule: Schedule, run_size: int) -> str:
    """Why the real run uses ``schedule``, and what the backend's policy would choose at this size.

    The demo runs the schedule it verified, exported and simulated: one schedule, end to end."""
    from runners.backend.policy import P2P, Policy

    kind, p = schedule.collective.kind, schedule.collective.ranks
    choice = Policy.from_env().choose(kind, run_size, p)
    would = ("its direct point-to-point code (p2p, no schedule)" if choice.algorithm == P2P else str(choice))
    how = "named with --algorithm" if args.algorithm is not None else "the schedule verified above"
    return f"{schedule.name}, {how} (the backend's policy would run {would} for {run_size} bytes on {p} ranks)"


def _demo(args: argparse.Namespace, summary: dict[str, Any]) -> int:
    from runners.commands.bench import table
    from runners.commands.launch import SpawnError, spawn
    from sim.cli.common import schedule_from_args
    from sim.engine.closed_form import predict, schedule_alpha_beta
    from sim.engine.reference import simulate
    from sim.engine.trace import plot_timeline, write_trace
    from sim.topology import from_spec
    from sim.units import parse_size
    from sim.verify.verifier import verify

    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create {out}: {e.strerror or e}") from None
    size, run_size = int(parse_size(args.size)), int(parse_size(args.run_size, "--run-size"))
    topology = from_spec(args.topology or f"ring:{args.ranks}")
    if topology.ranks != args.ranks:
        raise UsageError(f"topology {args.topology} has {topology.ranks} ranks, --ranks is {args.ranks}")
    named = args.algorithm
    if named is None:  # ring where the kind has one, else the first algorithm of the kind that serves p
        served = [a.name for a in registry.algorithms(args.collective) if a.unsupported(args.ranks) is None]
        if not served:
            raise UsageError(f"no {args.collective} algorithm serves {args.ranks} ranks")
        args.algorithm = DEFAULT_ALGORITHM if DEFAULT_ALGORITHM in served else served[0]
    schedule = schedule_from_args(args)
    args.algorithm = named
    ok = True

    _stage(1, f"verify {schedule.name} ({schedule.collective.describe()})")
    report = verify(schedule)
    print(report)
    ok &= report.ok
    summary["verify"] = report.to_dict()

    _stage(2, "export")
    path = out / "schedule.json"
    fileformat.save(schedule, path)
    print(f"wrote {path} ({path.stat().st_size} bytes); check it with `collsched verify --file {path}`")
    summary["schedule_file"] = str(path)

    _stage(3, f"simulate {size} bytes on {topology.describe()} ({args.mode})")
    t0 = time.perf_counter()
    result = simulate(schedule, topology, size, mode=args.mode)
    wall = time.perf_counter() - t0
    print(f"time {result.time * 1e6:.2f} us, algbw {result.algbw / 1e9:.3f} GB/s, busbw {result.busbw / 1e9:.3f} GB/s, "
          f"{result.transfers} transfers, {result.events} events, simulated in {wall:.2f} s; "
          f"postcondition {'OK' if result.ok else 'BROKEN'}")
    summary["simulate"] = result.to_dict()
    alg = registry.get(schedule.collective.kind, schedule.name)
    if alg.cost is not None and topology.ranks > 1:
        # The terms of the routes this schedule uses, as `simulate` prices them (not route 0 -> 1's).
        terms = schedule_alpha_beta(schedule, topology)
        params = {} if args.chunks is None else {"chunks": args.chunks}
        params.update(dict(args.param))
        pred = predict(alg.kind, alg.name, topology.ranks, size, alpha=terms.alpha, beta=terms.beta, params=params)
        print(f"closed form {pred.time * 1e6:.2f} us ({pred.formula}), simulated / closed form "
              f"{result.time / pred.time:.4f}")
        if not terms.uniform:
            print(f"note: the {terms.routes} routes this schedule uses differ; the closed form charges every step "
                  "the slowest route's α and the narrowest route's β, an estimate (the simulation is the reference)")
        summary["closed_form_s"] = pred.time
    trace, plot = out / "trace.json", out / "timeline.png"
    write_trace(result, trace)
    plot_timeline(result, plot)
    print(f"wrote {trace} (open in https://ui.perfetto.dev or chrome://tracing) and {plot}")
    ok &= result.ok

    if args.no_run:
        _stage(4, "run on local gloo processes")
        print("skipped (--no-run)")
    else:
        ran, why = schedule, _why(args, schedule, run_size)
        _stage(4, f"run {why}: {args.ranks} local gloo processes, {run_size} bytes of {args.dtype}, "
                  "against torch's own collective")
        try:
            got = spawn(_worker, args.ranks, ran, run_size, args.iters, args.dtype, timeout=600.0)[0]
        except SpawnError as e:
            first = next(o for o in e.outcomes if not o.ok)
            raise CollschedError(f"rank {first.rank}: {(first.error or str(e)).splitlines()[0]}") from None
        rows, diff = got["rows"], got["max_difference"]
        print(table(rows))
        wrong = sum(r["wrong"] for r in rows)
        native_wrong = sum(r["native_wrong"] for r in rows)
        if diff is None:  # integer data: both compared exactly with the expected result
            same = wrong == 0 and native_wrong == 0
            print(f"#wrong {wrong}: {'identical to torch' if same else 'DIFFERS from torch'}")
        else:
            print(f"#wrong {wrong} on small-integer data (exact in {args.dtype}); on random normal data the "
                  f"largest |{ran.name} - torch| is {diff:.3g} ({args.dtype} sums in a different order "
                  "differ in the last bits)")
        summary["run"] = {"algorithm": ran.name, "why": why, "rows": rows, "max_difference": diff}
        ok &= wrong == 0
    print(f"\ndemo {'OK' if ok else 'FAILED'}: outputs in {out}{os.sep}")
    return 0 if ok else 1


def _cmd_demo(args: argparse.Namespace) -> int:
    if not args.json:
        return _demo(args, {})
    summary: dict[str, Any] = {}
    with contextlib.redirect_stdout(io.StringIO()):
        code = _demo(args, summary)
    print(json.dumps({"ok": code == 0, **summary}), file=sys.stdout)
    return code


def add_parser(subparsers: Any) -> None:
    """Register ``collsched demo``."""
    from sim.cli.common import add_common_args, add_schedule_args

    p = subparsers.add_parser("demo", help="verify, export, simulate and run one schedule, end to end")
    add_schedule_args(p, file=False)
    p.set_defaults(collective="allreduce", ranks=4)
    p.add_argument("--topology", "-t", metavar="SPEC", help="topology for the simulation (default ring:P)")
    p.add_argument("--size", default="64MiB", help="simulated message size (default 64MiB)")
    p.add_argument("--mode", choices=["dataflow", "lockstep"], default="dataflow", help="simulation mode")
    p.add_argument("--run-size", default="4MiB", help="message size of the real run (default 4MiB)")
    p.add_argument("--dtype", default="float32", help="element type of the real run (default float32); integer "
                   "types are compared with torch exactly, floats report the largest difference")
    p.add_argument("--iters", type=int, default=5, help="timed iterations of the real run (default 5)")
    p.add_argument("--no-run", action="store_true", help="skip the real run on local processes")
    p.add_argument("--out", "-o", default="collsched-demo", help="folder for the outputs (default collsched-demo)")
    add_common_args(p, json_help='print {"ok", "verify", "simulate", "run", ...} instead of the stages')
    p.set_defaults(func=_cmd_demo)
