"""MSCCL++ execution plans: the format's names, the content sniff, and a checked view of one plan.

An execution plan is the JSON that MSCCL++'s executor loads (mscclpp src/core/executor/execution_plan.cc,
``ExecutionPlan::Impl``): top-level ``name``, ``collective``, ``protocol``, ``inplace`` and a ``gpus``
array; each GPU has ``id``, ``input_chunks``, ``output_chunks``, ``scratch_chunks``, its ``channels``
(``memory``/``port`` entries with ``connected_to``, ``switch`` entries with ``buffer_type`` and
``rank_groups``), its ``remote_buffers`` and its ``threadblocks``, each with ``id``, ``ops`` and the
channel and remote-buffer ids its ops index. ``parse_plan`` checks all of that and resolves every index
an op carries (its channel, remote buffer or switch channel) to what it names, so that a reader does not
index anything unchecked; each error names the GPU, thread block, op and field. It also reads what the
executor's parser reads beyond the buffers (``setupOperation``): ``tbg_info`` (one op split across a group of
thread blocks), ``barrier_id``/``num_threadblocks``, ``semaphore_ids`` (with each GPU's ``semaphores`` and
their ``init_value``) and a ``pipeline``'s ``iter_context`` and inner ``ops``. An op name the executor does not
accept is refused with the op's GPU, thread block and index.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, NamedTuple

from algorithms.errors import ScheduleError
from algorithms.ir import Buf

__all__ = [
    "BUF_CODE", "CODE_BUF", "OP_NAMES", "SYNC_OPS", "PlanBuffer", "PlanGpu", "PlanOp", "PlanThreadblock",
    "ExecutionPlan", "looks_like_plan", "parse_plan",
]

BUF_CODE = {Buf.INPUT: "i", Buf.OUTPUT: "o", Buf.SCRATCH: "s"}
"""Buffer letters of the plan format (execution_plan.cc, convertToBufferType)."""
CODE_BUF = {v: k for k, v in BUF_CODE.items()}
OP_NAMES = frozenset({
    # Every op name the executor's parser accepts (execution_plan.cc, getOpType).
    "nop", "barrier", "put", "pws", "pwsf", "get", "copy", "signal", "wait", "flush", "re", "res", "rre", "rres",
    "ppkt", "rppkt", "respkt", "cpkt", "upkt", "repkt", "recpkt", "recspkt", "glres", "gstore", "gstorepkt",
    "rlxsignal", "rlxwait", "pipeline", "sem_acquire", "sem_release",
})
SYNC_OPS = frozenset({"signal", "wait", "rlxsignal", "rlxwait"})
_CHANNEL_TYPES = ("memory", "port", "switch", "none")
_HEAD = 1 << 16
_MISSING: Any = object()


def looks_like_plan(text: str | bytes) -> bool:
    """True when JSON text opens like an MSCCL++ execution plan (a ``gpus`` or ``inplace`` key near the top and
    no ``collsched.schedule`` format key)."""
    head = text[:_HEAD]
    if isinstance(head, bytes):
        head = head.decode("utf-8", "replace")
    return (re.search(r'"(gpus|inplace)"\s*:', head) is not None
            and re.search(r'"format"\s*:\s*"collsched', head) is None)


class PlanBuffer(NamedTuple):
    """One buffer range an op names, resolved: whose buffer (``rank``, ``buf``), from chunk ``index``, ``size``
    chunks; ``via`` is ``local``, ``memory``/``port`` (a remote buffer) or ``switch``; a switch range names
    every rank of the switch channel's group (``group``). A NamedTuple: plans hold many of them."""

    rank: int
    buf: Buf
    index: int  # type: ignore[assignment]  # shadows tuple.index, as Transfer's count does tuple.count
    size: int
    via: str
    group: tuple[int, ...] = ()


