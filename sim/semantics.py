"""Symbolic state of a schedule: which contributions each slot carries.

A contribution ``(s, i)`` is rank s's input chunk i. A slot's content is a
flat tuple ``(i0, mask0, i1, mask1, ...)`` sorted by chunk index, where bit s
of ``mask`` says that ``(s, i)`` is present; ``None`` is an empty slot. Almost
every slot of a correct schedule carries a single chunk index, so the common
case is a 2-tuple and a union is one ``|`` (bitsets make this fast).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from algorithms.ir import Buf, Collective, Kind, Schedule

__all__ = ["Content", "SlotLayout", "union", "overlaps", "initial_state", "expected_state", "describe"]

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
    return out


def _ranges(mask: int) -> str:
    parts: list[str] = []
    s = 0
    while mask:
        if mask & 1:
            e = s
            while mask & 2:
                mask >>= 1
                e += 1
            parts.append(str(s) if s == e else f"{s}-{e}")
        mask >>= 1
        s += 1
    return ",".join(parts)


def describe(content: Content | None) -> list[dict[str, object]]:
    """A content as JSON-ready ``[{"chunk": i, "ranks": "0-3,5"}]`` (empty list for an empty slot)."""
    if content is None:
        return []
    return [{"chunk": content[j], "ranks": _ranges(content[j + 1])} for j in range(0, len(content), 2)]


def describe_text(content: Content | None) -> str:
    """A content as text, e.g. ``chunk 5 from ranks 0-3,5``."""
    parts: Sequence[dict[str, object]] = describe(content)
    if not parts:
        return "nothing"
    return "; ".join(f"chunk {d['chunk']} from ranks {d['ranks']}" for d in parts)
