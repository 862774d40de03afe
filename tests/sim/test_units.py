"""Sizes on the command line: decimal KB/MB/GB/TB beside binary KiB/MiB/GiB/TiB (and nccl-tests' K/M/G/T),
negative sizes refused with the accepted forms, whichever way argparse is given them."""

from __future__ import annotations

import json

import pytest

from algorithms.errors import UsageError
from sim.cli import main
from sim.units import SIZE_FORMS, parse_size, parse_sizes


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(("text", "value"), [
    ("64MB", 64_000_000), ("1KB", 1000), ("2GB", 2_000_000_000), ("1TB", 10**12), ("1.5kb", 1500),
    ("64MiB", 64 << 20), ("1KiB", 1024), ("1GiB", 1 << 30), ("1TiB", 1 << 40),
    ("1K", 1024), ("1M", 1 << 20), ("1G", 1 << 30), ("1T", 1 << 40),  # nccl-tests: K, M, G alone are binary
    ("4096", 4096), ("8B", 8), ("0", 0),
])
def test_sizes_decimal_and_binary(text: str, value: int) -> None:
    assert parse_size(text) == value


def test_size_ranges_in_decimal_units() -> None:
    assert parse_sizes("1MB:4MB") == [1e6, 2e6, 4e6]
    assert parse_sizes("1KB,1KiB") == [1000, 1024]


@pytest.mark.parametrize("text", ["-5MiB", "-1", "-0.5GB"])
def test_negative_sizes_are_refused_with_the_accepted_forms(text: str) -> None:
    with pytest.raises(UsageError, match="negative") as e:
        parse_size(text)
    assert SIZE_FORMS in str(e.value)


def test_an_unknown_unit_lists_the_accepted_forms() -> None:
    with pytest.raises(UsageError, match="cannot read '5 parsecs'") as e:
        parse_size("5 parsecs")
    assert SIZE_FORMS in str(e.value)
    for unit in ("KB", "MB", "GB", "KiB", "MiB", "GiB", "K, M, G"):
        assert unit in SIZE_FORMS


SIM = ["simulate", "-c", "allreduce", "-a", "ring", "-t", "ring:4", "--bandwidth", "1GB/s", "--latency", "0"]


def test_simulate_takes_a_decimal_size(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, *SIM, "--size", "64MB", "--json")
    assert code == 0, err
    # Ring all-reduce on ring:4 at 1 GB/s, no latency: 6 steps of 16 MB each = 96 ms.
    assert json.loads(out)["time_s"] == pytest.approx(6 * 16e6 / 1e9, rel=1e-12)


@pytest.mark.parametrize("spelling", [["--size", "-5MiB"], ["--size=-5MiB"], ["-s", "-5MiB"]])
def test_a_negative_size_gets_one_clear_message_however_spelled(capsys: pytest.CaptureFixture[str],
                                                                spelling: list[str]) -> None:
    code, out, err = run(capsys, *SIM, *spelling)
    assert code == 2 and out == ""
    assert err == f"collsched simulate: error: --size: a size cannot be negative, got '-5MiB' ({SIZE_FORMS})\n"


@pytest.mark.parametrize("spelling", [["--sizes", "-1KiB:1MiB"], ["--sizes=-1KiB:1MiB"]])
def test_sweep_refuses_a_negative_size_however_spelled(capsys: pytest.CaptureFixture[str],
                                                       spelling: list[str]) -> None:
    code, out, err = run(capsys, "sweep", "-c", "allreduce", "-t", "ring:4", *spelling)
    assert code == 2 and out == ""
    assert err.startswith("collsched sweep: error: --sizes: a size cannot be negative, got '-1KiB'")


def test_a_size_range_is_counted_before_it_is_built() -> None:
    # 1 KiB to 1 GiB by 1.0000001 is log(2**20)/log(1.0000001) + 1 = 138,629,437 sizes (by hand: 13.8629/1e-7);
    # the list was built whole (3.8 GB) before the cap looked at it.
    with pytest.raises(UsageError, match=r"makes 138629\d\d\d sizes, too many \(at most 200\)"):
        parse_sizes("1KiB:1GiB:1.0000001")
    assert parse_sizes("1:1:2") == [1]
    assert parse_sizes("1KiB:1MiB")[-1] == 1024 * 1024 and len(parse_sizes("1KiB:1MiB")) == 11
    with pytest.raises(UsageError, match=r"201 sizes is too many"):
        parse_sizes(",".join(["1KiB"] * 201))
    assert len(parse_sizes(",".join(["1KiB"] * 200))) == 200
