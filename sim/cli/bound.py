"""``collsched bound``: the lower bound on a collective's time on a topology, and the cut that attains it."""

from __future__ import annotations

import argparse
import json
from typing import Any

from algorithms.ir import Kind
from sim.cli.common import (
    BOUND_KIND_NAMES,
    add_common_args,
    add_matrix_arg,
    add_topology_args,
    bound_for,
    dash_values,
    human_size,
    human_time,
    matrix_from_args,
    root_for,
    topology_from_args,
)
from sim.units import parse_size

__all__ = ["add_parser"]

BOTTLENECKS_SHOWN = 8
"""Tight links the text output names (--json lists them all)."""


def _cut_text(cut: tuple[Any, ...]) -> str:
    ranks = [x for x in cut if isinstance(x, int)]
    switches = [x for x in cut if not isinstance(x, int)]
    shown = ", ".join(str(x) for x in [*ranks[:16], *switches[:8]])
    more = len(ranks) - min(len(ranks), 16) + len(switches) - min(len(switches), 8)
    return f"{len(ranks)} rank(s), {len(switches)} switch(es): {shown}{f' and {more} more' if more else ''}"


def _lp_bound(topo: Any, size: float, coll: Any) -> Any:
    """The max-concurrent-flow LP bound (``sim.bounds.lp``) of the alltoall, or of the alltoallv ``coll``."""
    from algorithms.ir import Collective
    from sim.bounds.lp import bound_traffic
    from sim.guards import guard_lp

    guard_lp(topo.ranks, len(topo.links))
    return bound_traffic(topo, coll if coll is not None else Collective(Kind.ALLTOALL, topo.ranks, 1), size)


def _print_lp(lp: Any) -> None:
    print(f"  LP bound   {human_time(lp.bound_s)} (max-concurrent flow, exact; HiGHS {lp.solve_s:.2f} s, "
          f"{lp.variables} variables): throughput {human_time(lp.throughput_s)}, latency {human_time(lp.latency_s)}")
    shown = lp.bottlenecks[:BOTTLENECKS_SHOWN]
    more = len(lp.bottlenecks) - len(shown)
    links = ", ".join(f"{n.src}->{n.dst} {100 * n.share:.1f}%" for n in shown)
    print(f"  bottleneck {len(lp.bottlenecks)} tight link(s) (share of the bound, from the duals): {links}"
          f"{f' and {more} more' if more else ''}")


def _cmd_bound(args: argparse.Namespace) -> int:
    from sim.topology.switches import reducing_switches

    size = parse_size(args.size)
    topo = topology_from_args(args)
    coll = None
    if args.collective == Kind.ALLTOALLV.value or args.matrix is not None:
        from algorithms.ir import Collective

        m = matrix_from_args(args, args.collective, topo.ranks) or ((1,) * topo.ranks,) * topo.ranks
        coll = Collective(Kind.ALLTOALLV, topo.ranks, matrix=m)
    b = bound_for(Kind(args.collective), root_for(args.collective, args.root), topo, size, collective=coll)
    lp: Any = _lp_bound(topo, size, coll) if args.collective in ("alltoall", "alltoallv") else None
    if args.json:
        print(json.dumps({"ok": True, **b.to_dict(), **({"lp": lp.to_dict()} if lp is not None else {})}))
        return 0
    root = f" root {b.root}" if b.root is not None else ""
    print(f"{args.collective}{root} on {topo.describe()}, {human_size(size)}")
    terms = "two" if b.traffic_term is None else "three"
    print(f"  bound      {human_time(b.bound_s)} (the largest of the {terms} terms below: the {b.bottleneck} term)")
    print(f"  bandwidth  {human_time(b.bandwidth_s)} (exact: {b.bandwidth} s)")
    if b.traffic_s is not None and reducing_switches(topo):
        print(f"  traffic    {human_time(b.traffic_s)} (exact: {b.traffic_term} s): switches reduce, so only M "
              "bytes must leave and enter each rank over its own links")
    elif b.traffic_s is not None:
        print(f"  traffic    {human_time(b.traffic_s)} (exact: {b.traffic_term} s): 2(N-1)·M bytes must "
              "enter (and leave) the ranks over their own links (one-way gossip)")
    print(f"  latency    {human_time(b.latency_s)}")
    print(f"  cut        {_cut_text(b.cut)}; its out-links are the bandwidth term's bottleneck")
    if b.any_routing is not None:
        print(f"  routes     {b.idle_links} of {len(topo.links)} links carry no route and are left out; with every "
              f"link usable (other routes, e.g. --routing neighbour) the bound is {human_time(b.any_routing.bound_s)}")
    if b.reference_s is not None:
        print(f"  reference  {human_time(b.reference_s)} (reducescatter + allgather bounds: what a two-phase "
              "schedule can reach)")
    if lp is not None:
        _print_lp(lp)
    return 0


def add_parser(subparsers: Any) -> None:
    """Register ``collsched bound``."""
    p = subparsers.add_parser("bound", help="lower bound on a collective's time on a topology, and its cut")
    p.add_argument("--collective", "-c", required=True, choices=BOUND_KIND_NAMES, metavar="K",
                   help=", ".join(BOUND_KIND_NAMES))
    add_topology_args(p)
    add_matrix_arg(p)
    p.add_argument("--size", "-s", required=True, metavar="N", help="message size (nccl-tests convention), e.g. 1GiB")
    add_common_args(p, json_help='print {"ok", "bound_s", "bandwidth_s", "latency_s", "cut"}')
    dash_values(p)
    p.set_defaults(func=_cmd_bound)
