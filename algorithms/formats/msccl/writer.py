"""Writing collsched schedules as MSCCL-IR: ``dumps_msccl``, ``save_msccl``, ``stage_reductions``, ``split_channels``.

Each remote transfer becomes an ``s`` on the sender and an ``r`` (copy) or
``rrc`` (reduce) on the receiver, each local one a ``cpy``/``re``; thread blocks
have one peer each; dependencies are the schedule's dataflow (read-after-write,
write-after-write, write-after-read), pruned of those implied by others,
carried by ``depid``/``deps`` and ``nop``s, plus a wait that keeps a transfer
out of earlier steps than the schedule's.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any
from xml.sax.saxutils import quoteattr

from algorithms.disk import write_output
from algorithms.errors import ScheduleError
from algorithms.formats.msccl.execution import slot_key
from algorithms.formats.msccl.program import MAX_CHANNELS, MAX_CNT, MAX_TBS_PER_CHANNEL, PROTO_SLOTS
from algorithms.ir import Buf, Collective, Kind, Op, Schedule, Step, Transfer
from algorithms.registry import no_gc

_EXPORT_KINDS = {Kind.ALLREDUCE: "allreduce", Kind.ALLGATHER: "allgather", Kind.REDUCESCATTER: "reducescatter",
                 Kind.ALLTOALL: "alltoall"}
_CHAR = {Buf.INPUT: "i", Buf.OUTPUT: "o", Buf.SCRATCH: "s"}
_SEND, _RECV, _LOCAL = 0, 1, 2


@dataclass(slots=True)
class _Op:
    """One MSCCL step before numbering: a send, a receive or a local op of one transfer."""

    rank: int
    role: int
    peer: int
    step: int
    transfer: Transfer
    deps: set[int] = field(default_factory=set)
    tb: int = -1  # thread block index on its rank
    pos: int = -1  # position among the tb's real (non-nop) steps
    kept: list[int] = field(default_factory=list)  # dependencies carried (after pruning)
    s: int = -1


def _export_transfers(schedule: Schedule) -> list[tuple[int, Transfer]]:
    """(step, transfer) in program order, counts above the executor's limit split into pieces."""
    out: list[tuple[int, Transfer]] = []
    for si, step in enumerate(schedule.steps):
        for t in step.transfers:
            if t.count <= MAX_CNT:
                out.append((si, t))
                continue
            for k in range(0, t.count, MAX_CNT):
                n = min(MAX_CNT, t.count - k)
                out.append((si, t._replace(src_index=t.src_index + k, dst_index=t.dst_index + k, count=n)))
    return out


def _export_ops(schedule: Schedule) -> list[_Op]:
    """The ops of every transfer, each with the ops (same rank) it must wait for: the dataflow order."""
    trs = _export_transfers(schedule)
    ops: list[_Op] = []
    read_side: list[int] = []  # op that reads transfer i's source
    write_side: list[int] = []  # op that writes transfer i's destination
    for si, t in trs:
        if t.src == t.dst:
            ops.append(_Op(t.src, _LOCAL, -1, si, t))
            read_side.append(len(ops) - 1)
            write_side.append(len(ops) - 1)
        else:
            ops.append(_Op(t.src, _SEND, t.dst, si, t))
            ops.append(_Op(t.dst, _RECV, t.src, si, t))
            read_side.append(len(ops) - 2)
            write_side.append(len(ops) - 1)
    writers: dict[int, list[int]] = {}  # slot -> transfers that last wrote it (one step's)
    readers: dict[int, list[int]] = {}  # slot -> transfers that read it since
    paced = [False] * len(trs)  # has a data dependency on the step before
    i = 0
    while i < len(trs):
        si = trs[i][0]
        j = i
        while j < len(trs) and trs[j][0] == si:
            j += 1
        step_reads: dict[int, list[int]] = {}
        step_writes: dict[int, list[int]] = {}
        for x in range(i, j):
            t = trs[x][1]
            sk, dk = slot_key(t.src, t.src_buf, t.src_index), slot_key(t.dst, t.dst_buf, t.dst_index)
            rd, wr = ops[read_side[x]].deps, ops[write_side[x]].deps
            for k in range(t.count):
                for w in writers.get(sk + k, ()):
                    rd.add(write_side[w])  # read after write
                    if trs[w][0] == si - 1:
                        paced[x] = True
                for w in writers.get(dk + k, ()):
                    wr.add(write_side[w])  # write after write
                    if trs[w][0] == si - 1 and (t.op is Op.COPY or trs[w][1].op is Op.COPY):
                        paced[x] = True
                for r in readers.get(dk + k, ()):
                    wr.add(read_side[r])  # write after read
                step_reads.setdefault(sk + k, []).append(x)
                step_writes.setdefault(dk + k, []).append(x)
        for slot, ws in step_writes.items():
            for r in step_reads.get(slot, ()):
                for w in ws:
                    if w != r:
                        ops[write_side[w]].deps.add(read_side[r])  # same step: the read goes first
            for a, b in pairwise(ws):
                ops[write_side[b]].deps.add(write_side[a])  # two writes of one slot (reduces) take turns
        for slot, rs in step_reads.items():
            readers.setdefault(slot, []).extend(rs)
        for slot, ws in step_writes.items():
            writers[slot] = ws
            readers.pop(slot, None)
        i = j
    _pace(trs, ops, read_side, write_side, paced)
    for o, op in enumerate(ops):
        op.deps.discard(o)
    return ops


