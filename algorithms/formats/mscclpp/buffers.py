"""Where a plan's buffers sit in collsched's: the collective a plan computes, in-place aliasing, thread-block
group slices, and the scratch that packets and out-of-place results take (``layout_of``).

MSCCL++'s DSL writes all-gather, reduce-scatter and all-to-all in place by default (its ``Collective``
classes, ``get_buffer_index``): an in-place all-gather's input is the rank's own slice of its output
(``i[k]`` is ``o[r·C + k]``), an in-place reduce-scatter's output is the rank's slice of its input
(``o[k]`` is ``i[r·C + k]``), an in-place all-to-all or all-reduce has one buffer (``o`` is ``i``).
collsched's all-gather, reduce-scatter and all-to-all are out-of-place, so a plan's buffer maps onto one
collsched buffer (its *home*) at a fixed offset, and the collective's ends are joined by local copies:

- all-gather in place: the home of ``i`` and ``o`` is the output; a *prelude* copies the input into the
  rank's slice before the plan's first op;
- reduce-scatter in place: the home is the input; a *postlude* copies the rank's slice to the output after
  the plan's last op;
- all-to-all in place: the home is the input; the postlude copies all of it to the output;
- all-reduce, broadcast and reduce out of place (collsched's are in place): the plan's output lives in a
  scratch region of its own, and the postlude copies it onto the input;
- ``sendrecv`` (each rank sends its input to one other's output: two ranks to each other, or around the
  ring of groups of MSCCL++'s multi-node send_recv.py) is collsched's all-to-allv whose traffic matrix has C
  from each sender to its receiver (``_senders``); in place, its home is the input and the postlude copies it
  to the output; a broadcast or reduce that names no root takes the one the writes point at (``_root``);
- ``test`` (the DSL's op-level unit plans, no postcondition) reads as a ``custom:`` all-reduce-shaped
  schedule, for simulation only: ``i`` is the input, ``o`` a scratch region.

Packets (the LL protocol's data-and-flag format) are a buffer of their own: a packet op addresses packet
slot k of a buffer, which the executor keeps at twice the offset in the same memory; collsched keeps each
packet space (``ps``, ``pi``, ``po``) in a scratch region after the plain scratch. ``tbg_info`` (one op
split over a group of thread blocks) cuts every chunk into ``refine`` parts, the least common multiple of
the plan's group sizes, so that each part of the group moves its own slice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from algorithms.errors import ScheduleError
from algorithms.formats.mscclpp.plan import ExecutionPlan, PlanOp
from algorithms.ir import Buf, Collective, Kind, Transfer

__all__ = ["Layout", "PACKET", "layout_of"]

PACKET = {"s": "ps", "i": "pi", "o": "po"}
"""The packet space of a buffer letter."""
_PLAIN = {Buf.INPUT: "i", Buf.OUTPUT: "o", Buf.SCRATCH: "s"}
_SPACE_NAME = {"i": "input", "o": "output", "s": "scratch", "ps": "scratch packets", "pi": "input packets",
               "po": "output packets"}
_KINDS = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce", "sendrecv", "test")


@dataclass(slots=True)
class Layout:
    """The map from (rank, space, chunk) of a plan to collsched slots, in refined chunks (``refine`` a chunk).

    ``home[space]`` is (buffer, offset per rank as a multiple of C, extra offset) for the plain spaces;
    ``region[space]`` the scratch offset of a space kept in scratch (packets, an out-of-place result)."""

    collective: Collective
    name: str
    refine: int
    chunks: int
    """C: a plan chunk count per piece (the collective's chunks are ``chunks * refine``)."""
    sizes: dict[tuple[int, str], int]
    """Chunks each (rank, plain space) of the plan declares."""
    home: dict[str, tuple[Buf, int]]
    """Plain space -> (collsched buffer, rank stride in plan chunks: slot of chunk k of rank r is r·stride + k)."""
    scratch: int
    """Refined scratch chunks taken so far (plain scratch, then regions)."""
    region: dict[str, int] = field(default_factory=dict)
    prelude: list[Transfer] = field(default_factory=list)
    postlude: list[Transfer] = field(default_factory=list)
    custom: bool = False

    def size(self, rank: int, space: str) -> int:
        """Chunks of a (rank, space) of the plan: a packet space holds as many packets as its buffer chunks."""
        return self.sizes[(rank, space[-1])]

    def slots(self, rank: int, space: str, index: int, size: int, tbg: tuple[int, int] | None,
              where: str) -> tuple[Buf, int, int]:
        """The collsched (buffer, index, count) of chunks [index, index + size) of (rank, space), the part
        ``tbg`` (tb_id, tbg_size) takes of them; ``ScheduleError`` naming ``where`` when out of range."""
        have = self.sizes[(rank, space[-1])]
        if index + size > have:
            raise ScheduleError(f"{where}: index {index} size {size} out of range for gpu {rank} "
                                f"{_SPACE_NAME[space]} of {have} chunks")
        r = self.refine
        start, n = index * r, size * r
        if tbg is not None:
            part = n // tbg[1]
            start, n = start + tbg[0] * part, part
        if space in self.home:
            buf, stride = self.home[space]
            return buf, rank * stride * r + start, n
        return Buf.SCRATCH, self._region(space) + start, n

    def _region(self, space: str) -> int:
        at = self.region.get(space)
        if at is None:
            most = max(v for (_, s), v in self.sizes.items() if s == space[-1])
            at = self.region[space] = self.scratch
            self.scratch += most * self.refine
        return at

    def describe(self, rank: int, buf: Buf, index: int) -> str:
        """A collsched slot in the plan's terms, e.g. ``gpu 1 o[3]`` (a refined part: ``o[3] part 2/4``)."""
        r = self.refine
        for space, (b, stride) in self.home.items():
            if b is buf:
                k = index - rank * stride * r
                if 0 <= k < self.size(rank, space) * r:
                    return _chunk(rank, space, k, r)
        if buf is Buf.SCRATCH:
            for space, at in self.region.items():
                if at <= index < at + self.size(rank, space) * r:  # (a region may be empty: o of a test plan)
                    return _chunk(rank, space, index - at, r)
        return f"gpu {rank} {buf}[{index}]"


def _chunk(rank: int, space: str, k: int, r: int) -> str:
    part = f" part {k % r + 1}/{r}" if r > 1 else ""
    return f"gpu {rank} {space}[{k // r}]{part}"


def _ops(plan: ExecutionPlan) -> list[PlanOp]:
    return [o for g in plan.gpus for tb in g.threadblocks for op in tb.ops for o in (op, *op.inner)]


def layout_of(plan: ExecutionPlan) -> Layout:
    """The layout of ``plan`` (module docstring); ``ScheduleError`` for a collective collsched cannot hold or
    buffer sizes that do not fit it."""
    kind = plan.collective
    if kind not in _KINDS:
        raise ScheduleError(f"plan: collective {kind!r} is not one collsched reads ({', '.join(_KINDS)})")
    p = len(plan.gpus)
    refine = math.lcm(1, *(op.tbg[1] for op in _ops(plan) if op.tbg is not None))
    sizes = {(g.id, s): n for g in plan.gpus for s, n in (("i", g.input_chunks), ("o", g.output_chunks),
                                                          ("s", g.scratch_chunks))}
    scratch = max(g.scratch_chunks for g in plan.gpus)
    root = plan.root
    if root is not None and root >= p:
        raise ScheduleError(f"plan: root {root} out of range 0..{p - 1}")
    if kind == "test":
        c = max([1] + [n for (_, s), n in sizes.items() if s in "io"])
        lay = Layout(Collective(Kind.ALLREDUCE, p, c * refine), f"custom:{plan.name}", refine, c, sizes,
                     {"i": (Buf.INPUT, 0), "s": (Buf.SCRATCH, 0)}, scratch * refine, custom=True)
        lay._region("o")
        return lay
    ref = plan.gpus[root if root is not None else 0]
    wide_in = kind in ("reducescatter", "alltoall")
    per = p if wide_in else 1
    total = ref.input_chunks
    if total < per or total % per:
        raise ScheduleError(f"gpu {ref.id}: input_chunks {total} is not a positive multiple of {per} for a {kind}")
    c = total // per
    inplace = plan.inplace
    want_out = {"allgather": p * c, "alltoall": p * c, "reducescatter": c if not inplace else None}.get(kind, c)
    for g in plan.gpus:
        for what, got, want in (("input_chunks", g.input_chunks, total), ("output_chunks", g.output_chunks, want_out)):
            if want is not None and got != want:
                how = "an in-place" if inplace else "an out-of-place"
                raise ScheduleError(f"gpu {g.id}: {what} is {got}, but {how} {kind} of {p} gpus with {total} input "
                                    f"chunks has {want}")
    if kind == "sendrecv":
        src = _senders(plan)
        n = c * refine
        coll = Collective(Kind.ALLTOALLV, p, matrix=tuple(tuple(n if src[q] == r else 0 for q in range(p))
                                                          for r in range(p)))
    else:
        rooted = kind in ("broadcast", "reduce")
        if rooted and root is None:
            root = _root(plan, kind)
        coll = Collective(Kind(kind), p, c * refine, root=(root or 0) if rooted else None)
    lay = Layout(coll, plan.name or "mscclpp", refine, c, sizes, {}, scratch * refine)
    lay.home["s"] = (Buf.SCRATCH, 0)
    n = c * refine
    if kind == "allgather":
        lay.home["o"] = (Buf.OUTPUT, 0)
        if inplace:
            lay.home["i"] = (Buf.OUTPUT, c)  # i[k] of rank r is o[r·C + k]
            lay.prelude = [Transfer(r, r, Buf.INPUT, 0, Buf.OUTPUT, r * n, n) for r in range(p)]
        else:
            lay.home["i"] = (Buf.INPUT, 0)
    elif kind in ("reducescatter", "alltoall", "sendrecv"):
        lay.home["i"] = (Buf.INPUT, 0)
        if not inplace:
            lay.home["o"] = (Buf.OUTPUT, 0)
        elif kind == "reducescatter":
            lay.home["o"] = (Buf.INPUT, c)  # o[k] of rank r is i[r·C + k]
            lay.postlude = [Transfer(r, r, Buf.INPUT, r * n, Buf.OUTPUT, 0, n) for r in range(p)]
        else:
            lay.home["o"] = (Buf.INPUT, 0)
            lay.postlude = [Transfer(r, r, Buf.INPUT, 0, Buf.OUTPUT, 0, coll.output_chunks(r)) for r in range(p)]
    else:  # allreduce, broadcast, reduce: collsched's are in place
        lay.home["i"] = (Buf.INPUT, 0)
        if inplace:
            lay.home["o"] = (Buf.INPUT, 0)
        else:
            at = lay._region("o")
            ranks = range(p) if kind != "reduce" else [coll.root or 0]
            lay.postlude = [Transfer(r, r, Buf.SCRATCH, at, Buf.INPUT, 0, n) for r in ranks]
    return lay


def _writes(plan: ExecutionPlan) -> list[tuple[int, int, Buf]]:
    """(writer gpu, owner gpu, buffer) of every range an op writes (a ``get`` writes where it reads from too:
    listed as written by its source's owner, the GPU the data comes from)."""
    out: list[tuple[int, int, Buf]] = []
    for op in _ops(plan):
        if op.name == "get":
            out.extend((s.rank, op.gpu, d.buf) for s, d in zip(op.src, op.dst, strict=False))
        else:
            out.extend((op.gpu, d.rank, d.buf) for d in op.dst for _ in [0] if d.via != "switch")
    return out


def _senders(plan: ExecutionPlan) -> list[int]:
    """For a ``sendrecv``, the GPU each GPU receives from: the one other GPU that writes its result buffer (two
    GPUs: each other). MSCCL++'s DSL shifts data around a ring of groups (its multi_node/send_recv.py); the
    plan does not say how, so the reader takes it from the writes (``ScheduleError`` when they do not make a
    permutation: each GPU receiving from one other and sending to one other)."""
    p = len(plan.gpus)
    if p == 2:
        return [1, 0]
    result = Buf.INPUT if plan.inplace else Buf.OUTPUT
    src: list[set[int]] = [set() for _ in range(p)]
    for writer, owner, buf in _writes(plan):
        if writer != owner and buf is result:
            src[owner].add(writer)
    if any(len(s) != 1 for s in src) or sorted(next(iter(s)) for s in src) != list(range(p)):
        raise ScheduleError(f"plan: a sendrecv of {p} gpus whose remote writes into the result buffers do not say "
                            "who sends to whom (each gpu must receive from one other and send to one other)")
    return [next(iter(s)) for s in src]


def _root(plan: ExecutionPlan, kind: str) -> int:
    """The root of a broadcast or reduce plan that names none (the DSL writes no ``root``): for a broadcast the
    one GPU no data flows into, for a reduce the one GPU no data flows out of; else 0."""
    into: set[int] = set()
    out_of: set[int] = set()
    for op in _ops(plan):
        for b in op.src:
            for q in (b.group if b.via == "switch" else (b.rank,)):
                if q != op.gpu:
                    into.add(op.gpu)
                    out_of.add(q)
        for b in op.dst:
            for q in (b.group if b.via == "switch" else (b.rank,)):
                if q != op.gpu:
                    into.add(q)
                    out_of.add(op.gpu)
    quiet = out_of if kind == "reduce" else into
    pick = [g.id for g in plan.gpus if g.id not in quiet]
    return pick[0] if len(pick) == 1 else 0


def plain_space(buf: Buf) -> str:
    """The plan's letter of a collsched buffer (``i``, ``o``, ``s``)."""
    return _PLAIN[buf]
