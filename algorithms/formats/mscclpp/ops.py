"""What each op of an MSCCL++ plan does to data: ``effect_of`` an op, in the plan's own terms.

Written from the executor's handlers (mscclpp src/include/execution_kernel.hpp) and the DSL's op classes
(python/mscclpp/language/internal/operations.py); the ops, in our words:

- ``copy``: each source range to its destination range, on the GPU. ``put`` (and ``pws``, ``pwsf``): each
  local source to a remote destination; over a memory channel the thread block writes it, over a port
  channel the channel's proxy does, later, and ``pws``/``pwsf`` then signal the channel (``pwsf`` also
  waits for the proxy: a flush). ``get``: each remote source to a local destination.
- ``re``/``rre``: the first source plus every other source (local for ``re``, remote for ``rre``) into the
  first destination; ``res``/``rres`` also copy that sum to every other destination (remote).
- Packets (the LL protocol): a packet slot holds data with a flag, and a read of a packet slot waits until
  the slot was written in this run. ``cpkt`` packs local data into local packet slots, ``upkt`` unpacks
  local scratch packets into a buffer, ``ppkt`` packs local data into a peer's scratch packets (over a port
  channel: copies local packets there), ``rppkt`` forwards local scratch packets to peers' scratch packets,
  ``repkt`` adds local scratch packets to the first source into the first destination, ``respkt`` also
  sends the sum as packets to peers, ``recpkt``/``recspkt`` as these and keep a packet copy in the second
  destination.
- Switch channels (NVLink SHARP): ``glres`` reduces a range over every member of the source channel's
  group and stores the sum in every member of the destination's; ``gstore`` stores a local range in every
  member; ``gstorepkt`` stores local scratch packets as packets in every member.

An effect is a short sequence of *phases*: the phase's moves read their sources and write their
destinations together, and a phase runs after the one before it (a reduction into another slot first
copies the first source there, then adds the rest, then sends the sum).
"""

from __future__ import annotations

from typing import NamedTuple

from algorithms.errors import ScheduleError
from algorithms.formats.mscclpp.buffers import PACKET
from algorithms.formats.mscclpp.plan import CODE_BUF, PlanBuffer, PlanOp
from algorithms.ir import Buf, Op

__all__ = ["Effect", "Move", "Ref", "SwitchMove", "DATA_OPS", "PROXY_OPS", "effect_of"]

_LETTER = {v: k for k, v in CODE_BUF.items()}
DATA_OPS = frozenset({"copy", "put", "pws", "pwsf", "get", "re", "res", "rre", "rres", "ppkt", "rppkt", "cpkt",
                      "upkt", "repkt", "respkt", "recpkt", "recspkt", "glres", "gstore", "gstorepkt"})
PROXY_OPS = frozenset({"put", "pws", "pwsf", "ppkt"})
"""Ops a port channel's proxy carries out (when their channel_type is port)."""


class Ref(NamedTuple):
    """A range of the plan: ``size`` chunks of (rank, space) from ``index`` (space ``i``/``o``/``s``, or a
    packet space ``pi``/``po``/``ps``). A NamedTuple: plans hold many of them."""

    rank: int
    space: str
    index: int  # type: ignore[assignment]  # shadows tuple.index, as Transfer's count does tuple.count
    size: int

    def text(self) -> str:
        return f"gpu {self.rank} {self.space}[{self.index}:{self.index + self.size}]"


class Move(NamedTuple):
    """dst := src (copy) or dst := dst ⊕ src (reduce), in the effect's phase ``phase``. ``Move``, ``SwitchMove``
    and ``Effect`` are NamedTuples: a large plan makes one of each per data op."""

    src: Ref
    dst: Ref
    op: Op
    phase: int


class SwitchMove(NamedTuple):
    """A switch operation: every target := ⊕ sources (reduce) or := the one source (multicast)."""

    reduce: bool
    sources: tuple[Ref, ...]
    targets: tuple[Ref, ...]
    phase: int


class Effect(NamedTuple):
    moves: tuple[Move, ...]
    switch: tuple[SwitchMove, ...]
    packet_reads: tuple[Ref, ...]
    """Packet ranges the op waits for (each slot written with a packet in this run)."""
    phases: int

    def reads(self) -> list[Ref]:
        out = [m.src for m in self.moves] + [m.dst for m in self.moves if m.op is Op.REDUCE]
        return out + [r for s in self.switch for r in s.sources]

    def writes(self) -> list[Ref]:
        return [m.dst for m in self.moves] + [r for s in self.switch for r in s.targets]


