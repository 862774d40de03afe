"""Writing collsched schedules as MSCCL++ execution plans: ``to_plan``, ``dumps_plan``, ``save_plan``.

The plan runs the schedule step by step (docs/design.md, "MSCCL++ execution plans"). Every GPU gets one
thread block and one memory channel to each peer it ever exchanges data with. A remote copy is a ``put``
by its sender into the receiver's buffer; a remote reduction is an ``rre`` by its receiver, which reads
the sender's buffer and adds it to its own; local transfers are ``copy`` and ``re``. Between two steps,
each pair of GPUs that exchanges data in either step meets (``signal`` then ``wait`` on their channel),
which orders every read and write of one step before the next step's at both ends; a ``nop`` (a thread
block barrier) closes each step. Steps read the state at their start (docs/design.md, "Step semantics")
while the executor's ops run as they come, so a step that writes a slot it also reads from is first
staged: a step of local copies into fresh scratch slots, and the reads redirected there
(``stage_reads``).
"""

from __future__ import annotations

import json
import os
from typing import Any

from algorithms.disk import write_output
from algorithms.errors import ScheduleError
from algorithms.formats.mscclpp.packets import packet_ops
from algorithms.formats.mscclpp.plan import BUF_CODE
from algorithms.formats.mscclpp.staging import (
    fuse_reduce_multicast,
    group_of,
    in_place_form,
    receive_across_nodes,
    stage_reads,
)
from algorithms.ir import Buf, Kind, Op, Schedule, SwitchOp, SwitchOpKind, Transfer, switch_ops_by_step

__all__ = ["PLAN_KINDS", "dumps_plan", "save_plan", "to_plan"]

PLAN_KINDS = frozenset(Kind) - {Kind.BARRIER}
"""Kinds a plan can hold: a barrier has no data for the executor to move."""
_MAX_U64 = (1 << 64) - 1


def _chunk(buf: Buf, index: int, count: int) -> dict[str, Any]:
    return {"type": BUF_CODE[buf], "index": index, "size": count}


class _Gpu:
    """One GPU's plan while it is written: its peers (one channel each: memory within its node, port across
    nodes), its remote buffers per channel type, its switch channels and its ops."""

    def __init__(self, rank: int, peers: list[int], node: list[int]) -> None:
        self.rank = rank
        self.kind = {q: "memory" if node[q] == node[rank] else "port" for q in peers}
        self.peers = {t: [q for q in peers if self.kind[q] == t] for t in ("memory", "port")}
        self.channel = {q: self.peers[self.kind[q]].index(q) for q in peers}
        self.remote: dict[str, dict[tuple[int, Buf], int]] = {"memory": {}, "port": {}}
        self.switch: list[tuple[Buf, tuple[int, ...]]] = []
        self.ops: list[dict[str, Any]] = []

    def remote_buffer(self, owner: int, buf: Buf) -> int:
        table = self.remote[self.kind[owner]]
        return table.setdefault((owner, buf), len(table))

    def meet(self, peers: set[int]) -> None:
        """Signal every peer, then wait for each: a pairwise barrier, closing the step before it. Port
        channels flush first, so that the proxy has carried out every put before the signal."""
        self.ops.append({"name": "nop"})
        ids = {t: [self.channel[q] for q in sorted(peers) if self.kind[q] == t] for t in ("memory", "port")}
        if ids["port"]:
            self.ops.append({"name": "flush", "channel_ids": ids["port"], "channel_type": "port"})
        for name in ("signal", "wait"):
            self.ops.extend({"name": name, "channel_ids": ids[t], "channel_type": t} for t in ids if ids[t])
        self.ops.append({"name": "nop"})


