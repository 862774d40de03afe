"""Symbolic state of a schedule, and the step semantics every executor shares.

The write rule (docs/design.md, "Step semantics"), here once and used by the
verifier (lockstep), ``sim.verify.dataflow.execute_in_order`` and the simulator's
symbolic payloads: a transfer reads its source when it starts (in lockstep,
every read of a step sees the state at the start of the step) and writes its
destination when it ends; ``combine`` says what the write leaves there: a
copy replaces, a reduce adds (the union of disjoint contributions; an
overlap counts a contribution twice), a barrier's tokens union idempotently
(its copies too), and reducing into an empty slot is an uninitialised read.

A contribution ``(s, i)`` is rank s's input chunk i. A slot's content is a
flat tuple ``(i0, mask0, i1, mask1, ...)`` sorted by chunk index, where bit s
of ``mask`` says that ``(s, i)`` is present; ``None`` is an empty slot. Almost
every slot of a correct schedule carries a single chunk index, so the common
case is a 2-tuple and a union is one ``|`` (bitsets make this fast).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence

from algorithms.ir import Buf, Collective, Kind, Schedule

__all__ = ["Content", "SlotLayout", "combine", "write", "union", "overlaps", "initial_state", "expected_state",
           "describe"]

Content = tuple[int, ...]


class SlotLayout:
    """Flat numbering of every (rank, buffer, index) slot of a schedule."""

    def __init__(self, schedule: Schedule) -> None:
        coll = schedule.collective
        p = coll.ranks
        self.collective = coll
        self.bases: dict[Buf, list[int]] = {Buf.INPUT: [], Buf.OUTPUT: [], Buf.SCRATCH: []}
        self.sizes: dict[Buf, list[int]] = {Buf.INPUT: [], Buf.OUTPUT: [], Buf.SCRATCH: []}
        n = 0
        for r in range(p):
            for buf in (Buf.INPUT, Buf.OUTPUT, Buf.SCRATCH):
                size = schedule.buffer_chunks(r, buf)
                if buf is Buf.OUTPUT and coll.in_place:
                    self.bases[buf].append(self.bases[Buf.INPUT][r])
                    self.sizes[buf].append(size)
                    continue
                self.bases[buf].append(n)
                self.sizes[buf].append(size)
                n += size
        self.num_slots = n
        # Sorted (base, rank, buf) of every real buffer, for where().
        self._starts = sorted(
            (self.bases[b][r], r, b)
            for r in range(p)
            for b in (Buf.INPUT, Buf.OUTPUT, Buf.SCRATCH)
            if self.sizes[b][r] and not (b is Buf.OUTPUT and coll.in_place)
        )
        self._keys = [s[0] for s in self._starts]

    def slot(self, rank: int, buf: Buf, index: int) -> int:
        """The flat id of one slot."""
        return self.bases[buf][rank] + index

    def where(self, slot: int) -> tuple[int, Buf, int]:
        """(rank, buffer, index) of a flat slot id."""
        if not 0 <= slot < self.num_slots:
            raise IndexError(slot)
        base, r, buf = self._starts[bisect_right(self._keys, slot) - 1]
        return r, buf, slot - base


def union(a: Content, b: Content) -> Content:
    """The union of two contents (overlap is the caller's concern)."""
    if len(a) == 2 and len(b) == 2 and a[0] == b[0]:
        return (a[0], a[1] | b[1])
    merged: dict[int, int] = {}
    for c in (a, b):
        for j in range(0, len(c), 2):
            merged[c[j]] = merged.get(c[j], 0) | c[j + 1]
    return tuple(x for k in sorted(merged) for x in (k, merged[k]))


def overlaps(a: Content, b: Content) -> bool:
    """True when a and b share a contribution (a reduce would count it twice)."""
    if len(a) == 2 and len(b) == 2:
        return a[0] == b[0] and bool(a[1] & b[1])
    bm = {b[j]: b[j + 1] for j in range(0, len(b), 2)}
    return any(a[j + 1] & bm.get(a[j], 0) for j in range(0, len(a), 2))


def combine(cur: Content | None, v: Content, copy: bool, idempotent: bool) -> Content | None:
    """What a write of ``v`` leaves in a slot holding ``cur``; None when the write is invalid.

    ``copy`` is the transfer's op (True: copy, False: reduce); ``idempotent``
    is True for a barrier, whose tokens union however often they arrive.
    Invalid: a reduce into an empty slot (``cur is None``: an uninitialised
    read) or a reduce whose contributions overlap ``cur`` (a double count).
    """
    if copy and not idempotent:
        return v
    if cur is None:
        return v if copy else None
    if len(cur) == 2 and len(v) == 2 and cur[0] == v[0]:
        # The common case of union(), inlined: one chunk index on both sides.
        if idempotent or not cur[1] & v[1]:
            return (v[0], cur[1] | v[1])
        return None
    if idempotent or not overlaps(cur, v):
        return union(cur, v)
    return None


def write(state: list[Content | None], dst: int, values: Sequence[Content | None], copy: bool,
          idempotent: bool) -> list[int]:
    """Write ``values`` (a transfer's source snapshot) to ``state[dst:]`` by ``combine``.

    An empty source slot writes nothing (the read was already the error). An
    invalid write leaves the slot as it was; the offsets of those are returned
    (the caller reports them: uninitialised when the slot is empty, else a double count).
    """
    bad: list[int] = []
    for k, v in enumerate(values):
        if v is None:
            continue
        new = combine(state[dst + k], v, copy, idempotent)
        if new is None:
            bad.append(k)
        else:
            state[dst + k] = new
    return bad


def initial_state(layout: SlotLayout) -> list[Content | None]:
    """Every slot at the start: input slots hold their own contribution (broadcast: root's only)."""
    coll = layout.collective
    state: list[Content | None] = [None] * layout.num_slots
    for r in range(coll.ranks):
        if coll.kind is Kind.BROADCAST and r != coll.root:
            continue
        base = layout.bases[Buf.INPUT][r]
        bit = 1 << r
        for i in range(layout.sizes[Buf.INPUT][r]):
            state[base + i] = (i, bit)
    return state


def expected_state(coll: Collective, layout: SlotLayout) -> dict[int, Content]:
    """The postcondition: slot id -> the exact contents it must end with (unlisted slots: anything)."""
    p, c, root = coll.ranks, coll.chunks, coll.root
    full = (1 << p) - 1
    k = coll.kind
    out: dict[int, Content] = {}
    for r in range(p):
        ib = layout.bases[Buf.INPUT][r]
        ob = layout.bases[Buf.OUTPUT][r]
        if k is Kind.ALLREDUCE or k is Kind.BARRIER or (k is Kind.REDUCE and r == root):
            out.update((ib + i, (i, full)) for i in range(c))
        elif k is Kind.BROADCAST:
            out.update((ib + i, (i, 1 << root)) for i in range(c))  # type: ignore[operator]
        elif k is Kind.ALLGATHER or (k is Kind.GATHER and r == root):
            out.update((ob + s * c + i, (i, 1 << s)) for s in range(p) for i in range(c))
        elif k is Kind.REDUCESCATTER:
            out.update((ob + i, (r * c + i, full)) for i in range(c))
        elif k is Kind.SCATTER:
            out.update((ob + i, (r * c + i, 1 << root)) for i in range(c))  # type: ignore[operator]
        elif k is Kind.ALLTOALL:
            out.update((ob + s * c + i, (r * c + i, 1 << s)) for s in range(p) for i in range(c))
        elif k is Kind.ALLTOALLV:
            # Rank r's output is its matrix column in source order: block s holds s's input block for r.
            for s in range(p):
                o, i0 = ob + coll.recv_offset(r, s), coll.send_offset(s, r)
                out.update((o + i, (i0 + i, 1 << s)) for i in range(coll.block(s, r)))
    return out


def _ranges(mask: int) -> str:
    """The set bits of ``mask`` as maximal rising runs, e.g. ``0-2,4-7`` for 0b11110111 (``""`` for 0)."""
    parts: list[str] = []
    bits = bin(mask)[:1:-1]  # bit i at position i
    for m in re.finditer("1+", bits):
        s, e = m.start(), m.end() - 1
        parts.append(str(s) if s == e else f"{s}-{e}")
    return ",".join(parts)


def describe(content: Content | None) -> list[dict[str, object]]:
    """A content as JSON-ready ``[{"chunk": i, "ranks": "0-3,5"}]`` (empty list for an empty slot)."""
    if content is None:
        return []
    return [{"chunk": content[j], "ranks": _ranges(content[j + 1])} for j in range(0, len(content), 2)]


def describe_text(content: Content | None) -> str:
    """A content as text, e.g. ``chunk 5 from ranks 0-3,5`` (``chunk 2 from rank 1`` for one rank)."""
    parts: Sequence[dict[str, object]] = describe(content)
    if not parts:
        return "nothing"
    def who(ranks: object) -> str:
        text = str(ranks)
        return f"rank {text}" if text.isdigit() else f"ranks {text}"

    return "; ".join(f"chunk {d['chunk']} from {who(d['ranks'])}" for d in parts)
