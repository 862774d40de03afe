"""What every torch-free command shares: the parser that raises instead of exiting, the common options
(``--import``, ``--json``), the options that pick a schedule or a topology, and human-readable numbers.

Building a parser from these imports no numpy, simpy or networkx: the commands import them when they run.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from algorithms import formats as fileformat
from algorithms import registry
from algorithms.errors import CollschedError, UsageError
from algorithms.ir import ROOTED_KINDS, Kind, Schedule
from sim.topology.forms import SPEC_FORMS
from sim.topology.routing import ROUTINGS
from sim.units import parse_bandwidth, parse_duration, parse_size

if TYPE_CHECKING:  # the parser is built without numpy, simpy or networkx: sim.engine loads when a command runs
    from sim.engine.options import EngineOptions

__all__ = [
    "dash_values",
    "BOUND_AUTO_RANKS", "BOUND_KIND_NAMES", "PLACEMENT_FORMS", "ParseError", "Parser", "SPEC_FORMS",
    "add_common_args", "add_network_args", "add_output_args", "add_routing_arg", "add_schedule_args",
    "add_matrix_arg", "add_topology_args", "bound_for", "matrix_from_args", "engine_options", "gigabytes",
    "human_size", "human_time", "is_msccl",
    "peak_rss_mib", "root_for", "save_schedule", "schedule_from_args", "topology_from_args", "want_bound",
]


# SPEC_FORMS comes from the SPEC table (sim.topology.forms, which imports no networkx); PLACEMENT_FORMS is the same
# text as sim.topology.placement.PLACEMENT_FORMS, repeated so that building the parser imports no networkx.
PLACEMENT_FORMS = "identity, snake (torus:RxC only), or a placement file (collsched.placement/1 JSON)"


class ParseError(Exception):
    """argparse found the command line malformed (raised instead of exiting, so --json can answer)."""

    def __init__(self, prog: str, usage: str, message: str) -> None:
        super().__init__(message)
        self.prog, self.usage, self.message = prog, usage, message


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors raise ``ParseError`` instead of exiting."""

    def error(self, message: str) -> NoReturn:
        raise ParseError(self.prog, self.format_usage(), message)


def add_common_args(parser: argparse.ArgumentParser, *, json_help: str = "print one JSON object") -> None:
    """``--import MODULE`` (repeatable) and ``--json``: every subcommand has both."""
    parser.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                        help="import MODULE first, so the algorithms it registers can be named (repeatable; "
                             f"also {registry.ENV_IMPORT}=mod1,mod2)")
    parser.add_argument("--json", action="store_true", help=json_help)


