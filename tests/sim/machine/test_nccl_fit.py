"""collsched fit --nccl-tests: a log the simulator wrote with known figures, fitted back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim.cli import main as cli_main
from sim.machine.model import load
from sim.machine.nccl import simulate_nccl
from sim.machine.nccl_fit import fitted_topology
from sim.topology.switches import capabilities

HEAD = """# nThread 1 nGpus 1 minBytes 8 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
"""
SIZES = (8, 65536, 1 << 20, 64 << 20, 1 << 30)


def _log(path: Path, spec: str, figures: dict[str, float], *, algo: str | None = "ring",
         sizes: tuple[int, ...] = SIZES, ranks: int = 8) -> None:
    """An nccl-tests log the simulator writes on ``spec`` with ``figures`` (``ranks`` Rank lines, 8 per host)."""
    topo = fitted_topology(spec, figures)
    lines = [HEAD.rstrip("\n")]
    lines[1:1] = [f"#  Rank {r:2d} Group  0 Pid {100 + r} on host-{r // 8} device {r % 8} [0x1a] NVIDIA GPU"
                  for r in range(ranks)]
    for n in sizes:
        t = simulate_nccl("allreduce", topo, n, algo=algo).time * 1e6
        lines.append(f"{n:>12} {n // 4:>12}     float     sum      -1 {t:>8.2f}    0.00    0.00      0 "
                     f"{t:>8.2f}    0.00    0.00      0")
    forced = [f"node-a:1:1 [0] NCCL INFO NCCL_ALGO set by environment to {algo.capitalize()}"] if algo else []
    text = "\n".join([*forced, "# Collective test starting: all_reduce_perf", *lines, "# Avg bus bandwidth    : 0.00"])
    path.write_text(text + "\n")


def test_a_fitted_machine_keeps_the_presets_switches_and_takes_its_figures(tmp_path: Path) -> None:
    t = fitted_topology("dgx-b200:2@fabric=roce", {"nvlink_efficiency": 0.7, "nic_efficiency": 0.5, "nvls_rate": 0.8,
                                                   "latency_LL": 1.3})
    # NVLink links at 0.7 / 0.802 of the preset's, the NICs at 0.5 / 0.94, the NVSwitch's NVLS rate x0.8 (and still
    # a switch that reduces: the fit keeps what the log does not constrain)
    assert t.bandwidth(0, "node0") == pytest.approx(900e9 * 0.7)
    assert t.bandwidth(0, "rail0") == pytest.approx(50e9 * 0.5)
    caps = capabilities(t, "node1")
    assert caps is not None and caps.reduce and caps.bandwidth == pytest.approx(9 * 80e9 * 0.74 * 0.8)
    assert t.graph.graph["fabric"]["name"] == "roce"
    # LL's latencies x1.3: one node's 8-byte Ring/LL all-reduce, (6.6 + 14 x 0.6) us x 1.3
    one = fitted_topology("dgx-h100:1", {"latency_LL": 1.3})
    assert simulate_nccl("allreduce", one, 8, algo="ring").time == pytest.approx(15.0e-6 * 1.3, rel=1e-3)
    # the machine file keeps it all
    from sim.machine.model import Machine, save

    save(Machine(t), tmp_path / "m.json")
    back = load(tmp_path / "m.json").topology
    assert capabilities(back, "node1") == caps and back.graph.graph["nccl"]["latency"]["LL"] == 1.3


@pytest.mark.slow
def test_fit_recovers_the_figures_it_was_written_with(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "all_reduce_perf.log"
    _log(log, "dgx-h100:1", {"nvlink_efficiency": 0.70, "latency_LL": 1.30, "latency_LL128": 1.3,
                             "latency_Simple": 1.3})
    out = tmp_path / "machine.json"
    assert cli_main(["fit", "--nccl-tests", str(log), "-t", "dgx-h100:1", "-o", str(out), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    # the log forced the ring (NCCL_ALGO=Ring, as NCCL_DEBUG=INFO prints it), so the fit simulates the ring at each
    # size; the figures the log was written with come back, each where the log's rows depend on it
    assert got["figures"]["nvlink_efficiency"] == pytest.approx(0.70, rel=0.02)
    assert got["figures"]["latency_LL"] == pytest.approx(1.30, rel=0.03)
    # one node: no NIC to fit; the ring never runs NVLS: the switch's rate is not pinned down either
    assert "nic_efficiency" in got["not_pinned"] and "nvls_rate" in got["not_pinned"]
    assert cli_main(["simulate", "-c", "allreduce", "-a", "nccl", "-t", str(out), "-s", "8", "--json",
                     "--bound", "no", "--param", "algo=ring"]) == 0
    t = json.loads(capsys.readouterr().out)["time_s"]
    assert t == pytest.approx(15.0e-6 * 1.30, rel=0.03)  # LL ring, (6.6 + 14 x 0.6) us x the factor


@pytest.mark.slow
def test_a_fit_keeps_nvls_and_fits_its_rate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # One B200 node, NCCL's default: NVLS from a few MiB on. The log is written with the NVSwitch's NVLS rate x0.6;
    # the fit finds it and keeps the switches: the fitted machine still runs and simulates NVLS, and at two nodes
    # (the same fit, another node count) NVLSTree, not a ring in its place
    log = tmp_path / "all_reduce_perf.log"
    _log(log, "dgx-b200:1", {"nvls_rate": 0.6}, algo=None, sizes=(64 << 20, 256 << 20, 1 << 30))
    out = tmp_path / "machine.json"
    assert cli_main(["fit", "--nccl-tests", str(log), "-t", "dgx-b200:1", "-o", str(out), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert "nvls_rate" in got["fitted"] and got["logs"][0]["median_abs_error"] < 0.02
    assert got["figures"]["nvls_rate"] == pytest.approx(0.6, rel=0.05)
    assert "nic_efficiency" in got["not_pinned"]  # one node
    assert cli_main(["simulate", "-c", "allreduce", "-a", "nccl", "-t", str(out), "-s", "1GiB", "--json",
                     "--bound", "no"]) == 0
    run = json.loads(capsys.readouterr().out)
    assert run["nccl"]["algorithm"] == run["simulated"]["algorithm"] == "nvls"
    two = fitted_topology("dgx-b200:1", got["figures"], nodes=2)
    caps = capabilities(two, "node1")
    assert caps is not None and caps.bandwidth == pytest.approx(9 * 80e9 * 0.74 * got["figures"]["nvls_rate"])
    r = simulate_nccl("allreduce", two, 1 << 30)
    assert r.nccl.algorithm == r.simulated.algorithm == "nvls_tree"


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