def _ref(b: PlanBuffer, packet: bool = False) -> Ref:
    letter = _LETTER[b.buf]
    return Ref(b.rank, PACKET[letter] if packet else letter, b.index, b.size)


def _fail(op: PlanOp, why: str) -> ScheduleError:
    return ScheduleError(f"{op.where}: {op.name} {why}")


def _need(op: PlanOp, ok: bool, why: str) -> None:
    if not ok:
        raise _fail(op, why)


def _local(op: PlanOp, bs: tuple[PlanBuffer, ...], side: str) -> None:
    _need(op, all(b.via == "local" for b in bs), f"needs local {side} ranges")


def _remote(op: PlanOp, bs: tuple[PlanBuffer, ...], side: str) -> None:
    _need(op, all(b.via in ("memory", "port") for b in bs), f"needs remote {side} ranges (a buffer_id)")


def _pairs(op: PlanOp, src: list[Ref], dst: list[Ref]) -> list[Move]:
    if len(src) == 1 and len(dst) > 1:
        src = src * len(dst)  # one source sent to every destination
    _need(op, len(src) == len(dst) and len(src) > 0, "needs as many src_buff as dst_buff ranges")
    for s, d in zip(src, dst, strict=True):
        _need(op, s.size == d.size, f"moves {s.size} chunks into {d.size}")
    return [Move(s, d, Op.COPY, 0) for s, d in zip(src, dst, strict=True)]


def _reduction(op: PlanOp, base: Ref, adds: list[Ref], dst: Ref, sends: list[Ref]) -> tuple[list[Move], int]:
    """dst := base ⊕ adds, then every send := dst: the moves and the phases they take."""
    n = base.size
    _need(op, all(r.size == n for r in (*adds, dst, *sends)) and adds != [],
          "needs at least two sources and all ranges of one size")
    same = [r for r in (base, *adds) if (r.rank, r.space, r.index) == (dst.rank, dst.space, dst.index)]
    overlap = [r for r in (base, *adds) if r not in same and r.rank == dst.rank and r.space == dst.space
               and r.index < dst.index + n and dst.index < r.index + n]
    _need(op, not overlap, f"reads {overlap[0].text() if overlap else ''}, part of its destination; not covered")
    moves: list[Move] = []
    phase = 0
    if same:
        rest = [r for r in (base, *adds) if r is not same[0]]
    else:
        moves.append(Move(base, dst, Op.COPY, 0))
        rest, phase = list(adds), 1
    moves.extend(Move(r, dst, Op.REDUCE, phase) for r in rest)
    if sends:
        moves.extend(Move(dst, s, Op.COPY, phase + 1) for s in sends)
        return moves, phase + 2
    return moves, phase + 1


