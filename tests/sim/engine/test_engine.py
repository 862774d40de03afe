"""The simulator: closed forms on contention-free networks, fair sharing, faults, symbolic payloads.

Expected times are written out from the α-β model by hand (the reference),
never taken from the engine.
"""

from __future__ import annotations

import math

import networkx as nx
import pytest

from algorithms import registry
from algorithms.builder import ScheduleBuilder
from algorithms.errors import RegistryError
from algorithms.ir import Buf, Collective, Kind, Schedule, Step, Transfer
from sim import topology as T
from sim.engine.closed_form import predict, relative_error
from sim.engine.reference import Faults, SimulationError, busbw_factor, chunk_bytes, simulate
from sim.topology import Topology, TopologyError
from sim.verify.dataflow import dataflow_graph

REL = 1e-9
MODES = ("lockstep", "dataflow")


def close(a: float, b: float) -> bool:
    return relative_error(a, b) <= REL


def log2ceil(p: int) -> int:
    return math.ceil(math.log2(p)) if p > 1 else 0


# -- closed forms on contention-free networks -------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("p", [2, 3, 4, 5, 7, 8, 12, 16, 31, 64])
def test_ring_allreduce_on_a_unidirectional_ring_is_exactly_2_p_minus_1_alpha_plus_n_over_pB(p: int, mode: str) -> None:
    alpha, bw, n = 1.3e-6, 25e9, 3 * 2**20
    topo = T.unidirectional_ring(p, bandwidth=bw, latency=alpha)
    r = simulate(registry.build("allreduce", "ring", p), topo, n, mode=mode)
    assert r.ok
    want = 2 * (p - 1) * (alpha + n / (p * bw))
    assert close(r.time, want), (r.time, want)
    # Every link carries 2(p-1) pieces of n/p bytes and nothing else.
    assert set(r.link_busy) == set(topo.links)
    for busy in r.link_busy.values():
        assert close(busy, 2 * (p - 1) * n / (p * bw))
    # The same number from the registry's closed form.
    assert close(r.time, predict("allreduce", "ring", p, n, alpha=alpha, beta=1 / bw).time)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("p", "chunks"), [(4, 2), (5, 3), (8, 4)])
def test_ring_allreduce_pipelined_chunks_share_each_link(p: int, chunks: int, mode: str) -> None:
    # k chunk-flows of n/(pk) bytes share each link at once: the step still costs α + n/(pB).
    alpha, bw, n = 2e-6, 10e9, 2**22
    topo = T.unidirectional_ring(p, bandwidth=bw, latency=alpha)
    r = simulate(registry.build("allreduce", "ring", p, chunks=chunks), topo, n, mode=mode)
    assert r.ok and close(r.time, 2 * (p - 1) * (alpha + n / (p * bw)))


@pytest.mark.parametrize("p", [2, 3, 6, 9, 16])
def test_ring_allreduce_with_reduction_cost(p: int) -> None:
    alpha, bw, gamma_bw, n = 1e-6, 50e9, 20e9, 2**24
    topo = T.unidirectional_ring(p, bandwidth=bw, latency=alpha)
    r = simulate(registry.build("allreduce", "ring", p), topo, n, reduce_bandwidth=gamma_bw)
    want = 2 * (p - 1) * (alpha + n / (p * bw)) + (p - 1) * (n / p) / gamma_bw
    assert r.ok and close(r.time, want)
    assert close(r.time, predict("allreduce", "ring", p, n, alpha=alpha, beta=1 / bw, gamma=1 / gamma_bw).time)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("k", [1, 2, 3, 7])
def test_reductions_at_one_rank_share_its_reduction_throughput(k: int, mode: str) -> None:
    # k ranks reduce into root 0 at once over separate links (full mesh): the bytes arrive
    # after n/B, then root 0 combines k·n bytes at R bytes/s.
    b = ScheduleBuilder(Collective(Kind.REDUCE, k + 1, 1, 0), "reduce-star")
    with b.step():
        for s in range(1, k + 1):
            b.reduce(s, 0, 0)
    bw, red, n = 10e9, 4e9, 2**20
    r = simulate(b.build(), T.fully_connected(k + 1, bandwidth=bw, latency=0.0), n, mode=mode, reduce_bandwidth=red)
    assert r.ok and close(r.time, n / bw + k * n / red)
    assert r.link_busy == {(s, 0): pytest.approx(n / bw, rel=REL) for s in range(1, k + 1)}


