"""The command line's contracts: output formats and exit codes 0 / 1 / 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from algorithms import build, registry
from algorithms import formats as fileformat
from algorithms.errors import RegistryError
from algorithms.ir import Kind
from runners.commands.cli import main

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())  # the repository


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as e:  # argparse usage errors
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_list_json_names_every_algorithm(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "list", "--json")
    rows = json.loads(out)["algorithms"]
    assert code == 0
    assert {(r["collective"], r["algorithm"]) for r in rows} == {(a.kind.value, a.name) for a in registry.algorithms()}
    assert all({"collective", "algorithm", "constraints", "parameters"} <= r.keys() for r in rows)


def test_list_shows_the_algorithms_reached_by_name_apart(capsys: pytest.CaptureFixture[str]) -> None:
    # The in-network algorithms (issue: NVLS, SHARP, multicast) and the synthesizer are not in sweeps, but a
    # user must still find them: by hand, these six names at least, each once, and none among the listed.
    code, out, _ = _run(capsys, "list", "--json")
    doc = json.loads(out)
    named = {(r["collective"], r["algorithm"]) for r in doc["by_name_only"]}
    assert {("allreduce", "nvls"), ("allreduce", "nvls_tree"), ("allreduce", "sharp"), ("allgather", "multicast"),
            ("broadcast", "multicast"), ("allreduce", "synth")} <= named
    assert not named & {(r["collective"], r["algorithm"]) for r in doc["algorithms"]}
    code, out, _ = _run(capsys, "list")
    head, _, tail = out.partition("By name only")
    assert code == 0 and tail and " nvls " in tail and " nvls " not in head


def test_list_table_shows_cost_formulas(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "list")
    assert code == 0 and "2(p-1)α + 2(p-1)/p·nβ" in out and out.splitlines()[0].startswith("collective")


def test_verify_ok_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "verify", "--collective", "allreduce", "--algorithm", "ring", "--ranks", "5",
                        "--chunks", "2", "--json")
    assert code == 0
    assert json.loads(out) == {"ok": True, "violations": [], "transfers": 2 * 4 * 5 * 2, "steps": 8}


def test_verify_rooted_kind_defaults_root_and_takes_root(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(capsys, "verify", "-c", "broadcast", "-a", "binomial", "-p", "6")[0] == 0
    assert _run(capsys, "verify", "-c", "broadcast", "-a", "binomial", "-p", "6", "--root", "5")[0] == 0


def test_verify_a_broken_file_exits_1_and_prints_each_violation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = fileformat.to_dict(build("allreduce", "ring", 4))
    doc["steps"].pop()  # the last all-gather step: 4 slots end wrong
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(doc))
    code, out, _ = _run(capsys, "verify", "--file", str(path))
    assert code == 1 and out.count("expected chunk") == 4
    code, out, _ = _run(capsys, "verify", "--file", str(path), "--json")
    report = json.loads(out)
    assert code == 1 and report["ok"] is False and len(report["violations"]) == 4
    assert report["violations"][0]["kind"] == "wrong_slot"


def test_export_then_verify_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "rs.json"
    code, out, _ = _run(capsys, "export", "-c", "reducescatter", "-a", "ring", "-p", "3", "-k", "2", "-o", str(path))
    assert code == 0 and "wrote" in out
    assert fileformat.load(path) == build("reducescatter", "ring", 3, chunks=2)
    assert _run(capsys, "verify", "--file", str(path))[0] == 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["verify", "-c", "allreduce", "-a", "nope", "-p", "4"], "unknown algorithm 'nope' for allreduce (known: "),
        (["verify", "-c", "allreduce", "-a", "ring"], "missing --ranks"),
        (["verify", "-c", "allreduce", "-a", "ring", "-p", "0"], "ranks must be an integer >= 1"),
        (["verify", "-c", "allreduce", "-a", "ring", "-p", "4", "-k", "0"], "chunks must be an integer >= 1"),
        (["verify", "-c", "allreduce", "-a", "ring", "-p", "4", "-r", "1"], "allreduce has no root"),
        (["verify", "-c", "broadcast", "-a", "binomial", "-p", "4", "-r", "4"], "root 4 out of range"),
        (["verify", "-c", "allreduce", "-a", "ring", "-p", "4", "--param", "g=2"], "unknown parameter 'g'"),
        (["verify", "--file", "x.json", "-p", "4"], "--file cannot be combined with --ranks"),
        (["verify", "--file", "/nonexistent/s.json"], "/nonexistent/s.json: cannot read"),
        (["export", "-c", "allreduce", "-a", "ring", "-p", "2", "-o", "/nonexistent/dir/x.json"], "cannot write"),
    ],
)
def test_input_errors_exit_2_with_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_invalid_file_content_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"format": "collsched.schedule/1", "oops": 1}')
    code, _, err = _run(capsys, "verify", "--file", str(path))
    assert code == 2 and "bad.json" in err and "oops" in err


@pytest.mark.parametrize("argv", [["verify", "--collective", "allsum"], ["frobnicate"], ["verify", "-p", "x"]])
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, *argv)
    assert code == 2 and "usage:" in err


@pytest.mark.multiprocess
def test_the_real_process_exit_codes() -> None:
    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "runners.commands.cli", *argv], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)

    assert run("verify", "-c", "barrier", "-a", "dissemination", "-p", "5").returncode == 0
    bad = run("verify", "-c", "barrier", "-a", "dissemination", "-p", "-3")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


# -- benchmarks/kill_rate.py ---------------------------------------------------------------------------------


USER_RING = '''
from algorithms import Collective, Kind, ScheduleBuilder
from algorithms.registry import register

@register(Kind.ALLGATHER, "kill-rate-user", source="a user's module")
def user(ranks: int, *, chunks: int = 1):
    b = ScheduleBuilder(Collective(Kind.ALLGATHER, ranks, ranks), "kill-rate-user")
    for s in range(ranks - 1):
        with b.step():
            for r in range(ranks):
                b.copy(r, (r + 1) % ranks, (r - s) % ranks)
    return b.build()
'''


def _kill_rate() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("kill_rate_script", ROOT / "benchmarks" / "kill_rate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_kill_rate_help_names_import_and_the_environment(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        _kill_rate().main(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0
    assert "--import MODULE" in out and "COLLSCHED_IMPORT" in out


def test_kill_rate_imports_a_user_algorithm(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    (tmp_path / "kill_rate_algos.py").write_text(USER_RING)
    monkeypatch.delitem(sys.modules, "kill_rate_algos", raising=False)
    try:
        _kill_rate().main(["--import", str(tmp_path / "kill_rate_algos.py"), "--samples", "2", "--ranks", "3"])
    finally:
        sys.modules.pop("kill_rate_algos", None)
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert ["allgather", "kill-rate-user"] in [r[:2] for r in rows]


# -- a refused parameter is blamed, not the world size ---------------------------------------------------------


def test_a_bad_parameter_is_named_not_the_world_size(capsys: pytest.CaptureFixture[str]) -> None:
    # swing_torus serves 16 ranks with its default dims (a 4x4 grid); dims=4x3 holds 12.
    code, out, err = _run(capsys, "verify", "-c", "allreduce", "-a", "swing_torus", "-p", "16", "--param", "dims=4x3")
    assert code == 2 and out == ""
    assert err.startswith("collsched verify: error: allreduce/swing_torus: parameter dims=4x3 does not fit 16 ranks: "
                          "dims 4x3 hold 12 ranks, not 16 (dims: torus sizes RxC")
    assert "allowed: dims (if given): sizes that are powers of two, product p" in err
    assert "cannot serve" not in err


def _toy() -> registry.Algorithm:
    def check(p: int, params: Any) -> str | None:
        if p & (p - 1):
            return "needs a power of two"
        if p % params["group"]:
            return f"group {params['group']} does not divide {p}"
        return None

    return registry.Algorithm(Kind.ALLREDUCE, "toy", lambda p, **k: None, "test", ("p a power of two",),
                              (registry.CHUNKS, registry.Parameter("group", 2, "ranks per group")), check=check)


def test_refusal_blames_the_parameter_only_where_the_defaults_serve() -> None:
    toy = _toy()
    assert toy.refusal(8, {"group": 4, "chunks": 3}) is None
    assert toy.refusal(8, {"group": 3, "chunks": 3}) == (
        "allreduce/toy: parameter group=3 does not fit 8 ranks: group 3 does not divide 8 (group: ranks per group; "
        "allowed: p a power of two)")
    assert toy.refusal(6, {}) == "allreduce/toy cannot serve 6 ranks: needs a power of two"
    assert toy.refusal(6, {"group": 3}) == "allreduce/toy cannot serve 6 ranks: needs a power of two"
    with pytest.raises(RegistryError, match="parameter group=3 does not fit 8 ranks"):
        toy.build(8, group=3)
