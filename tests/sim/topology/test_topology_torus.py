"""N-dimensional tori and per-dimension link figures (``torus:4x4x4``, ``torus:4x4@x=100GB/s,y=50GB/s/2us``).

Expectations are worked by hand: link counts from the shape, hop counts as the wrap-around Manhattan
distance, and ring all-reduce times from the bandwidth-bound closed form 2(p-1)/p·N/B.
"""

from __future__ import annotations

import itertools
import math

import networkx as nx
import pytest

from algorithms import build
from sim.engine import simulate
from sim.topology import Topology, TopologyError, from_spec, torus
from sim.topology.placement import place, placement


def _old_2d_torus(rows: int, cols: int, bandwidth: float = 50e9, latency: float = 1e-6) -> nx.DiGraph:
    """The 2-D torus exactly as sim.topology.builders built it before tori had N dimensions (the reference)."""
    g = nx.DiGraph()
    g.add_nodes_from(range(rows * cols))

    def link(u: int, v: int) -> None:
        g.add_edge(u, v, bandwidth=bandwidth, latency=latency)
        g.add_edge(v, u, bandwidth=bandwidth, latency=latency)

    for i in range(rows):
        for j in range(cols):
            r = i * cols + j
            if cols > 1:
                link(r, i * cols + (j + 1) % cols)
            if rows > 1:
                link(r, ((i + 1) % rows) * cols + j)
    return g


@pytest.mark.parametrize(("rows", "cols"), [(1, 1), (1, 4), (4, 1), (2, 2), (2, 3), (3, 4), (4, 4), (5, 2)])
def test_the_2d_torus_is_the_one_it_was_link_for_link(rows: int, cols: int) -> None:
    # The same links in the same order (link ids key bounds, packings and exports), and the same routes.
    new, old = torus(rows, cols), Topology(_old_2d_torus(rows, cols), f"torus:{rows}x{cols}")
    assert list(new.graph.edges(data=True)) == list(old.graph.edges(data=True))
    assert new.name == f"torus:{rows}x{cols}"
    p = rows * cols
    assert all(new.route(a, b) == old.route(a, b) for a in range(p) for b in range(p))


@pytest.mark.parametrize(("dims", "links"), [
    ((4, 4, 4), 64 * 3 * 2),   # every rank: two neighbours in each of three dimensions
    ((2, 2, 2), 8 * 3),        # a dimension of 2: one neighbour (one link pair), not two parallel ones
    ((3, 2, 4), 24 * (2 + 1 + 2)),
    ((2, 3, 1, 2), 12 * (1 + 2 + 0 + 1)),  # a dimension of 1 has no links
    ((3, 3, 3, 3), 81 * 4 * 2),
])
def test_nd_torus_links(dims: tuple[int, ...], links: int) -> None:
    t = from_spec("torus:" + "x".join(map(str, dims)))
    assert (t.ranks, len(t.links), t.name) == (math.prod(dims), links, "torus:" + "x".join(map(str, dims)))
    assert t.graph.number_of_nodes() == t.ranks  # no switches


def _coords(r: int, dims: tuple[int, ...]) -> list[int]:
    out = []
    for d in reversed(dims):
        r, c = divmod(r, d)
        out.append(c)
    return out[::-1]


@pytest.mark.parametrize("dims", [(4, 4, 4), (3, 2, 5), (2, 3, 2, 3)])
def test_nd_torus_routes_are_wraparound_manhattan_and_deterministic(dims: tuple[int, ...]) -> None:
    t, again = torus(*dims), torus(*dims)
    p = t.ranks
    for a, b in itertools.product(range(p), repeat=2):
        ca, cb = _coords(a, dims), _coords(b, dims)
        hops = sum(min((x - y) % d, (y - x) % d) for x, y, d in zip(ca, cb, dims, strict=True))
        route = t.route(a, b)
        assert len(route) - 1 == hops, (a, b, route)
        assert route == again.route(a, b)
    # Row-major ranks: the last dimension varies fastest, rank 1 is one step along it.
    assert t.graph.has_edge(0, 1) and t.graph.has_edge(0, math.prod(dims[1:]))


def _dimension_of(u: int, v: int, dims: tuple[int, ...]) -> int:
    (k,) = [k for k, (x, y) in enumerate(zip(_coords(u, dims), _coords(v, dims), strict=True)) if x != y]
    return k


