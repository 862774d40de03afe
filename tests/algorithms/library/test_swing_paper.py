"""The Swing paper's algorithms (De Sensi, Bonato, Saam & Hoefler, NSDI 2024): latency-optimal Swing, recursive
doubling and Rabenseifner in torus-distance order, the synchronized bucket and the Hamiltonian rings.

Correct at many sizes, square or not, with any number of ports; the peers, hops and links the paper
describes; and the simulated time against the paper's model written out by hand: 400 Gb/s links, 100 ns of
wire plus 300 ns of router per hop, and one per-message overhead o = 0.5 us (OVERHEAD), fitted on one point (the
published latency-optimal Swing on torus:8x8 at 32 B, 7 us: 6 steps of o and 10 hops of 400 ns). At 32 B a
step costs o + (the hops of its farthest message)·400 ns, the bytes adding under 0.1%.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from algorithms import registry
from algorithms.errors import ScheduleError
from algorithms.ir import Schedule
from algorithms.library.compose import Grid
from algorithms.library.hamiltonian import hamiltonian_cycles
from algorithms.library.swing import rho
from sim.engine import simulate
from sim.topology import Topology, from_spec
from sim.topology.routing import routed
from sim.verify.verifier import assert_verified

B = 400e9 / 8  # the paper's links: 400 Gb/s
HOP = 100e-9 + 300e-9  # wire and router, per hop
OVERHEAD = 0.5e-6  # per message, fitted on the published 7 us of latency-optimal Swing on torus:8x8 at 32 B
MIB = 2**20

TORUS = ["swing_torus_latency_optimal", "rabenseifner_torus", "recursive_doubling_torus"]


def build(name: str, p: int, **params: Any) -> Schedule:
    return registry.build("allreduce", name, p, **params)


def ranks(dims: str) -> int:
    return math.prod(int(q) for q in dims.split("x"))


def paper_torus(dims: str) -> Topology:
    return from_spec(f"torus:{dims}", bandwidth=B, latency=HOP)


# --- correctness -------------------------------------------------------------------------------------


@pytest.mark.parametrize("p", range(1, 65))
def test_latency_optimal_swing_is_correct_for_every_p_to_64(p: int) -> None:
    assert_verified(build("swing_latency_optimal", p, chunks=2))


GRIDS = ["8x8", "2x8", "8x2", "4x16", "16x4", "1x8", "8", "2x4x8", "4x4x4", "2x2x2x2", "1x4x1x4", "32x2"]


@pytest.mark.parametrize("dims", GRIDS)
@pytest.mark.parametrize("name", TORUS)
def test_torus_variants_are_correct_on_square_and_lopsided_grids(name: str, dims: str) -> None:
    for ports in (0, 1, 3):
        assert_verified(build(name, ranks(dims), dims=dims, ports=ports))


@pytest.mark.parametrize("p", [1, 2, 3, 5, 6, 12, 13, 24, 31, 33, 48, 63])
@pytest.mark.parametrize("name", [*TORUS, "hamiltonian_rings"])
def test_awkward_world_sizes_are_served_on_the_default_grid(name: str, p: int) -> None:
    # Not a power of two: the torus variants fold the extra ranks in; the rings fall back to a ring of p.
    assert_verified(build(name, p, chunks=2))


BUCKET_GRIDS = ["4x4", "3x5", "5x3", "16x4", "4x16", "1x7", "2x3x4", "3x1x3", "2x2x2x2", "7x2"]


@pytest.mark.parametrize("dims", BUCKET_GRIDS)
def test_the_synchronized_bucket_is_correct_for_any_number_of_parts(dims: str) -> None:
    for ports in (0, 1, 2, 3, 7):
        assert_verified(build("torus_bucket", ranks(dims), dims=dims, ports=ports, chunks=2, phases="synchronized"))


RING_GRIDS = ["3x3", "4x4", "8x8", "9x3", "3x9", "16x4", "4x16", "15x3", "1x8x1x8", "5", "2", "1"]


@pytest.mark.parametrize("dims", RING_GRIDS)
def test_hamiltonian_rings_are_correct(dims: str) -> None:
    for ports in (0, 1, 3):
        assert_verified(build("hamiltonian_rings", ranks(dims), dims=dims, ports=ports, chunks=2))


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(TORUS), sizes=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=3),
       ports=st.integers(0, 7), chunks=st.integers(1, 3))
def test_any_power_of_two_torus_any_ports_any_chunks(name: str, sizes: list[int], ports: int, chunks: int) -> None:
    dims = "x".join(map(str, sizes))
    assert_verified(build(name, math.prod(sizes), dims=dims, ports=ports, chunks=chunks))


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(1, 6), min_size=1, max_size=3), ports=st.integers(0, 7), chunks=st.integers(1, 2))
def test_any_torus_synchronized_bucket(sizes: list[int], ports: int, chunks: int) -> None:
    dims = "x".join(map(str, sizes))
    assert_verified(build("torus_bucket", math.prod(sizes), dims=dims, ports=ports, chunks=chunks,
                          phases="synchronized"))


@settings(max_examples=20, deadline=None)
@given(small=st.integers(3, 6), times=st.integers(1, 4), transpose=st.booleans(), ports=st.integers(0, 5))
def test_any_grid_with_hamiltonian_cycles(small: int, times: int, transpose: bool, ports: int) -> None:
    rows, cols = small * times, small
    if transpose:
        rows, cols = cols, rows
    algo = registry.get("allreduce", "hamiltonian_rings")
    params: Any = {"dims": f"{rows}x{cols}", "ports": ports}
    served = algo.unsupported(rows * cols, params) is None
    assert served == (math.gcd(small - 1, times) == 1)
    if served:
        assert_verified(algo.build(rows * cols, **params))


def test_grids_the_rings_cannot_serve_are_refused() -> None:
    algo = registry.get("allreduce", "hamiltonian_rings")
    why: Any = lambda p, dims: algo.unsupported(p, {"dims": dims}) or ""  # noqa: E731
    assert "1-D and 2-D tori only" in why(64, "4x4x4")
    assert "no edge-disjoint Hamiltonian cycles" in why(18, "6x3")  # gcd(3 - 1, 2) = 2
    assert "no edge-disjoint Hamiltonian cycles" in why(48, "4x12")  # gcd(3, 3) = 3
    assert "no edge-disjoint Hamiltonian cycles" in why(20, "4x5")  # neither divides the other
    assert "not 16" in why(16, "4x8")
    assert why(64, "16x4") == "" and why(12, "") == ""  # 3x4 has none: a ring of 12, two ways round


# --- what the paper describes ------------------------------------------------------------------------


def _ring_hops(d: int, q: int) -> int:
    d %= q
    return min(d, q - d)


def _step_hops(s: Schedule, dims: str) -> list[int]:
    """The most hops any transfer of each step crosses on the torus (minimal routes)."""
    g = Grid.parse(dims)

    def hops(a: int, b: int) -> int:
        return sum(_ring_hops(x - y, q) for x, y, q in zip(g.coords(a), g.coords(b), g.dims, strict=True))

    return [max(hops(t.src, t.dst) for t in step.transfers) for step in s.steps]


def test_latency_optimal_swing_takes_half_the_steps_with_the_same_peers() -> None:
    # 1-D, p = 16: peers |ρ(s)| = 1, 1, 3, 5 away, the whole buffer every step; bandwidth-optimal: twice the steps.
    s = build("swing_latency_optimal", 16, chunks=3)
    assert len(s.steps) == 4
    for i, step in enumerate(s.steps):
        assert {_ring_hops(t.dst - t.src, 16) for t in step.transfers} == {_ring_hops(rho(i), 16)}
        assert sorted((t.src, t.dst_index) for t in step.transfers) == [(r, c) for r in range(16) for c in range(3)]
    assert len(build("swing", 16).steps) == 8
    # torus:8x8: 6 steps of 1, 1, 1, 1, 3, 3 hops (dimensions in turn), against 12 steps of 20 hops.
    assert _step_hops(build("swing_torus_latency_optimal", 64, dims="8x8"), "8x8") == [1, 1, 1, 1, 3, 3]
    assert sum(_step_hops(build("swing_torus", 64, dims="8x8"), "8x8")) == 20


def test_rabenseifner_in_torus_distance_order_sends_its_largest_blocks_one_hop() -> None:
    # torus:8x8, one port: halving at 1, 1, 2, 2, 4, 4 hops with n/2, n/4, ... n/64; the library's row-major
    # Rabenseifner starts 4 rows away with n/2.
    s = build("rabenseifner_torus", 64, dims="8x8", ports=1)
    assert _step_hops(s, "8x8") == [1, 1, 2, 2, 4, 4, 4, 4, 2, 2, 1, 1]
    per_rank = [sum(t.count for t in step.transfers if t.src == 0) for step in s.steps[:6]]
    assert per_rank == [32, 16, 8, 4, 2, 1]
    assert _step_hops(build("rabenseifner", 64), "8x8")[:3] == [4, 2, 1]
    # Two parts in a dimension go opposite ways: at step 2 (rows, 2 apart) every rank sends +2 rows on one part
    # and -2 on the other.
    s2 = build("rabenseifner_torus", 64, dims="8x8", ports=2)
    moves: dict[int, set[int]] = {}
    for t in s2.steps[2].transfers:
        moves.setdefault(t.src, set()).add((t.dst // 8 - t.src // 8) % 8)
    assert len(moves) == 64
    assert all(m == {2, 6} for m in moves.values())


def test_the_synchronized_bucket_changes_dimension_all_at_once() -> None:
    def network_steps(s: Schedule) -> int:
        return sum(any(t.src != t.dst for t in step.transfers) for step in s.steps)

    # torus:16x4, 4 parts: each of the 4 phases as long as the 16-ring, 4·15 = 60 steps; independently 2(15 + 3).
    assert network_steps(build("torus_bucket", 64, dims="16x4", phases="synchronized")) == 60
    assert network_steps(build("torus_bucket", 64, dims="16x4")) == 36
    # The closed form (checked against the schedules to 64 ranks in test_library_costs.py) on the paper's tori.
    cost = registry.get("allreduce", "torus_bucket").cost
    assert cost is not None

    def steps(dims: str, phases: str) -> float:
        params: Any = {"dims": dims, "ports": 0, "phases": phases, "chunks": 1}  # texts among the integers
        return cost.steps(ranks(dims), 32, params)

    assert [steps(d, "synchronized") for d in ("64x16", "128x8", "256x4", "8x8x8", "8x8")] == [252, 508, 1020, 42, 28]
    assert [steps(d, "independent") for d in ("64x16", "128x8", "256x4", "8x8x8", "8x8")] == [156, 268, 516, 42, 28]


@pytest.mark.parametrize("dims", ["8x8", "64x16", "16x64", "128x8", "256x4", "64x64", "9x3"])
def test_the_two_cycles_are_hamiltonian_and_edge_disjoint(dims: str) -> None:
    g = Grid.parse(dims)
    cycles = hamiltonian_cycles(g)
    links: list[frozenset[int]] = []
    for cyc in cycles:
        assert sorted(cyc) == list(range(g.ranks))
        for a, b in zip(cyc, cyc[1:] + cyc[:1], strict=True):
            assert sum(_ring_hops(x - y, q) for x, y, q in zip(g.coords(a), g.coords(b), g.dims, strict=True)) == 1
            links.append(frozenset((a, b)))
    assert len(set(links)) == len(links) == 2 * g.ranks  # every link of the torus, once


def test_four_rings_load_every_directed_link_of_torus_8x8_once_per_step() -> None:
    torus_links = {(a, b) for a in range(64) for b in range(64) if _step_hops_pair(a, b) == 1}
    for step in build("hamiltonian_rings", 64, dims="8x8").steps[:3]:
        assert sorted((t.src, t.dst) for t in step.transfers) == sorted(torus_links)


def _step_hops_pair(a: int, b: int) -> int:
    g = Grid((8, 8))
    return sum(_ring_hops(x - y, q) for x, y, q in zip(g.coords(a), g.coords(b), g.dims, strict=True))


def test_constructions_outside_the_family_are_refused() -> None:
    with pytest.raises(ScheduleError, match="1-D and 2-D"):
        hamiltonian_cycles(Grid((8, 8, 8)))


# --- the paper's model, by hand ------------------------------------------------------------------------


def _swing_hops(q: int) -> list[int]:
    return [_ring_hops(rho(t), q) for t in range(q.bit_length() - 1)]


def _doubling_hops(q: int) -> list[int]:
    return [_ring_hops(1 << t, q) for t in range(q.bit_length() - 1)]


def hand_32b(name: str, dims: str) -> float:
    """The paper's model at 32 B: each step o plus its farthest message's hops at 400 ns (bytes left out)."""
    qs = [int(q) for q in dims.split("x") if int(q) > 1]
    p = math.prod(qs)
    if name == "swing_torus_latency_optimal":  # log2 p steps, ρ's hops per dimension
        return sum(OVERHEAD + h * HOP for q in qs for h in _swing_hops(q))
    if name == "recursive_doubling_torus":  # log2 p steps, 2^t hops per dimension
        return sum(OVERHEAD + h * HOP for q in qs for h in _doubling_hops(q))
    if name == "rabenseifner_torus":  # the halving and the doubling back
        return 2 * sum(OVERHEAD + h * HOP for q in qs for h in _doubling_hops(q))
    if name == "torus_bucket":  # synchronized: 2·D phases of max q - 1 one-hop steps
        return 2 * len(qs) * (max(qs) - 1) * (OVERHEAD + HOP)
    if name == "hamiltonian_rings":  # 2(p - 1) one-hop steps
        return 2 * (p - 1) * (OVERHEAD + HOP)
    raise AssertionError(name)


CASES_32B = [(n, d) for n in TORUS for d in ("8x8", "16x4", "4x4x4")] + [
    ("swing_torus_latency_optimal", "64x16"), ("recursive_doubling_torus", "64x16"),
    ("torus_bucket", "8x8"), ("torus_bucket", "16x4"), ("torus_bucket", "4x4x4"),
    ("hamiltonian_rings", "8x8"), ("hamiltonian_rings", "16x4"),
]


@pytest.mark.parametrize(("name", "dims"), CASES_32B)
def test_32_bytes_as_the_paper_models_it(name: str, dims: str) -> None:
    params: dict[str, str] = {"dims": dims}
    if name == "torus_bucket":
        params["phases"] = "synchronized"
    r = simulate(build(name, ranks(dims), **params), paper_torus(dims), 32, overhead=OVERHEAD)
    assert r.ok
    assert r.time == pytest.approx(hand_32b(name, dims), rel=1e-3)


def test_the_published_point_and_the_halved_steps() -> None:
    # torus:8x8 at 32 B: the published latency-optimal Swing, 7 us; the bandwidth-optimal one takes 14.
    assert hand_32b("swing_torus_latency_optimal", "8x8") == pytest.approx(7e-6)
    topo = paper_torus("8x8")
    lat = simulate(build("swing_torus_latency_optimal", 64, dims="8x8"), topo, 32, overhead=OVERHEAD).time
    bw = simulate(build("swing_torus", 64, dims="8x8"), topo, 32, overhead=OVERHEAD).time
    assert lat == pytest.approx(7e-6, rel=1e-3) and bw == pytest.approx(14e-6, rel=1e-3)


def test_512_mib_on_torus_8x8_by_hand() -> None:
    # Dimension-order routes (ties the way up), so that the q/2 steps are as the hand count has them; lockstep,
    # each step after the last, as the paper's model counts them (a dataflow run overlaps the steps' chunks).
    topo = routed(paper_torus("8x8"), "dimension")
    n = 512 * MIB

    def time(name: str, **params: Any) -> float:
        return simulate(build(name, 64, **params), topo, n, mode="lockstep").time

    # Rabenseifner, one port: a step of blocks n/2^(i+1) at d hops loads its busiest link d messages deep,
    # Σ d_i/2^(i+1) = 1/2 + 1/4 + 2/8 + 2/16 + 4/32 + 4/64 = 1.3125, twice (halving, doubling): 28.2 ms.
    one_port = time("rabenseifner_torus", dims="8x8", ports=1)
    assert one_port == pytest.approx(2 * 1.3125 * n / B + 28 * HOP, rel=1e-6)
    assert one_port == pytest.approx(28.2e-3, rel=2e-3)
    # Four ports: parts n/4, each link d deep but at d = 4 = q/2 both parts of a dimension go the same way:
    # 1/2 + 1/4 + 2/8 + 2/16 + 8/32 + 8/64 = 1.5 of n/4 each way.
    four = time("rabenseifner_torus", dims="8x8")
    assert four == pytest.approx(2 * 1.5 * n / 4 / B + 28 * HOP, rel=1e-6)
    # The library's row-major Rabenseifner: 4/2 + 2/4 + 1/8 + 4/16 + 2/32 + 1/64 = 2.953125 deep.
    assert time("rabenseifner") == pytest.approx(2 * 2.953125 * n / B + 28 * HOP, rel=1e-6)
    # Hamiltonian rings: 2(p-1) one-hop steps of n/(4p) on every directed link at once: about 5.3 ms; one ring 4x.
    rings = time("hamiltonian_rings", dims="8x8")
    assert rings == pytest.approx(2 * 63 / 64 * n / 4 / B + 126 * HOP, rel=1e-6)
    assert rings == pytest.approx(5.3e-3, rel=0.01)
    one_ring = time("hamiltonian_rings", dims="8x8", ports=1)
    assert one_ring == pytest.approx(2 * 63 / 64 * n / B + 126 * HOP, rel=1e-6)
