"""The collsched torch.distributed backend, end to end on gloo with spawned ranks.

Each test spawns one job that checks many cases (see tests/runners/backend_cases.py)
against the same calls on a gloo group, so the suite stays fast.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from algorithms import registry
from algorithms.ir import Kind
from tests.runners import backend_cases as cases
from tests.runners import limits, work_cases

pytestmark = pytest.mark.multiprocess

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())  # the repository


# The native executor (the default) and the Python one take turns over the world sizes, so that each runs
# both kinds of cases without doubling the suite's time.
@pytest.mark.parametrize(("world", "engine"), [(4, "native"), (3, "python")])
def test_reductions_match_gloo(world: int, engine: str) -> None:
    cases.spawn(cases.reductions, world, env={"COLLSCHED_EXECUTOR": engine})


@pytest.mark.parametrize(("world", "engine"), [(4, "python"), (3, "native")])
def test_data_movement_matches_gloo(world: int, engine: str) -> None:
    cases.spawn(cases.movement, world, env={"COLLSCHED_EXECUTOR": engine})


# Every dtype and size at 2 ranks (3 and 4 ranks run the common ones above), once on each executor.
@pytest.mark.slow
def test_every_dtype_and_size() -> None:
    cases.spawn(cases.reductions, 2, True, env={"COLLSCHED_EXECUTOR": "python"})
    cases.spawn(cases.movement, 2, True, env={"COLLSCHED_EXECUTOR": "native"})


def _pinned_combinations() -> list[str]:
    """COLLSCHED_ALGORITHMS values that, together, pin every registered algorithm of every kind once."""
    by_kind = {k: [a.name for a in registry.algorithms(k)] for k in Kind}
    by_kind = {k: names for k, names in by_kind.items() if names}
    rounds = max(len(names) for names in by_kind.values())
    return [",".join(f"{k}={names[i % len(names)]}" for k, names in by_kind.items()) for i in range(rounds)]


@pytest.mark.slow
def test_every_registered_algorithm_through_the_backend(tmp_path: Path) -> None:
    # Each algorithm with one float and one integer type (the dtypes are the tests above's), every pinning
    # in turn in one job; a failure names the COLLSCHED_ALGORITHMS value.
    cases.spawn(cases.pinned_rounds, 3, _pinned_combinations(), str(tmp_path), backend="")


@pytest.mark.slow
def test_synthesized_schedules_through_the_backend() -> None:
    # The synthesizer, named with its topology in COLLSCHED_ALGORITHMS (the SPEC holds a colon), serves
    # every kind it builds under unmodified torch.distributed calls, checked against gloo.
    spec = ",".join(f"{k}=synth:topology=torus:1x3:chunks=2"
                    for k in ("allreduce", "allgather", "reducescatter", "broadcast", "reduce"))
    cases.spawn(cases.every_kind, 3, env={"COLLSCHED_ALGORITHMS": spec})


def test_objects_coalesced_p2p_functional_subgroups() -> None:
    cases.spawn(cases.api_surface, 4)


@pytest.mark.parametrize("engine", ["native", "python"])
def test_work_order_errors_and_timeouts(engine: str) -> None:
    cases.spawn(work_cases.work_semantics, 3, env={"COLLSCHED_EXECUTOR": engine})


def test_ddp_matches_gloo() -> None:
    cases.spawn(cases.ddp_training, 4)


def test_fsdp2_matches_gloo() -> None:
    cases.spawn(cases.fsdp2_training, 2)


@pytest.mark.parametrize("config", ["cpu:gloo,cuda:collsched", "cpu:collsched"])
def test_per_device_backend_string(config: str) -> None:
    cases.spawn(cases.per_device_string, 2, config, backend="")


def test_unknown_algorithm_fails_init_on_every_rank() -> None:
    cases.spawn(cases.bad_policy, 2, backend="", env={"COLLSCHED_ALGORITHMS": "allreduce=nope"})


def test_exit_without_destroy_does_not_abort() -> None:
    # A gloo group alive at interpreter exit aborts the process (SIGABRT); collsched releases its groups at exit.
    done = subprocess.run([sys.executable, "-m", "tests.runners.backend_cases", "exit", "collsched"], cwd=ROOT,
                          capture_output=True, text=True, timeout=limits.job(0.6))
    assert done.returncode == 0, done.stderr[-2000:]


def test_entry_point_registers_without_import(tmp_path: Path) -> None:
    # What `pip install collsched` leaves behind, without installing: a dist-info declaring the entry point.
    info = tmp_path / "collsched-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: collsched\nVersion: 0.1.0\n")
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["torch.backends"]
    assert declared == {"collsched": "runners.backend.autoload:register"}
    (info / "entry_points.txt").write_text("[torch.backends]\ncollsched = runners.backend.autoload:register\n")
    probe = ("import sys, torch.distributed as dist; "
             "print('collsched' in dist.Backend.backend_list, 'runners.backend.group' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                         timeout=limits.job(0.4), cwd=tmp_path)
    assert out.stdout.split() == ["True", "False"], out.stderr[-2000:]
    off = subprocess.run([sys.executable, "-c", probe], env={**env, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
                         capture_output=True, text=True, timeout=limits.job(0.4), cwd=tmp_path)
    assert off.stdout.split() == ["False", "False"], off.stderr[-2000:]
