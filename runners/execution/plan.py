"""One rank's share of a schedule, compiled for execution: what it sends, receives and computes, and when.

``rank_plan(schedule, rank)`` walks the dataflow graph (sim.verify.dataflow) and keeps
the transfers that involve ``rank``. Every dependency of a transfer T involves
T's source rank (a write to T's source slot) or T's destination rank (a write
to, or a read of, T's destination slot), so each side of T can enforce its own
half of T's dependencies from what it observes locally:

- a **send** (T.src is this rank) is posted once the local transfers it depends on are done;
- a **receive** lands in its destination once the local transfers it depends on
  are done, and once the same-step transfers that read the destination have read it;
- a **local** transfer (src == dst) does both.

A receive goes straight into its destination (*direct*) when it is a copy and
no transfer of its step reads the destination; otherwise (a reduce, or a
same-step read such as a pairwise exchange) it is received into a *staging*
buffer first and applied later, so that posting it never waits on anything.
Staged receives are posted in program order within a budget of
``2 x (the most chunks this rank stages in any one step)``: that bound is what
makes the execution deadlock-free (every staged receive of the earliest
unfinished step fits once the earlier steps are done) while letting the next
step's receives be posted early.

This module never imports torch; runners.execution.runner executes the plan.
"""

from __future__ import annotations

import zlib
from collections import OrderedDict
from dataclasses import dataclass
from enum import IntEnum

from algorithms.ir import Buf, Kind, Op, Schedule, Transfer
from sim.verify.dataflow import dataflow_graph, invert

__all__ = ["Item", "RankPlan", "Role", "fingerprint", "rank_plan", "step_race"]


class Role(IntEnum):
    """What this rank does for one transfer."""

    SEND = 0
    RECV = 1
    LOCAL = 2


@dataclass(frozen=True, slots=True)
class Item:
    """One transfer as seen by one rank; dependencies are indices into ``RankPlan.items``."""

    tid: int
    step: int
    index: int
    """Position of the transfer within its step."""
    transfer: Transfer
    role: Role
    staged: bool
    """Receive (or local op) into a staging buffer first, then apply."""
    peer: int
    """The other rank (this rank for a local transfer)."""
    deps: tuple[int, ...]
    after: tuple[int, ...]
    """Same-step items that read this item's destination and must have read it before it is written."""

    def describe(self) -> str:
        """``step 3 transfer 2 (1.input[4:5] += 0.input[4:5])``."""
        return f"step {self.step} transfer {self.index} ({self.transfer!r})"


@dataclass(frozen=True)
class RankPlan:
    """The items of one rank in program order, with the reverse edges the executor needs."""

    schedule: Schedule
    rank: int
    items: tuple[Item, ...]
    dependents: tuple[tuple[int, ...], ...]
    """For each item, the items that list it in ``deps``."""
    readers_of: tuple[tuple[int, ...], ...]
    """For each item, the items that list it in ``after``."""
    staged_recvs: tuple[int, ...]
    """Staged receives in program order: the order they are posted in."""
    budget_chunks: int
    """Most chunks of staged receives in flight at once (see the module docstring)."""
    max_local_staged_chunks: int
    """Most chunks of staged local transfers in one step (their snapshots are not budgeted)."""
    writes_input: bool
    """Whether any transfer writes this rank's input buffer."""
    fingerprint: int
    """A checksum of the whole schedule, equal on every rank that holds the same schedule."""
    race: str | None = None
    """``step_race(schedule)``: the same on every rank, so every rank refuses such a schedule alike."""


def fingerprint(schedule: Schedule) -> int:
    """A 31-bit CRC of the schedule's collective, name, scratch and transfers (same on every process)."""
    coll = schedule.collective
    crc = zlib.crc32(f"{coll.kind.value}|{coll.ranks}|{coll.chunks}|{coll.root}|{schedule.name}|"
                     f"{schedule.scratch_chunks}".encode())
    bufs = {Buf.INPUT: 0, Buf.OUTPUT: 1, Buf.SCRATCH: 2}
    for si, step in enumerate(schedule.steps):
        flat = [si]
        for t in step.transfers:
            flat.extend((t.src, t.dst, bufs[t.src_buf], t.src_index, bufs[t.dst_buf], t.dst_index, t.count,
                         t.op is Op.REDUCE))
        crc = zlib.crc32(repr(flat).encode(), crc)
    return crc & 0x7FFFFFFF


