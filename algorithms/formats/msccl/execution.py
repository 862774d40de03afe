"""MSCCL-IR XML interop: import the field's schedules, export ours, and check that a file can run.

MSCCL-IR (msccl-tools' MSCCLang, TACCL, TE-CCL and ForestColl emit it; Microsoft's
MSCCL executor for NCCL and AMD's RCCL run it) describes a collective as, per GPU,
thread blocks (``tb``) that each run a list of ``step``s in order: sends to one
peer, receives from one peer, local copies and reductions, with ``depid``/``deps``
waits on other thread blocks of the same GPU. docs/design.md ("MSCCL-IR mapping")
describes the mapping onto collsched's steps in full; in short:

- **Import** (``load_msccl``): every matched send/receive pair (the k-th send on a
  (channel, sender, receiver) connection meets the k-th receive) becomes one
  transfer; local ``cpy``/``re`` become local transfers; ``rrs`` (reduce and
  forward without storing) goes through a fresh scratch slot. Each transfer is
  placed at the earliest lockstep step consistent with every happens-before edge
  (thread-block order, ``depid``, message matching) and with the lockstep rule
  that a step's reads see the state at its start (``_Leveler``). Sends are
  buffered: a message carries the value its sender read, staged through scratch
  when the source is overwritten before the receiver takes it.
- **Export** (``save_msccl``): each remote transfer becomes an ``s`` on the sender
  and an ``r`` (copy) or ``rrc`` (reduce) on the receiver, each local one a
  ``cpy``/``re``; thread blocks have one peer each; dependencies are the schedule's
  dataflow (read-after-write, write-after-write, write-after-read), pruned of
  those implied by others, carried by ``depid``/``deps`` and ``nop``s, plus a wait
  that keeps a transfer out of earlier steps than the schedule's.
- **Check** (``check_msccl``): what would stop the executor or hang it: missing
  attributes, shared connections, limits, unmatched or mismatched sends and
  receives, dependencies that are never released, a run with the runtime's
  bounded buffering (2 messages per connection for Simple, 8 for LL/LL128) that
  stalls, and races between thread blocks of one GPU.

The parser is expat with DOCTYPE declarations rejected (so no entity of any kind
is expanded and nothing external is read); every failure is a ``ScheduleError``.
"""

from __future__ import annotations

import os
import re
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any
from xml.parsers import expat
from xml.sax.saxutils import quoteattr

from algorithms.errors import ScheduleError
from algorithms.formats.schedule import MAX_FILE_BYTES
from algorithms.ir import MAX_RANKS, MAX_SLOTS, Buf, Collective, Kind, Op, Schedule, Step, Transfer
from algorithms.registry import no_gc

__all__ = [
    "Finding", "Program", "ProgramGpu", "ProgramTb", "ProgramStep",
    "parse_msccl", "load_msccl", "loads_msccl", "to_schedule", "check_msccl", "dumps_msccl", "save_msccl",
    "looks_like_xml", "stage_reductions", "COLLS", "MAX_CNT", "PROTO_SLOTS",
]

MAX_CNT = 71
"""The executor's limit on a step's ``cnt`` (it must be below 72)."""
MAX_TBS_PER_CHANNEL = 32
"""At most this many thread blocks per channel may send, and this many may receive."""
PROTO_SLOTS = {"Simple": 2, "LL": 8, "LL128": 8}
"""Messages a connection buffers: 8 slots; a Simple message takes 4, an LL or LL128 message 1."""

COLLS: dict[str, Kind | None] = {
    "allreduce": Kind.ALLREDUCE,
    "allgather": Kind.ALLGATHER,
    "reducescatter": Kind.REDUCESCATTER,
    "reduce_scatter": Kind.REDUCESCATTER,
    "alltoall": Kind.ALLTOALL,
    "custom": None,
}
"""The ``coll`` spellings collsched imports (``custom`` for simulation only)."""
_EXECUTOR_COLLS = frozenset({"allreduce", "allgather", "reducescatter", "alltoall", "reduce", "broadcast",
                             "gather", "scatter", "send", "recv", "alltoallv"})
_WIDE = frozenset({Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLTOALL})  # m = N in FORMAT.md
_REQUIRED_ALGO = ("name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace", "outofplace",
                  "minBytes", "maxBytes")

# Step types: (receives, sends, reads local src, writes local dst).
_TYPES: dict[str, tuple[bool, bool, bool, bool]] = {
    "s": (False, True, True, False),
    "r": (True, False, False, True),
    "rcs": (True, True, False, True),
    "rrs": (True, True, True, False),
    "rrc": (True, False, True, True),
    "rrcs": (True, True, True, True),
    "cpy": (False, False, True, True),
    "re": (False, False, True, True),
    "nop": (False, False, False, False),
}
_BUFCHARS = {"i": Buf.INPUT, "o": Buf.OUTPUT, "s": Buf.SCRATCH}
_INT = re.compile(r"-?[0-9]{1,9}")


# --------------------------------------------------------------------------------------------- parsing


@dataclass(slots=True)
class ProgramStep:
    """One ``<step>``: its attributes as integers/strings; buffers None when the type does not use them."""

    s: int
    type: str
    srcbuf: str | None
    srcoff: int
    dstbuf: str | None
    dstoff: int
    cnt: int
    depid: int
    deps: int
    hasdep: bool
    line: int


@dataclass(slots=True)
class ProgramTb:
    """One ``<tb>``: its peers (-1 for none), channel and steps in document order."""

    id: int
    send: int
    recv: int
    chan: int
    line: int
    steps: list[ProgramStep] = field(default_factory=list)


@dataclass(slots=True)
class ProgramGpu:
    """One ``<gpu>``: its rank, declared buffer sizes in chunks and thread blocks (index = tb id)."""

    id: int
    i_chunks: int
    o_chunks: int
    s_chunks: int
    line: int
    tbs: list[ProgramTb] = field(default_factory=list)
    copies: list[tuple[int, int]] = field(default_factory=list)


