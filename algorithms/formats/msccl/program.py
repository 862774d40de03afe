"""The MSCCL-IR program model and its parser: ``Program`` (gpus, thread blocks, steps) and ``parse_msccl``.

MSCCL-IR describes a collective as, per GPU, thread blocks (``tb``) that each run
a list of ``step``s in order: sends to one peer, receives from one peer, local
copies and reductions, with ``depid``/``deps`` waits on other thread blocks of
the same GPU. This module holds that structure as written, and the format's
constants (step types, collectives, the executor's limits) the other modules
of the package share.

The parser is expat with DOCTYPE declarations rejected (so no entity of any kind
is expanded and nothing external is read); every failure is a ``ScheduleError``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.parsers import expat

from algorithms.errors import ScheduleError
from algorithms.formats.schedule import MAX_FILE_BYTES, read_bytes
from algorithms.ir import MAX_RANKS, MAX_SLOTS, Buf, Kind

MAX_CNT = 71
"""The executor's limit on a step's ``cnt`` (it must be below 72)."""
MAX_CHANNELS = 1024
"""Channel ids run 0..1023 (what this reader accepts)."""
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
EXECUTOR_COLLS = frozenset({"allreduce", "allgather", "reducescatter", "alltoall", "reduce", "broadcast",
                             "gather", "scatter", "send", "recv", "alltoallv"})

# Step types: (receives, sends, reads local src, writes local dst).
STEP_TYPES: dict[str, tuple[bool, bool, bool, bool]] = {
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
            if not 0 <= chan < MAX_CHANNELS:
                raise _Reject(f"{where}: chan={chan} out of range 0..{MAX_CHANNELS - 1}")
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
        if kind not in STEP_TYPES:
            raise _Reject(f"{where}: unknown step type {kind!r} (one of {', '.join(STEP_TYPES)})")
        s = _int(attrs, "s", where)
        if s != pos:
            raise _Reject(f"{where}: s={s}, but steps are numbered by position (the runtime's flags count them)")
        recv, send, reads, writes = STEP_TYPES[kind]
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


def read_source(source: str | bytes | os.PathLike[str]) -> tuple[str | bytes, str]:
    """The document's text and a label for messages (the path, or ``<text>``)."""
    if isinstance(source, bytes) or (isinstance(source, str) and looks_like_xml(source)):
        if len(source) > MAX_FILE_BYTES:
            raise ScheduleError(f"MSCCL-IR text is {len(source)} bytes, over the limit of {MAX_FILE_BYTES}")
        return source, ""
    return read_bytes(source, MAX_FILE_BYTES), f"{Path(source)}: "


def parse_text(data: str | bytes) -> Program:
    """Parse an MSCCL-IR document already in memory (``ScheduleError`` naming the line if malformed)."""
    return _Parser().parse(data)


def parse_msccl(source: str | bytes | os.PathLike[str]) -> Program:
    """Parse MSCCL-IR text, bytes or a file into a ``Program`` (structure only; ``ScheduleError`` if malformed)."""
    data, label = read_source(source)
    try:
        return parse_text(data)
    except ScheduleError as e:
        raise ScheduleError(f"{label}{e}") from None
