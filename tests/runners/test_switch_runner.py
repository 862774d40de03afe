"""Schedules with switch operations on gloo give torch's results: the runner lowers them to point-to-point.

Reference: torch's own collectives on the same data (``tests.runners.test_runner.one_case``). The schedules
are this issue's library algorithms where they are registered, and hand-written ones of every shape.
"""

from __future__ import annotations

import random

import pytest
import torch
import torch.distributed as dist

from algorithms.errors import ScheduleError
from runners.commands.launch import spawn
from runners.execution import switching
from runners.execution.switching import SwitchError, on_torch
from tests.algorithms import switch_cases
from tests.runners import limits
from tests.runners.test_runner import EXECUTORS, one_case


def switch_job(rank: int, seed: int) -> list[str]:
    """Every switch schedule at this world size, two dtypes, a few sizes; the failures of this rank."""
    p = dist.get_world_size()
    rng = random.Random(seed)  # the same on every rank
    failures = []
    cases = 0
    for sched in switch_cases.every(p, chunks=2):
        for dtype, op, n in ((torch.int64, "SUM", sched.collective.chunks * 3 + 1), (torch.float32, "MAX", 1)):
            turn = (EXECUTORS[cases % len(EXECUTORS)],)  # the executors take turns: the lowering is the same
            cases += 1
            err = one_case(sched, dtype, op, n, rng.randrange(1 << 30), None, exact=True, executors_=turn)
            if err:
                failures.append(err)
    return failures


@pytest.mark.multiprocess
@pytest.mark.parametrize("p", [pytest.param(2, marks=pytest.mark.slow), 4])
def test_switch_schedules_match_torch_on_gloo(p: int) -> None:
    results = spawn(switch_job, p, 7, timeout=limits.job(2))
    failures = [f for r in results for f in r]
    assert failures == [], "\n".join(failures[:20])


def test_the_runner_runs_the_lowered_schedule_and_keeps_it() -> None:
    s = switch_cases.nvls_allreduce(4)
    low = on_torch(s)
    assert not low.switch_ops and low.num_transfers > 0
    assert on_torch(s) is low  # cached: the runner's plan cache then hits too
    plain = low
    assert on_torch(plain) is plain


def test_a_schedule_whose_lowering_fails_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(_s: object) -> None:
        raise ScheduleError("schedule addresses too many chunk slots")

    monkeypatch.setattr(switching, "point_to_point", fail)
    with pytest.raises(SwitchError, match=r"hand-sharp allreduce p=2 C=1: its switch operations \(step 0: "
                                          r"reduce@sw .*\) cannot run as point-to-point transfers: schedule addresses"):
        switching.on_torch(switch_cases.sharp_allreduce(2))


def test_no_multicast_on_a_cpu() -> None:
    # The symmetric-memory probe says no wherever there is no CUDA device: the lowering then runs.
    assert switching.multicast_available(torch.device("cpu")) is False
