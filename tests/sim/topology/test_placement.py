"""Rank placement: snake cycles on tori, placement files, relabelled topologies, stretched pairs."""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from algorithms.errors import CollschedError
from algorithms.library import allreduce
from sim import topology as T
from sim.engine.reference import simulate
from sim.topology import Topology, TopologyError
from sim.topology.placement import FORMAT, place, placement, snake_order, stretched_pairs
from sim.topology.strategies import placements, topologies


def _hops(topo: Topology, a: int, b: int) -> int:
    return len(topo.route(a, b)) - 1


# -- identity and snake on torus:4x4 ------------------------------------------------------


def test_identity_ring_on_torus_4x4_has_the_row_ends_stretched() -> None:
    # Row-major 4x4: rank r sits at (r // 4, r % 4). The ring sends r -> r+1 (mod 16) in both phases.
    # Within a row that is one link; from a row's last column to the next row's first column
    # (3 -> 4, 7 -> 8, 11 -> 12, and 15 -> 0 across the wrap) it is one row down and one column
    # across the wrap-around: two links.
    topo = T.torus(4, 4)
    got = stretched_pairs(allreduce.ring(16), place(topo, placement("identity", topo, 16)))
    assert got == [(3, 4, 2), (7, 8, 2), (11, 12, 2), (15, 0, 2)]
    assert stretched_pairs(allreduce.ring(16), topo) == got


def test_snake_ring_on_torus_4x4_has_no_stretched_pairs() -> None:
    topo = T.torus(4, 4)
    mapping = placement("snake", topo, 16)
    # The boustrophedon, written out: rows alternate direction, and 12 -> 0 is the column wrap.
    assert mapping == (0, 1, 2, 3, 7, 6, 5, 4, 8, 9, 10, 11, 15, 14, 13, 12)
    assert stretched_pairs(allreduce.ring(16), place(topo, mapping)) == []


@pytest.mark.parametrize("rows", range(1, 8))
@pytest.mark.parametrize("cols", range(1, 8))
def test_snake_is_a_hamiltonian_cycle_of_every_torus(rows: int, cols: int) -> None:
    order = snake_order(rows, cols)
    assert sorted(order) == list(range(rows * cols))
    for k, a in enumerate(order):
        b = order[(k + 1) % len(order)]
        i, j, i2, j2 = a // cols, a % cols, b // cols, b % cols
        # Adjacent on the torus: same row and neighbouring columns (mod cols), or the converse.
        di, dj = (i2 - i) % rows, (j2 - j) % cols
        assert a == b or (di == 0 and dj in (1, cols - 1)) or (dj == 0 and di in (1, rows - 1)), (k, a, b)


def test_snake_ring_runs_at_one_links_rate() -> None:
    topo, p, n = T.torus(4, 4), 16, 256 * 2**20
    alpha, bandwidth = 1e-6, 50e9  # torus defaults: 1 us and 50 GB/s per link
    closed_form = 2 * (p - 1) * (alpha + n / (p * bandwidth))  # a uniform ring of p ranks
    schedule = allreduce.ring(p)
    snake = simulate(schedule, place(topo, placement("snake", topo, p)), n)
    identity = simulate(schedule, place(topo, placement("identity", topo, p)), n)
    assert snake.ok and identity.ok
    assert snake.time == pytest.approx(closed_form, rel=1e-9)
    # Row-major, two ring messages share the wrap links, so the ring runs near half the link rate.
    assert identity.time > 1.5 * snake.time


# -- placement specs and their errors ------------------------------------------------------


def test_snake_needs_a_torus() -> None:
    for topo in (T.ring(8), T.single_switch(8), T.fat_tree(2)):
        with pytest.raises(TopologyError, match=f"snake.*{topo.name}"):
            placement("snake", topo, topo.ranks)
    down = T.torus(4, 4).with_link_down(3, 7)
    with pytest.raises(TopologyError, match="torus:4x4 \\(3-7 down\\)"):
        placement("snake", down, 16)


def test_snake_checks_the_links_of_a_topology_named_like_a_torus() -> None:
    fake = Topology(T.ring(16).graph, "torus:4x4")
    with pytest.raises(TopologyError, match="lacks the torus link 3 -> 7"):
        placement("snake", fake, 16)