def parse_param(text: str) -> tuple[str, int | str]:
    """NAME=VALUE: an integer when VALUE reads as one, else the text (``topology=cluster:2x8``);
    the algorithm's parameter says which it takes (``registry.Algorithm.resolve``)."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    try:
        return name, int(value)
    except ValueError:
        return name, value


def add_schedule_args(parser: argparse.ArgumentParser, *, ranks: bool = True, file: bool = True) -> None:
    """The options that pick a schedule: a registered algorithm, or (with ``file``) a schedule file."""
    kinds = [k.value for k in Kind]
    parser.add_argument("--collective", "-c", choices=kinds, metavar="K", help=f"collective kind: {', '.join(kinds)}")
    parser.add_argument("--algorithm", "-a", metavar="A", help="algorithm name (see `collsched list`)")
    if ranks:
        parser.add_argument("--ranks", "-p", type=int, metavar="P", help="world size")
    parser.add_argument("--chunks", "-k", type=int, metavar="k",
                        help="chunks per logical piece (default 1); the schedule records the resulting chunk count")
    parser.add_argument("--root", "-r", type=int, metavar="R", help="root rank for rooted kinds (default 0)")
    parser.add_argument("--param", action="append", type=parse_param, default=[], metavar="NAME=VALUE",
                        help="other algorithm parameter, e.g. --param group=4 (repeatable)")
    add_matrix_arg(parser)
    if file:
        parser.add_argument("--file", "-f", metavar="F",
                            help="a schedule file (collsched.schedule/1 JSON, or MSCCL-IR XML)")


MATRIX_HELP = ("alltoallv's traffic matrix: uniform, uniform:N, zipf:S (MoE tokens routed to experts of Zipf(S) "
               "popularity, experts in blocks on ranks; zipf:S,tokens=T,experts=E,top_k=K,seed=X), trace:FILE "
               "(a router trace, SOURCE_RANK,EXPERT a line) or a FILE (JSON [[...]] or CSV, p rows of p chunk "
               "counts); default uniform")


def add_matrix_arg(parser: argparse.ArgumentParser) -> None:
    """``--matrix SPEC``: the traffic matrix of an alltoallv (``algorithms.matrices.parse``)."""
    parser.add_argument("--matrix", metavar="SPEC", help=MATRIX_HELP)


def matrix_from_args(args: argparse.Namespace, kind: str | None, ranks: int) -> Any:
    """The ``--matrix`` of an alltoallv for ``ranks`` ranks (None without one); ``UsageError`` for another kind."""
    spec = getattr(args, "matrix", None)
    if spec is None:
        return None
    if kind != Kind.ALLTOALLV.value:
        raise UsageError(f"--matrix is for -c alltoallv, not {kind or 'a schedule file'}")
    from algorithms import matrices
    from algorithms.errors import ScheduleError

    try:
        return matrices.parse(spec, ranks)
    except ScheduleError as e:
        raise UsageError(f"--matrix: {e}" if not str(e).startswith("--matrix") else str(e)) from None


def schedule_from_args(args: argparse.Namespace, *, ranks: int | None = None, allow_custom: bool = False) -> Schedule:
    """Build or load the schedule the options name; ``UsageError`` when they do not fit together.

    ``allow_custom``: an MSCCL-IR file with ``coll="custom"`` loads (for timing only: it has no postcondition).
    """
    if getattr(args, "file", None):
        extra = [o for o in ("collective", "algorithm", "chunks", "root", "matrix")
                 if getattr(args, o, None) is not None]
        if getattr(args, "ranks", None) is not None:
            extra.append("ranks")
        if extra or args.param:
            raise UsageError(f"--file cannot be combined with --{', --'.join(extra or ['param'])}")
        if allow_custom and is_msccl(args.file):
            from algorithms.formats.msccl import load_msccl

            return load_msccl(args.file, allow_custom=True)
        return fileformat.load(args.file)
    missing = [o for o in ("collective", "algorithm") if getattr(args, o, None) is None]
    p = ranks if ranks is not None else getattr(args, "ranks", None)
    if p is None:
        missing.append("ranks")
    if missing:
        alt = " (or --file F)" if hasattr(args, "file") else ""
        raise UsageError(f"missing --{', --'.join(missing)}{alt}")
    params: dict[str, Any] = dict(args.param)
    if args.chunks is not None:
        params["chunks"] = args.chunks
    algorithm = registry.get(args.collective, args.algorithm)
    matrix = matrix_from_args(args, args.collective, p) if p is not None else None
    if matrix is not None:
        params["matrix"] = matrix
    from sim.guards import guard_build

    guard_build(args.collective, args.algorithm, p, lambda q: algorithm.build(  # type: ignore[arg-type]
        q, root=args.root, **params), _chunks(params))  # before building
    return algorithm.build(p, root=args.root, **params)  # type: ignore[arg-type]


def _chunks(params: dict[str, Any]) -> int:
    """The chunks a build asks for, for its estimate (a bad value is the builder's to refuse)."""
    c = params.get("chunks")
    return c if isinstance(c, int) and not isinstance(c, bool) and c >= 1 else 1


def guard_library_args(args: argparse.Namespace, ranks: int, *, symmetric: bool = False) -> None:
    """simulate's and sweep's resource guard (``sim.guards.guard_build``): every library schedule the options
    name, on ``ranks`` ranks, estimated before the topology or any schedule is built; ``symmetric`` (simulate):
    a schedule that will be timed by symmetry is estimated per orbit."""
    from sim.guards import guard_build

    if getattr(args, "file", None) or getattr(args, "collective", None) is None:
        return
    names = [args.algorithm] if getattr(args, "algorithm", None) else None
    if names is None and getattr(args, "algorithms", None):
        names = [a.strip() for a in args.algorithms.split(",") if a.strip()]
    try:
        candidates = [registry.get(args.collective, a) for a in names] if names is not None else list(
            registry.algorithms(args.collective))
    except CollschedError:
        return  # an unknown name: the command says so itself
    for alg in candidates:
        params: dict[str, Any] = dict(getattr(args, "param", None) or [])
        if args.chunks is not None and any(x.name == "chunks" for x in alg.parameters):
            params["chunks"] = args.chunks
        if alg.unsupported(ranks, params) is not None:
            continue
        def build(q: int, alg: Any = alg, params: dict[str, Any] = params) -> Schedule:
            return alg.build(q, root=args.root, **params)

        guard_build(args.collective, alg.name, ranks, build, _chunks(params),
                    per_orbit=_orbit_size(args, alg, ranks, params) if symmetric else 1)


def _orbit_size(args: argparse.Namespace, alg: Any, ranks: int, params: dict[str, Any]) -> int:
    """The order of the group ``simulate`` will time ``alg`` by (``sim.engine.symmetric``) on the torus the
    options name, or 1 where it will build the whole schedule. Should the run find the quotient does not
    apply after all, the explicit build is guarded again, whole (``schedule_from_args``)."""
    if (alg.symmetric is None or not str(getattr(args, "topology", "")).startswith("torus:")
            or args.root is not None or ranks < 256):  # sim.cli.simulate.SYMMETRY_RANKS
        return 1
    try:
        form = alg.symmetric_form(ranks, **params)
    except CollschedError:
        return 1
    if form is None:
        return 1
    from sim.engine.symmetric import group

    return group(form.dims, form.generators).order


def is_msccl(path: str) -> bool:
    """True when the file is MSCCL-IR XML (by its name, or by its first bytes)."""
    if fileformat.is_xml_path(path):
        return True
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError:
        return False
    from algorithms.formats.msccl import looks_like_xml

    return looks_like_xml(head)


def save_schedule(schedule: Schedule, args: argparse.Namespace) -> None:
    """Write ``schedule`` to ``args.output``: MSCCL-IR for --format msccl or a .xml name, an MSCCL++ plan for
    --format mscclpp, else JSON."""
    fmt = args.format or ("msccl" if fileformat.is_xml_path(args.output) else "json")
    msccl_opts = {k: getattr(args, k) for k in ("proto", "nchannels", "min_bytes", "max_bytes", "staged")
                  if getattr(args, k, None) is not None}
    for k in ("min_bytes", "max_bytes"):
        if k in msccl_opts:
            msccl_opts[k] = int(parse_size(msccl_opts[k]))
    for flag in ("ranks_per_node", "inplace"):
        if fmt != "mscclpp" and getattr(args, flag, None) is not None:
            raise UsageError(f"--{flag.replace('_', '-')} is for MSCCL++ plans (--format mscclpp)")
    try:
        if fmt == "msccl":
            from algorithms.formats.msccl import save_msccl

            save_msccl(schedule, args.output, **msccl_opts)
        elif fmt == "mscclpp":
            from algorithms.formats.mscclpp import save_plan

            proto = msccl_opts.pop("proto", "Simple")
            if msccl_opts:
                raise UsageError(f"--{next(iter(msccl_opts)).replace('_', '-')} is for MSCCL-IR output, "
                                 "not an MSCCL++ plan")
            if proto not in ("Simple", "LL"):
                raise UsageError(f"--proto {proto}: MSCCL++ plans run Simple or LL")
            save_plan(schedule, args.output, ranks_per_node=getattr(args, "ranks_per_node", None),
                      inplace=getattr(args, "inplace", None), protocol=proto)
        else:
            if msccl_opts:
                raise UsageError(f"--{next(iter(msccl_opts)).replace('_', '-')} is for MSCCL-IR output "
                                 "(--format msccl or a .xml name)")
            fileformat.save(schedule, args.output)
    except OSError as e:
        raise UsageError(f"cannot write {args.output}: {e.strerror or e}") from None


def add_output_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=("json", "msccl", "mscclpp"), default=None,
                   help="file format: collsched JSON, MSCCL-IR XML or an MSCCL++ execution plan "
                        "(default: msccl for a .xml name, else json)")
    p.add_argument("--proto", choices=("Simple", "LL", "LL128"), default=None,
                   help="MSCCL-IR and MSCCL++ (Simple or LL: packets): the protocol the executor runs it with "
                        "(default Simple)")
    p.add_argument("--nchannels", type=int, default=None, metavar="N",
                   help="MSCCL-IR: spread connections over at least N channels (default 1)")
    p.add_argument("--min-bytes", default=None, metavar="SIZE",
                   help="MSCCL-IR: smallest call the executor picks it for (default 0)")
    p.add_argument("--max-bytes", default=None, metavar="SIZE",
                   help="MSCCL-IR: largest call the executor picks it for (default 0: unlimited)")
    p.add_argument("--ranks-per-node", type=int, default=None, metavar="N",
                   help="MSCCL++: N ranks share a node (memory and switch channels); port channels across nodes "
                        "(default: one node)")
    p.add_argument("--inplace", action="store_const", const=True, default=None,
                   help="MSCCL++: write an all-gather, reduce-scatter or all-to-all in place, in the layout "
                        "MSCCL++'s DSL gives them (default: out of place)")
    p.add_argument("--staged", action="store_const", const=True, default=None,
                   help="MSCCL-IR: receive concurrent reductions into one slot into scratch and add them locally "
                        "(instead of one rrc after another)")


