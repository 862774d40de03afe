"""The static executability check of MSCCL-IR: ``check_msccl`` and its ``Finding``s.

What would stop the executor or hang it: missing attributes, shared
connections, limits, unmatched or mismatched sends and receives, dependencies
that are never released, a run with the runtime's bounded buffering (2 messages
per connection for Simple, 8 for LL/LL128) that stalls, and races between
thread blocks of one GPU.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass
from typing import Any

from algorithms.errors import ScheduleError
from algorithms.formats.msccl.execution import (
    Graph,
    Mapper,
    StepRef,
    build_graph,
    collective_sizes,
    dep_target,
    describe,
    execute_program,
    flag_steps,
    slot_key,
)
from algorithms.formats.msccl.program import (
    COLLS,
    EXECUTOR_COLLS,
    MAX_CNT,
    MAX_TBS_PER_CHANNEL,
    PROTO_SLOTS,
    STEP_TYPES,
    Program,
    ProgramGpu,
    parse_msccl,
)

ERROR = "error"
WARNING = "warning"
MAX_STEPS_EXECUTOR = 64
"""MSCCL_MAX_NUM_STEPS in the MSCCL executor for NCCL (a build-time constant)."""
MAX_STEPS_ANY = 256
"""The old runtime's (and RCCL's) limit on steps per thread block."""
RACE_CHECK_CELLS = 20_000_000
"""The race check keeps a clock of every thread block per happens-before node (2 bytes each); above this
many it is skipped with a warning (the largest corpus file needs about 16 M)."""
_REQUIRED_ALGO = ("name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace", "outofplace",
                  "minBytes", "maxBytes")


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
    if program.coll not in EXECUTOR_COLLS:
        out.append(Finding("bad_attribute", f"algo: coll={program.coll!r} is not a collective the MSCCL executor "
                           f"knows ({', '.join(sorted(EXECUTOR_COLLS))})", WARNING))
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
    flags = flag_steps(program)
    targets: dict[StepRef, int] = {}
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
                        tgt = dep_target(program, g, t, k, flags)
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
        run = execute_program(program, slots, targets)
    except ScheduleError as e:
        out.append(Finding("mismatch", str(e)))
        return out
    for ref in run.unmatched_recvs:
        t = program.gpus[ref[0]].tbs[ref[1]]
        out.append(Finding("unmatched", f"{describe(ref, program)}: unmatched receive: gpu {t.recv} sends nothing "
                           f"more to gpu {ref[0]} on channel {t.chan}", ERROR, *ref))
    for ref in run.unmatched_sends:
        t = program.gpus[ref[0]].tbs[ref[1]]
        out.append(Finding("unmatched", f"{describe(ref, program)}: unmatched send: gpu {t.send} receives nothing "
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
        sz = collective_sizes(program)
        gr, mapper, _, done, gate = build_graph(program, sz, None)
    except ScheduleError:
        return out  # an import problem the findings above do not name: verify reports it when it loads
    out.extend(_races(program, gr, mapper, done, gate))
    return out


def _races(program: Program, gr: Graph, mapper: Mapper, done: dict[StepRef, int],
           gate: dict[StepRef, int], limit: int = 5) -> list[Finding]:
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

    def before(a: StepRef, b: StepRef) -> bool:
        return bool(vc[gate[b], ix[(a[0], a[1])]] >= a[2])

    # Accesses per slot: (order, step, writes, buffer, offset).
    per_slot: dict[int, list[tuple[int, StepRef, bool, str, int]]] = {}
    for g in program.gpus.values():
        for t in g.tbs:
            for k, st in enumerate(t.steps):
                ref = (g.id, t.id, k)
                when = rank[done[ref]]
                _rcv, _snd, reads_src, writes_dst = STEP_TYPES[st.type]
                spans: list[tuple[str, int, bool]] = []
                if reads_src and st.srcbuf is not None:
                    spans.append((st.srcbuf, st.srcoff, False))
                if writes_dst and st.dstbuf is not None:
                    spans.append((st.dstbuf, st.dstoff, True))
                for mb, off, w in spans:
                    for cbuf, idx, cnt in mapper.segments(g.id, mb, off, st.cnt):
                        base = slot_key(g.id, cbuf, idx)
                        for j in range(cnt):
                            per_slot.setdefault(base + j, []).append((when, ref, w, mb, off + j))
    found: dict[tuple[StepRef, StepRef], tuple[str, int, bool]] = {}
    for accesses in per_slot.values():
        if len(accesses) < 2 or not any(a[2] for a in accesses):
            continue
        accesses.sort(key=lambda a: (a[0], not a[2]))
        last: tuple[int, StepRef, bool, str, int] | None = None
        since: list[tuple[int, StepRef, bool, str, int]] = []  # reads since the last write
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
        out.append(Finding("race", f"{describe(ra, program)} and {describe(rb, program)}: {what} {mb}[{off}] of "
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
        sz = collective_sizes(program)
    except ScheduleError:
        return False
    declared = {"i": gpu.i_chunks, "o": gpu.o_chunks}.get(b)
    return declared == 0 and off + cnt <= (sz.i if b == "i" else sz.o)