@dataclass(slots=True)
class Program:
    """A parsed MSCCL-IR document: the ``<algo>`` attributes (as written) and its gpus by rank."""

    attrs: dict[str, str]
    ngpus: int
    chunks: int
    coll: str
    proto: str
    gpus: dict[int, ProgramGpu] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The algorithm's name (``msccl`` when the file gives none)."""
        return self.attrs.get("name") or "msccl"

    def flag(self, attr: str) -> bool | None:
        """An ``inplace``/``outofplace`` attribute as a bool; None when absent."""
        v = self.attrs.get(attr)
        return None if v is None else v.strip() == "1"


class _Reject(Exception):
    """Raised inside expat handlers; turned into a ScheduleError with the line."""


_INTS: dict[str, int] = {}


def _int(attrs: dict[str, str], name: str, where: str, default: int | None = None) -> int:
    v = attrs.get(name)
    if v is None:
        if default is not None:
            return default
        raise _Reject(f"{where}: missing attribute {name!r}")
    got = _INTS.get(v)
    if got is not None:
        return got
    w = v.strip()
    if not _INT.fullmatch(w):
        raise _Reject(f"{where}: attribute {name}={v!r} is not an integer")
    if len(_INTS) < 1 << 16:
        _INTS[v] = int(w)
    return int(w)


class _Parser:
    def __init__(self) -> None:
        self.stack: list[str] = []
        self.program: Program | None = None
        self.gpu: ProgramGpu | None = None
        self.tb: ProgramTb | None = None
        self.p = expat.ParserCreate()
        self.p.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
        self.p.StartDoctypeDeclHandler = self._doctype
        self.p.EntityDeclHandler = self._entity
        self.p.ExternalEntityRefHandler = self._external
        self.p.StartElementHandler = self._start
        self.p.EndElementHandler = self._end
        self.p.ordered_attributes = False

    def _doctype(self, *args: Any) -> None:
        raise _Reject("DOCTYPE declarations are not accepted (no entities, no external references)")

    def _entity(self, *args: Any) -> None:
        raise _Reject("entity declarations are not accepted")

    def _external(self, *args: Any) -> int:
        raise _Reject("external entity references are not accepted")

    def _start(self, tag: str, attrs: dict[str, str]) -> None:
        parent = self.stack[-1] if self.stack else None
        self.stack.append(tag)
        if parent is None:
            if tag != "algo":
                raise _Reject(f"the root element is <{tag}>, not <algo>")
            ngpus = _int(attrs, "ngpus", "algo")
            chunks = _int(attrs, "nchunksperloop", "algo")
            if not 1 <= ngpus <= MAX_RANKS:
                raise _Reject(f"algo: ngpus={ngpus} out of range 1..{MAX_RANKS}")
            if not 1 <= chunks <= MAX_SLOTS // ngpus:
                raise _Reject(f"algo: nchunksperloop={chunks} out of range 1..{MAX_SLOTS // ngpus}")
            coll = attrs.get("coll")
            if coll is None:
                raise _Reject("algo: missing attribute 'coll'")
            self.program = Program(dict(attrs), ngpus, chunks, coll.strip(), attrs.get("proto", "Simple").strip())
            return
        if tag == "gpu":
            if parent != "algo":
                raise _Reject(f"<gpu> inside <{parent}>, not <algo>")
            assert self.program is not None
            gid = _int(attrs, "id", "gpu")
            where = f"gpu {gid}"
            if not 0 <= gid < self.program.ngpus:
                raise _Reject(f"{where}: id out of range 0..{self.program.ngpus - 1}")
            if gid in self.program.gpus:
                raise _Reject(f"{where}: appears twice")
            sizes = [_int(attrs, k, where, 0) for k in ("i_chunks", "o_chunks", "s_chunks")]
            for k, v in zip(("i_chunks", "o_chunks", "s_chunks"), sizes, strict=True):
                if not 0 <= v <= MAX_SLOTS // self.program.ngpus:
                    raise _Reject(f"{where}: {k}={v} out of range")
            self.gpu = ProgramGpu(gid, sizes[0], sizes[1], sizes[2], self.p.CurrentLineNumber)
            self.program.gpus[gid] = self.gpu
            return
        if tag == "tb":
            if parent != "gpu" or self.gpu is None:
                raise _Reject(f"<tb> inside <{parent}>, not <gpu>")
            g = self.gpu
            tid = _int(attrs, "id", f"gpu {g.id} tb")
            where = f"gpu {g.id} tb {tid}"
            if tid != len(g.tbs):
                raise _Reject(f"{where}: tb ids must run 0, 1, 2, ... without gaps (expected {len(g.tbs)})")
            send, recv = _int(attrs, "send", where), _int(attrs, "recv", where)
            chan = _int(attrs, "chan", where, 0)
            assert self.program is not None
            for name, peer in (("send", send), ("recv", recv)):
                if peer == g.id:
                    raise _Reject(f"{where}: {name} peer is the gpu itself")
                if not -1 <= peer < self.program.ngpus:
                    raise _Reject(f"{where}: {name}={peer} out of range -1..{self.program.ngpus - 1}")
            if not 0 <= chan < 1024:
                raise _Reject(f"{where}: chan={chan} out of range 0..1023")
            self.tb = ProgramTb(tid, send, recv, chan, self.p.CurrentLineNumber)
            g.tbs.append(self.tb)
            return
        if tag == "step":
            if parent != "tb" or self.tb is None or self.gpu is None:
                raise _Reject(f"<step> inside <{parent}>, not <tb>")
            self.tb.steps.append(self._step(attrs))
            return
        if tag == "copy" and parent == "gpu" and self.gpu is not None:
            where = f"gpu {self.gpu.id} copy"
            self.gpu.copies.append((_int(attrs, "i_off", where), _int(attrs, "o_off", where)))
            return
        if tag in ("algo",):
            raise _Reject(f"<{tag}> inside <{parent}>")
        # Anything else: the executor ignores unknown elements, and so do we.

    def _step(self, attrs: dict[str, str]) -> ProgramStep:
        assert self.gpu is not None and self.tb is not None
        pos = len(self.tb.steps)
        where = f"gpu {self.gpu.id} tb {self.tb.id} step {pos}"
        kind = attrs.get("type")
        if kind is None:
            raise _Reject(f"{where}: missing attribute 'type'")
        kind = kind.strip()
        if kind not in _TYPES:
            raise _Reject(f"{where}: unknown step type {kind!r} (one of {', '.join(_TYPES)})")
        s = _int(attrs, "s", where)
        if s != pos:
            raise _Reject(f"{where}: s={s}, but steps are numbered by position (the runtime's flags count them)")
        recv, send, reads, writes = _TYPES[kind]
        srcbuf = dstbuf = None
        srcoff = dstoff = -1
        if reads:
            srcbuf, srcoff = self._buf(attrs, "src", where)
        if writes:
            dstbuf, dstoff = self._buf(attrs, "dst", where)
        cnt = _int(attrs, "cnt", where)
        if kind != "nop" and not 1 <= cnt <= MAX_SLOTS:
            raise _Reject(f"{where}: cnt={cnt} must be >= 1")
        depid = _int(attrs, "depid", where, -1)
        deps = _int(attrs, "deps", where, -1)
        hasdep = _int(attrs, "hasdep", where, 0)
        if hasdep not in (0, 1):
            raise _Reject(f"{where}: hasdep={hasdep} must be 0 or 1")
        if send and self.tb.send < 0:
            raise _Reject(f"{where}: a {kind!r} step sends, but tb {self.tb.id} has send=-1")
        if recv and self.tb.recv < 0:
            raise _Reject(f"{where}: a {kind!r} step receives, but tb {self.tb.id} has recv=-1")
        return ProgramStep(s, kind, srcbuf, srcoff, dstbuf, dstoff, cnt, depid, deps, bool(hasdep),
                           self.p.CurrentLineNumber)

    @staticmethod
    def _buf(attrs: dict[str, str], side: str, where: str) -> tuple[str, int]:
        b = attrs.get(side + "buf")
        if b is None:
            raise _Reject(f"{where}: missing attribute {side}buf")
        b = b.strip()
        if b not in _BUFCHARS:
            raise _Reject(f"{where}: {side}buf={b!r} must be i, o or s")
        off = _int(attrs, side + "off", where)
        if off < 0:
            raise _Reject(f"{where}: {side}off={off} must be >= 0")
        return b, off

    def _end(self, tag: str) -> None:
        self.stack.pop()
        if tag == "tb" and self.stack and self.stack[-1] == "gpu":
            self.tb = None
        elif tag == "gpu" and self.stack and self.stack[-1] == "algo":
            self.gpu = None

    def parse(self, data: str | bytes) -> Program:
        try:
            self.p.Parse(data, True)
        except _Reject as e:
            raise ScheduleError(f"MSCCL-IR line {self.p.CurrentLineNumber}: {e}") from None
        except expat.ExpatError as e:
            raise ScheduleError(f"not well-formed XML: {e}") from None
        except (ValueError, LookupError, RecursionError, MemoryError) as e:
            raise ScheduleError(f"not readable as XML: {type(e).__name__}: {e}") from None
        if self.program is None:
            raise ScheduleError("no <algo> element")
        return self.program


