"""The dataflow dependency graph of a schedule, and execution in any order it allows.

From the steps we derive, for every transfer T (numbered in program order):

- ``deps[T]``: transfers that must *complete* before T *starts*: the last
  writers of every slot T reads (read-after-write), and the last writers and
  the readers since then of every slot T writes (write-after-write,
  write-after-read), all from earlier steps;
- ``write_after[T]``: transfers of T's own step that read a slot T writes;
  they must have *started* (read their source) before T's write lands.

Execution model (the simulator's and the runner's): a transfer reads its
source when it starts and writes its destination when it ends (a reduce
combines with the destination's content at that moment). Any execution that
respects both relations ends in the lockstep state: ``execute_in_order``
runs one such execution with a caller-chosen interleaving, and
``differences`` compares it with lockstep.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx

from algorithms.ir import Kind, Op, Schedule, Transfer
from sim.verify.semantics import Content, SlotLayout, initial_state, write

__all__ = ["DataflowGraph", "Readiness", "dataflow_graph", "execute_in_order", "differences", "invert"]


@dataclass(frozen=True)
class DataflowGraph:
    """Dependencies between the transfers of a schedule, numbered in program order."""

    steps: tuple[int, ...]
    """Step of each transfer."""
    transfers: tuple[Transfer, ...]
    deps: tuple[tuple[int, ...], ...]
    write_after: tuple[tuple[int, ...], ...]

    def __len__(self) -> int:
        return len(self.transfers)

    def to_networkx(self) -> nx.DiGraph:
        """A DiGraph with an edge D -> T for each completion dependency (attribute ``kind="deps"``)
        and R -> T for each same-step read-before-write (``kind="write_after"``)."""
        g = nx.DiGraph()
        for t, tr in enumerate(self.transfers):
            g.add_node(t, step=self.steps[t], transfer=tr)
        for t, ds in enumerate(self.deps):
            g.add_edges_from(((d, t) for d in ds), kind="deps")
        for t, rs in enumerate(self.write_after):
            g.add_edges_from(((r, t) for r in rs), kind="write_after")
        return g


def dataflow_graph(schedule: Schedule, *, progress: bool = False) -> DataflowGraph:
    """Derive every transfer's dependencies from the step order (see the module docstring).

    ``progress``: a bar on stderr (when it is a terminal) for schedules of 20000 transfers or more; at
    p = 1024 the ring all-reduce's 2.1 M transfers take seconds. ``sim.engine.fast.dataflow_arrays``
    derives the same relations as numpy arrays, for tens of millions of transfers.
    """
    from sim.progress import bar

    with bar(schedule.num_transfers, unit="transfer", desc=f"{schedule.name} dependencies",
             enabled=progress and schedule.num_transfers >= 20000) as shown:
        return _dataflow_graph(schedule, shown)


def _dataflow_graph(schedule: Schedule, shown: Any) -> DataflowGraph:
    layout = SlotLayout(schedule)
    bases = layout.bases
    last_writers: dict[int, tuple[int, ...]] = {}
    readers: dict[int, list[int]] = {}
    steps: list[int] = []
    transfers: list[Transfer] = []
    deps: list[tuple[int, ...]] = []
    write_after: list[tuple[int, ...]] = []
    tid = 0
    empty: tuple[int, ...] = ()
    for si, step in enumerate(schedule.steps):
        step_reads: dict[int, list[int]] = {}
        step_writes: dict[int, list[int]] = {}
        for t in step.transfers:
            src = bases[t.src_buf][t.src] + t.src_index
            dst = bases[t.dst_buf][t.dst] + t.dst_index
            d: set[int] = set()
            for k in range(t.count):
                d.update(last_writers.get(src + k, empty))
                d.update(last_writers.get(dst + k, empty))
                d.update(readers.get(dst + k, empty))
                step_reads.setdefault(src + k, []).append(tid)
                step_writes.setdefault(dst + k, []).append(tid)
            steps.append(si)
            transfers.append(t)
            deps.append(tuple(sorted(d)))
            write_after.append(empty)
            tid += 1
        for slot, ws in step_writes.items():
            rs = step_reads.get(slot)
            if rs:
                for w in ws:
                    before = set(write_after[w])
                    before.update(r for r in rs if r != w)
                    write_after[w] = tuple(sorted(before))
        for slot, rs in step_reads.items():
            readers.setdefault(slot, []).extend(rs)
        for slot, ws in step_writes.items():
            last_writers[slot] = tuple(ws)
            readers.pop(slot, None)
        shown.update(len(step.transfers))
    return DataflowGraph(tuple(steps), tuple(transfers), tuple(deps), tuple(write_after))


Chooser = Callable[[Sequence[int]], int]
"""Picks the position, in a list of enabled events, of the one to run next."""


class Readiness:
    """Which transfers of a dataflow graph may start, and which may write, as others progress.

    The one bookkeeping of the dataflow rules, shared by ``execute_in_order``
    and the simulator's dataflow mode: T may *start* once every transfer in
    ``deps[T]`` has finished; T may *write* once it has arrived (its data is
    at the destination) and every transfer in ``write_after[T]`` has started.
    Each method returns the transfers it makes ready (an empty tuple when none).
    """

    __slots__ = ("arrived", "dependents", "unstarted_readers", "waiting", "write_waiters")

    def __init__(self, graph: DataflowGraph) -> None:
        n = len(graph)
        self.waiting = [len(d) for d in graph.deps]
        self.unstarted_readers = [len(w) for w in graph.write_after]
        self.dependents = invert(graph.deps, n)
        self.write_waiters = invert(graph.write_after, n)
        self.arrived = [False] * n

    def startable(self) -> list[int]:
        """The transfers with no dependencies, in program order."""
        return [t for t, w in enumerate(self.waiting) if w == 0]

    def start(self, t: int) -> list[int] | tuple[()]:
        """T has read its source: the arrived transfers that were waiting only for that and may now write."""
        ws = self.write_waiters[t]
        if not ws:
            return ()
        unstarted, arrived = self.unstarted_readers, self.arrived
        out = []
        for w in ws:
            unstarted[w] -= 1
            if unstarted[w] == 0 and arrived[w]:
                out.append(w)
        return out

    def arrive(self, t: int) -> bool:
        """T's data is at its destination: whether T may write now (else a later ``start`` releases it)."""
        self.arrived[t] = True
        return self.unstarted_readers[t] == 0

    def finish(self, t: int) -> list[int] | tuple[()]:
        """T has written: the transfers that may now start."""
        us = self.dependents[t]
        if not us:
            return ()
        waiting = self.waiting
        out = []
        for u in us:
            waiting[u] -= 1
            if waiting[u] == 0:
                out.append(u)
        return out


