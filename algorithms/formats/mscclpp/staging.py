"""A schedule put in the form the plan writer maps op for op: ``stage_reads``.

A collsched step reads the state at its start and writes at its end (docs/design.md, "Step semantics");
the executor's ops read and write as they run. Each step is rewritten, with the same final state, so
that running its ops in any order gives the step's result, and so that every switch operation is one
``glres`` or ``gstore`` (mscclpp execution_kernel.hpp: a multimem load-reduce or store addresses the same
offset in every member of the switch channel's group, and the store reaches every member):

- *before* the step, a step of local copies saves into scratch every source the step also writes, and
  every switch operation's sources that do not sit at one index of one buffer (at one common scratch index);
- a switch operation whose targets are not exactly one index of one buffer on the ranks of its group
  (the sources' ranks for a reduction, the targets' with the source for a multicast), or that another
  transfer of the step reads, delivers instead to one fresh scratch index on every rank of the group
  (its sources' ranks and its targets' ranks), and *after* the step, a step of local copies puts the
  result where the targets are.

Scratch beyond the schedule's own is allocated per step; a switch operation takes the same index on
every rank of its group.
"""

from __future__ import annotations

from algorithms.errors import ScheduleError
from algorithms.ir import Buf, Endpoint, Kind, Op, Schedule, Step, SwitchOp, SwitchOpKind, Transfer, switch_ops_by_step

__all__ = ["IN_PLACE_KINDS", "fuse_reduce_multicast", "group_of", "in_place_form", "is_direct", "receive_across_nodes",
           "stage_reads"]

Slot = tuple[int, Buf, int]


def _slots(rank: int, buf: Buf, index: int, count: int) -> set[Slot]:
    return {(rank, buf, index + k) for k in range(count)}


def _ends(ends: tuple[Endpoint, ...], count: int) -> set[Slot]:
    return {s for e in ends for s in _slots(e.rank, e.buf, e.index, count)}


def _uniform(ends: tuple[Endpoint, ...]) -> bool:
    return len({(e.buf, e.index) for e in ends}) == 1 and len({e.rank for e in ends}) == len(ends)


def group_of(op: SwitchOp) -> tuple[int, ...]:
    """The ranks the switch channel of ``op``'s delivery spans: its sources' and its targets' ranks."""
    return tuple(sorted({e.rank for e in op.sources} | {e.rank for e in op.targets}))


def is_direct(op: SwitchOp) -> bool:
    """Whether ``op`` is one glres (reduction) or gstore (multicast) as it stands: sources at one place,
    targets at one place on exactly the ranks of its group."""
    targets = {e.rank for e in op.targets}
    if not (_uniform(op.sources) and _uniform(op.targets)):
        return False
    return targets == set(group_of(op))


class _Scratch:
    """Fresh scratch chunks of one step: per rank how many are taken; a group takes one index on all."""

    def __init__(self, base: int) -> None:
        self.base = base
        self.used: dict[int, int] = {}

    def take(self, ranks: tuple[int, ...] | list[int], count: int) -> int:
        at = max(self.used.get(r, 0) for r in ranks)
        for r in ranks:
            self.used[r] = at + count
        return self.base + at

    def most(self) -> int:
        return max(self.used.values(), default=0)


