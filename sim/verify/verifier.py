"""Symbolic verification of schedules against their collective's postcondition.

``verify(schedule)`` executes the schedule in lockstep on symbolic contents
(docs/design.md, "Step semantics"; the write rule is ``sim.verify.semantics.combine``):
reads in a step see the state at its start and writes land at its end; a
slot written by a ``copy`` is written by nothing else in that step; a
``reduce`` needs disjoint contributions (except for barrier tokens); reading
an empty slot is an error. The report lists every violation with its step
and transfer, and every wrong final slot with its expected and actual
contributions, the transfer that last wrote it (``step 3 transfer 1
(2.output[4:5] = 1.output[4:5])``) and, for each contribution it lacks, the
last step after which some slot still held it (a second, instrumented pass
that runs only when a slot is wrong). Dead writes (a slot written, then
overwritten by a later copy before any transfer read it) are listed as hints,
not violations: they often name the transfer that went astray when a wrong
slot names only its last writer. A barrier is checked by causality: every
rank's token must have heard, directly or transitively, from every rank.
"""

from __future__ import annotations

from typing import Any

from algorithms.ir import Kind, Op, Schedule, SwitchOp, switch_ops_by_step
from algorithms.registry import no_gc
from sim.verify.report import (
    DOUBLE_COUNT,
    RACE,
    UNINITIALISED_READ,
    WRONG_SLOT,
    Hint,
    VerifyReport,
    Violation,
    dead_write,
    sort_hints,
)
from sim.verify.semantics import Content, SlotLayout, combine, describe_text, expected_state, initial_state

__all__ = ["Violation", "VerifyReport", "assert_verified", "check_final", "execute", "locate", "verify"]

def _where(layout: SlotLayout, slot: int) -> str:
    r, buf, i = layout.where(slot)
    return f"rank {r} {buf}[{i}]"


