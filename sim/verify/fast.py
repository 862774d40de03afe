"""Lockstep symbolic execution on compact columns: the verifier's semantics at tens of millions of transfers.

``sim.verify.verifier`` keeps a Python tuple ``(chunk, rank bitmask)`` per slot: at
p = 4096 that is 16.7 M slots of 4096-bit integers, about 10 GB. Here a slot
is three integers: its chunk index (-1: empty) and a *cyclic interval* of
contributing ranks ``[lo, lo + ln) mod p``. Every initial and expected
content is such an interval (one rank, or all of them), and the unions the
usual algorithms form are too (a ring adds the neighbour's interval; recursive
doubling adds an aligned block). One chunk over a set of ranks that is no
interval (a block of rows and columns of a torus, as the torus algorithms'
halvings form) is *interned*: ln is 0 and lo the set's number in a table of
rank bitmasks, each distinct set stored once, and a step's reductions between
such operands are computed once per distinct pair of sets (a run of chunks
that shares its history costs one union, not one a chunk). Any other content
(two chunks in a slot) is *spilled*: the slot's chunk is -2 and its content
is kept, in ``sim.verify.semantics`` form, in a dict. Whole steps are
executed as numpy operations; reductions into a slot that several transfers
of the step reduce into, and anything touching a spilled slot, go through
``sim.verify.semantics.combine`` one chunk at a time, in program order.

The semantics are ``sim.verify.verifier.execute``'s (docs/design.md, "Step semantics"):
reads see the state at the step's start; the first copy to a slot in a step
wins and any other write to that slot in the step is a race and is skipped;
reductions combine in program order; reading an empty slot, reducing into one
and counting a contribution twice are violations. ``run`` returns the
violations and ``check`` compares the final state with the postcondition.
Dead writes (hints, not violations) follow the verifier's rule too: per slot,
the last step that read it and the first transfer of the last step whose
write to it took effect; a copy that lands on a slot written since its last
read names that write.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from algorithms.ir import BUFS, Buf, Collective, Columns, Kind, Schedule
from sim.verify.report import DOUBLE_COUNT, RACE, UNINITIALISED_READ, WRONG_SLOT, Hint, Violation, dead_write
from sim.verify.semantics import Content, SlotLayout, combine, describe_text

__all__ = ["CompactState", "run", "check", "verdict", "verdict_with_hints", "expected_columns", "initial_columns"]

EMPTY, SPILLED = -1, -2
BATCH_MOVES = 1 << 22
"""Chunk moves a step executes at once where it may run in parts (``_Runner._parts``): a step's arrays cost about
``STEP_MOVE_BYTES`` a move, and the halving on torus:64x64 moves 33 M chunks in its first step."""
STEP_MOVE_BYTES = 200
"""Bytes a chunk move of the step being executed costs (its index, slot and content arrays and their temporaries):
measured 198 B, rabenseifner_torus on torus:64x64 run a step whole (33.5 M moves: 7.6 GB peak, 0.95 GB of it
the state and the schedule)."""


@dataclass
class CompactState:
    """Per slot: chunk index (-1 empty, -2 spilled), and the contributing ranks ``[lo, lo + ln) mod p``, or
    (ln = 0) the set numbered lo in ``sets``."""

    p: int
    chunk: np.ndarray
    lo: np.ndarray
    ln: np.ndarray
    spill: dict[int, Content]
    rows: np.ndarray
    """chunk, lo and ln are the columns of this (slots x 3) array."""
    sets: list[int] = field(default_factory=list)
    """The interned sets of ranks, as bitmasks."""
    numbers: dict[int, int] = field(default_factory=dict)
    """Each interned bitmask's number in ``sets``."""

    def intern(self, mask: int) -> int:
        """The number of the set ``mask``, stored once."""
        n = self.numbers.get(mask)
        if n is None:
            n = self.numbers[mask] = len(self.sets)
            self.sets.append(mask)
        return n

    def ranks_of(self, lo: int, ln: int) -> int:
        """The bitmask of a slot's contributing ranks from its (lo, ln) columns."""
        return self.sets[lo] if ln == 0 else _mask(lo, ln, self.p)

    def content(self, slot: int) -> Content | None:
        """The ``sim.verify.semantics`` content of one slot."""
        c = int(self.chunk[slot])
        if c == EMPTY:
            return None
        if c == SPILLED:
            return self.spill[slot]
        return (c, self.ranks_of(int(self.lo[slot]), int(self.ln[slot])))

    def set(self, slot: int, content: Content | None) -> None:
        """Store a ``sim.verify.semantics`` content, compactly when it is one chunk (over a cyclic interval,
        or interned)."""
        if content is None:
            self.chunk[slot] = EMPTY
            return
        if len(content) == 2 and content[0] >= 0:
            iv = _interval(content[1], self.p)
            self.chunk[slot] = content[0]
            self.lo[slot], self.ln[slot] = iv if iv is not None else (self.intern(content[1]), 0)
            return
        self.chunk[slot] = SPILLED
        self.spill[slot] = content


