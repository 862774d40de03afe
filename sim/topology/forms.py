"""The table of topology SPEC forms: ``ring:P``, ``torus:RxC[xD...]``, ... and the ones users register.

A SPEC is ``NAME:ARGS`` (a registered form), a topology file (``collsched.topology/1`` JSON or
GraphML) or a machine file (``collsched calibrate``). Each form is a ``Form``: its syntax (``ring:P``),
a help text, its constraints, ``parse`` (the text after the colon to the builder's arguments),
``ranks`` (the world those arguments make, checked against ``max_ranks`` before anything is built)
and the builder. ``from_spec`` dispatches through the table; ``topology_forms()`` lists it
(``collsched list --topologies``); ``SPEC_FORMS`` is the built-in forms as one line of text.

This module imports no networkx: the command line's help text comes from it while the parser is
built, and the built-in builders (``sim.topology.builders``) are imported when a SPEC is built.

A form of your own, in your module::

    import networkx as nx
    from sim.topology import Topology, parse_shape, register_topology

    @register_topology("mesh", syntax="mesh:RxC", help="2-D mesh, no wrap-around links",
                       constraints=("R, C >= 1",),
                       parse=lambda text: dict(zip(("rows", "cols"), parse_shape(text, 2), strict=True)),
                       ranks=lambda a: a["rows"] * a["cols"])
    def mesh(rows: int, cols: int) -> Topology:
        g = nx.DiGraph()
        g.add_nodes_from(range(rows * cols))
        ...  # links with "bandwidth" (bytes/s) and "latency" (s)
        return Topology(g, f"mesh:{rows}x{cols}")

``parse`` returns the builder's keyword arguments (a dict) or its positional ones (a tuple); it
raises ``TopologyError`` or ``ValueError`` for text it cannot read, and ``from_spec`` puts the SPEC
in front of the message. Without ``parse`` the text is one integer, the builder's only argument.

The table loads user modules itself before it looks up a form it does not know (and before it lists
the forms), the way the algorithm registry does (``algorithms.registry.load_plugins``): the modules
of ``--import MODULE`` (imported by the command line before the command runs) and of
``COLLSCHED_IMPORT=mod1,mod2``, the ``collsched.algorithms`` entry points, and the entry points of
the group ``collsched.topologies`` of every installed distribution (its value a module, or
``module:function`` to call).

Per-dimension torus figures (``sim.topology.builders``): ``torus:4x4@x=100GB/s,y=50GB/s/2us``; each
``DIM=BW``, ``DIM=BW/LAT`` or ``DIM=/LAT``, the dimensions ``x``, ``y``, ``z`` in the order the sizes
are written (or ``d1``, ``d2``, ...), units as ``sim.units`` reads them. ``from_spec``'s
``bandwidth``/``latency`` (``--bandwidth``/``--latency``) set every link, so they cannot be combined
with a spec that sets that figure itself.
"""

from __future__ import annotations

import importlib
import math
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from algorithms import registry
from algorithms.errors import CollschedError
from sim.topology.errors import TopologyError
from sim.units import parse_bandwidth, parse_duration

if TYPE_CHECKING:
    from sim.topology.graph import Topology

__all__ = ["ENTRY_POINT_GROUP", "MAX_SPEC_RANKS", "SPEC_FORMS", "Form", "form", "from_spec", "topology_forms",
           "load_plugins", "parse_shape", "register_topology", "spec_forms"]

ENTRY_POINT_GROUP = "collsched.topologies"
MAX_SPEC_RANKS = 1 << 16
"""Largest world a SPEC may build (a full mesh: 2048 ranks, about 4 M links)."""
MAX_FULL_RANKS = 2048
"""Largest full mesh a SPEC may build: 2048 ranks are about 4 M links."""

Parsed = Mapping[str, Any] | tuple[Any, ...]


