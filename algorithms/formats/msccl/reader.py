"""Reading MSCCL-IR into a collsched ``Schedule``: ``load_msccl``, ``loads_msccl``, ``to_schedule``.

Every matched send/receive pair (the k-th send on a (channel, sender, receiver)
connection meets the k-th receive) becomes one transfer; local ``cpy``/``re``
become local transfers; ``rrs`` (reduce and forward without storing) goes
through a fresh scratch slot. Each transfer is placed at the earliest lockstep
step consistent with every happens-before edge (thread-block order, ``depid``,
message matching) and with the lockstep rule that a step's reads see the state
at its start (``_Leveler``). Sends are buffered: a message carries the value its
sender read, staged through scratch when the source is overwritten before the
receiver takes it. docs/design.md ("MSCCL-IR mapping") describes the mapping in full.
"""

from __future__ import annotations

import os
from collections import deque

from algorithms.errors import ScheduleError
from algorithms.formats.msccl.execution import Graph, Mapper, build_graph, collective_sizes, describe, slot_key
from algorithms.formats.msccl.program import Program, parse_text, read_source
from algorithms.formats.schedule import MAX_FILE_BYTES
from algorithms.ir import Buf, Kind, Op, Schedule, Step, Transfer
from algorithms.registry import no_gc


def to_schedule(program: Program, *, inplace: bool | None = None, allow_custom: bool = False,
                name: str | None = None, order: list[tuple[int, ...]] | None = None) -> Schedule:
    """The collsched schedule of a parsed program (module docstring); ``ScheduleError`` if it cannot run.

    ``inplace``: interpret the program with NCCL's in-place aliasing (True) or
    with disjoint buffers (False); None picks what the file declares (both
    declared: in-place for allreduce, out-of-place otherwise). ``custom``
    programs have no postcondition: they import (as an allreduce-shaped
    schedule, for simulation only) when ``allow_custom`` is set. ``order``, when
    given, is filled with ``_Leveler.thread_block_order``: per transfer (program
    order), the transfers the file's thread-block order makes it wait for.
    """
    sz = collective_sizes(program)
    if sz.kind is None and not allow_custom:
        raise ScheduleError("algo: coll='custom' has no postcondition, so it cannot be verified or run as a "
                            "collective (simulate it: collsched simulate imports it for timing only)")
    gr, mapper, temp_next, _done, _gate = build_graph(program, sz, inplace)
    lev = _Leveler(gr, program, mapper, temp_next)
    lev.run()
    schedule = lev.assemble(name or program.name)
    if order is not None:
        order.extend(lev.thread_block_order())
    return schedule


