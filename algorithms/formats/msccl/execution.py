"""Executing an MSCCL-IR program and its happens-before graph: the machinery the reader and the check share.

``execute_program`` runs the thread blocks as the runtime would (optionally with
its bounded buffering) and matches every receive with the send it meets (the
k-th send on a (channel, sender, receiver) connection meets the k-th receive);
``build_graph`` turns a program into happens-before nodes carrying collsched
transfers, with ``Mapper`` mapping MSCCL buffers (``i``, ``o``, ``s``) onto
collsched slots under NCCL's in-place aliasing or with disjoint buffers.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from algorithms.errors import ScheduleError
from algorithms.formats.msccl.program import (
    COLLS,
    EXECUTOR_COLLS,
    STEP_TYPES,
    Program,
    ProgramGpu,
    ProgramStep,
    ProgramTb,
)
from algorithms.ir import Buf, Collective, Kind, Op, Transfer

_WIDE = frozenset({Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLTOALL})  # m = N in FORMAT.md


@dataclass(frozen=True, slots=True)
class Sizes:
    kind: Kind | None
    p: int
    chunks: int  # collsched C
    i: int  # MSCCL buffer sizes in MSCCL chunks
    o: int


def collective_sizes(program: Program) -> Sizes:
    coll = program.coll
    if coll not in COLLS:
        known = ", ".join(sorted({k for k in COLLS if k != "reduce_scatter"}))
        if coll in EXECUTOR_COLLS:
            raise ScheduleError(f"algo: coll={coll!r} has no counterpart collsched can import (it imports {known})")
        raise ScheduleError(f"algo: unknown coll {coll!r} (collsched imports {known})")
    kind = COLLS[coll]
    n, c = program.ngpus, program.chunks
    if kind in _WIDE:
        if c % n:
            raise ScheduleError(f"algo: nchunksperloop={c} is not a multiple of ngpus={n}, as {coll} needs")
        part = c // n
        i = part if kind is Kind.ALLGATHER else c
        o = part if kind is Kind.REDUCESCATTER else c
        return Sizes(kind, n, part, i, o)
    if kind is None:  # custom: sizes are whatever the gpus declare
        i = max([c] + [g.i_chunks for g in program.gpus.values()])
        o = max([c] + [g.o_chunks for g in program.gpus.values()])
        return Sizes(None, n, max(i, o), i, o)
    return Sizes(kind, n, c, c, c)


class Mapper:
    """Maps (rank, MSCCL buffer, offset) onto collsched slots, per aliasing mode (module docstring)."""

    def __init__(self, sz: Sizes, inplace: bool, scratch: int) -> None:
        self.sz = sz
        self.inplace = inplace
        kind = sz.kind
        self.coll = Collective(kind or Kind.ALLREDUCE, sz.p, sz.chunks)
        self.in_size = self.coll.input_chunks(0)
        self.out_size = 0 if self.coll.in_place else self.coll.output_chunks(0)
        # Allreduce (and custom) run out-of-place keep MSCCL's o in scratch, after the declared scratch.
        self.o_base = scratch if (kind in (Kind.ALLREDUCE, None) and not inplace) else -1
        self.scratch_base = scratch + (sz.o if self.o_base >= 0 else 0)  # first temporary slot
        self.part = sz.chunks if kind in _WIDE else 0
        # Every buffer maps onto one collsched buffer at a fixed offset, except in-place allgather/reducescatter.
        self.affine = not (inplace and kind in (Kind.ALLGATHER, Kind.REDUCESCATTER))

    def chunk(self, rank: int, b: str, off: int) -> tuple[Buf, int]:
        kind = self.sz.kind
        if b == "s":
            return Buf.SCRATCH, off
        if kind in (Kind.ALLREDUCE, None):
            if b == "i" or self.inplace:
                return Buf.INPUT, off
            return Buf.SCRATCH, self.o_base + off
        if not self.inplace:
            return (Buf.INPUT if b == "i" else Buf.OUTPUT), off
        part = self.part
        if kind is Kind.ALLGATHER:  # i[j] is o[r·P + j]
            if b == "i":
                return Buf.INPUT, off
            return (Buf.INPUT, off - rank * part) if rank * part <= off < (rank + 1) * part else (Buf.OUTPUT, off)
        if kind is Kind.REDUCESCATTER:  # o[j] is i[r·P + j]
            return (Buf.INPUT, off) if b == "i" else (Buf.INPUT, rank * part + off)
        return Buf.INPUT, off  # alltoall: i is o

    def segments(self, rank: int, b: str, off: int, cnt: int) -> list[tuple[Buf, int, int]]:
        """The range as maximal runs of (buffer, index, length) in collsched slots."""
        if self.affine:
            buf, idx = self.chunk(rank, b, off)
            return [(buf, idx, cnt)]
        out: list[tuple[Buf, int, int]] = []
        for k in range(cnt):
            buf, idx = self.chunk(rank, b, off + k)
            if out and out[-1][0] is buf and out[-1][1] + out[-1][2] == idx:
                out[-1] = (buf, out[-1][1], out[-1][2] + 1)
            else:
                out.append((buf, idx, 1))
        return out

    def size(self, gpu: ProgramGpu, b: str) -> int:
        """Chunks a gpu's MSCCL buffer holds: the collective's size (custom: as declared)."""
        if b == "s":
            return gpu.s_chunks
        if self.sz.kind is None:
            return gpu.i_chunks if b == "i" else gpu.o_chunks
        return self.sz.i if b == "i" else self.sz.o


def _transfers(mapper: Mapper, src: int, sb: str, so: int, dst: int, db: str, do: int, cnt: int,
               op: Op) -> list[Transfer]:
    """Transfers moving cnt MSCCL chunks, split where the collsched slots stop being contiguous."""
    a = mapper.segments(src, sb, so, cnt)
    b = mapper.segments(dst, db, do, cnt)
    if len(a) == 1 and len(b) == 1:
        if src == dst and a[0][:2] == b[0][:2] and op is Op.COPY:
            return []  # a copy onto itself (an aliased in-place copy): no effect
        return [Transfer(src, dst, a[0][0], a[0][1], b[0][0], b[0][1], cnt, op)]
    out: list[Transfer] = []
    ia = ib = 0
    ua = ub = 0  # chunks used of a[ia], b[ib]
    while ia < len(a):
        n = min(a[ia][2] - ua, b[ib][2] - ub)
        t = Transfer(src, dst, a[ia][0], a[ia][1] + ua, b[ib][0], b[ib][1] + ub, n, op)
        if not (src == dst and t.src_buf is t.dst_buf and t.src_index == t.dst_index and op is Op.COPY):
            out.append(t)
        ua += n
        ub += n
        if ua == a[ia][2]:
            ia, ua = ia + 1, 0
        if ub == b[ib][2]:
            ib, ub = ib + 1, 0
    return out


def _mode(program: Program, sz: Sizes, inplace: bool | None) -> bool:
    """In-place (True) or out-of-place: as asked, else as declared (MSCCLang writes only ``inplace``)."""
    if inplace is not None:
        return inplace
    if sz.kind is None:
        return False  # custom: no aliasing is defined, so i, o and s are three buffers
    decl_in, decl_out = program.flag("inplace"), program.flag("outofplace")
    in_ok = bool(decl_in)
    out_ok = decl_out if decl_out is not None else decl_in is False
    if not in_ok and not out_ok:
        raise ScheduleError("algo: declares neither inplace=1 nor outofplace=1; pass inplace=True or False")
    if sz.kind in (Kind.ALLREDUCE, None):
        return in_ok
    return not out_ok


StepRef = tuple[int, int, int]  # gpu, tb, position


def describe(ref: StepRef, program: Program) -> str:
    g, t, k = ref
    step = program.gpus[g].tbs[t].steps[k]
    return f"gpu {g} tb {t} step {k} ({step.type}, line {step.line})"


def dep_target(program: Program, gpu: ProgramGpu, tb: ProgramTb, k: int,
                flags: dict[tuple[int, int], list[int]]) -> int | None:
    """Position of the step in tb ``depid`` whose completion releases step k's wait; None when it has none.

    ``ScheduleError`` when the wait can never be released (no such tb, or no
    non-nop hasdep step at or after ``deps``).
    """
    st = tb.steps[k]
    if st.depid < 0 or st.deps < 0:
        return None
    ref = (gpu.id, tb.id, k)
    if st.depid >= len(gpu.tbs):
        raise ScheduleError(f"{describe(ref, program)}: depid={st.depid} names no thread block of gpu {gpu.id}")
    positions = flags[(gpu.id, st.depid)]
    j = bisect_left(positions, st.deps)
    if j == len(positions):
        raise ScheduleError(
            f"{describe(ref, program)}: waits for tb {st.depid} to reach step {st.deps}, but no step of it at or "
            "after that has hasdep=1, so the wait is never released (the executor hangs)")
    target = positions[j]
    if st.depid == tb.id and target >= k:
        raise ScheduleError(f"{describe(ref, program)}: waits on its own thread block's step {target}, "
                            "which can only run after it (the executor hangs)")
    return target


def flag_steps(program: Program) -> dict[tuple[int, int], list[int]]:
    return {(g.id, t.id): [k for k, s in enumerate(t.steps) if s.hasdep and s.type != "nop"]
            for g in program.gpus.values() for t in g.tbs}


@dataclass
class Run:
    """One execution of a program (``execute_program``): who received what, and what did not finish."""

    match: dict[StepRef, StepRef]
    stuck: list[tuple[StepRef, str]]
    unmatched_sends: list[StepRef]
    unmatched_recvs: list[StepRef]


def execute_program(program: Program, capacity: int | None = None,
             targets: dict[StepRef, int] | None = None) -> Run:
    """Run the program's thread blocks as the runtime would, each step atomically.

    A step runs once its dependency's thread block has completed the target step,
    a receive once a message is waiting on its connection, a send once the
    connection holds fewer than ``capacity`` undelivered messages (None:
    unbounded). The k-th send executed on a (chan, sender, receiver) connection
    meets the k-th receive executed on it: for well-formed files (one thread block
    per connection end) that is the k-th in document order; where two thread
    blocks share a connection it is the order this run took. The outcome (done
    or stuck) does not depend on the order ready blocks are run in when every
    connection has one sender and one receiver block.
    """
    if targets is None:
        targets = dep_targets(program)
    tbs: dict[tuple[int, int], tuple[ProgramGpu, ProgramTb]] = {
        (g.id, t.id): (g, t) for g in sorted(program.gpus.values(), key=lambda g: g.id) for t in g.tbs}
    pc = dict.fromkeys(tbs, 0)
    queues: dict[tuple[int, int, int], deque[StepRef]] = {}
    waiters: dict[tuple[Any, ...], list[tuple[int, int]]] = {}
    blocked: dict[tuple[int, int], str] = {}
    match: dict[StepRef, StepRef] = {}
    senders: dict[tuple[int, int, int], list[tuple[int, int]]] = {}
    for key, (g, t) in tbs.items():
        if t.send >= 0:
            senders.setdefault((t.chan, g.id, t.send), []).append(key)
    work = deque(tbs)
    queued = set(tbs)

    def wake(event: tuple[Any, ...]) -> None:
        for k in waiters.pop(event, ()):
            if k not in queued:
                queued.add(k)
                work.append(k)

    def wait(key: tuple[int, int], event: tuple[Any, ...], why: str) -> None:
        waiters.setdefault(event, []).append(key)
        blocked[key] = why

    while work:
        key = work.popleft()
        queued.discard(key)
        g, t = tbs[key]
        steps = t.steps
        k = pc[key]
        while k < len(steps):
            st = steps[k]
            ref = (g.id, t.id, k)
            tgt = targets.get(ref)
            if tgt is not None and pc[(g.id, st.depid)] <= tgt:
                wait(key, ("tb", g.id, st.depid), f"waits for tb {st.depid} step {tgt}")
                break
            rcv, snd, _, _ = STEP_TYPES[st.type]
            cin = (t.chan, t.recv, g.id)
            cout = (t.chan, g.id, t.send)
            if rcv and not queues.get(cin):
                wait(key, ("msg", cin), f"waits for a message from gpu {t.recv} on channel {t.chan}")
                break
            if snd and capacity is not None and len(queues.get(cout, ())) >= capacity:
                wait(key, ("room", cout), f"waits for room to send to gpu {t.send} on channel {t.chan} "
                                          f"({capacity} undelivered)")
                break
            if rcv:
                a = queues[cin].popleft()
                sa = program.gpus[a[0]].tbs[a[1]].steps[a[2]]
                if sa.cnt != st.cnt:
                    raise ScheduleError(f"{describe(a, program)} sends cnt={sa.cnt} but the receive it meets, "
                                        f"{describe(ref, program)}, has cnt={st.cnt}")
                match[ref] = a
                wake(("room", cin))
            if snd:
                queues.setdefault(cout, deque()).append(ref)
                wake(("msg", cout))
            k += 1
            pc[key] = k
            wake(("tb", g.id, t.id))
        else:
            blocked.pop(key, None)
    stuck: list[tuple[StepRef, str]] = []
    unmatched_recvs: list[StepRef] = []
    for key, why in sorted(blocked.items()):
        g, t = tbs[key]
        ref = (g.id, t.id, pc[key])
        st = t.steps[pc[key]]
        cin = (t.chan, t.recv, g.id)
        if why.startswith("waits for a message") and all(
                pc[s] == len(tbs[s][1].steps) for s in senders.get(cin, [])):
            unmatched_recvs.append(ref)
        else:
            stuck.append((ref, f"{describe(ref, program)} {why}"))
        del st
    unmatched_sends = [r for q in queues.values() for r in q] if not blocked else []
    return Run(match, stuck, sorted(unmatched_sends), unmatched_recvs)


def dep_targets(program: Program) -> dict[StepRef, int]:
    """The dependency target of every step that has one (``ScheduleError`` when it is never released)."""
    flags = flag_steps(program)
    out: dict[StepRef, int] = {}
    for g in program.gpus.values():
        for t in g.tbs:
            for k in range(len(t.steps)):
                tgt = dep_target(program, g, t, k, flags)
                if tgt is not None:
                    out[(g.id, t.id, k)] = tgt
    return out


def _match(program: Program, targets: dict[StepRef, int]) -> dict[StepRef, StepRef]:
    """Receive-type step -> the send-type step it receives from; ``ScheduleError`` when the program cannot finish."""
    run = execute_program(program, None, targets)
    if run.unmatched_recvs:
        ref = run.unmatched_recvs[0]
        st = program.gpus[ref[0]].tbs[ref[1]]
        raise ScheduleError(f"{describe(ref, program)}: unmatched receive: gpu {st.recv} sends nothing more to "
                            f"gpu {ref[0]} on channel {st.chan}")
    if run.stuck:
        raise ScheduleError(f"deadlock: {len(run.stuck)} thread block(s) can never finish; {run.stuck[0][1]}")
    if run.unmatched_sends:
        ref = run.unmatched_sends[0]
        st = program.gpus[ref[0]].tbs[ref[1]]
        raise ScheduleError(f"{describe(ref, program)}: unmatched send: gpu {st.send} receives nothing more from "
                            f"gpu {ref[0]} on channel {st.chan}")
    return run.match


class Graph:
    """Nodes (a list of transfers, or none for a pure ordering point) with happens-before predecessors."""

    def __init__(self) -> None:
        self.preds: list[list[int]] = []
        self.trans: list[list[Transfer]] = []
        self.origin: list[StepRef] = []
        self.capture: dict[int, int] = {}  # send-read node -> its message node
        self.after: dict[tuple[int, int], int] = {}  # (node, pred) -> 1 when node goes a level after pred

    def node(self, origin: StepRef, preds: Iterable[int] = (), trans: list[Transfer] | None = None) -> int:
        self.preds.append(list(preds))
        self.trans.append(trans or [])
        self.origin.append(origin)
        return len(self.preds) - 1


def build_graph(program: Program, sz: Sizes, inplace: bool | None
           ) -> tuple[Graph, Mapper, list[int], dict[StepRef, int], dict[StepRef, int]]:
    """The happens-before graph of a program: nodes, transfers, each step's completion and gate node."""
    mode = _mode(program, sz, inplace)
    scratch = max([0] + [g.s_chunks for g in program.gpus.values()])
    mapper = Mapper(sz, mode, scratch)
    targets = dep_targets(program)
    match = _match(program, targets)
    temp_next = [mapper.scratch_base] * sz.p

    gr = Graph()
    # Per step: (gate node, completion node, node that its sends leave from, value location for sends).
    gate: dict[StepRef, int] = {}
    done: dict[StepRef, int] = {}
    ready: dict[StepRef, int] = {}
    value: dict[StepRef, tuple[str, int]] = {}
    recv_node: dict[StepRef, int] = {}  # the message node a receive-type step receives by
    recv_local: dict[StepRef, tuple[str, int, Op, int]] = {}  # receiver's (buf, off, op, extra pred)

    # First pass: gates and local nodes. Completion of earlier steps is wired after all nodes exist.
    gate_preds: dict[int, list[tuple[StepRef, bool]]] = {}
    for g in program.gpus.values():
        for t in g.tbs:
            for k, st in enumerate(t.steps):
                ref = (g.id, t.id, k)
                for side, b, off in (("src", st.srcbuf, st.srcoff), ("dst", st.dstbuf, st.dstoff)):
                    if b is not None and off + st.cnt > mapper.size(g, b):
                        raise ScheduleError(f"{describe(ref, program)}: {side} {b}[{off}:{off + st.cnt}] is out of "
                                            f"bounds (buffer {b} of gpu {g.id} has {mapper.size(g, b)} chunks)")
                target = targets.get(ref)
                gnode = gr.node(ref)
                gate[ref] = gnode
                deps: list[tuple[StepRef, bool]] = []
                if k > 0:
                    deps.append(((g.id, t.id, k - 1), True))
                if target is not None:
                    deps.append(((g.id, st.depid, target), True))
                gate_preds[gnode] = deps
                kind = st.type
                rcv, snd, _, _ = STEP_TYPES[kind]
                if kind in ("cpy", "re"):
                    assert st.srcbuf is not None and st.dstbuf is not None
                    op = Op.COPY if kind == "cpy" else Op.REDUCE
                    n = gr.node(ref, [gnode], _transfers(mapper, g.id, st.srcbuf, st.srcoff, g.id, st.dstbuf,
                                                          st.dstoff, st.cnt, op))
                    done[ref] = n
                elif kind == "nop":
                    done[ref] = gnode
                elif kind == "s":
                    assert st.srcbuf is not None
                    ready[ref] = gnode
                    value[ref] = (st.srcbuf, st.srcoff)
                if rcv:
                    # Where the received value lands, and how.
                    if kind in ("r", "rcs"):
                        assert st.dstbuf is not None
                        recv_local[ref] = (st.dstbuf, st.dstoff, Op.COPY, gnode)
                    else:
                        assert st.srcbuf is not None
                        if kind == "rrs":
                            tb_, to = "s", temp_next[g.id]
                            temp_next[g.id] += st.cnt
                        else:
                            assert st.dstbuf is not None
                            tb_, to = st.dstbuf, st.dstoff
                        pre = gnode
                        if kind == "rrs" or mapper.segments(g.id, st.srcbuf, st.srcoff, st.cnt) != \
                                mapper.segments(g.id, tb_, to, st.cnt):
                            # x := recv ⊕ src with src elsewhere: copy src to x first, then reduce into x.
                            pre = gr.node(ref, [gnode], _transfers(mapper, g.id, st.srcbuf, st.srcoff, g.id, tb_,
                                                                    to, st.cnt, Op.COPY))
                        recv_local[ref] = (tb_, to, Op.REDUCE, pre)
                    if snd:
                        value[ref] = (recv_local[ref][0], recv_local[ref][1])

    # Message nodes: one per matched pair. A send reads its value when it runs (the runtime
    # buffers it), so the sender's thread block goes on after the read, not after the delivery.
    sread: dict[StepRef, int] = {}
    for b_ref, a_ref in match.items():
        rb, ro, op, pre = recv_local[b_ref]
        a = program.gpus[a_ref[0]].tbs[a_ref[1]].steps[a_ref[2]]
        vb, vo = value[a_ref]
        recv_node[b_ref] = gr.node(b_ref, [pre], _transfers(mapper, a_ref[0], vb, vo, b_ref[0], rb, ro, a.cnt, op))
    for ref, n in recv_node.items():
        st = program.gpus[ref[0]].tbs[ref[1]].steps[ref[2]]
        if STEP_TYPES[st.type][1]:
            ready[ref] = n  # rcs, rrs, rrcs forward what they received
        else:
            done[ref] = n
    for b_ref, a_ref in match.items():
        m = recv_node[b_ref]
        sread[a_ref] = r = gr.node(a_ref, [ready[a_ref]])
        gr.capture[r] = m
        gr.preds[m].append(r)
        done[a_ref] = r
    # A nop carries a dependency for the next real step of its thread block: judge it by what that one does.
    # The first real step at or after each position, found once per thread block (a scan per nop was quadratic in
    # a run of nops: 30,000 of them took minutes).
    real_from: dict[tuple[int, int], list[int]] = {}
    for g in program.gpus.values():
        for t in g.tbs:
            nxt, last = [0] * len(t.steps), len(t.steps) - 1
            for k in range(last, -1, -1):
                nxt[k] = nxt[k + 1] if k < last and t.steps[k].type == "nop" else k
            real_from[(g.id, t.id)] = nxt
    for gnode, deps in gate_preds.items():
        ref = gr.origin[gnode]
        st = program.gpus[ref[0]].tbs[ref[1]].steps[real_from[(ref[0], ref[1])][ref[2]]]
        writes: set[int] | None = None
        for d, _ in deps:
            u = done[d]
            gr.preds[gnode].append(u)
            msg = gr.capture.get(u)  # u: a send's read; msg: its message
            if not gr.trans[u] and msg is None:
                continue
            if writes is None:
                writes = _written(mapper, ref[0], st)
            if msg is not None:
                gr.after[(gnode, u)] = _after(gr.trans[msg], writes, False, reads_only=True)
            else:
                gr.after[(gnode, u)] = _after(gr.trans[u], writes, st.type in ("rrc", "rrcs", "re"))

    return gr, mapper, temp_next, done, gate