@dataclass(frozen=True)
class Form:
    """One registered SPEC form (module docstring)."""

    name: str
    syntax: str
    help: str
    builder: Callable[..., Topology] = field(repr=False)
    parse: Callable[[str], Parsed] = field(repr=False)
    constraints: tuple[str, ...] = ()
    ranks: Callable[[Any], int] | None = field(default=None, repr=False)
    max_ranks: int = MAX_SPEC_RANKS
    source: str = ""

    def build(self, text: str, spec: str | None = None) -> Topology:
        """The topology of ``NAME:text``; ``TopologyError`` naming the SPEC when the text does not fit."""
        spec = spec if spec is not None else f"{self.name}:{text}"
        args = self.arguments(text, spec)
        if isinstance(args, tuple):
            return self.builder(*args)
        return self.builder(**args)

    def arguments(self, text: str, spec: str) -> Parsed:
        """``parse(text)``, checked against ``max_ranks``; errors name the SPEC."""
        try:
            args = self.parse(text)
        except (CollschedError, ValueError) as e:  # TopologyError, or UsageError from sim.units
            raise TopologyError(f"topology {spec!r}: {e}") from None
        if not isinstance(args, tuple | Mapping):
            raise TopologyError(f"topology form {self.name!r}: parse returned {type(args).__name__}, "
                                "not a dict of keyword arguments or a tuple of positional ones")
        if self.ranks is not None:
            n = self.ranks(args)
            if n > self.max_ranks:
                raise TopologyError(f"topology {spec!r}: {n} ranks is more than the {self.max_ranks} a SPEC may build")
        return args

    def row(self) -> dict[str, Any]:
        """What ``collsched list --topologies --json`` prints for this form."""
        return {"form": self.syntax, "name": self.name, "help": self.help, "constraints": list(self.constraints),
                "max_ranks": self.max_ranks, "source": self.source}


_FORMS: dict[str, Form] = {}
_NAME = re.compile(r"[a-z][a-z0-9-]*")
_SPEC = re.compile(r"([a-z][a-z0-9-]*):(.+)")


def parse_shape(text: str, count: int | None = None, *, least: int = 1) -> tuple[int, ...]:
    """``4x4x2`` as ``(4, 4, 2)``: ``count`` integers (any number when None, at least ``least``),
    each >= 1; ``TopologyError`` otherwise."""
    parts = text.strip().lower().split("x")
    shape = "x".join(["N"] * count) if count is not None else "x".join(["N"] * max(least, 1)) + "[xN...]"
    if (count is not None and len(parts) != count) or len(parts) < least \
            or not all(re.fullmatch(r"[0-9]+", s) for s in parts):
        raise TopologyError(f"expected {shape} after the colon, got {text!r}")
    values = tuple(int(s) for s in parts)
    if min(values) < 1:
        raise TopologyError(f"every number of {shape} must be >= 1, got {text!r}")
    return values


def _one_int(text: str) -> tuple[int]:
    (n,) = parse_shape(text, 1)
    return (n,)


