"""Switch ops on both engines: closed forms by hand on a star, the links each leg crosses, max-min sharing
with transfers, traces, and NVLS on one DGX H100 against NVIDIA's published all-reduce figure."""

from __future__ import annotations

from pathlib import Path

import pytest

from algorithms import Collective, Kind, ScheduleBuilder, registry
from sim.engine.reference import simulate
from sim.engine.trace import chrome_trace
from sim.machine import model as machine
from sim.topology import TopologyError, from_spec, ring, single_switch
from sim.topology.switches import SwitchCaps, mark_switches

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
B, LAT, L = 1e9, 1e-6, 2e-6
N = 1e6
RUNS = [(mode, engine) for mode in ("lockstep", "dataflow") for engine in ("fast", "simpy")]


def _star(rate: float) -> object:
    caps = SwitchCaps(reduce=True, multicast=True, bandwidth=rate, latency=L)
    return mark_switches(single_switch(4, bandwidth=B, latency=LAT), caps, ["switch"])


@pytest.mark.parametrize(("mode", "engine"), RUNS)
def test_a_multicast_takes_its_links_once_and_the_switch_latency(mode: str, engine: str) -> None:
    b = ScheduleBuilder(Collective(Kind.BROADCAST, 4, 1, root=0), "mc")
    with b.step():
        b.multicast("switch", 0, [1, 2, 3], 0)
    r = simulate(b.build(), _star(1e12), N, mode=mode, engine=engine)
    # Up: N over 0's link (one hop of latency); down, cut-through: the switch's latency, the slowest way in
    # (one hop), then each target's link (one hop).
    assert r.ok and r.time == pytest.approx(N / B + L + 2 * LAT, rel=1e-8)
    assert r.link_busy[(0, "switch")] == pytest.approx(N / B, rel=1e-8)
    assert (1, "switch") not in r.link_busy
    for d in (1, 2, 3):
        assert r.link_busy[("switch", d)] == pytest.approx(N / B, rel=1e-8)


@pytest.mark.parametrize(("mode", "engine"), RUNS)
def test_a_reduction_is_held_to_the_switch_rate(mode: str, engine: str) -> None:
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, 4, 1), "sharp")
    with b.step():
        b.switch_reduce("switch", [0, 1, 2, 3], [0, 1, 2, 3], 0)
    r = simulate(b.build(), _star(1e8), N, mode=mode, engine=engine)
    # 4 ports x 1e8 B/s of intake shared by the 4 contributions: 1e8 each, below the links' 1e9.
    assert r.ok and r.time == pytest.approx(N / 1e8 + L + 2 * LAT, rel=1e-8)
    for x in range(4):  # each contribution up once, the result down once
        assert r.link_busy[(x, "switch")] == pytest.approx(N / 1e8, rel=1e-8)
        assert r.link_busy[("switch", x)] == pytest.approx(N / 1e8, rel=1e-8)
    assert r.switch_spans[0][1] == pytest.approx(r.time)


@pytest.mark.parametrize(("mode", "engine"), RUNS)
def test_legs_share_links_max_min_fairly_with_transfers(mode: str, engine: str) -> None:
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, 4, 2), "mixed")
    with b.step():
        b.copy(0, 1, 1)
        b.multicast("switch", 0, [2, 3], 0)
    r = simulate(b.build(), _star(1e12), N, mode=mode, engine=engine)
    # Chunks of N/2. 0's link carries the transfer and the up leg at B/2 each, so each takes (N/2)/(B/2) = N/B
    # (alone, N/(2B)), plus the transfer's two hops; the multicast ends earlier (its down legs share nothing).
    assert r.time == pytest.approx(N / B + 2 * LAT, rel=1e-8)
    assert r.end[0] == pytest.approx(N / B + 2 * LAT, rel=1e-8)
    assert r.switch_spans[0][1] == pytest.approx(N / B + LAT, rel=1e-8)


def test_engines_agree_on_the_library_and_traces_show_the_ops() -> None:
    t = from_spec("dgx-h100:2+sharp")
    for name, params in (("nvls_tree", {"chunks": 2}), ("sharp", {})):
        s = registry.build("allreduce", name, 16, **params)
        a = simulate(s, t, 2**24, engine="fast")
        z = simulate(s, t, 2**24, engine="simpy")
        assert a.ok and z.ok and a.time == pytest.approx(z.time, rel=1e-8), name
    events = [e for e in chrome_trace(a)["traceEvents"] if e.get("pid") == 2 and e["ph"] == "X"]
    assert len(events) == len(s.switch_ops)
    assert {e["name"] for e in events} == {"reduce @nvls", "reduce @sharp", "multicast @nvls"}


def test_a_switch_that_cannot_is_refused() -> None:
    s = registry.build("allreduce", "nvls", 4, chunks=1)
    with pytest.raises(TopologyError, match=r"no switch of topology ring:4 in domain 'nvls' can reduce"):
        simulate(s, ring(4), N)


def test_nvls_on_one_dgx_h100_is_within_5_percent_of_nvidias_480_gbps() -> None:
    table = ROOT / "tests" / "data" / "published" / "h100_1x8_allreduce_dgxc.tsv"
    rows = {int(x[0]): float(x[3]) for x in (line.split("\t") for line in table.read_text().splitlines())
            if x[0].isdigit()}
    measured = rows[8 * 2**30]
    assert measured == pytest.approx(480.16)
    s = registry.build("allreduce", "nvls", 8)
    r = simulate(s, from_spec("dgx-h100:1"), 8 * 2**30, machine.engine_for("dgx-h100:1"))
    assert r.ok and abs(r.busbw / 1e9 / measured - 1) < 0.05, r.busbw


def test_nvls_tree_in_lockstep_on_two_dgx_h100s_is_within_5_percent_of_the_measured_default() -> None:
    table = ROOT / "tests" / "data" / "published" / "h100_2x8_allreduce_nccltests309_default.tsv"
    rows = {int(x[0]): float(x[3]) for x in (line.split("\t") for line in table.read_text().splitlines())
            if x[0].isdigit()}
    s = registry.build("allreduce", "nvls_tree", 16)
    r = simulate(s, from_spec("dgx-h100:2"), 8 * 2**30, machine.engine_for("dgx-h100:2"), mode="lockstep")
    assert r.ok and abs(r.busbw / 1e9 / rows[8 * 2**30] - 1) < 0.05, r.busbw