def stage_reads(schedule: Schedule) -> Schedule:
    """The schedule in the writer's form (see the module docstring), with the same final state; a schedule that
    is already in it is returned as it is."""
    base = schedule.scratch_chunks
    by_step = switch_ops_by_step(schedule)
    steps: list[Step] = []
    ops_out: list[SwitchOp] = []
    extra = 0
    changed = False
    for step, ops in zip(schedule.steps, by_step, strict=True):
        fresh = _Scratch(base)
        pre: list[Transfer] = []
        post: list[Transfer] = []
        reads = [_slots(t.src, t.src_buf, t.src_index, t.count) for t in step.transfers]
        op_reads = [_ends(op.sources, op.count) for op in ops]
        kept: list[SwitchOp] = []
        for i, op in enumerate(ops):
            others = set().union(*reads, *(r for j, r in enumerate(op_reads) if j != i))
            if is_direct(op) and not (_ends(op.targets, op.count) & others):
                kept.append(op)
                continue
            group = group_of(op)
            at = fresh.take(group, op.count)
            post.extend(Transfer(e.rank, e.rank, Buf.SCRATCH, at, e.buf, e.index, op.count) for e in op.targets)
            first = op.targets[0].rank  # stays first: the writer's issuer of a reduction
            order = [first, *(r for r in group if r != first)]
            kept.append(SwitchOp(op.op, op.switch, op.sources, tuple(Endpoint(r, Buf.SCRATCH, at) for r in order),
                                 op.count, op.step))
        written = set().union(*(_slots(t.dst, t.dst_buf, t.dst_index, t.count) for t in step.transfers),
                              *(_ends(op.targets, op.count) for op in kept))
        staged: dict[tuple[int, Buf, int, int], int] = {}
        out: list[Transfer] = []
        for t, r in zip(step.transfers, reads, strict=True):
            if not r & written:
                out.append(t)
                continue
            key = (t.src, t.src_buf, t.src_index, t.count)
            if key not in staged:
                staged[key] = fresh.take([t.src], t.count)
                pre.append(Transfer(t.src, t.src, t.src_buf, t.src_index, Buf.SCRATCH, staged[key], t.count))
            out.append(t._replace(src_buf=Buf.SCRATCH, src_index=staged[key]))
        final_ops = []
        for op in kept:
            # An op may read what it stores itself: glres loads and stores each element in turn.
            others = written - _ends(op.targets, op.count) | set().union(
                *(_ends(o.targets, o.count) for o in kept if o is not op))
            if _uniform(op.sources) and not (_ends(op.sources, op.count) & others):
                final_ops.append(op)
                continue
            at = fresh.take([e.rank for e in op.sources], op.count)
            pre.extend(Transfer(e.rank, e.rank, e.buf, e.index, Buf.SCRATCH, at, op.count) for e in op.sources)
            final_ops.append(SwitchOp(op.op, op.switch, tuple(Endpoint(e.rank, Buf.SCRATCH, at) for e in op.sources),
                                      op.targets, op.count, op.step))
        if pre:
            steps.append(Step(tuple(pre)))
        ops_out.extend(SwitchOp(op.op, op.switch, op.sources, op.targets, op.count, len(steps)) for op in final_ops)
        steps.append(Step(tuple(out)) if pre or post or final_ops != list(ops) else step)
        if post:
            steps.append(Step(tuple(post)))
        changed |= bool(pre or post) or final_ops != list(ops)
        extra = max(extra, fresh.most())
    if not changed:
        return schedule
    return Schedule(schedule.collective, schedule.name, steps, base + extra, switch_ops=ops_out)



def receive_across_nodes(schedule: Schedule, node: list[int]) -> Schedule:
    """The schedule with every reduction between ranks of different nodes (``node[r]``) received first: the
    sender copies into fresh scratch of the receiver in the transfer's step, and a step after it adds that
    locally. Port channels write remote memory but cannot read it, so ``rre`` has no cross-node form."""
    base = schedule.scratch_chunks
    if not any(t.op is Op.REDUCE and node[t.src] != node[t.dst] for step in schedule.steps for t in step.transfers):
        return schedule
    shift = 0
    steps: list[Step] = []
    ops: list[SwitchOp] = []
    extra = 0
    for si, (step, sw) in enumerate(zip(schedule.steps, switch_ops_by_step(schedule), strict=True)):
        fresh = _Scratch(base)
        out: list[Transfer] = []
        post: list[Transfer] = []
        for t in step.transfers:
            if t.op is Op.REDUCE and node[t.src] != node[t.dst]:
                at = fresh.take([t.dst], t.count)
                out.append(t._replace(dst_buf=Buf.SCRATCH, dst_index=at, op=Op.COPY))
                post.append(Transfer(t.dst, t.dst, Buf.SCRATCH, at, t.dst_buf, t.dst_index, t.count, Op.REDUCE))
            else:
                out.append(t)
        ops.extend(SwitchOp(o.op, o.switch, o.sources, o.targets, o.count, si + shift) for o in sw)
        steps.append(Step(tuple(out)))
        if post:
            steps.append(Step(tuple(post)))
            shift += 1
        extra = max(extra, fresh.most())
    return Schedule(schedule.collective, schedule.name, steps, base + extra, switch_ops=ops)


def _touches(step: Step, ops: list[SwitchOp], skip: set[int]) -> tuple[set[Slot], set[Slot]]:
    """The slots a step reads and writes (a reduction reads its destination), leaving out the ops in ``skip``
    (by ``id``)."""
    reads: set[Slot] = set()
    writes: set[Slot] = set()
    for t in step.transfers:
        reads |= _slots(t.src, t.src_buf, t.src_index, t.count)
        dst = _slots(t.dst, t.dst_buf, t.dst_index, t.count)
        writes |= dst
        if t.op is Op.REDUCE:
            reads |= dst
    for op in ops:
        if id(op) not in skip:
            reads |= _ends(op.sources, op.count)
            writes |= _ends(op.targets, op.count)
    return reads, writes


def _dead_after(slots: set[Slot], steps: tuple[Step, ...], by_step: list[list[SwitchOp]], start: int,
                skip: set[int]) -> bool:
    """Whether no step from ``start`` on reads any of ``slots`` before writing it."""
    live = set(slots)
    for si in range(start, len(steps)):
        reads, writes = _touches(steps[si], by_step[si], skip)
        if live & reads:
            return False
        live -= writes
        if not live:
            return True
    return True


