"""A concrete executor of MSCCL++ plans on numbers, with the freedom the hardware has: ``run_plan``.

The oracle of plan mutation testing (``sim.verify.plan_mutation``): does a plan compute its collective in
every run the executor may make? It reads the raw plan JSON itself and shares no code with the reader
(``algorithms.formats.mscclpp``) or ``sim.verify.plan``. Within a thread block, the ops between two
``nop``/``barrier`` run together: each data op reads all its sources at one moment and writes its
destinations at a later one, in any order with the block's other data ops, while the block's control
thread runs the signals, waits, flushes, semaphores and port-channel issues in program order (a data op
after a wait may run before the wait returns; a signal may go before the data ops above it finish). A
port channel's proxy runs what was issued to it in order, at moments of its own; ``flush`` waits for it.
A read of a packet waits for its flag. Every GPU starts at a moment of its own: until then its input holds
another run's data, and a peer's plain write into its memory is lost; at its end, its result is taken,
and its input and scratch are handed back to the caller (overwritten). Every move is one random choice
among all that can happen next, from a seeded generator.

The result: the result buffers (taken when each GPU ends), and whether the run deadlocked or left a
signal unmatched or a semaphore off its start value.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Outcome", "expected_result", "given_inputs", "run_plan", "outcome_changed"]

_GARBAGE = -(10 ** 9)
_PROXY = {"put", "pws", "pwsf", "ppkt"}
_DATA = {"copy", "put", "pws", "pwsf", "get", "re", "res", "rre", "rres", "ppkt", "rppkt", "cpkt", "upkt", "repkt",
         "respkt", "recpkt", "recspkt", "glres", "gstore", "gstorepkt"}


@dataclass
class Outcome:
    results: dict[int, np.ndarray]
    deadlock: bool = False
    unmatched: bool = False
    notes: list[str] = field(default_factory=list)


def _elems(plan: dict[str, Any]) -> int:
    sizes = [1]
    for g in plan["gpus"]:
        for tb in g["threadblocks"]:
            for op in tb["ops"]:
                for o in [op, *op.get("ops", [])]:
                    if "tbg_info" in o:
                        sizes.append(int(o["tbg_info"]["tbg_size"]))
    return math.lcm(*sizes)


def given_inputs(plan: dict[str, Any], seed: int = 0) -> dict[int, np.ndarray]:
    """Per GPU, its input (``input_chunks`` chunks of E elements each, E as ``run_plan`` cuts them)."""
    rng = np.random.default_rng(seed)
    e = _elems(plan)
    return {g["id"]: rng.integers(1, 1000, size=g["input_chunks"] * e).astype(np.int64) for g in plan["gpus"]}


def expected_result(plan: dict[str, Any], given: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    """Per GPU, what its result buffer must hold, by the collective's definition (``test``: nothing)."""
    kind, p = plan["collective"], len(plan["gpus"])
    out: dict[int, np.ndarray] = {}
    if kind == "test":
        return out
    total: np.ndarray = np.sum(list(given.values()), axis=0)
    n = len(given[0]) // (p if kind in ("reducescatter", "alltoall") else 1)
    root = plan.get("root") or 0
    for r in range(p):
        if kind == "allreduce":
            out[r] = total
        elif kind == "allgather":
            out[r] = np.concatenate([given[q] for q in range(p)])
        elif kind == "reducescatter":
            out[r] = total[r * n:(r + 1) * n]
        elif kind == "alltoall":
            out[r] = np.concatenate([given[q][r * n:(r + 1) * n] for q in range(p)])
        elif kind == "sendrecv":
            out[r] = given[_sender(plan, r)]
        elif kind == "broadcast":
            out[r] = given[root]
        elif kind == "reduce" and r == root:
            out[r] = total
    return out