def test_ranks_must_match_and_unknown_specs_are_named() -> None:
    topo = T.torus(3, 3)
    with pytest.raises(TopologyError, match="schedule has 8 ranks but topology torus:3x3 has 9"):
        placement("identity", topo, 8)
    with pytest.raises(TopologyError, match="unknown placement 'zigzag'"):
        placement("zigzag", topo, 9)


def _write(tmp_path: Path, doc: object, name: str = "place.json") -> str:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc), encoding="utf-8")
    return str(path)


def test_placement_files_in_both_forms(tmp_path: Path) -> None:
    topo = T.torus(2, 3)
    order = [0, 1, 2, 5, 4, 3]
    assert placement(_write(tmp_path, {"format": FORMAT, "ranks": order}), topo, 6) == tuple(order)
    assert placement(_write(tmp_path, order, "bare.json"), topo, 6) == tuple(order)


@pytest.mark.parametrize(("doc", "message"), [
    ([0, 1, 2, 3, 4, 4], r"entry\[5\]: node 4 is already placed at entry\[4\].*permutation"),
    ({"format": FORMAT, "ranks": [0, 1, 2, 2, 4, 5]}, r"ranks\[3\]: node 2 is already placed at ranks\[2\]"),
    ([0, 1, 2, 3, 4], r"5 entries for the 6 ranks of torus:2x3"),
    ([0, 1, 2, 3, 4, 5, 0], r"7 entries for the 6 ranks"),
    ([0, 1, 2, 3, 4, 6], r"entry\[5\]: unknown node 6 \(torus:2x3 has rank nodes 0..5\)"),
    ([0, 1, "s0", 3, 4, 5], r"entry\[2\]: 's0' is an unknown node, not a rank node"),
    ([0, 1, 2.0, 3, 4, 5], r"entry\[2\]: a rank node is an integer 0..5, got 2.0"),
    ([True, 1, 2, 3, 4, 5], r"entry\[0\]: a rank node is an integer 0..5, got True"),
    ("[0, 1, 2,", r"not valid JSON"),
    ({"format": "collsched.placement/2", "ranks": [0, 1, 2, 3, 4, 5]}, r"format: expected 'collsched.placement/1'"),
    ({"format": FORMAT, "ranks": [0, 1, 2, 3, 4, 5], "name": "x"}, r"unknown field 'name'"),
    ({"format": FORMAT}, r"missing field 'ranks'"),
    ({"format": FORMAT, "ranks": "012345"}, r"ranks: expected a list of nodes, got str"),
    (7, r"a placement is a JSON list of nodes or a collsched.placement/1 object, got a JSON int"),
])
def test_bad_placement_files_name_the_file_and_the_problem(tmp_path: Path, doc: object, message: str) -> None:
    path = _write(tmp_path, doc)
    with pytest.raises(TopologyError, match=message) as err:
        placement(path, T.torus(2, 3), 6)
    assert str(err.value).startswith(path)
    assert isinstance(err.value, CollschedError)


def test_a_switch_is_not_a_rank_node(tmp_path: Path) -> None:
    path = _write(tmp_path, [0, "switch", 2, 3])
    with pytest.raises(TopologyError, match=r"entry\[1\]: 'switch' is a switch of switch:4, not a rank node"):
        placement(path, T.single_switch(4), 4)


def test_unreadable_placement_file(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match=r"placement file .*: cannot read: is a directory"):
        placement(str(tmp_path), T.ring(4), 4)  # a directory exists but is no file


# -- place() -----------------------------------------------------------------------------------