def execute(schedule: Schedule, hints: list[Hint] | None = None
            ) -> tuple[list[Content | None], list[Violation], SlotLayout]:
    """Run the schedule in lockstep; returns the final state, the step violations and the layout.

    With a ``hints`` list, the dead writes are appended to it: a write that took effect (a copy that won
    its slot, a reduction that combined) and that a copy of a later step replaced with no transfer of
    the steps in between, or of the replacing step, reading the slot (a reduce reads what it adds to)."""
    layout = SlotLayout(schedule)
    track = hints is not None
    # Per slot: the last step that read it, and the step (-1: none) and transfer of the last write that took effect.
    last_read = [-1] * layout.num_slots if track else []
    w_step = [-1] * layout.num_slots if track else []
    w_t = [0] * layout.num_slots if track else []
    state = initial_state(layout)
    idempotent = schedule.collective.kind is Kind.BARRIER
    bases = layout.bases
    bad: list[Violation] = []
    copy_op = Op.COPY
    by_step = switch_ops_by_step(schedule) if schedule.switch_ops else None
    for si, step in enumerate(schedule.steps):
        copies: dict[int, tuple[Content, int]] = {}
        reduces: dict[int, list[tuple[Content, int]]] = {}
        nt = len(step.transfers)
        for ti, t in enumerate(step.transfers):
            src_slot = bases[t.src_buf][t.src] + t.src_index
            dst_slot = bases[t.dst_buf][t.dst] + t.dst_index
            if track:
                if t.count == 1:
                    last_read[src_slot] = si
                else:
                    last_read[src_slot:src_slot + t.count] = [si] * t.count
            # Hot loop: one iteration per chunk moved (about 2 M at p = 1024).
            for k in range(t.count):
                v = state[src_slot + k]
                if v is None:
                    bad.append(Violation(
                        UNINITIALISED_READ,
                        f"step {si} transfer {ti} ({t!r}): reads {_where(layout, src_slot + k)}, which holds nothing",
                        si, ti, t.src, t.src_buf.value, t.src_index + k))
                    continue
                d = dst_slot + k
                if t.op is copy_op and not idempotent:
                    if d in copies or d in reduces:
                        other = copies[d][1] if d in copies else reduces[d][0][1]
                        bad.append(_race(layout, si, ti, other, d, t))
                        continue
                    copies[d] = (v, ti)
                else:
                    if d in copies:
                        bad.append(_race(layout, si, ti, copies[d][1], d, t))
                        continue
                    lst = reduces.get(d)
                    if lst is None:
                        reduces[d] = [(v, ti)]
                    else:
                        lst.append((v, ti))
        if by_step is not None:
            for j, op in enumerate(by_step[si]):
                _switch_op(layout, state, si, nt + j, op, copies, reduces, bad, idempotent,
                           last_read if track else None)
        for d, (v, ti) in copies.items():
            state[d] = v
            if track:
                ws = w_step[d]
                if ws >= 0 and last_read[d] <= ws:
                    hints.append(_dead(schedule, layout, (ws, w_t[d]), (si, ti), d))  # type: ignore[union-attr]
                w_step[d] = si
                w_t[d] = ti
        for d, lst in reduces.items():
            cur = state[d]
            first = True
            for v, ti in lst:
                if ti >= nt:  # a barrier's switch op: its deliveries union like copies
                    nxt = combine(cur, v, True, idempotent)
                    if nxt is not None:
                        cur = nxt
                    continue
                t = step.transfers[ti]
                nxt = combine(cur, v, t.op is copy_op, idempotent)
                if nxt is not None:
                    cur = nxt
                    if track and first:
                        w_step[d] = si
                        w_t[d] = ti
                        first = False
                    continue
                where = _where(layout, d)
                if cur is None:
                    bad.append(Violation(
                        UNINITIALISED_READ,
                        f"step {si} transfer {ti} ({t!r}): reduces into {where}, which holds nothing",
                        si, ti, t.dst, t.dst_buf.value, d - bases[t.dst_buf][t.dst]))
                else:
                    bad.append(Violation(
                        DOUBLE_COUNT,
                        f"step {si} transfer {ti} ({t!r}): {where} already holds "
                        f"{describe_text(cur)}; adding {describe_text(v)} counts a contribution twice",
                        si, ti, t.dst, t.dst_buf.value, d - bases[t.dst_buf][t.dst]))
            state[d] = cur
    return state, bad, layout


def op_text(schedule: Schedule, si: int, ti: int) -> str:
    """What a step's entry ``ti`` prints as: a transfer, or (numbered after them) a switch op."""
    transfers = schedule.steps[si].transfers
    if ti < len(transfers):
        return repr(transfers[ti])
    return switch_ops_by_step(schedule)[si][ti - len(transfers)].describe()


def _dead(schedule: Schedule, layout: SlotLayout, w: tuple[int, int], by: tuple[int, int], slot: int) -> Hint:
    r, buf, i = layout.where(slot)
    return dead_write(w[0], w[1], op_text(schedule, *w), r, buf.value, i, by[0], by[1], op_text(schedule, *by))