def _pace(trs: list[tuple[int, Transfer]], ops: list[_Op], read_side: list[int], write_side: list[int],
          paced: list[bool]) -> None:
    """Keep the schedule's steps: a transfer with no data dependency on the step before waits for an op
    of that step on one of its ranks, so that MSCCL runs it no earlier than the schedule does (and an
    import places it in the same step)."""
    copies: dict[tuple[int, int], int] = {}  # (rank, step) -> an op there
    for x, (si, t) in enumerate(trs):
        copies.setdefault((t.src, si), read_side[x])
        copies.setdefault((t.dst, si), write_side[x])
    for x, (si, t) in enumerate(trs):
        if si == 0 or paced[x]:
            continue
        o = copies.get((t.src, si - 1))
        if o is not None:
            ops[read_side[x]].deps.add(o)
            continue
        o = copies.get((t.dst, si - 1))
        if o is not None:
            ops[write_side[x]].deps.add(o)


def _assign(ops: list[_Op], p: int, per_tb: int, nchannels: int
            ) -> tuple[list[list[tuple[int, int, int]]], dict[tuple[int, int, int, int, int], int]]:
    """Thread blocks (send peer, recv peer, chan) per rank; each op gets its tb and position."""
    lane_count: dict[tuple[int, int, int, int], int] = {}
    seq_len: dict[tuple[int, int, int, int], int] = {}
    keys: list[tuple[int, int, int, int, int]] = []
    for op in ops:
        lk = (op.rank, op.role, op.peer, op.step)
        lane = lane_count.get(lk, 0)
        lane_count[lk] = lane + 1
        sk = (op.rank, op.role, op.peer, lane)
        n = seq_len.get(sk, 0)
        seq_len[sk] = n + 1
        keys.append((op.rank, op.role, op.peer, lane, n // per_tb))
    # Channels: both ends of a connection agree; at most 32 senders and 32 receivers per channel per rank.
    chan: dict[tuple[int, int, int, int], int] = {}
    out_n: dict[tuple[int, int], int] = {}
    in_n: dict[tuple[int, int], int] = {}
    used: dict[tuple[int, int], set[int]] = {}
    for rank, role, peer, lane, seg in sorted(set(keys)):
        if role != _SEND:
            continue
        ck = (rank, peer, lane, seg)
        taken = used.setdefault((rank, peer), set())
        c = (lane + seg) % nchannels
        while (c in taken or out_n.get((rank, c), 0) >= MAX_TBS_PER_CHANNEL
               or in_n.get((peer, c), 0) >= MAX_TBS_PER_CHANNEL):
            c += 1
        taken.add(c)
        out_n[(rank, c)] = out_n.get((rank, c), 0) + 1
        in_n[(peer, c)] = in_n.get((peer, c), 0) + 1
        chan[ck] = c
    tbs: list[list[tuple[int, int, int]]] = [[] for _ in range(p)]
    tb_of: dict[tuple[int, int, int, int, int], int] = {}
    for key in sorted(set(keys)):
        rank, role, peer, lane, seg = key
        if role == _SEND:
            tbs[rank].append((peer, -1, chan[(rank, peer, lane, seg)]))
        elif role == _RECV:
            tbs[rank].append((-1, peer, chan[(peer, rank, lane, seg)]))
        else:
            tbs[rank].append((-1, -1, 0))
        tb_of[key] = len(tbs[rank]) - 1
    count: dict[tuple[int, int], int] = {}
    for op, key in zip(ops, keys, strict=True):
        op.tb = tb_of[key]
        n = count.get((op.rank, op.tb), 0)
        op.pos = n
        count[(op.rank, op.tb)] = n + 1
    return tbs, tb_of


def _prune(ops: list[_Op], tbs: list[list[tuple[int, int, int]]]) -> list[list[list[int]]]:
    """Keep only dependencies no other (kept or program-order) one implies; the ops of each tb in order."""
    p = len(tbs)
    by_rank: list[list[int]] = [[] for _ in range(p)]
    for o, op in enumerate(ops):
        by_rank[op.rank].append(o)
    programs: list[list[list[int]]] = [[[] for _ in tbs[r]] for r in range(p)]
    for o in (o for r in range(p) for o in by_rank[r]):
        programs[ops[o].rank][ops[o].tb].append(o)
    for r in range(p):
        mine = by_rank[r]
        prev: dict[int, int] = {}
        for prog in programs[r]:
            for a, b in pairwise(prog):
                prev[b] = a
        # Topological order of this rank's ops under program order and dependencies.
        indeg = {o: len(ops[o].deps) + (1 if o in prev else 0) for o in mine}
        succ: dict[int, list[int]] = {}
        for o in mine:
            for d in ops[o].deps:
                succ.setdefault(d, []).append(o)
            if o in prev:
                succ.setdefault(prev[o], []).append(o)
        queue = deque(o for o in mine if indeg[o] == 0)
        order: list[int] = []
        while queue:
            o = queue.popleft()
            order.append(o)
            for w in succ.get(o, ()):
                indeg[w] -= 1
                if indeg[w] == 0:
                    queue.append(w)
        if len(order) < len(mine):
            o = next(o for o in mine if indeg[o] > 0)
            raise ScheduleError(
                f"step {ops[o].step}: on rank {r}, transfers of one step read and write each other's slots "
                f"(e.g. a swap, {ops[o].transfer!r}); MSCCL runs them in some order, so stage one through "
                "scratch first")
        rank_of = {o: i for i, o in enumerate(order)}
        ntb = len(tbs[r])
        vc: dict[int, list[int]] = {}
        for o in order:
            op = ops[o]
            base = list(vc[prev[o]]) if o in prev else [-1] * ntb
            for d in sorted(op.deps, key=rank_of.__getitem__, reverse=True):
                dop = ops[d]
                if base[dop.tb] < dop.pos:
                    op.kept.append(d)
                    dv = vc[d]
                    base = [x if x > y else y for x, y in zip(base, dv, strict=True)]
            base[op.tb] = op.pos
            vc[o] = base
    return programs


def stage_reductions(schedule: Schedule) -> Schedule:
    """The schedule with concurrent remote reductions into one slot received into scratch, then added locally.

    When several transfers of a step reduce into the same destination from
    different ranks, MSCCL must run them one after another (each ``rrc`` reads,
    adds and writes the slot), so each waits for the previous message. Staged,
    the messages land concurrently in fresh scratch slots (``r``) and a local
    step right after adds them (``re``, cheap and in order). Same result
    (``verify`` agrees), one local step more per staged step, and the
    transfers between ranks are unchanged in size and step.
    """
    groups: list[dict[tuple[int, Buf, int, int], list[int]]] = []
    for step in schedule.steps:
        g: dict[tuple[int, Buf, int, int], list[int]] = {}
        for i, t in enumerate(step.transfers):
            if t.op is Op.REDUCE and t.src != t.dst:
                g.setdefault((t.dst, t.dst_buf, t.dst_index, t.count), []).append(i)
        groups.append({k: v for k, v in g.items() if len(v) > 1})
    if not any(groups):
        return schedule
    need = 0
    for g in groups:
        per_rank: dict[int, int] = {}
        for (dst, _b, _i, n), idx in g.items():
            per_rank[dst] = per_rank.get(dst, 0) + n * len(idx)
        need = max([need, *per_rank.values()])
    base = schedule.scratch_chunks
    steps: list[Step] = []
    for step, g in zip(schedule.steps, groups, strict=True):
        if not g:
            steps.append(step)
            continue
        staged: dict[int, tuple[Transfer, Transfer]] = {}
        used: dict[int, int] = {}
        for (dst, b, i, n), idx in g.items():
            for j in idx:
                t = step.transfers[j]
                at = base + used.get(dst, 0)
                used[dst] = used.get(dst, 0) + n
                staged[j] = (t._replace(dst_buf=Buf.SCRATCH, dst_index=at, op=Op.COPY),
                             Transfer(dst, dst, Buf.SCRATCH, at, b, i, n, Op.REDUCE))
        steps.append(Step(tuple(staged[j][0] if j in staged else t for j, t in enumerate(step.transfers))))
        steps.append(Step(tuple(staged[j][1] for j in sorted(staged))))
    return Schedule(schedule.collective, schedule.name, tuple(steps), base + need)


def split_channels(schedule: Schedule, nchannels: int) -> Schedule:
    """The schedule with remote transfers cut into pieces, so that every connection carries at least
    ``nchannels`` transfers in each step it is used (as MSCCLang's ``instances`` do).

    Per step and pair of ranks with m < ``nchannels`` transfers, the transfers are
    cut into ``nchannels`` pieces in all (as evenly as the transfers allow); the
    export puts each piece of a step and pair on its own thread block and channel.
    Where a transfer has fewer chunks than pieces, every chunk of the collective
    is first cut into f equal parts (the smallest f that gives each piece a
    chunk): all buffer indices and counts scale by f, so the file's
    ``nchunksperloop`` is f times larger and the data moved is the same. Local
    transfers only scale. A schedule already that wide comes back as it is.
    """
    if nchannels <= 1:
        return schedule
    pieces: list[list[int]] = []  # per step, per transfer: how many pieces (1: left whole)
    f = 1
    for step in schedule.steps:
        by_pair: dict[tuple[int, int], list[int]] = {}
        for i, t in enumerate(step.transfers):
            if t.src != t.dst:
                by_pair.setdefault((t.src, t.dst), []).append(i)
        cut = [1] * len(step.transfers)
        for idx in by_pair.values():
            if len(idx) >= nchannels:
                continue
            each, extra = divmod(nchannels, len(idx))
            for j, i in enumerate(idx):
                cut[i] = each + (j < extra)
                f = max(f, -(-cut[i] // step.transfers[i].count))
        pieces.append(cut)
    if f == 1 and all(k == 1 for cut in pieces for k in cut):
        return schedule
    coll = schedule.collective
    try:
        refined = Collective(coll.kind, coll.ranks, coll.chunks * f, coll.root)
        steps: list[Step] = []
        for step, cut in zip(schedule.steps, pieces, strict=True):
            out: list[Transfer] = []
            for t, k in zip(step.transfers, cut, strict=True):
                si, di, n = t.src_index * f, t.dst_index * f, t.count * f
                each, extra = divmod(n, k)
                at = 0
                for j in range(k):
                    m = each + (j < extra)
                    out.append(t._replace(src_index=si + at, dst_index=di + at, count=m))
                    at += m
            steps.append(Step(tuple(out)))
        return Schedule(refined, schedule.name, tuple(steps), schedule.scratch_chunks * f)
    except ScheduleError as e:
        raise ScheduleError(f"nchannels={nchannels}: spreading the transfers over {nchannels} channels cuts "
                            f"every chunk into {f}, and then {e} (ask for fewer channels)") from None


def dumps_msccl(schedule: Schedule, *, name: str | None = None, proto: str = "Simple", nchannels: int = 1,
                min_bytes: int = 0, max_bytes: int = 0, max_steps: int = 64, staged: bool = False) -> str:
    """The schedule as MSCCL-IR XML the MSCCL executor (NCCL) and RCCL accept as written (module docstring).

    ``proto``: Simple, LL or LL128. ``nchannels``: spread every connection over
    at least this many channels, cutting transfers into pieces where a step has
    fewer (``split_channels``: the file's chunks may be cut finer, its
    ``nchunksperloop`` grows by that factor); more channels are used where a
    step already has more transfers between two ranks, a thread block would
    exceed ``max_steps`` steps, the executor's MSCCL_MAX_NUM_STEPS, or a channel
    would get more than 32 senders or receivers. ``min_bytes``/``max_bytes``: the
    call sizes the executor picks this algorithm for (0: unlimited). ``staged``:
    write ``stage_reductions(schedule)`` (concurrent reductions into one slot
    received into scratch and added locally, instead of taking turns). Allreduce
    is written in-place (collsched's all-reduce is), the other kinds
    out-of-place. Kinds MSCCL-IR cannot express (rooted kinds: the format has
    no root; barrier) raise ``ScheduleError``.
    """
    if schedule.collective.kind is Kind.ALLTOALLV:
        schedule = _alltoallv_as_alltoall(schedule)
    coll = schedule.collective
    if schedule.switch_ops:
        first = schedule.switch_ops[0]
        raise ScheduleError(f"cannot write step {first.step} switch op ({first.describe()}) as MSCCL-IR: the "
                            "format has no switch operations (multicast, in-switch reduction)")
    if coll.kind not in _EXPORT_KINDS:
        why = "the format has no root attribute" if coll.root is not None else "MSCCL has no such collective"
        raise ScheduleError(f"cannot write {coll.kind} as MSCCL-IR ({why}); it holds allreduce, allgather, "
                            "reducescatter and alltoall")
    if proto not in PROTO_SLOTS:
        raise ScheduleError(f"proto must be one of {', '.join(PROTO_SLOTS)}, got {proto!r}")
    for label, v, low in (("nchannels", nchannels, 1), ("max_steps", max_steps, 2), ("min_bytes", min_bytes, 0),
                          ("max_bytes", max_bytes, 0)):
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise ScheduleError(f"{label} must be an integer >= {low}, got {v!r}")
    if nchannels > MAX_CHANNELS:
        raise ScheduleError(f"nchannels={nchannels} is over {MAX_CHANNELS}, the most channel ids MSCCL-IR "
                            "readers accept")
    p = coll.ranks
    if staged:
        schedule = stage_reductions(schedule)
    schedule = split_channels(schedule, nchannels)
    with no_gc():
        ops = _export_ops(schedule)
        per_tb = max_steps
        while True:
            for op in ops:
                op.kept = []
            tbs, _ = _assign(ops, p, per_tb, nchannels)
            programs = _prune(ops, tbs)
            longest = max((sum(1 + max(0, len(ops[o].kept) - 1) for o in prog)
                           for progs in programs for prog in progs), default=0)
            if longest <= max_steps:
                break
            if per_tb == 1:
                raise ScheduleError(f"a thread block needs {longest} steps (with its dependencies' nops), over "
                                    f"max_steps={max_steps}")
            per_tb = max(1, per_tb // 2)
        return _write(schedule, ops, tbs, programs, name or schedule.name, proto, min_bytes, max_bytes)


def _write(schedule: Schedule, ops: list[_Op], tbs: list[list[tuple[int, int, int]]],
           programs: list[list[list[int]]], name: str, proto: str, min_bytes: int, max_bytes: int) -> str:
    coll = schedule.collective
    p = coll.ranks
    # Number the steps (nops first, each carrying one dependency) and mark dependency targets.
    hasdep: set[int] = set()
    for r in range(p):
        for prog in programs[r]:
            s = 0
            for o in prog:
                s += max(0, len(ops[o].kept) - 1)
                ops[o].s = s
                s += 1
                hasdep.update(ops[o].kept)
    big = coll.kind is not Kind.ALLREDUCE
    nchunks = coll.chunks * (p if big else 1)
    inplace, outofplace = (0, 1) if big else (1, 0)
    nch = 1 + max((c for rank_tbs in tbs for _, _, c in rank_tbs), default=0)
    out = [f'<algo name={quoteattr(name)} proto="{proto}" nchannels="{nch}" nchunksperloop="{nchunks}" '
           f'ngpus="{p}" coll="{_EXPORT_KINDS[coll.kind]}" inplace="{inplace}" outofplace="{outofplace}" '
           f'minBytes="{min_bytes}" maxBytes="{max_bytes}">\n']
    nop = '      <step s="{}" type="nop" srcbuf="i" srcoff="-1" dstbuf="o" dstoff="-1" cnt="0" depid="{}" ' \
          'deps="{}" hasdep="0"/>\n'
    for r in range(p):
        i_chunks = coll.input_chunks(r)
        o_chunks = 0 if coll.in_place else coll.output_chunks(r)
        out.append(f'  <gpu id="{r}" i_chunks="{i_chunks}" o_chunks="{o_chunks}" '
                   f's_chunks="{schedule.scratch_chunks}">\n')
        for tb, (send, recv, chan) in enumerate(tbs[r]):
            out.append(f'    <tb id="{tb}" send="{send}" recv="{recv}" chan="{chan}">\n')
            s = 0
            for o in programs[r][tb]:
                op = ops[o]
                for d in op.kept[:-1]:
                    out.append(nop.format(s, ops[d].tb, ops[d].s))
                    s += 1
                t = op.transfer
                if op.role == _SEND:
                    kind, sb, so, db, do = "s", t.src_buf, t.src_index, t.dst_buf, t.dst_index
                elif op.role == _RECV:
                    kind = "r" if t.op is Op.COPY else "rrc"
                    sb, so, db, do = t.src_buf, t.src_index, t.dst_buf, t.dst_index
                    if kind == "rrc":
                        sb, so = db, do  # rrc reads the local destination
                else:
                    kind = "cpy" if t.op is Op.COPY else "re"
                    sb, so, db, do = t.src_buf, t.src_index, t.dst_buf, t.dst_index
                if op.kept:
                    last = ops[op.kept[-1]]
                    depid, deps = last.tb, last.s
                else:
                    depid = deps = -1
                out.append(f'      <step s="{s}" type="{kind}" srcbuf="{_CHAR[sb]}" srcoff="{so}" '
                           f'dstbuf="{_CHAR[db]}" dstoff="{do}" cnt="{t.count}" depid="{depid}" deps="{deps}" '
                           f'hasdep="{1 if o in hasdep else 0}"/>\n')
                s += 1
            out.append("    </tb>\n")
        out.append("  </gpu>\n")
    out.append("</algo>\n")
    return "".join(out)


def _alltoallv_as_alltoall(schedule: Schedule) -> Schedule:
    """An alltoallv whose blocks are all C chunks as the alltoall of C chunks it is (the same buffers, slot for
    slot); ``ScheduleError`` saying why for any other matrix."""
    coll = schedule.collective
    t = coll.traffic()
    sizes = sorted({int(v) for v in t.flat})
    if len(sizes) != 1 or sizes[0] == 0:
        i, j = (int(x) for x in divmod(int((t != t.flat[0]).argmax()), coll.ranks)) if len(sizes) > 1 else (0, 0)
        detail = (f"T[0][0] = {int(t[0, 0])} but T[{i}][{j}] = {int(t[i, j])}" if len(sizes) > 1
                  else "every block is empty")
        raise ScheduleError(f"cannot write this alltoallv as MSCCL-IR: the format cuts every buffer into equal "
                            f"chunks of the call's count, so it holds only all-to-alls whose blocks are all one "
                            f"size ({detail}); export an alltoall, or keep the collsched JSON")
    return Schedule.from_columns(Collective(Kind.ALLTOALL, coll.ranks, sizes[0]), schedule.name, schedule.columns(),
                                 schedule.scratch_chunks)


def save_msccl(schedule: Schedule, path: str | os.PathLike[str], **options: Any) -> None:
    """Write ``dumps_msccl(schedule, **options)`` to ``path`` (``algorithms.disk.write_output``)."""
    write_output(path, dumps_msccl(schedule, **options), ScheduleError)
