"""Swing (1-D and multiport on a torus) and the bucket torus all-reduce.

Correct at every world size and grid they serve up to 64 ranks; the peers and ports the papers
describe; the closed forms, computed by hand here, equal the simulator on a fully connected
topology (every pair its own link both ways, so nothing contends) in lockstep, the α-β model's
execution; and the efficiency against ``sim.bounds.bound`` on torus:4x4 and torus:8x8.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from algorithms import registry
from algorithms.ir import Schedule
from algorithms.library.swing import rho, swing_matching
from sim.bounds import bound
from sim.engine import simulate
from sim.topology import from_spec
from sim.verify import verify

GIB = 2**30
B, ALPHA = 1e9, 1e-6  # the contention-free topology's links


def build(name: str, p: int, **params: Any) -> Schedule:
    return registry.build("allreduce", name, p, **params)


# --- correctness -------------------------------------------------------------------------------------


@pytest.mark.parametrize("p", range(1, 65))
def test_swing_is_correct_for_every_p_to_64(p: int) -> None:
    assert verify(build("swing", p, chunks=2)).ok


QUICK = [*range(1, 17), 24, 32, 63, 64]


@pytest.mark.parametrize("p", QUICK)
@pytest.mark.parametrize("name", ["swing_torus", "torus_bucket"])
def test_torus_algorithms_are_correct_on_their_default_grids(name: str, p: int) -> None:
    assert verify(build(name, p)).ok


@pytest.mark.slow
@pytest.mark.parametrize("p", sorted(set(range(1, 65)) - set(QUICK)))
@pytest.mark.parametrize("name", ["swing_torus", "torus_bucket"])
def test_torus_algorithms_are_correct_for_every_p_to_64(name: str, p: int) -> None:
    assert verify(build(name, p, chunks=2)).ok


def _grids(max_ranks: int, ndim: int, sizes: list[int]) -> list[str]:
    out: list[str] = []

    def walk(prefix: list[int]) -> None:
        if len(prefix) == ndim:
            out.append("x".join(map(str, prefix)))
            return
        for q in sizes:
            if math.prod(prefix) * q <= max_ranks:
                walk([*prefix, q])

    walk([])
    return out


POW2 = [1, 2, 4, 8, 16, 32, 64]


@pytest.mark.parametrize("dims", _grids(64, 2, POW2))
def test_swing_torus_is_correct_on_every_power_of_two_2d_grid_to_64(dims: str) -> None:
    p = math.prod(int(q) for q in dims.split("x"))
    assert verify(build("swing_torus", p, dims=dims)).ok, dims


# Every 3-D and 4-D power-of-two grid to 32 ranks, and at 64 ranks one of each shape (even, lopsided, 4-D).
@pytest.mark.slow
@pytest.mark.parametrize("dims", _grids(32, 3, POW2) + _grids(32, 4, POW2[:4]) + ["4x4x4", "2x16x2", "2x2x2x8"])
def test_swing_torus_is_correct_on_every_power_of_two_3d_and_4d_grid_to_32(dims: str) -> None:
    p = math.prod(int(q) for q in dims.split("x"))
    assert verify(build("swing_torus", p, dims=dims)).ok, dims


@pytest.mark.parametrize("dims", ["2x4x4", "4x4x2", "2x2x2x2", "4x2x2x2", "2x2x2x2x2x2"])
@pytest.mark.parametrize("ports", [1, 2, 3, 5, 9])
def test_swing_torus_is_correct_for_any_number_of_parts(dims: str, ports: int) -> None:
    p = math.prod(int(q) for q in dims.split("x"))
    assert verify(build("swing_torus", p, dims=dims, ports=ports, chunks=2)).ok


@pytest.mark.parametrize("dims", ["4x4", "3x5", "5x3", "1x7", "7x1", "2x3x4", "3x1x3", "2x2x2x2"])
@pytest.mark.parametrize("ports", [0, 1, 2, 3, 7])
def test_torus_bucket_is_correct_for_any_number_of_parts(dims: str, ports: int) -> None:
    p = math.prod(int(q) for q in dims.split("x"))
    assert verify(build("torus_bucket", p, dims=dims, ports=ports, chunks=2)).ok


# Every 2-D grid to 32 ranks, and beyond it grids with a prime side, a side of 1 and the square.
@pytest.mark.slow
@pytest.mark.parametrize("dims", [*_grids(32, 2, list(range(1, 33))), "7x9", "5x13", "11x4", "1x61", "64x1", "8x8"])
def test_torus_bucket_is_correct_on_every_2d_grid_to_32(dims: str) -> None:
    p = math.prod(int(q) for q in dims.split("x"))
    assert verify(build("torus_bucket", p, dims=dims)).ok, dims


def test_grids_the_algorithms_cannot_serve_are_refused() -> None:
    def reason(name: str, p: int, dims: str) -> str:
        params: Any = {"dims": dims}  # a text parameter
        return registry.get("allreduce", name).unsupported(p, params) or ""

    assert "not 16" in reason("swing_torus", 16, "4x8")
    assert "power of two" in reason("swing_torus", 12, "3x4")
    assert reason("torus_bucket", 12, "3x4") == ""
    assert "look like" in reason("torus_bucket", 12, "3by4")
    st_ = registry.get("allreduce", "swing_torus")
    assert st_.unsupported(12, {}) is None  # no dims: 8 ranks on 2x4, 4 folded in


# --- what the papers describe ------------------------------------------------------------------------


def test_rho_is_the_alternating_sum_of_powers_of_minus_two() -> None:
    # De Sensi et al. 2024: ρ(s) = Σ_{i=0..s} (-2)^i.
    assert [rho(s) for s in range(7)] == [1, -1, 3, -5, 11, -21, 43]
    assert all(rho(s) == sum((-2) ** i for i in range(s + 1)) for s in range(20))


def test_swing_peers_even_ranks_forward_odd_ranks_back() -> None:
    # q = 8, step 2 (ρ = 3): 0 -> 3, 1 -> 1 - 3 = 6, 2 -> 5, 3 -> 0, ...; mirrored: 0 -> -3 = 5.
    assert swing_matching(8, 2) == [3, 6, 5, 0, 7, 2, 1, 4]
    assert swing_matching(8, 2, -1) == [5, 4, 7, 6, 1, 0, 3, 2]
    assert swing_matching(8, 0) == [1, 0, 3, 2, 5, 4, 7, 6]
    assert swing_matching(8, 1) == [7, 2, 1, 4, 3, 6, 5, 0]


def _ring_distance(a: int, b: int, p: int) -> int:
    return min((a - b) % p, (b - a) % p)


@pytest.mark.parametrize("p", [2, 4, 8, 16, 32, 64])
def test_swing_peers_are_rho_apart_and_the_halving_halves(p: int) -> None:
    L = p.bit_length() - 1
    s = build("swing", p)
    dist = [{_ring_distance(t.src, t.dst, p) for t in step.transfers} for step in s.steps]
    want = [min(abs(rho(i)) % p, p - abs(rho(i)) % p) for i in range(L)]
    assert dist == [{d} for d in want + want[::-1]]  # 1, 1, 3, 5, 11, 21 (mod p), then mirrored
    # Reduce-scatter step i: each rank sends p / 2^(i+1) of its p blocks; the all-gather mirrors it.
    sends = [len([t for t in step.transfers if t.src == 0]) for step in s.steps]
    assert sends == [p >> (i + 1) for i in range(L)] + [p >> (i + 1) for i in reversed(range(L))]


def _torus_links(rows: int, cols: int) -> set[tuple[int, int]]:
    out = set()
    for r in range(rows * cols):
        i, j = divmod(r, cols)
        out |= {(r, i * cols + (j + 1) % cols), (r, i * cols + (j - 1) % cols),
                (r, (i + 1) % rows * cols + j), (r, (i - 1) % rows * cols + j)}
    return out


@pytest.mark.parametrize("name", ["swing_torus", "torus_bucket"])
def test_on_a_4x4_torus_every_step_loads_every_directed_link_once(name: str) -> None:
    # 4 parts, one per direction: each step sends on all 64 directed links of torus:4x4, the same
    # number of chunks on each, and nowhere else.
    links = _torus_links(4, 4)
    for i, step in enumerate(build(name, 16, dims="4x4").steps):
        load: dict[tuple[int, int], int] = {}
        for t in step.transfers:
            load[(t.src, t.dst)] = load.get((t.src, t.dst), 0) + t.count
        assert set(load) == links, i
        assert len(set(load.values())) == 1, i


def test_the_single_part_bucket_uses_one_port() -> None:
    # ports=1: the textbook bucket, rings forward along x, then y, then x again.
    s = build("torus_bucket", 16, dims="4x4", ports=1)
    for t in (t for step in s.steps for t in step.transfers):
        i, j = divmod(t.src, 4)
        assert t.dst in (i * 4 + (j + 1) % 4, (i + 1) % 4 * 4 + j)
    assert len(s.steps) == 2 * (3 + 3)


# --- closed forms ------------------------------------------------------------------------------------


def _hand(name: str, p: int, n: float, dims: str = "", ports: int = 0) -> float:
    """The lockstep time on a fully connected topology, worked out from the algorithms' descriptions."""
    if name == "swing" or (name == "swing_torus" and not dims):
        big = 1 << (p.bit_length() - 1)
        L, e = big.bit_length() - 1, int(p != big)
        m = 1 if name == "swing" else (4 if big >= 16 else 2 if big >= 2 else 1)  # 2·D parts on the auto grid
        # log2 P halving steps of n/(m·2^(i+1)) per part on m links, mirrored; the fold moves n each way.
        return (2 * L + 2 * e) * ALPHA + (2 * (big - 1) / big / m + 2 * e) * n / B
    qs = [int(q) for q in dims.split("x")]
    active = [q for q in qs if q > 1]
    m = max(1, 2 * len(active) if ports == 0 else ports)
    if name == "swing_torus":  # square power-of-two torus with sides >= 4: m parts on m distinct links
        return 2 * sum(q.bit_length() - 1 for q in active) * ALPHA + 2 * (p - 1) / p * n / (m * B)
    # torus_bucket: a ring of q - 1 steps per reduce-scatter and all-gather in every dimension;
    # bandwidth-optimal in all (2(p-1)/p·n per rank), spread over the m parts' links.
    return 2 * sum(q - 1 for q in active) * ALPHA + 2 * (p - 1) / p * n / (m * B)


