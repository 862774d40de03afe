"""The rank side of tests/runners/test_campaign_table.py: DDP on the tuning table a campaign wrote."""

from __future__ import annotations

import torch.distributed as dist

from tests.runners import backend_cases as cases


def ddp_on_campaign_table(rank: int, world: int, expected: dict[int, str]) -> None:
    """The policy (COLLSCHED_TUNING: the campaign's table) picks the campaign's winner at each size, and DDP on
    it ends within rounding of gloo having run that allreduce schedule (``backend_cases.ddp_training``)."""
    from runners.backend.group import collsched_group

    cg = collsched_group(dist.group.WORLD)
    assert cg is not None
    chosen = {n: str(cg.policy.choose("allreduce", n, world)) for n in expected}
    assert chosen == expected, (chosen, expected)
    cases.ddp_training(rank, world)
