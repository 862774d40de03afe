"""NCCL's tuning model on the GPU presets: the presets' figures against their sources, NCCL's choice against
what its maintainers say it runs, and -a nccl / --runtime from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim.cli import main as cli_main
from sim.machine.nccl import choose, simulate_nccl
from sim.machine.published import Table, load_table, score
from sim.topology import from_spec
from sim.topology.gpus import node_size

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
PUBLISHED = ROOT / "tests" / "data" / "published"


@pytest.mark.parametrize(("spec", "gpus", "nvlink", "per_link", "nic"), [
    ("dgx-h100:2", 8, 450e9, 20.6 / 25, 50e9),       # H100: 18 NVLink-4 links x 25 GB/s; CX-7 400 Gb/s
    ("hgx-h200:2", 8, 450e9, 20.6 / 25, 50e9),       # H200: the same NVLink 4; CX-7 400 Gb/s
    ("dgx-a100:2", 8, 300e9, 20.0 / 25, 25e9),       # A100: 12 NVLink-3 links x 25 GB/s; HDR 200 Gb/s
    ("dgx-b200:2", 8, 900e9, 40.1 / 50, 50e9),       # B200: 18 NVLink-5 links x 50 GB/s; CX-7 400 Gb/s
    ("gb200-nvl72:2", 72, 900e9, 40.1 / 50, 50e9),   # GB200 NVL72: 72 GPUs per NVLink domain
])
def test_preset_figures(spec: str, gpus: int, nvlink: float, per_link: float, nic: float) -> None:
    t = from_spec(spec)
    assert node_size(t) == gpus and t.ranks == 2 * gpus
    # NCCL's topology counts SM80/SM90/SM100_NVLINK_BW = 20 / 20.6 / 40.1 GB/s per link (src/graph/topo.h; 18 x 20.6
    # = 370.8 GB/s, the maintainers' "effective NVLink bandwidth of 370GB/s" on H100, nccl-tests #212) and 46-48 of
    # 50 GB/s per NIC (nccl-tests #290)
    assert t.bandwidth(1, "node0") == pytest.approx(nvlink * per_link)
    assert t.bandwidth(1, "rail1") == pytest.approx(nic * 0.94)


def test_rails_cross_nodes_between_same_rail_nics_only() -> None:
    t = from_spec("dgx-h100:4")
    for g in range(8):
        assert t.route(g, 8 + g) == (g, f"rail{g}", 8 + g)
    assert t.route(0, 9) == (0, "rail0", "spine", "rail1", 9)  # another rail: through the spine


@pytest.mark.parametrize(("spec", "size", "algo", "proto"), [
    ("dgx-h100:1", 1024, "ring", "LL"),        # one node, small: Ring/LL (nccl-tests tables; issue 21)
    ("dgx-h100:2", 1024, "tree", "LL"),        # across nodes, small: Tree/LL (maintainer in nccl-tests #309)
    ("dgx-h100:2", 8 << 30, "nvls_tree", "Simple"),  # 2 nodes, large: NVLSTree (nccl-tests #309)
    ("dgx-h100:1", 8 << 30, "nvls", "Simple"),  # one node, large: NVLS (dgxc-benchmarking table)
])
def test_the_choice(spec: str, size: int, algo: str, proto: str) -> None:
    c = choose("allreduce", from_spec(spec), size)
    assert (c.algorithm, c.protocol) == (algo, proto)


def test_the_choice_forced_and_its_formula() -> None:
    t = from_spec("dgx-h100:1")
    c = choose("allreduce", t, 8, algo="ring", proto="Simple")
    # tuning.cc by hand: 8.4 + 14 x 3.4 us, plus 8 bytes at ~367 GB/s x 8/14
    assert c.latency_us == pytest.approx(56.0) and c.time_s == pytest.approx(56e-6, rel=1e-3)
    with pytest.raises(ValueError, match="GPU preset"):
        choose("allreduce", from_spec("ring:8"), 8)


def test_simulated_not_returned() -> None:
    # The pick is built and simulated: its time is the engine's, with the schedule's transfers.
    run = simulate_nccl("allreduce", from_spec("dgx-h100:1"), 1 << 20, algo="ring")
    assert run.result.ok and run.result.transfers > 0
    # 1 MiB by hand: LL, 15.0 us + 14 steps of 128 KiB at LL's cap of 141 GB/s busbw (tuning.cc llMaxBw, Hopper)
    # on each link: 141 GB/s x 8/14 algbw ... equivalently 14 x (1 MiB / 8) / 141e9 s.
    assert run.time == pytest.approx(15.0e-6 + 14 * (1 << 20) / 8 / 141e9, rel=0.02)


def test_cli_nccl_and_runtimes(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["simulate", "-c", "allreduce", "-t", "dgx-h100:1", "-s", "8", "--json", "--bound", "no"]
    assert cli_main([*base, "-a", "nccl"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["nccl"]["algorithm"] == "ring" and out["nccl"]["protocol"] == "LL"
    assert out["time_s"] == pytest.approx(15.0e-6, rel=1e-3)
    assert cli_main([*base, "-a", "ring", "--protocol", "LL128"]) == 0
    assert json.loads(capsys.readouterr().out)["time_s"] == pytest.approx(40.6e-6, rel=1e-3)
    assert cli_main([*base, "-a", "ring", "--runtime", "plain"]) == 0
    assert json.loads(capsys.readouterr().out)["time_s"] == pytest.approx(56.0e-6, rel=1e-3)
    # collsched runtime: an 8-byte message goes with LL (NCCL point-to-point up to 16 KiB), no base latency
    assert cli_main([*base, "-a", "ring", "--runtime", "collsched"]) == 0
    assert json.loads(capsys.readouterr().out)["time_s"] == pytest.approx(14 * 0.6e-6, rel=1e-3)
    assert cli_main(["simulate", "-c", "allreduce", "-a", "nccl", "-t", "ring:8", "-s", "8"]) == 2
    err = capsys.readouterr().err
    assert "GPU preset" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert cli_main([*base, "-a", "nccl", "--param", "algo=bogus"]) == 2
    assert "algo='bogus'" in capsys.readouterr().out  # --json: the error as JSON


def test_hierarchical_groups_by_node(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["simulate", "-c", "allreduce", "-a", "hierarchical", "-t", "dgx-h100:2", "-s", "8", "--json",
            "--bound", "no", "--runtime", "plain"]
    assert cli_main(base) == 0
    default = json.loads(capsys.readouterr().out)["time_s"]
    # group = 8: 2(8-1) NVLink steps (3.4 us) and 2(2-1) network steps (14 us), plus 8.4 us launch, by hand
    assert default == pytest.approx(8.4e-6 + 14 * 3.4e-6 + 2 * 14e-6, rel=0.01)


def _table(name: str) -> Table:
    return load_table(PUBLISHED / name)


def test_published_single_node_tables() -> None:
    # H200 16 GiB ring figures (stas00/ml-engineering): all-reduce, all-gather, reduce-scatter within 5%
    for name in ("h200_1x8_allreduce_ring_16G_mlengineering.tsv", "h200_1x8_allgather_16G_mlengineering.tsv",
                 "h200_1x8_reducescatter_16G_mlengineering.tsv"):
        s = score(_table(name))
        assert all(abs(r["error"]) < 0.05 for r in s.rows), (name, s.rows)
    # DGX H100 1x8 (dgxc-benchmarking): outside NVLS sizes, median within 15%
    s = score(_table("h100_1x8_allreduce_dgxc.tsv"))
    assert s.stats()["median"] < 0.15


def test_validate_predictions_under_a_runtime() -> None:
    # collsched validate --runtime: the same hand figures as simulate (LL ring 15.0 us; collsched's LL
    # point-to-point without NCCL's base latency 14 x 0.6 us; plain Simple links without launch 14 x 3.4 us)
    from sim.machine.model import Machine
    from sim.machine.predict import predict

    m = Machine(from_spec("dgx-h100:1"))
    assert predict(m, "allreduce", "ring", 8, 8, runtime="nccl") == pytest.approx(15.0e-6, rel=1e-3)
    assert predict(m, "allreduce", "ring", 8, 8, runtime="collsched") == pytest.approx(14 * 0.6e-6, rel=1e-3)
    assert predict(m, "allreduce", "ring", 8, 8) == pytest.approx(14 * 3.4e-6, rel=1e-3)
    with pytest.raises(ValueError, match="runtime"):
        predict(m, "allreduce", "ring", 8, 8, runtime="mpi")


def test_two_node_rail_matched_ring_reaches_every_nic(capsys: pytest.CaptureFixture[str]) -> None:
    # NCCL_ALGO=Ring on 2 DGX H100 at 8 GiB: every rank's channels add up to NVLink's 18 x 20.6 = 370.8 GB/s
    # and the node's 8 NICs' 8 x 47 = 376 GB/s (the maintainers in nccl-tests #309/#319: up to ~396 GB/s with
    # Ring on 8 x 400G); the busbw lies within 3% of both (one NIC, 47 GB/s, was the old 2-node ring)
    args = ["simulate", "-c", "allreduce", "-a", "nccl", "--param", "algo=ring", "-t", "dgx-h100:2", "-s", "8GiB",
            "--json", "--bound", "no", "--no-progress"]
    assert cli_main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["simulated"]["schedule"] == "nccl_ring"
    assert 0.97 * 370.8 < out["busbw_GBps"] < 1.03 * 376.0


def test_msccl_runtime_takes_the_files_protocol(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    xml = tmp_path / "ring8.xml"
    assert cli_main(["export", "-c", "allreduce", "-a", "ring", "-p", "8", "-o", str(xml), "--proto", "LL"]) == 0
    capsys.readouterr()
    assert cli_main(["simulate", "--file", str(xml), "-t", "dgx-h100:1", "-s", "8", "--runtime", "msccl",
                     "--json", "--bound", "no"]) == 0
    # the file's LL: 6.6 + 14 x 0.6 us (tuning.cc, ring LL)
    assert json.loads(capsys.readouterr().out)["time_s"] == pytest.approx(15.0e-6, rel=1e-3)


def test_sweep_shows_nccl_and_the_ratio_to_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["sweep", "-c", "allreduce", "-t", "dgx-h100:1", "--sizes", "8", "--algorithms", "ring",
                     "--bound", "no", "--no-progress", "--json", "--protocol", "LL"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {r["algorithm"]: r for r in out["results"]}
    assert out["algorithms"] == ["nccl", "ring"] and rows["nccl"]["nccl"] == "ring/LL"
    # both are NCCL's LL ring: 15.0 us (6.6 + 14 x 0.6), so the ring is 1.00x NCCL (NCCL's 8 B run on one
    # channel of 12, launch_shape: its 8 B move at 1/12 of the rate, 0.01% of the time)
    assert rows["nccl"]["time_s"] == pytest.approx(15.0e-6, rel=1e-3)
    assert rows["ring"]["vs_nccl"] == pytest.approx(1.0, rel=1e-3)


LOG = """# nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1    16.50    0.00    0.00      0    16.40    0.00    0.00      0
          16             4     float     sum      -1    12.00    0.00    0.00      0    12.10    0.00    0.00      0
