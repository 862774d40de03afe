"""What the registry checks of a builder's answer, and of a plugin module's import: a schedule for the wrong
world, kind or root is refused naming the builder; a builder's own exception names its module, the algorithm
and the parameters; a module that calls sys.exit while it is imported is an error, not a silent exit 0."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from algorithms import Kind, build, registry
from algorithms.errors import RegistryError
from algorithms.registry import register
from sim.cli.app import main


@pytest.fixture
def scratch_names() -> Iterator[list[tuple[Kind, str]]]:
    """Names registered by a test, removed after it."""
    names: list[tuple[Kind, str]] = []
    yield names
    for key in names:
        registry._REGISTRY.pop(key, None)


def _register(names: list[tuple[Kind, str]], kind: Kind, name: str, builder: object) -> None:
    register(kind, name, source="a test")(builder)  # type: ignore[arg-type]
    names.append((kind, name))


def test_a_schedule_for_another_world_is_refused(scratch_names: list[tuple[Kind, str]]) -> None:
    _register(scratch_names, Kind.ALLREDUCE, "t-wrong-p", lambda p, chunks=1: build("allreduce", "ring", p + 1))
    with pytest.raises(RegistryError, match=r"allreduce/t-wrong-p \(builder .*\) for p=4, chunks=1 returned a "
                                            r"schedule for 5 ranks"):
        registry.build("allreduce", "t-wrong-p", 4)


def test_a_schedule_of_another_kind_or_root_is_refused(scratch_names: list[tuple[Kind, str]]) -> None:
    _register(scratch_names, Kind.ALLGATHER, "t-wrong-kind", lambda p, chunks=1: build("allreduce", "ring", p))
    with pytest.raises(RegistryError, match="returned a allreduce schedule"):
        registry.build("allgather", "t-wrong-kind", 4)
    _register(scratch_names, Kind.BROADCAST, "t-wrong-root",
              lambda p, root=0, chunks=1: build("broadcast", "binomial", p, root=0))
    assert registry.build("broadcast", "t-wrong-root", 4, root=0).collective.root == 0
    with pytest.raises(RegistryError, match="for p=4, root=2, chunks=1 returned a schedule rooted at 0"):
        registry.build("broadcast", "t-wrong-root", 4, root=2)
    _register(scratch_names, Kind.ALLREDUCE, "t-none", lambda p, chunks=1: None)
    with pytest.raises(RegistryError, match="returned a NoneType, not a Schedule"):
        registry.build("allreduce", "t-none", 4)


def test_a_builders_own_error_names_its_module_and_the_request(scratch_names: list[tuple[Kind, str]],
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    def broken(p: int, chunks: int = 1) -> None:
        raise ValueError("p must be a power of three")

    _register(scratch_names, Kind.ALLREDUCE, "t-broken", broken)
    with pytest.raises(RegistryError, match=r"allreduce/t-broken \(builder (tests\.algorithms\.)?test_registry_builders"
                                            r"\..*broken\) for p=4, chunks=1 raised ValueError: p must be a power"):
        registry.build("allreduce", "t-broken", 4)
    assert main(["verify", "-c", "allreduce", "-a", "t-broken", "-p", "4", "--json"]) == 2
    out = json.loads(capsys.readouterr().out)
    assert not out["ok"] and "raised ValueError: p must be a power of three" in out["error"]


def test_a_plugin_that_exits_at_import_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    quits = tmp_path / "quits_at_import.py"
    quits.write_text("import sys\nsys.exit(0)\n")
    code = main(["list", "--import", str(quits)])
    err = capsys.readouterr().err
    assert code == 2 and "the module called sys.exit(0) while being imported" in err, err


def test_a_builder_that_fails_above_64_ranks_is_named_by_simulate(scratch_names: list[tuple[Kind, str]],
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # No check=: the memory guard trial-builds at 32 and 64 ranks, where this builder raises; the build at the
    # requested 100 ranks raises too, and that is what the user sees, under --json as everywhere (it was a traceback).
    def powers_of_three(p: int, chunks: int = 1) -> None:
        raise ValueError(f"p must be a power of three, got {p}")

    _register(scratch_names, Kind.ALLREDUCE, "t-pow3", powers_of_three)
    code = main(["simulate", "-c", "allreduce", "-a", "t-pow3", "-t", "switch:100", "--size", "1MiB", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 2 and not out["ok"]
    assert "allreduce/t-pow3 (builder " in out["error"] and "powers_of_three) for p=100, chunks=1 raised ValueError: " \
        "p must be a power of three, got 100" in out["error"]
