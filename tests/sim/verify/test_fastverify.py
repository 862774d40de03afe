"""The compact lockstep execution (sim.verify.fast) against the verifier, and its pieces against brute force.

The reference for the verdict is ``sim.verify.verifier.verify`` (Python contents, one
slot at a time); registered schedules and their mutants (drop, duplicate,
redirect... a transfer) cover correct and broken ones, races included.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from algorithms import registry
from algorithms.ir import Schedule, Step
from sim.verify import strategies as cst
from sim.verify.fast import _interval, _mask, expected_columns, run, verdict
from sim.verify.mutation import mutate
from sim.verify.semantics import SlotLayout, expected_state
from sim.verify.verifier import WRONG_SLOT, verify


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(cst.schedules(max_ranks=9, max_chunks=3), st.integers(0, 2**32), st.booleans())
def test_verdict_agrees_with_the_verifier_on_schedules_and_mutants(s: Schedule, seed: int, mutated: bool) -> None:
    if mutated and s.num_transfers:
        _name, m = mutate(s, random.Random(seed))
        if m is None:
            return
        s = m
    want = verify(s)
    got = verdict(s)
    assert want.ok == (not got)
    # The same violations of each kind (races, uninitialised reads, double counts, wrong slots).
    assert sorted(v.kind for v in want.violations) == sorted(v.kind for v in got)
    assert {(v.step, v.transfer) for v in want.violations} == {(v.step, v.transfer) for v in got}


@settings(max_examples=100, deadline=None)
@given(cst.collectives(max_ranks=7, max_chunks=3))
def test_expected_columns_are_the_postcondition(coll: object) -> None:
    from algorithms.ir import Collective

    assert isinstance(coll, Collective)
    layout = SlotLayout(Schedule(coll, "empty", ()))
    slots, chunk, lo, ln = expected_columns(coll, layout)
    got = {int(s): (int(c), _mask(int(a), int(n), coll.ranks)) for s, c, a, n in zip(slots, chunk, lo, ln, strict=True)}
    assert got == expected_state(coll, layout)


@pytest.mark.parametrize("p", [1, 2, 3, 5, 6])
def test_cyclic_intervals_are_exactly_the_rotated_runs(p: int) -> None:
    # Brute force: a mask is a cyclic interval iff some rotation of it is a run of ones starting at bit 0.
    full = (1 << p) - 1
    for mask in range(1, full + 1):
        rotations = {((mask >> r) | (mask << (p - r))) & full for r in range(p)}
        is_run = any(x & (x + 1) == 0 for x in rotations)
        iv = _interval(mask, p)
        assert (iv is not None) == is_run, (p, bin(mask))
        if iv is not None:
            assert _mask(iv[0], iv[1], p) == mask and 0 <= iv[0] < p and 1 <= iv[1] <= p


def test_a_broken_ring_at_scale_names_its_wrong_slots_up_to_the_limit() -> None:
    s = registry.build("allreduce", "ring", 64)
    assert verdict(s) == []
    # Without its last step, every rank misses the piece the last step delivers: 64 wrong slots.
    cut = Schedule.from_columns(s.collective, s.name, {**s.columns()._asdict(),
                                                       **_without_last_step(s)})
    bad = verdict(cut, limit=10)
    assert [v.kind for v in bad] == [WRONG_SLOT] * 11
    assert bad[-1].message == "54 more wrong slot(s) not listed"
    assert len(verify(cut).violations) == 64


def _without_last_step(s: Schedule) -> dict[str, object]:
    c = s.columns()
    end = int(c.step_offsets[-2])
    cols = {f: getattr(c, f)[:end] for f in c._fields if f != "step_offsets"}
    cols["step_offsets"] = c.step_offsets[:-1]
    return cols


def test_one_rank_and_empty_schedules() -> None:
    for a in registry.algorithms():
        try:
            s = a.build(1, root=0 if a.kind.value in ("broadcast", "reduce", "scatter", "gather") else None)
        except Exception:  # an algorithm that needs more ranks
            continue
        assert (verdict(s) == []) == verify(s).ok, a.name
    from algorithms.ir import Collective, Kind

    nothing = Schedule(Collective(Kind.ALLGATHER, 2, 1), "nothing", (Step(()),))
    assert len(verdict(nothing)) == len(verify(nothing).violations) == 4  # 2 ranks x 2 output slots


def test_a_double_count_between_adjacent_intervals_is_caught_on_the_vectorised_path() -> None:
    from algorithms.ir import Collective, Kind, Op, Transfer
    from sim.verify.verifier import DOUBLE_COUNT

    # p = 3: rank 0 holds {0, 1} = [0, 2) and rank 2 holds {2, 0} = [2, 4 mod 3); the union of those would look
    # like a longer interval [0, 4), but they share rank 0's contribution.
    coll = Collective(Kind.ALLREDUCE, 3, 1)
    s = Schedule(coll, "overlap", (Step((Transfer(1, 0, op=Op.REDUCE), Transfer(0, 2, op=Op.REDUCE))),
                                   Step((Transfer(2, 0, op=Op.REDUCE),))))
    got = [v.kind for v in verdict(s) if v.kind == DOUBLE_COUNT]
    want = [v.kind for v in verify(s).violations if v.kind == DOUBLE_COUNT]
    assert got == want == [DOUBLE_COUNT]


TORUS_CASES = [("rabenseifner_torus", 16, {"dims": "4x4"}), ("rabenseifner_torus", 64, {"dims": "4x4x4", "chunks": 2}),
               ("swing_torus", 16, {"dims": "4x4"}), ("recursive_doubling_torus", 32, {"dims": "4x8"})]


@pytest.mark.parametrize(("name", "p", "params"), TORUS_CASES)
@pytest.mark.parametrize("seed", range(12))
def test_interned_sets_agree_with_the_verifier_on_torus_halvings_and_mutants(name: str, p: int, params: dict[str, Any],
                                                                              seed: int) -> None:
    """A halving on a torus forms sets of rows x columns, no cyclic interval: they take the interned path
    (unions once per distinct pair of sets). Correct and mutated (a dropped, duplicated, redirected...
    transfer), the verdict is the slot verifier's."""
    s = registry.get("allreduce", name).build(p, **params)
    state, _bad = run(s)
    assert state.sets, "no set was interned: the path under test did not run"
    if seed:
        _name, m = mutate(s, random.Random(seed))
        assert m is not None
        s = m
    _agrees_with_the_slot_verifier(s)