class PlanOp(NamedTuple):
    """One op of a thread block: its name, its resolved source and destination ranges, and for ops with
    ``channel_ids`` the (peer, k) of every channel it names: the k-th channel of this GPU to that peer. A
    NamedTuple: plans hold hundreds of thousands (a frozen dataclass took a third of reading the largest)."""

    name: str
    src: tuple[PlanBuffer, ...]
    dst: tuple[PlanBuffer, ...]
    channels: tuple[tuple[int, int], ...]
    channel_type: str
    where: str
    reduce_op: str | None
    switch: str | None = None
    """The switch's name in collsched (a key the writer adds and the executor does not read)."""
    gpu: int = 0
    tb: int = 0
    index: tuple[int, ...] = ()  # type: ignore[assignment]  # shadows tuple.index, as PlanBuffer's does
    """The op's place in its thread block: (k,) for the k-th op, (k, j) for the j-th op of pipeline k."""
    tbg: tuple[int, int] | None = None
    """``tbg_info``: (tb_id, tbg_size): this thread block does part tb_id of tbg_size of the op's ranges."""
    barrier: tuple[int, int] | None = None
    """A barrier's (barrier_id, num_threadblocks)."""
    semaphores: tuple[int, ...] = ()
    inner: tuple[PlanOp, ...] = ()
    """A pipeline's ops, in order."""


@dataclass(frozen=True, slots=True)
class PlanThreadblock:
    id: int
    ops: tuple[PlanOp, ...]


@dataclass(frozen=True, slots=True)
class PlanGpu:
    id: int
    input_chunks: int
    output_chunks: int
    scratch_chunks: int
    threadblocks: tuple[PlanThreadblock, ...]
    semaphores: tuple[int, ...] = ()
    """The ``init_value`` of each of the GPU's device semaphores."""


@dataclass(frozen=True, slots=True)
class ExecutionPlan:
    """A checked plan: the top-level fields the executor reads, and every GPU with its resolved ops."""

    name: str
    collective: str
    protocol: str
    inplace: bool
    gpus: tuple[PlanGpu, ...]
    root: int | None
    raw: dict[str, Any]


