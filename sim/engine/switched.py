"""Simulating switch operations (multicast, in-switch reduction) on both engines, by lowering them to flows.

A ``SwitchOp`` performed by switch ``sw`` is run as the flows it causes:

- an *up leg* per source: its chunks cross the source rank's link up to ``sw``
  once, then the switch's intake (a link ``sw -> in(sw)`` whose capacity is the
  switch's per-port rate times its ports: reductions take the switch's stated
  bandwidth);
- a *down leg* per target: the result leaves through the switch's output (a
  link ``out(sw) -> sw`` of the same capacity, with the operation's latency)
  and crosses the target's link down once.

``in(sw)`` and ``out(sw)`` are extra rank nodes of an *augmented* topology
that only switch operations use (every pair the schedule's transfers use keeps
its route of the real topology). The switch streams: an operation's up and
down legs run at the same time (cut-through, as NVLS and SHARP do), so in
lockstep they share the operation's step. In dataflow mode the down legs must
not start before every source is ready; a *gate* per source (a copy to
``out(sw)`` over a link of unbounded rate, no latency) and one local copy at
``out(sw)`` gathering the gates carry exactly those dependencies, in two extra
steps before the operation's own. Every flow shares links max-min fairly
with every other, as transfers do; the augmented schedule runs on whichever
engine ``sim.engine.reference.simulate`` picks (``lower``, then ``lift``). Its
verdict is the symbolic verifier's on the real schedule.

The result's per-transfer arrays are the real transfers'; ``switch_spans``
holds each operation's (first leg's start, last leg's end).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import networkx as nx
import numpy as np

from algorithms.builder import ScheduleBuilder
from algorithms.ir import Buf, Collective, Schedule, switch_ops_by_step
from sim.topology.graph import Node, Topology
from sim.topology.switches import check_schedule

__all__ = ["GATE_BANDWIDTH", "Lowered", "lift", "lower"]

GATE_BANDWIDTH = 1e18
"""Bytes/s of the gate links: they carry dependencies, not data (1 GB in 1 ns)."""


@dataclass(frozen=True)
class Lowered:
    """The augmented schedule and topology, and where the real transfers and each op's legs went."""

    schedule: Schedule
    topology: Topology
    transfers: np.ndarray
    """Aug index of every real transfer, in program order."""
    legs: tuple[tuple[int, ...], ...]
    """Aug indices of each switch op's up and down legs."""
    proxies: frozenset[int]


def _ports(g: nx.DiGraph, sw: Node) -> int:
    return sum(1 for n in g.successors(sw) if isinstance(n, int) and g.has_edge(n, sw))


