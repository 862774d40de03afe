"""Bounds where switches reduce: the own-links term by hand, today's terms kept elsewhere, and no library,
in-network or synthesized schedule simulating faster than the bound on topologies with reducing switches."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from algorithms import registry
from algorithms.ir import Kind
from sim.bounds.cuts import bound
from sim.bounds.packing import synthesize
from sim.engine.reference import simulate
from sim.topology import Topology, cluster, dgx_h100, single_switch
from sim.topology.builders import DGX_NVLINK_EFFICIENCY, NVLINK_BANDWIDTH
from sim.topology.switches import SwitchCaps, mark_switches, with_sharp


def test_the_traffic_term_is_m_over_one_ranks_links_where_switches_reduce() -> None:
    m = 2.0**33
    link = Fraction(NVLINK_BANDWIDTH * DGX_NVLINK_EFFICIENCY)  # the float the preset's links carry
    b = bound(Kind.ALLREDUCE, dgx_h100(1), m)
    assert b.traffic_term == Fraction(m) / link  # each GPU: M out and M in over its own NVLink
    plain = bound(Kind.ALLREDUCE, cluster(1, 8, nvlink_bandwidth=float(link)), m)
    assert plain.traffic_term == 2 * 7 * Fraction(m) / (8 * link)  # today's gossip term where nothing reduces
    assert b.bandwidth == plain.bandwidth  # the cut term does not depend on what switches compute


@st.composite
def switched(draw: st.DrawFn) -> tuple[Topology, int]:
    """A star or a cluster whose switches reduce and multicast at drawn rates; the GPUs per node."""
    caps = SwitchCaps(reduce=True, multicast=True, bandwidth=draw(st.sampled_from([1e8, 3e9, 1e11])),
                      latency=draw(st.sampled_from([0.0, 1e-6, 2e-5])))
    bw = draw(st.sampled_from([1e9, 5e10]))
    lat = draw(st.sampled_from([0.0, 1e-6]))
    if draw(st.booleans()):
        p = draw(st.integers(2, 6))
        return mark_switches(single_switch(p, bandwidth=bw, latency=lat), caps, ["switch"]), p
    nodes, gpus = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    t = mark_switches(cluster(nodes, gpus, nvlink_bandwidth=bw, nvlink_latency=lat), caps,
                      lambda n: str(n).startswith("node"))
    return (with_sharp(t, "drawn") if nodes > 1 else t), gpus


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_no_schedule_beats_the_bound_where_switches_reduce(data: st.DataObject) -> None:
    t, gpus = data.draw(switched(), label="topology")
    p = t.ranks
    kind = data.draw(st.sampled_from([Kind.ALLREDUCE, Kind.ALLGATHER, Kind.BROADCAST]), label="kind")
    size = data.draw(st.sampled_from([1.0, 4096.0, 2.0**24]), label="size")
    mode = data.draw(st.sampled_from(["dataflow", "lockstep"]), label="mode")
    root = 0 if kind is Kind.BROADCAST else None
    b = bound(kind, t, size, root=root)
    schedules = [a.build(p, root=root) for a in registry.algorithms(kind) if a.unsupported(p) is None]
    star = "switch" in t.graph
    if kind is Kind.ALLREDUCE:
        schedules.append(registry.build("allreduce", "nvls_tree", p, group=p if star else gpus, chunks=2))
        if star:
            schedules.append(registry.build("allreduce", "nvls", p, chunks=2))
        elif "net" in t.graph:
            schedules.append(registry.build("allreduce", "sharp", p, group=gpus))
    elif star or p == gpus or "net" in t.graph:
        schedules.append(registry.build(kind, "multicast", p, root=root, chunks=2))
    if p > 1 and kind is not Kind.BROADCAST:
        schedules.append(synthesize(kind, t))
    for s in schedules:
        r = simulate(s, t, size, mode=mode)
        assert r.ok, s.name
        assert r.time >= b.bound_s * (1 - 1e-9), (s.name, r.time, b)


@pytest.mark.parametrize("nodes", [1, 2])
def test_nvls_comes_near_the_own_links_bound_on_dgx(nodes: int) -> None:
    # Not a proof of anything: a guard that the bound is not loose by an order of magnitude for NVLS.
    t = dgx_h100(nodes)
    s = registry.build("allreduce", "nvls" if nodes == 1 else "nvls_tree", 8 * nodes, **({} if nodes == 1
                                                                                          else {"chunks": 2}))
    b = bound(Kind.ALLREDUCE, t, 2.0**30)
    r = simulate(s, t, 2.0**30)
    assert r.ok and 1.0 <= r.time / b.bound_s < (3.0 if nodes == 1 else 30.0)