def test_per_dimension_figures_land_on_their_dimension() -> None:
    t = from_spec("torus:4x2x3@x=100GB/s,z=25GB/s/3us,y=/2us")
    want = {0: (100e9, 1e-6), 1: (50e9, 2e-6), 2: (25e9, 3e-6)}  # y keeps 50 GB/s, x keeps 1 us
    for u, v, a in t.graph.edges(data=True):
        assert (a["bandwidth"], a["latency"]) == want[_dimension_of(u, v, (4, 2, 3))], (u, v)
    # The name lists every dimension's figures, and is a SPEC of the same topology.
    assert t.name == "torus:4x2x3@x=100GB/s/1us,y=50GB/s/2us,z=25GB/s/3us"
    back = from_spec(t.name)
    assert list(back.graph.edges(data=True)) == list(t.graph.edges(data=True))
    # d1, d2, ... name the same dimensions; uniform figures keep the plain name.
    assert from_spec("torus:4x2x3@d1=100GB/s,d3=25GB/s/3us,d2=/2us").name == t.name
    assert from_spec("torus:3x3@x=50GB/s,y=50GB/s/1us").name == "torus:3x3"
    assert torus(2, 3, 2, 2, bandwidth=[1e9, 2e9, 3e9, 4e9]).name == \
        "torus:2x3x2x2@x=1GB/s/1us,y=2GB/s/1us,z=3GB/s/1us,d4=4GB/s/1us"


@pytest.mark.parametrize(("spec", "message"), [
    ("torus:4x4@z=100GB/s", r"topology 'torus:4x4@z=100GB/s': torus: no dimension 'z' in 2 dimensions "
                            r"\(they are x, y, d1, d2\)"),
    ("torus:4x4@d3=1GB/s", "no dimension 'd3'"),
    ("torus:4x4@x=100GB", r"dimension x bandwidth: cannot read '100GB' \(expected a number with B/s"),
    ("torus:4x4@x=100GB/s/1parsec", r"dimension x latency: cannot read '1parsec'"),
    ("torus:4x4@x=0GB/s", "dimension x bandwidth: must be positive"),
    ("torus:4x4@x=fast", "dimension x bandwidth: cannot read 'fast'"),
    ("torus:4x4@x", r"expected DIM=BW, DIM=BW/LAT or DIM=/LAT after '@' \(such as x=100GB/s/1us\), got 'x'"),
    ("torus:4x4@", "expected DIM=BW"),
    ("torus:4x4@x=", "expected DIM=BW"),
    ("torus:4x4@x=1GB/s,x=2GB/s", "dimension 'x' is given twice"),
    ("torus:4x4@x=1GB/s/1us/2us", "expected DIM=BW"),
    ("torus:4", r"expected NxN\[xN...\] after the colon, got '4'"),
    ("torus:4x0x4", "must be >= 1"),
    ("torus:64x64x32", "131072 ranks is more than the 65536 a SPEC may build"),
])
def test_bad_torus_specs_say_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        from_spec(spec)


def test_an_override_cannot_silently_replace_the_spec_figures() -> None:
    with pytest.raises(TopologyError, match=r"own bandwidth, and a bandwidth for every link \(--bandwidth\)"):
        from_spec("torus:4x4@x=100GB/s", bandwidth=1e9)
    with pytest.raises(TopologyError, match="sets its own latency, and a latency for every link"):
        from_spec("torus:4x4@x=/2us", latency=1e-6)
    # A figure the spec does not set may be overridden: here every bandwidth, the spec's x latency kept.
    t = from_spec("torus:4x4@x=/2us", bandwidth=1e9)
    assert {a["bandwidth"] for *_, a in t.graph.edges(data=True)} == {1e9}
    assert sorted({a["latency"] for *_, a in t.graph.edges(data=True)}) == [1e-6, 2e-6]


def test_the_python_builder_checks_its_figures() -> None:
    with pytest.raises(TopologyError, match=r"one number or one per dimension \(3\), got 2"):
        torus(2, 2, 2, bandwidth=[1e9, 2e9])
    with pytest.raises(TopologyError, match="at least two dimensions"):
        torus(8)
    with pytest.raises(TopologyError, match="dimension 3 must be an integer >= 1"):
        torus(2, 2, 0)


N = 64 * 2**20


def _ring_allreduce(p: int, spec: str, size: float = N, in_flight: int = 1, **placed: str) -> float:
    topo = from_spec(spec)
    if placed:
        topo = place(topo, placement(placed["placement"], topo, topo.ranks))
    r = simulate(build("allreduce", "ring", p), topo, size, engine="simpy", in_flight=in_flight)
    assert r.ok
    return r.time


def test_a_ring_along_one_dimension_runs_at_that_dimensions_bandwidth() -> None:
    # torus:4x1 is a ring of 4 along x (y has size 1: no links), torus:1x4 one along y. Latency 0:
    # bandwidth-bound, 2(p-1)/p·N/B with B the figure of the dimension the ring runs along.
    figures = "@x=10GB/s/0us,y=100GB/s/0us"
    assert _ring_allreduce(4, "torus:4x1" + figures) == pytest.approx(2 * 3 / 4 * N / 10e9, rel=1e-9)
    assert _ring_allreduce(4, "torus:1x4" + figures) == pytest.approx(2 * 3 / 4 * N / 100e9, rel=1e-9)