_BUFCODE = {Buf.INPUT: 0, Buf.OUTPUT: 1, Buf.SCRATCH: 2}


def slot_key(rank: int, buf: Buf, index: int) -> int:
    """One integer per (rank, buffer, index) slot; consecutive indices get consecutive keys."""
    return ((rank * 3 + _BUFCODE[buf]) << 34) + index


def _written(mapper: Mapper, rank: int, st: ProgramStep) -> set[int]:
    """Slot keys a step writes on its own gpu (an rrs writes only a fresh temporary: none)."""
    if st.dstbuf is None or st.type == "rrs":
        return set()
    return {slot_key(rank, buf, idx + k) for buf, idx, n in mapper.segments(rank, st.dstbuf, st.dstoff, st.cnt)
            for k in range(n)}


def _after(done: list[Transfer], writes: set[int], reduces: bool, *, reads_only: bool = False) -> int:
    """1 when a step waiting for a node goes to the next level; 0 when lockstep lets it share the level.

    ``done``: the node's transfers (``reads_only``: the message whose source a
    send read). Sharing is allowed when the waiter only overwrites what the node
    read (a step's reads see its start) or reduces into slots the node also
    reduced into.
    """
    for t in done:
        sk, dk = slot_key(t.src, t.src_buf, t.src_index), slot_key(t.dst, t.dst_buf, t.dst_index)
        if (reads_only or t.src == t.dst) and any(sk + k in writes for k in range(t.count)):
            continue  # write after read
        if reads_only:
            return 1
        if reduces and t.op is Op.REDUCE and any(dk + k in writes for k in range(t.count)):
            continue  # reduce after reduce
        return 1
    return 0