def looks_like_xml(data: str | bytes) -> bool:
    """True when the text starts (after whitespace or a byte-order mark) with ``<``."""
    head = data[:64]
    if isinstance(head, bytes):
        head = head.lstrip(b"\xef\xbb\xbf \t\r\n")
        return head.startswith(b"<")
    return head.lstrip("\ufeff \t\r\n").startswith("<")


def _read(source: str | bytes | os.PathLike[str]) -> tuple[str | bytes, str]:
    """The document's text and a label for messages (the path, or ``<text>``)."""
    if isinstance(source, bytes) or (isinstance(source, str) and looks_like_xml(source)):
        if len(source) > MAX_FILE_BYTES:
            raise ScheduleError(f"MSCCL-IR text is {len(source)} bytes, over the limit of {MAX_FILE_BYTES}")
        return source, ""
    p = Path(source)
    try:
        size = p.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ScheduleError(f"{p}: {size} bytes, over the limit of {MAX_FILE_BYTES}")
        return p.read_bytes(), f"{p}: "
    except OSError as e:
        raise ScheduleError(f"{p}: cannot read: {e.strerror or e}") from None


def parse_msccl(source: str | bytes | os.PathLike[str]) -> Program:
    """Parse MSCCL-IR text, bytes or a file into a ``Program`` (structure only; ``ScheduleError`` if malformed)."""
    data, label = _read(source)
    try:
        return _Parser().parse(data)
    except ScheduleError as e:
        raise ScheduleError(f"{label}{e}") from None


# --------------------------------------------------------------------------------------------- import


@dataclass(frozen=True, slots=True)
class _Sizes:
    kind: Kind | None
    p: int
    chunks: int  # collsched C
    i: int  # MSCCL buffer sizes in MSCCL chunks
    o: int


def _sizes(program: Program) -> _Sizes:
    coll = program.coll
    if coll not in COLLS:
        known = ", ".join(sorted({k for k in COLLS if k != "reduce_scatter"}))
        if coll in _EXECUTOR_COLLS:
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
        return _Sizes(kind, n, part, i, o)
    if kind is None:  # custom: sizes are whatever the gpus declare
        i = max([c] + [g.i_chunks for g in program.gpus.values()])
        o = max([c] + [g.o_chunks for g in program.gpus.values()])
        return _Sizes(None, n, max(i, o), i, o)
    return _Sizes(kind, n, c, c, c)


