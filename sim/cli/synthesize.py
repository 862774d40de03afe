"""``collsched synthesize``: pack a schedule onto a topology, verify, write and simulate it."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from algorithms.errors import UsageError
from algorithms.ir import Kind
from sim.cli.common import (
    add_common_args,
    add_output_args,
    add_topology_args,
    bound_for,
    dash_values,
    human_size,
    human_time,
    root_for,
    save_schedule,
    topology_from_args,
)
from sim.guards import guard_synthesize
from sim.units import parse_size

__all__ = ["add_parser"]


SYNTH_KIND_NAMES = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce", "alltoall", "alltoallv")
EXCHANGE_KINDS = ("alltoall", "alltoallv")
"""Synthesized from the max-concurrent-flow LP (``sim.bounds.flows``) and bounded by it (``sim.bounds.lp``)."""


def _guard(args: argparse.Namespace, ranks: int) -> None:
    guard_synthesize(args.collective, None, args.chunks, ranks=ranks)


def _cmd_synthesize(args: argparse.Namespace) -> int:
    from sim.bounds.packing import synthesize
    from sim.engine.reference import simulate
    from sim.verify.verifier import verify

    size = parse_size(args.size)
    topo = topology_from_args(args)
    kind = Kind(args.collective)
    root = root_for(args.collective, args.root)
    if args.matrix is not None and args.collective != "alltoallv":
        raise UsageError(f"--matrix: only alltoallv takes a traffic matrix, not {args.collective}")
    guard_synthesize(args.collective, topo, args.chunks)  # now with the routes' real length
    t0 = time.perf_counter()
    if args.collective in EXCHANGE_KINDS:
        from algorithms import matrices
        from sim.bounds.flows import synthesize_alltoall

        matrix = None
        if kind is Kind.ALLTOALLV:
            if args.matrix is None:
                raise UsageError(f"--matrix: alltoallv needs a traffic matrix: {matrices.MATRIX_FORMS}")
            matrix = matrices.parse(args.matrix, topo.ranks)
        schedule = synthesize_alltoall(topo, chunks=args.chunks, matrix=matrix)
    else:
        schedule = synthesize(kind, topo, root=root, chunks=args.chunks)
    wall = time.perf_counter() - t0
    report = verify(schedule)
    save_schedule(schedule, args)
    result = simulate(schedule, topo, size)
    b: Any
    if args.collective in EXCHANGE_KINDS:
        from sim.bounds.lp import bound_traffic

        b = bound_traffic(topo, schedule.collective, size)
    else:
        b = bound_for(kind, root, topo, size)
    ok = report.ok and result.ok
    out = {"ok": ok, "output": str(args.output), "collective": kind.value, "ranks": schedule.ranks,
           "chunks": schedule.collective.chunks, "transfers": schedule.num_transfers, "steps": len(schedule.steps),
           "synth_wall_s": wall, "size": size, "time_s": result.time, "bound_s": b.bound_s,
           "efficiency": b.efficiency(result.time), "verified": report.ok}
    if getattr(b, "reference_s", None) is not None:
        out["reference_s"] = b.reference_s
    if args.json:
        print(json.dumps(out))
    else:
        print(f"wrote {args.output}: synth {schedule.collective.describe()} for {topo.describe()}")
        print(f"  transfers  {schedule.num_transfers}, steps {len(schedule.steps)}, synthesized in {wall:.3f} s")
        print(f"  verified   {'OK' if report.ok else f'BROKEN: {len(report.violations)} violation(s)'}")
        print(f"  simulated  {human_time(result.time)} at {human_size(size)} (dataflow)")
        lp = " (max-concurrent-flow LP)" if args.collective in EXCHANGE_KINDS else ""
        print(f"  bound      {human_time(b.bound_s)}{lp}, efficiency {100 * b.efficiency(result.time):.1f}%")
        if getattr(b, "reference_s", None) is not None and result.time > 0:
            print(f"  reference  {human_time(b.reference_s)} (reducescatter + allgather bounds): the schedule "
                  f"runs at {100 * b.reference_s / result.time:.1f}% of it")
    return 0 if ok else 1


def add_parser(subparsers: Any) -> None:
    """Register ``collsched synthesize``."""
    p = subparsers.add_parser("synthesize", help="pack a schedule onto a topology (trees at the cut rate), "
                                                 "verify, write and simulate it")
    p.add_argument("--collective", "-c", required=True, choices=SYNTH_KIND_NAMES, metavar="K",
                   help=", ".join(SYNTH_KIND_NAMES))
    add_topology_args(p)
    p.add_argument("--chunks", "-k", type=int, metavar="k", help="chunks per root's piece (default: by size of "
                   "the world, see sim.bounds.packing.default_chunks)")
    p.add_argument("--matrix", "-m", metavar="M", help="alltoallv's traffic matrix in chunks: uniform, uniform:N, "
                   "zipf:S, trace:FILE or a FILE (algorithms.matrices)")
    p.add_argument("--size", "-s", default="1GiB", metavar="N", help="size to simulate at (default 1GiB)")
    p.add_argument("--output", "-o", required=True, metavar="F", help="schedule file to write (.json, or .xml)")
    add_output_args(p)
    add_common_args(p, json_help='print {"ok", "output", "transfers", "steps", "synth_wall_s", "time_s", "bound_s", '
                                 '"efficiency", ...}')
    dash_values(p)
    p.set_defaults(func=_cmd_synthesize, guard=_guard)
