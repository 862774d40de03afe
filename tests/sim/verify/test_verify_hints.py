"""Dead writes: a slot written, then overwritten by a copy before anything reads it, is named as a hint.

Hints are not violations (the schedule may still be correct). The worked examples are by hand; the
library's schedules are checked against a brute-force trace of every slot's reads and writes, and the
compact verifier (``sim.verify.fast``, for large schedules) must name the same dead writes.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from algorithms import Buf, Collective, Kind, Op, Schedule, ScheduleBuilder, registry
from algorithms.errors import RegistryError
from sim.verify import strategies as cst
from sim.verify.fast import verdict
from sim.verify.mutation import mutate
from sim.verify.report import DEAD_WRITE, Hint
from sim.verify.verifier import verify


def _allgather_with_a_dead_write() -> Schedule:
    # All-gather, p = 2. Step 0: rank 0 sends its chunk to rank 1's output[1] (should be output[0]) and
    # rank 0 places its own chunk. Step 1: rank 1 places its own chunk in output[1] (overwriting the
    # misplaced one, never read) and sends it to rank 0.
    b = ScheduleBuilder(Collective(Kind.ALLGATHER, 2, 1), "misplaced")
    with b.step():
        b.copy(0, 1, 0, dst_buf=Buf.OUTPUT, dst_index=1)          # transfer 0: the dead write
        b.copy(0, 0, 0, dst_buf=Buf.OUTPUT, dst_index=0)          # transfer 1
    with b.step():
        b.copy(1, 1, 0, dst_buf=Buf.OUTPUT, dst_index=1)          # transfer 0: overwrites it
        b.copy(1, 0, 0, dst_buf=Buf.OUTPUT, dst_index=1)          # transfer 1
    return b.build()


def test_a_misplaced_write_overwritten_before_any_read_is_named() -> None:
    report = verify(_allgather_with_a_dead_write())
    # The violation only says rank 1's output[0] is wrong; the hint names the transfer that went astray.
    assert [(v.kind, v.rank, v.buf, v.index) for v in report.violations] == [("wrong_slot", 1, "output", 0)]
    assert [h.to_dict() for h in report.hints] == [{
        "kind": DEAD_WRITE, "step": 0, "transfer": 0, "rank": 1, "buf": "output", "index": 1,
        "overwritten_by": {"step": 1, "transfer": 0},
        "message": "step 0 transfer 0 (1.output[1:2] = 0.input[0:1]): writes rank 1 output[1], which step 1 "
                   "transfer 0 (1.output[1:2] = 1.input[0:1]) overwrites before anything reads it (a dead write)",
    }]
    assert report.to_dict()["hints"] == [h.to_dict() for h in report.hints]
    text = str(report)
    assert "hint: step 0 transfer 0 (1.output[1:2] = 0.input[0:1]): writes rank 1 output[1]" in text


def test_a_read_between_or_in_the_overwriting_step_keeps_the_write_alive() -> None:
    coll = Collective(Kind.BROADCAST, 3, 1, 0)
    # Rank 1 receives, forwards to rank 2 at step 1, then receives again at step 2: no dead write.
    b = ScheduleBuilder(coll, "relay")
    with b.step():
        b.copy(0, 1, 0)
    with b.step():
        b.copy(1, 2, 0)
    with b.step():
        b.copy(0, 1, 0)
    report = verify(b.build())
    assert report.ok and report.hints == ()
    # The forward and the overwrite in the same step: the read sees the state at the step's start.
    b = ScheduleBuilder(coll, "same-step")
    with b.step():
        b.copy(0, 1, 0)
    with b.step():
        b.copy(1, 2, 0)
        b.copy(0, 1, 0)
    assert verify(b.build()).hints == ()
    # A reduce into the slot reads it: reduce-scatter's partial sums are never dead.
    assert verify(registry.build("reducescatter", "ring", 4)).hints == ()


def test_a_reduced_slot_overwritten_unread_and_a_write_overwritten_twice() -> None:
    coll = Collective(Kind.ALLREDUCE, 2, 1)
    b = ScheduleBuilder(coll, "wasted-sum")
    with b.step():
        b.reduce(0, 1, 0)                 # step 0 transfer 0: 1.input += 0.input (the full sum)
    with b.step():
        b.copy(0, 1, 0)                   # step 1 transfer 0: overwrites the sum with rank 0's part
    with b.step():
        b.copy(0, 1, 0)                   # step 2 transfer 0: overwrites that, unread, again
    report = verify(b.build())
    assert [(h.step, h.transfer, h.rank, h.buf, h.index, h.overwritten_by) for h in report.hints] == [
        (0, 0, 1, "input", 0, (1, 0)), (1, 0, 1, "input", 0, (2, 0))]
    # Not a violation of its own: the wrong slots are what the postcondition sees.
    assert {v.kind for v in report.violations} == {"wrong_slot"}


def test_barrier_copies_union_tokens_and_are_never_dead() -> None:
    coll = Collective(Kind.BARRIER, 3, 1)
    b = ScheduleBuilder(coll, "twice")
    for _ in range(3):
        with b.step():
            for r in range(3):
                b.copy(r, (r + 1) % 3, 0)
    assert verify(b.build()).hints == ()


def _brute_dead_writes(s: Schedule) -> list[tuple[int, int, int, str, int, tuple[int, int]]]:
    """Every dead write, by a per-slot trace of (step, event) built from the transfers alone."""
    coll = s.collective
    idem = coll.kind is Kind.BARRIER

    def key(rank: int, buf: Buf, i: int) -> tuple[int, Buf, int]:
        return (rank, Buf.INPUT if buf is Buf.OUTPUT and coll.in_place else buf, i)

    trace: dict[tuple[int, Buf, int], list[tuple[int, str, int]]] = {}
    for si, step in enumerate(s.steps):
        for ti, t in enumerate(step.transfers):
            for k in range(t.count):
                trace.setdefault(key(t.src, t.src_buf, t.src_index + k), []).append((si, "read", ti))
        for ti, t in enumerate(step.transfers):
            kind = "copy" if t.op is Op.COPY and not idem else "reduce"
            for k in range(t.count):
                trace.setdefault(key(t.dst, t.dst_buf, t.dst_index + k), []).append((si, kind, ti))
    out = []
    for (rank, buf, i), events in trace.items():
        pending: tuple[int, int] | None = None  # the last write no later step has read
        for si, what, ti in events:
            if what == "read":
                if pending is not None and si > pending[0]:
                    pending = None
            elif what == "copy":
                if pending is not None and pending[0] < si:
                    out.append((pending[0], pending[1], rank, buf.value, i, (si, ti)))
                pending = (si, ti)
            elif pending is None or pending[0] < si:   # a reduce reads the slot; the first of its step names it
                pending = (si, ti)
    return sorted(out)


def _hints(hints: tuple[Hint, ...] | list[Hint]) -> list[tuple[int, int, int, str, int, tuple[int, int]]]:
    return sorted((h.step, h.transfer, h.rank, h.buf, h.index, h.overwritten_by) for h in hints)


def _library() -> list[Schedule]:
    out = []
    for alg in registry.algorithms():
        for p in (2, 3, 4, 5, 8):
            for chunks in (1, 2):
                params = {"chunks": chunks} if any(q.name == "chunks" for q in alg.parameters) else {}
                if chunks > 1 and not params:
                    continue
                try:
                    out.append(alg.build(p, root=(p - 1 if alg.kind.value in (
                        "broadcast", "reduce", "scatter", "gather") else None), **params))
                except RegistryError:
                    continue
    return out


def test_library_algorithms_have_only_real_dead_writes() -> None:
    schedules = _library()
    assert len(schedules) > 150
    with_hints = []
    for s in schedules:
        report = verify(s)
        assert report.ok, str(report)
        want = _brute_dead_writes(s)
        assert _hints(report.hints) == want, f"{s.name} {s.collective.describe()}"
        got: list[Hint] = []
        verdict(s, hints=got)
        assert _hints(got) == want, f"compact: {s.name} {s.collective.describe()}"
        if want:
            with_hints.append((s.name, s.collective.describe(), _hints(report.hints)))
    # The only ones: recursive doubling all-gather at p = 2^k + 1 (p = 3, 5 here), whose extra rank p - 1
    # first places its own chunk in output[p - 1] (step 0, its transfer p - 1) and is sent rank 0's whole
    # output at the last step (step k + 1, transfer 0), which overwrites that placement unread.
    assert with_hints == [
        ("recursive_doubling", "allgather p=3 C=1", [(0, 2, 2, "output", 2, (2, 0))]),
        ("recursive_doubling", "allgather p=3 C=2", [(0, 2, 2, "output", 4, (2, 0)), (0, 2, 2, "output", 5, (2, 0))]),
        ("recursive_doubling", "allgather p=5 C=1", [(0, 4, 4, "output", 4, (3, 0))]),
        ("recursive_doubling", "allgather p=5 C=2", [(0, 4, 4, "output", 8, (3, 0)), (0, 4, 4, "output", 9, (3, 0))]),
    ]


def test_the_hand_examples_agree_with_the_trace_and_the_compact_verifier() -> None:
    s = _allgather_with_a_dead_write()
    got: list[Hint] = []
    verdict(s, hints=got)
    assert _hints(got) == _hints(verify(s).hints) == _brute_dead_writes(s) == [(0, 0, 1, "output", 1, (1, 0))]
    assert [h.message for h in got] == [h.message for h in verify(s).hints]


def test_large_schedules_get_their_hints_from_the_compact_verifier(monkeypatch: pytest.MonkeyPatch) -> None:
    import sim.verify.verifier as V

    s = _allgather_with_a_dead_write()
    slow = V.verify(s)
    monkeypatch.setattr(V, "COMPACT_FROM", 1)
    monkeypatch.setattr(V, "EXPLAIN_UP_TO", 1)   # the compact verifier's own report
    fast = V.verify(s)
    assert fast.hints == slow.hints and len(fast.hints) == 1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(cst.schedules(max_ranks=9, max_chunks=3), st.integers(0, 2**32))
def test_mutants_agree_with_the_trace_and_the_compact_verifier(s: Schedule, seed: int) -> None:
    if s.num_transfers:
        _name, m = mutate(s, random.Random(seed))
        s = s if m is None else m
    report = verify(s)
    got: list[Hint] = []
    verdict(s, hints=got)
    assert _hints(got) == _hints(report.hints)
    if not any(v.kind in ("race", "double_count", "uninitialised_read") for v in report.violations):
        assert _hints(report.hints) == _brute_dead_writes(s)   # every write took effect: the trace is exact