def parse_node(text: str) -> int | str:
    text = text.strip()
    return int(text) if text.isdigit() else text


def parse_link(text: str, what: str) -> tuple[int | str, int | str]:
    m = re.fullmatch(r"([^-\s]+)-([^-\s]+)", text.strip())
    if not m:
        raise UsageError(f"{what}: expected U-V (two node names), got {text!r}")
    return parse_node(m.group(1)), parse_node(m.group(2))


def faults_from_args(args: argparse.Namespace) -> Any:
    from sim.engine.reference import Faults

    down = tuple(parse_link(s, "--link-down") for s in args.link_down)
    degraded: dict[tuple[int | str, int | str], float] = {}
    for s in args.degrade:
        link, sep, f = s.partition("=")
        try:
            factor = float(f)
        except ValueError:
            factor = math.nan
        if not sep or not 0 < factor < math.inf:
            raise UsageError(f"--degrade: expected U-V=FACTOR with FACTOR > 0, got {s!r}")
        degraded[parse_link(link, "--degrade")] = factor
    stragglers: dict[int, float] = {}
    for s in args.straggler:
        rank, sep, delay = s.partition("=")
        if not sep or not rank.strip().isdigit():
            raise UsageError(f"--straggler: expected RANK=DELAY such as 3=10us, got {s!r}")
        stragglers[int(rank)] = parse_duration(delay, "--straggler")
    return Faults(down=down, degraded=degraded, stragglers=stragglers)


