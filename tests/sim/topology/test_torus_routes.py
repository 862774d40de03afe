"""``torus_route_links``: the default routes on a plain torus in closed form, the very routes ``route`` takes.

``route`` walks the destination's shortest-path tree and picks among equal next hops by the destination's digits
(``Topology._walk``); the closed form must reproduce that pick, not merely an equally short route. The reference
is ``route_links`` pair by pair, on random 2-D and 3-D tori (odd and even sizes, dimensions of 1 and 2, per-dimension
bandwidths and latencies, zero latencies); a torus with a degraded or missing link is not plain and falls back.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.topology import Topology
from sim.topology import torus_routes as routing
from sim.topology.forms import from_spec
from sim.topology.routing import dimension_order_routes


def _pairs(t: Topology) -> list[tuple[int, int]]:
    return [(a, b) for a in range(t.ranks) for b in range(t.ranks)]


def _reference(t: Topology) -> dict[tuple[int, int], tuple[tuple[int, ...], float]]:
    """Every pair's route by the trees: ``route`` pair by pair on a small torus, else ``route_links_many`` on a
    copy under another name (not a torus to ``torus_route_links``: one tree per destination, ``route``'s own)."""
    if t.ranks <= 16:
        return {pr: t.route_links(*pr) for pr in _pairs(t)}
    plain = Topology(t.graph, "not a torus", t.routes)
    assert routing.torus_route_links(plain, [(0, 1)]) is None
    return plain.route_links_many(_pairs(plain))


@st.composite
def _tori(draw: st.DrawFn) -> str:
    dims = draw(st.lists(st.integers(1, 7), min_size=2, max_size=3).filter(lambda ds: int(np.prod(ds)) <= 150))
    figures = []
    for name in ("x", "y", "z")[:len(dims)]:
        bw = draw(st.sampled_from(["", "25GB/s", "50GB/s", "100GB/s"]))
        lat = draw(st.sampled_from(["", "0us", "1us", "2us", "0.4us"]))
        if bw or lat:
            figures.append(f"{name}={bw}" + (f"/{lat}" if lat else ""))
    spec = "torus:" + "x".join(map(str, dims))
    return spec + ("@" + ",".join(figures) if figures else "")


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_tori())
def test_torus_routes_are_routes_routes(spec: str) -> None:
    t = from_spec(spec)
    got = routing.torus_route_links(t, _pairs(t))
    assert got is not None, spec
    assert got == _reference(t)


@pytest.mark.parametrize("spec", ["torus:8x8", "torus:6x5x2", "torus:2x2x2", "torus:4x4@x=100GB/s,y=50GB/s/2us",
                                  "torus:4x6@y=/0us"])
def test_route_links_many_on_a_torus_takes_routes_routes(spec: str) -> None:
    t = from_spec(spec)
    assert from_spec(spec).route_links_many(_pairs(t)) == _reference(t)


def test_a_degraded_or_missing_link_falls_back() -> None:
    t = from_spec("torus:4x4")
    for changed in (t.with_degraded_link(0, 1, 0.5), t.with_link_down(0, 1)):
        want = _reference(changed)
        assert routing.torus_route_links(changed, _pairs(changed)) is None
        assert changed.route_links_many(_pairs(changed)) == want


def test_not_a_torus_and_explicit_routes() -> None:
    assert routing.torus_route_links(from_spec("ring:8"), [(0, 4)]) is None
    routed = dimension_order_routes(from_spec("torus:4x4"))  # same name, explicit routes win
    want = _reference(routed)
    assert routed.route_links_many(_pairs(routed)) == want


def test_a_broken_tie_break_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check can fail: taking the equal next hops in reverse node order gives other routes."""
    top = np.iinfo(np.int64).max
    monkeypatch.setattr(routing, "_node_order", lambda cand: np.argsort(np.where(cand == top, top, -cand), axis=1))
    t = from_spec("torus:4x4")
    got = routing.torus_route_links(t, _pairs(t))
    assert got is not None
    assert got != _reference(t)
