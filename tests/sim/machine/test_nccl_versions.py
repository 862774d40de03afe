"""NCCL's tuning model by release and architecture: figures worked by hand from each release's
src/graph/tuning.cc (src/tuning/*.cc in 2.31) on the presets' graphs (sim.machine.nccl_tuning.graphs)."""

from __future__ import annotations

import pytest

from algorithms.ir import Kind
from sim.machine.nccl_tuning import choose, graphs, ring_search, tuning
from sim.machine.nccl_versions import DEFAULT_VERSION, KNOWN, parse_version, version
from sim.topology import from_spec
from sim.topology.gpus import AMPERE, BLACKWELL, HOPPER, Architecture, system_of


def _table(spec: str, v: str, kind: str = "allreduce") -> dict[tuple[str, str], tuple[float, float]]:
    t = from_spec(spec)
    s = system_of(t)
    assert s is not None
    return tuning(kind, s, t.ranks // s.gpus_per_node, t.ranks, t, nccl_version=v)


def test_versions_parse_and_refuse() -> None:
    assert parse_version("2.26.2+cuda12.8") == "2.26"
    assert parse_version("NCCL version 2.25.1") == "2.25"
    assert parse_version("22702") == "2.27"  # nccl-tests' nccl-library= field
    assert parse_version("not printed") is None
    # a container tag is not NCCL's version (the GCP A3 Mega table's header: "not printed (image
    # nvcr.io/nvidia/pytorch:24.04-py3 ...)" read as NCCL 24.4, which took the newest model)
    assert parse_version("image nvcr.io/nvidia/pytorch:24.04-py3 with the TCPXO NCCL") is None
    assert parse_version("cuda12.8, NCCL 2.21.5") == "2.21"
    with pytest.raises(ValueError, match=r"MAJOR\.MINOR"):
        version("24.04")
    assert version().name == DEFAULT_VERSION == "2.30" and next(iter(KNOWN)) == "2.31"
    assert set(KNOWN) == {f"2.{m}" for m in range(18, 32)}
    with pytest.raises(ValueError, match=r"2\.18"):
        version("2.17")
    assert version("2.40").name == "2.40"  # newer than modelled: the newest model


@pytest.mark.parametrize(("arch", "channels", "speed"), [
    # NVLink budget per GPU = links x SMxx_NVLINK_BW: the best channels x speed, then ncclTopoDupChannels
    (HOPPER, 12, 30.0),     # 18 x 20.6 = 370.8: 6 x 60 = 360, doubled to 12 x 30
    (AMPERE, 12, 20.0),     # 12 x 20 = 240: 6 x 40 = 240 (done), doubled to 12 x 20
    (BLACKWELL, 16, 45.0),  # 18 x 40.1 = 721.8: 8 x 90 = 720, doubled to 16 x 45
])
def test_ring_search_by_architecture(arch: Architecture, channels: int, speed: float) -> None:
    assert ring_search(arch.nvlink_links * arch.nccl_link_GBps, arch.speeds_intra, arch.compute_capability) == \
        (channels, speed)


def test_one_node_ring_ll_by_release() -> None:
    # Hopper, one node: Simple busBw 12 x 30 = 360 GB/s. Ring LL: 2.20 takes min(llMaxBw 87.7 (Hopper's row was
    # Ampere's until 2.21), 360 / 4) = 87.7; 2.21 on min(141, 360 / 2) = 141; algbw x 8 / 14; latency 6.6 + 14 x 0.6
    lat, bw = _table("dgx-h100:1", "2.20")[("ring", "LL")]
    assert lat == pytest.approx(15.0) and bw == pytest.approx(87.7 * 8 / 14)
    lat, bw = _table("dgx-h100:1", "2.21")[("ring", "LL")]
    assert lat == pytest.approx(15.0) and bw == pytest.approx(141.0 * 8 / 14)
    assert _table("dgx-h100:1", "2.31")[("ring", "Simple")][1] == pytest.approx(360 * 8 / 14)


def test_two_node_latencies_by_release() -> None:
    # dgx-h100:2 (16 ranks, 8 per node). Tree/Simple: 2.22 baseLat 0 and hwLat 28 everywhere: 2 (7 x 28 + 1 x 28)
    # = 448 us; 2.23 on 8.4 + 2 (7 x 4 + 1 x 14) = 92.4 us
    assert _table("dgx-h100:2", "2.22")[("tree", "Simple")][0] == pytest.approx(448.0)
    assert _table("dgx-h100:2", "2.23")[("tree", "Simple")][0] == pytest.approx(92.4)
    # Ring/Simple: 30 steps, the intra ones at max(3.4, 3 x 1.0 us post overhead); 2.22 counts 2 nNodes = 4 network
    # steps: 8.4 + 26 x 3.4 + 4 x 14 = 152.8; 2.23 on 2 (nNodes - 1) = 2: 8.4 + 28 x 3.4 + 2 x 14 = 131.6
    assert _table("dgx-h100:2", "2.22")[("ring", "Simple")][0] == pytest.approx(152.8)
    assert _table("dgx-h100:2", "2.30")[("ring", "Simple")][0] == pytest.approx(131.6)


def test_nvls_by_release() -> None:
    # One DGX H100: 8 NVLS channels at 40 GB/s (9 loads x 40 <= 18 x 20.6), bwInter raised to 60.
    # 2.28 on: 8 x min(40 x 0.85 x 7/8 x 2, 60) = 476 busBw, algbw x 8/14; latency hwLat[NVLINK][NVLS] 25 us
    lat, bw = _table("dgx-h100:1", "2.31")[("nvls", "Simple")]
    assert lat == pytest.approx(25.0) and bw == pytest.approx(476 * 8 / 14)
    # 2.19-2.27: 8 x min(40, 60) x 5/6; 2.19-2.20 hwLat 23 us, 2.18 baseLat 23 us
    lat, bw = _table("dgx-h100:1", "2.27")[("nvls", "Simple")]
    assert lat == pytest.approx(25.0) and bw == pytest.approx(8 * 40 * 5 / 6)
    assert _table("dgx-h100:1", "2.20")[("nvls", "Simple")][0] == pytest.approx(23.0)
    assert _table("dgx-h100:1", "2.18")[("nvls", "Simple")][0] == pytest.approx(23.0)
    # NVLS all-gather from 2.19 on
    assert ("nvls", "Simple") in _table("dgx-h100:1", "2.19", "allgather")
    assert ("nvls", "Simple") not in _table("dgx-h100:1", "2.18", "allgather")
    # Blackwell, 2 nodes: NVLSTree per channel min(80 x 0.74 x 7/8 x 2 = 103.6, 2 x bwInter 48 = 96,
    # perChMaxNVLSTreeBws[Blackwell][N2] 96) = 96, x 8 channels, x 16/30 algbw
    assert _table("dgx-b200:2", "2.31")[("nvls_tree", "Simple")][1] == pytest.approx(8 * 96 * 16 / 30)
    # Ampere has no NVLS at all
    assert not any(a.startswith("nvls") for a, _ in _table("dgx-a100:2", "2.31"))


def test_blackwell_ll128_and_rows_by_release() -> None:
    # LL128 on compute capability 100 from 2.25 (case 100); Blackwell's own rows from 2.25 too
    assert ("ring", "LL128") not in _table("dgx-b200:1", "2.24")
    bw = _table("dgx-b200:1", "2.25")[("ring", "LL128")][1]
    # min(16 x 45 x 0.92, 16 x perChMaxRingLL128Bws[Blackwell] 2 x 36.7), x 8/14
    assert bw == pytest.approx(min(720 * 0.92, 16 * 73.4) * 8 / 14)
    assert _table("dgx-b200:1", "2.31")[("ring", "LL128")][1] == pytest.approx(min(720 * 0.92, 16 * 40.0) * 8 / 14)


def test_pat_by_release() -> None:
    # PAT: one GPU per node only (gb200-nvl72 domains of 1), Simple; busBw x 0.85 in 2.23, x 0.75 from 2.24
    assert ("pat", "Simple") not in _table("gb200-nvl72:4@domain=1", "2.22", "allgather")
    p23 = _table("gb200-nvl72:4@domain=1", "2.23", "allgather")[("pat", "Simple")][1]
    p24 = _table("gb200-nvl72:4@domain=1", "2.24", "allgather")[("pat", "Simple")][1]
    assert p24 / p23 == pytest.approx(0.75 / 0.85)
    assert ("pat", "Simple") not in _table("dgx-h100:2", "2.31", "allgather")  # 8 GPUs per node


def test_the_choice_follows_the_release() -> None:
    t = from_spec("dgx-h100:2")
    # 2 nodes at 64 MiB: NVLSTree in 2.26 (nccl-tests #309, NCCL 2.26.2: "NVLSTree multi-node")
    assert choose(Kind.ALLREDUCE, t, 64 << 20, nccl_version="2.26").algorithm == "nvls_tree"
    # 1 MiB: 2.26's NVLSTree (latency 25 + 2 x 14 us, 8 x 40 x 5/6 GB/s) beats the tree's LL128; 2.28 raised its
    # network step to 20.9 us and priced it by nvlsEfficiency, and the tree's LL128 wins
    assert choose(Kind.ALLREDUCE, t, 1 << 20, nccl_version="2.26").algorithm == "nvls_tree"
    c = choose(Kind.ALLREDUCE, t, 1 << 20, nccl_version="2.28")
    assert (c.algorithm, c.protocol) == ("tree", "LL128")
    assert choose(Kind.ALLREDUCE, t, 8, nccl_version="2.31").version == "2.31"


def test_fabric_latency_enters_the_network_steps() -> None:
    # EFA: the plugin's 20 us on every network step (twice for Simple) and 3 us post overhead (x3 for Simple)
    t = from_spec("dgx-a100:2@fabric=efa,nics=4")
    g = graphs(system_of(t), 2, t)  # type: ignore[arg-type]
    assert (g.latency_inter, g.net_overhead, g.channels) == (20.0, 3.0, 4)
    lat = _table("dgx-a100:2@fabric=efa,nics=4", "2.31")[("ring", "Simple")][0]
    assert lat == pytest.approx(8.4 + 28 * max(3.4, 9.0) + 2 * (14.0 + 40.0))
