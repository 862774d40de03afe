"""sim.guards: oversized requests end at once with exit 2 and the estimate; the estimates against what the
builders really make; the memory there is comes from COLLSCHED_MEMORY when set."""

from __future__ import annotations

import time

import pytest

from algorithms import registry
from sim.cli.app import main
from sim.guards import ResourceError, check, estimate_library, memory_budget, spec_ranks


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, float]:
    t0 = time.perf_counter()
    rc = main(list(argv))
    return rc, capsys.readouterr().err, time.perf_counter() - t0


def test_synthesizing_allgather_on_sixty_thousand_ranks_is_refused_up_front(capsys: pytest.CaptureFixture[str],
                                                                           tmp_path: object) -> None:
    rc, err, wall = run(capsys, "synthesize", "-c", "allgather", "-t", "ring:60000", "-o", f"{tmp_path}/x.json")
    assert rc == 2
    assert "60000 ranks needs about" in err and "transfers" in err and "GB of memory" in err and "would fit" in err
    assert wall < 5.0


def test_simulating_direct_alltoall_on_a_huge_switch_is_refused_up_front(capsys: pytest.CaptureFixture[str]) -> None:
    rc, err, wall = run(capsys, "simulate", "-c", "alltoall", "-a", "direct", "-t", "switch:65536", "-s", "1MiB")
    assert rc == 2
    assert "alltoall/direct on 65536 ranks needs about 4.29e+09 transfers" in err  # 65536² exactly, extrapolated
    assert wall < 5.0


def test_verify_and_export_are_guarded_too(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: object) -> None:
    monkeypatch.setenv("COLLSCHED_MEMORY", "10MB")
    rc, err, _ = run(capsys, "verify", "-c", "alltoall", "-a", "direct", "-p", "300")
    assert rc == 2 and "alltoall/direct on 300 ranks" in err and "10 MB to spare" in err
    rc, err, _ = run(capsys, "export", "-c", "alltoall", "-a", "direct", "-p", "300", "-o", f"{tmp_path}/a.json")
    assert rc == 2 and "alltoall/direct on 300 ranks" in err


def test_a_small_request_passes_and_the_budget_decides(capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLLSCHED_MEMORY", "1GB")
    assert run(capsys, "simulate", "-c", "alltoall", "-a", "direct", "-t", "switch:100", "-s", "1MiB",
               "--bound", "no", "--json")[0] == 0
    monkeypatch.setenv("COLLSCHED_MEMORY", "1MB")  # 100² transfers at 2 KiB: 20 MB, over the budget
    rc, err, _ = run(capsys, "simulate", "-c", "alltoall", "-a", "direct", "-t", "switch:100", "-s", "1MiB")
    assert rc == 2 and "1 MB to spare" in err


def test_sweep_and_synthesize_alltoall_are_guarded(capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    monkeypatch.setenv("COLLSCHED_MEMORY", "1MB")
    rc, err, _ = run(capsys, "sweep", "-c", "alltoall", "-t", "switch:200", "--sizes", "1MiB")
    assert rc == 2 and "on 200 ranks needs about" in err
    rc, err, _ = run(capsys, "synthesize", "-c", "alltoall", "-t", "switch:200", "-o", f"{tmp_path}/x.json")
    assert rc == 2 and "synthesize alltoall on 200 ranks" in err


@pytest.mark.parametrize("algorithm, within", [("direct", 0.01), ("pairwise", 0.01), ("bruck", 0.25)])
def test_extrapolated_transfers_match_the_build(algorithm: str, within: float) -> None:
    # p² transfers extrapolate exactly; Bruck's p·log p is over-estimated (a power law through 32 and 64).
    alg = registry.get("alltoall", algorithm)
    est = estimate_library(lambda q: alg.build(q), 200, lambda p: 0.0)
    built = alg.build(200).num_transfers
    assert built <= est.transfers <= built * (1 + within)


def test_check_names_the_world_that_fits(monkeypatch: pytest.MonkeyPatch) -> None:
    from sim.guards import Estimate

    monkeypatch.setenv("COLLSCHED_MEMORY", "1000B")
    with pytest.raises(ResourceError, match="about 31 ranks would fit"):  # 31² = 961 <= 1000 < 32²
        check("a test", 100, lambda p: Estimate(p * p, p * p))
    assert memory_budget() == 1000


def test_spec_ranks_builds_nothing() -> None:
    assert spec_ranks("switch:65536") == 65536
    assert spec_ranks("torus:4x4") == 16
    assert spec_ranks("cluster:2x8") == 16
    assert spec_ranks("no/such/file.json") is None
