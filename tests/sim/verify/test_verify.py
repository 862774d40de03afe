"""The verifier on worked examples: each kind of violation, located by step and transfer."""

from __future__ import annotations

import pytest

from algorithms import Buf, Collective, Kind, Op, Schedule, ScheduleBuilder, Step, Transfer, build
from sim.verify.verifier import DOUBLE_COUNT, RACE, UNINITIALISED_READ, WRONG_SLOT, verify


def _kinds(schedule: Schedule) -> list[str]:
    return [v.kind for v in verify(schedule).violations]


def test_ring_allreduce_worked_example_p3() -> None:
    # Patarasuk & Yuan's ring at p = 3: 2 reduce-scatter steps, 2 all-gather steps, 3 transfers each.
    s = build("allreduce", "ring", 3)
    assert [len(step) for step in s.steps] == [3, 3, 3, 3]
    assert s.steps[0].transfers[0] == Transfer(0, 1, Buf.INPUT, 0, Buf.INPUT, 0, 1, Op.REDUCE)
    report = verify(s)
    assert report.ok and report.to_dict() == {"ok": True, "violations": [], "transfers": 12, "steps": 4}


def test_a_missing_step_leaves_wrong_slots_with_expected_and_actual() -> None:
    s = build("allreduce", "ring", 3)
    broken = Schedule(s.collective, s.name, s.steps[:-1])
    report = verify(broken)
    assert not report.ok
    wrong = [v for v in report.violations if v.kind == WRONG_SLOT]
    # The last all-gather step delivers one piece to each of the 3 ranks.
    assert len(wrong) == 3
    v = wrong[0]
    assert v.expected == (v.index, 0b111) and v.actual != v.expected
    d = v.to_dict()
    assert d["expected"] == [{"chunk": v.index, "ranks": "0-2"}] and d["rank"] == v.rank


def test_double_count_is_reported_with_step_and_transfer() -> None:
    coll = Collective(Kind.ALLREDUCE, 2, 1)
    s = Schedule(coll, "bad", (Step((Transfer(0, 1, op=Op.REDUCE),)), Step((Transfer(0, 1, op=Op.REDUCE),))))
    bad = verify(s).violations
    assert bad[0].kind == DOUBLE_COUNT and (bad[0].step, bad[0].transfer) == (1, 0)
    assert "counts a contribution twice" in bad[0].message


def test_two_reduces_into_one_slot_in_one_step_are_allowed() -> None:
    coll = Collective(Kind.REDUCE, 3, 1, 0)
    s = Schedule(coll, "fan-in", (Step((Transfer(1, 0, op=Op.REDUCE), Transfer(2, 0, op=Op.REDUCE))),))
    assert verify(s).ok


def test_a_copy_racing_another_write_is_a_race() -> None:
    coll = Collective(Kind.BROADCAST, 3, 1, 0)
    s = Schedule(coll, "race", (Step((Transfer(0, 1), Transfer(0, 2))), Step((Transfer(0, 1), Transfer(2, 1)))))
    bad = verify(s).violations
    assert [v.kind for v in bad] == [RACE] and (bad[0].step, bad[0].transfer, bad[0].rank) == (1, 1, 1)


def test_uninitialised_reads_of_source_and_of_reduce_destination() -> None:
    coll = Collective(Kind.BROADCAST, 3, 1, 0)
    s = Schedule(coll, "early", (Step((Transfer(1, 2), Transfer(0, 1))),))
    v = verify(s).violations
    assert v[0].kind == UNINITIALISED_READ and (v[0].step, v[0].transfer) == (0, 0)
    coll = Collective(Kind.ALLGATHER, 2, 1)
    s = Schedule(coll, "reduce-into-empty", (Step((Transfer(0, 1, Buf.INPUT, 0, Buf.OUTPUT, 0, 1, Op.REDUCE),)),))
    assert UNINITIALISED_READ in _kinds(s)


def test_reads_see_the_state_at_the_start_of_the_step() -> None:
    # A swap in one step is correct only because reads precede writes.
    coll = Collective(Kind.ALLTOALL, 2, 1)
    b = ScheduleBuilder(coll, "swap")
    with b.step():
        b.copy(0, 0, 0, dst_buf=Buf.OUTPUT)
        b.copy(1, 1, 1, dst_buf=Buf.OUTPUT)
        b.copy(0, 1, 1, dst_buf=Buf.OUTPUT, dst_index=0)
        b.copy(1, 0, 0, dst_buf=Buf.OUTPUT, dst_index=1)
    assert verify(b.build()).ok
    # Relaying in the same step cannot work: rank 1's input[0] has not arrived at rank 2 yet.
    coll = Collective(Kind.BROADCAST, 3, 1, 0)
    s = Schedule(coll, "relay", (Step((Transfer(0, 1), Transfer(1, 2))),))
    assert UNINITIALISED_READ in _kinds(s)