def _switch_op(layout: SlotLayout, state: list[Content | None], si: int, oi: int, op: SwitchOp,
               copies: dict[int, tuple[Content, int]], reduces: dict[int, list[tuple[Content, int]]],
               bad: list[Violation], idempotent: bool, last_read: list[int] | None) -> None:
    """Read one switch op's sources (the step's snapshot), combine them, and queue its writes as copies.

    It stands for transfers: a multicast for one copy per target; a reduction for the reduces that
    fold the sources together (each contribution once: an overlap is a double count) and one copy
    of the result per target. Its writes race like a copy's. Entry ``oi`` numbers it after the
    step's transfers; messages name it as ``switch op J (reduce@node0 ...)``."""
    bases = layout.bases
    label = f"step {si} switch op {oi} ({op.describe()})"
    for k in range(op.count):
        acc: Content | None = None
        ok = True
        for e in op.sources:
            slot = bases[e.buf][e.rank] + e.index + k
            if last_read is not None:
                last_read[slot] = si
            v = state[slot]
            if v is None:
                bad.append(Violation(UNINITIALISED_READ, f"{label}: reads {_where(layout, slot)}, which holds nothing",
                                     si, oi, e.rank, e.buf.value, e.index + k))
                ok = False
                continue
            nxt = v if acc is None else combine(acc, v, False, idempotent)
            if nxt is None:
                bad.append(Violation(
                    DOUBLE_COUNT, f"{label}: {_where(layout, slot)} holds {describe_text(v)}, which the other "
                    f"sources already hold ({describe_text(acc)}): combining them counts a contribution twice",
                    si, oi, e.rank, e.buf.value, e.index + k))
                ok = False
                continue
            acc = nxt
        if not ok or acc is None:
            continue
        for e in op.targets:
            d = bases[e.buf][e.rank] + e.index + k
            if idempotent:
                reduces.setdefault(d, []).append((acc, oi))
                continue
            if d in copies or d in reduces:
                other = copies[d][1] if d in copies else reduces[d][0][1]
                bad.append(Violation(
                    RACE, f"{label}: writes {_where(layout, d)}, which entry {other} of the same step also writes "
                    "(a switch op's delivery, like a copy, must be the only write to a slot in its step)",
                    si, oi, e.rank, e.buf.value, e.index + k))
                continue
            copies[d] = (acc, oi)


def _race(layout: SlotLayout, si: int, ti: int, other: int, slot: int, t: Any) -> Violation:
    return Violation(
        RACE,
        f"step {si} transfer {ti} ({t!r}): writes {_where(layout, slot)}, which transfer {other} "
        "of the same step also writes (a copy must be the only write to a slot in its step)",
        si, ti, t.dst, t.dst_buf.value, slot - layout.bases[t.dst_buf][t.dst])


def check_final(schedule: Schedule, state: list[Content | None], layout: SlotLayout) -> list[Violation]:
    """A violation for every slot whose final content differs from the postcondition, located by
    ``locate`` (the last writer of each such slot, and where its missing contributions were last held)."""
    wrong: list[tuple[int, Content, Content | None]] = []
    for slot, want in sorted(expected_state(schedule.collective, layout).items()):
        got = state[slot]
        if got != want:
            wrong.append((slot, want, got))
    if not wrong:
        return []
    lacking: dict[tuple[int, int], None] = {}
    for _slot, want, got in wrong:
        for c in _missing(want, got):
            lacking[c] = None
    writers, last_held = locate(schedule, layout, list(lacking))
    bad: list[Violation] = []
    for slot, want, got in wrong:
        r, buf, i = layout.where(slot)
        w = writers[slot]
        writer = None if w is None else (w[0], w[1], op_text(schedule, w[0], w[1]))
        groups: dict[tuple[int, int | None], int] = {}
        for s_, chunk in _missing(want, got):
            key = (chunk, last_held[(s_, chunk)])
            groups[key] = groups.get(key, 0) | 1 << s_
        missing = tuple((chunk, mask, last) for (chunk, last), mask in sorted(groups.items(), key=_group_order))
        msg = f"rank {r} {buf}[{i}]: expected {describe_text(want)}, got {describe_text(got)}"
        if writer is None:
            msg += "; no transfer wrote it"
        else:
            entry = "transfer" if writer[1] < len(schedule.steps[writer[0]].transfers) else "switch op"
            msg += f"; last written by step {writer[0]} {entry} {writer[1]} ({writer[2]})"
        for chunk, mask, last in missing:
            msg += f"; {describe_text((chunk, mask))} {_held_text(last, len(schedule.steps))}"
        bad.append(Violation(WRONG_SLOT, msg, rank=r, buf=buf.value, index=i, expected=want, actual=got,
                             writer=writer, missing=missing))
    return bad


def _group_order(item: tuple[tuple[int, int | None], int]) -> tuple[int, int]:
    (chunk, last), _mask = item
    return chunk, -2 if last is None else last