def _sender(plan: dict[str, Any], r: int) -> int:
    """Who sends to ``r`` in a sendrecv: the other GPU (two GPUs), else the GPU whose ops write r's result buffer
    through a remote buffer (the plan does not say the DSL's ring of groups)."""
    if len(plan["gpus"]) == 2:
        return 1 - r
    result = "i" if plan["inplace"] else "o"
    for g in plan["gpus"]:
        for tb in g["threadblocks"]:
            refs = {t: [i for ref in tb.get("remote_buffer_refs", []) if ref["access_channel_type"] == t
                        for i in ref["remote_buffer_ids"]] for t in ("memory", "port")}
            for op in tb["ops"]:
                for b in op.get("dst_buff", []):
                    if "buffer_id" in b and op.get("channel_type") in refs:
                        rb = g["remote_buffers"][refs[op["channel_type"]][b["buffer_id"]]]
                        if rb["rank"] == r and rb["type"] == result:
                            return int(g["id"])
    raise ValueError(f"no gpu writes gpu {r}'s result")


class _Run:
    def __init__(self, plan: dict[str, Any], given: dict[int, np.ndarray], seed: int) -> None:
        self.plan = plan
        self.rng = random.Random(seed)
        self.e = _elems(plan)
        self.kind = plan["collective"]
        self.inplace = bool(plan["inplace"])
        self.given = given
        self.gpus = {g["id"]: g for g in plan["gpus"]}
        self.bufs: dict[tuple[int, str], np.ndarray] = {}
        self.flags: dict[tuple[int, str], np.ndarray] = {}
        for r, g in self.gpus.items():
            e = self.e
            i = np.full(g["input_chunks"] * e, _GARBAGE, dtype=np.int64)
            o = np.full(g["output_chunks"] * e, _GARBAGE, dtype=np.int64)
            if self.inplace and self.kind == "allgather":
                c = g["input_chunks"] * e
                i = o[r * c:(r + 1) * c]
            elif self.inplace and self.kind == "reducescatter":
                c = g["output_chunks"] * e
                o = i[r * c:(r + 1) * c]
            elif self.inplace and self.kind != "test":
                o = i
            self.bufs[(r, "i")], self.bufs[(r, "o")] = i, o
            self.bufs[(r, "s")] = np.full(g["scratch_chunks"] * e, _GARBAGE, dtype=np.int64)
            for b in "ios":
                self.bufs[(r, "p" + b)] = np.full(len(self.bufs[(r, b)]), _GARBAGE, dtype=np.int64)
                self.flags[(r, "p" + b)] = np.zeros(len(self.bufs[(r, b)]), dtype=bool)
        self.started: set[int] = set()
        self.ended: set[int] = set()
        self.results: dict[int, np.ndarray] = {}
        self.counters: dict[tuple[int, int, str, int], int] = {}
        self.sems = {(r, k): int(s["init_value"]) for r, g in self.gpus.items()
                     for k, s in enumerate(g.get("semaphores", []))}
        self.fifo: dict[tuple[int, int, int], deque[tuple[str, Any]]] = {}
        self.barriers: dict[tuple[int, int], list[int]] = {}
        self.tbs: list[dict[str, Any]] = []
        self._peer_cache: dict[tuple[int, str], list[tuple[int, int]]] = {}
        for r, g in self.gpus.items():
            for tb in g["threadblocks"]:
                ops = [o for op in tb["ops"] for o in (op.get("ops", []) if op["name"] == "pipeline" else [op])]
                self.tbs.append({"gpu": r, "tb": tb, "ops": ops, "seg": 0, "ctl": 0, "data": {}, "end": 0,
                                 "arrived": False, "ids": {}, "index": len(self.tbs)})
        for t in self.tbs:
            self._segment(t)

    # ------------------------------------------------------------ addressing

    def _peers(self, r: int, ctype: str) -> list[tuple[int, int]]:
        got = self._peer_cache.get((r, ctype))
        if got is not None:
            return got
        out, seen = self._peer_cache.setdefault((r, ctype), []), {}  # type: ignore[var-annotated]
        for ch in self.gpus[r]["channels"]:
            if ch["channel_type"] == ctype:
                for q in ch["connected_to"]:
                    seen[q] = seen.get(q, 0) + 1
                    out.append((q, seen[q] - 1))
        return out

    def _chan(self, t: dict[str, Any], ctype: str, i: int) -> tuple[int, int]:
        ids = t["ids"].get(ctype)
        if ids is None:
            ids = t["ids"][ctype] = [c for ch in t["tb"].get("channels", []) if ch["channel_type"] == ctype
                                     for c in ch["channel_ids"]]
        return self._peers(t["gpu"], ctype)[ids[i]]

    def _switch(self, t: dict[str, Any], i: int) -> tuple[str, list[int]]:
        groups = [(ch.get("buffer_type", ch.get("buff")), g["ranks"]) for ch in self.gpus[t["gpu"]]["channels"]
                  if ch["channel_type"] == "switch" for g in ch["rank_groups"]]
        ids = [c for ch in t["tb"].get("channels", []) if ch["channel_type"] == "switch" for c in ch["channel_ids"]]
        return groups[ids[i]]

    def _where(self, t: dict[str, Any], op: dict[str, Any], b: dict[str, Any], packet: bool = False
               ) -> list[tuple[int, str, slice]]:
        """The (rank, buffer, element slice) list a buffer reference names (several: a switch group)."""
        r = t["gpu"]
        if "switch_channel_id" in b:
            letter, ranks = self._switch(t, b["switch_channel_id"])
            keys = [(q, ("p" if packet else "") + letter) for q in ranks]
        elif "buffer_id" in b:
            ctype = op.get("channel_type", "none")
            ids = [i for ref in t["tb"].get("remote_buffer_refs", []) if ref["access_channel_type"] == ctype
                   for i in ref["remote_buffer_ids"]]
            rb = self.gpus[r]["remote_buffers"][ids[b["buffer_id"]]]
            keys = [(rb["rank"], ("p" if packet else "") + rb["type"])]
        else:
            keys = [(r, ("p" if packet else "") + b["type"])]
        e = self.e
        start, n = b["index"] * e, b["size"] * e
        if "tbg_info" in op:
            k, g = op["tbg_info"]["tb_id"], op["tbg_info"]["tbg_size"]
            part = n // g
            start, n = start + k * part, part
        return [(q, s, slice(start, start + n)) for q, s in keys]

    def _read(self, key: tuple[int, str, slice]) -> np.ndarray:
        q, s, sl = key
        return self.bufs[(q, s)][sl].copy()

    def _write(self, key: tuple[int, str, slice], value: np.ndarray, add: bool = False) -> None:
        q, s, sl = key
        if q not in self.started and not s.startswith("p"):
            return  # the GPU has not started: its caller writes its buffers after this
        buf = self.bufs[(q, s)]
        if add:
            buf[sl] = buf[sl] + value
        else:
            buf[sl] = value
        if s.startswith("p"):
            self.flags[(q, s)][sl] = True

    def _flagged(self, key: tuple[int, str, slice]) -> bool:
        q, s, sl = key
        return bool(self.flags[(q, s)][sl].all())

    # ------------------------------------------------------------ ops

    def _packet_reads(self, t: dict[str, Any], op: dict[str, Any]) -> list[tuple[int, str, slice]]:
        name, src = op["name"], op.get("src_buff", [])
        if name in ("upkt", "rppkt"):
            return [k for b in src for k in self._where(t, op, {**b, "type": "s"}, True)]
        if name in ("repkt", "respkt", "recpkt", "recspkt"):
            return [k for b in src[1:] for k in self._where(t, op, {**b, "type": "s"}, True)]
        if name == "gstorepkt":
            return [k for b in src for k in self._where(t, op, b, True)]
        return []

    def _compute(self, t: dict[str, Any], op: dict[str, Any]) -> list[tuple[tuple[int, str, slice], np.ndarray]]:
        """Read the op's sources: the writes it will make."""
        name = op["name"]
        src, dst = op.get("src_buff", []), op.get("dst_buff", [])

        def one(b: dict[str, Any], packet: bool = False) -> tuple[int, str, slice]:
            return self._where(t, op, b, packet)[0]

        port = op.get("channel_type") == "port"
        if name in ("copy", "put", "pws", "pwsf", "get", "cpkt", "upkt", "ppkt", "rppkt"):
            if name == "upkt" or name == "rppkt":
                srcs = [one({**b, "type": "s"}, True) for b in src]
            else:
                srcs = [one(b, name == "ppkt" and port) for b in src]
            dsts = [one(b, name in ("cpkt", "ppkt", "rppkt")) for b in dst]
            if name in ("ppkt", "rppkt"):
                dsts = [(q, "ps", sl) for q, _, sl in dsts]
            if len(srcs) == 1 and len(dsts) > 1:
                srcs = srcs * len(dsts)
            return [(d, self._read(s)) for s, d in zip(srcs, dsts, strict=True)]
        if name in ("re", "res", "rre", "rres", "repkt", "respkt", "recpkt", "recspkt"):
            packet = name.endswith("pkt")
            value = self._read(one(src[0]))
            for b in src[1:]:
                value = value + self._read(one({**b, "type": "s"}, True) if packet else one(b))
            out = [(one(dst[0]), value)]
            keep = name.startswith("rec")
            if keep:
                out.append((one(dst[1], True), value))
            for b in dst[1 + keep:]:
                d = one(b, packet)
                out.append(((d[0], "ps", d[2]) if packet else d, value))
            return out
        if name == "glres":  # pair by pair (the DSL fuses several)
            pairs: list[tuple[tuple[int, str, slice], np.ndarray]] = []
            for sb, db in zip(src, dst, strict=True):
                value = np.sum([self._read(k) for k in self._where(t, op, sb)], axis=0)
                pairs.extend((k, value) for k in self._where(t, op, db))
            return pairs
        if name in ("gstore", "gstorepkt"):
            pairs = []
            for sb, db in zip(src, dst, strict=True):
                value = self._read(one(sb, name == "gstorepkt"))
                pairs.extend((k, value) for k in self._where(t, op, db, name == "gstorepkt"))
            return pairs
        raise AssertionError(f"the machine does not know op {name!r}")

    # ------------------------------------------------------------ thread blocks

    def _segment(self, t: dict[str, Any]) -> None:
        """Open the segment from t["seg"]: its control ops and data ops up to the next nop/barrier."""
        ops = t["ops"]
        end = t["seg"]
        while end < len(ops) and ops[end]["name"] not in ("nop", "barrier"):
            end += 1
        t["end"] = end
        t["ctl"] = t["seg"]
        t["data"] = {k: None for k in range(t["seg"], end) if ops[k]["name"] in _DATA
                     and not (ops[k]["name"] in _PROXY and ops[k].get("channel_type") == "port")}
        self._skip_data(t)

    @staticmethod
    def _skip_data(t: dict[str, Any]) -> None:
        while t["ctl"] < t["end"] and t["ctl"] in t["data"]:
            t["ctl"] += 1

    def _control_ready(self, t: dict[str, Any]) -> bool:
        if t["ctl"] >= t["end"]:
            return False
        op = t["ops"][t["ctl"]]
        name, ctype = op["name"], op.get("channel_type", "none")
        r = t["gpu"]
        if name in ("wait", "rlxwait"):
            return all(self.counters.get((q, r, ctype, k), 0) > 0
                       for q, k in (self._chan(t, ctype, c) for c in op["channel_ids"]))
        if name == "sem_acquire":
            return all(self.sems[(r, s)] > 0 for s in op["semaphore_ids"])
        if name == "flush":
            return all(not self.fifo.get(self._fifo_key(t, c)) for c in op.get("channel_ids", []))
        if name == "pwsf" and t.get("flushing") == t["ctl"]:
            return not self.fifo.get(t["pwsf_key"])
        return True

    def _fifo_key(self, t: dict[str, Any], c: int) -> tuple[int, int, int]:
        q, k = self._chan(t, "port", c)
        return (t["gpu"], q, k)

    def _control(self, t: dict[str, Any]) -> None:
        op = t["ops"][t["ctl"]]
        name, ctype = op["name"], op.get("channel_type", "none")
        r = t["gpu"]
        if name in ("signal", "rlxsignal"):
            for c in op["channel_ids"]:
                q, k = self._chan(t, ctype, c)
                if ctype == "port":
                    self.fifo.setdefault(self._fifo_key(t, c), deque()).append(("signal", (r, q, ctype, k)))
                else:
                    self.counters[(r, q, ctype, k)] = self.counters.get((r, q, ctype, k), 0) + 1
        elif name in ("wait", "rlxwait"):
            for c in op["channel_ids"]:
                q, k = self._chan(t, ctype, c)
                self.counters[(q, r, ctype, k)] -= 1
        elif name == "sem_release":
            for s in op["semaphore_ids"]:
                self.sems[(r, s)] += 1
        elif name == "sem_acquire":
            for s in op["semaphore_ids"]:
                self.sems[(r, s)] -= 1
        elif name in _PROXY and ctype == "port":
            if name == "pwsf" and t.get("flushing") == t["ctl"]:
                t["flushing"] = None
                t["ctl"] += 1
                self._skip_data(t)
                return
            for i in range(len(op["dst_buff"])):
                c = op["channel_ids"][i]
                key = self._fifo_key(t, c)
                self.fifo.setdefault(key, deque()).append(("put", (t, op, i)))
                if name in ("pws", "pwsf"):
                    q, k = self._chan(t, "port", c)
                    self.fifo[key].append(("signal", (r, q, "port", k)))
                if name == "pwsf":
                    t["flushing"], t["pwsf_key"] = t["ctl"], key
            if name == "pwsf":
                return  # the same op again: it waits for the proxy
        t["ctl"] += 1
        self._skip_data(t)

    def _proxy(self, key: tuple[int, int, int]) -> None:
        what, arg = self.fifo[key].popleft()
        if what == "signal":
            self.counters[arg] = self.counters.get(arg, 0) + 1
            return
        t, op, i = arg
        one = {**op, "src_buff": [op["src_buff"][min(i, len(op["src_buff"]) - 1)]], "dst_buff": [op["dst_buff"][i]]}
        for d, v in self._compute(t, one):
            self._write(d, v)

    def _fence_ready(self, t: dict[str, Any]) -> bool:
        return t["ctl"] >= t["end"] and all(v == "done" for v in t["data"].values()) and t["end"] < len(t["ops"]) \
            and not t["arrived"]

    def _fence(self, t: dict[str, Any]) -> None:
        op = t["ops"][t["end"]]
        if op["name"] == "barrier":
            key = (t["gpu"], op["barrier_id"])
            group = self.barriers.setdefault(key, [])
            group.append(t["index"])
            t["arrived"] = True
            if len(group) < op["num_threadblocks"]:
                return
            del self.barriers[key]
            for j in group:
                m = self.tbs[j]
                m["arrived"] = False
                m["seg"] = m["end"] + 1
                self._segment(m)
            return
        t["seg"] = t["end"] + 1
        self._segment(t)

    @staticmethod
    def _done(t: dict[str, Any]) -> bool:
        return t["end"] >= len(t["ops"]) and t["ctl"] >= t["end"] and all(v == "done" for v in t["data"].values())

    # ------------------------------------------------------------ run

    def _start(self, r: int) -> None:
        self.started.add(r)
        i, o = self.bufs[(r, "i")], self.bufs[(r, "o")]
        if not np.shares_memory(i, o):
            o[:] = _GARBAGE - 1
        i[:] = self.given[r]
        self.bufs[(r, "s")][:] = _GARBAGE - 2

    def _end(self, r: int) -> None:
        self.ended.add(r)
        res = self._result(r)
        if res is not None:
            self.results[r] = res.copy()
        # The caller has its memory back: a peer still reading it sees something else.
        if not np.shares_memory(self.bufs[(r, "i")], self.bufs[(r, "o")]):
            self.bufs[(r, "i")][:] = _GARBAGE - 3
        self.bufs[(r, "s")][:] = _GARBAGE - 4

    def _result(self, r: int) -> np.ndarray | None:
        if self.kind == "test" or (self.kind == "reduce" and r != (self.plan.get("root") or 0)):
            return None
        return self.bufs[(r, "o")]

    def run(self) -> Outcome:
        while True:
            acts: list[tuple[str, Any]] = [("start", r) for r in self.gpus if r not in self.started]
            for t in self.tbs:
                if t["gpu"] not in self.started:
                    continue
                if self._control_ready(t):
                    acts.append(("ctl", t))
                for k, state in t["data"].items():
                    if state is None:
                        if all(self._flagged(x) for x in self._packet_reads(t, t["ops"][k])):
                            acts.append(("read", (t, k)))
                    elif state != "done":
                        acts.append(("write", (t, k)))
                if self._fence_ready(t):
                    acts.append(("fence", t))
            acts.extend(("proxy", key) for key, q in self.fifo.items() if q)
            for r in self.gpus:  # a GPU's run ends when its thread blocks are done and its proxies idle
                if r in self.started and r not in self.ended and all(
                        self._done(t) for t in self.tbs if t["gpu"] == r) and not any(
                        q for key, q in self.fifo.items() if key[0] == r):
                    acts.append(("end", r))
            if not acts:
                break
            what, arg = self.rng.choice(acts)
            if what == "start":
                self._start(arg)
            elif what == "end":
                self._end(arg)
            elif what == "ctl":
                self._control(arg)
            elif what == "read":
                t, k = arg
                t["data"][k] = self._compute(t, t["ops"][k])
            elif what == "write":
                t, k = arg
                for d, v in t["data"][k]:
                    self._write(d, v)
                t["data"][k] = "done"
            elif what == "fence":
                self._fence(arg)
            else:
                self._proxy(arg)
        out = Outcome(self.results)
        if len(self.ended) < len(self.gpus):
            out.deadlock = True
            out.notes.append("deadlock")
        if any(v for v in self.counters.values()) or any(
                self.sems[k] != int(self.gpus[k[0]]["semaphores"][k[1]]["init_value"]) for k in self.sems):
            out.unmatched = True
            out.notes.append("unmatched signal or semaphore")
        return out


def run_plan(plan: dict[str, Any], given: dict[int, np.ndarray], seed: int) -> Outcome:
    """Run ``plan`` (parsed JSON) on the inputs ``given`` with one seeded choice of every move (module
    docstring)."""
    return _Run(plan, given, seed).run()


def outcome_changed(plan: dict[str, Any], seeds: int = 12) -> str | None:
    """Why some run of ``plan`` in ``seeds`` tries does not compute its collective (None: every one does)."""
    given = given_inputs(plan)
    want = expected_result(plan, given)
    for seed in range(seeds):
        try:
            got = run_plan(plan, given, seed)
        except (KeyError, IndexError, ValueError, TypeError) as e:
            return f"seed {seed}: the executor cannot run it ({type(e).__name__}: {e})"
        if got.deadlock or got.unmatched:
            return f"seed {seed}: {', '.join(got.notes)}"
        for r, value in want.items():
            if r not in got.results or not np.array_equal(got.results[r], value):
                return f"seed {seed}: gpu {r}'s result is wrong"
    return None
