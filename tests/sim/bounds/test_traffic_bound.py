"""The cut bound of an all-to-allv's traffic matrix: a worked case, alltoall's bound for the uniform matrix, and
never above a simulated time."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from algorithms import registry
from algorithms.ir import Collective, Kind
from sim import topology as T
from sim.bounds.cuts import bound
from sim.bounds.traffic import matrix_bound
from sim.engine.reference import simulate


def test_worked_case_on_a_switch() -> None:
    # switch:3 at 1e9 B/s a port; T = [[1,2,0],[0,0,0],[3,1,1]] (8 chunks), size 3000 B: a chunk is
    # 3000·3/8 = 1125 B. Rank 2 must send 3 + 1 chunks over its one uplink: 4.5 us, the most of any cut
    # (rank 1 receives 3, rank 0 sends 2).
    coll = Collective(Kind.ALLTOALLV, 3, matrix=((1, 2, 0), (0, 0, 0), (3, 1, 1)))
    topo = T.single_switch(3, bandwidth=1e9, latency=0.0)
    b = matrix_bound(topo, coll, 3000)
    assert b.bandwidth == Fraction(4 * 1125, 10**9)
    assert 2 in b.cut and 1 not in b.cut
    s = registry.build("alltoallv", "direct", 3, matrix=coll.matrix)
    assert simulate(s, topo, 3000).time == pytest.approx(b.bound_s)  # direct reaches it here


@pytest.mark.parametrize("spec", ["ring:5", "cluster:2x3", "torus:3x3"])
def test_uniform_matrix_is_alltoalls_bound(spec: str) -> None:
    topo = T.from_spec(spec)
    p = topo.ranks
    uni = Collective(Kind.ALLTOALLV, p, matrix=((2,) * p,) * p)
    assert matrix_bound(topo, uni, 1 << 20).bandwidth == bound(Kind.ALLTOALL, topo, 1 << 20).bandwidth


def test_no_traffic_no_bound() -> None:
    coll = Collective(Kind.ALLTOALLV, 2, matrix=((3, 0), (0, 5)))  # only local blocks
    assert matrix_bound(T.ring(2), coll, 1e6).bound_s == 0.0


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_never_above_a_simulated_time(data: st.DataObject) -> None:
    spec = data.draw(st.sampled_from(["ring:4", "cluster:2x2", "switch:5", "fattree:2"]))
    topo = T.from_spec(spec)
    p = topo.ranks
    t = np.array(data.draw(st.lists(st.integers(0, 5), min_size=p * p, max_size=p * p))).reshape(p, p)
    name = data.draw(st.sampled_from(["direct", "pairwise", "bruck"]))
    s = registry.build("alltoallv", name, p, matrix=t)
    b = matrix_bound(topo, s.collective, 1 << 20)
    assert b.bound_s <= simulate(s, topo, 1 << 20).time * (1 + 1e-9)
