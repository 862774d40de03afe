"""Rank placement: which topology node each rank of a schedule runs on.

A placement is a permutation ``mapping`` of the topology's rank nodes: rank r
of the schedule runs on node ``mapping[r]``. ``place`` turns it into a new
topology whose rank r *is* that node, so the simulator needs no other change.
A placement FILE may also list fewer nodes than the topology has, for a
smaller schedule: the nodes it leaves out stay in the network as idle nodes
that only forward (``idle:N``, like switches).

Why it matters: on ``torus:4x4`` the ranks sit row-major, so a ring's step
from rank 3 to rank 4 crosses two links and the whole ring runs at half a
link's rate. The ``snake`` placement puts the ring on a cycle of the torus,
where every neighbour is one link away. ``stretched_pairs`` lists the pairs of
ranks that exchange data but sit further apart than that.

Placement SPECs (``placement``):

- ``identity``: rank r on node r.
- ``snake``: for a 2-D torus ``torus:RxC``, a Hamiltonian cycle of the torus
  (``snake_order``).
- a FILE: JSON, either ``{"format": "collsched.placement/1", "ranks": [n0, n1, ...]}``
  or the bare list ``[n0, n1, ...]``: entry r is the node of rank r. It must
  list every rank node of the topology (ints 0..p-1) exactly once, or, for
  a schedule of fewer ranks, that many distinct rank nodes.
"""

from __future__ import annotations

import json
import os
import re
from collections import deque
from collections.abc import Sequence

import networkx as nx
import numpy as np

from algorithms.ir import Schedule
from sim.topology.files import read_text
from sim.topology.graph import Node, Topology, TopologyError

__all__ = ["FORMAT", "PLACEMENT_FORMS", "place", "placement", "snake_order", "stretched_pairs"]

FORMAT = "collsched.placement/1"
PLACEMENT_FORMS = f"identity, snake (torus:RxC only), or a placement file ({FORMAT} JSON)"
MAX_FILE_BYTES = 16 * 1024 * 1024


def placement(spec: str, topology: Topology, ranks: int) -> tuple[Node, ...]:
    """The node of every rank, ``ranks`` of them, that SPEC names on ``topology`` (module docstring).

    ``ranks`` is the schedule's world size; it must equal the topology's rank
    count, since a placement is a permutation of the topology's ranks, except
    for a FILE, which may place fewer ranks on as many of the topology's nodes.
    Raises ``TopologyError`` naming the spec, the file or the offending entry.
    """
    if not isinstance(spec, str):
        raise TopologyError(f"placement must be a string ({PLACEMENT_FORMS}), got {spec!r}")
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise TopologyError(f"placement: ranks must be an integer >= 1, got {ranks!r}")
    if ranks > topology.ranks or (ranks < topology.ranks and spec in ("identity", "snake")):
        raise TopologyError(
            f"placement {spec!r}: the schedule has {ranks} ranks but topology {topology.name} has {topology.ranks}"
            + ("; a smaller schedule needs a placement file listing the nodes it runs on" if ranks < topology.ranks
               else ""))
    if spec == "identity":
        return tuple(range(ranks))
    if spec == "snake":
        m = re.fullmatch(r"torus:([0-9]+)x([0-9]+)(?:@.*)?", topology.name)  # per-dimension figures keep it 2-D
        if m is None:
            raise TopologyError(
                f"placement 'snake' needs a 2-D torus (torus:RxC), but topology {topology.name!r} is not one")
        rows, cols = int(m.group(1)), int(m.group(2))
        if rows * cols != topology.ranks:
            raise TopologyError(
                f"placement 'snake': topology {topology.name!r} has {topology.ranks} ranks, not {rows}x{cols}")
        order = snake_order(rows, cols)
        for a, b in zip(order, order[1:] + order[:1], strict=True):
            if a != b and not topology.graph.has_edge(a, b):
                raise TopologyError(
                    f"placement 'snake': topology {topology.name!r} lacks the torus link {a} -> {b}")
        return tuple(order)
    if not os.path.exists(spec):
        raise TopologyError(f"unknown placement {spec!r}: expected {PLACEMENT_FORMS}")
    return _load(spec, topology, ranks)


