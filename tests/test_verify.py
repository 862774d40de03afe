"""The verifier on worked examples: each kind of violation, located by step and transfer."""

from __future__ import annotations

from algorithms import Buf, Collective, Kind, Op, Schedule, ScheduleBuilder, Step, Transfer, build
from sim.verify import DOUBLE_COUNT, RACE, UNINITIALISED_READ, WRONG_SLOT, verify


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
    assert text.count("\n") == len(report.violations)
