"""NCCL's protocols: every constant against NCCL's source, and the simulated 8-GPU NVLink ring against
tuning.cc's formulas computed by hand (15.0 us LL, 40.6 us LL128, 56.0 us Simple)."""

from __future__ import annotations

import pytest

from algorithms import registry
from sim.engine import protocols as P
from sim.engine.reference import simulate
from sim.topology import from_spec


def test_constants_are_tuning_cc() -> None:
    # src/graph/tuning.cc, baseLatencies {LL, LL128, Simple}: Tree {6.8, 14.0, 8.4}, Ring {6.6, 14.0, 8.4}
    assert [P.BASE_LATENCY_US["tree"][p] for p in P.PROTOCOLS] == [6.8, 14.0, 8.4]
    assert [P.BASE_LATENCY_US["ring"][p] for p in P.PROTOCOLS] == [6.6, 14.0, 8.4]
    assert P.BASE_LATENCY_US["pat"]["Simple"] == 8.0
    # hwLatencies: NVLINK Tree {0.6, 1.25, 4.0}, Ring {0.6, 1.9, 3.4}; NET Tree {5.0, 8.5, 14}, Ring {2.7, 4.0, 14.0}
    assert [P.HW_LATENCY_US["nvlink"]["ring"][p] for p in P.PROTOCOLS] == [0.6, 1.9, 3.4]
    assert [P.HW_LATENCY_US["nvlink"]["tree"][p] for p in P.PROTOCOLS] == [0.6, 1.25, 4.0]
    assert [P.HW_LATENCY_US["net"]["ring"][p] for p in P.PROTOCOLS] == [2.7, 4.0, 14.0]
    assert [P.HW_LATENCY_US["net"]["tree"][p] for p in P.PROTOCOLS] == [5.0, 8.5, 14.0]
    assert P.HW_LATENCY_US["nvlink"]["nvls"]["Simple"] == 25.0 and P.HW_LATENCY_US["net"]["nvls_tree"]["Simple"] == 20.9
    # device.h: LL lines are 4 data bytes + 4 flag bytes; LL128 lines 128 bytes of which 8 are the flag
    assert P.LL_DATA_FRACTION == 0.5 and P.LL128_DATA_FRACTION == pytest.approx(0.9375)
    assert P.P2P_LL_THRESHOLD == 16384  # enqueue.cc, NCCL_P2P_LL_THRESHOLD


@pytest.mark.parametrize(("proto", "expected_us"), [("LL", 6.6 + 14 * 0.6), ("LL128", 14.0 + 14 * 1.9),
                                                    ("Simple", 8.4 + 14 * 3.4)])
def test_eight_gpu_nvlink_ring_allreduce_latency(proto: str, expected_us: float) -> None:
    # tuning.cc: baseLat + 2(p-1) steps x hwLat[NVLINK][RING]; 15.0, 40.6, 56.0 us written out by hand.
    assert round(expected_us, 1) == {"LL": 15.0, "LL128": 40.6, "Simple": 56.0}[proto]
    topo = from_spec("dgx-h100:1")
    model = P.ProtocolModel.nccl(proto, "ring")
    r = simulate(registry.build("allreduce", "ring", 8), P.apply(topo, model), 8, launch=model.launch)
    assert r.ok and r.time == pytest.approx(expected_us * 1e-6, rel=1e-3)


def test_bandwidth_factor_and_media() -> None:
    topo = from_spec("dgx-h100:2")
    model = P.ProtocolModel.nccl("LL", "ring", nodes=2, nvlink_factor=0.5, net_factor=0.25)
    t = P.apply(topo, model)
    assert t.bandwidth(0, "node0") == pytest.approx(topo.bandwidth(0, "node0") * 0.5)
    assert t.bandwidth(0, "rail0") == pytest.approx(topo.bandwidth(0, "rail0") * 0.25)
    # an inter-node ring's intra-node step costs at least the proxy's 1 us post overhead (tuning.cc)
    assert t.latency(0, "node0") == pytest.approx(0.5e-6) and t.latency(0, "rail0") == pytest.approx(1.35e-6)
    # the cluster builder's links have no medium attribute: node switches are NVLink, the rest network
    assert P.medium(0, "node3", {}) == "nvlink" and P.medium(0, "net", {}) == "net"
    with pytest.raises(ValueError, match="protocol"):
        P.parse_protocol("LL64")