def test_a_ring_across_both_dimensions_pays_each_dimensions_latency() -> None:
    # The snake placement puts the 16-rank ring on a cycle of torus:4x4 whose edges run y, y, y, x, y, y, y, x, ...
    # Latency-bound (1 KiB at 1e15 B/s). Without the send order (in_flight 0), message k of a rank waits only for
    # message k-1 of its predecessor, so the last of the 2(p-1) = 30 messages ends after the latencies of 30
    # consecutive ring edges, the worst run of them: the whole cycle (4 x and 12 y edges) plus 14 more (at most
    # 4 x and 10 y, or 11 y and 3 x). Each message also streams 1024/16 bytes at 1e15 B/s on each of the 30 hops.
    stream = 30 * (1024 / 16) / 1e15
    x_slow = _ring_allreduce(16, "torus:4x4@x=1e15/5us,y=1e15/1us", size=1024, in_flight=0, placement="snake")
    assert x_slow == pytest.approx((4 * 5 + 12 * 1) * 1e-6 + (4 * 5 + 10 * 1) * 1e-6 + stream, rel=1e-9)
    y_slow = _ring_allreduce(16, "torus:4x4@x=1e15/1us,y=1e15/5us", size=1024, in_flight=0, placement="snake")
    assert y_slow == pytest.approx((4 * 1 + 12 * 5) * 1e-6 + (3 * 1 + 11 * 5) * 1e-6 + stream, rel=1e-9)
    # In send order (the default, one step in flight, as a blocking MPI_Sendrecv per step) a rank receives its
    # next message only once its last one has landed, so every step waits for the slowest edge, 5 us: 30 x 5 us.
    x_slow = _ring_allreduce(16, "torus:4x4@x=1e15/5us,y=1e15/1us", size=1024, placement="snake")
    assert x_slow == pytest.approx(30 * 5e-6 + stream, rel=1e-9)


def test_a_ring_across_both_dimensions_is_no_faster_than_its_slow_links() -> None:
    # Every x link of the snake's cycle carries all 2(p-1) messages of N/p bytes of its ring edge.
    t = _ring_allreduce(16, "torus:4x4@x=10GB/s/0us,y=40GB/s/0us", placement="snake")
    assert t >= 2 * 15 / 16 * N / 10e9 * (1 - 1e-12)
    uniform = _ring_allreduce(16, "torus:4x4@x=10GB/s/0us,y=10GB/s/0us", placement="snake")
    assert uniform == pytest.approx(2 * 15 / 16 * N / 10e9, rel=1e-9)


def test_a_small_ring_along_one_dimension_pays_that_dimensions_latency() -> None:
    # 2(p-1) steps of one hop each at x's 5 us; 1 KiB at 1e15 B/s adds 1.5 ps.
    t = _ring_allreduce(4, "torus:4x1@x=1e15/5us", size=1024)
    assert t == pytest.approx(2 * 3 * 5e-6 + 2 * 3 / 4 * 1024 / 1e15, rel=1e-9)


# -- dimension-order routes (--routing dimension) ---------------------------------------------------


def test_default_torus_routes_are_not_dimension_ordered_but_these_are() -> None:
    from sim.topology.routing import dimension_order_routes, routed

    t = torus(4, 4)
    # The default: least latency, ties spread by the destination's digits; x first to 5, y first to 6.
    assert (t.route(0, 5), t.route(0, 6)) == ((0, 4, 5), (0, 1, 2, 6))
    d = routed(t, "dimension")
    # x (rows, stride 4) first, then y, each the shorter way; a tie (2 of 4) goes towards higher coordinates.
    assert (d.route(0, 5), d.route(0, 6), d.route(0, 15), d.route(5, 3)) == \
        ((0, 4, 5), (0, 4, 5, 6), (0, 12, 15), (5, 1, 2, 3))
    assert d.route(0, 10) == (0, 4, 8, 9, 10)
    t3 = dimension_order_routes(from_spec("torus:3x3x3@z=10GB/s"))
    assert t3.route(0, 26) == (0, 18, 24, 26)  # x -1 (wrap), y -1 (wrap), z -1 (wrap): 2 -> 0 in each
    assert t3.route(13, 14) == (13, 14)
    for a, b in itertools.product(range(27), repeat=2):
        if a != b:
            ca, cb = _coords(a, (3, 3, 3)), _coords(b, (3, 3, 3))
            assert len(t3.route(a, b)) - 1 == sum(min((x - y) % 3, (y - x) % 3) for x, y in zip(ca, cb, strict=True))
            dims_seen = [_dimension_of(u, v, (3, 3, 3)) for u, v in itertools.pairwise(t3.route(a, b))]
            assert dims_seen == sorted(dims_seen)  # never back to an earlier dimension


def test_dimension_order_needs_a_torus() -> None:
    from sim.topology import ring
    from sim.topology.routing import routed

    with pytest.raises(TopologyError, match="dimension-order routing needs a torus"):
        routed(ring(4), "dimension")
    with pytest.raises(TopologyError, match="1296 ranks is more than the 1024"):
        routed(torus(6, 6, 6, 6), "dimension")
