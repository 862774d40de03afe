"""runners.execution.verified: the verifier's verdict before a schedule runs, cached by content."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from algorithms import build
from algorithms.ir import Kind, Schedule
from runners.backend import policy
from runners.errors import InputError
from runners.execution import verified


@pytest.fixture(autouse=True)
def fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    directory = tmp_path / "verified"
    monkeypatch.setenv(verified.ENV_VERIFY_CACHE, str(directory))
    monkeypatch.delenv(verified.ENV_VERIFY, raising=False)
    verified.clear_memory()
    yield directory
    verified.clear_memory()


def _broken(s: Schedule, step: int = 1) -> Schedule:
    """``s`` with the first transfer of ``step`` dropped."""
    steps = list(s.steps)
    steps[step] = type(steps[step])(steps[step].transfers[1:])
    return Schedule(s.collective, s.name, steps, scratch_chunks=s.scratch_chunks)


def test_digest_is_of_the_content_not_the_name() -> None:
    a = build("allreduce", "ring", 4)
    same = Schedule(a.collective, "another name", a.steps)
    assert verified.digest(a) == verified.digest(same) == verified.digest(build("allreduce", "ring", 4))
    assert verified.digest(a) != verified.digest(_broken(a))
    assert verified.digest(a) != verified.digest(build("allreduce", "ring", 4, chunks=2))


def test_a_good_schedule_is_verified_once_then_remembered(fresh: Path) -> None:
    s = build("allgather", "ring", 33)
    assert verified.work(s) >= verified.DISK_FROM
    verified.require(s)
    assert verified.stats() == {"verified": 1, "memory": 0, "disk": 0}
    verified.require(s)  # the same object: by identity
    verified.require(build("allgather", "ring", 33))  # an equal one: by digest
    assert verified.stats() == {"verified": 1, "memory": 2, "disk": 0}
    entry = json.loads((verified.cache_dir() / verified.digest(s)).read_text())
    assert entry["ok"] is True and entry["collective"] == "allgather p=33 C=1"
    verified.clear_memory()  # as a new process: the disk says it verified
    verified.require(build("allgather", "ring", 33))
    assert verified.stats() == {"verified": 0, "memory": 0, "disk": 1}


def test_a_small_schedule_never_touches_the_disk(fresh: Path) -> None:
    assert verified.work(build("allgather", "ring", 5)) < verified.DISK_FROM
    verified.require(build("allgather", "ring", 5))  # verifying it costs less than a file
    verified.clear_memory()
    verified.require(build("allgather", "ring", 5))
    assert verified.stats() == {"verified": 1, "memory": 0, "disk": 0}
    assert not fresh.exists()


def test_a_broken_schedule_is_refused_naming_it_and_never_written(fresh: Path) -> None:
    bad = _broken(build("allreduce", "ring", 4))
    big = _broken(build("allgather", "ring", 33))
    with pytest.raises(verified.UnverifiedSchedule):
        verified.require(big)
    with pytest.raises(verified.UnverifiedSchedule) as caught:
        verified.require(bad)
    text = str(caught.value)
    assert isinstance(caught.value, InputError)
    assert text.startswith("collsched refuses to run schedule 'ring' (allreduce p=4 C=4): it fails verification")
    assert "COLLSCHED_VERIFY=0" in text and "violation(s)" in text and "expected" in text
    assert not fresh.exists()
    with pytest.raises(verified.UnverifiedSchedule, match="allreduce=ring at p=4"):
        verified.require(bad, "allreduce=ring at p=4")  # the verdict is remembered; the source is the caller's
    assert verified.stats()["verified"] == 2


def test_the_error_lists_five_violations_and_counts_the_rest() -> None:
    s = build("allgather", "ring", 8)
    bad = Schedule(s.collective, s.name, s.steps[:-3])  # many slots never written
    with pytest.raises(verified.UnverifiedSchedule) as caught:
        verified.require(bad)
    lines = str(caught.value).splitlines()
    listed = [line for line in lines if line.startswith("  rank ")]
    assert len(listed) == verified.SHOWN
    assert any(line.startswith("  ... and ") and "more" in line for line in lines), lines


def test_an_unwritable_cache_costs_only_a_verification(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(verified.ENV_VERIFY_CACHE, str(blocker / "sub"))
    verified.require(build("allgather", "ring", 33))
    assert verified.stats()["verified"] == 1


def test_verify_0_skips_and_warns_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(verified.ENV_VERIFY, "0")
    bad = _broken(build("allreduce", "ring", 4))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        verified.require(bad)
        verified.require(bad)
    assert [str(w.message) for w in caught] == [
        "collsched: COLLSCHED_VERIFY=0: schedules run without verification; a wrong schedule returns wrong data"]
    monkeypatch.setenv(verified.ENV_VERIFY, "yes")
    with pytest.raises(InputError, match="COLLSCHED_VERIFY must be 0 or 1, got 'yes'"):
        verified.require(bad)


def test_the_policy_names_the_choice(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from algorithms import formats

    bad = _broken(build("allreduce", "ring", 4))
    path = tmp_path / "dropped.json"
    formats.save(bad, path)
    choice = policy.Choice(f"{policy.FILE_PREFIX}{path}")
    with pytest.raises(verified.UnverifiedSchedule) as caught:
        policy.schedule(Kind.ALLREDUCE, choice, 4)
    assert f"allreduce=file:{path} at p=4 (schedule file {path})" in str(caught.value)
    good = policy.schedule(Kind.REDUCE, policy.Choice("binomial", (("chunks", 2),)), 4, 3)
    assert good.collective.root == 3
    assert policy.describe_choice(Kind.REDUCE, policy.Choice("binomial", (("chunks", 2),)), 4, 3) == \
        "reduce=binomial:chunks=2 at p=4, root 3 (algorithm 'binomial', parameters: chunks=2)"
