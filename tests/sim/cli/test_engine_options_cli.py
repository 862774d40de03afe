"""The command line builds the engine's options once, as one ``EngineOptions``, and hands that value whole to
the engine; a field it refuses is a usage error (exit 2, one line, no traceback)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sim.cli import main
from sim.engine import EngineOptions, reference
from sim.machine import model as M


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    """What the commands built (``engine_options``) and what the engine received (``simulate``'s options)."""
    from sim.cli import common, simulate, sweep

    seen: dict[str, list[Any]] = {"built": [], "engine": []}
    build, run = common.engine_options, reference.simulate

    def engine_options(*a: Any, **k: Any) -> Any:
        seen["built"].append(build(*a, **k))
        return seen["built"][-1]

    def simulate_spy(schedule: Any, topology: Any, size: float, options: Any = None, **fields: Any) -> Any:
        assert not fields, "the command line passes the value, not keywords"
        seen["engine"].append(options)
        return run(schedule, topology, size, options)

    for module in (common, simulate, sweep):
        monkeypatch.setattr(module, "engine_options", engine_options)
    monkeypatch.setattr(reference, "simulate", simulate_spy)
    return seen


def test_simulate_hands_the_engine_the_value_it_built(spy: dict[str, list[Any]],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", "-c", "allreduce", "-a", "ring", "-t", "ring:4", "--size", "1MiB", "--overhead", "2us",
                 "--reduce-bw", "100GB/s", "--launch", "3us", "--mode", "lockstep", "--engine", "simpy", "--json"])
    assert code == 0 and json.loads(capsys.readouterr().out)["engine"] == "simpy"
    [built] = spy["built"]
    assert isinstance(built, EngineOptions)
    assert built == EngineOptions(mode="lockstep", overhead=2e-6, reduce_bandwidth=1e11, launch=3e-6, progress=True,
                                  engine="simpy")
    assert len(spy["engine"]) == 1 and spy["engine"][0] is built


def test_sweep_hands_every_run_the_value_it_built(spy: dict[str, list[Any]],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["sweep", "-c", "allgather", "-t", "ring:4", "--sizes", "1KiB,1MiB", "--algorithms", "ring,direct",
                 "--overhead", "1us", "--json"])
    assert code == 0 and len(json.loads(capsys.readouterr().out)["results"]) == 4
    [built] = spy["built"]
    assert built.progress is False and built.overhead == 1e-6  # sweep draws its own bar
    assert len(spy["engine"]) == 4 and all(o is built for o in spy["engine"])


def test_flags_win_over_the_machine_files_figures(tmp_path: Path, spy: dict[str, list[Any]],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.json"
    M.save(M.Machine(M.host(2, bandwidth=1e9, latency=1e-5),
                     EngineOptions(overhead=7e-6, reduce_bandwidth=3e9, launch=9e-5, message_cpu=1e-6)), path)
    assert main(["simulate", "-c", "allreduce", "-a", "ring", "-t", str(path), "--size", "1KiB", "--overhead", "0",
                 "--json"]) == 0
    capsys.readouterr()
    [built] = spy["built"]
    assert built == EngineOptions(overhead=0.0, reduce_bandwidth=3e9, launch=9e-5, message_cpu=1e-6, progress=True)
    # The run itself, then lockstep beside it (simulate compares the modes): the same value in the other mode.
    assert spy["engine"] == [built, built.replace(mode="lockstep", progress=False)] and spy["engine"][0] is built


def test_nccl_runs_take_the_value_with_nccls_launch(spy: dict[str, list[Any]],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "-c", "allreduce", "-a", "nccl", "-t", "dgx-h100:1", "--size", "1MiB", "--json"]) == 0
    capsys.readouterr()
    [built] = spy["built"]
    assert spy["engine"] and all(o == built.replace(launch=o.launch) and o.launch > 0 for o in spy["engine"])


@pytest.mark.parametrize("argv, message", [
    (["--engine", "fast", "--message-cpu", "1us"], "engine fast does not model message_cpu"),
])
def test_a_field_the_value_refuses_is_a_usage_error(spy: dict[str, list[Any]], capsys: pytest.CaptureFixture[str],
                                                    argv: list[str], message: str) -> None:
    code = main(["simulate", "-c", "allreduce", "-a", "ring", "-t", "ring:4", "--size", "1MiB", *argv])
    _out, err = capsys.readouterr()
    assert code == 2 and message in err and err.count("\n") == 1 and "Traceback" not in err
    assert spy["engine"] == []  # refused before anything ran


def test_a_machine_files_bad_engine_field_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = M.to_dict(M.Machine(M.host(2, bandwidth=1e9, latency=1e-5)))
    doc["engine"] = {"overhead": -1}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    for command in (["simulate", "-c", "allreduce", "-a", "ring", "--size", "1KiB"],
                    ["sweep", "-c", "allreduce", "--sizes", "1KiB"]):
        code = main([*command, "-t", str(path), "--json"])
        error = json.loads(capsys.readouterr().out)["error"]
        assert code == 2 and "topology.engine.overhead: must be a finite number of seconds >= 0" in error