def _mask(lo: int, ln: int, p: int) -> int:
    if lo + ln <= p:
        return ((1 << ln) - 1) << lo
    return ((1 << (lo + ln - p)) - 1) | (((1 << (p - lo)) - 1) << lo)


def _run_of(x: int) -> tuple[int, int] | None:
    """(start, length) when the set bits of x > 0 are contiguous."""
    low = (x & -x).bit_length() - 1
    y = x >> low
    return (low, y.bit_length()) if y & (y + 1) == 0 else None


def _interval(mask: int, p: int) -> tuple[int, int] | None:
    """The cyclic interval (lo, ln) whose bits are ``mask``, or None; the full set is (0, p)."""
    full = (1 << p) - 1
    if mask <= 0 or mask > full:
        return None
    if mask == full:
        return 0, p
    run = _run_of(mask)
    if run is not None:
        return run
    gap = _run_of(full ^ mask)
    if gap is None:
        return None
    return (gap[0] + gap[1]) % p, p - gap[1]


def initial_columns(layout: SlotLayout) -> CompactState:
    """The state before step 0, as ``sim.verify.semantics.initial_state`` defines it."""
    coll = layout.collective
    p = coll.ranks
    n = layout.num_slots
    # One row per slot (chunk, lo, ln): a step's random accesses touch one cache line per slot.
    rows = np.zeros((n, 3), dtype=np.int32)
    rows[:, 0] = EMPTY
    st = CompactState(p, rows[:, 0], rows[:, 1], rows[:, 2], {}, rows)
    for r in range(p):
        if coll.kind is Kind.BROADCAST and r != coll.root:
            continue
        base, size = layout.bases[Buf.INPUT][r], layout.sizes[Buf.INPUT][r]
        st.chunk[base:base + size] = np.arange(size)
        st.lo[base:base + size] = r
        st.ln[base:base + size] = 1
    return st


