"""Reading and writing the files a user names (algorithms.disk): capped reads, writes that replace only
regular files. Each case is one of the faults a round of bad inputs found (issue: "nothing overwritten")."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from algorithms.disk import read_capped, write_output
from algorithms.errors import CollschedError


def test_a_planted_tmp_symlink_is_never_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (tmp_path / "x.json.tmp").symlink_to(victim)  # where the old writer put its temporary file
    write_output(tmp_path / "x.json", "{}")
    assert victim.read_text() == "keep me"
    assert (tmp_path / "x.json").read_text() == "{}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["victim.txt", "x.json", "x.json.tmp"]  # nothing left over


def test_a_fifo_is_written_to_not_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    write_output(fifo, "through the pipe")
    reader.join(timeout=60)
    assert got == [b"through the pipe"]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_device_is_written_to_not_replaced(tmp_path: Path) -> None:
    # A node of /dev/full's device numbers (1, 7), made here so that a broken writer could only hurt tmp_path;
    # without the right to make device nodes, the machine's own /dev/full is named through a link instead.
    dev = tmp_path / "full"
    try:
        os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 7))
    except PermissionError:
        dev.symlink_to("/dev/full")
    with pytest.raises(CollschedError, match=r"cannot write .*full: No space left on device"):
        write_output(dev, "x" * 10)
    assert stat.S_ISCHR(os.stat(dev).st_mode)


def test_a_symlink_is_written_through(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    real.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_output(link, "new")
    assert link.is_symlink() and real.read_text() == "new"
    assert stat.S_IMODE(real.stat().st_mode) == 0o640  # an existing file keeps its permission bits


def test_dash_writes_to_stdout(capfd: pytest.CaptureFixture[str]) -> None:
    write_output("-", "to stdout\n")
    assert capfd.readouterr().out == "to stdout\n"


def test_a_directory_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(CollschedError, match=f"cannot write {tmp_path}: is a directory"):
        write_output(tmp_path, "x")
    with pytest.raises(CollschedError, match=f"{tmp_path}: cannot read: is a directory"):
        read_capped(tmp_path, 100)


def test_reads_are_capped_whatever_the_reported_size() -> None:
    assert os.stat("/dev/zero").st_size == 0  # the size a check of st_size would trust
    with pytest.raises(CollschedError, match=r"schedule file /dev/zero: more than 1000 bytes"):
        read_capped("/dev/zero", 1000, "schedule file ")


def test_a_capped_read_returns_the_whole_small_file(tmp_path: Path) -> None:
    f = tmp_path / "s.json"
    f.write_bytes(b"x" * 1000)
    assert read_capped(f, 1000) == b"x" * 1000
    with pytest.raises(CollschedError, match="more than 999 bytes"):
        read_capped(f, 999)
    with pytest.raises(CollschedError, match=r"missing: cannot read: No such file"):
        read_capped(tmp_path / "missing", 10)
