"""Switch operations lowered to point-to-point transfers (``algorithms.lower.point_to_point``).

References: the verifier (sim.verify) on the lowered schedule, which has no switch operations left and so is
checked by the transfer semantics alone; the collectives' results by their definitions, against a numeric
lockstep run of the lowered schedule; and transfer counts worked out by hand.
"""

from __future__ import annotations

import numpy as np
import pytest

from algorithms.builder import ScheduleBuilder
from algorithms.ir import Buf, Collective, Kind, Op, Schedule
from algorithms.lower import point_to_point
from sim.verify import verify
from tests.algorithms import switch_cases
from tests.algorithms.formats.mscclpp_emulator import expected, inputs


def lockstep(s: Schedule, given: dict[int, np.ndarray]) -> dict[tuple[int, Buf], np.ndarray]:
    """Run a schedule of transfers on numbers: every read sees the step's start, reductions add up."""
    coll = s.collective
    bufs: dict[tuple[int, Buf], np.ndarray] = {}
    for r in range(coll.ranks):
        bufs[(r, Buf.INPUT)] = given[r].copy()
        bufs[(r, Buf.OUTPUT)] = bufs[(r, Buf.INPUT)] if coll.in_place else np.zeros(coll.output_chunks(r), np.int64)
        bufs[(r, Buf.SCRATCH)] = np.zeros(s.scratch_chunks, np.int64)
    for step in s.steps:
        before = {k: v.copy() for k, v in bufs.items()}
        for t in step.transfers:
            src = before[(t.src, t.src_buf)][t.src_index:t.src_index + t.count]
            dst = bufs[(t.dst, t.dst_buf)]
            if t.op is Op.COPY:
                dst[t.dst_index:t.dst_index + t.count] = src
            else:
                dst[t.dst_index:t.dst_index + t.count] += src
    return bufs


def _result(s: Schedule, given: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    bufs = lockstep(s, given)
    buf = Buf.INPUT if s.collective.in_place else Buf.OUTPUT
    return {r: bufs[(r, buf)] for r in range(s.collective.ranks)}


@pytest.mark.parametrize("p", range(2, 9))
def test_every_switch_schedule_lowers_to_one_that_verifies_and_computes_the_collective(p: int) -> None:
    for s in switch_cases.every(p, chunks=2):
        low = point_to_point(s)
        assert not low.switch_ops
        assert verify(low).ok, f"{s.name} p={p}"
        given = inputs(s.collective, seed=p)
        want = expected(s.collective, given)
        got = _result(low, given)
        for r, value in want.items():
            assert np.array_equal(got[r], value), f"{s.name} p={p} rank {r}"


def test_a_sharp_reduction_lowers_to_a_star_through_its_hub() -> None:
    # p ranks, one chunk: the hub (rank 0, the first target that is a source) copies its chunk to scratch,
    # receives p - 1 reductions, and sends p copies (one local): 1 + (p - 1) + p transfers in 3 steps.
    p = 5
    low = point_to_point(switch_cases.sharp_allreduce(p))
    assert [len(step) for step in low.steps] == [1, p - 1, p]
    assert low.scratch_chunks == 1
    assert {t.dst for t in low.steps[1].transfers} == {0}


def test_a_multicast_is_the_source_sending_to_every_target() -> None:
    low = point_to_point(switch_cases.multicast_broadcast(4, root=2))
    assert low.num_steps == 1 and {(t.src, t.dst) for t in low.steps[0].transfers} == {(2, 0), (2, 1), (2, 3)}


def test_a_source_the_step_overwrites_is_read_at_the_steps_start() -> None:
    # Rank 1's chunk 0 is a source of the reduction and is overwritten by a copy in the same step: the sum must
    # hold its old value. Closed form: 0.input[0] = a0 + b0, 1.input[0] = a1.
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, 2, 2), "overwrite")
    with b.step():
        b.switch_reduce("sw", [0, 1], [0], 0)
        b.copy(0, 1, 1, dst_index=0)
    s = b.build()
    a, bb = np.array([3, 5]), np.array([7, 11])
    got = _result(point_to_point(s), {0: a, 1: bb})
    assert got[0][0] == 3 + 7 and got[1][0] == 5


def test_a_schedule_without_switch_ops_is_returned_as_it_is() -> None:
    from algorithms import build

    s = build("allreduce", "ring", 4)
    assert point_to_point(s) is s