_NONE: tuple[int, ...] = ()


def invert(relation: Sequence[tuple[int, ...]], n: int) -> list[Sequence[int]]:
    """For each transfer, the transfers whose relation lists it (a shared empty tuple when none)."""
    lists: list[Any] = [_NONE] * n
    for j, items in enumerate(relation):
        for d in items:
            cur = lists[d]
            if cur is _NONE:
                lists[d] = [j]
            else:
                cur.append(j)
    return lists


def execute_in_order(
    schedule: Schedule, graph: DataflowGraph | None = None, choose: Chooser | None = None
) -> list[Content | None]:
    """Run the schedule event by event, in an interleaving chosen by ``choose``; the final state.

    Events are ``start(T)`` (snapshot T's source) and ``end(T)`` (write it by
    ``sim.verify.semantics.write``); ``choose`` picks among the enabled ones (default:
    uniformly at random, seeded 0). Violations such as races are not reported
    here: ``verify`` does.
    """
    g = graph if graph is not None else dataflow_graph(schedule)
    layout = SlotLayout(schedule)
    bases = layout.bases
    state = initial_state(layout)
    pick = choose if choose is not None else _seeded_chooser(0)
    idempotent = schedule.collective.kind is Kind.BARRIER
    n = len(g)
    ready = Readiness(g)
    # An enabled event: +t+1 = start T, -(t+1) = end T.
    enabled = [t + 1 for t in ready.startable()]
    snapshot: list[list[Content | None]] = [[] for _ in range(n)]
    while enabled:
        i = pick(enabled)
        ev = enabled[i]
        enabled[i] = enabled[-1]
        enabled.pop()
        t = abs(ev) - 1
        tr = g.transfers[t]
        if ev > 0:
            src = bases[tr.src_buf][tr.src] + tr.src_index
            snapshot[t] = state[src:src + tr.count]
            # Here a transfer arrives as it starts: only same-step readers hold its write back.
            if ready.arrive(t):
                enabled.append(-(t + 1))
            enabled.extend(-(w + 1) for w in ready.start(t))
            continue
        dst = bases[tr.dst_buf][tr.dst] + tr.dst_index
        write(state, dst, snapshot[t], tr.op is Op.COPY, idempotent)
        snapshot[t] = []
        enabled.extend(u + 1 for u in ready.finish(t))
    return state


def _seeded_chooser(seed: int) -> Chooser:
    rng = random.Random(seed)
    return lambda items: rng.randrange(len(items))


def differences(schedule: Schedule, choose: Chooser | None = None) -> list[int]:
    """Slots whose final content under a dataflow interleaving differs from lockstep (empty: agree)."""
    from sim.verify.verifier import execute

    lockstep, _bad, _layout = execute(schedule)
    flow = execute_in_order(schedule, choose=choose)
    return [s for s, (a, b) in enumerate(zip(lockstep, flow, strict=True)) if a != b]
