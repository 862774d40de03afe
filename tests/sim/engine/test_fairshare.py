"""Max-min fair sharing against an independent reference: exact water-filling in rationals, written here.

The reference raises every unfrozen flow's rate by the same exact step
(``fractions.Fraction``) until some link has no capacity left, freezes the
flows on saturated links, and repeats: the textbook definition, sharing no code
with ``sim.engine.fairshare`` (which freezes link by link from a heap, in floats). A
second, structural check is the bottleneck characterisation: an allocation is
max-min fair iff it is feasible and every flow crosses a saturated link on
which no flow has a higher rate.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.engine.fairshare import FairShare, FairShareError, max_min_rates

REL = 1e-9


def reference(routes: list[list[int]], caps: list[int]) -> list[Fraction]:
    """Water-filling in exact rationals (every flow crosses at least one link)."""
    rate = [Fraction(0)] * len(routes)
    frozen = [False] * len(routes)
    while not all(frozen):
        live = [f for f in range(len(routes)) if not frozen[f]]
        steps = []
        for lk, cap in enumerate(caps):
            users = [f for f in live if lk in routes[f]]
            if users:
                used = sum((rate[f] for f in range(len(routes)) if lk in routes[f]), Fraction(0))
                steps.append((Fraction(cap) - used) / len(users))
        delta = min(steps)
        for f in live:
            rate[f] += delta
        for lk, cap in enumerate(caps):
            used = sum((rate[f] for f in range(len(routes)) if lk in routes[f]), Fraction(0))
            if used == cap:
                for f in live:
                    if lk in routes[f]:
                        frozen[f] = True
    return rate


def close(a: float, b: float) -> bool:
    return abs(a - b) <= REL * max(abs(a), abs(b))


def is_max_min_fair(routes: list[list[int]], caps: list[float], rates: list[float]) -> bool:
    """Feasible, and every flow has a bottleneck: a saturated link where its rate is the largest."""
    load = [0.0] * len(caps)
    for f, r in enumerate(routes):
        for lk in r:
            load[lk] += rates[f]
    if any(load[lk] > caps[lk] * (1 + REL) for lk in range(len(caps))):
        return False
    for f, r in enumerate(routes):
        if not any(close(load[lk], caps[lk]) and all(rates[g] <= rates[f] * (1 + REL)
                                                      for g, rg in enumerate(routes) if lk in rg) for lk in r):
            return False
    return True


@st.composite
def networks(draw: st.DrawFn, max_links: int = 6, max_flows: int = 8) -> tuple[list[list[int]], list[int]]:
    nl = draw(st.integers(1, max_links))
    caps = draw(st.lists(st.integers(1, 100), min_size=nl, max_size=nl))
    routes = draw(st.lists(st.lists(st.integers(0, nl - 1), min_size=1, max_size=nl, unique=True),
                           min_size=0, max_size=max_flows))
    return routes, caps


# -- textbook cases ------------------------------------------------------------------------------


@pytest.mark.parametrize("hops", [1, 2, 3, 5])
def test_parking_lot_gives_every_flow_half(hops: int) -> None:
    # One long flow over all `hops` unit links, one short flow per link: each link is shared by two.
    routes = [list(range(hops))] + [[i] for i in range(hops)]
    rates = max_min_rates(routes, [1.0] * hops)
    assert rates == [0.5] * (hops + 1)


def test_a_flow_bottlenecked_on_a_slow_link_leaves_the_rest_of_a_fast_link_to_the_others() -> None:
    # Link 0 (10 GB/s) carries flows a and b; a also crosses link 1 (1 GB/s).
    # Max-min: a = 1, b = 10 - 1 = 9. ("min of equal shares" gave b 10/2 = 5, leaving 4 idle.)
    a, b = max_min_rates([[0, 1], [0]], [10e9, 1e9])
    assert (a, b) == (1e9, 9e9)


def test_unequal_parking_lot() -> None:
    # Links 0 (cap 3) and 1 (cap 1); long flow over both, one short flow on each.
    # Link 1 saturates first at 1/2 (long and short-1); the short flow on link 0 gets 3 - 1/2.
    assert max_min_rates([[0, 1], [0], [1]], [3.0, 1.0]) == [0.5, 2.5, 0.5]


def test_a_flow_on_no_link_is_unconstrained_and_repeats_count_once() -> None:
    assert max_min_rates([[], [0, 0]], [4.0]) == [math.inf, 4.0]


def test_bad_input_is_named() -> None:
    with pytest.raises(FairShareError, match="link 1: capacity"):
        max_min_rates([[0]], [1.0, 0.0])
    with pytest.raises(FairShareError, match="flow 0: link 3 out of range"):
        max_min_rates([[3]], [1.0])
    fs = FairShare([1.0])
    fs.add(7, [0])
    with pytest.raises(FairShareError, match="flow 7 is already active"):
        fs.add(7, [0])
    with pytest.raises(FairShareError, match="flow 8 is not active"):
        fs.remove(8)
    with pytest.raises(FairShareError, match="flow 9: link 2 out of range"):
        fs.add(9, [2])


# -- random networks -------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(networks())
def test_rates_equal_exact_water_filling(net: tuple[list[list[int]], list[int]]) -> None:
    routes, caps = net
    got = max_min_rates(routes, [float(c) for c in caps])
    want = reference(routes, caps)
    assert all(close(g, float(w)) for g, w in zip(got, want, strict=True)), (got, want)
    assert is_max_min_fair(routes, [float(c) for c in caps], got)


@settings(max_examples=150, deadline=None)
@given(networks(max_links=5, max_flows=6), st.lists(st.tuples(st.booleans(), st.integers(0, 20)), max_size=25))
def test_incremental_settle_matches_a_fresh_computation(net: tuple[list[list[int]], list[int]],
                                                        ops: list[tuple[bool, int]]) -> None:
    # A random sequence of starts and ends; after each settle every active flow's rate equals the
    # reference on the active set, and settle() reports exactly the flows whose rate changed.
    routes, caps = net
    if not routes:
        return
    fs = FairShare([float(c) for c in caps])
    before: dict[int, float] = {}
    for add, pick in ops:
        active = sorted(fs.routes)
        if add:
            f = max(active, default=-1) + 1
            fs.add(f, routes[pick % len(routes)])
        elif active:
            fs.remove(active[pick % len(active)])
        changed = fs.settle()
        flows = sorted(fs.routes)
        want = reference([list(fs.routes[f]) for f in flows], caps)
        for f, w in zip(flows, want, strict=True):
            assert close(fs.rate(f), float(w)), (f, fs.rate(f), w)
        assert set(changed) == {f for f in flows if before.get(f) != fs.rate(f)}
        before = {f: fs.rate(f) for f in flows}