CASES = [
    ("swing", 1, "", 0), ("swing", 2, "", 0), ("swing", 8, "", 0), ("swing", 16, "", 0), ("swing", 6, "", 0),
    ("swing", 13, "", 0),
    ("swing_torus", 16, "4x4", 0), ("swing_torus", 64, "8x8", 0), ("swing_torus", 4, "4", 0),
    ("swing_torus", 64, "4x4x4", 0), ("swing_torus", 16, "4x4", 2), ("swing_torus", 20, "", 0),
    ("swing_torus", 1, "", 0),
    ("torus_bucket", 16, "4x4", 1), ("torus_bucket", 15, "3x5", 1), ("torus_bucket", 24, "2x3x4", 1),
    ("torus_bucket", 16, "4x4", 0), ("torus_bucket", 9, "3x3", 0), ("torus_bucket", 27, "3x3x3", 0),
    ("torus_bucket", 7, "1x7", 0), ("torus_bucket", 16, "4x4", 2), ("torus_bucket", 1, "1x1", 0),
]


def _simulated(name: str, p: int, dims: str, ports: int, n: float, chunks: int = 1) -> float:
    params: dict[str, int | str] = {"chunks": chunks}
    if name != "swing":
        params.update(dims=dims, ports=ports)
    topo = from_spec(f"full:{p}", bandwidth=B, latency=ALPHA)
    r = simulate(build(name, p, **params), topo, n, mode="lockstep")
    assert r.ok
    return r.time


