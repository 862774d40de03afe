"""The report's text: a summary by kind at the end, the schedule named, and ``assert_verified``."""

from __future__ import annotations

import doctest

import pytest

from algorithms import Buf, Collective, Kind, Schedule, Step, Transfer, build
from sim.verify import assert_verified
from sim.verify.fast import verdict
from sim.verify.report import VerifyReport
from sim.verify.verifier import verify


def _many() -> Schedule:
    # All-gather, p = 4, one step: all four ranks copy their input to rank 0's output[0] (rank 0's copy comes
    # first and wins: 3 races), and rank 1 forwards its empty output[0] to rank 2 (an uninitialised read).
    # Only rank 0's output[0] ends right: 16 - 1 = 15 wrong slots.
    coll = Collective(Kind.ALLGATHER, 4, 1)
    ts = [Transfer(r, 0, Buf.INPUT, 0, Buf.OUTPUT, 0) for r in range(4)]
    return Schedule(coll, "pile-up", (Step((*ts, Transfer(1, 2, Buf.OUTPUT, 0, Buf.OUTPUT, 0))),))


def test_a_report_with_many_violations_ends_with_a_summary_by_kind() -> None:
    report = verify(_many())
    assert [v.kind for v in report.violations] == ["race"] * 3 + ["uninitialised_read"] + ["wrong_slot"] * 15
    lines = str(report).splitlines()
    assert lines[0] == "pile-up (allgather p=4 C=1): 1 steps, 5 transfers: 19 violation(s)"
    assert lines[-1] == "  summary: 15 wrong_slot, 3 race, 1 uninitialised_read"
    assert len(lines) == 1 + 19 + 1
    assert report.summary == {"wrong_slot": 15, "race": 3, "uninitialised_read": 1}
    assert report.to_dict()["summary"] == {"wrong_slot": 15, "race": 3, "uninitialised_read": 1}
    # An ok report has none (and its JSON is as it was).
    ok = verify(build("allgather", "ring", 4))
    assert "summary" not in str(ok) and ok.to_dict() == {"ok": True, "violations": [], "transfers": 16, "steps": 3}


def test_the_compact_verifier_s_unlisted_violations_still_count_in_the_summary() -> None:
    s = _many()
    found = verdict(s, limit=2)  # 2 of the 4 step violations and 2 of the 15 wrong slots listed
    report = VerifyReport(s.name, s.collective.describe(), s.num_steps, s.num_transfers, tuple(found))
    assert sum(1 for v in found if v.step is not None or v.rank is not None) == 4
    assert report.summary == {"wrong_slot": 15, "race": 3, "uninitialised_read": 1}
    assert str(report).splitlines()[0].endswith(": 19 violation(s)")
    assert "2 more race violation(s) not listed" in str(report)


def test_assert_verified_names_the_schedule_and_keeps_the_message_short() -> None:
    assert assert_verified(build("broadcast", "binomial", 8, root=3)).ok
    coll = Collective(Kind.ALLGATHER, 5, 1)
    with pytest.raises(AssertionError) as e:
        assert_verified(Schedule(coll, "nothing", ()))
    lines = str(e.value).splitlines()
    assert lines[0] == "nothing (allgather p=5 C=1) fails verification: 0 steps, 0 transfers: 25 violation(s)"
    # Rank r's output[s] must hold rank s's chunk 0; the first 20 listed, in slot order (no step: held "before step 0").
    assert lines[1] == "  rank 0 output[0]: expected chunk 0 from rank 0, got nothing; no transfer wrote it; " \
                       "chunk 0 from rank 0 was held only before step 0"
    assert lines[20].startswith("  rank 3 output[4]: expected chunk 0 from rank 4, got nothing")
    assert lines[21:] == ["  ... and 5 more", "  summary: 25 wrong_slot"]
    # The root is part of the name where the collective has one.
    with pytest.raises(AssertionError, match=r"^binomial \(broadcast p=4 C=1 root=2\) fails verification: "):
        s = build("broadcast", "binomial", 4, root=2)
        assert_verified(Schedule(s.collective, s.name, s.steps[:-1]))


def test_report_str_names_the_schedule_as_assert_verified_does() -> None:
    s = build("broadcast", "binomial", 4, root=2)
    broken = Schedule(s.collective, s.name, s.steps[:-1])
    report = verify(broken)
    assert report.title == "binomial (broadcast p=4 C=1 root=2)"
    assert str(report).startswith("binomial (broadcast p=4 C=1 root=2): ")
    with pytest.raises(AssertionError) as e:
        assert_verified(broken)
    assert str(e.value).startswith(report.title + " fails verification: ")


def test_assert_verified_docstring_example_runs() -> None:
    import sim.verify.verifier as V

    finder = doctest.DocTestFinder()
    tests = [t for t in finder.find(V.assert_verified, "assert_verified", globs=vars(V).copy()) if t.examples]
    assert tests
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for t in tests:
        runner.run(t)
    assert runner.failures == 0