def test_barrier_is_checked_by_causality() -> None:
    assert verify(build("barrier", "dissemination", 7)).ok
    # A ring of signals for p-1 steps is a barrier; one step fewer is not.
    coll = Collective(Kind.BARRIER, 4, 1)
    signal = Step(tuple(Transfer(r, (r + 1) % 4, op=Op.REDUCE) for r in range(4)))
    assert verify(Schedule(coll, "ring", (signal,) * 3)).ok
    short = verify(Schedule(coll, "ring", (signal,) * 2))
    assert {v.kind for v in short.violations} == {WRONG_SLOT}
    # Tokens are idempotent: hearing twice is no double count, and copies add knowledge too.
    copy_signal = Step(tuple(Transfer(r, (r + 1) % 4) for r in range(4)))
    assert verify(Schedule(coll, "ring", (copy_signal,) * 5)).ok


def test_report_text_lists_every_violation() -> None:
    s = build("allgather", "ring", 4)
    broken = Schedule(s.collective, s.name, s.steps[:1])
    report = verify(broken)
    text = str(report)
    assert f"{len(report.violations)} violation(s)" in text
    assert text.count("\n") == len(report.violations) + 1  # and the summary by kind, last
    assert text.splitlines()[-1] == f"  summary: {len(report.violations)} wrong_slot"


def _replace(schedule: Schedule, si: int, ti: int, t: Transfer | None) -> Schedule:
    """The schedule with step si's transfer ti replaced by t (dropped when t is None)."""
    steps = [list(step.transfers) for step in schedule.steps]
    if t is None:
        del steps[si][ti]
    else:
        steps[si][ti] = t
    return Schedule(schedule.collective, schedule.name, tuple(Step(tuple(ts)) for ts in steps))


def _wrong(schedule: Schedule) -> dict[tuple[int, str, int], dict[str, object]]:
    report = verify(schedule)
    assert {v.kind for v in report.violations} == {WRONG_SLOT}, str(report)
    return {(v.rank, v.buf, v.index): v.to_dict() for v in report.violations}  # type: ignore[misc]


def test_a_copy_with_a_wrong_index_in_ring_allgather_is_located() -> None:
    # Ring all-gather, p = 4: step s > 0 has rank r copy output block (r - s) mod 4 to rank r + 1,
    # transfer r of the step. Step 1 transfer 1 is 2.output[0:1] = 1.output[0:1]; read block 1 instead.
    s = build("allgather", "ring", 4)
    assert s.steps[1].transfers[1] == Transfer(1, 2, Buf.OUTPUT, 0, Buf.OUTPUT, 0)
    broken = _replace(s, 1, 1, Transfer(1, 2, Buf.OUTPUT, 1, Buf.OUTPUT, 0))
    wrong = _wrong(broken)
    # Rank 2's output[0] gets rank 1's block; step 2 transfer 2 (rank 2 -> 3, block 0) forwards it.
    assert set(wrong) == {(2, "output", 0), (3, "output", 0)}
    assert wrong[(2, "output", 0)]["last_write"] == {"step": 1, "transfer": 1, "text": "2.output[0:1] = 1.output[1:2]"}
    assert wrong[(3, "output", 0)]["last_write"] == {"step": 2, "transfer": 2, "text": "3.output[0:1] = 2.output[0:1]"}
    # Rank 0's chunk 0 is not lost: rank 0's input (and output[0]) hold it to the end, after step 2.
    assert wrong[(2, "output", 0)]["missing"] == [{"chunk": 0, "ranks": "0", "last_held_step": 2}]
    text = str(verify(broken))
    assert "rank 2 output[0]: " in text and "last written by step 1 transfer 1 (2.output[0:1] = 1.output[1:2])" in text


def test_a_copy_with_a_wrong_index_in_ring_allreduce_is_located() -> None:
    # Ring all-reduce, p = 4: reduce-scatter steps 0-2, all-gather steps 3-5; all-gather step 3 + s has
    # rank r copy chunk (r + 1 - s) mod 4 to rank r + 1 as transfer r. Step 4 transfer 1 is
    # 2.input[1:2] = 1.input[1:2]; read chunk 2 instead.
    s = build("allreduce", "ring", 4)
    assert s.steps[4].transfers[1] == Transfer(1, 2, Buf.INPUT, 1, Buf.INPUT, 1)
    broken = _replace(s, 4, 1, Transfer(1, 2, Buf.INPUT, 2, Buf.INPUT, 1))
    wrong = _wrong(broken)
    # Rank 2's chunk 1 is wrong, and step 5 (rank 2 -> 3, chunk (2 + 1 - 2) mod 4 = 1, transfer 2) spreads it.
    assert set(wrong) == {(2, "input", 1), (3, "input", 1)}
    assert wrong[(2, "input", 1)]["last_write"] == {"step": 4, "transfer": 1, "text": "2.input[1:2] = 1.input[2:3]"}
    assert wrong[(3, "input", 1)]["last_write"] == {"step": 5, "transfer": 2, "text": "3.input[1:2] = 2.input[1:2]"}
    # The full chunk 1 survives on ranks 0 and 1, so every contribution is still held after the last step.
    assert wrong[(3, "input", 1)]["missing"] == [{"chunk": 1, "ranks": "0-3", "last_held_step": 5}]