def effect_of(op: PlanOp) -> Effect:
    """The effect of a data op (``DATA_OPS``); ``ScheduleError`` naming the op when its ranges do not fit it."""
    name, src, dst = op.name, op.src, op.dst
    if op.reduce_op not in (None, "sum"):
        raise ScheduleError(f"{op.where}: reduce_op {op.reduce_op!r}; collsched's reduce is a sum")
    packet_reads: list[Ref] = []
    switch: list[SwitchMove] = []
    phases = 1
    if name == "copy":
        _local(op, src, "src_buff")
        _local(op, dst, "dst_buff")
        moves = _pairs(op, [_ref(b) for b in src], [_ref(b) for b in dst])
    elif name in ("put", "pws", "pwsf"):
        _local(op, src, "src_buff")
        _remote(op, dst, "dst_buff")
        moves = _pairs(op, [_ref(b) for b in src], [_ref(b) for b in dst])
    elif name == "get":
        _need(op, op.channel_type == "memory", "reads remote memory, which only a memory channel can")
        _remote(op, src, "src_buff")
        _local(op, dst, "dst_buff")
        moves = _pairs(op, [_ref(b) for b in src], [_ref(b) for b in dst])
    elif name in ("re", "res", "rre", "rres"):
        remote_in = name.startswith("rr")
        _need(op, len(src) >= 2 and len(dst) >= 1, "needs two or more src_buff and one or more dst_buff ranges")
        _need(op, not remote_in or op.channel_type == "memory", "reads remote memory, which only a memory "
                                                                "channel can")
        _local(op, src[:1] + dst[:1], "first src_buff and dst_buff")
        (_remote if remote_in else _local)(op, src[1:], "src_buff (after the first)")
        _need(op, len(dst) == 1 or name.endswith("s"), "has more than one dst_buff range but does not send")
        _remote(op, dst[1:], "dst_buff (after the first)")
        moves, phases = _reduction(op, _ref(src[0]), [_ref(b) for b in src[1:]], _ref(dst[0]),
                                   [_ref(b) for b in dst[1:]])
    elif name in ("repkt", "respkt", "recpkt", "recspkt"):
        keep = name.startswith("rec")
        sends = name.endswith("spkt")
        _need(op, len(src) >= 2 and len(dst) >= 1 + keep, "needs two or more src_buff ranges and a dst_buff")
        _local(op, src + dst[:1 + keep], "src_buff and first dst_buff")
        _need(op, len(dst) == 1 + keep or sends, "has more dst_buff ranges than it writes")
        _remote(op, dst[1 + keep:], "dst_buff (the peers' packets)")
        adds = [Ref(b.rank, "ps", b.index, b.size) for b in src[1:]]  # the executor reads scratch packets
        packet_reads.extend(adds)
        out = [_ref(dst[1], packet=True)] if keep else []
        moves, phases = _reduction(op, _ref(src[0]), adds, _ref(dst[0]),
                                   out + [Ref(b.rank, "ps", b.index, b.size) for b in dst[1 + keep:]])
    elif name == "ppkt":
        _local(op, src, "src_buff")
        _remote(op, dst, "dst_buff")
        port = op.channel_type == "port"
        srcs = [_ref(b, packet=port) for b in src]
        moves = _pairs(op, srcs, [Ref(b.rank, "ps", b.index, b.size) for b in dst])
    elif name == "rppkt":
        _local(op, src, "src_buff")
        _remote(op, dst, "dst_buff")
        srcs = [Ref(b.rank, "ps", b.index, b.size) for b in src]
        packet_reads.extend(srcs)
        moves = _pairs(op, srcs, [Ref(b.rank, "ps", b.index, b.size) for b in dst])
    elif name == "cpkt":
        _local(op, src + dst, "src_buff and dst_buff")
        moves = _pairs(op, [_ref(b) for b in src], [_ref(b, packet=True) for b in dst])
    elif name == "upkt":
        _local(op, src + dst, "src_buff and dst_buff")
        srcs = [Ref(b.rank, "ps", b.index, b.size) for b in src]
        packet_reads.extend(srcs)
        moves = _pairs(op, srcs, [_ref(b) for b in dst])
    elif name in ("glres", "gstore", "gstorepkt"):
        moves = []
        _need(op, len(src) == len(dst) > 0 and all(d.via == "switch" for d in dst),
              "needs src_buff and dst_buff ranges in pairs, the destinations on switch channels")
        packet = name == "gstorepkt"
        for s, d in zip(src, dst, strict=True):  # the DSL fuses several into one op: pair by pair
            _need(op, s.size == d.size, f"src_buff size {s.size} and dst_buff size {d.size} differ")
            targets = tuple(Ref(m, PACKET[_LETTER[d.buf]] if packet else _LETTER[d.buf], d.index, d.size)
                            for m in d.group)
            if name == "glres":
                _need(op, s.via == "switch", "reads through a switch channel (src_buff switch_channel_id)")
                sources = tuple(Ref(m, _LETTER[s.buf], s.index, s.size) for m in s.group)
            else:
                _need(op, s.via == "local", "stores a local range (src_buff type)")
                sources = (_ref(s, packet=packet),)
                if packet:
                    packet_reads.extend(sources)
            switch.append(SwitchMove(name == "glres", sources, targets, 0))
    else:
        raise ScheduleError(f"{op.where}: {name} moves no data")
    return Effect(tuple(moves), tuple(switch), tuple(packet_reads), phases)


def packet_writes(effect: Effect) -> list[Ref]:
    """The packet ranges an effect writes (a packet read elsewhere waits for them)."""
    return [r for r in effect.writes() if r.space in ("ps", "pi", "po")]


def buf_letter(buf: Buf) -> str:
    return _LETTER[buf]