def _held_text(last: int | None, steps: int) -> str:
    if last is None:
        return "was never present"
    if last < 0:
        return "was held only before step 0"
    if last == steps - 1:
        return "is still held elsewhere at the end"
    return f"was last held after step {last}"


def _missing(want: Content, got: Content | None) -> list[tuple[int, int]]:
    """The contributions (rank, chunk) that ``want`` has and ``got`` lacks."""
    have = {} if got is None else {got[j]: got[j + 1] for j in range(0, len(got), 2)}
    out = []
    for j in range(0, len(want), 2):
        chunk, lack = want[j], want[j + 1] & ~have.get(want[j], 0)
        s_ = 0
        while lack:
            if lack & 1:
                out.append((s_, chunk))
            lack >>= 1
            s_ += 1
    return out


def locate(
    schedule: Schedule, layout: SlotLayout, contributions: list[tuple[int, int]]
) -> tuple[list[tuple[int, int] | None], dict[tuple[int, int], int | None]]:
    """Run the schedule in lockstep again, recording who writes what; for diagnostics only.

    Returns, for every slot, ``(step, transfer)`` of the last transfer
    that wrote it (None: never written), and for each of ``contributions``
    (``(rank, chunk)``) the last step after which some slot held it: the
    final step when it is still held at the end, -1 when it was held only
    before step 0, None when it never was. Writes follow
    ``sim.verify.semantics.combine``; an invalid write (already reported) writes nothing.
    """
    state = initial_state(layout)
    writers: list[tuple[int, int] | None] = [None] * layout.num_slots
    interest: dict[int, int] = {}
    for s_, chunk in contributions:
        interest[chunk] = interest.get(chunk, 0) | 1 << s_
    count: dict[tuple[int, int], int] = dict.fromkeys(contributions, 0)
    gone_at: dict[tuple[int, int], int] = {}

    def holds(content: Content | None) -> list[tuple[int, int]]:
        if content is None:
            return []
        out = []
        for j in range(0, len(content), 2):
            m = content[j + 1] & interest.get(content[j], 0)
            s_ = 0
            while m:
                if m & 1:
                    out.append((s_, content[j]))
                m >>= 1
                s_ += 1
        return out

    for content in state:
        for c in holds(content):
            count[c] += 1
    idempotent = schedule.collective.kind is Kind.BARRIER
    bases = layout.bases
    by_step = switch_ops_by_step(schedule) if schedule.switch_ops else None
    for si, step in enumerate(schedule.steps):
        # (destination slot, the snapshot it receives, copy?, entry) for every write of the step.
        writes = [(bases[t.dst_buf][t.dst] + t.dst_index, state[a:a + t.count], t.op is Op.COPY, ti)
                  for ti, t in enumerate(step.transfers) for a in (bases[t.src_buf][t.src] + t.src_index,)]
        if by_step is not None:
            writes.extend(_switch_writes(layout, state, by_step[si], len(step.transfers), idempotent))
        for dst, snap, copy, ti in writes:
            for k, v in enumerate(snap):
                if v is None:
                    continue
                cur = state[dst + k]
                new = combine(cur, v, copy, idempotent)
                if new is None:
                    continue
                for c in holds(cur):
                    count[c] -= 1
                    if count[c] == 0:
                        gone_at[c] = si
                for c in holds(new):
                    count[c] += 1
                    if count[c] == 1:
                        gone_at.pop(c, None)
                state[dst + k] = new
                writers[dst + k] = (si, ti)
    last_held: dict[tuple[int, int], int | None] = {}
    for c in contributions:
        if count[c] > 0:
            last_held[c] = len(schedule.steps) - 1
        elif c in gone_at:
            last_held[c] = gone_at[c] - 1
        else:
            last_held[c] = None
    return writers, last_held