def register_topology(name: str, *, syntax: str, help: str, parse: Callable[[str], Parsed] | None = None,
                      constraints: tuple[str, ...] = (), ranks: Callable[[Any], int] | None = None,
                      max_ranks: int = MAX_SPEC_RANKS, source: str = ""
                      ) -> Callable[[Callable[..., Topology]], Callable[..., Topology]]:
    """Decorator: register a builder as the SPEC form ``name:...`` (module docstring); returns it unchanged."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise TopologyError(f"topology form name {name!r}: expected lower-case letters, digits and '-', "
                            "starting with a letter")
    if not isinstance(syntax, str) or not syntax.startswith(f"{name}:"):
        raise TopologyError(f"topology form {name!r}: its syntax must start with {name + ':'!r}, got {syntax!r}")

    def wrap(builder: Callable[..., Topology]) -> Callable[..., Topology]:
        if name in _FORMS:
            raise TopologyError(f"topology form {name!r} is registered twice")
        _FORMS[name] = Form(name, syntax, help, builder, parse or _one_int, tuple(constraints), ranks, max_ranks,
                            source)
        return builder

    return wrap


# -- loading user forms ----------------------------------------------------------------------------

_plugins_loaded = False
_plugin_error: CollschedError | None = None


def load_plugins() -> None:
    """Load what registers forms, once: ``algorithms.registry.load_plugins`` (``COLLSCHED_IMPORT`` and the
    ``collsched.algorithms`` entry points), then the ``collsched.topologies`` entry points. A failure is
    raised again by every later call."""
    global _plugins_loaded, _plugin_error
    registry.load_plugins()
    if _plugin_error is not None:
        raise _plugin_error
    if _plugins_loaded:
        return
    _plugins_loaded = True  # first: a plugin that looks up a form while importing must not recurse
    try:
        registry.load_entry_points(ENTRY_POINT_GROUP, TopologyError)
    except TopologyError as e:
        _plugin_error = e
        raise


def form(name: str) -> Form | None:
    """The form called ``name``, loading user modules first when it is not a known one; None if none is."""
    hit = _FORMS.get(name)
    if hit is None:
        load_plugins()
        hit = _FORMS.get(name)
    return hit


def topology_forms() -> Iterator[Form]:
    """Every registered form, the built-in ones first, then the users' in the order they registered."""
    load_plugins()
    yield from list(_FORMS.values())


def spec_forms(*, loaded: bool = True) -> str:
    """The forms as one line of text (``loaded``: after loading user modules), ending in the files."""
    if loaded:
        load_plugins()
    return ", ".join(f.syntax for f in _FORMS.values()) + ", or a topology file"


def from_spec(spec: str, *, bandwidth: float | None = None, latency: float | None = None) -> Topology:
    """The topology a SPEC names (module docstring); ``bandwidth``/``latency``, when given, set every link."""
    if not isinstance(spec, str):
        raise TopologyError(f"topology must be a SPEC string ({SPEC_FORMS}), got {spec!r}")
    text = spec.strip()
    if text.endswith("+sharp"):  # InfiniBand SHARP on the network switches (sim.topology.switches)
        from sim.topology.switches import with_sharp

        return with_sharp(from_spec(text[: -len("+sharp")], bandwidth=bandwidth, latency=latency), spec)
    m = _SPEC.fullmatch(text)
    found = form(m.group(1)) if m else None
    topo: Topology
    if found is not None and m is not None:
        args = found.arguments(m.group(2), spec)
        if isinstance(args, Mapping):
            for what, value in (("bandwidth", bandwidth), ("latency", latency)):
                if value is not None and args.get(what) is not None:
                    raise TopologyError(f"topology {spec!r} sets its own {what}, and a {what} for every link "
                                        f"(--{what}) would override it: give one or the other")
        topo = found.builder(*args) if isinstance(args, tuple) else found.builder(**args)
    elif os.path.exists(spec):
        from sim.topology.files import load

        topo = load(spec)
    elif m is not None:
        raise TopologyError(f"unknown topology {spec!r}: no form {m.group(1)!r} and no such file (known forms: "
                            f"{spec_forms()}; a form of your own: --import MODULE or {registry.ENV_IMPORT}=MODULE)")
    elif os.sep in spec or spec.lower().endswith((".json", ".graphml", ".xml")):
        raise TopologyError(f"topology file {spec}: no such file")
    else:
        raise TopologyError(f"unknown topology {spec!r}: expected {spec_forms()}")
    if bandwidth is not None or latency is not None:
        topo = topo.with_links(bandwidth=bandwidth, latency=latency)
    return topo


# -- the built-in forms ------------------------------------------------------------------------------


def _builder(name: str) -> Callable[..., Topology]:
    """``sim.topology.builders.<name>``, imported when a SPEC is built (it imports networkx)."""

    def build(*args: Any, **kwargs: Any) -> Topology:
        fn: Callable[..., Topology] = getattr(importlib.import_module("sim.topology.builders"), name)
        return fn(*args, **kwargs)

    build.__name__ = build.__qualname__ = name
    return build


