"""simulate -a nccl --nccl-version: the release's choice, and NCCL's own prediction beside the simulated time."""

from __future__ import annotations

import json

import pytest

from sim.cli import main as cli_main


def _run(capsys: pytest.CaptureFixture[str], *extra: str, spec: str = "dgx-h100:1", size: str = "8") -> dict:
    args = ["simulate", "-c", "allreduce", "-a", "nccl", "-t", spec, "-s", size, "--json", "--bound", "no",
            "--no-progress", *extra]
    assert cli_main(args) == 0
    out: dict = json.loads(capsys.readouterr().out)
    return out


def test_the_release_is_an_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(capsys)["nccl"]["version"] == "2.30"  # the newest release modelled by default
    # 1 MiB on 2 DGX H100: NVLSTree in 2.26, the tree's LL128 from 2.28 (tests/sim/machine/test_nccl_versions.py)
    assert _run(capsys, "--nccl-version", "2.26", spec="dgx-h100:2", size="1MiB")["nccl"]["algorithm"] == "nvls_tree"
    out = _run(capsys, "--nccl-version", "2.28.9", spec="dgx-h100:2", size="1MiB")
    assert (out["nccl"]["algorithm"], out["nccl"]["protocol"], out["nccl"]["version"]) == ("tree", "LL128", "2.28")
    assert cli_main(["simulate", "-c", "allreduce", "-a", "nccl", "-t", "dgx-h100:1", "-s", "8",
                     "--nccl-version", "2.9", "--no-progress"]) == 2
    assert "2.18" in capsys.readouterr().err


def test_nccls_prediction_beside_the_simulated_time(capsys: pytest.CaptureFixture[str]) -> None:
    # 8 B on one DGX H100: Ring/LL, NCCL's model 6.6 + 14 x 0.6 = 15.0 us plus 8 B at its LL rate; the simulation
    # pays the same latencies, so they agree (no reason given)
    m = _run(capsys)["nccl_model"]
    assert (m["algorithm"], m["protocol"]) == ("ring", "LL")
    assert m["latency_s"] == pytest.approx(15.0e-6) and m["ratio"] == pytest.approx(1.0, abs=0.05)
    assert m["why"] == []
    # 1 GiB NVLSTree on 2 nodes, 2.26: NCCL's model 53 us + 1 GiB / (8 x 40 x 5/6 GB/s); the simulation is
    # bandwidth-bound on the NVSwitch port's NVLS rate, and says so
    m = _run(capsys, "--nccl-version", "2.26", spec="dgx-h100:2", size="1GiB")["nccl_model"]
    assert m["latency_s"] == pytest.approx((25 + 2 * 14) * 1e-6)
    assert m["algbw_GBps"] == pytest.approx(8 * 40 * 5 / 6)
    assert m["time_s"] == pytest.approx(53e-6 + 2**30 / (8 * 40 * 5 / 6 * 1e9))
    assert m["ratio"] > 1.05 and "bandwidth-bound" in m["why"][0]
    assert cli_main(["simulate", "-c", "allreduce", "-a", "nccl", "-t", "dgx-h100:2", "-s", "1GiB",
                     "--nccl-version", "2.26", "--no-progress", "--bound", "no"]) == 0
    text = capsys.readouterr().out
    assert "NCCL 2.26 runs nvls_tree/Simple" in text and "NCCL's model" in text and "differs" in text


def test_point_to_point(capsys: pytest.CaptureFixture[str]) -> None:
    # all-to-all on 2 DGX H100 at 1 GiB per rank: every GPU sends 8/16 of its input to the other node through its
    # rail's NIC (with PXN the 7 cross-rail peers' shares leave through their rail's GPU), 512 MiB at 0.94 x 50 GB/s
    args = ["simulate", "-c", "alltoall", "-a", "nccl", "-t", "dgx-h100:2", "-s", "1GiB", "--json", "--bound", "no",
            "--no-progress"]
    assert cli_main(args) == 0
    got = json.loads(capsys.readouterr().out)
    assert (got["nccl"]["algorithm"], got["nccl"]["protocol"]) == ("p2p", "Simple")
    assert got["time_s"] == pytest.approx(2**29 / 47e9, rel=0.01)
    assert "no model of point-to-point" in got["nccl_model"]["why"][0]
    # 1 KiB: 64 B a peer, LL (up to 16 KiB a message)
    assert cli_main([*args[:8], "1KiB", *args[9:]]) == 0
    assert json.loads(capsys.readouterr().out)["nccl"]["protocol"] == "LL"


def test_pxn_routes_cross_nvlink_to_the_destinations_rail() -> None:
    from sim.machine.nccl_p2p import pxn_routes, simulate_p2p
    from sim.topology import from_spec

    t = from_spec("dgx-h100:2")
    routes = pxn_routes(t)
    assert routes[(1, 10)] == (1, "node0", 2, "rail2", 10)
    assert (1, 9) not in routes and (1, 2) not in routes  # same rail, same node: the preset's own routes
    # send/recv 7 -> 8 crosses from rail 7 to rail 0: through GPU 0's NIC with PXN, through the spine without; one
    # NIC either way at 1 GiB
    with_pxn = simulate_p2p("sendrecv", t, 2**30)
    without = simulate_p2p("sendrecv", t, 2**30, pxn=False)
    assert with_pxn.time == pytest.approx(2**30 / 47e9, rel=0.01) and without.time == pytest.approx(with_pxn.time,
                                                                                                     rel=0.01)
