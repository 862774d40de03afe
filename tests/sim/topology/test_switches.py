"""sim.topology.switches: capabilities, the dgx-h100 figures from NCCL, +sharp, and ops resolved or refused."""

from __future__ import annotations

import pytest

from algorithms import Collective, Kind, ScheduleBuilder
from algorithms.ir import SwitchOp
from sim.topology import TopologyError, dgx_h100, from_spec, single_switch
from sim.topology.switches import (
    DGX_NVSWITCH,
    IB_SHARP,
    SwitchCaps,
    capabilities,
    check_schedule,
    mark_switches,
    reducing_switches,
    resolve,
)


def test_dgx_nvswitch_figures_are_nccls() -> None:
    # search.cc: 8 NVLS channels of 40 GB/s load each GPU port 9 times; tuning.cc: nvlsEfficiency 0.85,
    # hwLat[NVLINK][NVLS] = 25 us for the ld_reduce + st pair.
    assert DGX_NVSWITCH.bandwidth == pytest.approx(9 * 40e9 * 0.85) == pytest.approx(306e9)
    assert DGX_NVSWITCH.latency == pytest.approx(12.5e-6)
    assert DGX_NVSWITCH.reduce and DGX_NVSWITCH.multicast
    # NCCL's own NVLS busbw prediction on 8 GPUs from the same figures, 8 x 40 x 0.85 x 7/8 x 2 = 476 GB/s, is what
    # the port rate gives for traffic of (p + 1)/p of the message each way: 2(p - 1)/(p + 1) x 306 GB/s.
    assert 2 * 7 / 9 * DGX_NVSWITCH.bandwidth == pytest.approx(8 * 40e9 * 0.85 * 7 / 8 * 2)


def test_dgx_marks_every_nvswitch_and_sharp_marks_the_network() -> None:
    t = dgx_h100(2)
    assert reducing_switches(t) == ["node0", "node1"] and capabilities(t, "net") is None
    s = from_spec("dgx-h100:2+sharp")
    assert s.name == "dgx-h100:2+sharp" and capabilities(s, "net") == IB_SHARP
    assert s.links == t.links
    with pytest.raises(TopologyError, match=r"'ring:4\+sharp': \+sharp needs network switches"):
        from_spec("ring:4+sharp")


def _op(switch: str, op: str = "reduce", ranks: tuple[int, ...] = (0, 1)) -> SwitchOp:
    src = tuple((r, "input", 0) for r in ranks)
    return SwitchOp(op, switch, src[:1] if op == "multicast" else src, src, 1, 0)


def test_domains_resolve_to_the_switch_linked_to_every_rank() -> None:
    t = from_spec("dgx-h100:2+sharp")
    assert resolve(t, _op("nvls", ranks=(8, 9)))[0] == "node1"
    assert resolve(t, _op("sharp", ranks=(0, 8)))[0] == "net"
    assert resolve(t, _op("any", "multicast", ranks=(3, 12)))[0] == "net"
    assert resolve(t, _op("node0", ranks=(0, 7)))[0] == "node0"


@pytest.mark.parametrize(("switch", "ranks", "message"), [
    ("nvls", (0, 8), r"step 0 switch op \(reduce@nvls .*\): no switch of topology dgx-h100:2 in domain 'nvls' "
                     r"can reduce and is linked to all of ranks 0..8"),
    ("net", (0, 8), r"step 0 switch op \(reduce@net .*\): switch net of topology dgx-h100:2 cannot reduce"),
    ("node0", (0, 8), r"rank 8 has no link to and from switch node0"),
    ("spine", (0, 1), r"topology dgx-h100:2 has no switch 'spine'"),
])
def test_a_switch_asked_for_what_it_cannot_do_is_refused_naming_op_and_switch(
        switch: str, ranks: tuple[int, ...], message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        resolve(dgx_h100(2), _op(switch, ranks=ranks))


def test_a_multicast_only_switch_refuses_reductions() -> None:
    caps = SwitchCaps(reduce=False, multicast=True, bandwidth=1e9, latency=0.0)
    t = mark_switches(single_switch(3), caps, ["switch"])
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, 3, 1), "x")
    with b.step():
        b.multicast("switch", 0, [1, 2], 0)
    assert check_schedule(b.build(), t) == [("switch", caps)]
    with b.step():
        b.switch_reduce("any", [0, 1, 2], [0, 1, 2], 0)
    with pytest.raises(TopologyError, match=r"step 1 switch op \(reduce@any .*\): no switch .* can reduce"):
        check_schedule(b.build(), t)
    with pytest.raises(TopologyError, match="no switch named 'core'"):
        mark_switches(single_switch(3), caps, ["core"])
    with pytest.raises(TopologyError, match="switch bandwidth must be a positive number"):
        SwitchCaps(reduce=True, multicast=True, bandwidth=0.0, latency=0.0)


@pytest.mark.parametrize("suffix", [".json", ".graphml"])
def test_capabilities_survive_topology_files(tmp_path: object, suffix: str) -> None:
    from pathlib import Path

    from sim.topology import load, save

    t = from_spec("dgx-h100:2+sharp")
    path = Path(str(tmp_path)) / f"t{suffix}"
    save(t, path)
    back = load(path)
    assert [capabilities(back, n) for n in ("node0", "node1", "net")] == [DGX_NVSWITCH, DGX_NVSWITCH, IB_SHARP]


def test_bad_capabilities_in_a_file_are_named() -> None:
    import json

    from sim.topology import dumps, loads

    doc = json.loads(dumps(dgx_h100(1)))
    doc["switch_caps"]["node0"]["bandwidth"] = "fast"
    with pytest.raises(TopologyError, match=r"topology.switch_caps.node0.bandwidth: wrong type str"):
        loads(json.dumps(doc))
    doc["switch_caps"] = {"spine": doc["switch_caps"]["node0"]}
    with pytest.raises(TopologyError, match=r"topology.switch_caps: 'spine' is not a listed switch"):
        loads(json.dumps(doc))


def test_placement_keeps_what_switches_compute() -> None:
    from sim.topology.placement import place

    t = place(from_spec("dgx-h100:2+sharp"), [8, 9, 0, 1], partial=True)
    assert [capabilities(t, n) for n in ("node0", "node1", "net")] == [DGX_NVSWITCH, DGX_NVSWITCH, IB_SHARP]
    assert resolve(t, _op("nvls", ranks=(0, 1)))[0] == "node1"