def lower(schedule: Schedule, topology: Topology, *, gates: bool) -> Lowered:
    """The augmented schedule and topology of the module docstring (``gates``: dataflow mode's dependencies)."""
    resolved = check_schedule(schedule, topology)
    p = schedule.ranks
    used: dict[str, int] = {}
    for sw, _caps in resolved:
        used.setdefault(sw, len(used))
    g = nx.DiGraph(topology.graph)

    def pin(j: int) -> int:
        return p + 3 * j

    def pout(j: int) -> int:
        return p + 3 * j + 1

    def hub(j: int) -> int:
        return p + 3 * j + 2

    for sw, j in used.items():
        caps = next(c for s, c in resolved if s == sw)
        agg = caps.bandwidth * max(1, _ports(g, sw))
        g.add_edge(sw, pin(j), bandwidth=agg, latency=0.0)
        g.add_edge(pin(j), sw, bandwidth=agg, latency=0.0)
        # Cut-through: the result's first byte leaves once the contributions' first bytes are in, so the
        # output also waits the slowest way in (no op beats a path's latency, as the bounds assume).
        late = caps.latency + max((float(g.edges[u, sw]["latency"]) for u in g.predecessors(sw)), default=0.0)
        g.add_edge(pout(j), sw, bandwidth=agg, latency=late)
        g.add_edge(sw, pout(j), bandwidth=agg, latency=late)
        g.add_edge(hub(j), pout(j), bandwidth=GATE_BANDWIDTH, latency=0.0)
        g.add_edge(pout(j), hub(j), bandwidth=GATE_BANDWIDTH, latency=0.0)
    # Scratch of each op on each proxy and source rank: every op its own (no false dependencies between ops).
    nxt: dict[int, int] = {}

    def take(rank: int, n: int) -> int:
        at = nxt.get(rank, schedule.scratch_chunks if rank < p else 0)
        nxt[rank] = at + n
        return at

    cols = schedule.columns()
    # One shortest-path tree per destination, not per pair (a 2,048-GPU NVLS-tree's 18,000 pairs built 7,000).
    routes: dict[tuple[int, int], tuple[Node, ...]] = topology.route_many(
        {(int(a), int(b_)) for a, b_ in zip(cols.src.tolist(), cols.dst.tolist(), strict=True) if a != b_})
    places: list[dict[str, Any]] = []
    for op, (sw, _caps) in zip(schedule.switch_ops, resolved, strict=True):
        j, n = used[sw], op.count
        here: dict[str, Any] = {"j": j, "pin": take(pin(j), n * len(op.sources)), "pout": take(pout(j), n)}
        if gates:
            width = n * (len(op.sources) + len(op.targets))
            here["hub"] = take(hub(j), 2 * width)
            here["go"] = [take(e.rank, n) for e in op.sources]
            here["done"] = take(hub(j), n * len(op.sources))
            if not g.has_edge(pin(j), hub(j)):
                g.add_edge(pin(j), hub(j), bandwidth=GATE_BANDWIDTH, latency=0.0)
            routes[(pin(j), hub(j))] = (pin(j), hub(j))
            for r in op.ranks():
                for a, b_ in ((r, hub(j)), (hub(j), r)):
                    if not g.has_edge(a, b_):
                        g.add_edge(a, b_, bandwidth=GATE_BANDWIDTH, latency=0.0)
                    routes[(a, b_)] = (a, b_)
            routes[(hub(j), pout(j))] = (hub(j), pout(j))
        for e in op.sources:
            routes[(e.rank, pin(j))] = (e.rank, sw, pin(j))
        for e in op.targets:
            routes[(pout(j), e.rank)] = (pout(j), sw, e.rank)
        places.append(here)
    aug_topology = Topology(g, topology.name, routes)

    c = schedule.collective
    b = ScheduleBuilder(Collective(c.kind, p + 3 * len(used), c.chunks, c.root), schedule.name,
                        scratch_chunks=max([schedule.scratch_chunks, *nxt.values()]))
    by_step = switch_ops_by_step(schedule)
    index = {id(op): k for k, op in enumerate(schedule.switch_ops)}
    real: list[int] = []
    legs: list[list[int]] = [[] for _ in schedule.switch_ops]
    count = [0]

    def add(fn: Any, *args: Any, **kwargs: Any) -> int:
        fn(*args, **kwargs)
        count[0] += 1
        return count[0] - 1

    sc = Buf.SCRATCH
    for si, step in enumerate(schedule.steps):
        ops = [(index[id(op)], op, places[index[id(op)]]) for op in by_step[si]]
        if ops and gates:
            # 1: sources report to the hub; targets claim their slots (a local copy: waits for their readers).
            with b.step():
                for _k, op, at in ops:
                    n, h = op.count, hub(at["j"])
                    for s, e in enumerate(op.sources):
                        add(b.copy, e.rank, h, e.index, n, buf=e.buf, dst_index=at["hub"] + s * n, dst_buf=sc)
                    for e in op.targets:
                        add(b.copy, e.rank, e.rank, e.index, n, buf=e.buf)
            with b.step():  # 2: claimed targets report to the hub
                for _k, op, at in ops:
                    n, h = op.count, hub(at["j"])
                    for i, e in enumerate(op.targets):
                        add(b.copy, e.rank, h, e.index, n, buf=e.buf,
                            dst_index=at["hub"] + (len(op.sources) + i) * n, dst_buf=sc)
            with b.step():  # 3: the hub gathers the reports of each op
                for _k, op, at in ops:
                    width = op.count * (len(op.sources) + len(op.targets))
                    add(b.copy, hub(at["j"]), hub(at["j"]), at["hub"], width, buf=sc, dst_index=at["hub"] + width)
            with b.step():  # 4: go: to every source (its up leg reads the go) and to the switch's output
                for _k, op, at in ops:
                    n, h = op.count, hub(at["j"])
                    width = n * (len(op.sources) + len(op.targets))
                    for s, e in enumerate(op.sources):
                        add(b.copy, h, e.rank, at["hub"] + width, n, buf=sc, dst_index=at["go"][s])
                    add(b.copy, h, pout(at["j"]), at["hub"] + width, n, buf=sc, dst_index=at["pout"])
        with b.step():
            for t in step.transfers:
                real.append(add(b.add, t))
            for k, op, at in ops:
                n, j = op.count, at["j"]
                for s, e in enumerate(op.sources):
                    if gates:
                        legs[k].append(add(b.copy, e.rank, pin(j), at["go"][s], n, buf=sc,
                                           dst_index=at["pin"] + s * n))
                    else:
                        legs[k].append(add(b.copy, e.rank, pin(j), e.index, n, buf=e.buf,
                                           dst_index=at["pin"] + s * n, dst_buf=sc))
                for e in op.targets:
                    legs[k].append(add(b.copy, pout(j), e.rank, at["pout"], n, buf=sc, dst_index=e.index,
                                       dst_buf=e.buf))
        if ops and gates:
            # 5, 6: done when every leg is: the up legs' intake goes to the hub, which then writes every end of
            # the op, so that what reads or writes them next waits for the whole operation (not its down legs).
            with b.step():
                for _k, op, at in ops:
                    n, j = op.count, at["j"]
                    add(b.copy, pin(j), hub(j), at["pin"], n * len(op.sources), buf=sc, dst_index=at["done"],
                        dst_buf=sc)
            with b.step():
                for _k, op, at in ops:
                    for e in dict.fromkeys((*op.sources, *op.targets)):
                        add(b.copy, hub(at["j"]), e.rank, at["done"], op.count, buf=sc, dst_index=e.index,
                            dst_buf=e.buf)
    proxies = frozenset(range(p, p + 3 * len(used)))
    return Lowered(b.build(), aug_topology, np.array(real, dtype=np.int64), tuple(tuple(x) for x in legs), proxies)


def lift(got: Any, low: Lowered, schedule: Schedule, topology: Topology, size: float, chunk: float) -> Any:
    """The augmented run's ``SimResult`` as the real schedule's: its transfers' times, the real links' busy
    times, each op's span, and the symbolic verifier's verdict on the real schedule."""
    from sim.verify.verifier import verify

    def pick(a: np.ndarray) -> np.ndarray:
        out = a[low.transfers] if len(low.transfers) else np.zeros(0)
        out.flags.writeable = False
        return out

    spans = tuple((float(got.start[list(ls)].min()), float(got.end[list(ls)].max())) for ls in low.legs)
    busy = {k: v for k, v in got.link_busy.items() if not any(isinstance(x, int) and x in low.proxies for x in k)}
    time = max([0.0, *(e for _s, e in spans if not math.isnan(e)),
                *(float(x) for x in got.end[low.transfers] if not math.isnan(x))])
    return replace(got, schedule=schedule, topology=topology, size=size, chunk_bytes=chunk, time=time,
                   start=pick(got.start), send_start=pick(got.send_start), send_end=pick(got.send_end),
                   end=pick(got.end), link_busy=busy, violations=verify(schedule).violations,
                   switch_spans=spans)
