"""From campaign to choice: the tuning table a campaign writes is the policy's, and DDP runs on it.

The campaign simulates allreduce on the development machine's calibrated models (the machine files next to
the tuned table, 2 and 4 gloo ranks) without recursive doubling, so its winners differ from the built-in
defaults; the table it writes must load in ``runners.backend.policy`` and make the campaign's winners the
policy's choices, and DDP on 4 gloo ranks with ``COLLSCHED_TUNING`` pointing at it must match gloo.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runners.backend.policy import ENV_TUNING, TUNED_TABLE, TUNING_FORMAT, Policy, load_tuning, parse_tuning
from sim.campaign import table as campaign_table
from sim.campaign.report import load_report
from sim.campaign.run import run_campaign
from sim.campaign.spec import parse_campaign
from sim.campaign.store import Store
from sim.campaign.table import tuning_table, write_table
from tests.runners import backend_cases as cases
from tests.runners import campaign_cases

pytestmark = pytest.mark.multiprocess

MACHINES = [str(TUNED_TABLE.with_name(f"gloo-{p}.json")) for p in (2, 4)]
SIZES = [1 << k for k in range(10, 25, 2)]  # 1 KiB to 16 MiB


@pytest.fixture(scope="module")
def campaign_table_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, dict[int, str]]]:
    """The table a campaign wrote, and the winner per world size and size."""
    d = tmp_path_factory.mktemp("campaign")
    campaign = parse_campaign({
        "name": "gloo", "topologies": MACHINES, "sizes": SIZES,
        "algorithms": {"allreduce": ["ring", "direct", "rabenseifner", {"name": "ring", "params": {"chunks": [2, 4]}}],
                       "allgather": ["ring", "direct", "bruck"]}})
    with Store(d / "gloo.sqlite") as store:
        run_campaign(campaign, store, workers=1, progress=False)
        report = load_report(campaign, store)
    path = d / "table.json"
    write_table(tuning_table(report), path)
    winners: dict[int, dict[int, str]] = {}
    for w in report.winners:
        if w.collective == "allreduce":
            params = "".join(f":{k}={v}" for k, v in sorted(w.params.items()))
            winners.setdefault(w.ranks, {})[w.size] = w.algorithm + params
    return path, winners


def test_the_table_is_the_policy_s_format(campaign_table_file: tuple[Path, dict[int, dict[int, str]]]) -> None:
    path, _ = campaign_table_file
    assert campaign_table.TUNING_FORMAT == TUNING_FORMAT
    doc = json.loads(path.read_text())
    rules = parse_tuning(doc, where=str(path))  # raises on anything the policy does not read
    assert rules == load_tuning(path) and {str(k) for k in rules} == {"allreduce", "allgather"}
    for kind_rules in rules.values():
        assert {(r.min_ranks, r.max_ranks) for r in kind_rules} == {(2, 2), (4, 4)}


def test_the_policy_picks_the_campaign_s_winners(campaign_table_file: tuple[Path, dict[int, dict[int, str]]]) -> None:
    path, winners = campaign_table_file
    policy = Policy.from_env({ENV_TUNING: str(path)})
    assert set(winners) == {2, 4}
    for p, by_size in winners.items():
        for size, want in by_size.items():
            assert str(policy.choose("allreduce", size, p)) == want, (p, size)
            if size > SIZES[0]:  # a call between two sizes of the campaign gets the larger one's winner
                assert str(policy.choose("allreduce", size - size // 4, p)) == want, (p, size)
    assert "recursive_doubling" not in {w for by in winners.values() for w in by.values()}
    assert str(Policy.from_env({}).choose("allreduce", 1 << 14, 4)) == "recursive_doubling"  # what it replaces


def test_ddp_runs_on_the_table_a_campaign_wrote(campaign_table_file: tuple[Path, dict[int, dict[int, str]]]) -> None:
    path, winners = campaign_table_file
    expected = {n: winners[4][n] for n in SIZES[:3]}  # DDP's small buckets fall in these bands
    cases.spawn(campaign_cases.ddp_on_campaign_table, 4, expected, env={ENV_TUNING: str(path)})
