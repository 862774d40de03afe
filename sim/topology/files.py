"""Topology files: the ``collsched.topology/1`` JSON format, and GraphML.

``load`` and ``save`` pick the format by the file name (``.graphml``/``.xml``
is GraphML, anything else JSON); ``docs/design.md`` describes every key.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import networkx as nx

from algorithms.disk import read_capped, write_output
from sim.topology.graph import Node, Topology, TopologyError, _link_name

__all__ = ["FORMAT", "MAX_FILE_BYTES", "as_file", "dumps", "from_dict", "load", "loads", "read_text", "save",
           "to_dict"]

FORMAT = "collsched.topology/1"
MAX_FILE_BYTES = 64 * 1024 * 1024


def to_dict(topology: Topology) -> dict[str, Any]:
    """The ``collsched.topology/1`` document of a topology."""
    g = topology.graph
    return {
        "format": FORMAT,
        "name": topology.name,
        "ranks": topology.ranks,
        "switches": [n for n in g.nodes if isinstance(n, str)],
        "links": [{"src": u, "dst": v, "bandwidth": a["bandwidth"], "latency": a["latency"]}
                  for u, v, a in g.edges(data=True)],
        "routes": [{"src": s, "dst": d, "path": list(path)} for (s, d), path in sorted(topology.routes.items())],
        **({"nodes": {k: g.graph[k] for k in NODE_KEYS if k in g.graph}} if "gpus_per_node" in g.graph else {}),
        **({"switch_caps": caps} if (caps := _caps_of(topology)) else {}),
    }


NODE_KEYS = ("gpus_per_node", "system", "nccl_latency_scale", "fabric", "nvlink_efficiency", "nccl")
"""What a GPU preset's graph says of its nodes (``sim.topology.gpus``), kept in a file's ``nodes`` object: the
domain's size, the preset, its NIC fabric (``sim.topology.fabrics``), a fitted NVLink efficiency, and the NCCL
model's fitted figures (``nccl``: ``sim.machine.nccl_fit``; ``nccl_latency_scale``, one factor on every NCCL
latency, is the older form)."""


def _nodes(doc: object) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise TopologyError("topology.nodes: must be an object")
    _only(doc, NODE_KEYS, "topology.nodes")
    g = doc.get("gpus_per_node")
    if isinstance(g, bool) or not isinstance(g, int) or g < 1:
        raise TopologyError(f"topology.nodes.gpus_per_node: must be an integer >= 1, got {g!r}")
    if "system" in doc and not isinstance(doc["system"], str):
        raise TopologyError(f"topology.nodes.system: must be a preset name, got {doc['system']!r}")
    for key in ("nccl_latency_scale", "nvlink_efficiency"):
        s = doc.get(key, 1.0)
        if isinstance(s, bool) or not isinstance(s, int | float) or not 0 < s < 1e6:
            raise TopologyError(f"topology.nodes.{key}: must be a positive number, got {s!r}")
    if "fabric" in doc:
        from sim.topology.fabrics import fabric_from_dict

        fabric_from_dict(doc["fabric"], "topology.nodes.fabric")
    nccl = doc.get("nccl", {})
    if not isinstance(nccl, dict) or not all(isinstance(k, str) for k in nccl):
        raise TopologyError("topology.nodes.nccl: must be an object")
    return dict(doc)


def _caps_of(topology: Topology) -> dict[str, dict[str, object]]:
    from sim.topology.switches import capabilities, caps_to_dict

    return {n: caps_to_dict(c) for n in topology.graph.nodes if isinstance(n, str)
            and (c := capabilities(topology, n)) is not None}


def dumps(topology: Topology) -> str:
    """The topology as ``collsched.topology/1`` JSON text."""
    return json.dumps(to_dict(topology), indent=1)


def _field(doc: Mapping[str, Any], key: str, kinds: type | tuple[type, ...], where: str) -> Any:
    if key not in doc:
        raise TopologyError(f"{where}: missing field {key!r}")
    value = doc[key]
    if isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,)):
        raise TopologyError(f"{where}.{key}: wrong type {type(value).__name__}")
    if not isinstance(value, kinds):
        raise TopologyError(f"{where}.{key}: wrong type {type(value).__name__}")
    return value


def _only(doc: Mapping[str, Any], keys: Iterable[str], where: str) -> None:
    extra = sorted(set(doc) - set(keys))
    if extra:
        raise TopologyError(f"{where}: unknown field {extra[0]!r}")


def _node(value: object, where: str) -> Node:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TopologyError(f"{where}: a node is a rank (int) or a switch name (str), got {value!r}")
    return value


def from_dict(doc: object) -> Topology:
    """Build a topology from a ``collsched.topology/1`` document, strictly checked."""
    if not isinstance(doc, dict):
        raise TopologyError("topology: the document must be a JSON object")
    _only(doc, ("format", "name", "ranks", "switches", "links", "routes", "engine", "model", "nodes",
                "switch_caps"), "topology")
    if doc.get("format") != FORMAT:
        raise TopologyError(f"topology.format: expected {FORMAT!r}, got {doc.get('format')!r}")
    # A machine file's engine parameters and calibration record: sim.machine.model checks and uses them.
    if "engine" in doc and not isinstance(doc["engine"], dict):
        raise TopologyError(f"topology.engine: must be an object, got {type(doc['engine']).__name__}")
    if "model" in doc and not isinstance(doc["model"], dict):
        raise TopologyError(f"topology.model: must be an object, got {type(doc['model']).__name__}")
    name = _field(doc, "name", str, "topology")
    p = _field(doc, "ranks", int, "topology")
    if p < 1:
        raise TopologyError(f"topology.ranks: must be >= 1, got {p}")
    g = nx.DiGraph(**(_nodes(doc["nodes"]) if "nodes" in doc else {}))
    g.add_nodes_from(range(p))
    for i, s in enumerate(_field(doc, "switches", list, "topology")):
        if not isinstance(s, str) or not s:
            raise TopologyError(f"topology.switches[{i}]: a switch name is a non-empty string, got {s!r}")
        g.add_node(s)
    for i, link in enumerate(_field(doc, "links", list, "topology")):
        where = f"topology.links[{i}]"
        if not isinstance(link, dict):
            raise TopologyError(f"{where}: must be an object")
        _only(link, ("src", "dst", "bandwidth", "latency"), where)
        u = _node(_field(link, "src", (int, str), where), f"{where}.src")
        v = _node(_field(link, "dst", (int, str), where), f"{where}.dst")
        for n, key in ((u, "src"), (v, "dst")):
            if n not in g:
                raise TopologyError(f"{where}.{key}: unknown node {n!r} (ranks 0..{p - 1} or a listed switch)")
        attrs = {k: link[k] for k in ("bandwidth", "latency") if k in link}
        if g.has_edge(u, v):
            raise TopologyError(f"{where}: {_link_name(u, v)} is listed twice")
        g.add_edge(u, v, **attrs)
    routes: dict[tuple[int, int], tuple[Node, ...]] = {}
    for i, r in enumerate(_field(doc, "routes", list, "topology") if "routes" in doc else []):
        where = f"topology.routes[{i}]"
        if not isinstance(r, dict):
            raise TopologyError(f"{where}: must be an object")
        _only(r, ("src", "dst", "path"), where)
        s, d = _field(r, "src", int, where), _field(r, "dst", int, where)
        path = _field(r, "path", list, where)
        routes[(s, d)] = tuple(_node(n, f"{where}.path") for n in path)
    _set_caps(g, _field(doc, "switch_caps", dict, "topology") if "switch_caps" in doc else {}, "topology.switch_caps")
    return Topology(g, name, routes)


def _set_caps(g: nx.DiGraph, caps: Mapping[str, Any], where: str) -> None:
    """Optional: what switches compute (``sim.topology.switches``), by switch name."""
    from sim.topology.switches import caps_from_dict

    for name, doc in caps.items():
        if not isinstance(name, str) or name not in g:
            raise TopologyError(f"{where}: {name!r} is not a listed switch")
        g.nodes[name]["caps"] = caps_from_dict(doc, f"{where}.{name}")


def loads(text: str) -> Topology:
    """Parse ``collsched.topology/1`` JSON text."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise TopologyError(f"topology: not valid JSON ({e.msg} at line {e.lineno})") from None
    return from_dict(doc)


