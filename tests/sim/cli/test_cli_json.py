"""``--json`` on every subcommand: exactly one JSON object on stdout, errors included (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from algorithms import build
from algorithms import formats as fileformat
from runners.commands.cli import build_parser, main

COMMANDS = ("list", "verify", "export", "convert", "simulate", "sweep", "bound", "synthesize", "fit", "campaign",
            "bench", "demo", "calibrate", "validate", "tune")


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, object], str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    doc = json.loads(out)  # exactly one JSON document: json.loads refuses trailing text
    assert isinstance(doc, dict), out
    return code, doc, err


def test_every_subcommand_has_json_and_import() -> None:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    choices = getattr(sub, "choices", {})
    assert set(choices) == set(COMMANDS)
    for name, parser in choices.items():
        flags = {s for a in parser._actions for s in a.option_strings}
        assert {"--json", "--import"} <= flags, name


@pytest.mark.parametrize("argv", [
    ["list", "--json"],
    ["verify", "-c", "allreduce", "-a", "ring", "-p", "4", "--json"],
    ["simulate", "-c", "allgather", "-a", "ring", "-t", "ring:4", "--size", "4KiB", "--json"],
    ["sweep", "-c", "allgather", "-t", "ring:4", "--sizes", "4KiB", "--json"],
])
def test_success_is_one_object_with_ok_true(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, doc, _ = _run(capsys, *argv)
    assert code == 0 and doc["ok"] is True


def test_export_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    code, doc, _ = _run(capsys, "export", "-c", "allgather", "-a", "ring", "-p", "3", "-o", str(path), "--json")
    assert code == 0 and doc["ok"] is True and doc["output"] == str(path)
    assert fileformat.load(path) == build("allgather", "ring", 3)
    # ring allgather on 3 ranks: each rank copies its own piece into place, then 2 steps of 3 sends
    assert doc["steps"] == 2 and doc["transfers"] == 3 + 2 * 3


def test_demo_json_without_the_run(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, doc, _ = _run(capsys, "demo", "--ranks", "3", "--no-run", "--out", str(tmp_path), "--json")
    assert code == 0 and doc["ok"] is True and "run" not in doc
    assert doc["verify"]["ok"] is True and doc["simulate"]["ok"] is True  # type: ignore[index]


@pytest.mark.parametrize(("argv", "message"), [
    # usage errors found by argparse
    (["frobnicate", "--json"], "invalid choice: 'frobnicate'"),
    (["list", "--json", "--bogus"], "unrecognized arguments: --bogus"),
    (["verify", "--json", "-c", "allsum"], "invalid choice: 'allsum'"),
    (["export", "--json", "-c", "allreduce", "-a", "ring", "-p", "2"], "the following arguments are required"),
    (["simulate", "--json", "-c", "allreduce", "-a", "ring", "-t", "ring:4"], "the following arguments are required"),
    (["sweep", "--json", "-t", "ring:4", "--sizes", "1KiB"], "the following arguments are required: --collective"),
    (["bench", "--json", "-c", "allreduce", "-a", "ring"], "the following arguments are required: --nproc"),
    (["demo", "--json", "--ranks", "x"], "invalid int value: 'x'"),
    # input errors found by the commands
    (["list", "--json", "--import", "no_such_module_q"], "cannot import module 'no_such_module_q'"),
    (["verify", "--json", "-c", "allreduce", "-a", "nope", "-p", "4"], "unknown algorithm 'nope'"),
    (["export", "--json", "-c", "allreduce", "-a", "ring", "-p", "2", "-o", "/nonexistent/d/x.json"], "cannot write"),
    (["simulate", "--json", "-c", "allreduce", "-a", "ring", "-t", "ring:4", "--size", "huge"], "--size: cannot read"),
    (["sweep", "--json", "-c", "allreduce", "-t", "ring:4", "--sizes", "1KiB", "--file", "/nonexistent.json"],
     "/nonexistent.json"),
    (["bench", "--json", "--nproc", "2", "-c", "allreduce", "-a", "nosuch"], "unknown algorithm 'nosuch'"),
    (["demo", "--json", "--ranks", "4", "-t", "ring:3", "--no-run"], "ring:3 has 3 ranks, --ranks is 4"),
    (["convert", "--json", "/nonexistent.json", "/nonexistent.xml"], "/nonexistent.json: cannot read"),
    (["bound", "--json", "-c", "allgather", "-t", "ring:4"], "the following arguments are required: --size"),
    (["bound", "--json", "-c", "allgather", "-t", "nosuch:4", "--size", "1MiB"], "unknown topology 'nosuch:4'"),
    (["synthesize", "--json", "-c", "barrier", "-t", "ring:4", "-o", "/nonexistent.json"], "invalid choice: 'barrier'"),
    (["calibrate", "--json", "--nproc", "0"], "--nproc must be >= 2, got 0"),
    (["validate", "--json", "--machine", "/nonexistent.json", "--nproc", "2"], "/nonexistent.json: cannot read"),
    (["tune", "--json", "--machine", "/nonexistent.json", "--nproc", "2"], "/nonexistent.json: cannot read"),
])
def test_errors_are_one_object_with_ok_false(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                             argv: list[str], message: str) -> None:
    if argv[0] == "demo":
        argv = [*argv, "--out", str(tmp_path)]
    code, doc, _ = _run(capsys, *argv)
    assert code == 2 and doc["ok"] is False and message in str(doc["error"]), doc
    assert set(doc) == {"ok", "error"}


def test_without_json_usage_errors_stay_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "-c", "allsum"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("usage: collsched verify") and "collsched verify: error:" in err


def test_a_broken_schedule_is_exit_1_with_a_json_report(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    doc = fileformat.to_dict(build("allreduce", "ring", 3))
    doc["steps"] = doc["steps"][:-1]
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(doc))
    code, report, _ = _run(capsys, "verify", "--file", str(path), "--json")
    assert code == 1 and report["ok"] is False and report["violations"]