def snake_order(rows: int, cols: int) -> list[int]:
    """A Hamiltonian cycle of the rows x cols torus (rank = row·cols + col), as the list of ranks in cycle order.

    Guarantee: for every shape (rows, cols >= 1), consecutive entries, and
    the last and the first, are linked directly in ``torus(rows, cols)``.

    Construction: the cycle visits the rows one after another, each row
    whole, walking it from a start column to the right or to the left (using
    the row's wrap-around link where needed) and stepping down one row (the
    column link, wrapping from the last row to the first) where the row walk
    ends. A row walked to the right ends one column left of where it began,
    one walked to the left one column right, so the walk closes when
    (#rows walked right - #rows walked left) is a multiple of the column
    count. With an even number of rows that is 0: rows alternate direction,
    the plain boustrophedon ("snake"), which needs no wrap-around inside a
    row. With an even number of columns the same is done on the transpose
    (columns alternate). With both odd, on the orientation with rows >= cols,
    the first (rows+cols)/2 rows go right and the other (rows-cols)/2 left.
    """
    for v, what in ((rows, "rows"), (cols, "cols")):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise TopologyError(f"snake: {what} must be an integer >= 1, got {v!r}")
    transpose = rows % 2 == 1 and (cols % 2 == 0 or rows < cols)
    r, c = (cols, rows) if transpose else (rows, cols)
    if r % 2 == 0:
        right = [i % 2 == 0 for i in range(r)]
    else:  # both odd and r >= c: (r+c)/2 rows right, (r-c)/2 left, net c columns: the walk closes
        right = [i < (r + c) // 2 for i in range(r)]
    cells: list[tuple[int, int]] = []
    start = 0
    for i in range(r):
        step = 1 if right[i] else -1
        cells.extend((i, (start + step * j) % c) for j in range(c))
        start = (start + step * (c - 1)) % c
    return [j * cols + i if transpose else i * cols + j for i, j in cells]


def place(topology: Topology, mapping: Sequence[Node], *, name: str | None = None, partial: bool = False) -> Topology:
    """A copy of ``topology`` whose rank r is the old node ``mapping[r]``.

    ``mapping`` is a permutation of the rank nodes 0..p-1, or, with ``partial``, lists fewer
    of them (distinct): the new topology has that many ranks, and each node left
    out becomes the idle node ``idle:N`` that forwards like a switch (explicit
    routes from or to it are dropped). Switches keep their
    names, links their bandwidths and latencies, and explicit routes are
    relabelled with their endpoints. Routes computed by the router keep their
    hop counts and latencies (ties between equal routes may break differently).
    ``name`` defaults to the old name with `` (placed)``.
    """
    few = len(mapping) if partial and isinstance(mapping, Sequence) and not isinstance(mapping, str | bytes) \
        and 1 <= len(mapping) < topology.ranks else None
    new_rank: dict[int, Node] = {
        old: new for new, old in enumerate(_check_mapping(mapping, topology, "placement", few))}
    idle = {n for n in range(topology.ranks) if n not in new_rank}
    for n in sorted(idle):
        new_rank[n] = f"idle:{n}"
        if new_rank[n] in topology.graph:
            raise TopologyError(f"placement: node {n} stays idle, but {topology.name} already has a node 'idle:{n}'")

    def relabel(n: Node) -> Node:
        return new_rank[n] if isinstance(n, int) else n

    g = nx.DiGraph()
    # Ranks first in number order, then switches as before: the order Topology numbers its nodes in.
    g.add_nodes_from(range(topology.ranks - len(idle)))
    g.add_nodes_from((n, a) for n, a in topology.graph.nodes(data=True) if isinstance(n, str))  # caps kept
    g.add_nodes_from(f"idle:{n}" for n in sorted(idle))
    g.add_edges_from((relabel(u), relabel(v), dict(a)) for u, v, a in topology.graph.edges(data=True))
    routes = {(int(new_rank[s]), int(new_rank[d])): tuple(relabel(n) for n in path)
              for (s, d), path in topology.routes.items() if s not in idle and d not in idle}
    return Topology(g, name if name is not None else f"{topology.name} (placed)", routes)


def stretched_pairs(schedule: Schedule, topology: Topology, *,
                    baseline: int | None = None) -> list[tuple[int, int, int]]:
    """(src, dst, hops), sorted, for every pair of ranks that exchange data in ``schedule`` further apart than one hop.

    ``hops`` counts the links on the route a message from src to dst takes on
    ``topology`` (place it first to see a placement). One hop is ``baseline``
    links; by default the fewest links between any two ranks of the topology:
    1 where ranks are linked directly (ring, torus, full), 2 where every
    message crosses a switch (switch, cluster), so that a star does not
    report every pair. Pass ``baseline=1`` to count links literally.
    """
    if schedule.ranks != topology.ranks:
        raise TopologyError(
            f"topology {topology.name} has {topology.ranks} ranks but the schedule needs {schedule.ranks}")
    if baseline is None:
        baseline = _nearest_ranks(topology)
    elif isinstance(baseline, bool) or not isinstance(baseline, int) or baseline < 1:
        raise TopologyError(f"stretched_pairs: baseline must be an integer >= 1, got {baseline!r}")
    pairs = _remote_pairs(schedule)
    routes = topology.route_links_many(pairs)
    return [(s, d, len(routes[(s, d)][0])) for s, d in pairs if len(routes[(s, d)][0]) > baseline]


def _remote_pairs(schedule: Schedule) -> list[tuple[int, int]]:
    """Every (src, dst) with src != dst that some transfer connects, sorted; from the columns (no Transfer objects)."""
    c = schedule.columns()
    p = schedule.ranks
    remote = c.src != c.dst
    key = c.src[remote].astype(np.int64) * p + c.dst[remote]
    if p * p <= 1 << 26:
        used = np.zeros(p * p, dtype=bool)
        used[key] = True
        keys = np.flatnonzero(used)
    else:
        keys = np.unique(key)
    return [(k // p, k % p) for k in keys.tolist()]


def _nearest_ranks(topology: Topology) -> int:
    """Fewest links from a rank to another rank (breadth-first from every rank, cut at the best so far)."""
    g = topology.graph
    best = topology.graph.number_of_nodes()
    for r in range(topology.ranks):
        if best == 1:
            break
        seen = {r}
        frontier: deque[tuple[Node, int]] = deque([(r, 0)])
        while frontier:
            u, d = frontier.popleft()
            if d + 1 >= best:
                break
            for v in g.successors(u):
                if v in seen:
                    continue
                if isinstance(v, int):
                    best = d + 1
                    frontier.clear()
                    break
                seen.add(v)
                frontier.append((v, d + 1))
    return best if topology.ranks > 1 else 1


def _check_mapping(mapping: object, topology: Topology, where: str, ranks: int | None = None) -> tuple[int, ...]:
    """``mapping`` as rank nodes, checked: ``ranks`` of them (default: all the topology's), distinct."""
    p = topology.ranks
    if isinstance(mapping, str | bytes) or not isinstance(mapping, Sequence):
        raise TopologyError(f"{where}: expected a list of {p} rank nodes, got {type(mapping).__name__}")
    if ranks is not None and ranks != p:
        if len(mapping) != ranks:
            raise TopologyError(f"{where}: {len(mapping)} entries for a schedule of {ranks} ranks "
                                f"(on {ranks} of the {p} rank nodes of {topology.name})")
    elif len(mapping) != p:
        raise TopologyError(
            f"{where}: {len(mapping)} entries for the {p} ranks of {topology.name}; a placement lists every rank once")
    first: dict[int, int] = {}
    for r, node in enumerate(mapping):
        entry = f"{where}[{r}]"
        if isinstance(node, str):
            what = f"a switch of {topology.name}" if node in topology.graph else "an unknown node"
            raise TopologyError(f"{entry}: {node!r} is {what}, not a rank node (0..{p - 1})")
        if isinstance(node, bool) or not isinstance(node, int):
            raise TopologyError(f"{entry}: a rank node is an integer 0..{p - 1}, got {node!r}")
        if not 0 <= node < p:
            raise TopologyError(f"{entry}: unknown node {node} ({topology.name} has rank nodes 0..{p - 1})")
        if node in first:
            raise TopologyError(f"{entry}: node {node} is already placed at {where}[{first[node]}]; "
                                "a placement is a permutation")
        first[node] = r
    return tuple(first)


def _load(path: str, topology: Topology, count: int | None = None) -> tuple[Node, ...]:
    text = read_text(path, "placement file ", limit=MAX_FILE_BYTES)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise TopologyError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    if isinstance(doc, dict):
        extra = sorted(set(doc) - {"format", "ranks"})
        if extra:
            raise TopologyError(f"{path}: unknown field {extra[0]!r} (expected 'format' and 'ranks')")
        if doc.get("format") != FORMAT:
            raise TopologyError(f"{path}: format: expected {FORMAT!r}, got {doc.get('format')!r}")
        if "ranks" not in doc:
            raise TopologyError(f"{path}: missing field 'ranks'")
        ranks, where = doc["ranks"], "ranks"
    elif isinstance(doc, list):
        ranks, where = doc, "entry"
    else:
        raise TopologyError(f"{path}: a placement is a JSON list of nodes or a {FORMAT} object, "
                            f"got a JSON {type(doc).__name__}")
    if not isinstance(ranks, list):
        raise TopologyError(f"{path}: ranks: expected a list of nodes, got {type(ranks).__name__}")
    try:
        return _check_mapping(ranks, topology, where, count)
    except TopologyError as e:
        raise TopologyError(f"{path}: {e}") from None