@pytest.mark.parametrize(("name", "p", "dims", "ports"), CASES)
def test_closed_form_equals_the_simulator_without_contention(name: str, p: int, dims: str, ports: int) -> None:
    n = 3 * 2**20
    assert _simulated(name, p, dims, ports, n) == pytest.approx(_hand(name, p, n, dims, ports), rel=1e-9)


def test_the_registered_cost_is_the_hand_formula() -> None:
    # swing at p = 6 (P = 4, e = 1): 2(2+1) = 6 steps, (2·3/4 + 2)·n bytes, (3/4 + 1)·n reduced.
    cost = registry.get("allreduce", "swing").cost
    assert cost is not None
    assert (cost.steps(6, 8.0, {}), cost.bytes(6, 8.0, {}), cost.reduced(6, 8.0, {})) == (6, 28.0, 14.0)
    # torus_bucket on 3x5: 2(2 + 4) = 12 steps, 2·14/15·n.
    tb = registry.get("allreduce", "torus_bucket").cost
    assert tb is not None
    dims: Any = registry.get("allreduce", "torus_bucket").resolve({"dims": "3x5"})  # with its defaults, as called
    assert tb.steps(15, 15.0, dims) == 12 and tb.bytes(15, 15.0, dims) == 28.0


@settings(max_examples=25, deadline=None)
@given(case=st.sampled_from(CASES), size=st.integers(0, 2**31), chunks=st.integers(1, 3))
def test_closed_form_holds_at_any_size(case: tuple[str, int, str, int], size: int, chunks: int) -> None:
    name, p, dims, ports = case
    got = _simulated(name, p, dims, ports, size, chunks)
    assert got == pytest.approx(_hand(name, p, size, dims, ports), rel=1e-9, abs=1e-15)