@pytest.mark.parametrize("p", [2, 4, 7, 16])
def test_ring_allreduce_busbw_equals_link_bandwidth_without_latency(p: int) -> None:
    bw = 40e9
    r = simulate(registry.build("allreduce", "ring", p), T.unidirectional_ring(p, bandwidth=bw, latency=0.0), 2**26)
    assert close(r.busbw, bw)
    assert close(r.algbw, bw * p / (2 * (p - 1)))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("p", [2, 3, 5, 8, 13, 16, 33])
def test_ring_allgather_and_reducescatter_on_a_unidirectional_ring(p: int, mode: str) -> None:
    alpha, bw, n = 0.7e-6, 30e9, 2**23
    topo = T.unidirectional_ring(p, bandwidth=bw, latency=alpha)
    for kind in ("allgather", "reducescatter"):
        r = simulate(registry.build(kind, "ring", p), topo, n, mode=mode)
        assert r.ok
        assert close(r.time, (p - 1) * (alpha + n / (p * bw))), kind


@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 8, 9, 16, 17, 33])
def test_binomial_broadcast_on_a_full_mesh_and_on_a_switch(p: int) -> None:
    lat, bw, n = 1.5e-6, 20e9, 2**20
    for root in sorted({0, p // 2, p - 1}):
        schedule = registry.build("broadcast", "binomial", p, root=root)
        # Full mesh: one link per message, α = lat.
        r = simulate(schedule, T.fully_connected(p, bandwidth=bw, latency=lat), n, mode="lockstep")
        assert r.ok and close(r.time, log2ceil(p) * (lat + n / bw))
        # Switch: distinct senders and receivers per round, so no link is shared; α = 2·lat.
        r = simulate(schedule, T.single_switch(p, bandwidth=bw, latency=lat), n, mode="lockstep")
        assert r.ok and close(r.time, log2ceil(p) * (2 * lat + n / bw))
        assert r.busbw == r.algbw  # factor 1


@pytest.mark.parametrize("p", [3, 4, 5, 8, 16])
def test_binomial_broadcast_in_dataflow_overlaps_rounds(p: int) -> None:
    # A rank that has the data sends its later rounds without waiting for the earlier ones'
    # receivers: on a full mesh the root's ⌈log2 p⌉ sends all run at once on separate links.
    lat, bw, n = 1.5e-6, 20e9, 2**20
    r = simulate(registry.build("broadcast", "binomial", p), T.fully_connected(p, bandwidth=bw, latency=lat), n)
    assert r.ok
    # Relative rank v gets the data from v minus its highest bit, so after popcount(v) messages.
    assert close(r.time, max(bin(v).count("1") for v in range(p)) * (lat + n / bw))


@pytest.mark.parametrize("p", [2, 3, 4, 8, 16, 64])
def test_dissemination_barrier_costs_its_rounds(p: int) -> None:
    lat = 3e-6
    r = simulate(registry.build("barrier", "dissemination", p), T.fully_connected(p, latency=lat), 8)
    assert r.ok and close(r.time, log2ceil(p) * (lat + 8 / T.DEFAULT_BANDWIDTH))


def _recursive_doubling() -> str:
    for name in ("recursive_doubling", "recursive-doubling", "recdoubling", "rd"):
        try:
            registry.get("allreduce", name)
            return name
        except RegistryError:
            continue
    pytest.skip("no recursive-doubling all-reduce registered yet (issue 3)")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("p", [2, 4, 8, 16, 32, 64])
def test_recursive_doubling_allreduce_on_a_switch(p: int, mode: str) -> None:
    name = _recursive_doubling()
    lat, bw, gbw, n = 1e-6, 50e9, 100e9, 2**22
    r = simulate(registry.build("allreduce", name, p), T.single_switch(p, bandwidth=bw, latency=lat), n,
                 mode=mode, reduce_bandwidth=gbw)
    # log2 p rounds; each rank exchanges (and reduces) the whole buffer with its partner.
    want = math.log2(p) * (2 * lat + n / bw + n / gbw)
    assert r.ok and close(r.time, want)


# -- fair sharing --------------------------------------------------------------------------------


def _gather_into_root(k: int, counts: list[int] | None = None) -> Schedule:
    """A one-step gather: every rank sends its input to root 0 at once (each transfer one chunk run)."""
    chunks = max(counts) if counts else 1
    b = ScheduleBuilder(Collective(Kind.GATHER, k + 1, chunks, 0), "gather-star")
    with b.step():
        b.copy(0, 0, 0, chunks, dst_buf=Buf.OUTPUT, dst_index=0)
        for s in range(1, k + 1):
            c = counts[s - 1] if counts else 1
            for i in range(0, chunks, c):
                b.copy(s, 0, i, c, dst_buf=Buf.OUTPUT, dst_index=s * chunks + i)
    return b.build()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("k", [1, 2, 3, 5, 8, 16])
def test_k_flows_sharing_one_link_take_k_times_as_long(k: int, mode: str) -> None:
    bw, n = 10e9, 2**20
    one = simulate(_gather_into_root(1), T.single_switch(2, bandwidth=bw, latency=0.0), 2 * n, mode=mode)
    many = simulate(_gather_into_root(k), T.single_switch(k + 1, bandwidth=bw, latency=0.0), (k + 1) * n, mode=mode)
    assert one.ok and many.ok
    assert close(one.time, n / bw)
    assert close(many.time, k * one.time)
    # With latency, the shared link still costs k·b/B and the latency is paid once.
    lat = 1e-6
    r = simulate(_gather_into_root(k), T.single_switch(k + 1, bandwidth=bw, latency=lat), (k + 1) * n, mode=mode)
    assert close(r.time, 2 * lat + k * n / bw)
    assert close(r.link_busy[("switch", 0)], k * n / bw)


def test_shares_change_when_flows_end() -> None:
    # Rank 1 sends 2 chunks as one flow; rank 2 sends 2 chunks as two flows; c bytes per chunk.
    # Three flows share the switch->0 link at B/3: rank 2's finish at 3c/B, then rank 1's last c
    # bytes go at full B: it finishes at 4c/B.
    bw, c = 1e9, 1000.0
    s = _gather_into_root(2, counts=[2, 1])
    r = simulate(s, T.single_switch(3, bandwidth=bw, latency=0.0), 3 * 2 * c)
    assert r.ok
    ends = {(t.src, t.dst_index): r.send_end[i] for i, (_si, _ti, t) in enumerate(s.transfers())}
    assert close(ends[(2, 4)], 3 * c / bw) and close(ends[(2, 5)], 3 * c / bw)
    assert close(ends[(1, 2)], 4 * c / bw)
    assert close(r.time, 4 * c / bw)
    assert close(r.link_busy[("switch", 0)], 4 * c / bw)


def test_a_flow_runs_at_its_bottleneck_link() -> None:
    g = nx.DiGraph()
    g.add_nodes_from(range(2))
    for u, v, bw in [(0, "a", 8.0), ("a", 1, 2.0), (1, "a", 8.0), ("a", 0, 8.0)]:
        g.add_edge(u, v, bandwidth=bw, latency=0.25)
    r = simulate(registry.build("broadcast", "binomial", 2), Topology(g), 10.0)
    assert close(r.time, 0.5 + 10.0 / 2.0)


def _network(links: list[tuple[int | str, int | str, float]], ranks: int) -> Topology:
    g = nx.DiGraph()
    g.add_nodes_from(range(ranks))
    for u, v, bw in links:
        g.add_edge(u, v, bandwidth=bw, latency=0.0)
    return Topology(g)


@pytest.mark.parametrize("engine", ["simpy", "fast"])
@pytest.mark.parametrize("mode", MODES)
def test_a_flow_bottlenecked_elsewhere_leaves_the_rest_of_a_shared_link_to_the_others(mode: str, engine: str) -> None:
    # Rank 0 sends 90 bytes to rank 1 and 90 to rank 2 at once through switch s; the link 0 -> s (10 B/s)
    # carries both, and s -> 2 is 1 B/s. Max-min: the flow to 2 runs at 1 B/s and the flow to 1 gets the rest
    # of 0 -> s, 9 B/s (equal shares would give it 5 and leave 4 idle): it ends at 10 s. The flow to 2 is
    # still held by its 1 B/s link then: it ends at 90 s.
    topo = _network([(0, "s", 10.0), ("s", 1, 10.0), ("s", 2, 1.0), (1, "s", 10.0), (2, "s", 10.0),
                     ("s", 0, 10.0)], 3)
    s = Schedule(Collective(Kind.BROADCAST, 3, 1, 0), "fan-out", (Step((Transfer(0, 1), Transfer(0, 2))),))
    r = simulate(s, topo, 90.0, mode=mode, engine=engine)
    assert r.ok and r.engine == engine
    assert close(r.send_end[0], 10.0) and close(r.send_end[1], 90.0) and close(r.time, 90.0)
    assert close(r.link_busy[(0, "s")], 90.0) and close(r.link_busy[("s", 1)], 10.0)


@pytest.mark.parametrize("engine", ["simpy", "fast"])
@pytest.mark.parametrize("mode", MODES)
def test_parking_lot_with_a_slow_second_link(mode: str, engine: str) -> None:
    # Links 0 -> 1 (3 B/s) and 1 -> 2 (1 B/s); a long flow 0 -> 2 over both and a short flow on each, 5 bytes
    # each. 1 -> 2 saturates first: the long flow and the short 1 -> 2 flow get 1/2 each; the short 0 -> 1
    # flow gets 3 - 1/2 = 5/2 (equal shares: 3/2) and ends at 2 s; the two others at 10 s.
    topo = _network([(0, 1, 3.0), (1, 2, 1.0), (1, 0, 1.0), (2, 1, 1.0)], 3)
    coll = Collective(Kind.ALLGATHER, 3, 1)
    s = Schedule(coll, "parking-lot", (Step((Transfer(0, 2, Buf.INPUT, 0, Buf.OUTPUT, 0),
                                             Transfer(0, 1, Buf.INPUT, 0, Buf.OUTPUT, 0),
                                             Transfer(1, 2, Buf.INPUT, 0, Buf.OUTPUT, 1))),))
    r = simulate(s, topo, 15.0, mode=mode, engine=engine)  # allgather: 15 bytes of output, 5 per chunk
    assert [round(x, 9) for x in r.send_end] == [10.0, 2.0, 10.0]
    assert not r.ok  # half an allgather: only the timing matters here


# -- faults --------------------------------------------------------------------------------------


def _two_paths() -> Topology:
    """Ranks 0 and 1 joined through switch a (fast, 10 B/s, 1 s per hop) and switch b (slow, 2 B/s, 3 s)."""
    g = nx.DiGraph()
    g.add_nodes_from(range(2))
    for sw, bw, lat in [("a", 10.0, 1.0), ("b", 2.0, 3.0)]:
        for r in range(2):
            g.add_edge(r, sw, bandwidth=bw, latency=lat)
            g.add_edge(sw, r, bandwidth=bw, latency=lat)
    return Topology(g, "two-paths")


def test_link_down_reroutes() -> None:
    s = registry.build("broadcast", "binomial", 2)
    assert close(simulate(s, _two_paths(), 20.0).time, 2 * 1.0 + 20.0 / 10.0)
    r = simulate(s, _two_paths(), 20.0, faults=Faults(down=((0, "a"),)))
    assert r.ok and close(r.time, 2 * 3.0 + 20.0 / 2.0)
    assert r.topology.route(0, 1) == (0, "b", 1)


def test_link_down_that_isolates_a_rank_is_a_topology_error() -> None:
    s = registry.build("allreduce", "ring", 4)
    with pytest.raises(TopologyError, match=r"rank \d is unreachable"):
        simulate(s, T.unidirectional_ring(4), 1024.0, faults=Faults(down=((2, 3),)))
    with pytest.raises(TopologyError, match="rank 3 is unreachable"):
        simulate(s, T.single_switch(4), 1024.0, faults=Faults(down=((3, "switch"),)))


def test_degraded_link_slows_the_flows_on_it() -> None:
    s = registry.build("broadcast", "binomial", 2)
    r = simulate(s, _two_paths(), 20.0, faults=Faults(degraded={("a", 1): 0.25}))
    assert close(r.time, 2 * 1.0 + 20.0 / 2.5)


@pytest.mark.parametrize("p", [3, 4, 5, 8])
def test_straggler_delays_every_step_it_takes_part_in(p: int) -> None:
    alpha, bw, n, d = 1e-6, 10e9, 2**20, 5e-6
    topo = T.unidirectional_ring(p, bandwidth=bw, latency=alpha)
    schedule = registry.build("allreduce", "ring", p)
    base = 2 * (p - 1) * (alpha + n / (p * bw))
    # Lockstep: rank 0 sends and receives in every step, so each of the 2(p-1) steps waits d more.
    r = simulate(schedule, topo, n, mode="lockstep", faults=Faults(stragglers={0: d}))
    assert r.ok and close(r.time, base + 2 * (p - 1) * d)
    # Dataflow in send order (the default, one step in flight): every rank's next step waits for its
    # previous message to land, so rank 0's delay reaches every rank at every step, as in lockstep.
    r = simulate(schedule, topo, n, mode="dataflow", faults=Faults(stragglers={0: d}))
    assert r.ok and close(r.time, base + 2 * (p - 1) * d)
    # Dataflow without the queues: piece q walks 2(p-1) ring edges from rank q, independently of the other
    # pieces; only the edges touching rank 0 pay d. The slowest piece decides.
    def touching(q: int) -> int:
        return sum(1 for i in range(2 * (p - 1)) if (q + i) % p == 0 or (q + i + 1) % p == 0)
    r = simulate(schedule, topo, n, mode="dataflow", faults=Faults(stragglers={0: d}), in_flight=0)
    assert r.ok and close(r.time, base + d * max(touching(q) for q in range(p)))


def test_endpoint_overhead_adds_to_each_message() -> None:
    p, alpha, bw, n, o = 6, 1e-6, 10e9, 2**20, 2e-6
    r = simulate(registry.build("allreduce", "ring", p), T.unidirectional_ring(p, bandwidth=bw, latency=alpha), n,
                 overhead=o)
    assert close(r.time, 2 * (p - 1) * (o + alpha + n / (p * bw)))


def test_bad_options() -> None:
    s = registry.build("allreduce", "ring", 4)
    with pytest.raises(SimulationError, match="mode"):
        simulate(s, T.ring(4), 1.0, mode="eager")
    with pytest.raises(SimulationError, match="size"):
        simulate(s, T.ring(4), -1.0)
    with pytest.raises(SimulationError, match="straggler rank 7"):
        simulate(s, T.ring(4), 1.0, faults=Faults(stragglers={7: 1e-6}))
    with pytest.raises(TopologyError, match="has 5 ranks but the schedule needs 4"):
        simulate(s, T.ring(5), 1.0)


# -- payloads: broken schedules are caught ---------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_a_broken_schedule_fails_its_postcondition(mode: str) -> None:
    good = registry.build("allreduce", "ring", 4)
    steps = list(good.steps)
    dropped = Schedule(good.collective, "ring-minus-one", tuple(steps[:-1]))
    r = simulate(dropped, T.ring(4), 1024.0, mode=mode)
    assert not r.ok and any(v.kind == "wrong_slot" for v in r.violations)
    doubled = Schedule(good.collective, "ring-twice", (steps[0], steps[0], *steps[1:]))
    r = simulate(doubled, T.ring(4), 1024.0, mode=mode)
    assert not r.ok and any(v.kind == "double_count" for v in r.violations)


def test_uninitialised_read_is_reported() -> None:
    b = ScheduleBuilder(Collective(Kind.BROADCAST, 3, 1, 0), "bad")
    with b.step():
        b.copy(1, 2, 0)  # rank 1 has nothing yet
    with b.step():
        b.copy(0, 1, 0)
    r = simulate(b.build(), T.ring(3), 10.0)
    assert not r.ok and r.violations[0].kind == "uninitialised_read" and "step 0 transfer 0" in str(r.violations[0])


# -- result values ---------------------------------------------------------------------------------


def test_dataflow_respects_dependencies_and_lockstep_respects_steps() -> None:
    s = registry.build("allreduce", "ring", 5, chunks=2)
    topo = T.cluster(1, 5, nvlink_bandwidth=7e9)  # one switch: flows of a step contend
    flow = simulate(s, topo, 10**6, mode="dataflow")
    g = dataflow_graph(s)
    for t, deps in enumerate(g.deps):
        for d in deps:
            assert flow.start[t] >= flow.end[d]
    for t, readers in enumerate(g.write_after):
        for r in readers:
            assert flow.end[t] >= flow.start[r]
    lock = simulate(s, topo, 10**6, mode="lockstep")
    steps = [si for si, _ti, _t in s.transfers()]
    for si in range(1, len(s.steps)):
        prev_end = max(e for e, st in zip(lock.end, steps, strict=True) if st == si - 1)
        assert all(b >= prev_end for b, st in zip(lock.start, steps, strict=True) if st == si)
    assert flow.time <= lock.time * (1 + REL)


def test_size_convention_and_bus_factors() -> None:
    assert chunk_bytes(Collective(Kind.ALLREDUCE, 4, 8), 64) == 8
    assert chunk_bytes(Collective(Kind.ALLGATHER, 4, 2), 64) == 8
    assert chunk_bytes(Collective(Kind.REDUCESCATTER, 4, 2), 64) == 8
    assert chunk_bytes(Collective(Kind.ALLTOALL, 4, 1), 64) == 16
    assert chunk_bytes(Collective(Kind.BROADCAST, 4, 2, 0), 64) == 32
    assert busbw_factor(Kind.ALLREDUCE, 8) == 2 * 7 / 8
    for k in (Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLTOALL, Kind.SCATTER, Kind.GATHER):
        assert busbw_factor(k, 8) == 7 / 8
    assert busbw_factor(Kind.BROADCAST, 8) == busbw_factor(Kind.REDUCE, 8) == 1


def test_one_rank_takes_no_time() -> None:
    r = simulate(registry.build("allreduce", "ring", 1), T.ring(1), 1024.0)
    assert r.ok and r.time == 0 and math.isinf(r.algbw)
    assert r.to_dict()["algbw_GBps"] is None


def test_results_are_values() -> None:
    r = simulate(registry.build("allreduce", "ring", 3), T.ring(3), 1024.0)
    with pytest.raises(AttributeError):
        r.time = 0.0  # type: ignore[misc]
    with pytest.raises(ValueError):
        r.start[0] = 1.0
    assert r.transfers == 12 and r.events > 0


# -- every registered closed form, on a switch ------------------------------------------------------

# On a single switch every rank has one uplink and one downlink, and these algorithms send and
# receive at most one message per rank per step (or share a link exactly as their closed form
# charges), so lockstep must match the registry's α-β-γ cost with α = 2 hops, β = 1/B, γ = 1/R.
SWITCH_EXACT = [
    ("allreduce", "ring"), ("allreduce", "recursive_doubling"), ("allreduce", "rabenseifner"),
    ("allreduce", "direct"), ("allreduce", "binomial"), ("allreduce", "hierarchical"),
    ("allgather", "ring"), ("allgather", "recursive_doubling"), ("allgather", "bruck"), ("allgather", "direct"),
    ("reducescatter", "ring"), ("reducescatter", "recursive_halving"), ("reducescatter", "direct"),
    ("broadcast", "binomial"), ("broadcast", "binary_tree"), ("broadcast", "chain"),
    ("broadcast", "scatter_allgather"), ("broadcast", "linear"), ("reduce", "binomial"), ("reduce", "chain"),
    ("reduce", "reducescatter_gather"), ("scatter", "binomial"), ("scatter", "linear"), ("gather", "binomial"),
    ("gather", "linear"), ("alltoall", "pairwise"), ("alltoall", "bruck"), ("alltoall", "direct"),
    ("barrier", "dissemination"), ("barrier", "recursive_doubling"), ("barrier", "central"),
]


@pytest.mark.parametrize(("kind", "name"), SWITCH_EXACT)
def test_registered_closed_forms_on_a_switch(kind: str, name: str) -> None:
    try:
        alg = registry.get(kind, name)
    except RegistryError:
        pytest.skip(f"{kind}/{name} not registered yet (issue 3)")
    assert alg.cost is not None
    lat, bw, red = 1e-6, 10e9, 40e9
    n = 0.0 if kind == "barrier" else float(2**20)
    checked = 0
    for p in (2, 3, 4, 5, 6, 8, 12, 16):
        if alg.unsupported(p) is not None:
            continue
        chunk_options = (1, 3) if any(x.name == "chunks" for x in alg.parameters) else (None,)
        for chunks in chunk_options:
            params = {} if chunks is None else {"chunks": chunks}
            schedule = alg.build(p, **params)
            topo = T.single_switch(p, bandwidth=bw, latency=lat)
            # Reduction cost only where the powers-of-two structure keeps every rank's share equal.
            gamma = 1 / red if p & (p - 1) == 0 else 0.0
            r = simulate(schedule, topo, n, mode="lockstep", reduce_bandwidth=red if gamma else None)
            want = predict(kind, name, p, n, alpha=2 * lat, beta=1 / bw, gamma=gamma, params=params).time
            assert r.ok
            assert close(r.time, want), (p, chunks, r.time, want)
            checked += 1
    assert checked