def expected_columns(coll: Collective, layout: SlotLayout, who: range | None = None
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The postcondition of ``sim.verify.semantics.expected_state`` as arrays: slots, chunk, lo, ln (sorted by slot);
    with ``who``, only those ranks' slots (all-to-allv: always every rank's)."""
    p, c, root = coll.ranks, coll.chunks, coll.root
    k = coll.kind
    who = range(p) if who is None else who
    everyone = np.arange(who.start, who.stop, dtype=np.int64)
    top = root if root is not None else 0
    only_root = np.array([top] if top in who else [], dtype=np.int64)
    ib_all = np.array(layout.bases[Buf.INPUT], dtype=np.int64)
    ob_all = np.array(layout.bases[Buf.OUTPUT], dtype=np.int64)
    i = np.arange(c, dtype=np.int64)
    sc = np.arange(p * c, dtype=np.int64)  # s * c + i over s, then i

    def grid(base: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        return (base[:, None] + offsets[None, :]).ravel()

    if k in (Kind.ALLREDUCE, Kind.BARRIER, Kind.REDUCE):
        ranks = only_root if k is Kind.REDUCE else everyone
        slots = grid(ib_all[ranks], i)
        chunk, lo, ln = np.tile(i, len(ranks)), np.zeros_like(slots), np.full_like(slots, p)
    elif k is Kind.BROADCAST:
        slots = grid(ib_all[everyone], i)
        chunk, lo, ln = np.tile(i, len(everyone)), np.full_like(slots, root), np.ones_like(slots)
    elif k in (Kind.ALLGATHER, Kind.GATHER):
        ranks = only_root if k is Kind.GATHER else everyone
        slots = grid(ob_all[ranks], sc)
        chunk, lo, ln = np.tile(sc % c, len(ranks)), np.tile(sc // c, len(ranks)), np.ones_like(slots)
    elif k is Kind.REDUCESCATTER:
        slots = grid(ob_all[everyone], i)
        chunk, lo, ln = grid(everyone * c, i), np.zeros_like(slots), np.full_like(slots, p)
    elif k is Kind.SCATTER:
        slots = grid(ob_all[everyone], i)
        chunk, lo, ln = grid(everyone * c, i), np.full_like(slots, root), np.ones_like(slots)
    elif k is Kind.ALLTOALL:
        slots = grid(ob_all[everyone], sc)
        chunk, lo, ln = grid(everyone * c, sc % c), np.tile(sc // c, len(everyone)), np.ones_like(slots)
    elif k is Kind.ALLTOALLV:
        slots, chunk, lo = _alltoallv_expected(coll, ob_all)
        ln = np.ones_like(slots)
    else:
        e = np.zeros(0, dtype=np.int64)
        return e, e, e, e
    if len(slots) > 1 and not bool((np.diff(slots) > 0).all()):
        order = np.argsort(slots, kind="stable")
        slots, chunk, lo, ln = slots[order], chunk[order], lo[order], ln[order]
    return slots, chunk, lo, ln


def _alltoallv_expected(coll: Collective, ob_all: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All-to-allv's postcondition as slots, chunk and source rank: output block (s -> r) holds s's input block."""
    t = coll.traffic()
    src, dst = np.nonzero(t)
    n = t[src, dst]
    # One entry per chunk k of every non-empty block, blocks in (src, dst) order.
    k = np.arange(int(n.sum()), dtype=np.int64) - np.repeat(np.cumsum(n) - n, n)
    recv = (np.cumsum(t, axis=0) - t)[src, dst]  # chunks from sources before src, in dst's output
    send = (np.cumsum(t, axis=1) - t)[src, dst]  # chunks for destinations before dst, in src's input
    slots = np.repeat(ob_all[dst] + recv, n) + k
    return slots, np.repeat(send, n) + k, np.repeat(src.astype(np.int64), n)


def _separable(c: Columns, b: np.ndarray, lo: int, hi: int) -> bool:
    """Whether transfers lo..hi (a step's) write disjoint slots and read none of the slots they write (``b``: each
    buffer's base slot per rank), so that they may run in parts."""
    count = c.count[lo:hi].astype(np.int64)
    live = count > 0
    ws = (b[c.dst_buf[lo:hi], c.dst[lo:hi]] + c.dst_index[lo:hi])[live]
    order = np.argsort(ws, kind="stable")
    ws, we = ws[order], ws[order] + count[live][order]
    if len(ws) > 1 and not bool((ws[1:] >= we[:-1]).all()):
        return False
    rs = (b[c.src_buf[lo:hi], c.src[lo:hi]] + c.src_index[lo:hi])[live]
    below = np.searchsorted(ws, rs + count[live], side="left") - 1  # the last write starting before a read ends
    return not bool(((below >= 0) & (we[np.maximum(below, 0)] > rs)).any())


def largest_steps(schedule: Schedule) -> tuple[int, int]:
    """(the most chunks a step that runs whole moves, the most a step that may run in parts moves): a step's
    arrays, about ``STEP_MOVE_BYTES`` a chunk, are what ``run`` holds at once beyond its state, the latter's
    at most ``BATCH_MOVES`` at a time (what the memory guard estimates, ``sim.guards``)."""
    cols = schedule.columns()
    layout = SlotLayout(schedule)
    bases = np.array([layout.bases[b] for b in BUFS], dtype=np.int64)
    whole = parted = 0
    for lo, hi in itertools.pairwise(cols.step_offsets.tolist()):
        moved = int(cols.count[lo:hi].sum())
        if moved and _separable(cols, bases, lo, hi):
            parted = max(parted, moved)
        else:
            whole = max(whole, moved)
    return whole, parted


