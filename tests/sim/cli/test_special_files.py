"""Special files given to the CLI: read with a byte cap whatever size they report, and never replaced when
named as an output (a round of bad inputs found /dev/zero read whole into a MemoryError, and ``export -o``
replacing a device node with a regular file)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from sim.cli.app import main

READS = [
    (["verify", "--file", "/dev/zero"], "/dev/zero: more than"),
    (["verify", "--file", "{xml}"], "more than"),
    (["simulate", "-c", "allreduce", "-a", "ring", "-t", "/dev/zero", "--size", "1MiB"], "/dev/zero: more than"),
    (["verify", "-c", "alltoallv", "-a", "direct", "-p", "4", "--matrix", "/dev/zero"], "/dev/zero: more than"),
    (["fit", "--nccl-tests", "/dev/zero", "-t", "dgx-h100:1"], "/dev/zero: more than"),
]


@pytest.mark.parametrize(("argv", "message"), READS, ids=[" ".join(a[:2] + a[-2:]) for a, _ in READS])
def test_an_endless_file_is_refused_at_its_cap(tmp_path: Path, argv: list[str], message: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    xml = tmp_path / "zero.xml"
    xml.symlink_to("/dev/zero")  # an .xml name goes to the MSCCL-IR reader
    code = main([a.replace("{xml}", str(xml)) for a in argv] + ["--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 2 and not out["ok"] and message in out["error"], out


def test_export_writes_into_a_device_and_leaves_it_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dev = tmp_path / "full"
    try:
        os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 7))  # /dev/full's numbers, in a folder of the test's own
    except PermissionError:
        dev.symlink_to("/dev/full")
    code = main(["export", "-c", "allreduce", "-a", "ring", "-p", "4", "-o", str(dev)])
    err = capsys.readouterr().err
    assert code == 2 and f"{dev}: No space left on device" in err, err
    assert stat.S_ISCHR(os.stat(dev).st_mode)


def test_export_to_dash_prints_the_schedule(capfd: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "-c", "allreduce", "-a", "ring", "-p", "4", "-o", "-"]) == 0
    text = capfd.readouterr().out
    doc = json.loads(text[: text.rindex("}") + 1])
    assert doc["format"] == "collsched.schedule/1" and doc["collective"]["ranks"] == 4
