"""The compact lockstep execution (sim.verify.fast) against the verifier, and its pieces against brute force.

The reference for the verdict is ``sim.verify.verifier.verify`` (Python contents, one
slot at a time); registered schedules and their mutants (drop, duplicate,
redirect... a transfer) cover correct and broken ones, races included.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from algorithms import registry
from algorithms.ir import Schedule, Step
from sim.verify import strategies as cst
from sim.verify.fast import _interval, _mask, expected_columns, verdict
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
