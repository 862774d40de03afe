"""collsched fit --nccl-tests: a log the simulator wrote with known figures, fitted back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim.cli import main as cli_main
from sim.machine.nccl import simulate_nccl
from sim.machine.nccl_fit import fitted_topology
from sim.topology.gpus import SYSTEMS

HEAD = """# nThread 1 nGpus 1 minBytes 8 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
"""
SIZES = (8, 65536, 1 << 20, 64 << 20, 1 << 30)


def _log(path: Path, nvlink: float, scale: float) -> None:
    topo = fitted_topology(SYSTEMS["dgx-h100"], 1, nvlink_efficiency=nvlink, nic_efficiency=0.94,
                           latency_scale=scale)
    lines = [HEAD.rstrip("\n")]
    for n in SIZES:
        t = simulate_nccl("allreduce", topo, n, algo="ring").time * 1e6
        lines.append(f"{n:>12} {n // 4:>12}     float     sum      -1 {t:>8.2f}    0.00    0.00      0 "
                     f"{t:>8.2f}    0.00    0.00      0")
    # NCCL_ALGO=Ring, as NCCL_DEBUG=INFO prints it: one node's default is NVLS from 2 MiB, which the NVSwitch's
    # figures price, so only the ring's sizes tell the NVLink efficiency
    text = "\n".join(["node-a:1:1 [0] NCCL INFO NCCL_ALGO set by environment to Ring",
                      "# Collective test starting: all_reduce_perf", *lines, "# Avg bus bandwidth    : 0.00"])
    path.write_text(text + "\n")


@pytest.mark.slow
def test_fit_recovers_the_figures_it_was_written_with(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "all_reduce_perf.log"
    _log(log, nvlink=0.70, scale=1.30)
    out = tmp_path / "machine.json"
    assert cli_main(["fit", "--nccl-tests", str(log), "-t", "dgx-h100:1", "-o", str(out), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    # the log forced the ring, so the fit simulates the ring at each size; the figures the log was written with
    # come back
    assert got["figures"]["nvlink_efficiency"] == pytest.approx(0.70, rel=0.02)
    assert got["figures"]["latency_scale"] == pytest.approx(1.30, rel=0.02)
    assert got["fitted"] == ["nvlink_efficiency", "latency_scale"]  # one node: no NIC to fit
    # the machine file is a topology every command takes: -a nccl on it is the figures' simulation
    assert cli_main(["simulate", "-c", "allreduce", "-a", "nccl", "-t", str(out), "-s", "8", "--json",
                     "--bound", "no"]) == 0
    t = json.loads(capsys.readouterr().out)["time_s"]
    assert t == pytest.approx(15.0e-6 * 1.30, rel=0.01)  # LL ring, (6.6 + 14 x 0.6) us x the scale


def test_fit_refuses_what_it_cannot_fit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["fit", "--nccl-tests", str(tmp_path / "none.log"), "-t", "ring:8"]) == 2
    assert "GPU preset" in capsys.readouterr().err
    bad = tmp_path / "bad.log"
    bad.write_text(HEAD + "           8             2     float     sum      -1    1x.0    0.00    0.00      0\n")
    assert cli_main(["fit", "--nccl-tests", str(bad), "-t", "dgx-h100:1", "-o", str(tmp_path / "m.json")]) == 2
    err = capsys.readouterr().err
    assert "bad.log:6" in err and "Traceback" not in err  # the log's line 6: the row


def test_a_topology_file_keeps_the_nodes() -> None:
    from sim.topology import TopologyError, from_spec
    from sim.topology.files import from_dict, to_dict
    from sim.topology.gpus import node_size

    doc = to_dict(from_spec("dgx-h100:2"))
    assert doc["nodes"]["gpus_per_node"] == 8 and doc["nodes"]["system"] == "dgx-h100"
    assert doc["nodes"]["fabric"]["name"] == "ib" and doc["nodes"]["fabric"]["nic_Gbps"] == 400.0
    assert node_size(from_dict(doc)) == 8
    doc["nodes"] = {"gpus_per_node": 0}
    with pytest.raises(TopologyError, match=r"nodes\.gpus_per_node"):
        from_dict(doc)
    doc["nodes"] = {"gpus_per_node": 8, "rails": 8}
    with pytest.raises(TopologyError, match="unknown field 'rails'"):
        from_dict(doc)
