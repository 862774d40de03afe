"""``collsched bound`` and ``collsched synthesize``, and the efficiency column of simulate and sweep.

    collsched bound --collective K --topology SPEC --size S [--root R] [--json]
    collsched synthesize --collective K --topology SPEC [--root R] [--chunks k] -o F.json
                         [--size S] [--routing shortest|widest|neighbour] [--json]

``bound`` prints the lower bound of ``sim.bounds`` and the vertex set whose
out-links attain it; ``--json`` prints ``{"ok", "bound_s", "bandwidth_s",
"latency_s", "cut"}`` (and, for allreduce, ``traffic_s``, the traffic term,
and ``reference_s``, the reducescatter-plus-allgather reference; where links
carry no route, ``idle_links`` and ``any_routing_s``, the bound with every
link usable). ``synthesize`` packs a schedule onto the topology
(``sim.synth``), verifies it, writes it (JSON, or MSCCL-IR for a .xml name),
simulates it at ``--size`` (default 1GiB) and prints its transfers, steps,
synthesis wall time, the bound and the simulated time. ``--routing widest``
or ``neighbour`` (also on simulate and sweep) gives the topology explicit
routes (``sim.synth.routed``): the schedule is packed and simulated on them,
and `simulate` and `sweep` need the same option to reproduce its time.
Building the parser
imports nothing heavy; the commands import sim.bounds / sim.synth when they run.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from algorithms.errors import UsageError
from algorithms.ir import ROOTED_KINDS, Kind

__all__ = ["BOUND_KIND_NAMES", "add_parser", "bound_for"]

BOUND_KIND_NAMES = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce", "alltoall")
SYNTH_KIND_NAMES = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce")


def bound_for(kind: Kind, root: int | None, topology: Any, size: float, faults: Any = None) -> Any:
    """The ``sim.bounds.Bound`` of a run, or None for kinds without one (scatter, gather, barrier).
    ``faults`` (``sim.engine.Faults``): the bound of the topology the run actually sees."""
    if kind.value not in BOUND_KIND_NAMES:
        return None
    from sim.bounds import bound

    if faults is not None:
        topology = faults.apply(topology)
    return bound(kind, topology, size, root=root if kind in ROOTED_KINDS else None)


def _root(kind: str, root: int | None) -> int | None:
    if Kind(kind) in ROOTED_KINDS:
        return 0 if root is None else root
    if root is not None:
        raise UsageError(f"--root: {kind} has no root")
    return None


def _topology_args(p: argparse.ArgumentParser) -> None:
    from sim.cli import _SPEC_FORMS, add_routing_arg

    p.add_argument("--topology", "-t", required=True, metavar="SPEC", help=f"topology: {_SPEC_FORMS}")
    add_routing_arg(p)
    p.add_argument("--bandwidth", metavar="BW", help="set every link's bandwidth, e.g. 50GB/s")
    p.add_argument("--latency", metavar="T", help="set every link's latency, e.g. 1us")
    p.add_argument("--root", "-r", type=int, metavar="R", help="root rank for broadcast and reduce (default 0)")
    p.set_defaults(placement="identity")


def _cut_text(cut: tuple[Any, ...]) -> str:
    ranks = [x for x in cut if isinstance(x, int)]
    switches = [x for x in cut if not isinstance(x, int)]
    shown = ", ".join(str(x) for x in [*ranks[:16], *switches[:8]])
    more = len(ranks) - min(len(ranks), 16) + len(switches) - min(len(switches), 8)
    return f"{len(ranks)} rank(s), {len(switches)} switch(es): {shown}{f' and {more} more' if more else ''}"


def _cmd_bound(args: argparse.Namespace) -> int:
    from sim.cli import _human_size, _human_time, _topology
    from sim.units import parse_size

    size = parse_size(args.size)
    topo = _topology(args)
    b = bound_for(Kind(args.collective), _root(args.collective, args.root), topo, size)
    if args.json:
        print(json.dumps({"ok": True, **b.to_dict()}))
        return 0
    root = f" root {b.root}" if b.root is not None else ""
    print(f"{args.collective}{root} on {topo.describe()}, {_human_size(size)}")
    terms = "two" if b.traffic_term is None else "three"
    print(f"  bound      {_human_time(b.bound_s)} (the largest of the {terms} terms below: the {b.bottleneck} term)")
    print(f"  bandwidth  {_human_time(b.bandwidth_s)} (exact: {b.bandwidth} s)")
    if b.traffic_s is not None:
        print(f"  traffic    {_human_time(b.traffic_s)} (exact: {b.traffic_term} s): 2(N-1)·M bytes must "
              "enter (and leave) the ranks over their own links (one-way gossip)")
    print(f"  latency    {_human_time(b.latency_s)}")
    print(f"  cut        {_cut_text(b.cut)}; its out-links are the bandwidth term's bottleneck")
    if b.any_routing is not None:
        print(f"  routes     {b.idle_links} of {len(topo.links)} links carry no route and are left out; with every "
              f"link usable (other routes, e.g. --routing neighbour) the bound is {_human_time(b.any_routing.bound_s)}")
    if b.reference_s is not None:
        print(f"  reference  {_human_time(b.reference_s)} (reducescatter + allgather bounds: what a two-phase "
              "schedule can reach)")
    return 0


def _cmd_synthesize(args: argparse.Namespace) -> int:
    from sim.cli import _human_size, _human_time, _save, _topology
    from sim.engine import simulate
    from sim.synth import synthesize
    from sim.units import parse_size
    from sim.verify import verify

    size = parse_size(args.size)
    topo = _topology(args)
    kind = Kind(args.collective)
    root = _root(args.collective, args.root)
    t0 = time.perf_counter()
    schedule = synthesize(kind, topo, root=root, chunks=args.chunks)
    wall = time.perf_counter() - t0
    report = verify(schedule)
    _save(schedule, args)
    result = simulate(schedule, topo, size)
    b = bound_for(kind, root, topo, size)
    ok = report.ok and result.ok
    out = {"ok": ok, "output": str(args.output), "collective": kind.value, "ranks": schedule.ranks,
           "chunks": schedule.collective.chunks, "transfers": schedule.num_transfers, "steps": len(schedule.steps),
           "synth_wall_s": wall, "size": size, "time_s": result.time, "bound_s": b.bound_s,
           "efficiency": b.efficiency(result.time), "verified": report.ok}
    if b.reference_s is not None:
        out["reference_s"] = b.reference_s
    if args.json:
        print(json.dumps(out))
    else:
        print(f"wrote {args.output}: synth {schedule.collective.describe()} for {topo.describe()}")
        print(f"  transfers  {schedule.num_transfers}, steps {len(schedule.steps)}, synthesized in {wall:.3f} s")
        print(f"  verified   {'OK' if report.ok else f'BROKEN: {len(report.violations)} violation(s)'}")
        print(f"  simulated  {_human_time(result.time)} at {_human_size(size)} (dataflow)")
        print(f"  bound      {_human_time(b.bound_s)}, efficiency {100 * b.efficiency(result.time):.1f}%")
        if b.reference_s is not None and result.time > 0:
            print(f"  reference  {_human_time(b.reference_s)} (reducescatter + allgather bounds): the schedule "
                  f"runs at {100 * b.reference_s / result.time:.1f}% of it")
    return 0 if ok else 1


def add_parser(subparsers: Any) -> None:
    """Register ``collsched bound`` and ``collsched synthesize``."""
    from sim.cli import _add_output_args, add_common_args

    p = subparsers.add_parser("bound", help="lower bound on a collective's time on a topology, and its cut")
    p.add_argument("--collective", "-c", required=True, choices=BOUND_KIND_NAMES, metavar="K",
                   help=", ".join(BOUND_KIND_NAMES))
    _topology_args(p)
    p.add_argument("--size", "-s", required=True, metavar="N", help="message size (nccl-tests convention), e.g. 1GiB")
    add_common_args(p, json_help='print {"ok", "bound_s", "bandwidth_s", "latency_s", "cut"}')
    p.set_defaults(func=_cmd_bound)
    p = subparsers.add_parser("synthesize", help="pack a schedule onto a topology (trees at the cut rate), "
                                                 "verify, write and simulate it")
    p.add_argument("--collective", "-c", required=True, choices=SYNTH_KIND_NAMES, metavar="K",
                   help=", ".join(SYNTH_KIND_NAMES))
    _topology_args(p)
    p.add_argument("--chunks", "-k", type=int, metavar="k", help="chunks per root's piece (default: by size of "
                   "the world, see sim.synth.default_chunks)")
    p.add_argument("--size", "-s", default="1GiB", metavar="N", help="size to simulate at (default 1GiB)")
    p.add_argument("--output", "-o", required=True, metavar="F", help="schedule file to write (.json, or .xml)")
    _add_output_args(p)
    add_common_args(p, json_help='print {"ok", "output", "transfers", "steps", "synth_wall_s", "time_s", "bound_s", '
                                 '"efficiency", ...}')
    p.set_defaults(func=_cmd_synthesize)