def fuse_reduce_multicast(schedule: Schedule) -> Schedule:
    """The schedule with each in-switch reduction to one owner, followed in the next step by the owner's
    multicast of the result to the rest of the group, done as one reduction to the whole group in the first
    step: NVLS's ld_reduce + st pair, one ``glres`` (what MSCCL++'s own NVLS all-reduce runs).

    Only where nothing else in the two steps touches the group's destination slots, and the owner's
    intermediate slot is either the destination itself or a scratch slot no later step reads before writing
    it; so the input and output buffers end as before."""
    by_step = switch_ops_by_step(schedule)
    steps = schedule.steps
    replace: dict[int, SwitchOp] = {}
    drop: set[int] = set()
    for s in range(len(steps) - 1):
        multicasts = [m for m in by_step[s + 1] if m.op is SwitchOpKind.MULTICAST and id(m) not in drop]
        for r in by_step[s]:
            if r.op is not SwitchOpKind.REDUCE or len(r.targets) != 1 or not _uniform(r.sources):
                continue
            owner = r.targets[0]
            group = {e.rank for e in r.sources}
            m = next((m for m in multicasts if m.sources[0] == owner and m.count == r.count and _uniform(m.targets)
                      and {e.rank for e in m.targets} | {owner.rank} == group and owner.rank in group), None)
            if m is None:
                continue
            place = (m.targets[0].buf, m.targets[0].index)
            if owner.rank not in {e.rank for e in m.targets} and (owner.buf, owner.index) != place:
                continue  # the owner keeps the sum only in its own slot, which the fused op would not write
            dest = {s_ for g in group for s_ in _slots(g, place[0], place[1], r.count)}
            skip = {id(r), id(m)}
            reads_s, writes_s = _touches(steps[s], by_step[s], skip)
            reads_n, writes_n = _touches(steps[s + 1], by_step[s + 1], skip)
            if dest & (reads_s | writes_s | reads_n | writes_n):
                continue
            mid = _slots(owner.rank, owner.buf, owner.index, r.count)
            if not mid <= dest and (owner.buf is not Buf.SCRATCH
                                    or not _dead_after(mid, steps, by_step, s + 1, skip)):
                continue
            order = [owner.rank, *sorted(group - {owner.rank})]  # the owner first: it issues the glres
            replace[id(r)] = SwitchOp(r.op, r.switch, r.sources,
                                      tuple(Endpoint(g, place[0], place[1]) for g in order), r.count, r.step)
            drop.add(id(m))
            multicasts.remove(m)
    if not replace:
        return schedule
    ops = [replace.get(id(o), o) for o in schedule.switch_ops if id(o) not in drop]
    return Schedule(schedule.collective, schedule.name, steps, schedule.scratch_chunks, switch_ops=ops)


IN_PLACE_KINDS = (Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLTOALL)
"""Kinds the writer also writes in place, as MSCCL++'s DSL does by default."""


def in_place_form(schedule: Schedule) -> Schedule:
    """The schedule with input and output as the one buffer MSCCL++'s in-place layout has (its DSL's
    ``get_buffer_index``): an all-gather's input is the rank's slice of the output (input[k] is
    output[r·C + k]), a reduce-scatter's output the rank's slice of the input (output[k] is input[r·C + k]),
    an all-to-all's output its input. Copies a slot onto itself go, and so do steps left empty. Not a collsched
    schedule any more (it reads slots before the collective fills them): the writer's form, which
    ``stage_reads`` then keeps from reading what a step overwrites."""
    coll = schedule.collective
    kind, c = coll.kind, coll.chunks
    if kind not in IN_PLACE_KINDS:
        raise ScheduleError(f"mscclpp: a {kind} has no in-place form besides its own (in place: "
                            f"{', '.join(k.value for k in IN_PLACE_KINDS)})")

    def move(rank: int, buf: Buf, index: int) -> tuple[Buf, int]:
        if kind is Kind.ALLGATHER and buf is Buf.INPUT:
            return Buf.OUTPUT, rank * c + index
        if kind is Kind.REDUCESCATTER and buf is Buf.OUTPUT:
            return Buf.INPUT, rank * c + index
        if kind is Kind.ALLTOALL and buf is Buf.OUTPUT:
            return Buf.INPUT, index
        return buf, index

    steps: list[list[Transfer]] = []
    ops: list[SwitchOp] = []
    for step, sw in zip(schedule.steps, switch_ops_by_step(schedule), strict=True):
        out = []
        for t in step.transfers:
            sb, si = move(t.src, t.src_buf, t.src_index)
            db, di = move(t.dst, t.dst_buf, t.dst_index)
            if not (t.op is Op.COPY and t.src == t.dst and (sb, si) == (db, di)):
                out.append(Transfer(t.src, t.dst, sb, si, db, di, t.count, t.op))
        if not out and not sw:
            continue
        ops.extend(SwitchOp(o.op, o.switch, tuple(Endpoint(e.rank, *move(e.rank, e.buf, e.index)) for e in o.sources),
                            tuple(Endpoint(e.rank, *move(e.rank, e.buf, e.index)) for e in o.targets), o.count,
                            len(steps)) for o in sw)
        steps.append(out)
    return Schedule(coll, schedule.name, steps, schedule.scratch_chunks, switch_ops=ops)