_FIGURE = re.compile(r"(?P<bw>[^/]*(?:/s)?)(?:/(?P<lat>[^/]*))?")


def _parse_torus(text: str) -> dict[str, Any]:
    shape, at, figures = text.partition("@")
    dims = parse_shape(shape, least=2)
    out: dict[str, Any] = {"dims": dims}
    if not at:
        return out
    from sim.topology.builders import torus_dimension  # networkx: only for a SPEC with figures, built next

    bws: list[float | None] = [None] * len(dims)
    lats: list[float | None] = [None] * len(dims)
    seen: set[int] = set()
    for item in figures.split(","):
        name, eq, value = item.partition("=")
        fig = _FIGURE.fullmatch(value.strip())
        if not eq or not name.strip() or fig is None or not (fig.group("bw") or fig.group("lat")):
            raise TopologyError(f"expected DIM=BW, DIM=BW/LAT or DIM=/LAT after '@' (such as x=100GB/s/1us), "
                                f"got {item!r}")
        k = torus_dimension(name, len(dims))
        if k in seen:
            raise TopologyError(f"dimension {name.strip()!r} is given twice")
        seen.add(k)
        label = f"dimension {name.strip()}"
        if fig.group("bw"):
            bws[k] = parse_bandwidth(fig.group("bw"), f"{label} bandwidth")
        if fig.group("lat"):
            lats[k] = parse_duration(fig.group("lat"), f"{label} latency")
    if any(b is not None for b in bws):
        out["bandwidth"] = tuple(bws)
    if any(t is not None for t in lats):
        out["latency"] = tuple(lats)
    return out


def _torus(dims: tuple[int, ...], bandwidth: tuple[float | None, ...] | None = None,
           latency: tuple[float | None, ...] | None = None) -> Topology:
    from sim.topology.builders import DEFAULT_BANDWIDTH, DEFAULT_LATENCY, torus

    bws = [DEFAULT_BANDWIDTH if b is None else b for b in bandwidth or [None] * len(dims)]
    lats = [DEFAULT_LATENCY if t is None else t for t in latency or [None] * len(dims)]
    return torus(*dims, bandwidth=bws, latency=lats)


_AT_MOST = f"at most {MAX_SPEC_RANKS} ranks"
_BUILTIN = "sim.topology.builders"
for _name, _fn, _help, _constraints, _limit in (
    ("ring", "ring", "bidirectional ring: rank r linked both ways to r+1 mod P", ("P >= 1",), MAX_SPEC_RANKS),
    ("uring", "unidirectional_ring", "unidirectional ring: one link r -> r+1 mod P", ("P >= 1",), MAX_SPEC_RANKS),
    ("full", "fully_connected", "full mesh: a link each way between every pair of ranks", ("P >= 1",),
     MAX_FULL_RANKS),
    ("switch", "single_switch", "star: every rank linked both ways to one switch", ("P >= 1",), MAX_SPEC_RANKS),
):
    register_topology(_name, syntax=f"{_name}:P", help=_help, constraints=(*_constraints, f"at most {_limit} ranks"),
                      ranks=lambda a: a[0], max_ranks=_limit, source=_BUILTIN)(_builder(_fn))
register_topology(
    "torus", syntax="torus:RxC[xD...][@DIM=BW[/LAT],...]",
    help="torus of any number of dimensions, wrap-around links both ways (a dimension of 2: one link pair), "
         "rank row-major; DIM x, y, z (or d1, d2, ...) in the order the sizes are written, each with its own "
         "bandwidth and latency, e.g. torus:4x4@x=100GB/s,y=50GB/s/2us (unnamed: 50 GB/s, 1 us)",
    parse=_parse_torus, constraints=("at least 2 dimensions, each >= 1", _AT_MOST),
    ranks=lambda a: math.prod(a["dims"]), source=_BUILTIN)(_torus)