class _Leveler:
    """Places every node at its lockstep level (module docstring), staging buffered sends where needed.

    Levels are 1-based (0: an ordering point before any transfer). A node comes
    at or after its happens-before predecessors, and after (in the next level)
    a predecessor that copied data (a thread block waiting for a copy or a plain
    receive starts once it landed), and after every earlier write of a slot it
    reads or writes, except that reductions into one slot may share a level (they
    commute, and a step may hold several). A send takes its value when its
    sender runs it; the message reads that value where it lies if nothing
    overwrites it before the message's level, else the value is first copied
    to a fresh scratch slot at the send's level and the message leaves from there.
    """

    def __init__(self, gr: Graph, program: Program, mapper: Mapper, temp_next: list[int]) -> None:
        self.gr = gr
        self.program = program
        self.mapper = mapper
        self.temp_next = temp_next
        self.level = [0] * len(gr.preds)
        # Slots are keyed by slot_key(rank, buffer, index).
        self.lw: dict[int, int] = {}  # level of the last write of a slot (absent: 0)
        self.lc: dict[int, int] = {}  # level of the last copy into it
        self.pending: dict[int, list[int]] = {}  # source slot -> captured messages that may be in flight
        self.bound: dict[int, int] = {}  # message in flight -> earliest level its value exists at
        self.overwritten: dict[int, int] = {}  # message in flight -> earliest level its source is overwritten
        self.staged: list[tuple[int, Transfer]] = []
        self.nodes: list[int] = []  # after assemble: the graph node of each transfer (-1: a staged/final copy)

    def run(self) -> None:
        gr = self.gr
        n = len(gr.preds)
        succ: list[list[int]] = [[] for _ in range(n)]
        indeg = [0] * n
        for v, ps in enumerate(gr.preds):
            indeg[v] = len(ps)
            for u in ps:
                succ[u].append(v)
        level = self.level
        lw, lc, pending, bound, overwritten = self.lw, self.lc, self.pending, self.bound, self.overwritten
        lr: dict[int, int] = {}  # level of the last read of a slot
        trans, preds, capture = gr.trans, gr.preds, gr.capture
        after = gr.after
        queue = deque(v for v in range(n) if indeg[v] == 0)
        seen = 0
        copy = Op.COPY
        key = slot_key
        while queue:
            v = queue.popleft()
            seen += 1
            lv = 0
            for u in preds[v]:
                x = level[u] + after.get((v, u), 0)
                if x > lv:
                    lv = x
            ts = trans[v]
            if ts:
                captured = bound.pop(v, None)
                if lv < 1:
                    lv = 1
                if captured is not None:
                    lv = max(lv, captured)
                for t in ts:
                    dk = key(t.dst, t.dst_buf, t.dst_index)
                    if captured is None:
                        sk = key(t.src, t.src_buf, t.src_index)
                        for k in range(t.count):
                            w = lw.get(sk + k, 0) + 1
                            if w > lv:
                                lv = w
                    for k in range(t.count):
                        if t.op is copy:
                            w = lw.get(dk + k, 0) + 1
                        else:
                            w = max(lc.get(dk + k, 0) + 1, lw.get(dk + k, 0))
                        w = max(w, lr.get(dk + k, 0))  # after reads already placed (they read the old value)
                        if w > lv:
                            lv = w
                if pending:
                    # Writes over the source of messages still in flight: at or after their value's level.
                    hit: list[int] = []
                    for t in ts:
                        dk = key(t.dst, t.dst_buf, t.dst_index)
                        for k in range(t.count):
                            waiting = pending.get(dk + k)
                            if waiting:
                                live = [m for m in waiting if m in bound]
                                if live:
                                    pending[dk + k] = live
                                    hit.extend(m for m in live if m != v)
                                else:
                                    del pending[dk + k]
                    for m in hit:
                        lv = max(lv, bound[m])
                    for m in hit:
                        overwritten[m] = min(overwritten.get(m, lv), lv)
                if captured is not None and v in overwritten and overwritten[v] < lv:
                    self._stage(v, captured)
                for t in trans[v]:
                    dk = key(t.dst, t.dst_buf, t.dst_index)
                    sk = key(t.src, t.src_buf, t.src_index)
                    for k in range(t.count):
                        lw[dk + k] = lv
                        if t.op is copy:
                            lc[dk + k] = lv
                        if lr.get(sk + k, 0) < lv:
                            lr[sk + k] = lv
            elif v in capture:
                m = capture[v]
                b = max(lv, 1)
                for t in trans[m]:
                    sk = key(t.src, t.src_buf, t.src_index)
                    for k in range(t.count):
                        b = max(b, lw.get(sk + k, 0) + 1)
                        pending.setdefault(sk + k, []).append(m)
                bound[m] = b
            level[v] = lv
            for w in succ[v]:
                indeg[w] -= 1
                if indeg[w] == 0:
                    queue.append(w)
        if seen < n:
            stuck = next(v for v in range(n) if indeg[v] > 0)
            raise ScheduleError(f"{describe(gr.origin[stuck], self.program)}: cyclic dependencies (thread-block "
                                "order, depid waits and send/receive matching form a cycle: the executor deadlocks)")

    def _stage(self, m: int, lv: int) -> None:
        """Copy message m's source to fresh scratch at level lv (when the send took it); m leaves from there."""
        moved: list[Transfer] = []
        for t in self.gr.trans[m]:
            base = self.temp_next[t.src]
            self.temp_next[t.src] += t.count
            self.staged.append((lv, Transfer(t.src, t.src, t.src_buf, t.src_index, Buf.SCRATCH, base, t.count,
                                             Op.COPY)))
            moved.append(t._replace(src_buf=Buf.SCRATCH, src_index=base))
        self.gr.trans[m] = moved

    def assemble(self, name: str) -> Schedule:
        level = self.level
        steps: list[list[Transfer]] = [[] for _ in range(max(level, default=0))]
        nodes: list[list[int]] = [[] for _ in steps]  # the graph node of each placed transfer (-1: none)
        placed = [(level[v], t, v) for v, ts in enumerate(self.gr.trans) for t in ts]
        placed += [(lv, t, -1) for lv, t in self.staged]
        placed += [(lv, t, -1) for lv, t in self._final_copies()]
        for lv, t, v in placed:
            while len(steps) < lv:
                steps.append([])
                nodes.append([])
            steps[lv - 1].append(t)
            nodes[lv - 1].append(v)
        self.nodes = [v for vs in nodes for v in vs]
        mapper = self.mapper
        if mapper.sz.kind is None:
            name = f"custom:{name}"
        return Schedule(mapper.coll, name, tuple(Step(tuple(s)) for s in steps if s), max(self.temp_next))

    def thread_block_order(self) -> list[tuple[int, ...]]:
        """Per transfer of the assembled schedule (program order): the transfers the file makes it wait for.

        A transfer waits for the transfers of the steps before it in its thread
        blocks and of the steps its ``depid`` waits name, through nops; a wait
        for a send is a wait for what that send waited for (the send itself is
        buffered). Staged and final copies wait for nothing extra.
        """
        gr = self.gr
        first: dict[int, list[int]] = {}
        for i, v in enumerate(self.nodes):
            if v >= 0:
                first.setdefault(v, []).append(i)
        memo: dict[int, frozenset[int]] = {}

        def ancestors(v: int) -> frozenset[int]:
            # Transfer nodes reachable backwards from v through nodes without transfers (iteratively).
            stack = [v]
            while stack:
                u = stack[-1]
                todo = [w for w in gr.preds[u] if not gr.trans[w] and w not in memo]
                if todo:
                    stack.extend(todo)
                    continue
                stack.pop()
                acc: set[int] = set()
                for w in gr.preds[u]:
                    if gr.trans[w]:
                        acc.add(w)
                    else:
                        acc |= memo[w]
                memo[u] = frozenset(acc)
            return memo[v]

        out: list[tuple[int, ...]] = []
        for v in self.nodes:
            if v < 0:
                out.append(())
                continue
            out.append(tuple(sorted(i for u in ancestors(v) for i in first.get(u, ()))))
        return out

    def _final_copies(self) -> list[tuple[int, Transfer]]:
        """Copies that put results where the collsched postcondition looks for them (aliased modes)."""
        mapper, sz, lw = self.mapper, self.mapper.sz, self.lw
        kind, p, part = sz.kind, sz.p, mapper.part
        out: list[tuple[int, Transfer]] = []

        def add(r: int, sb: Buf, si: int, db: Buf, di: int, n: int, lv: int = 0) -> None:
            sk, dk = slot_key(r, sb, si), slot_key(r, db, di)
            for k in range(n):
                lv = max(lv, lw.get(sk + k, 0) + 1, lw.get(dk + k, 0) + 1)
            out.append((lv, Transfer(r, r, sb, si, db, di, n, Op.COPY)))

        if kind is Kind.ALLREDUCE and mapper.o_base >= 0:
            # The result is in o (kept in scratch); every read of i must come first: after everything.
            last = max(self.level, default=0)
            for r in range(p):
                add(r, Buf.SCRATCH, mapper.o_base, Buf.INPUT, 0, sz.chunks, last + 1)
        elif mapper.inplace and kind is Kind.ALLGATHER:
            for r in range(p):
                add(r, Buf.INPUT, 0, Buf.OUTPUT, r * part, part)
        elif mapper.inplace and kind is Kind.REDUCESCATTER:
            for r in range(p):
                add(r, Buf.INPUT, r * part, Buf.OUTPUT, 0, part)
        elif mapper.inplace and kind is Kind.ALLTOALL:
            for r in range(p):
                add(r, Buf.INPUT, 0, Buf.OUTPUT, 0, mapper.in_size)
        return out


def loads_msccl(text: str | bytes, *, inplace: bool | None = None, allow_custom: bool = False) -> Schedule:
    """Import MSCCL-IR text or bytes (``to_schedule``)."""
    if len(text) > MAX_FILE_BYTES:
        raise ScheduleError(f"MSCCL-IR text is {len(text)} bytes, over the limit of {MAX_FILE_BYTES}")
    with no_gc():
        return to_schedule(parse_text(text), inplace=inplace, allow_custom=allow_custom)


def load_msccl(path_or_text: str | bytes | os.PathLike[str], *, inplace: bool | None = None,
               allow_custom: bool = False) -> Schedule:
    """Import an MSCCL-IR file (a path) or document (text starting with ``<``, or bytes) as a ``Schedule``.

    Every failure is a ``ScheduleError`` naming the gpu, thread block and step
    (and the file). See ``to_schedule`` for ``inplace`` and ``allow_custom``.
    """
    data, label = read_source(path_or_text)
    try:
        with no_gc():
            return to_schedule(parse_text(data), inplace=inplace, allow_custom=allow_custom)
    except ScheduleError as e:
        raise ScheduleError(f"{label}{e}") from None