def _op_of(t: Transfer, gpu: _Gpu) -> dict[str, Any]:
    """The op that carries ``t`` on ``gpu`` (its sender for a remote copy, its receiver otherwise)."""
    dst = _chunk(t.dst_buf, t.dst_index, t.count)
    src = _chunk(t.src_buf, t.src_index, t.count)
    if t.src == t.dst:
        if t.op is Op.COPY:
            return {"name": "copy", "src_buff": [src], "dst_buff": [dst]}
        return {"name": "re", "src_buff": [dst, src], "dst_buff": [dst], "reduce_op": "sum"}
    if t.op is Op.COPY:
        kind = gpu.kind[t.dst]
        remote = {"buffer_id": gpu.remote_buffer(t.dst, t.dst_buf), "index": t.dst_index, "size": t.count}
        op: dict[str, Any] = {"name": "put", "src_buff": [src], "dst_buff": [remote], "channel_type": kind}
        if kind == "port":  # the proxy needs the channel (execution_kernel.hpp, handlePut)
            op["channel_ids"] = [gpu.channel[t.dst]]
        return op
    if gpu.kind[t.src] == "port":
        raise ScheduleError(f"mscclpp: {t!r} reads across nodes, which port channels cannot (internal: the "
                            "writer receives such reductions into scratch first)")
    remote = {"buffer_id": gpu.remote_buffer(t.src, t.src_buf), "index": t.src_index, "size": t.count}
    return {"name": "rre", "src_buff": [dst, remote], "dst_buff": [dst], "channel_type": "memory",
            "reduce_op": "sum"}


def _owner(t: Transfer) -> int:
    return t.src if t.op is Op.COPY and t.src != t.dst else t.dst


SwitchChannel = tuple[Buf, tuple[int, ...]]


def _issuer(op: SwitchOp) -> int:
    """The GPU that runs the op: a multicast's source; for a reduction its first target when that is a source
    (the piece's owner, as NVLS spreads the pieces), else its first source: a member of both groups."""
    sources = {e.rank for e in op.sources}
    first = op.targets[0].rank
    return first if op.op is SwitchOpKind.REDUCE and first in sources else min(sources)


def _switch_channels(op: SwitchOp) -> tuple[SwitchChannel | None, SwitchChannel]:
    """The switch channels (buffer, group) an op reads through (None: a multicast reads locally) and stores to."""
    dst = (op.targets[0].buf, group_of(op))
    if op.op is SwitchOpKind.MULTICAST:
        return None, dst
    return (op.sources[0].buf, tuple(sorted(e.rank for e in op.sources))), dst


def _switch_op(op: SwitchOp, ids: dict[SwitchChannel, int]) -> dict[str, Any]:
    """The glres (reduction) or gstore (multicast) of a switch op in the writer's form (see staging)."""
    src_ch, dst_ch = _switch_channels(op)
    n = op.count
    dst = {"switch_channel_id": ids[dst_ch], "index": op.targets[0].index, "size": n}
    if src_ch is None:
        s = op.sources[0]
        return {"name": "gstore", "src_buff": [_chunk(s.buf, s.index, n)], "dst_buff": [dst],
                "channel_type": "switch", "switch": op.switch}
    src = {"switch_channel_id": ids[src_ch], "index": op.sources[0].index, "size": n}
    return {"name": "glres", "src_buff": [src], "dst_buff": [dst], "channel_type": "switch", "reduce_op": "sum",
            "switch": op.switch}


