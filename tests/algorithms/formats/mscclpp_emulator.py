"""A test-only emulator of MSCCL++'s executor on numbers, and the collectives' results computed by hand.

``run_plan`` executes a plan dict the way the executor's thread blocks would: each thread block runs its
ops in order, GPUs run concurrently, a ``wait`` blocks until its partner channel has signalled once more
than it has been waited on (mscclpp execution_kernel.hpp, handleSignal/handleWait). Among the thread
blocks that can move, one is picked at random for every op, so that a plan whose ordering is wrong gives a
wrong answer for some seed. Ops act on whole chunks of numbers: ``put`` writes the remote buffer, ``rre``
adds remote chunks to a local one, ``glres`` sums a chunk over a switch channel's group and stores the sum
to every member, ``gstore`` stores one chunk to every member. It reads the raw JSON and shares no code with
the reader.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from algorithms.ir import Collective, Kind

Buffers = dict[tuple[int, str], np.ndarray]


def inputs(coll: Collective, seed: int = 0) -> dict[int, np.ndarray]:
    """Per rank, its input buffer: one integer per chunk (distinct, small)."""
    rng = np.random.default_rng(seed)
    return {r: rng.integers(1, 1000, size=coll.input_chunks(r)).astype(np.int64) for r in range(coll.ranks)}


def expected(coll: Collective, given: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    """Per rank, the result buffer of the collective (the input for in-place kinds), by the definitions."""
    p, c = coll.ranks, coll.chunks
    total = sum(given.values()) if coll.kind in (Kind.ALLREDUCE, Kind.REDUCE, Kind.REDUCESCATTER) else None
    out: dict[int, np.ndarray] = {}
    for r in range(p):
        if coll.kind is Kind.ALLREDUCE:
            out[r] = total  # type: ignore[assignment]
        elif coll.kind is Kind.ALLGATHER:
            out[r] = np.concatenate([given[q] for q in range(p)])
        elif coll.kind is Kind.REDUCESCATTER:
            out[r] = total[r * c:(r + 1) * c]  # type: ignore[index]
        elif coll.kind is Kind.ALLTOALL:
            out[r] = np.concatenate([given[q][r * c:(r + 1) * c] for q in range(p)])
        elif coll.kind is Kind.BROADCAST:
            out[r] = given[coll.root]  # type: ignore[index]
        elif coll.kind is Kind.REDUCE:
            if r == coll.root:  # the other ranks' buffers hold whatever the schedule left there
                out[r] = total  # type: ignore[assignment]
        else:
            raise AssertionError(f"no reference for {coll.kind}")
    return out


def _peers(gpu: dict[str, Any], ctype: str) -> list[tuple[int, int]]:
    peers, seen = [], {}
    for ch in gpu["channels"]:
        if ch["channel_type"] == ctype:
            for q in ch["connected_to"]:
                seen[q] = seen.get(q, 0) + 1
                peers.append((q, seen[q] - 1))
    return peers


def _switch_groups(gpu: dict[str, Any]) -> list[tuple[str, list[int]]]:
    return [(ch["buffer_type"], g["ranks"]) for ch in gpu["channels"] if ch["channel_type"] == "switch"
            for g in ch["rank_groups"]]


def run_plan(plan: dict[str, Any], bufs: Buffers, seed: int) -> None:
    """Execute ``plan`` on ``bufs`` ((rank, "i"/"o"/"s") -> chunk array; in-place plans alias "o" to "i")."""
    rng = random.Random(seed)
    gpus = plan["gpus"]
    if plan["inplace"]:
        for r in range(len(gpus)):
            bufs[(r, "o")] = bufs[(r, "i")]
    tbs = [(g["id"], tb) for g in gpus for tb in g["threadblocks"]]
    pc = [0] * len(tbs)
    signals: dict[tuple[int, int, str, int], int] = {}  # (from, to, channel type, k) -> signals not yet waited for

    def channel(gpu: int, tb: dict[str, Any], ctype: str, i: int) -> int:
        ids = [c for ch in tb["channels"] if ch["channel_type"] == ctype for c in ch["channel_ids"]]
        return ids[i]

    def where(gpu: int, tb: dict[str, Any], b: dict[str, Any], ctype: str) -> list[tuple[int, str]]:
        g = gpus[gpu]
        if "switch_channel_id" in b:
            btype, ranks = _switch_groups(g)[channel(gpu, tb, "switch", b["switch_channel_id"])]
            return [(q, btype) for q in ranks]
        if "buffer_id" in b:
            ids = [i for ref in tb["remote_buffer_refs"] if ref["access_channel_type"] == ctype
                   for i in ref["remote_buffer_ids"]]
            rb = g["remote_buffers"][ids[b["buffer_id"]]]
            return [(rb["rank"], rb["type"])]
        return [(gpu, b["type"])]

    def chunk(key: tuple[int, str], b: dict[str, Any]) -> np.ndarray:
        return bufs[key][b["index"]:b["index"] + b["size"]]

    def runnable(i: int) -> bool:
        gpu, tb = tbs[i]
        if pc[i] >= len(tb["ops"]):
            return False
        op = tb["ops"][pc[i]]
        if op["name"] != "wait":
            return True
        ctype = op["channel_type"]
        peers = _peers(gpus[gpu], ctype)
        for c in op["channel_ids"]:
            q, k = peers[channel(gpu, tb, ctype, c)]
            if signals.get((q, gpu, ctype, k), 0) < 1:
                return False
        return True

    while True:
        ready = [i for i in range(len(tbs)) if runnable(i)]
        if not ready:
            break
        i = rng.choice(ready)
        gpu, tb = tbs[i]
        op = tb["ops"][pc[i]]
        pc[i] += 1
        name, ctype = op["name"], op.get("channel_type", "none")
        if name in ("signal", "wait"):
            peers = _peers(gpus[gpu], ctype)
            for c in op["channel_ids"]:
                q, k = peers[channel(gpu, tb, ctype, c)]
                if name == "signal":
                    signals[(gpu, q, ctype, k)] = signals.get((gpu, q, ctype, k), 0) + 1
                else:
                    signals[(q, gpu, ctype, k)] -= 1
            continue
        if name in ("nop", "flush"):
            continue
        if name == "rre" and ctype == "port":
            raise AssertionError("a port channel cannot read remote memory")
        src = [(where(gpu, tb, b, ctype), b) for b in op["src_buff"]]
        dst = [(where(gpu, tb, b, ctype), b) for b in op["dst_buff"]]
        if name in ("copy", "put"):
            for (s, sb), (d, db) in zip(src, dst, strict=True):
                chunk(d[0], db)[:] = chunk(s[0], sb)
        elif name in ("re", "rre"):
            value = sum(chunk(s[0], sb) for s, sb in src)
            chunk(dst[0][0][0], dst[0][1])[:] = value
        elif name == "glres":
            (s, sb), (d, db) = src[0], dst[0]
            value = sum(chunk(key, sb) for key in s)
            for key in d:
                chunk(key, db)[:] = value
        elif name == "gstore":
            (s, sb), (d, db) = src[0], dst[0]
            value = chunk(s[0], sb).copy()
            for key in d:
                chunk(key, db)[:] = value
        else:
            raise AssertionError(f"the emulator does not know op {name!r}")
    stuck = [tbs[i][0] for i in range(len(tbs)) if pc[i] < len(tbs[i][1]["ops"])]
    assert not stuck, f"gpus {stuck} never finish: a wait has no signal"
    assert all(v == 0 for v in signals.values()), f"signals never waited for: {signals}"


def emulate(plan: dict[str, Any], coll: Collective, seed: int) -> dict[int, np.ndarray]:
    """The result buffers (input for in-place kinds, output otherwise) after running ``plan`` on ``inputs``."""
    given = inputs(coll)
    bufs: Buffers = {}
    for g in plan["gpus"]:
        r = g["id"]
        bufs[(r, "i")] = given[r].copy()
        bufs[(r, "o")] = np.zeros(g["output_chunks"], dtype=np.int64)
        bufs[(r, "s")] = np.zeros(g["scratch_chunks"], dtype=np.int64)
    run_plan(plan, bufs, seed)
    key = "i" if coll.in_place else "o"
    return {r: bufs[(r, key)] for r in range(coll.ranks)}