# Avg bus bandwidth    : 0.00
"""


def test_validate_an_nccl_tests_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from runners.commands.cli import main as torch_main

    log = tmp_path / "all_reduce_perf.log"
    log.write_text(LOG)
    assert torch_main(["validate", "--nccl-tests", str(log), "-t", "dgx-h100:1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)["logs"][0]
    # -a nccl at 8 and 16 B on one DGX H100: Ring/LL, 15.0 us (6.6 + 14 x 0.6) by hand, so the errors are
    # 15.0/16.5 - 1 and 15.0/12.0 - 1, the median their mean
    errs = [r["error"] for r in out["rows"]]
    assert errs == pytest.approx([15.0 / 16.5 - 1, 15.0 / 12.0 - 1], rel=1e-3)
    assert out["summary"]["median"] == pytest.approx((1 - 15.0 / 16.5 + 15.0 / 12.0 - 1) / 2, rel=1e-3)
    bad = tmp_path / "bad.log"
    bad.write_text(LOG.replace("16.50", "16.5x"))
    assert torch_main(["validate", "--nccl-tests", str(bad), "-t", "dgx-h100:1"]) == 2
    err = capsys.readouterr().err
    assert "bad.log:6: field time" in err and "Traceback" not in err


def test_the_parsers_runtimes_are_the_models() -> None:
    from sim.cli.runtime import RUNTIMES as PARSER
    from sim.machine.runtime import RUNTIMES

    assert PARSER == RUNTIMES


def test_kinds_outside_the_model_are_refused() -> None:
    with pytest.raises(ValueError, match="not alltoall"):
        choose("alltoall", from_spec("dgx-h100:1"), 1024)


def test_sweep_takes_nccl_by_name_and_simulate_refuses_a_root_out_of_range(
        capsys: pytest.CaptureFixture[str]) -> None:
    # --algorithms nccl alone: NCCL's row only (its pick, by hand: ring/LL up to 1 MiB on one node)
    assert cli_main(["sweep", "-c", "broadcast", "-t", "dgx-h100:1", "--sizes", "1KiB", "--algorithms", "nccl",
                     "--bound", "no", "--no-progress", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["algorithms"] == ["nccl"] and out["results"][0]["nccl"] == "ring/LL"
    # not on a machine without NCCL's model
    assert cli_main(["sweep", "-c", "broadcast", "-t", "ring:8", "--sizes", "1KiB", "--algorithms", "nccl",
                     "--no-progress"]) == 2
    assert "GPU preset" in capsys.readouterr().err
    # a root that is not a rank is named, not lost among the fallbacks
    assert cli_main(["simulate", "-c", "broadcast", "-a", "nccl", "-t", "dgx-h100:1", "-s", "1MiB",
                     "--root", "9"]) == 2
    assert "root 9: not a rank of dgx-h100:1 (0 to 7)" in capsys.readouterr().err
