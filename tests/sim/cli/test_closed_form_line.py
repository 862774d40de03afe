"""simulate's closed-form line on a network whose routes differ: it charges the slowest route the schedule uses
and says so, instead of rank 0 -> 1's NVLink figures (which read 5-8x off for anything that crosses nodes)."""

from __future__ import annotations

import re

import pytest

from sim.cli import main


def _closed_form(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[float, list[str]]:
    code = main(["simulate", "--no-progress", "--bound", "no", *argv])
    out = capsys.readouterr().out
    assert code == 0, out
    lines = out.splitlines()
    line = next(x for x in lines if x.startswith("  closed form"))
    m = re.search(r"simulated / closed form ([0-9.]+)$", line)
    assert m is not None, line
    return float(m.group(1)), lines


def test_ring_across_two_dgx_nodes_is_charged_the_network_route(capsys: pytest.CaptureFixture[str]) -> None:
    # dgx-h100:2: 16 GPUs, ranks node-major. Ring all-reduce sends to rank r+1: 7 -> 8 and 15 -> 0 cross the
    # network (a NIC, 0.94 x 50 GB/s), the other 14 pairs stay on NVLink (0.815 x 450 GB/s). Every one of the
    # 30 steps waits for its slowest message, a network one, so the run takes about 30 (α_net + n/16 β_NIC):
    # the closed form charged at the network route, ratio about 1. Charged at route 0 -> 1 (NVLink) it read 6.6.
    ratio, lines = _closed_form(capsys, "-c", "allreduce", "-a", "ring", "-t", "dgx-h100:2", "-s", "64MiB")
    assert 0.8 <= ratio <= 1.25, lines
    line = next(x for x in lines if x.startswith("  closed form"))
    assert "route 7->8" in line  # the first pair that crosses the network
    note = next(x for x in lines if x.startswith("  note") and "closed form" in x)
    assert "uniform" in note and "slowest" in note


def test_every_cross_node_algorithm_is_warned_about_or_close(capsys: pytest.CaptureFixture[str]) -> None:
    # Where the routes differ the closed form is only a guide: a note says so whenever the ratio is off.
    for algorithm in ("recursive_doubling", "direct", "rabenseifner"):
        ratio, lines = _closed_form(capsys, "-c", "allreduce", "-a", algorithm, "-t", "dgx-h100:2", "-s", "64MiB")
        assert ratio < 2, (algorithm, lines)  # never the old silent 2.7-6x
        assert any(x.startswith("  note") and "uniform" in x for x in lines), (algorithm, lines)


def test_a_uniform_network_has_no_note(capsys: pytest.CaptureFixture[str]) -> None:
    # Ring all-reduce on ring:8: every pair it uses is one 50 GB/s, 1 us link apart: the closed form is exact.
    ratio, lines = _closed_form(capsys, "-c", "allreduce", "-a", "ring", "-t", "ring:8", "-s", "8MiB",
                                "--mode", "lockstep")
    assert ratio == 1.0
    assert not any(x.startswith("  note") and "uniform" in x for x in lines)
    assert "(route 0->1)" in next(x for x in lines if x.startswith("  closed form"))
