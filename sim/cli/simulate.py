"""``collsched simulate``: one schedule on a topology: time, bandwidth, the closed form, the bound, traces."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from algorithms import registry
from algorithms.errors import RegistryError, UsageError
from algorithms.ir import Kind, Schedule
from sim.cli.common import (
    BOUND_AUTO_RANKS,
    add_common_args,
    add_network_args,
    add_schedule_args,
    bound_for,
    dash_values,
    engine_options,
    gigabytes,
    guard_library_args,
    human_size,
    human_time,
    peak_rss_mib,
    schedule_from_args,
    topology_from_args,
    want_bound,
)
from sim.units import parse_size

if TYPE_CHECKING:
    from sim.engine.options import EngineOptions

__all__ = ["add_parser"]


def _write_outputs(result: Any, args: argparse.Namespace) -> None:
    from sim.engine.trace import plot_timeline, write_trace

    for path, write in ((args.trace, write_trace), (args.plot, plot_timeline)):
        if path:
            try:
                write(result, path)
            except OSError as e:
                raise UsageError(f"cannot write {path}: {e.strerror or e}") from None


def _cmd_simulate(args: argparse.Namespace) -> int:
    if getattr(args, "algorithm", None) == "nccl":
        from sim.cli.runtime import cmd_simulate_nccl

        return cmd_simulate_nccl(args)
    size = parse_size(args.size)
    opts = engine_options(args)
    if args.file and args.placement != "snake":  # the file's ranks may use part of the topology (identity: its first)
        schedule = schedule_from_args(args, allow_custom=True)
        topo = topology_from_args(args, schedule.ranks)
    else:
        topo = topology_from_args(args, args.ranks)
        if not args.file:
            from sim.cli.runtime import default_group

            args.param = list(default_group(args, topo, dict(args.param)).items())
        if _by_symmetry(args, topo, size, opts):
            return 0
        schedule = schedule_from_args(args, ranks=topo.ranks, allow_custom=True)
    from sim.cli.runtime import run_schedule

    t0 = time.perf_counter()
    result, runtime_line, ran = run_schedule(args, schedule, topo, size, opts)
    wall = time.perf_counter() - t0
    lockstep = _lockstep_beside(args, schedule, topo, size, opts, result, wall)
    _write_outputs(result, args)
    from sim.topology.placement import stretched_pairs

    stretched = stretched_pairs(schedule, topo)

    b = None if schedule.name.startswith("custom:") or not want_bound(args, topo.ranks) else bound_for(
        schedule.collective.kind, schedule.collective.root, topo, size, opts.faults, schedule.collective)
    eff = {"bound_s": b.bound_s, "efficiency": b.efficiency(result.time)} if b is not None else {}
    lp = _lp_of(schedule, opts.faults.apply(topo), size) if b is not None else None
    if lp is not None:  # all-to-all(v): the cut bound is loose there; the max-concurrent-flow LP is exact
        eff |= {"lp_bound_s": lp.bound_s, "lp_efficiency": lp.efficiency(result.time)}
    if args.json:
        print(json.dumps({**result.to_dict(), "wall_s": wall, "peak_rss_MiB": peak_rss_mib(),
                          "stretched_pairs": [list(t) for t in stretched], **eff,
                          "lockstep_s": lockstep, "modes_differ": _modes_differ(result.time, lockstep)}))
    else:
        _print_result(result, schedule, wall, args, ran)
        if runtime_line:
            print(runtime_line)
        if _modes_differ(result.time, lockstep):
            assert lockstep is not None
            print(f"  modes      dataflow {human_time(result.time)}, lockstep {human_time(lockstep)} "
                  f"(lockstep / dataflow {lockstep / result.time if result.time > 0 else float('inf'):.3g}): "
                  f"they differ by more than {100 * MODES_DIFFER:.0f}%; docs/usage.md, \"Dataflow or lockstep\", "
                  "says which models what")
        if b is not None:
            print(f"  bound      {human_time(b.bound_s)} (`collsched bound`), efficiency "
                  f"{100 * b.efficiency(result.time):.1f}%")
            if lp is not None:
                print(f"  LP bound   {human_time(lp.bound_s)} (max-concurrent flow, exact for all-to-all), "
                      f"efficiency {100 * lp.efficiency(result.time):.1f}%")
        elif not want_bound(args, topo.ranks):
            print(f"  bound      not computed above {BOUND_AUTO_RANKS} ranks (--bound yes, or `collsched bound`)")
        _print_stretched(stretched, topo, args.placement if topo.ranks == topo.graph.number_of_nodes() else "")
    if schedule.name.startswith("custom:"):  # an MSCCL-IR custom program: timing only, no postcondition
        return 0
    return 0 if result.ok else 1


SYMMETRY_RANKS = 256
"""Fewest ranks for which ``simulate`` times a library schedule by symmetry; smaller ones are built and run
explicitly, which also checks the postcondition and sets the closed form and the bound beside the time."""


def _guard(args: argparse.Namespace, ranks: int) -> None:
    """The library guard, a schedule timed by symmetry estimated per orbit (``guard_library_args``)."""
    guard_library_args(args, ranks, symmetric=True)


def _by_symmetry(args: argparse.Namespace, topo: Any, size: float, opts: EngineOptions) -> bool:
    """Run and print the library schedule by symmetry (``sim.engine.symmetric``) when its algorithm gives a
    symmetric form and the run allows it (``SYMMETRY_RANKS`` or more, the plain links, no trace or plot, the auto
    engine); False otherwise,
    and the schedule is built and run explicitly (which applies the memory guard to the whole schedule)."""
    from sim.cli.runtime import runtime_of

    if (topo.ranks < SYMMETRY_RANKS or args.trace or args.plot or args.root is not None
            or getattr(args, "protocol", None) is not None or getattr(args, "step_cost", None) is not None
            or runtime_of(args, topo) != "plain"):
        return False
    params: dict[str, Any] = dict(args.param)
    if args.chunks is not None:
        params["chunks"] = args.chunks
    alg = registry.get(args.collective, args.algorithm)
    form = alg.symmetric_form(topo.ranks, **params) if alg.symmetric is not None else None
    if form is None:
        return False
    from sim.engine.symmetric import by_symmetry

    t0 = time.perf_counter()
    result = by_symmetry(form, topo, size, opts)
    if isinstance(result, str):
        return False
    wall = time.perf_counter() - t0
    if args.json:
        print(json.dumps({**result.to_dict(), "wall_s": wall, "peak_rss_MiB": peak_rss_mib(), "lockstep_s": None,
                          "modes_differ": False}))
        return True
    _print_head(result, form.name, form.collective.describe())
    print(f"  transfers  {result.transfers}, of which {result.representatives} simulated (one per orbit of "
          f"{result.group_order} torus translations), events {result.events}, simulated in {wall:.3f} s by the "
          f"symmetric engine, peak memory {peak_rss_mib():.0f} MiB")
    print("  postcondition not checked (the symmetric engine times one transfer per orbit; the explicit engine "
          "checks it on any schedule it builds: --engine fast)")
    return True


MODES_DIFFER = 0.10
"""How far apart (relative) dataflow and lockstep must be for ``simulate`` to say so."""

LOCKSTEP_BESIDE = 100_000
"""Most transfers for which ``simulate`` also runs lockstep beside a dataflow run (and only when the dataflow run
took under ``LOCKSTEP_BESIDE_S``)."""

LOCKSTEP_BESIDE_S = 5.0


def _lockstep_beside(args: argparse.Namespace, schedule: Schedule, topo: Any, size: float, opts: EngineOptions,
                     result: Any, wall: float) -> float | None:
    """The lockstep time beside a dataflow run, when that is cheap (``LOCKSTEP_BESIDE``), else None."""
    if opts.mode != "dataflow" or schedule.num_transfers > LOCKSTEP_BESIDE or wall > LOCKSTEP_BESIDE_S:
        return None
    from sim.cli.runtime import run_schedule

    other, _line, _ran = run_schedule(args, schedule, topo, size, opts.replace(mode="lockstep", progress=False))
    return float(other.time)


def _modes_differ(dataflow: float, lockstep: float | None) -> bool:
    """Whether the two times differ by more than ``MODES_DIFFER`` of the smaller."""
    if lockstep is None:
        return False
    low = min(dataflow, lockstep)
    return abs(dataflow - lockstep) > MODES_DIFFER * low if low > 0 else dataflow != lockstep


def _lp_of(schedule: Any, topo: Any, size: float) -> Any:
    """The all-to-all(v) LP bound (``sim.bounds.lp``) of a run on ``topo`` (with the run's faults applied), or
    None: another kind, or an LP too big for this machine (``sim.guards``: then the cut bound alone)."""
    from sim.guards import ResourceError, guard_lp

    if schedule.collective.kind not in (Kind.ALLTOALL, Kind.ALLTOALLV):
        return None
    try:
        guard_lp(topo.ranks, len(topo.links))
    except ResourceError:
        return None
    from sim.bounds.lp import bound_traffic

    return bound_traffic(topo, schedule.collective, size)


def _print_stretched(stretched: Sequence[tuple[int, int, int]], topo: Any, placement: str) -> None:
    if not stretched:
        print("  neighbours every pair of ranks that exchanges data is one hop apart")
        return
    shown = ", ".join(f"{s}->{d} ({h} hops)" for s, d, h in stretched[:6])
    more = f" and {len(stretched) - 6} more" if len(stretched) > 6 else ""
    hint = " (try --placement snake)" if placement not in ("snake", "") and topo.name.startswith("torus:") else ""
    print(f"  stretched  {len(stretched)} pair(s) of ranks that exchange data are more than one hop apart: "
          f"{shown}{more}{hint}")


def _closed_form_line(schedule: Schedule, result: Any, opts: EngineOptions, args: argparse.Namespace) -> str:
    """The registry's closed form with the run's own terms: α = the latency of the slowest route the schedule
    uses + the per-message overhead, β = 1 / the narrowest bottleneck of the routes it uses, γ = 1 / --reduce-bw
    (0 when reductions are free), plus --launch once. Where the routes differ (a GPU cluster's NVLink and NICs),
    a note says that the closed form assumes a uniform network and charges every step the slowest route."""
    from sim.engine.closed_form import predict, schedule_alpha_beta

    alg = registry.get(schedule.collective.kind, args.algorithm)
    coll = schedule.collective
    if alg.cost is None or (coll.kind is Kind.ALLTOALLV and len(set(coll.traffic().flat)) > 1):
        return ""  # an alltoallv's closed form is for the uniform matrix
    terms_used = schedule_alpha_beta(schedule, result.topology)
    route, beta = terms_used.alpha, terms_used.beta
    (asrc, adst), (bsrc, bdst) = terms_used.alpha_route, terms_used.beta_route
    overhead, launch = opts.overhead, opts.launch or 0.0
    reduce_bw = opts.reduce_bandwidth
    gamma = 1.0 / reduce_bw if reduce_bw else 0.0
    params = dict(args.param)
    if args.chunks is not None:
        params["chunks"] = args.chunks
    try:
        pred = predict(alg.kind, alg.name, result.topology.ranks, result.size, alpha=route + overhead, beta=beta,
                       gamma=gamma, launch=launch, params=params)
    except RegistryError as e:  # the algorithm's Cost raises (a user's module): say so, the simulation stands
        return f"  closed form none: {e}"
    alpha = f"α={route + overhead:.3g} s" + (f" (route {asrc}->{adst} {route:.3g} s + overhead {overhead:.3g} s)"
                                             if overhead else f" (route {asrc}->{adst})")
    terms = [alpha, f"β=1/{1 / beta:.4g} B/s (route {bsrc}->{bdst})",
             f"γ=1/{reduce_bw:.4g} B/s" if gamma else "γ=0 (free)"]
    if launch:
        terms.append(f"launch {launch:.3g} s")
    if opts.message_cpu:
        terms.append("message_cpu not modelled")
    ratio = f"{result.time / pred.time:.4f}" if pred.time > 0 else "-"
    line = (f"  closed form {human_time(pred.time)} ({pred.formula}; {', '.join(terms)}); "
            f"simulated / closed form {ratio}")
    if terms_used.uniform:
        return line
    t = terms_used
    return (f"{line}\n  note       the {t.routes} routes this schedule uses differ (α {t.min_alpha:.3g} to "
            f"{t.alpha:.3g} s, bandwidth {1 / t.beta:.4g} to {1 / t.min_beta:.4g} B/s): "
            "the closed form assumes a uniform network and charges every step the slowest route's α and the "
            "narrowest route's β, an estimate (the simulation is the reference)")


def _print_head(result: Any, name: str, collective: str) -> None:
    """simulate's first lines: what ran where, the time and the two bandwidths."""
    print(f"{name} {collective} on {result.topology.describe()}, {result.mode}, {human_size(result.size)}")
    algbw, busbw = gigabytes(result.algbw), gigabytes(result.busbw)
    print(f"  time       {human_time(result.time)}")
    print(f"  algbw      {algbw:.4f} GB/s" if algbw is not None else "  algbw      - (no time)")
    print(f"  busbw      {busbw:.4f} GB/s" if busbw is not None else "  busbw      - (no time)")


def _print_result(result: Any, schedule: Schedule, wall: float, args: argparse.Namespace,
                  opts: EngineOptions) -> None:

    topo = result.topology
    _print_head(result, schedule.name, schedule.collective.describe())
    print(f"  transfers  {result.transfers}, events {result.events}, simulated in {wall:.3f} s by the "
          f"{result.engine} engine, peak memory {peak_rss_mib():.0f} MiB")
    if result.link_busy and result.time > 0:
        (u, v), busy = max(result.link_busy.items(), key=lambda kv: kv[1])
        print(f"  busiest    link {u}->{v}, busy {100 * busy / result.time:.1f}% of the time")
    if topo.ranks > 1 and getattr(args, "file", None) is None:
        line = _closed_form_line(schedule, result, opts, args)
        if line:
            print(line)
    if schedule.name.startswith("custom:"):
        print("  postcondition none (an MSCCL-IR custom program: simulated for its timing only)")
    elif result.ok:
        print("  postcondition OK")
    else:
        print(f"  postcondition BROKEN: {len(result.violations)} violation(s)")
        for v in result.violations[:20]:
            print(f"    {v}")


def add_parser(subparsers: Any) -> None:
    """Register ``collsched simulate``."""
    p = subparsers.add_parser("simulate", help="simulate a schedule on a topology (time, bandwidth, trace)")
    add_schedule_args(p, ranks=False)
    p.add_argument("--ranks", "-p", type=int, metavar="P",
                   help="world size: the topology's rank count (the default); fewer run on part of the topology, "
                        "on the nodes that --placement FILE lists")
    add_network_args(p)
    from sim.cli.runtime import add_runtime_args

    add_runtime_args(p)
    p.add_argument("--size", "-s", required=True, metavar="N",
                   help="message size (nccl-tests convention), e.g. 256MiB, 1M (binary, as in nccl-tests) or 64MB "
                        "(decimal)")
    p.add_argument("--trace", metavar="F.json", help="write a Chrome/Perfetto trace")
    p.add_argument("--plot", metavar="F.png", help="write a timeline plot")
    add_common_args(p, json_help='print {"ok", "time_s", "algbw_GBps", "busbw_GBps", "transfers", "events", "engine", '
                                 '"wall_s", "peak_rss_MiB", "lockstep_s" (dataflow runs of up to '
                                 f'{LOCKSTEP_BESIDE:,} transfers, else null), "modes_differ" (by more than '
                                 f'{100 * MODES_DIFFER:.0f}%%)}}')
    dash_values(p)
    p.set_defaults(func=_cmd_simulate, guard=_guard)