def add_routing_arg(p: argparse.ArgumentParser) -> None:
    """--routing: the simulator's least-latency routes, or explicit ones (``sim.topology.routing.routed``)."""
    p.add_argument("--routing", choices=ROUTINGS, default="shortest",
                   help="message routes: least latency (default); widest bottleneck where that is wider; "
                        "neighbouring ranks over their own link or shared switch; or, on a torus, dimension order "
                        "(x, then y, ...; sim.topology.routing.routed)")


def in_flight_arg(text: str) -> int:
    """--in-flight: an integer >= 0, or ``all`` (0: no send order)."""
    if text.strip().lower() == "all":
        return 0
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0 or all, got {text!r}")
    return n


def add_network_args(p: argparse.ArgumentParser) -> None:
    add_routing_arg(p)
    p.add_argument("--topology", "-t", required=True, metavar="SPEC",
                   help=f"{SPEC_FORMS} (see `collsched list --topologies`). Links run at 50 GB/s and 1 us unless "
                        "the SPEC's figures or --bandwidth/--latency say otherwise; "
                        "cluster: 450 GB/s, 0.5 us to the node switch and 50 GB/s, 1 us per NIC; dgx-h100: NCCL's "
                        "effective figures (docs/design.md). A machine file (collsched calibrate) also sets "
                        "--overhead, --reduce-bw, --launch and --message-cpu unless they are given")
    p.add_argument("--mode", choices=("dataflow", "lockstep"), default="dataflow",
                   help="dataflow: a transfer starts when its dependencies are done, each rank sending and "
                        "receiving its messages in schedule order on each port (--in-flight; default); "
                        "lockstep: a step starts when the previous one is done")
    p.add_argument("--in-flight", type=in_flight_arg, metavar="N",
                   help="dataflow's send order: how many of its steps each rank's port may have in flight (1: "
                        "a blocking send per step, as MPI's collectives, the default; 8: as NCCL's channels; "
                        "0 or all: no order, every ready transfer starts at once and shares the port)")
    p.add_argument("--bandwidth", metavar="BW", help="set every link's bandwidth, e.g. 50GB/s")
    p.add_argument("--latency", metavar="T", help="set every link's latency, e.g. 1us")
    p.add_argument("--overhead", metavar="T", help="per-message endpoint overhead, e.g. 2us (default 0)")
    p.add_argument("--reduce-bw", metavar="BW", help="reduction throughput per rank, e.g. 100GB/s (default: free)")
    p.add_argument("--launch", metavar="T", help="fixed cost per collective before its first transfer, e.g. 10us "
                                                 "(default 0)")
    p.add_argument("--message-cpu", metavar="T", help="a rank's processor time per message it sends or receives, "
                                                      "one at a time, e.g. 20us (default 0)")
    p.add_argument("--link-down", action="append", default=[], metavar="U-V",
                   help="take the cable between nodes U and V down (repeatable)")
    p.add_argument("--degrade", action="append", default=[], metavar="U-V=F",
                   help="run the cable U-V at factor F of its bandwidth (repeatable)")
    p.add_argument("--straggler", action="append", default=[], metavar="R=T",
                   help="add delay T to every message rank R sends or receives (repeatable)")
    p.add_argument("--placement", default="identity", metavar="SPEC",
                   help=f"which topology node each rank runs on: {PLACEMENT_FORMS}; default identity (rank r on "
                        "node r). Faults then name ranks: node U of --link-down is where rank U runs")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--engine", choices=("auto", "simpy", "fast"), default="auto",
                   help="simpy (the reference), fast (vectorised, the same times) or auto (fast whenever it is "
                        "exact for the run; default)")
    p.add_argument("--bound", choices=("auto", "yes", "no"), default="auto",
                   help=f"compute the lower bound and efficiency (exact max-flow cuts, a minute at 1024 ranks): "
                        f"auto does up to {BOUND_AUTO_RANKS} ranks (default auto)")


