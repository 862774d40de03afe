"""Reading MSCCL++ execution plans back as collsched schedules: ``from_plan``, ``loads_plan``, ``load_plan``.

The reader covers the subset the writer emits and a little more (docs/design.md, "MSCCL++ execution
plans"): ops ``copy``, ``re``, ``rre``, ``put`` (memory or port channel), ``get``, ``glres`` and ``gstore``,
synchronised by ``nop``, ``signal``/``wait`` (and their relaxed forms) and ``flush``. Each thread block runs
its ops in order; a run of data ops with no ``nop`` or sync between them is one concurrent group. Every
group is placed at the earliest lockstep step its happens-before allows: one after the thread block's
previous group, and one after whatever the GPU that sent a signal it waited for had done by then (the
k-th wait on a channel meets the k-th signal of its partner: the k-th channel of the other GPU back to
this one). Anything else (packets, pipelines, semaphores, thread-block barriers, reduce-and-send) is
refused with the op's place and name.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from algorithms.errors import ScheduleError
from algorithms.formats.mscclpp.plan import SYNC_OPS, ExecutionPlan, PlanBuffer, PlanOp, looks_like_plan, parse_plan
from algorithms.formats.schedule import read_bytes
from algorithms.ir import Buf, Collective, Endpoint, Kind, Op, Schedule, SwitchOp, SwitchOpKind, Transfer

__all__ = ["from_plan", "load_plan", "loads_plan", "looks_like_plan"]

_WIDE_INPUT = (Kind.REDUCESCATTER, Kind.SCATTER, Kind.ALLTOALL)
_WIDE_OUTPUT = (Kind.ALLGATHER, Kind.GATHER)
_DATA_OPS = ("copy", "re", "rre", "put", "pws", "pwsf", "get", "glres", "gstore")
_QUIET = ("nop", "flush")


def _collective(plan: ExecutionPlan) -> Collective:
    try:
        kind = Kind(plan.collective)
    except ValueError:
        raise ScheduleError(f"plan: collective {plan.collective!r} is not one of "
                            f"{', '.join(k.value for k in Kind)}") from None
    if kind is Kind.BARRIER:
        raise ScheduleError("plan: collective barrier has no data; plans hold the other kinds")
    p = len(plan.gpus)
    if plan.inplace != (kind in (Kind.ALLREDUCE, Kind.BROADCAST, Kind.REDUCE)):
        raise ScheduleError(f"plan: inplace is {str(plan.inplace).lower()}, but collsched's {kind} is "
                            f"{'in-place' if not plan.inplace else 'out-of-place'}")
    root = plan.root
    if root is not None and root >= p:
        raise ScheduleError(f"plan: root {root} out of range 0..{p - 1}")
    ref = plan.gpus[root if root is not None else 0]
    if kind in _WIDE_INPUT:
        total, what = ref.input_chunks, "input_chunks"
    elif kind in _WIDE_OUTPUT:
        total, what = ref.output_chunks, "output_chunks"
    else:
        total, what = ref.input_chunks, "input_chunks"
    per = p if kind in _WIDE_INPUT + _WIDE_OUTPUT else 1
    if total < per or total % per:
        raise ScheduleError(f"gpu {ref.id}: {what} {total} is not a positive multiple of {per} for a {kind}")
    coll = Collective(kind, p, total // per, root=root)
    for g in plan.gpus:
        want_in = coll.input_chunks(g.id)
        want_out = want_in if coll.in_place else coll.output_chunks(g.id)
        for what, got, want in (("input_chunks", g.input_chunks, want_in), ("output_chunks", g.output_chunks,
                                                                            want_out)):
            if got != want:
                raise ScheduleError(f"gpu {g.id}: {what} is {got}, but a {coll.describe()} has {want}")
    if len({g.scratch_chunks for g in plan.gpus}) != 1:
        raise ScheduleError("plan: scratch_chunks differ between gpus; collsched gives every rank the same scratch")
    return coll


@dataclass(slots=True)
class _Stream:
    """One thread block while the plan is replayed: where it is, the step its last group took, its open group."""

    gpu: int
    ops: tuple[PlanOp, ...]
    pc: int = 0
    clock: int = -1
    group: int | None = None
    placed: list[tuple[int, PlanOp]] = field(default_factory=list)

    def close(self) -> None:
        if self.group is not None:
            self.clock, self.group = self.group, None


def _levels(plan: ExecutionPlan) -> list[tuple[int, int, PlanOp]]:
    """Every data op with its step, by replaying the thread blocks with their signals and waits."""
    streams = [_Stream(g.id, tb.ops) for g in plan.gpus for tb in g.threadblocks]
    of_gpu: dict[int, list[int]] = {}
    for i, o in enumerate(streams):
        of_gpu.setdefault(o.gpu, []).append(i)
    sent: dict[tuple[int, int, str, int], deque[int]] = {}  # (from, to, type, k-th channel) -> clocks signalled
    ready = deque(range(len(streams)))
    queued = set(ready)
    while ready:
        i = ready.popleft()
        queued.discard(i)
        s = streams[i]
        woken: set[int] = set()
        while s.pc < len(s.ops):
            op = s.ops[s.pc]
            if op.name in _DATA_OPS:
                if s.group is None:
                    s.group = s.clock + 1
                s.placed.append((s.group, op))
                if op.name in ("pws", "pwsf"):  # the put's own signal, sent once its data has landed
                    s.close()
                    for peer, k in op.channels:
                        sent.setdefault((s.gpu, peer, op.channel_type, k), deque()).append(s.clock)
                        woken.add(peer)
            elif op.name in _QUIET:
                s.close()
            elif op.name in ("signal", "rlxsignal"):
                s.close()
                for peer, k in op.channels:
                    sent.setdefault((s.gpu, peer, op.channel_type, k), deque()).append(s.clock)
                    woken.add(peer)
            elif op.name in ("wait", "rlxwait"):
                s.close()
                if not all(sent.get((peer, s.gpu, op.channel_type, k)) for peer, k in op.channels):
                    break
                for peer, k in op.channels:
                    s.clock = max(s.clock, sent[(peer, s.gpu, op.channel_type, k)].popleft())
            else:
                raise ScheduleError(f"{op.where}: op {op.name!r} is outside the subset this reader covers "
                                    f"({', '.join(_DATA_OPS + _QUIET + tuple(sorted(SYNC_OPS)))})")
            s.pc += 1
        if s.pc == len(s.ops):
            s.close()
        for g in woken:  # only a signal can let a waiting thread block go on
            for j in of_gpu.get(g, []):
                if j not in queued and streams[j].pc < len(streams[j].ops):
                    ready.append(j)
                    queued.add(j)
    stuck = [o for o in streams if o.pc < len(o.ops)]
    if stuck:
        raise ScheduleError(f"{stuck[0].ops[stuck[0].pc].where}: waits for a signal no gpu sends (the plan "
                            "deadlocks)")
    return [(level, o.gpu, op) for o in streams for level, op in o.placed]


def _slot(b: PlanBuffer, coll: Collective, scratch: int, where: str) -> tuple[int, Buf, int]:
    buf = Buf.INPUT if coll.in_place and b.buf is Buf.OUTPUT else b.buf
    size = scratch if buf is Buf.SCRATCH else (coll.input_chunks(b.rank) if buf is Buf.INPUT
                                                 else coll.output_chunks(b.rank))
    if b.index + b.size > size:
        raise ScheduleError(f"{where}: index {b.index} size {b.size} out of range for gpu {b.rank} "
                            f"{buf} of {size} chunks")
    return b.rank, buf, b.index


def _transfers(op: PlanOp, gpu: int, coll: Collective, scratch: int) -> list[Transfer]:
    """The transfers one data op stands for (all in one step: the op reads before it writes)."""
    w = op.where

    def one(b: PlanBuffer, field_: str) -> tuple[int, Buf, int]:
        return _slot(b, coll, scratch, f"{w} {field_}")

    def need(ok: bool, why: str) -> None:
        if not ok:
            raise ScheduleError(f"{w}: {op.name} {why}")

    if op.reduce_op not in (None, "sum"):
        raise ScheduleError(f"{w}: reduce_op {op.reduce_op!r}; collsched's reduce is a sum")
    need(all(b.size == op.src[0].size for b in op.src + op.dst) if op.src else False,
         "needs src_buff ranges, all of one size")
    n = op.src[0].size
    out: list[Transfer] = []
    if op.name in ("copy", "get", "put", "pws", "pwsf"):
        need(len(op.src) == len(op.dst), "needs as many src_buff as dst_buff ranges")
        if op.name == "get":
            # The executor's get reads the remote at the dst index and writes the local at the src index
            # (execution_kernel.hpp, handleGet): only equal indices mean one thing.
            need(all(s.index == d.index for s, d in zip(op.src, op.dst, strict=True)),
                 "with different src and dst indices is read differently by the executor; not covered")
        for s, d in zip(op.src, op.dst, strict=True):
            local = (d if op.name == "get" else s).via == "local"
            need(local and (op.name == "copy") == (s.via == d.via == "local"),
                 "moves data between the wrong kinds of buffer (local, remote)")
            sr, sb, sx = one(s, "src_buff")
            dr, db, dx = one(d, "dst_buff")
            out.append(Transfer(sr, dr, sb, sx, db, dx, n, Op.COPY))
        return out
    if op.name in ("re", "rre"):
        need(len(op.dst) == 1 and op.dst[0].via == "local" and op.src[0].via == "local",
             "needs one local dst_buff and a local first src_buff")
        need((op.src[0].buf, op.src[0].index) == (op.dst[0].buf, op.dst[0].index),
             "whose first src_buff is not its dst_buff is not covered (collsched reduces into the destination)")
        remote = op.name == "rre"
        need(all((b.via != "local") == remote for b in op.src[1:]) and len(op.src) > 1,
             f"needs {'remote' if remote else 'local'} src_buff ranges after the first")
        dr, db, dx = one(op.dst[0], "dst_buff[0]")
        for i, b in enumerate(op.src[1:], 1):
            sr, sb, sx = one(b, f"src_buff[{i}]")
            out.append(Transfer(sr, dr, sb, sx, db, dx, n, Op.REDUCE))
        return out
    raise ScheduleError(f"{w}: {op.name} is not a transfer")


def _switch_op(op: PlanOp, step: int, coll: Collective, scratch: int) -> SwitchOp:
    """The switch operation of a glres (every member's chunk reduced, stored to every member of the dst
    channel's group) or a gstore (one local chunk stored to every member)."""
    w = op.where
    if len(op.src) != 1 or len(op.dst) != 1 or op.dst[0].via != "switch":
        raise ScheduleError(f"{w}: {op.name} needs one src_buff and one dst_buff range on a switch channel")
    s, d = op.src[0], op.dst[0]
    if s.size != d.size:
        raise ScheduleError(f"{w}: {op.name} src_buff size {s.size} and dst_buff size {d.size} differ")
    if op.reduce_op not in (None, "sum"):
        raise ScheduleError(f"{w}: reduce_op {op.reduce_op!r}; collsched's reduce is a sum")
    if op.name == "glres" and s.via != "switch":
        raise ScheduleError(f"{w}: glres reads through a switch channel (src_buff switch_channel_id)")
    if op.name == "gstore" and s.via != "local":
        raise ScheduleError(f"{w}: gstore stores a local chunk (src_buff type)")
    sources = [PlanBuffer(r, s.buf, s.index, s.size, "switch") for r in s.group] if op.name == "glres" else [s]
    ends = [[Endpoint(*_slot(b, coll, scratch, f"{w} {side}")) for b in bs]
            for side, bs in (("src_buff", sources), ("dst_buff", [PlanBuffer(r, d.buf, d.index, d.size, "switch")
                                                                  for r in d.group]))]
    kind = SwitchOpKind.REDUCE if op.name == "glres" else SwitchOpKind.MULTICAST
    return SwitchOp(kind, op.switch or "any", tuple(ends[0]), tuple(ends[1]), s.size, step)


def from_plan(source: str | bytes | ExecutionPlan | dict[str, Any], *, name: str | None = None) -> Schedule:
    """The schedule an MSCCL++ execution plan runs (text, parsed JSON or an ``ExecutionPlan``)."""
    plan = source if isinstance(source, ExecutionPlan) else parse_plan(source)
    if plan.protocol != "Simple":
        raise ScheduleError(f"plan: protocol {plan.protocol!r}; the reader covers Simple (LL packs flags into "
                            "the data)")
    coll = _collective(plan)
    scratch = plan.gpus[0].scratch_chunks
    steps: dict[int, list[Transfer]] = {}
    switch: list[tuple[int, PlanOp]] = []
    for level, gpu, op in _levels(plan):
        steps.setdefault(level, [])
        if op.name in ("glres", "gstore"):
            switch.append((level, op))
        else:
            steps[level].extend(_transfers(op, gpu, coll, scratch))
    number = {level: k for k, level in enumerate(sorted(steps))}
    ops = [_switch_op(op, number[level], coll, scratch) for level, op in switch]
    try:
        return Schedule(coll, name or plan.name or "mscclpp", [steps[k] for k in sorted(steps)], scratch,
                        switch_ops=ops)
    except ScheduleError as e:
        raise ScheduleError(f"plan: {e}") from None


def loads_plan(text: str | bytes, *, name: str | None = None) -> Schedule:
    """The schedule of plan JSON text."""
    return from_plan(text, name=name)


def load_plan(path: str | os.PathLike[str], *, name: str | None = None) -> Schedule:
    """The schedule of a plan file; errors name the file."""
    data = read_bytes(path)
    try:
        return from_plan(data, name=name)
    except ScheduleError as e:
        raise ScheduleError(f"{path}: {e}") from None
