"""The MSCCL++ plan corpus the tests read (tests/data/foreign/mscclpp: plans MSCCL++ itself wrote, SOURCES.md
says where each comes from), and plan rewrites the tests share."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

CORPUS = Path(__file__).resolve().parents[2] / "data" / "foreign" / "mscclpp"
PLANS = sorted(p.name for p in CORPUS.glob("*.json"))
COLLECTIVES = [n for n in PLANS if not n.startswith("unit_")]
UNITS = [n for n in PLANS if n.startswith("unit_")]


def load(name: str) -> dict[str, Any]:
    """The plan ``name`` of the corpus as parsed JSON (a fresh copy each call)."""
    return json.loads((CORPUS / name).read_text())


def out_of_place_allgather(plan: dict[str, Any]) -> dict[str, Any]:
    """An out-of-place copy of an in-place all-gather plan: every local read of the gpu's own slice of the
    output reads the input instead, and a first ``copy`` (then a ``nop``) of thread block 0 puts the input in
    that slice, which the in-place plan found there."""
    out = copy.deepcopy(plan)
    out["inplace"] = False
    for gpu in out["gpus"]:
        r, c = gpu["id"], gpu["input_chunks"]
        for tb in gpu["threadblocks"]:
            for op in tb["ops"]:
                for b in op.get("src_buff", []):
                    if b.get("type") == "o" and r * c <= b["index"] < (r + 1) * c:
                        b["type"], b["index"] = "i", b["index"] - r * c
        gpu["threadblocks"][0]["ops"][:0] = [
            {"name": "copy", "src_buff": [{"type": "i", "index": 0, "size": c}],
             "dst_buff": [{"type": "o", "index": r * c, "size": c}]}, {"name": "nop"}]
    return out


def sendrecv_plan(inplace: bool) -> dict[str, Any]:
    """A two-GPU ``sendrecv`` as MSCCL++'s DSL writes one (``SendRecv``): each GPU puts its chunk into the
    other's output (in place: its input), between a relaxed handshake and a signal/wait pair."""
    def gpu(r: int) -> dict[str, Any]:
        dst = "i" if inplace else "o"
        src = {"type": "i", "index": 0, "size": 1}
        ops = [{"name": "nop"}, {"name": "rlxsignal", "channel_ids": [0], "channel_type": "memory"}, {"name": "nop"},
               {"name": "rlxwait", "channel_ids": [0], "channel_type": "memory"}, {"name": "nop"}]
        if inplace:  # the other's input is about to be overwritten: keep this one's own chunk in scratch first
            ops = [{"name": "copy", "src_buff": [src], "dst_buff": [{"type": "s", "index": 0, "size": 1}]},
                   *ops]
            src = {"type": "s", "index": 0, "size": 1}
        ops += [{"name": "put", "src_buff": [src], "dst_buff": [{"buffer_id": 0, "index": 0, "size": 1}],
                 "channel_type": "memory"}, {"name": "nop"},
                {"name": "signal", "channel_ids": [0], "channel_type": "memory"},
                {"name": "wait", "channel_ids": [0], "channel_type": "memory"}, {"name": "nop"}]
        return {"id": r, "input_chunks": 1, "output_chunks": 1, "scratch_chunks": 1 if inplace else 0,
                "channels": [{"channel_type": "memory", "connected_to": [1 - r]}],
                "remote_buffers": [{"rank": 1 - r, "type": dst, "access_channel_types": ["memory"]}],
                "semaphores": [],
                "threadblocks": [{"id": 0, "ops": ops, "channels": [{"channel_type": "memory", "channel_ids": [0]}],
                                  "remote_buffer_refs": [{"access_channel_type": "memory", "remote_buffer_ids": [0]}]}]}

    return {"name": "sendrecv", "collective": "sendrecv", "protocol": "Simple", "inplace": inplace,
            "gpus": [gpu(0), gpu(1)]}


def split_across_blocks(plan: dict[str, Any], *, gpu: int, tb: int, op: int) -> dict[str, Any]:
    """The plan with op ``op`` of thread block ``tb`` on ``gpu`` split in two halves (``tbg_info``) between that
    block and a new one, the two meeting at a barrier before and after it (as the DSL writes a thread-block
    group: mscclpp python/mscclpp/language/tests/single_node/allgather_tbg.py)."""
    out = copy.deepcopy(plan)
    g = out["gpus"][gpu]
    block = g["threadblocks"][tb]
    ops = block["ops"]
    barrier = {"name": "barrier", "barrier_id": 0, "num_threadblocks": 2}
    data = ops[op]
    first = {**copy.deepcopy(data), "tbg_info": {"tb_id": 0, "tbg_size": 2}}
    second = {**copy.deepcopy(data), "tbg_info": {"tb_id": 1, "tbg_size": 2}}
    ops[op:op + 1] = [dict(barrier), first, dict(barrier)]
    new = copy.deepcopy(block)
    new["id"] = len(g["threadblocks"])
    new["ops"] = [dict(barrier), second, dict(barrier)]
    g["threadblocks"].append(new)
    return out


def ring_sendrecv_plan(p: int) -> dict[str, Any]:
    """A ``sendrecv`` of ``p`` GPUs in the shape of MSCCL++'s multi_node/send_recv.py (one group a GPU): each
    GPU signals the previous one, waits for the next one's signal, puts its input into the next one's output
    with ``pws`` over a port channel, and waits for the previous one's."""
    def gpu(r: int) -> dict[str, Any]:
        ops = [{"name": "signal", "channel_ids": [1], "channel_type": "port"},
               {"name": "wait", "channel_ids": [0], "channel_type": "port"}, {"name": "nop"},
               {"name": "pws", "src_buff": [{"type": "i", "index": 0, "size": 1}],
                "dst_buff": [{"buffer_id": 0, "index": 0, "size": 1}], "channel_ids": [0], "channel_type": "port"},
               {"name": "wait", "channel_ids": [1], "channel_type": "port"}, {"name": "nop"}]
        return {"id": r, "input_chunks": 1, "output_chunks": 1, "scratch_chunks": 0,
                "channels": [{"channel_type": "port", "connected_to": [(r + 1) % p, (r - 1) % p]}],
                "remote_buffers": [{"rank": (r + 1) % p, "type": "o", "access_channel_types": ["port"]}],
                "semaphores": [],
                "threadblocks": [{"id": 0, "ops": ops, "channels": [{"channel_type": "port", "channel_ids": [0, 1]}],
                                  "remote_buffer_refs": [{"access_channel_type": "port", "remote_buffer_ids": [0]}]}]}

    return {"name": "sendrecv", "collective": "sendrecv", "protocol": "Simple", "inplace": False,
            "gpus": [gpu(r) for r in range(p)]}
