"""MSCCL++ plans simulated as their executor runs them: with the plan's own protocol, and on a GPU preset with
more ranks than the plan has, no placement file needed (the plan's ranks take the preset's first ones).

References: the runtime line ``collsched simulate`` prints (the protocol it priced the run with), and the LL
protocol's data fraction (sim.engine.protocols) against the same plan priced as Simple.
"""

from __future__ import annotations

import pytest

from algorithms.formats.mscclpp import read_plan
from sim.cli import main
from sim.machine.runtime import simulate_under
from sim.topology import from_spec
from sim.topology.placement import place
from tests.algorithms.formats.mscclpp_corpus import CORPUS, PLANS, load

READABLE = [n for n in PLANS if n != "unit_switch_reduce_test.json"]


@pytest.mark.parametrize("name", READABLE)
def test_every_readable_plan_of_the_corpus_simulates_with_its_protocol(name: str) -> None:
    got = read_plan(load(name))
    assert got.schedule is not None
    s = got.schedule
    whole = from_spec("dgx-h100:1")  # NVSwitch with NVLink SHARP: the switch channels' glres and gstore run there
    topo = place(whole, tuple(range(s.ranks)), partial=True) if s.ranks < whole.ranks else whole
    result, model = simulate_under("msccl", s, topo, 1 << 20, msccl_proto=got.protocol)
    assert model is not None and model.protocol == got.protocol
    assert result.time > 0 or s.num_transfers == 0


def test_an_ll_plan_is_priced_as_ll() -> None:
    s = read_plan(load("allreduce_pkt_4gpu.json")).schedule
    assert s is not None
    topo = from_spec("full:4")
    ll, _ = simulate_under("msccl", s, topo, 64 << 20, msccl_proto="LL")
    simple, _ = simulate_under("msccl", s, topo, 64 << 20, msccl_proto="Simple")
    assert ll.time > 1.5 * simple.time  # half of every LL line is flags: large messages take about twice as long


@pytest.mark.parametrize(("name", "protocol"), [("allreduce_pkt_4gpu.json", "LL"), ("allgather_2gpu.json", "Simple"),
                                                ("mn_allgather_2x2.json", "Simple")])
def test_simulate_runs_a_plan_of_fewer_ranks_on_a_preset_without_a_placement_file(
        name: str, protocol: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", "--file", str(CORPUS / name), "-t", "dgx-h100:1", "--size", "1MiB", "--no-progress"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert f"runtime    msccl: protocol {protocol}" in out.out
    assert "postcondition OK" in out.out