class _Mapper:
    """Maps (rank, MSCCL buffer, offset) onto collsched slots, per aliasing mode (module docstring)."""

    def __init__(self, sz: _Sizes, inplace: bool, scratch: int) -> None:
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


def _transfers(mapper: _Mapper, src: int, sb: str, so: int, dst: int, db: str, do: int, cnt: int,
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


def _mode(program: Program, sz: _Sizes, inplace: bool | None) -> bool:
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


_StepRef = tuple[int, int, int]  # gpu, tb, position


def _where(ref: _StepRef, program: Program) -> str:
    g, t, k = ref
    step = program.gpus[g].tbs[t].steps[k]
    return f"gpu {g} tb {t} step {k} ({step.type}, line {step.line})"


def _dep_target(program: Program, gpu: ProgramGpu, tb: ProgramTb, k: int,
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
        raise ScheduleError(f"{_where(ref, program)}: depid={st.depid} names no thread block of gpu {gpu.id}")
    positions = flags[(gpu.id, st.depid)]
    j = bisect_left(positions, st.deps)
    if j == len(positions):
        raise ScheduleError(
            f"{_where(ref, program)}: waits for tb {st.depid} to reach step {st.deps}, but no step of it at or "
            "after that has hasdep=1, so the wait is never released (the executor hangs)")
    target = positions[j]
    if st.depid == tb.id and target >= k:
        raise ScheduleError(f"{_where(ref, program)}: waits on its own thread block's step {target}, "
                            "which can only run after it (the executor hangs)")
    return target


def _flag_steps(program: Program) -> dict[tuple[int, int], list[int]]:
    return {(g.id, t.id): [k for k, s in enumerate(t.steps) if s.hasdep and s.type != "nop"]
            for g in program.gpus.values() for t in g.tbs}


@dataclass
class _Run:
    """One execution of a program (``_execute``): who received what, and what did not finish."""

    match: dict[_StepRef, _StepRef]
    stuck: list[tuple[_StepRef, str]]
    unmatched_sends: list[_StepRef]
    unmatched_recvs: list[_StepRef]


def _execute(program: Program, capacity: int | None = None,
             targets: dict[_StepRef, int] | None = None) -> _Run:
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
        targets = _targets(program)
    tbs: dict[tuple[int, int], tuple[ProgramGpu, ProgramTb]] = {
        (g.id, t.id): (g, t) for g in sorted(program.gpus.values(), key=lambda g: g.id) for t in g.tbs}
    pc = dict.fromkeys(tbs, 0)
    queues: dict[tuple[int, int, int], deque[_StepRef]] = {}
    waiters: dict[tuple[Any, ...], list[tuple[int, int]]] = {}
    blocked: dict[tuple[int, int], str] = {}
    match: dict[_StepRef, _StepRef] = {}
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
            rcv, snd, _, _ = _TYPES[st.type]
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
                    raise ScheduleError(f"{_where(a, program)} sends cnt={sa.cnt} but the receive it meets, "
                                        f"{_where(ref, program)}, has cnt={st.cnt}")
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
    stuck: list[tuple[_StepRef, str]] = []
    unmatched_recvs: list[_StepRef] = []
    for key, why in sorted(blocked.items()):
        g, t = tbs[key]
        ref = (g.id, t.id, pc[key])
        st = t.steps[pc[key]]
        cin = (t.chan, t.recv, g.id)
        if why.startswith("waits for a message") and all(
                pc[s] == len(tbs[s][1].steps) for s in senders.get(cin, [])):
            unmatched_recvs.append(ref)
        else:
            stuck.append((ref, f"{_where(ref, program)} {why}"))
        del st
    unmatched_sends = [r for q in queues.values() for r in q] if not blocked else []
    return _Run(match, stuck, sorted(unmatched_sends), unmatched_recvs)


def _targets(program: Program) -> dict[_StepRef, int]:
    """The dependency target of every step that has one (``ScheduleError`` when it is never released)."""
    flags = _flag_steps(program)
    out: dict[_StepRef, int] = {}
    for g in program.gpus.values():
        for t in g.tbs:
            for k in range(len(t.steps)):
                tgt = _dep_target(program, g, t, k, flags)
                if tgt is not None:
                    out[(g.id, t.id, k)] = tgt
    return out


def _match(program: Program, targets: dict[_StepRef, int]) -> dict[_StepRef, _StepRef]:
    """Receive-type step -> the send-type step it receives from; ``ScheduleError`` when the program cannot finish."""
    run = _execute(program, None, targets)
    if run.unmatched_recvs:
        ref = run.unmatched_recvs[0]
        st = program.gpus[ref[0]].tbs[ref[1]]
        raise ScheduleError(f"{_where(ref, program)}: unmatched receive: gpu {st.recv} sends nothing more to "
                            f"gpu {ref[0]} on channel {st.chan}")
    if run.stuck:
        raise ScheduleError(f"deadlock: {len(run.stuck)} thread block(s) can never finish; {run.stuck[0][1]}")
    if run.unmatched_sends:
        ref = run.unmatched_sends[0]
        st = program.gpus[ref[0]].tbs[ref[1]]
        raise ScheduleError(f"{_where(ref, program)}: unmatched send: gpu {st.send} receives nothing more from "
                            f"gpu {ref[0]} on channel {st.chan}")
    return run.match


class _Graph:
    """Nodes (a list of transfers, or none for a pure ordering point) with happens-before predecessors."""

    def __init__(self) -> None:
        self.preds: list[list[int]] = []
        self.trans: list[list[Transfer]] = []
        self.origin: list[_StepRef] = []
        self.capture: dict[int, int] = {}  # send-read node -> its message node
        self.after: dict[tuple[int, int], int] = {}  # (node, pred) -> 1 when node goes a level after pred

    def node(self, origin: _StepRef, preds: Iterable[int] = (), trans: list[Transfer] | None = None) -> int:
        self.preds.append(list(preds))
        self.trans.append(trans or [])
        self.origin.append(origin)
        return len(self.preds) - 1


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
    sz = _sizes(program)
    if sz.kind is None and not allow_custom:
        raise ScheduleError("algo: coll='custom' has no postcondition, so it cannot be verified or run as a "
                            "collective (simulate it: collsched simulate imports it for timing only)")
    gr, mapper, temp_next, _done, _gate = _build(program, sz, inplace)
    lev = _Leveler(gr, program, mapper, temp_next)
    lev.run()
    schedule = lev.assemble(name or program.name)
    if order is not None:
        order.extend(lev.thread_block_order())
    return schedule


def _build(program: Program, sz: _Sizes, inplace: bool | None
           ) -> tuple[_Graph, _Mapper, list[int], dict[_StepRef, int], dict[_StepRef, int]]:
    """The happens-before graph of a program: nodes, transfers, each step's completion and gate node."""
    mode = _mode(program, sz, inplace)
    scratch = max([0] + [g.s_chunks for g in program.gpus.values()])
    mapper = _Mapper(sz, mode, scratch)
    targets = _targets(program)
    match = _match(program, targets)
    temp_next = [mapper.scratch_base] * sz.p

    gr = _Graph()
    # Per step: (gate node, completion node, node that its sends leave from, value location for sends).
    gate: dict[_StepRef, int] = {}
    done: dict[_StepRef, int] = {}
    ready: dict[_StepRef, int] = {}
    value: dict[_StepRef, tuple[str, int]] = {}
    recv_node: dict[_StepRef, int] = {}  # the message node a receive-type step receives by
    recv_local: dict[_StepRef, tuple[str, int, Op, int]] = {}  # receiver's (buf, off, op, extra pred)

    # First pass: gates and local nodes. Completion of earlier steps is wired after all nodes exist.
    gate_preds: dict[int, list[tuple[_StepRef, bool]]] = {}
    for g in program.gpus.values():
        for t in g.tbs:
            for k, st in enumerate(t.steps):
                ref = (g.id, t.id, k)
                for side, b, off in (("src", st.srcbuf, st.srcoff), ("dst", st.dstbuf, st.dstoff)):
                    if b is not None and off + st.cnt > mapper.size(g, b):
                        raise ScheduleError(f"{_where(ref, program)}: {side} {b}[{off}:{off + st.cnt}] is out of "
                                            f"bounds (buffer {b} of gpu {g.id} has {mapper.size(g, b)} chunks)")
                target = targets.get(ref)
                gnode = gr.node(ref)
                gate[ref] = gnode
                deps: list[tuple[_StepRef, bool]] = []
                if k > 0:
                    deps.append(((g.id, t.id, k - 1), True))
                if target is not None:
                    deps.append(((g.id, st.depid, target), True))
                gate_preds[gnode] = deps
                kind = st.type
                rcv, snd, _, _ = _TYPES[kind]
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
    sread: dict[_StepRef, int] = {}
    for b_ref, a_ref in match.items():
        rb, ro, op, pre = recv_local[b_ref]
        a = program.gpus[a_ref[0]].tbs[a_ref[1]].steps[a_ref[2]]
        vb, vo = value[a_ref]
        recv_node[b_ref] = gr.node(b_ref, [pre], _transfers(mapper, a_ref[0], vb, vo, b_ref[0], rb, ro, a.cnt, op))
    for ref, n in recv_node.items():
        st = program.gpus[ref[0]].tbs[ref[1]].steps[ref[2]]
        if _TYPES[st.type][1]:
            ready[ref] = n  # rcs, rrs, rrcs forward what they received
        else:
            done[ref] = n
    for b_ref, a_ref in match.items():
        m = recv_node[b_ref]
        sread[a_ref] = r = gr.node(a_ref, [ready[a_ref]])
        gr.capture[r] = m
        gr.preds[m].append(r)
        done[a_ref] = r
    for gnode, deps in gate_preds.items():
        ref = gr.origin[gnode]
        tb_steps = program.gpus[ref[0]].tbs[ref[1]].steps
        k = ref[2]
        while k + 1 < len(tb_steps) and tb_steps[k].type == "nop":
            k += 1  # a nop carries a dependency for the next real step: judge by what that one does
        st = tb_steps[k]
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


def _key(rank: int, buf: Buf, index: int) -> int:
    """One integer per (rank, buffer, index) slot; consecutive indices get consecutive keys."""
    return ((rank * 3 + _BUFCODE[buf]) << 34) + index


def _written(mapper: _Mapper, rank: int, st: ProgramStep) -> set[int]:
    """Slot keys a step writes on its own gpu (an rrs writes only a fresh temporary: none)."""
    if st.dstbuf is None or st.type == "rrs":
        return set()
    return {_key(rank, buf, idx + k) for buf, idx, n in mapper.segments(rank, st.dstbuf, st.dstoff, st.cnt)
            for k in range(n)}


def _after(done: list[Transfer], writes: set[int], reduces: bool, *, reads_only: bool = False) -> int:
    """1 when a step waiting for a node goes to the next level; 0 when lockstep lets it share the level.

    ``done``: the node's transfers (``reads_only``: the message whose source a
    send read). Sharing is allowed when the waiter only overwrites what the node
    read (a step's reads see its start) or reduces into slots the node also
    reduced into.
    """
    for t in done:
        sk, dk = _key(t.src, t.src_buf, t.src_index), _key(t.dst, t.dst_buf, t.dst_index)
        if (reads_only or t.src == t.dst) and any(sk + k in writes for k in range(t.count)):
            continue  # write after read
        if reads_only:
            return 1
        if reduces and t.op is Op.REDUCE and any(dk + k in writes for k in range(t.count)):
            continue  # reduce after reduce
        return 1
    return 0


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

    def __init__(self, gr: _Graph, program: Program, mapper: _Mapper, temp_next: list[int]) -> None:
        self.gr = gr
        self.program = program
        self.mapper = mapper
        self.temp_next = temp_next
        self.level = [0] * len(gr.preds)
        # Slots are keyed by _key(rank, buffer, index).
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
        key = _key
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
            raise ScheduleError(f"{_where(gr.origin[stuck], self.program)}: cyclic dependencies (thread-block "
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
            sk, dk = _key(r, sb, si), _key(r, db, di)
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
        return to_schedule(_Parser().parse(text), inplace=inplace, allow_custom=allow_custom)


def load_msccl(path_or_text: str | bytes | os.PathLike[str], *, inplace: bool | None = None,
               allow_custom: bool = False) -> Schedule:
    """Import an MSCCL-IR file (a path) or document (text starting with ``<``, or bytes) as a ``Schedule``.

    Every failure is a ``ScheduleError`` naming the gpu, thread block and step
    (and the file). See ``to_schedule`` for ``inplace`` and ``allow_custom``.
    """
    data, label = _read(path_or_text)
    try:
        with no_gc():
            return to_schedule(_Parser().parse(data), inplace=inplace, allow_custom=allow_custom)
    except ScheduleError as e:
        raise ScheduleError(f"{label}{e}") from None


# --------------------------------------------------------------------------------------------- check

ERROR = "error"
WARNING = "warning"
MAX_STEPS_EXECUTOR = 64
"""MSCCL_MAX_NUM_STEPS in the MSCCL executor for NCCL (a build-time constant)."""
MAX_STEPS_ANY = 256
"""The old runtime's (and RCCL's) limit on steps per thread block."""
RACE_CHECK_CELLS = 20_000_000
"""The race check keeps a clock of every thread block per happens-before node (2 bytes each); above this
many it is skipped with a warning (the largest corpus file needs about 16 M)."""


@dataclass(frozen=True)
class Finding:
    """One thing that would stop the MSCCL runtime from loading or finishing a program.

    ``severity`` is ``error`` (it would be rejected, hang or misbehave) or
    ``warning`` (one runtime rejects it, or it relies on a default).
    """

    kind: str
    message: str
    severity: str = ERROR
    gpu: int | None = None
    tb: int | None = None
    step: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        d: dict[str, Any] = {"kind": self.kind, "severity": self.severity, "message": self.message}
        for name in ("gpu", "tb", "step"):
            if getattr(self, name) is not None:
                d[name] = getattr(self, name)
        return d

    def __str__(self) -> str:
        return f"{self.severity}: {self.message}"


def check_msccl(source: str | bytes | os.PathLike[str] | Program, *, capacity: int | None = None) -> list[Finding]:
    """The static executability check of an MSCCL-IR program (module docstring); [] when it would run.

    ``capacity``: messages a connection buffers (default: 2 for Simple, 8 for
    LL and LL128, as the runtime's 8 slots allow). A malformed document raises
    ``ScheduleError`` (it cannot be checked at all).
    """
    program = source if isinstance(source, Program) else parse_msccl(source)
    out: list[Finding] = []
    a = program.attrs
    missing = [k for k in _REQUIRED_ALGO if k not in a]
    if missing:
        out.append(Finding("missing_attribute", f"algo: no {', '.join(missing)} attribute(s): the MSCCL executor "
                           "rejects the file as written (the old runtime and RCCL default them)", WARNING))
    if program.proto not in PROTO_SLOTS:
        out.append(Finding("bad_attribute", f"algo: proto={program.proto!r} is not one of "
                           f"{', '.join(PROTO_SLOTS)}"))
    if program.coll not in _EXECUTOR_COLLS:
        out.append(Finding("bad_attribute", f"algo: coll={program.coll!r} is not a collective the MSCCL executor "
                           f"knows ({', '.join(sorted(_EXECUTOR_COLLS))})", WARNING))
    chans = [t.chan for g in program.gpus.values() for t in g.tbs]
    if "nchannels" in a and chans:
        try:
            nch = int(a["nchannels"])
        except ValueError:
            nch = -1
        if nch < max(chans) + 1:
            out.append(Finding("bad_attribute", f"algo: nchannels={a['nchannels']} but thread blocks use channel "
                               f"{max(chans)}: nchannels must be max(chan)+1 = {max(chans) + 1}"))
        elif nch > max(chans) + 1:
            out.append(Finding("bad_attribute", f"algo: nchannels={nch} but no thread block uses a channel above "
                               f"{max(chans)}", WARNING))
    flags = _flag_steps(program)
    targets: dict[_StepRef, int] = {}
    structural = False
    for g in sorted(program.gpus.values(), key=lambda g: g.id):
        ends: dict[tuple[str, int, int], list[int]] = {}
        per_chan: dict[tuple[str, int], int] = {}
        for t in g.tbs:
            for side, peer in (("send", t.send), ("recv", t.recv)):
                if peer >= 0:
                    ends.setdefault((side, t.chan, peer), []).append(t.id)
                    per_chan[(side, t.chan)] = per_chan.get((side, t.chan), 0) + 1
            if len(t.steps) > MAX_STEPS_ANY:
                out.append(Finding("too_many_steps", f"gpu {g.id} tb {t.id}: {len(t.steps)} steps, over the runtime "
                                   f"limit of {MAX_STEPS_ANY}", ERROR, g.id, t.id))
            elif len(t.steps) > MAX_STEPS_EXECUTOR:
                out.append(Finding("too_many_steps", f"gpu {g.id} tb {t.id}: {len(t.steps)} steps, over the MSCCL "
                                   f"executor's default MSCCL_MAX_NUM_STEPS={MAX_STEPS_EXECUTOR}", WARNING,
                                   g.id, t.id))
            for k, st in enumerate(t.steps):
                where = f"gpu {g.id} tb {t.id} step {k}"
                if st.cnt > MAX_CNT:
                    out.append(Finding("limit", f"{where}: cnt={st.cnt}, but the executor needs cnt < 72",
                                       ERROR, g.id, t.id, k))
                for side, b, off in (("src", st.srcbuf, st.srcoff), ("dst", st.dstbuf, st.dstoff)):
                    if b is None:
                        continue
                    size = {"i": g.i_chunks, "o": g.o_chunks, "s": g.s_chunks}[b]
                    if off + st.cnt > size and not _aliased_ok(program, g, b, off, st.cnt):
                        out.append(Finding("out_of_bounds", f"{where} ({st.type}): {side} {b}[{off}:{off + st.cnt}] "
                                           f"is outside gpu {g.id}'s declared {b}_chunks={size}", ERROR,
                                           g.id, t.id, k))
                        structural = True
                if st.depid >= 0 and st.deps >= 0:
                    try:
                        tgt = _dep_target(program, g, t, k, flags)
                    except ScheduleError as e:
                        out.append(Finding("hang", str(e), ERROR, g.id, t.id, k))
                        structural = True
                        continue
                    if tgt is not None:
                        targets[(g.id, t.id, k)] = tgt
                        if tgt != st.deps:
                            out.append(Finding(
                                "dependency", f"{where}: waits for tb {st.depid} step {st.deps}, which has "
                                f"hasdep=0 (or is a nop); only step {tgt}'s completion releases it", WARNING,
                                g.id, t.id, k))
                if st.type == "nop" and k + 1 < len(t.steps) and t.steps[k + 1].type != "nop" \
                        and t.steps[k + 1].depid < 0:
                    out.append(Finding("dependency", f"{where}: a nop must be followed by a step that carries a "
                                       "dependency itself", WARNING, g.id, t.id, k + 1))
        for (side, chan, peer), ids in sorted(ends.items()):
            if len(ids) > 1:
                out.append(Finding(
                    "shared_connection",
                    f"gpu {g.id}: thread blocks {', '.join(map(str, ids))} all {side} "
                    f"{'to' if side == 'send' else 'from'} gpu {peer} on channel {chan}; one connection has one "
                    "thread block at each end, so which message meets which receive depends on timing",
                    ERROR, g.id, ids[1]))
        for (side, chan), n in sorted(per_chan.items()):
            if n > MAX_TBS_PER_CHANNEL:
                out.append(Finding("limit", f"gpu {g.id}: {n} thread blocks {side} on channel {chan}, over the "
                                   f"limit of {MAX_TBS_PER_CHANNEL}", ERROR, g.id))
    if structural:
        return out
    slots = capacity if capacity is not None else PROTO_SLOTS.get(program.proto, 2)
    try:
        run = _execute(program, slots, targets)
    except ScheduleError as e:
        out.append(Finding("mismatch", str(e)))
        return out
    for ref in run.unmatched_recvs:
        t = program.gpus[ref[0]].tbs[ref[1]]
        out.append(Finding("unmatched", f"{_where(ref, program)}: unmatched receive: gpu {t.recv} sends nothing "
                           f"more to gpu {ref[0]} on channel {t.chan}", ERROR, *ref))
    for ref in run.unmatched_sends:
        t = program.gpus[ref[0]].tbs[ref[1]]
        out.append(Finding("unmatched", f"{_where(ref, program)}: unmatched send: gpu {t.send} receives nothing "
                           f"more from gpu {ref[0]} on channel {t.chan}", ERROR, *ref))
    if run.stuck:
        head = "; ".join(why for _, why in run.stuck[:3])
        more = f" (and {len(run.stuck) - 3} more)" if len(run.stuck) > 3 else ""
        ref = run.stuck[0][0]
        out.append(Finding("deadlock", f"deadlock with {slots} buffered message(s) per connection: "
                           f"{len(run.stuck)} thread block(s) never finish: {head}{more}", ERROR, *ref))
    if run.stuck or run.unmatched_recvs or run.unmatched_sends or any(f.kind == "shared_connection" for f in out):
        return out
    try:
        sz = _sizes(program)
        gr, mapper, _, done, gate = _build(program, sz, None)
    except ScheduleError:
        return out  # an import problem the findings above do not name: verify reports it when it loads
    out.extend(_races(program, gr, mapper, done, gate))
    return out


def _races(program: Program, gr: _Graph, mapper: _Mapper, done: dict[_StepRef, int],
           gate: dict[_StepRef, int], limit: int = 5) -> list[Finding]:
    """Two steps of different thread blocks of one gpu that touch a slot, one writing, with no wait between.

    Happens-before is tracked with a vector clock per graph node (the last step
    of every thread block known complete); step B comes after step A when B's
    gate knows A complete. Per slot, accesses are taken in a topological order and
    each write is checked against the previous write and the reads since.
    """
    import numpy as np

    keys = [(g.id, t.id) for g in sorted(program.gpus.values(), key=lambda g: g.id) for t in g.tbs]
    ix = {k: i for i, k in enumerate(keys)}
    n = len(gr.preds)
    if n * len(keys) > RACE_CHECK_CELLS:
        return [Finding("race", f"race check skipped: {n} happens-before nodes x {len(keys)} thread blocks is over "
                        f"the budget of {RACE_CHECK_CELLS} clock entries", WARNING)]
    longest = max((len(t.steps) for g in program.gpus.values() for t in g.tbs), default=0)
    dtype = np.int16 if longest < 1 << 15 else np.int32
    completes: dict[int, list[tuple[int, int]]] = {}
    for ref, v in done.items():
        completes.setdefault(v, []).append((ix[(ref[0], ref[1])], ref[2]))
    succ: list[list[int]] = [[] for _ in range(n)]
    indeg = [len(ps) for ps in gr.preds]
    for v, ps in enumerate(gr.preds):
        for u in ps:
            succ[u].append(v)
    queue = deque(v for v in range(n) if indeg[v] == 0)
    rank = [0] * n
    vc = np.full((n, max(1, len(keys))), -1, dtype=dtype)
    seen = 0
    while queue:
        v = queue.popleft()
        rank[v] = seen
        seen += 1
        ps = gr.preds[v]
        if len(ps) == 1:
            vc[v] = vc[ps[0]]
        elif ps:
            vc[v] = vc[ps].max(axis=0)
        for i, k in completes.get(v, ()):
            if vc[v, i] < k:
                vc[v, i] = k
        for w in succ[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                queue.append(w)
    if seen < n:
        return []  # cyclic: the import reports it

    def before(a: _StepRef, b: _StepRef) -> bool:
        return bool(vc[gate[b], ix[(a[0], a[1])]] >= a[2])

    # Accesses per slot: (order, step, writes, buffer, offset).
    per_slot: dict[int, list[tuple[int, _StepRef, bool, str, int]]] = {}
    for g in program.gpus.values():
        for t in g.tbs:
            for k, st in enumerate(t.steps):
                ref = (g.id, t.id, k)
                when = rank[done[ref]]
                _rcv, _snd, reads_src, writes_dst = _TYPES[st.type]
                spans: list[tuple[str, int, bool]] = []
                if reads_src and st.srcbuf is not None:
                    spans.append((st.srcbuf, st.srcoff, False))
                if writes_dst and st.dstbuf is not None:
                    spans.append((st.dstbuf, st.dstoff, True))
                for mb, off, w in spans:
                    for cbuf, idx, cnt in mapper.segments(g.id, mb, off, st.cnt):
                        base = _key(g.id, cbuf, idx)
                        for j in range(cnt):
                            per_slot.setdefault(base + j, []).append((when, ref, w, mb, off + j))
    found: dict[tuple[_StepRef, _StepRef], tuple[str, int, bool]] = {}
    for accesses in per_slot.values():
        if len(accesses) < 2 or not any(a[2] for a in accesses):
            continue
        accesses.sort(key=lambda a: (a[0], not a[2]))
        last: tuple[int, _StepRef, bool, str, int] | None = None
        since: list[tuple[int, _StepRef, bool, str, int]] = []  # reads since the last write
        for acc in accesses:
            others = ([last] if last is not None else []) + (since if acc[2] else [])
            for o in others:
                ra, rb = o[1], acc[1]
                if ra[:2] != rb[:2] and not before(ra, rb) and not before(rb, ra):
                    found.setdefault((ra, rb), (acc[3], acc[4], o[2] and acc[2]))
            if acc[2]:
                last, since = acc, []
            else:
                since.append(acc)
    out: list[Finding] = []
    for (ra, rb), (mb, off, both) in sorted(found.items())[:limit]:
        what = "both write" if both else "one writes, one reads"
        out.append(Finding("race", f"{_where(ra, program)} and {_where(rb, program)}: {what} {mb}[{off}] of "
                           f"gpu {ra[0]} with no wait between them, so the result depends on timing",
                           ERROR, *rb))
    if len(found) > limit:
        out.append(Finding("race", f"... and {len(found) - limit} more unordered pairs of steps", ERROR))
    return out


def _aliased_ok(program: Program, gpu: ProgramGpu, b: str, off: int, cnt: int) -> bool:
    """True when a range past a declared size is still inside the collective's buffer (sizes declared 0)."""
    if program.coll not in COLLS or COLLS[program.coll] is None:
        return False
    try:
        sz = _sizes(program)
    except ScheduleError:
        return False
    declared = {"i": gpu.i_chunks, "o": gpu.o_chunks}.get(b)
    return declared == 0 and off + cnt <= (sz.i if b == "i" else sz.o)


# --------------------------------------------------------------------------------------------- export

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
            sk, dk = _key(t.src, t.src_buf, t.src_index), _key(t.dst, t.dst_buf, t.dst_index)
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


def dumps_msccl(schedule: Schedule, *, name: str | None = None, proto: str = "Simple", nchannels: int = 1,
                min_bytes: int = 0, max_bytes: int = 0, max_steps: int = 64, staged: bool = False) -> str:
    """The schedule as MSCCL-IR XML the MSCCL executor (NCCL) and RCCL accept as written (module docstring).

    ``proto``: Simple, LL or LL128. ``nchannels``: spread connections over at
    least this many channels (more are used where a thread block would exceed
    ``max_steps`` steps, the executor's MSCCL_MAX_NUM_STEPS, or a channel would
    get more than 32 senders or receivers). ``min_bytes``/``max_bytes``: the
    call sizes the executor picks this algorithm for (0: unlimited). ``staged``:
    write ``stage_reductions(schedule)`` (concurrent reductions into one slot
    received into scratch and added locally, instead of taking turns). Allreduce
    is written in-place (collsched's all-reduce is), the other kinds
    out-of-place. Kinds MSCCL-IR cannot express (rooted kinds: the format has
    no root; barrier) raise ``ScheduleError``.
    """
    coll = schedule.collective
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
    p = coll.ranks
    if staged:
        schedule = stage_reductions(schedule)
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


def save_msccl(schedule: Schedule, path: str | os.PathLike[str], **options: Any) -> None:
    """Write ``dumps_msccl(schedule, **options)`` to ``path`` (atomically: a temporary file renamed into place)."""
    text = dumps_msccl(schedule, **options)
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, target)
    except OSError as e:
        raise ScheduleError(f"{target}: cannot write: {e.strerror or e}") from None
