"""GPU presets by architecture, NVLink domains of any size and NIC fabrics (sim.topology.gpus, fabrics)."""

from __future__ import annotations

import pytest

from sim.topology import TopologyError, from_spec
from sim.topology.files import from_dict, to_dict
from sim.topology.gpus import AMPERE, BLACKWELL, HOPPER, fabric_of, node_size, system_of
from sim.topology.switches import capabilities


def test_architectures_from_their_datasheets() -> None:
    # NVLink 3: 12 x 25 GB/s; NVLink 4: 18 x 25; NVLink 5: 18 x 50 GB/s per direction
    assert (AMPERE.nvlink_GBps, HOPPER.nvlink_GBps, BLACKWELL.nvlink_GBps) == (300.0, 450.0, 900.0)
    assert (AMPERE.nvls, HOPPER.nvls, BLACKWELL.nvls) == (False, True, True)
    assert (AMPERE.compute_capability, HOPPER.compute_capability, BLACKWELL.compute_capability) == (80, 90, 100)


@pytest.mark.parametrize(("spec", "port_GBps"), [
    ("dgx-h100:1", 9 * 40 * 0.85),      # 8 NVLS channels + the head: 9 loads of 40 GB/s, nvlsEfficiency 0.85
    ("dgx-b200:1", 9 * 80 * 0.74),      # 9 x 80 <= 18 x 40.1; nvlsEfficiency 0.74
    ("gb200-nvl72:1", 33 * 20 * 0.74),  # 72 GPUs: 32 channels (NCCL_MAX_NVLS_ARITY), 33 loads of 20 <= 721.8
    ("gb200-nvl72:1@domain=8", 9 * 80 * 0.74),
])
def test_nvswitches_reduce_at_ncclss_nvls_rate(spec: str, port_GBps: float) -> None:
    caps = capabilities(from_spec(spec), "node0")
    assert caps is not None and caps.reduce and caps.multicast
    assert caps.bandwidth == pytest.approx(port_GBps * 1e9)


def test_ampere_does_not_reduce_in_the_switch() -> None:
    assert capabilities(from_spec("dgx-a100:1"), "node0") is None


def test_nvlink_domains_of_any_size() -> None:
    for gpus in (8, 32, 72):
        t = from_spec(f"gb200-nvl72:3@domain={gpus}")
        assert t.ranks == 3 * gpus and node_size(t) == gpus
        assert t.route(0, gpus) == (0, "rail0", gpus)  # domains joined by NICs on rails
        assert t.route(0, gpus - 1) == (0, "node0", gpus - 1)  # one NVLink domain
    with pytest.raises(TopologyError, match="domain"):
        from_spec("gb200-nvl72:1@domain=73")
    with pytest.raises(TopologyError, match="domain"):
        from_spec("dgx-h100:1@domain=16")


def test_fabric_options() -> None:
    t = from_spec("dgx-a100:2@fabric=efa,nics=4")
    f = fabric_of(t)
    assert f is not None and (f.name, f.nics_per_node, f.nic_Gbps, f.latency_us, f.overhead_us) == \
        ("efa", 4, 100.0, 20.0, 3.0)
    # 4 NICs of 100 Gb/s at 0.94 for 8 rails: half a NIC each
    assert t.bandwidth(0, "rail0") == pytest.approx(12.5e9 * 0.94 * 4 / 8)
    t = from_spec("dgx-h100:2@fabric=tcpxo,nic=200Gb/s,latency=5us")
    f = fabric_of(t)
    assert f is not None and (f.nic_Gbps, f.latency_us) == (200.0, 5.0)
    assert t.bandwidth(0, "rail0") == pytest.approx(25e9 * 0.94)
    with pytest.raises(TopologyError, match="fabric="):
        from_spec("dgx-h100:2@fabric=myrinet")
    with pytest.raises(TopologyError, match="KEY=VALUE"):
        from_spec("dgx-h100:2@speed=1")
    with pytest.raises(TopologyError, match="nic="):
        from_spec("dgx-h100:2@nic=fast")


def test_a_machine_file_keeps_the_fabric_the_domain_and_the_switches() -> None:
    t = from_spec("gb200-nvl72:2@domain=8,fabric=roce,latency=2us")
    back = from_dict(to_dict(t))
    assert node_size(back) == 8 and fabric_of(back) == fabric_of(t)
    s = system_of(back)
    assert s is not None and s.gpus_per_node == 8 and s.fabric.latency_us == 2.0
    assert capabilities(back, "node1") == capabilities(t, "node1")