def test_place_relabels_ranks_keeps_switches_and_explicit_routes() -> None:
    g = nx.DiGraph()
    for r in range(4):
        g.add_edge(r, "hub", bandwidth=1e9, latency=1e-6)
        g.add_edge("hub", r, bandwidth=1e9, latency=1e-6)
        g.add_edge(r, (r + 1) % 4, bandwidth=2e9, latency=1e-6)
    topo = Topology(g, "wheel", {(0, 2): (0, 1, 2)})
    placed = place(topo, [2, 0, 3, 1], name="wheel placed")  # new rank 0 is old node 2, ...
    assert placed.name == "wheel placed" and placed.ranks == 4
    assert set(placed.graph.nodes) == {0, 1, 2, 3, "hub"}
    # Old link 2 -> 3 is new 0 -> 2, old 3 -> 0 is new 2 -> 1, at the old link's bandwidth.
    assert placed.bandwidth(0, 2) == 2e9 and placed.bandwidth(2, 1) == 2e9 and not placed.graph.has_edge(0, 1)
    # Old explicit route 0 -> 1 -> 2 is new 1 -> 3 -> 0.
    assert placed.routes == {(1, 0): (1, 3, 0)}
    assert placed.route(1, 0) == (1, 3, 0)
    assert place(topo, range(4)).name == "wheel (placed)"


def test_place_rejects_what_is_not_a_permutation() -> None:
    topo = T.ring(4)
    with pytest.raises(TopologyError, match=r"placement\[2\]: node 1 is already placed at placement\[1\]"):
        place(topo, [0, 1, 1, 3])
    with pytest.raises(TopologyError, match="3 entries for the 4 ranks"):
        place(topo, [0, 1, 2])
    with pytest.raises(TopologyError, match="expected a list of 4 rank nodes"):
        place(topo, "0123")


_SHAPES = [T.torus(3, 4), T.fat_tree(4), T.cluster(2, 3), T.unidirectional_ring(6)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_place_keeps_every_route_length_under_the_inverse_mapping(data: st.DataObject) -> None:
    topo = data.draw(st.one_of(st.sampled_from(_SHAPES), st.integers(2, 7).flatmap(topologies)))
    p = topo.ranks
    mapping = data.draw(placements(topo))
    assert sorted(mapping) == list(range(p))
    placed = place(topo, mapping)
    for a in range(p):
        for b in range(p):
            new, old = placed.route_links(a, b), topo.route_links(mapping[a], mapping[b])
            assert len(new[0]) == len(old[0]), (a, b)
            # Routing compares latencies in whole femtoseconds, so two routes within 1 fs tie and the
            # relabelled graph may break the tie the other way (hypothesis found 0.0 vs 2.2e-16 s).
            assert new[1] == pytest.approx(old[1], rel=1e-12, abs=1e-15)
    schedule = allreduce.ring(p)
    result = simulate(schedule, placed, 2**20)
    assert result.ok, result.violations


def test_placements_strategy_wants_a_topology() -> None:
    with pytest.raises(TopologyError, match="placements needs a Topology, got int"):
        placements(4)  # type: ignore[arg-type]


# -- stretched_pairs' idea of one hop ------------------------------------------------------


def test_one_hop_is_the_nearest_two_ranks_unless_told() -> None:
    star = T.single_switch(6)
    assert stretched_pairs(allreduce.ring(6), star) == []  # every message crosses the switch: 2 links
    assert stretched_pairs(allreduce.ring(6), star, baseline=1) == [(r, (r + 1) % 6, 2) for r in range(6)]
    # Fat tree k=4: two ranks per edge switch (2 links), four per pod (4 links), else 6 links.
    want = [(r, (r + 1) % 16, 4 if r % 4 == 1 else 6) for r in range(16) if r % 2 == 1]
    assert stretched_pairs(allreduce.ring(16), T.fat_tree(4)) == sorted(want)
    with pytest.raises(TopologyError, match="baseline must be an integer >= 1"):
        stretched_pairs(allreduce.ring(6), star, baseline=0)
    with pytest.raises(TopologyError, match="has 6 ranks but the schedule needs 4"):
        stretched_pairs(allreduce.ring(4), star)


def test_remote_pairs_from_columns_are_the_pairs_of_the_transfers() -> None:
    from algorithms import registry
    from sim.topology.placement import _remote_pairs

    for kind, name, p in (("allreduce", "ring", 6), ("alltoall", "pairwise", 5), ("broadcast", "binomial", 7),
                          ("allreduce", "recursive_doubling", 8)):
        s = registry.build(kind, name, p, root=0 if kind == "broadcast" else None)
        want = sorted({(t.src, t.dst) for step in s.steps for t in step.transfers if t.src != t.dst})
        assert _remote_pairs(s) == want