def _switch_writes(layout: SlotLayout, state: list[Content | None], ops: list[SwitchOp], nt: int,
                   idempotent: bool) -> list[tuple[int, list[Content | None], bool, int]]:
    """The writes of a step's switch ops, as ``locate`` applies them: each target receives the combined
    sources (None for a chunk whose sources were invalid, already reported)."""
    bases = layout.bases
    out: list[tuple[int, list[Content | None], bool, int]] = []
    for j, op in enumerate(ops):
        vals: list[Content | None] = []
        for k in range(op.count):
            acc: Content | None = None
            for e in op.sources:
                v = state[bases[e.buf][e.rank] + e.index + k]
                acc = None if v is None else v if acc is None else combine(acc, v, False, idempotent)
                if acc is None:
                    break
            vals.append(acc)
        out.extend((bases[e.buf][e.rank] + e.index, vals, True, nt + j) for e in op.targets)
    return out


COMPACT_FROM = 100_000
"""Schedules of at least this many transfers are decided on compact columns (``sim.verify.fast``: the same
semantics, a few bytes per slot instead of a Python tuple); the slot-by-slot executor then runs only to
explain a broken schedule, when it has at most ``EXPLAIN_UP_TO`` transfers."""
EXPLAIN_UP_TO = 4_000_000


def verify(schedule: Schedule) -> VerifyReport:
    """Verify ``schedule`` symbolically; the report lists every violation (empty when correct).

    Large schedules (``COMPACT_FROM``) are checked on compact columns first, so that tens of millions of
    transfers fit in memory; a broken one is explained by the slot-by-slot executor (last writers,
    where each missing contribution was last held) when it is small enough (``EXPLAIN_UP_TO``), else
    reported as the compact check found it (up to 1000 violations of each list, and 1000 hints).
    Dead writes are listed as hints (``VerifyReport.hints``) by whichever executor reports.
    """
    if schedule.num_transfers >= COMPACT_FROM and not schedule.switch_ops:  # the compact verifier has no switch ops
        from sim.verify.fast import verdict_with_hints

        found, fast_hints, not_listed = verdict_with_hints(schedule)
        if not found or schedule.num_transfers > EXPLAIN_UP_TO:
            return VerifyReport(schedule.name, schedule.collective.describe(), schedule.num_steps,
                                schedule.num_transfers, tuple(found), sort_hints(fast_hints), not_listed)
    hints: list[Hint] = []
    with no_gc():
        state, bad, layout = execute(schedule, hints)
    bad.extend(check_final(schedule, state, layout))
    return VerifyReport(schedule.name, schedule.collective.describe(), len(schedule.steps),
                        schedule.num_transfers, tuple(bad), sort_hints(hints))


def assert_verified(schedule: Schedule, *, limit: int = 20) -> VerifyReport:
    """``verify(schedule)``, raising ``AssertionError`` when it finds a violation; the report otherwise.

    The message names the schedule (its name and collective: kind, world size, chunks, root) and lists
    at most ``limit`` violations (then ``... and N more``), its hints likewise, and the summary by kind:
    in a property test, ``assert_verified(schedule)`` says what is wrong where ``assert verify(schedule).ok``
    says only ``assert False``.

    >>> from algorithms import Schedule, build
    >>> assert_verified(build("allreduce", "ring", 4)).ok
    True
    >>> s = build("broadcast", "binomial", 4, root=2)
    >>> assert_verified(Schedule(s.collective, s.name, s.steps[:-1]))
    Traceback (most recent call last):
    ...
    AssertionError: binomial (broadcast p=4 C=1 root=2) fails verification: 1 steps, 1 transfers: 2 violation(s)
      rank 0 input[0]: expected chunk 0 from rank 2, got nothing; no transfer wrote it;
        chunk 0 from rank 2 is still held elsewhere at the end
      rank 1 input[0]: expected chunk 0 from rank 2, got nothing; no transfer wrote it;
        chunk 0 from rank 2 is still held elsewhere at the end
      summary: 2 wrong_slot
    """
    report = verify(schedule)
    if not report.ok:
        text = report.text(limit)
        raise AssertionError(text.replace(f"{report.title}: ", f"{report.title} fails verification: ", 1))
    return report