def _agrees_with_the_slot_verifier(s: Schedule) -> None:
    """``verdict`` lists every violation ``verify`` does: the same kinds, at the same transfers and slots."""
    want = verify(s)
    got = verdict(s, limit=len(want.violations) + 1)
    assert want.ok == (not got)
    assert sorted(v.kind for v in want.violations) == sorted(v.kind for v in got)
    assert {(v.step, v.transfer, v.rank, v.index) for v in want.violations} == {
        (v.step, v.transfer, v.rank, v.index) for v in got}


def test_a_double_count_between_interned_sets_is_named() -> None:
    from algorithms.ir import Op
    from sim.verify.verifier import DOUBLE_COUNT

    # rabenseifner_torus on 4x4: repeat one reduction of the second halving step (sets of 2 ranks, one row and one
    # column apart: no interval) in the third step, where the destination already holds those ranks.
    s = registry.get("allreduce", "rabenseifner_torus").build(16, dims="4x4")
    second = s.steps[1].transfers
    again = next(t for t in second if t.op is Op.REDUCE and t.src == 0)
    broken = Schedule(s.collective, "again", (*s.steps[:2], Step((*s.steps[2].transfers, again)), *s.steps[3:]),
                      ways=None)
    got = [(v.kind, v.step, v.rank) for v in verdict(broken) if v.kind == DOUBLE_COUNT]
    want = [(v.kind, v.step, v.rank) for v in verify(broken).violations if v.kind == DOUBLE_COUNT]
    assert got == want and got and got[0] == (DOUBLE_COUNT, 2, again.dst)


@pytest.mark.parametrize(("name", "p", "params"), [*TORUS_CASES, ("ring", 6, {}), ("direct", 5, {})])
@pytest.mark.parametrize("seed", range(8))
def test_steps_in_parts_and_the_postcondition_in_blocks_give_the_same_verdict(
        name: str, p: int, params: dict[str, Any], seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a few chunks a part, a step whose writes are disjoint and unread runs in parts, and the
    postcondition is checked a rank or two at a time: the verdict is still the slot verifier's."""
    import sim.verify.fast as fast

    s = registry.get("allreduce", name).build(p, **params)
    if seed:
        _name, m = mutate(s, random.Random(seed))
        s = s if m is None else m
    monkeypatch.setattr(fast, "BATCH_MOVES", 5)
    runner = fast._Runner(s, True, 10**6)
    split = [len(runner._parts(a, b)) for a, b in zip(s.columns().step_offsets[:-1].tolist(),
                                                      s.columns().step_offsets[1:].tolist(), strict=True) if b > a]
    if name in ("rabenseifner_torus", "swing_torus") and not seed:  # halvings: disjoint, unread writes
        assert max(split) > 1, "no step ran in parts: the path under test did not run"
    _agrees_with_the_slot_verifier(s)


def test_the_postcondition_in_blocks_names_the_first_wrong_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    """Checked a few ranks at a time, the wrong slots named are still the first ``limit`` of them in slot order,
    with what each should hold (the ring without its last step: one wrong slot a rank, 64 in all)."""
    import sim.verify.fast as fast

    s = registry.build("allreduce", "ring", 64)
    cut = Schedule.from_columns(s.collective, s.name, {**s.columns()._asdict(), **_without_last_step(s)})
    want = sorted((v.rank, v.index, v.expected) for v in verify(cut).violations)
    monkeypatch.setattr(fast, "BATCH_MOVES", 32 * 64)  # 32 ranks of 64 chunks a block: 32 wrong slots each
    bad = verdict(cut, limit=10)
    assert [(v.rank, v.index, v.expected) for v in bad[:10]] == want[:10]
    assert bad[-1].message == "54 more wrong slot(s) not listed"