def step_race(schedule: Schedule) -> str | None:
    """The first slot that one step writes twice with a copy among the writes, described; None if none.

    A step's writes land concurrently (one group of receives in flight at once,
    or dataflow order), so two writes of one slot in one step are only defined
    when all of them are reduces (⊕ commutes). The verifier calls the other case
    a race; an unverified schedule may hold one, and the runner refuses it before
    any data moves rather than let the outcome depend on arrival order. Barrier
    tokens are idempotent unions: they never race.
    """
    if schedule.collective.kind is Kind.BARRIER:
        return None
    for si, step in enumerate(schedule.steps):
        by_buffer: dict[tuple[int, Buf], list[tuple[int, int, bool, int]]] = {}
        for ti, t in enumerate(step.transfers):
            by_buffer.setdefault((t.dst, t.dst_buf), []).append(
                (t.dst_index, t.dst_index + t.count, t.op is Op.COPY, ti))
        for (rank, buf), writes in by_buffer.items():
            if len(writes) < 2:
                continue
            writes.sort()
            # Sweep: the open write reaching furthest, and the furthest-reaching open copy.
            end, end_ti = writes[0][1], writes[0][3]
            copy_end, copy_ti = (writes[0][1], writes[0][3]) if writes[0][2] else (-1, -1)
            for start, stop, is_copy, ti in writes[1:]:
                other = copy_ti if copy_end > start else (end_ti if is_copy and end > start else -1)
                if other >= 0:
                    a, b = sorted((other, ti))
                    return (f"step {si}: transfers {a} ({step.transfers[a]!r}) and {b} ({step.transfers[b]!r}) "
                            f"both write rank {rank} {buf} chunk {max(start, step.transfers[other].dst_index)}, "
                            "and one of them is a copy (a race: the result would depend on arrival order)")
                if stop > end:
                    end, end_ti = stop, ti
                if is_copy and stop > copy_end:
                    copy_end, copy_ti = stop, ti
    return None


def _compile(schedule: Schedule, rank: int) -> RankPlan:
    graph = dataflow_graph(schedule)
    local: dict[int, int] = {}
    tids: list[int] = []
    for tid, t in enumerate(graph.transfers):
        if t.src == rank or t.dst == rank:
            local[tid] = len(tids)
            tids.append(tid)
    index_in_step: list[int] = []
    for step in schedule.steps:
        index_in_step.extend(range(len(step.transfers)))
    items: list[Item] = []
    for tid in tids:
        t = graph.transfers[tid]
        after = tuple(local[r] for r in graph.write_after[tid] if r in local) if t.dst == rank else ()
        if t.src == t.dst:
            role, peer, staged = Role.LOCAL, rank, bool(after)
        elif t.src == rank:
            role, peer, staged, after = Role.SEND, t.dst, False, ()
        else:
            role, peer, staged = Role.RECV, t.src, t.op is Op.REDUCE or bool(after)
        deps = tuple(local[d] for d in graph.deps[tid] if d in local)
        items.append(Item(tid, graph.steps[tid], index_in_step[tid], t, role, staged, peer, deps, after))
    per_step: dict[int, int] = {}
    local_per_step: dict[int, int] = {}
    staged_recvs: list[int] = []
    for i, it in enumerate(items):
        if it.staged and it.role is Role.RECV:
            staged_recvs.append(i)
            per_step[it.step] = per_step.get(it.step, 0) + it.transfer.count
        elif it.staged:
            local_per_step[it.step] = local_per_step.get(it.step, 0) + it.transfer.count
    step_max = max(per_step.values(), default=0)
    total = sum(per_step.values())
    writes_input = any(it.transfer.dst_buf is Buf.INPUT and it.transfer.dst == rank for it in items)
    return RankPlan(
        schedule, rank, tuple(items),
        tuple(tuple(d) for d in invert([it.deps for it in items], len(items))),
        tuple(tuple(r) for r in invert([it.after for it in items], len(items))),
        tuple(staged_recvs), min(total, 2 * step_max), max(local_per_step.values(), default=0),
        writes_input or schedule.collective.kind is Kind.BARRIER, fingerprint(schedule), step_race(schedule),
    )


_CACHE: OrderedDict[tuple[int, int], RankPlan] = OrderedDict()
_CACHE_SIZE = 32


def rank_plan(schedule: Schedule, rank: int) -> RankPlan:
    """The compiled plan of ``rank`` for ``schedule`` (cached: a runner calls this on every run)."""
    key = (id(schedule), rank)
    plan = _CACHE.get(key)
    # The plan holds the schedule, so its id cannot be reused while the entry lives.
    if plan is not None and plan.schedule is schedule:
        _CACHE.move_to_end(key)
        return plan
    plan = _compile(schedule, rank)
    _CACHE[key] = plan
    if len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return plan
