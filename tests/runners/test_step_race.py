"""runners.execution.plan.step_race: a step writing one slot twice with a copy among the writes, against brute force."""

from __future__ import annotations

import random

import pytest

from algorithms import registry
from algorithms.builder import ScheduleBuilder
from algorithms.ir import Buf, Collective, Kind, Op, Schedule
from runners.execution.plan import step_race


def brute_force(schedule: Schedule) -> bool:
    """Whether some step writes some slot twice with at least one copy, slot by slot."""
    if schedule.collective.kind is Kind.BARRIER:
        return False
    for step in schedule.steps:
        writes: dict[tuple[int, Buf, int], list[Op]] = {}
        for t in step.transfers:
            for c in range(t.dst_index, t.dst_index + t.count):
                writes.setdefault((t.dst, t.dst_buf, c), []).append(t.op)
        if any(len(ops) > 1 and Op.COPY in ops for ops in writes.values()):
            return True
    return False


def _random(seed: int) -> Schedule:
    rng = random.Random(seed)
    p, k = rng.randrange(2, 5), rng.randrange(1, 5)
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, p, k), "random", scratch_chunks=k)
    for _ in range(rng.randrange(1, 4)):
        with b.step():
            for _ in range(rng.randrange(1, 6)):
                count = rng.randrange(1, k + 1)
                src, dst = rng.randrange(p), rng.randrange(p)
                index, dst_index = rng.randrange(k - count + 1), rng.randrange(k - count + 1)
                dst_buf = rng.choice([Buf.INPUT, Buf.SCRATCH])
                (b.copy if rng.random() < 0.4 else b.reduce)(src, dst, index, count, dst_index=dst_index,
                                                              dst_buf=dst_buf)
    return b.build()


@pytest.mark.parametrize("seed", range(300))
def test_agrees_with_brute_force_on_random_steps(seed: int) -> None:
    sched = _random(seed)
    assert (step_race(sched) is not None) == brute_force(sched)


def test_names_the_step_the_transfers_and_the_slot() -> None:
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, 3, 4), "t")
    with b.step():
        b.reduce(1, 0, 0, 2)  # chunks 0-1: two reduces are fine
        b.reduce(2, 0, 0, 2)
    with b.step():
        b.copy(1, 0, 0, 3)  # chunks 0-2 of rank 0 ...
        b.reduce(2, 0, 2, 2)  # ... and 2-3: chunk 2 is written by a copy and a reduce
    text = step_race(b.build())
    assert text is not None
    assert text.startswith("step 1: transfers 0 (0.input[0:3] = 1.input[0:3]) and 1 (0.input[2:4] += 2.input[2:4])")
    assert "rank 0 input chunk 2" in text


@pytest.mark.parametrize("p", [2, 3, 5, 8])
def test_no_library_algorithm_races(p: int) -> None:
    for alg in registry.algorithms():
        if alg.unsupported(p, {}) is None:
            root = p - 1 if alg.kind in (Kind.BROADCAST, Kind.REDUCE, Kind.SCATTER, Kind.GATHER) else None
            sched = alg.build(p, root=root)
            assert step_race(sched) is None, (alg.name, step_race(sched))
