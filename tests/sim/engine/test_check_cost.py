"""``check_cost``: an algorithm's closed-form ``Cost`` against its own schedules, from Python and as
``collsched verify --cost``. The expectations are worked by hand for ring all-reduce."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from algorithms import Collective, Kind, ScheduleBuilder, registry
from algorithms.errors import RegistryError
from algorithms.registry import Cost, register
from sim.engine.closed_form import check_cost


def _ring(ranks: int, *, chunks: int = 1) -> Any:
    p = ranks
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, p, p), "cost-check-ring")
    for s in range(p - 1):
        with b.step():
            for r in range(p):
                b.reduce(r, (r + 1) % p, (r - s) % p)
    for s in range(p - 1):
        with b.step():
            for r in range(p):
                b.copy(r, (r + 1) % p, (r + 1 - s) % p)
    return b.build()


@pytest.fixture
def user_algorithms(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A ring all-reduce registered three times: with the right cost, with half the bytes, with a cost that raises."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    right = Cost("2(p-1)α + 2(p-1)/p·nβ + (p-1)/p·nγ", steps=lambda p, n, params: 2 * (p - 1),
                 bytes=lambda p, n, params: 2 * (p - 1) * n / p, reduced=lambda p, n, params: (p - 1) * n / p,
                 sent_per_rank=lambda p, n, params: 2 * (p - 1) * n / p)
    half = Cost("2(p-1)α + (p-1)/p·nβ", steps=lambda p, n, params: 2 * (p - 1),
                bytes=lambda p, n, params: (p - 1) * n / p, reduced=lambda p, n, params: (p - 1) * n / p)
    raising = Cost("?", steps=lambda p, n, params: params["k"], bytes=lambda p, n, params: n,
                   reduced=lambda p, n, params: 0)
    register(Kind.ALLREDUCE, "cost-check-right", source="here", cost=right)(_ring)
    register(Kind.ALLREDUCE, "cost-check-half", source="here", cost=half)(_ring)
    register(Kind.ALLREDUCE, "cost-check-raising", source="here", cost=raising)(_ring)
    register(Kind.ALLREDUCE, "cost-check-none", source="here")(_ring)
    yield


def test_the_library_ring_meets_its_cost_on_every_case() -> None:
    check = check_cost("allreduce", "ring", ranks=range(1, 9))
    assert check.ok, str(check)
    # p = 1..8, chunks 1 and 2: 16 cases, none refused.
    assert [(c.ranks, c.params["chunks"]) for c in check.cases] == [(p, k) for p in range(1, 9) for k in (1, 2)]
    case = next(c for c in check.cases if (c.ranks, c.params["chunks"]) == (4, 1))
    n = check.size
    # Ring all-reduce, p = 4: 6 steps of one chunk of n/4 each way per rank, 3 reductions of n/4.
    assert case.measured == {"steps": 6, "bytes": 6 * n / 4, "reduced": 3 * n / 4, "sent_per_rank": 6 * n / 4}
    assert case.formula == case.measured
    # Lockstep on switch:4 at 1 us a link and 10 GB/s: each step costs 2 us + (n/4) / 10 GB/s.
    assert case.simulated_s == pytest.approx(6 * (2e-6 + n / 4 / 10e9), rel=1e-9)
    assert case.closed_form_s == pytest.approx(case.simulated_s, rel=1e-9)
    assert "OK" in str(check)


def test_a_bound_stated_with_le_is_checked_as_a_bound() -> None:
    # double_binary_tree's formula says "≤" for β and γ: measured below the formula passes.
    check = check_cost("allreduce", "double_binary_tree", ranks=range(2, 7))
    assert check.ok, str(check)
    assert any(c.measured["bytes"] < c.formula["bytes"] for c in check.cases)


def test_a_wrong_cost_is_found_term_by_term_and_against_the_simulator(user_algorithms: None) -> None:
    assert check_cost("allreduce", "cost-check-right", ranks=(3, 4, 8)).ok
    check = check_cost("allreduce", "cost-check-half", ranks=(4,), params={"chunks": 1})
    assert not check.ok
    [case] = check.cases
    n = check.size
    assert case.measured["bytes"] == 6 * n / 4 and case.formula["bytes"] == 3 * n / 4  # the formula's half
    assert case.simulated_s == pytest.approx(6 * (2e-6 + n / 4 / 10e9), rel=1e-9)
    assert case.closed_form_s == pytest.approx(6 * 2e-6 + 3 * n / 4 / 10e9, rel=1e-9)
    text = str(check)
    assert "p=4" in text and "bytes" in text and "simulated / closed form" in text
    assert f"module {__name__}" in text


def test_a_cost_that_raises_or_is_missing(user_algorithms: None) -> None:
    check = check_cost("allreduce", "cost-check-raising", ranks=(4,))
    assert not check.ok and check.error is not None
    assert "Cost.steps raises KeyError" in check.error and f"module {__name__}" in check.error
    with pytest.raises(RegistryError, match="no closed-form cost"):
        check_cost("allreduce", "cost-check-none")
    with pytest.raises(RegistryError, match="unknown algorithm"):
        check_cost("allreduce", "no-such-algorithm")


def _main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    from sim.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_verify_cost_on_the_command_line(user_algorithms: None, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _main(capsys, "verify", "--cost", "-c", "allreduce", "-a", "ring", "-p", "6")
    assert code == 0, err
    assert "allreduce/ring" in out and "OK" in out
    code, out, _ = _main(capsys, "verify", "--cost", "-c", "allreduce", "-a", "cost-check-half", "-p", "4")
    assert code == 1 and "p=4" in out and "bytes" in out
    code, out, _ = _main(capsys, "verify", "--cost", "-c", "allreduce", "-a", "cost-check-half", "-p", "4", "--chunks",
                         "1", "--json")
    doc = json.loads(out)
    assert code == 1 and doc["ok"] is False and doc["cases"] == 1 and doc["mismatches"]
    # Without -p: p = 1..16.
    code, out, _ = _main(capsys, "verify", "--cost", "-c", "allreduce", "-a", "cost-check-right", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["ok"] is True and doc["ranks"] == list(range(1, 17))
    code, _, err = _main(capsys, "verify", "--cost", "-c", "allreduce", "-a", "cost-check-raising")
    assert code == 2 and "Cost.steps raises KeyError" in err and "Traceback" not in err
    code, _, err = _main(capsys, "verify", "--cost", "-c", "allreduce", "-a", "cost-check-none")
    assert code == 2 and "no closed-form cost" in err
    code, _, err = _main(capsys, "verify", "--cost", "--file", "x.json")
    assert code == 2 and "--cost" in err