@settings(max_examples=15, deadline=None)
@given(name=st.sampled_from(["swing", "swing_torus", "torus_bucket"]), size=st.integers(1, 2**31),
       spec=st.sampled_from(["torus:4x4", "torus:2x4", "torus:3x3"]))
def test_never_faster_than_the_bound_and_always_correct(name: str, size: int, spec: str) -> None:
    topo = from_spec(spec)
    r = simulate(build(name, topo.ranks), topo, size)
    assert r.ok
    assert r.time >= bound("allreduce", topo, size).bound_s * (1 - 1e-9)


# --- efficiency on tori ------------------------------------------------------------------------------


def _efficiency(name: str, spec: str, **params: int | str) -> float:
    topo = from_spec(spec)
    return bound("allreduce", topo, GIB).bound_s / simulate(build(name, topo.ranks, **params), topo, GIB).time


def test_multiport_swing_reaches_the_bound_on_torus_4x4() -> None:
    # Measured 0.99921 (10.0743 ms against the 10.0663 ms traffic term): every directed link busy every
    # step, one hop each; what is left is 8 steps of 1 us latency. The library's best before: 28%.
    assert _efficiency("swing_torus", "torus:4x4") >= 0.999
    # The bucket with one part per direction: bandwidth-optimal too, 12 steps of latency: 0.99881.
    assert _efficiency("torus_bucket", "torus:4x4") >= 0.998
    # The textbook bucket (one port of four): 0.2499 in send order (the default; a quarter of the links, less
    # latency; 0.2777 when every ready transfer starts at once, in_flight 0); 1-D swing on the row-major ring:
    # 0.1785 (0.2059 with in_flight 0).
    assert 0.24 <= _efficiency("torus_bucket", "torus:4x4", ports=1) <= 0.26
    assert 0.17 <= _efficiency("swing", "torus:4x4") <= 0.19


def test_efficiency_on_torus_8x8() -> None:
    # Bucket, one part per direction: 0.99736 (every transfer one hop; 28 steps of latency).
    assert _efficiency("torus_bucket", "torus:8x8") >= 0.997
    # Multiport Swing: 0.91197. Its third step in each dimension goes |ρ(2)| = 3 hops, so those two
    # steps (1/32 and 1/64 of a part each way) load every link three times: the link time is
    # Σ hops·size = 63/64 + 2·(1/32 + 1/64) = 1.078 times the traffic term's, 1/1.078 = 0.928, less latency.
    eff = _efficiency("swing_torus", "torus:8x8")
    assert 0.91 <= eff <= 1 / 1.078125