BOUND_KIND_NAMES = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce", "alltoall", "alltoallv")
"""Kinds with a lower bound (``sim.bounds``): scatter, gather and barrier have none."""


BOUND_AUTO_RANKS = 128
"""Largest world size for which simulate and sweep compute the bound unless asked (``--bound``): the exact
cuts take about a second on ring:128, 5 s on ring:256, 35 s on switch:1024 and 90 s on ring:1024, where the
fast engine simulates in one."""


def want_bound(args: argparse.Namespace, ranks: int) -> bool:
    return args.bound == "yes" or (args.bound == "auto" and ranks <= BOUND_AUTO_RANKS)


def add_topology_args(p: argparse.ArgumentParser) -> None:

    p.add_argument("--topology", "-t", required=True, metavar="SPEC", help=f"topology: {SPEC_FORMS}")
    add_routing_arg(p)
    p.add_argument("--bandwidth", metavar="BW", help="set every link's bandwidth, e.g. 50GB/s")
    p.add_argument("--latency", metavar="T", help="set every link's latency, e.g. 1us")
    p.add_argument("--root", "-r", type=int, metavar="R", help="root rank for broadcast and reduce (default 0)")
    p.set_defaults(placement="identity")


def topology_from_args(args: argparse.Namespace, ranks: int | None = None) -> Any:
    """The topology of --topology, its links set by --bandwidth/--latency, its ranks placed by --placement.

    ``ranks`` (simulate's -p, or a --file's world size) fewer than the topology's: the part that --placement FILE
    names (``sim.topology.placement``: the nodes left out only forward)."""
    from sim.topology import from_spec
    from sim.topology.placement import place, placement

    bw = parse_bandwidth(args.bandwidth) if args.bandwidth is not None else None
    lat = parse_duration(args.latency) if args.latency is not None else None
    guard = getattr(args, "guard", None)
    if guard is not None:  # the command's resource guard (sim.guards), before the topology is even built
        from sim.guards import spec_ranks

        n = ranks if ranks is not None else spec_ranks(args.topology)
        if n is not None:
            guard(args, n)
    topo = from_spec(args.topology, bandwidth=bw, latency=lat)
    if guard is not None and ranks is None and n is None:  # a file: its world is known once it is read
        guard(args, topo.ranks)
    p = topo.ranks if ranks is None else ranks
    if p != topo.ranks:
        _check_part(args, p, topo.ranks)
    if args.placement != "identity":
        topo = place(topo, placement(args.placement, topo, p), name=f"{topo.name} placed {Path(args.placement).name}",
                     partial=p < topo.ranks)
    elif p < topo.ranks:  # a schedule file of fewer ranks: on the topology's first p ranks (_check_part)
        topo = place(topo, tuple(range(p)), name=f"{topo.name} ranks 0-{p - 1}", partial=True)
    if getattr(args, "routing", "shortest") != "shortest":
        from sim.topology.routing import routed

        topo = routed(topo, args.routing)
    return topo