def to_plan(schedule: Schedule, *, name: str | None = None, ranks_per_node: int | None = None,
            inplace: bool | None = None, protocol: str = "Simple") -> dict[str, Any]:
    """The MSCCL++ execution plan of ``schedule`` as a JSON-ready dict (see the module docstring).

    ``ranks_per_node``: ranks r and q share a node (an NVLink domain: memory and switch channels) when
    r // ranks_per_node == q // ranks_per_node; across nodes, port channels carry the data. Default: one node.
    ``inplace``: write an all-gather, reduce-scatter or all-to-all in place, with the layout MSCCL++'s DSL gives
    them by default (``staging.in_place_form``); None or False: out of place (all-reduce, broadcast and reduce
    are in place either way, as collsched's are). ``protocol``: ``Simple`` or ``LL`` (packets: ``packets``).
    ``ScheduleError`` for a barrier (no data to move) and for a switch operation whose ranks span nodes.
    """
    coll = schedule.collective
    if coll.kind not in PLAN_KINDS:
        raise ScheduleError(f"mscclpp: a {coll.kind} has no data for the executor to move; plans hold "
                            f"{', '.join(sorted(k.value for k in PLAN_KINDS))}")
    if protocol not in ("Simple", "LL"):
        raise ScheduleError(f"mscclpp: protocol {protocol!r}: the executor runs Simple and LL")
    if inplace is False and coll.in_place:
        raise ScheduleError(f"mscclpp: collsched's {coll.kind} is in place; it has no out-of-place plan")
    p = coll.ranks
    if ranks_per_node is not None and (isinstance(ranks_per_node, bool) or not isinstance(ranks_per_node, int)
                                       or ranks_per_node < 1):
        raise ScheduleError(f"mscclpp: ranks_per_node must be an integer >= 1, got {ranks_per_node!r}")
    node = [r // (ranks_per_node or p) for r in range(p)]
    aliased = bool(inplace) and not coll.in_place
    prepared = fuse_reduce_multicast(schedule)
    if aliased:
        prepared = in_place_form(prepared)
    staged = stage_reads(receive_across_nodes(prepared, node) if protocol == "Simple" else prepared)
    by_step = switch_ops_by_step(staged)
    step_peers = [[set[int]() for _ in range(p)] for _ in staged.steps]
    channels: set[SwitchChannel] = set()
    for si, step in enumerate(staged.steps):
        for t in step.transfers:
            if t.src != t.dst:
                step_peers[si][t.src].add(t.dst)
                step_peers[si][t.dst].add(t.src)
        for op in by_step[si]:
            if len({node[r] for r in group_of(op)}) > 1:
                raise ScheduleError(f"mscclpp: step {op.step} switch op ({op.describe()}) spans nodes "
                                    f"{sorted({node[r] for r in group_of(op)})}; MSCCL++'s switch channels are "
                                    "NVLink SHARP multicast objects, within one node")
            src_ch, dst_ch = _switch_channels(op)
            channels |= {dst_ch} if src_ch is None else {src_ch, dst_ch}
            issuer = _issuer(op)
            for q in group_of(op):  # the issuer reads from and stores to every member
                if q != issuer:
                    step_peers[si][issuer].add(q)
                    step_peers[si][q].add(issuer)
    gpus = [_Gpu(r, sorted(set().union(*(sp[r] for sp in step_peers))), node) for r in range(p)]
    for gpu in gpus:
        gpu.switch = [c for c in sorted(channels) if gpu.rank in c[1]]
    if protocol == "LL":
        scratch = packet_ops(staged, gpus)
        return _document(staged, name or schedule.name, gpus, aliased or coll.in_place, "LL", scratch)
    last: list[set[int]] = [set() for _ in range(p)]
    for si, step in enumerate(staged.steps):
        mine: list[list[Transfer]] = [[] for _ in range(p)]
        for t in step.transfers:
            mine[_owner(t)].append(t)
        for r, gpu in enumerate(gpus):
            meet = last[r] | step_peers[si][r]
            if meet:
                gpu.meet(meet)
            elif gpu.ops and mine[r]:
                gpu.ops.append({"name": "nop"})
            written: set[tuple[Buf, int]] = set()
            for t in mine[r]:
                slots = {(t.dst_buf, t.dst_index + k) for k in range(t.count)} if t.dst == r else set()
                if slots & written:  # reductions into one slot, one after another
                    gpu.ops.append({"name": "nop"})
                    written.clear()
                written |= slots
                gpu.ops.append(_op_of(t, gpu))
            ids = {c: k for k, c in enumerate(gpu.switch)}
            gpu.ops.extend(_switch_op(op, ids) for op in by_step[si] if _issuer(op) == r)
            last[r] = step_peers[si][r]
    for r, gpu in enumerate(gpus):
        if last[r]:
            gpu.meet(last[r])
    return _document(staged, name or schedule.name, gpus, aliased or coll.in_place, "Simple",
                     staged.scratch_chunks)


def _document(schedule: Schedule, name: str, gpus: list[_Gpu], inplace: bool, protocol: str,
              scratch: int) -> dict[str, Any]:
    coll = schedule.collective
    out: list[dict[str, Any]] = []
    for r, gpu in enumerate(gpus):
        inputs = coll.input_chunks(r)
        outputs = inputs if coll.in_place else coll.output_chunks(r)
        kinds = [t for t in ("memory", "port") if gpu.peers[t]]
        remote = {t: sorted(gpu.remote[t].items(), key=lambda kv: kv[1]) for t in ("memory", "port")}
        tb: dict[str, Any] = {
            "id": 0,
            "ops": gpu.ops,
            "channels": [{"channel_type": t, "channel_ids": list(range(len(gpu.peers[t])))} for t in kinds]
            + ([{"channel_type": "switch", "channel_ids": list(range(len(gpu.switch)))}] if gpu.switch else []),
            "remote_buffer_refs": [
                {"access_channel_type": t, "remote_buffer_ids": [k + (len(remote["memory"]) if t == "port" else 0)
                                                                 for k in range(len(remote[t]))]}
                for t in ("memory", "port") if remote[t]],
        }
        out.append({
            "id": r,
            "input_chunks": inputs,
            "output_chunks": outputs,
            "scratch_chunks": scratch,
            "threadblocks": [tb] if gpu.ops else [],
            "channels": [{"channel_type": t, "connected_to": gpu.peers[t]} for t in kinds]
            + [{"channel_type": "switch", "buffer_type": BUF_CODE[buf],
                "rank_groups": [{"size": len(group), "ranks": list(group)}]} for buf, group in gpu.switch],
            "remote_buffers": [{"rank": owner, "type": BUF_CODE[buf], "access_channel_types": [t]}
                               for t in ("memory", "port") for (owner, buf), _ in remote[t]],
            "semaphores": [],
        })
    doc: dict[str, Any] = {
        "name": name,
        "collective": coll.kind.value,
        "protocol": protocol,
        "inplace": inplace,
        "reuse_resources": False,
        "gpus": out,
        # The executor's defaults (execution_plan.cc, Impl and loadExecutionPlan), written out.
        "num_threads_per_block": 1024,
        # LL: the executor alternates halves of scratch between runs, so a run's packets never meet the last's.
        "use_double_scratch_buffer": protocol == "LL",
        "buffer_alignment": 16,
        "min_message_size": 0,
        "max_message_size": _MAX_U64,
    }
    if coll.root is not None:
        doc["root"] = coll.root  # not read by the executor; the reader needs it for rooted kinds
    return doc


def dumps_plan(schedule: Schedule, *, name: str | None = None, ranks_per_node: int | None = None,
               inplace: bool | None = None, protocol: str = "Simple") -> str:
    """The plan of ``schedule`` as JSON text (see ``to_plan``)."""
    return json.dumps(to_plan(schedule, name=name, ranks_per_node=ranks_per_node, inplace=inplace,
                              protocol=protocol), indent=1) + "\n"


def save_plan(schedule: Schedule, path: str | os.PathLike[str], *, name: str | None = None,
              ranks_per_node: int | None = None, inplace: bool | None = None, protocol: str = "Simple") -> None:
    """Write the plan of ``schedule`` to ``path`` (see ``to_plan``; ``algorithms.disk.write_output``)."""
    write_output(path, dumps_plan(schedule, name=name, ranks_per_node=ranks_per_node, inplace=inplace,
                                  protocol=protocol), ScheduleError)