def _field(obj: Any, key: str, where: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
    if obj.__class__ is dict:  # the common cases first: an absent optional field, a value of the right plain type
        got = obj.get(key, _MISSING)
        if got is _MISSING:
            if default is not ...:
                return default
        elif got.__class__ is kind and (kind is not int or _nonnegative(got)):
            return got
    if not isinstance(obj, dict):
        raise ScheduleError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if key not in obj:
        if default is not ...:
            return default
        raise ScheduleError(f"{where}: missing field {key!r}")
    value = obj[key]
    ints = kind is int or (isinstance(kind, tuple) and int in kind)
    if isinstance(value, bool) and kind is not bool and not (isinstance(kind, tuple) and bool in kind):
        raise ScheduleError(f"{where}: field {key!r} must be {_name(kind)}, got {value!r}")
    if not isinstance(value, kind):
        raise ScheduleError(f"{where}: field {key!r} must be {_name(kind)}, got {value!r}")
    if ints and isinstance(value, int) and value < 0:
        raise ScheduleError(f"{where}: field {key!r} must be >= 0, got {value}")
    return value


def _nonnegative(value: Any) -> bool:
    return bool(value >= 0)


def _name(kind: type | tuple[type, ...]) -> str:
    names = {int: "an integer", str: "a string", bool: "a boolean", list: "an array", dict: "an object"}
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _ints(obj: Any, key: str, where: str) -> list[int]:
    values = _field(obj, key, where, list)
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ScheduleError(f"{where}: field {key!r} must hold integers >= 0, got {v!r}")
    return values


def _buf(code: Any, where: str) -> Buf:
    if code not in CODE_BUF:
        raise ScheduleError(f"{where}: unknown buffer type {code!r} (i, o, s)")
    return CODE_BUF[code]


@dataclass(slots=True)
class _GpuChannels:
    """A GPU's channels flattened as the executor numbers them: per type, one channel per connected peer."""

    peers: dict[str, list[tuple[int, int]]]  # type -> [(peer, k-th channel of this GPU to that peer)]
    switch: list[tuple[Buf, tuple[int, ...]]]  # nvls infos: (buffer type, ranks of the group)
    remote: list[tuple[int, Buf, tuple[str, ...]]]  # remote buffers: (rank, buffer, access channel types)


def _gpu_channels(gpu: dict[str, Any], rank: int, p: int, where: str) -> _GpuChannels:
    peers: dict[str, list[tuple[int, int]]] = {"memory": [], "port": []}
    seen: dict[tuple[str, int], int] = {}
    switch: list[tuple[Buf, tuple[int, ...]]] = []
    for ci, ch in enumerate(_field(gpu, "channels", where, list)):
        w = f"{where} channels[{ci}]"
        ctype = _field(ch, "channel_type", w, str)
        if ctype == "switch":
            # "buff" is the key's older spelling (plans the DSL wrote before the executor read buffer_type).
            key = "buffer_type" if "buffer_type" in ch or "buff" not in ch else "buff"
            buf = _buf(_field(ch, key, w, str), f"{w} {key}")
            for gi, group in enumerate(_field(ch, "rank_groups", w, list)):
                gw = f"{w} rank_groups[{gi}]"
                size = _field(group, "size", gw, int)
                ranks = tuple(_ints(group, "ranks", gw))
                if size != len(ranks):
                    raise ScheduleError(f"{gw}: size is {size}, but the group holds {len(ranks)} ranks")
                bad = [r for r in ranks if r >= p]
                if bad or rank not in ranks or len(set(ranks)) != len(ranks):
                    why = (f"rank {bad[0]} out of range 0..{p - 1}" if bad else
                           f"does not hold gpu {rank}" if rank not in ranks else "names a rank twice")
                    raise ScheduleError(f"{gw}: ranks {list(ranks)} {why}")
                switch.append((buf, ranks))
        elif ctype in peers:
            for peer in _ints(ch, "connected_to", w):
                if peer >= p or peer == rank:
                    raise ScheduleError(f"{w}: connected_to names gpu {peer} (gpus 0..{p - 1}, not itself)")
                k = seen.get((ctype, peer), 0)
                seen[(ctype, peer)] = k + 1
                peers[ctype].append((peer, k))
        else:
            raise ScheduleError(f"{w}: unknown channel_type {ctype!r} ({', '.join(_CHANNEL_TYPES[:3])})")
    remote = []
    for bi, rb in enumerate(_field(gpu, "remote_buffers", where, list, [])):
        w = f"{where} remote_buffers[{bi}]"
        owner = _field(rb, "rank", w, int)
        if owner >= p:
            raise ScheduleError(f"{w}: rank {owner} out of range 0..{p - 1}")
        access = tuple(_field(rb, "access_channel_types", w, list))
        if any(a not in ("memory", "port") for a in access):
            raise ScheduleError(f"{w}: access_channel_types {list(access)} (memory, port)")
        remote.append((owner, _buf(_field(rb, "type", w, str), f"{w} type"), access))
    return _GpuChannels(peers, switch, remote)


@dataclass(slots=True)
class _TbRefs:
    """A thread block's own numbering: its channel ids per type and its remote buffer ids per access type."""

    channels: dict[str, list[int]]
    buffers: dict[str, list[int]]


def _tb_refs(tb: dict[str, Any], chans: _GpuChannels, where: str) -> _TbRefs:
    channels: dict[str, list[int]] = {"memory": [], "port": [], "switch": []}
    for ci, ch in enumerate(_field(tb, "channels", where, list, [])):
        w = f"{where} channels[{ci}]"
        ctype = _field(ch, "channel_type", w, str)
        if ctype not in channels:
            raise ScheduleError(f"{w}: unknown channel_type {ctype!r} (memory, port, switch)")
        have = len(chans.switch) if ctype == "switch" else len(chans.peers[ctype])
        for cid in _ints(ch, "channel_ids", w):
            if cid >= have:
                raise ScheduleError(f"{w}: channel id {cid} out of range: the gpu has {have} {ctype} channels")
            channels[ctype].append(cid)
    buffers: dict[str, list[int]] = {"memory": [], "port": []}
    for ri, ref in enumerate(_field(tb, "remote_buffer_refs", where, list, [])):
        w = f"{where} remote_buffer_refs[{ri}]"
        access = _field(ref, "access_channel_type", w, str)
        if access not in buffers:
            raise ScheduleError(f"{w}: access_channel_type {access!r} (memory, port)")
        for bid in _ints(ref, "remote_buffer_ids", w):
            if bid >= len(chans.remote) or access not in chans.remote[bid][2]:
                raise ScheduleError(f"{w}: remote buffer {bid} is not a {access} buffer of this gpu "
                                    f"({len(chans.remote)} remote buffers)")
            buffers[access].append(bid)
    return _TbRefs(channels, buffers)


def _range(b: Any, rank: int, ctype: str, chans: _GpuChannels, refs: _TbRefs, where: str) -> PlanBuffer:
    index = _field(b, "index", where, int)
    size = _field(b, "size", where, int)
    if size < 1:
        raise ScheduleError(f"{where}: size must be >= 1, got {size}")
    if "switch_channel_id" in b:
        j = _field(b, "switch_channel_id", where, int)
        if j >= len(refs.channels["switch"]):
            raise ScheduleError(f"{where}: switch_channel_id {j} out of range: the thread block holds "
                                f"{len(refs.channels['switch'])} switch channels")
        buf, group = chans.switch[refs.channels["switch"][j]]
        return PlanBuffer(rank, buf, index, size, "switch", group)
    if "buffer_id" in b:
        j = _field(b, "buffer_id", where, int)
        ids = refs.buffers.get(ctype, [])
        if j >= len(ids):
            raise ScheduleError(f"{where}: buffer_id {j} out of range: the thread block refers to {len(ids)} "
                                f"remote buffers over {ctype!r} channels")
        owner, buf, _ = chans.remote[ids[j]]
        return PlanBuffer(owner, buf, index, size, ctype)
    return PlanBuffer(rank, _buf(_field(b, "type", where, str), f"{where} type"), index, size, "local")


def _op(op: Any, rank: int, chans: _GpuChannels, refs: _TbRefs, where: str, place: tuple[int, int, tuple[int, ...]],
        semaphores: int) -> PlanOp:
    if op.__class__ is dict and len(op) == 1 and op.get("name") == "nop":  # half of a large plan's ops
        return PlanOp("nop", (), (), (), "none", where, None, None, place[0], place[1], place[2])
    name = _field(op, "name", where, str)
    if name not in OP_NAMES:
        raise ScheduleError(f"{where}: unknown op name {name!r} (not an op MSCCL++'s executor accepts)")
    ctype = _field(op, "channel_type", where, str, "none")
    if ctype not in _CHANNEL_TYPES:
        raise ScheduleError(f"{where}: unknown channel_type {ctype!r}")
    src = tuple(_range(b, rank, ctype, chans, refs, f"{where} src_buff[{i}]")
                for i, b in enumerate(_field(op, "src_buff", where, list, [])))
    dst = tuple(_range(b, rank, ctype, chans, refs, f"{where} dst_buff[{i}]")
                for i, b in enumerate(_field(op, "dst_buff", where, list, [])))
    channels: list[tuple[int, int]] = []
    for cid in _ints(op, "channel_ids", where) if "channel_ids" in op else []:
        ids = refs.channels.get(ctype, [])
        if cid >= len(ids):
            raise ScheduleError(f"{where}: channel id {cid} out of range: the thread block holds {len(ids)} "
                                f"{ctype} channels")
        if ctype != "switch":
            channels.append(chans.peers[ctype][ids[cid]])
    reduce_op = _field(op, "reduce_op", where, str, None)
    switch = _field(op, "switch", where, str, None)
    tbg = None
    if "tbg_info" in op:
        info = _field(op, "tbg_info", where, dict)
        tb_id = _field(info, "tb_id", f"{where} tbg_info", int)
        size = _field(info, "tbg_size", f"{where} tbg_info", int)
        if not tb_id < size:
            raise ScheduleError(f"{where} tbg_info: tb_id {tb_id} out of range for tbg_size {size}")
        tbg = (tb_id, size)
    barrier = None
    if name == "barrier":
        barrier = (_field(op, "barrier_id", where, int), _field(op, "num_threadblocks", where, int))
        if barrier[1] < 1:
            raise ScheduleError(f"{where}: num_threadblocks must be >= 1, got {barrier[1]}")
    sems = tuple(_ints(op, "semaphore_ids", where)) if name in ("sem_acquire", "sem_release") else ()
    for sid in sems:
        if sid >= semaphores:
            raise ScheduleError(f"{where}: semaphore id {sid} out of range: the gpu has {semaphores} semaphores")
    inner: tuple[PlanOp, ...] = ()
    if name == "pipeline":
        ctx = _field(op, "iter_context", where, dict)
        for key in ("unit_size", "num_chunks"):
            _field(ctx, key, f"{where} iter_context", int)
        gpu, tb, index = place
        inner_ops = []
        for j, sub in enumerate(_field(op, "ops", where, list)):
            w = f"{where} (pipeline op {j})"
            if isinstance(sub, dict) and sub.get("name") == "pipeline":
                raise ScheduleError(f"{w}: a pipeline inside a pipeline (the executor runs one level)")
            inner_ops.append(_op(sub, rank, chans, refs, w, (gpu, tb, (*index, j)), semaphores))
        inner = tuple(inner_ops)
    return PlanOp(name, src, dst, tuple(channels), ctype, where, reduce_op, switch, place[0], place[1], place[2],
                  tbg, barrier, sems, inner)


def parse_plan(source: str | bytes | dict[str, Any]) -> ExecutionPlan:
    """A checked ``ExecutionPlan`` from plan JSON text or an already-parsed object; ``ScheduleError`` naming the
    gpu, thread block, op and field at fault."""
    if isinstance(source, dict):
        obj = source
    else:
        try:
            obj = json.loads(source, parse_constant=_no_constant)
        except (ValueError, RecursionError) as e:
            raise ScheduleError(f"not valid JSON: {e}") from None
    where = "plan"
    name = _field(obj, "name", where, str)
    collective = _field(obj, "collective", where, str)
    protocol = _field(obj, "protocol", where, str)
    inplace = _field(obj, "inplace", where, bool)
    root = _field(obj, "root", where, (int, type(None)), None)
    gpus_raw = _field(obj, "gpus", where, list)
    p = len(gpus_raw)
    if p == 0:
        raise ScheduleError("plan: gpus is empty")
    gpus = []
    for g, gpu in enumerate(gpus_raw):
        w = f"gpu {g}"
        if _field(gpu, "id", w, int) != g:
            raise ScheduleError(f"{w}: id is {gpu['id']}, but gpus[{g}] must have id {g} (the executor indexes "
                                "gpus by rank)")
        chans = _gpu_channels(gpu, g, p, w)
        sems = tuple(_field(sem, "init_value", f"{w} semaphores[{i}]", int)
                     for i, sem in enumerate(_field(gpu, "semaphores", w, list, [])))
        tbs = []
        for t, tb in enumerate(_field(gpu, "threadblocks", w, list)):
            tw = f"{w} threadblock {t}"
            if _field(tb, "id", tw, int) != t:
                raise ScheduleError(f"{tw}: id is {tb['id']}, expected {t}")
            refs = _tb_refs(tb, chans, tw)
            ops = tuple(_op(op, g, chans, refs, f"{tw} op {k}", (g, t, (k,)), len(sems))
                        for k, op in enumerate(_field(tb, "ops", tw, list)))
            tbs.append(PlanThreadblock(t, ops))
        gpus.append(PlanGpu(g, _field(gpu, "input_chunks", w, int), _field(gpu, "output_chunks", w, int),
                            _field(gpu, "scratch_chunks", w, int), tuple(tbs), sems))
    return ExecutionPlan(name, collective, protocol, inplace, tuple(gpus), root, obj)


def _no_constant(text: str) -> None:
    raise ScheduleError(f"not valid JSON: {text} is not a number")
