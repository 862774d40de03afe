"""Which ops of an MSCCL++ plan a wrong final slot comes from: ``blame_wrong_slots``.

The schedule a plan reads as (``algorithms.formats.mscclpp.read_plan``) is run once more on symbolic
contents that remember, for every contribution a slot holds, the ops that carried it there (each
transfer's op, from ``ReadPlan.origin``). For a slot that ends wrong, the ops named are those that
carried a contribution it should not hold, and the last op that carried a contribution it lacks to a slot
where it does not belong either: where data that went astray was sent, or where data that should have
come from was taken.
"""

from __future__ import annotations

from algorithms.formats.mscclpp.reader import ReadPlan
from algorithms.ir import Op, switch_ops_by_step
from sim.verify.semantics import SlotLayout, expected_state, initial_state

__all__ = ["blame_wrong_slots", "MAX_TRANSFERS"]

MAX_TRANSFERS = 200_000
"""Larger schedules are not traced (the verifier's report names the last writers alone)."""

Contrib = tuple[int, int]  # (chunk, rank)
Held = dict[Contrib, tuple[str, ...]]


def _bits(mask: int) -> list[int]:
    return [r for r in range(mask.bit_length()) if mask >> r & 1]


def _held(content: tuple[int, ...] | None) -> Held | None:
    if content is None:
        return None
    return {(content[j], r): () for j in range(0, len(content), 2) for r in _bits(content[j + 1])}


def blame_wrong_slots(got: ReadPlan, slots: list[int]) -> tuple[dict[int, tuple[str, ...]], list[tuple[str, str, int]]]:
    """For each flat slot id in ``slots`` (``SlotLayout`` of ``got.schedule``), the ops to blame (module
    docstring), at most 8 each; and the dead writes, (op, op that overwrote it, slot), where a read of an empty
    slot writes garbage (as the executor would): ({}, []) when the schedule is too large to trace."""
    schedule = got.schedule
    if schedule is None or schedule.num_transfers > MAX_TRANSFERS:
        return {}, []
    layout = SlotLayout(schedule)
    state: list[Held | None] = [_held(c) for c in initial_state(layout)]
    bases = layout.bases
    by_step = switch_ops_by_step(schedule)
    writer: dict[int, str] = {}
    unread: set[int] = set()
    dead: list[tuple[str, str, int]] = []
    for si, step in enumerate(schedule.steps):
        pending: dict[int, Held] = {}
        wrote: dict[int, str] = {}
        origin = got.origin[si]
        for ti, t in enumerate(step.transfers):
            w = origin[ti] if ti < len(origin) else ""
            s0, d0 = bases[t.src_buf][t.src] + t.src_index, bases[t.dst_buf][t.dst] + t.dst_index
            for k in range(t.count):
                src = state[s0 + k]
                d = d0 + k
                unread.discard(s0 + k)
                if t.op is Op.REDUCE:
                    unread.discard(d)
                moved = {c: (*chain, w) if w else chain for c, chain in (src or {}).items()}
                if t.op is Op.REDUCE:
                    base = pending.get(d, state[d] or {})
                    pending[d] = {**base, **moved}
                else:
                    pending[d] = moved
                wrote[d] = w
        ops = [o for o in schedule.switch_ops if o.step == si] if by_step[si] else []
        souls = [w for w, o in zip(got.switch_origin, schedule.switch_ops, strict=False) if o.step == si]
        for o, w in zip(ops, souls, strict=False):
            for k in range(o.count):
                value: Held = {}
                for e in o.sources:
                    at = bases[e.buf][e.rank] + e.index + k
                    unread.discard(at)
                    src = state[at]
                    if src:
                        value.update({c: (*chain, w) if w else chain for c, chain in src.items()})
                for e in o.targets:
                    at = bases[e.buf][e.rank] + e.index + k
                    pending[at] = value
                    wrote[at] = w
        for d, v in pending.items():
            state[d] = v
        for d, w in wrote.items():
            if d in unread and writer.get(d) and writer[d] != w:
                dead.append((writer[d], w, d))
            writer[d] = w
            unread.add(d)
    want = expected_state(schedule.collective, layout)
    wanted = {slot: set(_held(c) or {}) for slot, c in want.items()}
    out: dict[int, tuple[str, ...]] = {}
    for slot in slots:
        have = state[slot] or {}
        names: list[str] = []
        for c in have.keys() - wanted.get(slot, set()):
            names.extend(w for w in have[c] if w not in names)
        for c in wanted.get(slot, set()) - have.keys():
            for other, held in enumerate(state):
                if held and c in held and c not in wanted.get(other, {c}) and held[c]:
                    last = held[c][-1]
                    if last not in names:
                        names.append(last)
        out[slot] = tuple(names[:8])
    return out, dead