def _check_part(args: argparse.Namespace, p: int, whole: int) -> None:
    """Refuse ``p`` ranks on a topology of ``whole`` (p != whole), unless --placement FILE names the part."""
    name = args.topology
    if p < 1:
        raise UsageError(f"-p {p}: the world size must be at least 1")
    if p > whole and getattr(args, "file", None):  # no -p to leave out: the file says how many ranks
        raise UsageError(f"{args.file}: the schedule has {p} ranks, but {name} has only {whole}; name a topology "
                         f"of at least {p} ranks")
    if p > whole:
        raise UsageError(f"-p {p}: {name} has only {whole} ranks (the rank count comes from the topology; "
                         "leave -p out, or name a larger topology)")
    if args.placement == "identity" and getattr(args, "file", None):
        return  # a schedule file runs on the topology's first ranks; --placement FILE picks others
    if args.placement in ("identity", "snake"):
        raise UsageError(
            f"-p {p}: {name} has {whole} ranks; a schedule of {p} ranks runs on part of it with --placement "
            f"FILE, a collsched.placement/1 file listing the {p} nodes it runs on, e.g. "
            f'{{"format": "collsched.placement/1", "ranks": [{", ".join(map(str, range(min(p, 3))))}'
            f'{", ..." if p > 3 else ""}]}} (or leave -p out: the rank count comes from the topology)')