def _is_graphml(path: str | os.PathLike[str]) -> bool:
    return str(path).lower().endswith((".graphml", ".xml"))


def read_text(path: str | os.PathLike[str], what: str = "", *, limit: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of a topology, machine or placement file (at most ``limit`` bytes, whatever size the file
    reports); TopologyError naming the file otherwise."""
    try:
        return read_capped(path, limit, what, TopologyError).decode("utf-8")
    except UnicodeDecodeError:
        raise TopologyError(f"{what}{path}: not UTF-8 text") from None


def load(path: str | os.PathLike[str]) -> Topology:
    """Load a topology file: GraphML when the name ends in .graphml, else collsched.topology/1 JSON."""
    if _is_graphml(path):
        return _load_graphml(path, read_capped(path, MAX_FILE_BYTES, "topology file ", TopologyError))
    text = read_text(path)
    try:
        return loads(text)
    except TopologyError as e:
        raise TopologyError(f"{path}: {e}") from None


def as_file(topology: Topology, name: str = "my-topology.json") -> Topology:
    """``topology`` as a file no builder made gives it: every link and figure kept, the switches renamed
    ``sw-0``, ``sw-1``, ... in graph order, written out and read back under ``name``.

    Nothing of the preset's name survives (its spec, its family), so bounds and synthesis see what they see
    in a user's own file; the held-out checks of ``tests/sim/bounds`` and ``benchmarks/bench_synthesis.py``
    use it."""
    names = {s: f"sw-{k}" for k, s in enumerate(x for x in topology.graph.nodes if isinstance(x, str))}
    g = nx.DiGraph()
    for n, attrs in topology.graph.nodes(data=True):
        g.add_node(names.get(n, n), **attrs)
    for u, v, a in topology.graph.edges(data=True):
        g.add_edge(names.get(u, u), names.get(v, v), **a)
    return loads(dumps(Topology(g, name)))


def save(topology: Topology, path: str | os.PathLike[str]) -> None:
    """Write a topology file: GraphML when the name ends in .graphml, else collsched.topology/1 JSON."""
    if _is_graphml(path):
        g = nx.DiGraph(topology.graph)
        g.graph.update(format=FORMAT, name=topology.name, ranks=topology.ranks,
                       routes=json.dumps([[s, d, list(pth)] for (s, d), pth in sorted(topology.routes.items())]))
        caps = _caps_of(topology)
        for key, value in list(g.graph.items()):
            if isinstance(value, dict):  # a GPU preset's fabric and NCCL figures: GraphML holds text
                g.graph[key] = json.dumps(value)
        for n in g.nodes:
            g.nodes[n].pop("caps", None)
            g.nodes[n]["kind"] = "rank" if isinstance(n, int) else "switch"
        if caps:
            g.graph["switch_caps"] = json.dumps(caps)
        write_output(path, "\n".join(nx.generate_graphml(g)) + "\n", TopologyError)
    else:
        write_output(path, dumps(topology), TopologyError)


def _load_graphml(path: str | os.PathLike[str], data: bytes) -> Topology:
    try:
        raw = nx.parse_graphml(data)
    except Exception as e:  # networkx and ElementTree raise several unrelated types on bad XML
        raise TopologyError(f"{path}: not a GraphML topology ({e})") from None
    if not isinstance(raw, nx.DiGraph) or raw.is_multigraph():
        raise TopologyError(f"{path}: the GraphML graph must be directed and simple")
    rename: dict[Any, Node] = {}
    for n, attrs in raw.nodes(data=True):
        kind = attrs.get("kind", "rank" if re.fullmatch(r"[0-9]+", str(n)) else "switch")
        if kind == "rank":
            if not re.fullmatch(r"[0-9]+", str(n)):
                raise TopologyError(f"{path}: node {n!r} is marked as a rank but its id is not a number")
            rename[n] = int(n)
        elif kind == "switch":
            rename[n] = str(n)
        else:
            raise TopologyError(f"{path}: node {n!r} has unknown kind {kind!r} (rank or switch)")
    g = nx.DiGraph()
    g.add_nodes_from(sorted(v for v in rename.values() if isinstance(v, int)))
    g.add_nodes_from(v for v in rename.values() if isinstance(v, str))
    for u, v, attrs in raw.edges(data=True):
        g.add_edge(rename[u], rename[v], **{k: attrs[k] for k in ("bandwidth", "latency") if k in attrs})
    routes: dict[tuple[int, int], tuple[Node, ...]] = {}
    text = raw.graph.get("routes")
    if text:
        try:
            items = json.loads(text)
            for s, d, pth in items:
                routes[(int(s), int(d))] = tuple(pth)
        except (ValueError, TypeError):
            raise TopologyError(f"{path}: graph attribute 'routes' is not a JSON list of [src, dst, path]") from None
    try:
        caps = json.loads(raw.graph.get("switch_caps", "{}"))
    except ValueError:
        raise TopologyError(f"{path}: graph attribute 'switch_caps' is not JSON") from None
    try:
        if not isinstance(caps, dict):
            raise TopologyError("graph attribute 'switch_caps' must be a JSON object")
        _set_caps(g, caps, "switch_caps")
        return Topology(g, str(raw.graph.get("name", Path(path).stem)), routes)
    except TopologyError as e:
        raise TopologyError(f"{path}: {e}") from None