register_topology(
    "fattree", syntax="fattree:K", help="k-ary fat tree (Al-Fares et al., SIGCOMM 2008): K pods, K^3/4 ranks",
    constraints=("K even, >= 2", _AT_MOST), ranks=lambda a: a[0] ** 3 // 4, source=_BUILTIN)(_builder("fat_tree"))
register_topology(
    "cluster", syntax="cluster:NxG",
    help="N nodes of G GPUs: an NVLink-like switch per node (450 GB/s, 0.5 us), one NIC per GPU to a network "
         "switch (50 GB/s, 1 us)",
    parse=lambda text: dict(zip(("nodes", "gpus"), parse_shape(text, 2), strict=True)),
    constraints=("N, G >= 1", _AT_MOST), ranks=lambda a: a["nodes"] * a["gpus"], source=_BUILTIN)(
    _builder("cluster"))

GPU_OPTIONS = ("[@domain=G,fabric=ib|ib-hdr|roce|efa|tcpxo,nics=K,nic=400Gb/s,latency=20us,overhead=3us,"
               "efficiency=0.94]")
"""A GPU preset's options after its node count (``sim.topology.gpus.parse_options``; the fabrics in
``sim.topology.fabrics``)."""
_DOMAIN = re.compile(r"(?:^|,)\s*domain\s*=\s*(\d+)\s*(?:,|$)")


def _gpu_builder(system: str) -> Callable[..., Topology]:
    """``sim.topology.gpus.gpu_cluster`` of ``system``, imported when a SPEC is built."""

    def build(nodes: int, options: str = "") -> Topology:
        topo: Topology = importlib.import_module("sim.topology.gpus").gpu_cluster(system, nodes, options)
        return topo

    build.__name__ = build.__qualname__ = system.replace("-", "_")
    return build


def _gpu_parse(text: str) -> dict[str, Any]:
    count, _, options = text.partition("@")
    if not count.strip().isdigit() or int(count) < 1:
        raise TopologyError(f"expected N (domains, >= 1) and optionally @KEY=VALUE,..., got {text!r}")
    return {"nodes": int(count), "options": options.strip()}


def _gpu_ranks(gpus: int) -> Callable[[Any], int]:
    def ranks(a: Any) -> int:
        m = _DOMAIN.search(a["options"])
        return (int(m.group(1)) if m else gpus) * int(a["nodes"])

    return ranks


for _name, _gpn, _help in (
    ("dgx-h100", 8, "N DGX H100 systems: 8 H100 at NVLink 4 (450 GB/s per direction), NVSwitches that reduce and "
                    "multicast (NVLS), 8x 400 Gb/s NICs on rails; dgx-h100:N+sharp adds InfiniBand SHARP on the "
                    "network switch (docs/design.md)"),
    ("hgx-h200", 8, "N HGX H200 nodes: 8 H200 at NVLink 4 (450 GB/s per direction), NVLS, 8x 400 Gb/s NICs on rails"),
    ("dgx-a100", 8, "N DGX A100 nodes: 8 A100 at NVLink 3 (300 GB/s per direction), no NVLS, 8x 200 Gb/s HDR NICs "
                    "on rails"),
    ("dgx-b200", 8, "N DGX B200 nodes: 8 B200 at NVLink 5 (900 GB/s per direction), NVLS, 8x 400 Gb/s NICs on rails"),
    ("gb200-nvl72", 72, "N GB200 NVL72 NVLink domains of 72 GPUs (domain=G: G GPUs each, e.g. 8 or 32) at NVLink 5 "
                        "(900 GB/s per direction), NVLS, a 400 Gb/s NIC per GPU on rails"),
):
    register_topology(_name, syntax=f"{_name}:N", parse=_gpu_parse,
                      help=f"{_help}; options {GPU_OPTIONS} (sim.topology.gpus)",
                      constraints=("N >= 1", f"{_gpn}N ranks (G x N with domain=G)", _AT_MOST),
                      ranks=_gpu_ranks(_gpn), source="sim.topology.gpus")(_gpu_builder(_name))

SPEC_FORMS = spec_forms(loaded=False)
"""The built-in forms as one line of text (``spec_forms()`` adds the ones user modules register)."""