class _Runner:
    def __init__(self, schedule: Schedule, races: bool, limit: int, hints: list[Hint] | None = None) -> None:
        self.schedule = schedule
        self.layout = SlotLayout(schedule)
        self.p = schedule.ranks
        self.races = races
        self.limit = limit
        self.bad: list[Violation] = []
        self.dropped: dict[str, int] = {}
        self.idempotent = schedule.collective.kind is Kind.BARRIER
        cols = schedule.columns()
        bases = np.array([self.layout.bases[b] for b in BUFS], dtype=np.int64)
        self.bases = bases
        self.cols = cols
        self.state = initial_columns(self.layout)
        self.hints = hints
        self.hints_dropped = 0
        if hints is not None:
            # Per slot, as transfer numbers in program order (-1: none): the first transfer of the last step
            # that read it, and the (first) transfer of the last step whose write to it took effect. A write
            # at transfer w of step s is unread since when last_read <= w (a read of step s reads before it).
            n = self.layout.num_slots
            dt = np.int32 if schedule.num_transfers < 2**31 else np.int64
            self.last_read = np.full(n, -1, dtype=dt)
            self.w_t = np.full(n, -1, dtype=dt)

    def _report(self, kind: str, t: int, k: int, what: str, at_dst: bool) -> None:
        if len(self.bad) >= self.limit:
            self.dropped[kind] = self.dropped.get(kind, 0) + 1
            return
        si, ti, tr = self.schedule.transfer(t)
        rank, buf, idx = (tr.dst, tr.dst_buf, tr.dst_index + k) if at_dst else (tr.src, tr.src_buf, tr.src_index + k)
        where = f"rank {rank} {buf}[{idx}]"
        self.bad.append(Violation(kind, f"step {si} transfer {ti} ({tr!r}): {what.format(where=where)}",
                                  si, ti, rank, buf.value, idx))

    def go(self) -> list[Violation]:
        off = self.cols.step_offsets
        for lo, hi in itertools.pairwise(off.tolist()):
            if hi > lo:
                for a, b in self._parts(lo, hi):
                    self._step(lo, a, b)
        for kind, n in self.dropped.items():
            self.bad.append(Violation(kind, f"{n} more {kind} violation(s) not listed", count=n))
        return self.bad

    def _parts(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """The step's transfers lo..hi in parts of about ``BATCH_MOVES`` chunks, executed one after another;
        the whole step at once unless its writes are disjoint and it reads none of the slots it writes (then
        no part's writes can change what another reads or writes)."""
        count = self.cols.count[lo:hi].astype(np.int64)
        total = int(count.sum())
        if total <= BATCH_MOVES or not _separable(self.cols, self.bases, lo, hi):
            return [(lo, hi)]
        cuts = lo + np.searchsorted(np.cumsum(count), np.arange(BATCH_MOVES, total, BATCH_MOVES), side="right")
        edges = [lo, *sorted(set(cuts.tolist()) - {lo, hi}), hi]
        return list(itertools.pairwise(edges))

    def _step(self, step_first: int, lo: int, hi: int) -> None:
        """Execute transfers lo..hi of the step whose first transfer is ``step_first``."""
        st = self.state
        p = self.p
        count = self.cols.count[lo:hi].astype(np.int64)
        mt = np.repeat(np.arange(lo, hi, dtype=np.int64), count)
        k = np.arange(len(mt), dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
        c, b = self.cols, self.bases
        a = np.repeat(b[c.src_buf[lo:hi], c.src[lo:hi]] + c.src_index[lo:hi], count) + k
        d = np.repeat(b[c.dst_buf[lo:hi], c.dst[lo:hi]] + c.dst_index[lo:hi], count) + k
        copy = self.cols.op[mt] == 0
        track = self.hints is not None
        if track:
            self.last_read[a] = step_first
        # Reads: the state at the step's start.
        va = st.rows[a]
        vc, vlo, vln = va[:, 0], va[:, 1], va[:, 2]
        spilled_src = {int(j): st.spill[int(a[j])] for j in np.flatnonzero(vc == SPILLED)}
        empty = vc == EMPTY
        for j in np.flatnonzero(empty).tolist():
            self._report(UNINITIALISED_READ, int(mt[j]), int(k[j]), "reads {where}, which holds nothing", False)
        live = ~empty
        as_copy = copy & ~np.bool_(self.idempotent)
        # Races, as verify decides them in program order: when a slot's first write in the step is a copy,
        # every other write to it is a race; when it is a reduction, every copy to it is.
        lj = np.flatnonzero(live)
        sorted_d = np.sort(d[lj])
        shared = len(sorted_d) > 1 and bool((sorted_d[1:] == sorted_d[:-1]).any())
        if shared:  # some slot gets two writes: sort the writes by slot, then program order
            order = lj[np.lexsort((lj, d[lj]))]
            ds = d[order]
            start = np.r_[True, ds[1:] != ds[:-1]]
            grp = np.cumsum(start) - 1
            first = order[np.flatnonzero(start)]
            racy = ~start & (as_copy[first][grp] | as_copy[order])
            if racy.any():
                if self.races:
                    for jj in np.flatnonzero(racy).tolist():
                        j, other = int(order[jj]), int(first[grp[jj]])
                        self._race(int(mt[j]), int(k[j]), int(mt[other]))
                live[order[racy]] = False
        # Copies (at most one live per slot now).
        cj = np.flatnonzero(live & as_copy)
        rj = np.flatnonzero(live & ~as_copy)
        # Reductions: single-move slots with compact operands of the same chunk go vectorised.
        r_d = d[rj]
        alone = np.ones(len(rj), dtype=bool)
        if shared and len(rj) > 1:
            r_order = np.argsort(r_d, kind="stable")
            rj = rj[r_order]
            r_d = r_d[r_order]
            same = r_d[1:] == r_d[:-1]
            alone[1:] &= ~same
            alone[:-1] &= ~same
        cur_c = st.chunk[r_d]
        one_chunk = alone & (cur_c >= 0) & (vc[rj] >= 0) & (cur_c == vc[rj]) & ~np.bool_(self.idempotent)
        fast = one_chunk & (st.ln[r_d] > 0) & (vln[rj] > 0)  # both intervals
        fj, fd = rj[fast], r_d[fast]
        interned = rj[one_chunk & ~fast]
        slow = rj[~one_chunk]
        clo, cln = st.lo[fd].astype(np.int64), st.ln[fd].astype(np.int64)
        olo, oln = vlo[fj].astype(np.int64), vln[fj].astype(np.int64)
        overlap = ((olo - clo) % p < cln) | ((clo - olo) % p < oln)
        after = (~overlap) & ((clo + cln) % p == olo)
        before = (~overlap) & ~after & ((olo + oln) % p == clo)
        apart = ~overlap & ~after & ~before
        # Apply copies first (they never share a slot with a live reduction now).
        st.rows[d[cj]] = va[cj]
        if track:
            self._overwrites(d[cj], mt[cj])
        for j in cj[vc[cj] == SPILLED].tolist():
            st.spill[int(d[j])] = spilled_src[j]
        new_ln = cln + oln
        new_lo = np.where(after, clo, olo)
        new_lo = np.where(new_ln == p, 0, new_lo)
        ok = after | before
        st.lo[fd[ok]] = new_lo[ok]
        st.ln[fd[ok]] = new_ln[ok]
        if track:
            self.w_t[fd[ok]] = mt[fj[ok]]
        for j in fj[overlap].tolist():
            v: Content = (int(vc[j]), _mask(int(vlo[j]), int(vln[j]), p))
            self._double(int(mt[j]), int(k[j]), st.content(int(d[j])), v)
        # Disjoint but not adjacent, or an interned operand: one union per distinct pair of sets.
        self._unions(np.concatenate([fj[apart], interned]), d, vlo, vln, mt, k)
        # Everything else: one chunk at a time through combine, in program order.
        rest = slow
        if len(rest):
            by_slot: dict[int, list[int]] = {}
            for j in rest.tolist():
                by_slot.setdefault(int(d[j]), []).append(j)
            for slot, js in by_slot.items():
                cur = st.content(slot)
                unnamed = track
                for j in js:
                    w = spilled_src[j] if vc[j] == SPILLED else (int(vc[j]), st.ranks_of(int(vlo[j]), int(vln[j])))
                    nxt = combine(cur, w, bool(copy[j]), self.idempotent)
                    if nxt is not None:
                        cur = nxt
                        if unnamed:
                            self.w_t[slot] = mt[j]
                            unnamed = False
                    elif cur is None:
                        self._report(UNINITIALISED_READ, int(mt[j]), int(k[j]),
                                     "reduces into {where}, which holds nothing", True)
                    else:
                        self._double(int(mt[j]), int(k[j]), cur, w)
                st.set(slot, cur)

    def _numbers(self, lo: np.ndarray, ln: np.ndarray) -> np.ndarray:
        """Each (lo, ln) operand's interned set number (intervals interned, once per distinct interval)."""
        st = self.state
        out = np.where(ln == 0, lo, -1).astype(np.int64)
        iv = np.flatnonzero(ln > 0)
        if len(iv):
            keys, inverse = np.unique(lo[iv].astype(np.int64) * (self.p + 1) + ln[iv], return_inverse=True)
            ids = [st.intern(_mask(key // (self.p + 1), key % (self.p + 1), self.p)) for key in keys.tolist()]
            out[iv] = np.asarray(ids, dtype=np.int64)[inverse]
        return out

    def _unions(self, js: np.ndarray, d: np.ndarray, vlo: np.ndarray, vln: np.ndarray, mt: np.ndarray,
                k: np.ndarray) -> None:
        """Reductions ``js`` (each the only write to its slot in the step, both operands one chunk, the same)
        whose union is computed on sets: once per distinct (current set, incoming set) pair; the union kept as
        an interval where it is one, else interned; an overlap is a double count, the slot left as it was."""
        if not len(js):
            return
        st = self.state
        ds = d[js]
        cur = self._numbers(st.lo[ds], st.ln[ds])
        inc = self._numbers(vlo[js], vln[js])
        width = len(st.sets)
        pairs, inverse = np.unique(cur * width + inc, return_inverse=True)
        new_lo = np.empty(len(pairs), dtype=np.int64)
        new_ln = np.empty(len(pairs), dtype=np.int64)
        for i, key in enumerate(pairs.tolist()):
            a, b = st.sets[key // width], st.sets[key % width]
            if a & b:
                new_ln[i] = -1  # a double count
                continue
            iv = _interval(a | b, self.p)
            new_lo[i], new_ln[i] = iv if iv is not None else (st.intern(a | b), 0)
        lo_j, ln_j = new_lo[inverse], new_ln[inverse]
        ok = ln_j >= 0
        st.lo[ds[ok]] = lo_j[ok]
        st.ln[ds[ok]] = ln_j[ok]
        if self.hints is not None:
            self.w_t[ds[ok]] = mt[js[ok]]
        for j, slot in zip(js[~ok].tolist(), ds[~ok].tolist(), strict=True):
            v: Content = (int(st.chunk[slot]), st.ranks_of(int(vlo[j]), int(vln[j])))
            self._double(int(mt[j]), int(k[j]), st.content(slot), v)

    def _overwrites(self, slots: np.ndarray, ts: np.ndarray) -> None:
        """Copies (transfers ts) replace slots: name the writes no step since has read."""
        wt = self.w_t[slots]
        dead = np.flatnonzero((wt >= 0) & (self.last_read[slots] <= wt))
        hints = self.hints
        assert hints is not None
        for j in dead.tolist():
            if len(hints) >= self.limit:
                self.hints_dropped += 1
                continue
            slot = int(slots[j])
            ws_, wt_, wtr = self.schedule.transfer(int(wt[j]))
            bs, bt, btr = self.schedule.transfer(int(ts[j]))
            r, buf, i = self.layout.where(slot)
            hints.append(dead_write(ws_, wt_, repr(wtr), r, buf.value, i, bs, bt, repr(btr)))
        self.w_t[slots] = ts

    def _double(self, t: int, k: int, cur: Content | None, v: Content) -> None:
        self._report(DOUBLE_COUNT, t, k, f"{{where}} already holds {describe_text(cur)}; adding {describe_text(v)} "
                     "counts a contribution twice", True)

    def _race(self, t: int, k: int, other: int) -> None:
        who = f"transfer {self.schedule.transfer(other)[1]}"
        self._report(RACE, t, k, f"writes {{where}}, which {who} of the same step also writes "
                     "(a copy must be the only write to a slot in its step)", True)


def run(schedule: Schedule, *, races: bool = True, limit: int = 1000,
        hints: list[Hint] | None = None) -> tuple[CompactState, list[Violation]]:
    """Execute ``schedule`` in lockstep on compact columns; the final state and up to ``limit`` violations
    (and, with a ``hints`` list, up to ``limit`` dead writes appended to it)."""
    state, bad, _dropped = _run(schedule, races, limit, hints)
    return state, bad


def _run(schedule: Schedule, races: bool, limit: int,
         hints: list[Hint] | None) -> tuple[CompactState, list[Violation], int]:
    if schedule.switch_ops:  # refused rather than run without them: verify() takes them to the slot executor
        raise ValueError(f"{schedule.name}: the compact verifier has no switch ops; use sim.verify.verifier.verify")
    r = _Runner(schedule, races, limit, hints)
    bad = r.go()
    return r.state, bad, r.hints_dropped


def check(schedule: Schedule, state: CompactState, limit: int = 1000) -> list[Violation]:
    """A violation for each slot (up to ``limit``) whose final content differs from the postcondition."""
    layout = SlotLayout(schedule)
    coll = schedule.collective
    p = state.p
    # The postcondition a block of ranks at a time (about BATCH_MOVES slots): its columns cost 32 B a slot.
    per_rank = max(1, layout.num_slots // max(p, 1))
    step = p if coll.kind is Kind.ALLTOALLV else max(1, BATCH_MOVES // per_rank)
    bad_slots: list[int] = []
    want_of: dict[int, Content] = {}
    for first in range(0, max(p, 1), step):
        slots, chunk, lo, ln = expected_columns(coll, layout, range(first, min(first + step, p)))
        got_c = state.chunk[slots]
        differs = (got_c != chunk) | (state.ln[slots] != ln) | ((state.lo[slots] != lo) & (ln != state.p))
        spilled = (got_c == SPILLED) | ((got_c >= 0) & (state.ln[slots] == 0))  # compared whole, below
        bad = np.flatnonzero(differs & ~spilled).tolist()
        for j in np.flatnonzero(spilled).tolist():  # a spilled content may still equal an interval: compare exactly
            if state.content(int(slots[j])) != (int(chunk[j]), _mask(int(lo[j]), int(ln[j]), p)):
                bad.append(j)
        bad.sort()  # by slot: the blocks come in slot order, so the first ``limit`` bad slots are named
        bad_slots.extend(int(slots[j]) for j in bad)
        want_of.update((int(slots[j]), (int(chunk[j]), _mask(int(lo[j]), int(ln[j]), p)))
                       for j in bad[:max(0, limit - len(want_of))])
    bad_slots.sort()
    out: list[Violation] = []
    for slot in bad_slots[:limit]:
        r, buf, i = layout.where(slot)
        want, got = want_of[slot], state.content(slot)
        msg = f"rank {r} {buf}[{i}]: expected {describe_text(want)}, got {describe_text(got)}"
        out.append(Violation(WRONG_SLOT, msg, rank=r, buf=buf.value, index=i, expected=want, actual=got))
    if len(bad_slots) > limit:
        n = len(bad_slots) - limit
        out.append(Violation(WRONG_SLOT, f"{n} more wrong slot(s) not listed", count=n))
    return out


def verdict(schedule: Schedule, *, races: bool = True, limit: int = 1000,
            hints: list[Hint] | None = None) -> list[Violation]:
    """Every violation ``sim.verify.verifier.verify`` would find (up to ``limit`` of each list, then one entry per kind
    counting the rest: ``Violation.count``); empty when correct.

    With a ``hints`` list, the dead writes verify would list are appended to it (up to ``limit``)."""
    state, bad, _dropped = _run(schedule, races, limit, hints)
    return bad + check(schedule, state, limit)


def verdict_with_hints(schedule: Schedule, *, limit: int = 1000) -> tuple[list[Violation], list[Hint], int]:
    """``verdict``'s violations, the dead writes (up to ``limit``) and how many more dead writes there were."""
    hints: list[Hint] = []
    state, bad, dropped = _run(schedule, True, limit, hints)
    return bad + check(schedule, state, limit), hints, dropped
