"""The LL (packet) form of a plan: ``packet_ops`` writes a staged schedule's steps as packet ops.

In the LL protocol every word travels with a flag, and a read of a packet waits for its flag (mscclpp
execution_kernel.hpp, the ``*Packets`` handlers): data and its readiness arrive together, so the plan needs
no signals. Each remote transfer goes to fresh packet slots of the receiver's scratch (a slot is written
once a run, so no wait is needed before writing it either): over a memory channel the sender packs its data
there (``ppkt``); over a port channel it packs it into its own scratch packets first (``cpkt``), then its
proxy copies them (``ppkt``). The receiver unpacks a copy (``upkt``) or adds the packets to its destination
(``repkt``, one op for all the reductions into one range). Within a step, a GPU sends first, then runs its
local transfers, then receives (a ``nop`` between the groups; the staged schedule never writes in a step a
slot the step reads), and a ``nop`` closes the step. Packet slot k of scratch lives at twice the offset of
plain slot k (the executor's packet layout), so the packets start after the plain scratch the schedule
uses: at packet slot ceil(S / 2) for S plain chunks.
"""

from __future__ import annotations

from typing import Any, Protocol

from algorithms.errors import ScheduleError
from algorithms.formats.mscclpp.plan import BUF_CODE
from algorithms.ir import Buf, Op, Schedule, Transfer

__all__ = ["packet_ops"]


class _Gpu(Protocol):
    rank: int
    kind: dict[int, str]
    channel: dict[int, int]
    ops: list[dict[str, Any]]

    def remote_buffer(self, owner: int, buf: Buf) -> int: ...


def _chunk(buf: Buf, index: int, count: int) -> dict[str, Any]:
    return {"type": BUF_CODE[buf], "index": index, "size": count}


def packet_ops(schedule: Schedule, gpus: list[Any]) -> int:
    """Fill every GPU's ``ops`` with the LL form of ``schedule`` (staged: no step writes what it reads; module
    docstring); the scratch chunks the plan then needs. ``ScheduleError`` for switch operations."""
    if schedule.switch_ops:
        raise ScheduleError("mscclpp: LL plans carry no switch operations here (the schedule has "
                            f"{len(schedule.switch_ops)}); write it with protocol Simple")
    base = (schedule.scratch_chunks + 1) // 2
    used = [0] * len(gpus)

    def take(rank: int, count: int) -> int:
        at = base + used[rank]
        used[rank] += count
        return at

    for step in schedule.steps:
        slot: dict[int, int] = {}  # transfer index -> the receiver's packet slot
        packs: list[list[dict[str, Any]]] = [[] for _ in gpus]
        sends: list[list[dict[str, Any]]] = [[] for _ in gpus]
        local: list[list[Transfer]] = [[] for _ in gpus]
        recv: list[list[tuple[int, Transfer]]] = [[] for _ in gpus]
        for i, t in enumerate(step.transfers):
            if t.src == t.dst:
                local[t.src].append(t)
                continue
            g: _Gpu = gpus[t.src]
            slot[i] = at = take(t.dst, t.count)
            dst = {"buffer_id": g.remote_buffer(t.dst, Buf.SCRATCH), "index": at, "size": t.count}
            if g.kind[t.dst] == "memory":
                sends[t.src].append({"name": "ppkt", "src_buff": [_chunk(t.src_buf, t.src_index, t.count)],
                                     "dst_buff": [dst], "channel_type": "memory"})
            else:  # the proxy copies packets: pack them locally first
                mine = take(t.src, t.count)
                packs[t.src].append({"name": "cpkt", "src_buff": [_chunk(t.src_buf, t.src_index, t.count)],
                                     "dst_buff": [_chunk(Buf.SCRATCH, mine, t.count)]})
                sends[t.src].append({"name": "ppkt", "src_buff": [_chunk(Buf.SCRATCH, mine, t.count)],
                                     "dst_buff": [dst], "channel_ids": [g.channel[t.dst]], "channel_type": "port"})
            recv[t.dst].append((i, t))
        for r, g in enumerate(gpus):
            ops = g.ops
            groups: list[list[dict[str, Any]]] = []
            if packs[r]:
                groups.append(packs[r])
            groups.append(list(sends[r]))
            written: set[tuple[Buf, int]] = set()
            for t in local[r]:  # reductions into one slot, one after another
                here = {(t.dst_buf, t.dst_index + k) for k in range(t.count)}
                if here & written:
                    groups.append([])
                    written.clear()
                written |= here
                groups[-1].append(_local(t))
            groups.extend(_receives(recv[r], slot))
            for group in groups:
                if group:
                    if ops and ops[-1]["name"] != "nop":
                        ops.append({"name": "nop"})
                    ops.extend(group)
            if ops and ops[-1]["name"] != "nop":
                ops.append({"name": "nop"})
    return max(schedule.scratch_chunks, base + max(used, default=0))


def _local(t: Transfer) -> dict[str, Any]:
    src, dst = _chunk(t.src_buf, t.src_index, t.count), _chunk(t.dst_buf, t.dst_index, t.count)
    if t.op is Op.COPY:
        return {"name": "copy", "src_buff": [src], "dst_buff": [dst]}
    return {"name": "re", "src_buff": [dst, src], "dst_buff": [dst], "reduce_op": "sum"}


def _receives(recv: list[tuple[int, Transfer]], slot: dict[int, int]) -> list[list[dict[str, Any]]]:
    """The receiving ops of one GPU in one step, in groups that write disjoint slots (a ``nop`` between)."""
    sums: dict[tuple[Buf, int, int], list[int]] = {}
    copies = []
    for i, t in recv:
        if t.op is Op.REDUCE:
            sums.setdefault((t.dst_buf, t.dst_index, t.count), []).append(slot[i])
        else:
            copies.append({"name": "upkt", "src_buff": [_chunk(Buf.SCRATCH, slot[i], t.count)],
                           "dst_buff": [_chunk(t.dst_buf, t.dst_index, t.count)]})
    groups: list[list[dict[str, Any]]] = [copies]
    written: set[tuple[Buf, int]] = set()
    for (buf, index, count), at in sums.items():
        here = {(buf, index + k) for k in range(count)}
        if here & written:  # a range overlapping another reduced in this step: after it
            groups.append([])
            written.clear()
        written |= here
        dst = _chunk(buf, index, count)
        groups[-1].append({"name": "repkt", "src_buff": [dst] + [_chunk(Buf.SCRATCH, a, count) for a in at],
                           "dst_buff": [dst], "reduce_op": "sum"})
    return groups