def engine_options(args: argparse.Namespace, *, progress: bool | None = None) -> EngineOptions:
    """The run's ``EngineOptions``, built once from the flags and handed whole to the engine: the topology's
    machine (a machine file's or a preset's, ``sim.machine.model.engine_for``) with --mode, the faults, --engine,
    the progress bar (``progress``, else unless --no-progress) and each of --overhead, --reduce-bw, --launch,
    --message-cpu and --in-flight that is given. The value checks itself: a field it refuses is a
    ``SimulationError`` naming it."""
    from sim.machine.model import engine_for

    given: dict[str, Any] = {}
    if args.overhead is not None:
        given["overhead"] = parse_duration(args.overhead, "--overhead")
    if args.reduce_bw is not None:
        given["reduce_bandwidth"] = parse_bandwidth(args.reduce_bw, "--reduce-bw")
    if args.launch is not None:
        given["launch"] = parse_duration(args.launch, "--launch")
    if args.message_cpu is not None:
        given["message_cpu"] = parse_duration(args.message_cpu, "--message-cpu")
    if getattr(args, "in_flight", None) is not None:
        given["in_flight"] = args.in_flight
    return engine_for(args.topology).replace(
        mode=args.mode, faults=faults_from_args(args), engine=args.engine,
        progress=not args.no_progress if progress is None else progress, **given)


def root_for(kind: str, root: int | None) -> int | None:
    if Kind(kind) in ROOTED_KINDS:
        return 0 if root is None else root
    if root is not None:
        raise UsageError(f"--root: {kind} has no root")
    return None


def bound_for(kind: Kind, root: int | None, topology: Any, size: float, faults: Any = None,
              collective: Any = None) -> Any:
    """The ``sim.bounds.cuts.Bound`` of a run, or None for kinds without one (scatter, gather, barrier).
    ``faults`` (``sim.engine.reference.Faults``): the bound of the topology the run actually sees;
    ``collective``: an alltoallv's, for its traffic matrix (``sim.bounds.traffic``; default uniform)."""
    if kind.value not in BOUND_KIND_NAMES:
        return None
    from sim.bounds.cuts import bound

    if faults is not None:
        topology = faults.apply(topology)
    if kind is Kind.ALLTOALLV:
        from algorithms.ir import Collective
        from sim.bounds.traffic import matrix_bound

        if collective is None:
            collective = Collective(Kind.ALLTOALLV, topology.ranks, matrix=((1,) * topology.ranks,) * topology.ranks)
        return matrix_bound(topology, collective, size)
    return bound(kind, topology, size, root=root if kind in ROOTED_KINDS else None)


def peak_rss_mib() -> float:
    """This process's peak resident memory so far, in MiB (``ru_maxrss``: KiB on Linux, bytes on macOS)."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024


def gigabytes(x: float) -> float | None:
    return x / 1e9 if math.isfinite(x) else None


def human_size(n: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.4g}{unit}"
    return f"{n:.4g}B"


def human_time(t: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if t >= scale:
            return f"{t / scale:.4g} {unit}"
    return f"{t / 1e-9:.4g} ns"


def dash_values(parser: argparse.ArgumentParser) -> None:
    """Let an option's value start with a dash and a digit (``--size -5MiB``), so that it reaches the option's
    own check (a size cannot be negative) instead of argparse's "expected one argument". Python 3.13's argparse
    reads such words so already; 3.11 and 3.12 only take plain negative numbers (``-5``). The parser has no
    option spelled like a number, so nothing else changes."""
    parser._negative_number_matcher = re.compile(r"-\.?[0-9]")
