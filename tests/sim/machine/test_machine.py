"""Machine models (sim.machine.model): files, the host topology, the engine's launch term, and the GPU presets
against NVIDIA's published figures. References are hand-worked closed forms and the published numbers."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest

from algorithms import registry
from sim.cli import main as cli_main
from sim.engine.reference import SimulationError, simulate
from sim.machine import model as M
from sim.topology import TopologyError, dgx_h100, load, ring

KIB, GIB = 1024, 1 << 30


# -- the engine's launch term -------------------------------------------------------------------------------


def test_launch_adds_once_per_collective_to_the_closed_form() -> None:
    p, n, bw, lat = 4, 1 << 20, 10e9, 2e-6
    s = registry.build("allreduce", "ring", p)
    ring_time = 2 * (p - 1) * (lat + n / p / bw)  # contention-free ring on a ring: 2(p-1)(α + n/(pB))
    for launch in (0.0, 5e-6, 1e-3):
        r = simulate(s, ring(p, bandwidth=bw, latency=lat), n, launch=launch)
        assert r.ok and r.time == pytest.approx(ring_time + launch, rel=1e-12)
        assert r.start.min() == pytest.approx(launch)
    with pytest.raises(SimulationError, match="launch"):
        simulate(s, ring(p), n, launch=-1.0)


# -- the host topology -----------------------------------------------------------------------------------------


def test_host_one_message_and_the_host_cap() -> None:
    bw, lat, cap, n = 2e9, 30e-6, 3e9, 4 << 20
    one = registry.build("broadcast", "binomial", 2)  # a single transfer 0 -> 1 of the whole buffer
    r = simulate(one, M.host(2, bandwidth=bw, latency=lat, host_bandwidth=cap), n)
    assert r.time == pytest.approx(lat + n / bw)
    # allgather direct on 4 ranks: every rank sends 3 messages of n/4 at once; each rank's link holds 3 flows
    # (bw/3 each) and the host link all 12 (cap/12 each), so every flow runs at min(bw/3, cap/12).
    ag = registry.build("allgather", "direct", 4)
    for c in (cap, None):
        r = simulate(ag, M.host(4, bandwidth=bw, latency=lat, host_bandwidth=c), n)
        rate = min(bw / 3, (c if c is not None else 4 * bw) / 12)
        assert r.time == pytest.approx(lat + n / 4 / rate)
    with pytest.raises(TopologyError):
        M.host(0, bandwidth=bw, latency=lat)


# -- machine files -------------------------------------------------------------------------------------------


def _machine() -> M.Machine:
    topo = M.host(3, bandwidth=1.5e9, latency=40e-6, host_bandwidth=2.5e9, name="test-host")
    return M.Machine(topo, M.EngineParams(overhead=7e-6, reduce_bandwidth=3e9, launch=90e-6),
                     {"source": "hand-written", "fit": {"alpha_s": 4e-5}})


def test_machine_file_round_trip(tmp_path: Path) -> None:
    m = _machine()
    path = tmp_path / "m.json"
    M.save(m, path)
    back = M.load(path)
    assert back.engine == m.engine and back.model == m.model
    assert back.topology.name == "test-host" and back.topology.links == m.topology.links
    assert [back.topology.bandwidth(*lk) for lk in back.topology.links] == \
        [m.topology.bandwidth(*lk) for lk in m.topology.links]
    # Loadable wherever a topology is; the engine keys are then ignored.
    assert load(path).links == m.topology.links
    assert M.engine_for(str(path)) == m.engine
    # A plain topology file is a machine with the default engine.
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({k: v for k, v in M.to_dict(m).items() if k not in ("engine", "model")}))
    assert M.load(plain).engine == M.EngineParams() and M.engine_for(str(plain)) == M.EngineParams()


@pytest.mark.parametrize("engine, field", [({"overhead": -1}, "topology.engine.overhead"),
                                           ({"launch": "1us"}, "topology.engine.launch"),
                                           ({"reduce_bandwidth": 0}, "topology.engine.reduce_bandwidth"),
                                           ({"speed": 1}, "unknown field 'speed'"),
                                           ([], "topology.engine: must be an object")])
def test_bad_engine_keys_name_the_field(tmp_path: Path, engine: object, field: str) -> None:
    doc = M.to_dict(_machine())
    doc["engine"] = engine
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    for loader in (M.load, M.engine_for):  # a plain topology load ignores the engine keys; machines check them
        with pytest.raises(TopologyError, match=field.replace(".", r"\.").replace("(", r"\(")):
            loader(str(path))


def test_simulate_cli_takes_the_machine_files_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = _machine()
    path = tmp_path / "m.json"
    M.save(m, path)
    n = 3 << 20
    # reducescatter direct on the 3-rank host: each rank sends 2 messages of n/3 at once (per-rank link: 2 flows,
    # host link: 6), then reduces 2 incoming n/3 at once on its reducer: overhead + lat + flow + 2(n/3)/γ + launch.
    e = m.engine
    rate = min(1.5e9 / 2, 2.5e9 / 6)
    assert e.reduce_bandwidth is not None
    expected = e.launch + e.overhead + 40e-6 + n / 3 / rate + 2 * (n / 3) / e.reduce_bandwidth
    args = ["simulate", "-c", "reducescatter", "-a", "direct", "-t", str(path), "--size", str(n), "--json"]
    assert cli_main(args) == 0
    assert json.loads(capsys.readouterr().out)["time_s"] == pytest.approx(expected)
    # Flags given on the command line win over the file's figures.
    assert cli_main([*args, "--launch", "0", "--overhead", "0"]) == 0
    assert json.loads(capsys.readouterr().out)["time_s"] == pytest.approx(expected - e.launch - e.overhead)


# -- GPU presets against NVIDIA's published figures (each within 5%) -----------------------------------------


def _dgx_time(kind: str, name: str, nodes: int, size: float) -> float:
    topo = dgx_h100(nodes)
    s = registry.build(kind, name, topo.ranks)
    r = simulate(s, topo, size, M.engine_for(f"dgx-h100:{nodes}"))
    assert r.ok
    return r.time


def test_dgx_h100_ring_allreduce_busbw_is_nccls_365_to_370() -> None:
    # nccl-tests issue 212 / nccl issue 1455: ring all-reduce busbw ~365-370 GB/s on 8 H100s at large sizes.
    t = _dgx_time("allreduce", "ring", 1, 8 * GIB)
    busbw = 8 * GIB / t * 2 * 7 / 8
    assert busbw == pytest.approx(367.5e9, rel=0.05)
    assert 360e9 < busbw < 375e9


def test_dgx_h100_two_nodes_cross_on_same_rail_nics() -> None:
    # Inside a node NVLink (3.4 us a Simple step); between nodes GPU g's own NIC to GPU g's leaf switch and on
    # to GPU g of the next node: NCCL 2.2x's Simple ring step on the network, hwLat[NET][RING][SIMPLE] = 14 us.
    topo = dgx_h100(2)
    assert topo.route(0, 1) == (0, "node0", 1) and topo.route(7, 15) == (7, "rail7", 15)

    def latency(a: int, b: int) -> float:
        path = topo.route(a, b)
        return sum(topo.graph.edges[u, v]["latency"] for u, v in itertools.pairwise(path))

    assert latency(0, 1) == pytest.approx(3.4e-6) and latency(7, 15) == pytest.approx(14e-6)
    # nccl-tests issue 290: "46-48GB/s per NIC" is one NIC's rate, 0.94 x 50 GB/s.
    assert topo.bandwidth(7, "rail7") == pytest.approx(47e9)


def test_dgx_h100_small_message_is_nccls_ring_simple_latency() -> None:
    # NCCL tuning.cc: ring Simple = baseLat 8.4 us + 3.4 us per NVLink step; 2(p-1) = 14 steps on 8 GPUs.
    t = _dgx_time("allreduce", "ring", 1, 1 * KIB)
    assert t == pytest.approx(8.4e-6 + 14 * 3.4e-6, rel=0.05)


def test_dgx_h100_figures_through_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["simulate", "-c", "allreduce", "-a", "ring", "--topology", "dgx-h100:1", "--json", "--runtime", "plain"]
    assert cli_main([*base, "--size", "8GiB"]) == 0
    assert json.loads(capsys.readouterr().out)["busbw_GBps"] == pytest.approx(367.5, rel=0.05)
    assert cli_main([*base, "--size", "1KiB"]) == 0
    assert json.loads(capsys.readouterr().out)["time_s"] == pytest.approx(56e-6, rel=0.05)


# -- the engine's per-message processor cost ---------------------------------------------------------------


def test_message_cpu_serialises_each_ranks_messages() -> None:
    p, c, n = 4, 7e-6, 1 << 20
    # direct allgather on a network too fast to matter: every rank posts its p-1 sends (c each, one at a
    # time), then takes its p-1 receives one at a time: 2(p-1)c.
    fast = registry.build("allgather", "direct", p)
    r = simulate(fast, ring(p, bandwidth=1e30, latency=0.0), n, message_cpu=c)
    assert r.ok and r.time == pytest.approx(2 * (p - 1) * c, rel=1e-9)
    # ring allgather on a ring: each step sends once and receives once, after the previous step's receive:
    # (p-1)(2c + α + (n/p)/B).
    bw, lat = 1e9, 3e-6
    r = simulate(registry.build("allgather", "ring", p), ring(p, bandwidth=bw, latency=lat), n, message_cpu=c)
    assert r.ok and r.time == pytest.approx((p - 1) * (2 * c + lat + n / p / bw), rel=1e-9)
    # zero changes nothing
    assert simulate(fast, ring(p), n, message_cpu=0.0).time == simulate(fast, ring(p), n).time
    with pytest.raises(SimulationError, match="message_cpu"):
        simulate(fast, ring(p), n, message_cpu=math.nan)