def test_a_dropped_reduce_reports_where_its_contribution_was_last_held() -> None:
    # Drop step 0 transfer 0 of ring all-reduce, p = 4 (1.input[0:1] += 0.input[0:1]). Chunk 0 is then
    # reduced without rank 0: 1 -> 2 at step 1, 2 -> 3 at step 2. Rank 0's own input[0] keeps its
    # contribution until step 3 transfer 3 overwrites it (0.input[0:1] = 3.input[0:1]): last held after step 2.
    s = build("allreduce", "ring", 4)
    assert s.steps[0].transfers[0] == Transfer(0, 1, Buf.INPUT, 0, Buf.INPUT, 0, 1, Op.REDUCE)
    wrong = _wrong(_replace(s, 0, 0, None))
    assert set(wrong) == {(r, "input", 0) for r in range(4)}
    for d in wrong.values():
        assert d["actual"] == [{"chunk": 0, "ranks": "1-3"}]
        assert d["missing"] == [{"chunk": 0, "ranks": "0", "last_held_step": 2}]
    # The last writers, by hand: rank 3 at step 2 transfer 2, then the all-gather: rank 0 at step 3
    # transfer 3, rank 1 at step 4 transfer 0, rank 2 at step 5 transfer 1.
    assert {k[0]: (d["last_write"]["step"], d["last_write"]["transfer"])  # type: ignore[index]
            for k, d in wrong.items()} == {3: (2, 2), 0: (3, 3), 1: (4, 0), 2: (5, 1)}
    assert "chunk 0 from rank 0 was last held after step 2" in str(verify(_replace(s, 0, 0, None)))


def test_a_slot_never_written_and_a_contribution_held_only_before_step_0() -> None:
    # Broadcast from root 1 on 2 ranks whose only transfer is a local copy on the root: rank 0's input
    # is never written, and the root's chunk 0 is still held (at rank 1) after the last step, step 0.
    coll = Collective(Kind.BROADCAST, 2, 1, 1)
    wrong = _wrong(Schedule(coll, "no-send", (Step((Transfer(1, 1),)),)))
    d = wrong[(0, "input", 0)]
    assert d["last_write"] is None and d["missing"] == [{"chunk": 0, "ranks": "1", "last_held_step": 0}]
    assert "no transfer wrote it" in str(verify(Schedule(coll, "no-send", (Step((Transfer(1, 1),)),))))
    # Held only before step 0: step 0 overwrites rank 1's input, the only holder of rank 1's chunk 0.
    coll = Collective(Kind.ALLGATHER, 2, 1)
    steps = (Step((Transfer(0, 1, Buf.INPUT, 0, Buf.INPUT, 0),)),
             Step((Transfer(1, 1, Buf.INPUT, 0, Buf.OUTPUT, 1), Transfer(0, 0, Buf.INPUT, 0, Buf.OUTPUT, 0))))
    wrong = _wrong(Schedule(coll, "overwrite", steps))
    assert wrong[(0, "output", 1)]["missing"] == [{"chunk": 0, "ranks": "1", "last_held_step": -1}]
    assert "was held only before step 0" in str(verify(Schedule(coll, "overwrite", steps)))


def test_large_schedules_are_decided_on_compact_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    import sim.verify.verifier as V

    s = build("allreduce", "ring", 8)
    broken = Schedule(s.collective, s.name, s.steps[:-1])
    slow = V.verify(broken)  # the slot-by-slot executor: wrong slots name their last writer
    monkeypatch.setattr(V, "COMPACT_FROM", 1)
    assert V.verify(s).ok
    explained = V.verify(broken)  # broken: the slot-by-slot executor explains it
    assert explained == slow and any(v.writer is not None for v in explained.violations)
    monkeypatch.setattr(V, "EXPLAIN_UP_TO", 1)
    compact = V.verify(broken)  # too large to explain: the compact check's own report
    assert not compact.ok
    assert [(v.kind, v.rank, v.buf, v.index) for v in compact.violations] == \
        [(v.kind, v.rank, v.buf, v.index) for v in slow.violations]
    assert all(v.writer is None for v in compact.violations)
