"""The algorithm library follows its papers: every family registered, each algorithm's structure as its paper
draws it, and the command line lists and verifies every one."""

from __future__ import annotations

import json
from contextlib import redirect_stdout
from io import StringIO

import pytest

from algorithms import registry
from algorithms.ir import ROOTED_KINDS, Buf, Op, Schedule
from algorithms.library.allreduce import _dbt_parents, _tree_shape
from runners.commands.cli import main

ALGORITHMS = [(a.kind.value, a.name) for a in registry.algorithms()]


def test_every_family_is_registered() -> None:
    want = {
        "allreduce": {"ring", "recursive_doubling", "rabenseifner", "binomial", "double_binary_tree", "direct",
                      "hierarchical", "swing", "swing_torus", "torus_bucket", "nccl_ring", "nccl_tree",
                      "swing_latency_optimal", "swing_torus_latency_optimal", "rabenseifner_torus",
                      "recursive_doubling_torus", "hamiltonian_rings"},
        "allgather": {"ring", "recursive_doubling", "bruck", "direct", "nccl_ring", "pat"},
        "reducescatter": {"ring", "recursive_halving", "direct", "nccl_ring", "pat"},
        "broadcast": {"binomial", "binary_tree", "chain", "linear", "scatter_allgather", "nccl_ring"},
        "reduce": {"binomial", "chain", "reducescatter_gather", "nccl_ring"},
        "scatter": {"binomial", "linear"},
        "gather": {"binomial", "linear"},
        "alltoall": {"pairwise", "bruck", "direct"},
        "alltoallv": {"direct", "pairwise", "bruck", "hierarchical"},
        "barrier": {"dissemination", "recursive_doubling", "central"},
    }
    have: dict[str, set[str]] = {}
    for kind, name in ALGORITHMS:
        have.setdefault(kind, set()).add(name)
    assert have == want


# --- worked examples: the structure the papers describe ---------------------------------------


def _pieces_sent(schedule: Schedule, rank: int) -> list[int]:
    """Chunks ``rank`` sends over the network in each step."""
    return [sum(t.count for t in s.transfers if t.src == rank and t.dst != rank) for s in schedule.steps]


def test_rabenseifner_halves_then_doubles_at_p8() -> None:
    # Thakur et al. 2005, Fig. 3/4: at p = 8 a rank sends n/2, n/4, n/8 reducing, then n/8, n/4, n/2.
    s = registry.build("allreduce", "rabenseifner", 8)
    for r in range(8):
        assert _pieces_sent(s, r) == [4, 2, 1, 1, 2, 4]
    assert [t.op for t in s.steps[0].transfers] == [Op.REDUCE] * 32


def test_power_of_two_algorithms_fold_extra_ranks_in_and_out() -> None:
    # p = 6: P = 4, extra ranks 4 and 5 hand their data to 0 and 1 first and get the result last.
    for kind, name in [("allreduce", "recursive_doubling"), ("allreduce", "rabenseifner"),
                       ("reducescatter", "recursive_halving"), ("barrier", "recursive_doubling")]:
        s = registry.build(kind, name, 6)
        first = {(t.src, t.dst) for t in s.steps[0].transfers if t.src != t.dst}
        last = {(t.src, t.dst) for t in s.steps[-1].transfers if t.src != t.dst}
        assert first == {(4, 0), (5, 1)}, (kind, name)
        assert last == {(0, 4), (1, 5)}, (kind, name)
        middle = {r for st_ in s.steps[1:-1] for t in st_.transfers for r in (t.src, t.dst)}
        assert middle <= {0, 1, 2, 3}, (kind, name)


def test_bruck_allgather_sends_min_of_2j_and_p_minus_2j_blocks() -> None:
    # Bruck et al. 1997: p = 5 takes 3 rounds of 1, 2 and 1 blocks, each to rank r - 2^j.
    s = registry.build("allgather", "bruck", 5, chunks=1)
    assert _pieces_sent(s, 0) == [1, 2, 1]
    assert {t.dst for st_ in s.steps[1:2] for t in st_.transfers if t.src == 3} == {1}


def test_bruck_alltoall_moves_position_i_by_its_bits() -> None:
    # Round t sends the positions with bit t set to rank r + 2^t: at p = 8, 4 blocks each round.
    s = registry.build("alltoall", "bruck", 8)
    assert len(s.steps) == 3
    for t, step in enumerate(s.steps):
        assert {(x.dst - x.src) % 8 for x in step.transfers if x.src != x.dst} == {1 << t}
        assert _pieces_sent(s, 0)[t] == 4


def test_nccl_btree_matches_the_diagram_in_trees_cc() -> None:
    # NCCL src/graph/trees.cc, 14 ranks: 0-8; 8: 4, 12; 4: 2, 6; 12: 10, 13; 2: 1, 3; ...
    first, _ = _dbt_parents(14)
    assert first == [-1, 2, 4, 2, 8, 6, 4, 6, 0, 10, 12, 10, 8, 12]
    # 12 ranks, mirror tree: 11-3; 3: 1, 7 (the right-hand diagram).
    _, second = _dbt_parents(12)
    assert second[11] == -1 and second[3] == 11 and second[1] == 3 and second[7] == 3
    # 13 ranks, shifted tree: 1-9; 9: 5, 0.
    _, second = _dbt_parents(13)
    assert second[1] == -1 and second[9] == 1 and second[5] == 9 and second[0] == 9


def test_double_binary_trees_are_complementary() -> None:
    for p in range(2, 65):
        shapes = [_tree_shape(parent) for parent in _dbt_parents(p)]
        busy = [{v for v in range(p) if len(children[v]) == 2} for children, _, _ in shapes]
        assert not busy[0] & busy[1], p  # nobody has two children in both trees
        if p % 2 == 0:  # mirror: every internal rank of one tree is a leaf of the other
            inner = [{v for v in range(p) if children[v]} for children, _, _ in shapes]
            assert not inner[0] & inner[1], p


def test_double_binary_tree_each_tree_carries_half() -> None:
    s = registry.build("allreduce", "double_binary_tree", 8, chunks=3)
    first, second = _dbt_parents(8)
    for t in (t for st_ in s.steps for t in st_.transfers):
        tree = first if t.src_index < 3 else second
        assert t.dst in (tree[t.src], *[v for v in range(8) if tree[v] == t.src])


def _relative(rank: int, root: int, p: int) -> int:
    return (rank - root) % p


@pytest.mark.parametrize(("kind", "toward_root"), [("broadcast", False), ("reduce", True)])
def test_chain_pipelines_chunk_c_over_hop_h_at_step_c_plus_h(kind: str, toward_root: bool) -> None:
    p, k, root = 6, 4, 2
    s = registry.build(kind, "chain", p, root=root, chunks=k)
    assert len(s.steps) == p + k - 2
    seen = set()
    for step, st_ in enumerate(s.steps):
        for t in st_.transfers:
            v = _relative(t.src, root, p)
            hop = p - 1 - v if toward_root else v
            assert t.src_index == t.dst_index == step - hop
            seen.add((hop, t.src_index))
    assert seen == {(h, c) for h in range(p - 1) for c in range(k)}


def test_binary_tree_pipelines_by_depth() -> None:
    p, k, root = 10, 3, 7
    s = registry.build("broadcast", "binary_tree", p, root=root, chunks=k)
    for step, st_ in enumerate(s.steps):
        for t in st_.transfers:
            v = _relative(t.src, root, p)
            assert _relative(t.dst, root, p) in (2 * v + 1, 2 * v + 2)
            assert t.src_index == step - (v + 1).bit_length() + 1  # chunk c leaves depth d at c + d
    assert len(s.steps) == 3 + k - 1


def test_linear_broadcast_is_one_step_of_whole_buffers_out_of_the_root() -> None:
    for p, root, k in ((2, 1, 1), (5, 3, 2), (8, 0, 4)):
        s = registry.build("broadcast", "linear", p, root=root, chunks=k)
        assert len(s.steps) == 1
        got = sorted((t.src, t.dst, t.src_index, t.count) for t in s.steps[0].transfers)
        assert got == sorted((root, r, 0, k) for r in range(p) if r != root)


def test_double_binary_tree_pipelines_leaves_first() -> None:
    # Leaves (height 0) send chunk c up at step c, so with k chunks the first k steps each start one.
    k = 4
    s = registry.build("allreduce", "double_binary_tree", 16, chunks=k)
    first, _ = _dbt_parents(16)
    leaves = [v for v in range(16) if v not in first]
    for c in range(k):
        ups = {t.src for t in s.steps[c].transfers if t.op is Op.REDUCE and t.src_index == c}
        assert set(leaves) <= ups
    assert len(s.steps) == 2 * 4 + k - 1


def test_hierarchical_groups_and_leftovers() -> None:
    # p = 10, g = 4: two groups of 4; ranks 8 and 9 fold into ranks 0 and 1.
    s = registry.build("allreduce", "hierarchical", 10, group=4)
    assert len(s.steps) == 2 * 3 + 2 * 1 + 2
    assert {(t.src, t.dst) for t in s.steps[0].transfers} == {(8, 0), (9, 1)}
    inside = {(t.src, t.dst) for t in s.steps[1].transfers}
    assert all(a // 4 == b // 4 for a, b in inside)  # phase 1 stays inside the groups
    across = {(t.src, t.dst) for t in s.steps[4].transfers}
    assert all(a % 4 == b % 4 and a // 4 != b // 4 for a, b in across)  # phase 2 crosses them


def test_scatter_and_gather_keep_passing_pieces_in_scratch() -> None:
    for kind in ("scatter", "gather"):
        s = registry.build(kind, "binomial", 8, root=5, chunks=2)
        assert s.scratch_chunks == 3 * 2  # relative rank 4 forwards the pieces of 5, 6, 7
        bufs = {t.dst_buf for st_ in s.steps for t in st_.transfers}
        assert Buf.SCRATCH in bufs


def test_direct_algorithms_take_one_step_each_way() -> None:
    assert len(registry.build("allreduce", "direct", 7).steps) == 2
    for kind, name in [("allgather", "direct"), ("alltoall", "direct"), ("scatter", "linear"),
                       ("gather", "linear")]:
        kwargs = {"root": 3} if kind in ("scatter", "gather") else {}
        assert len(registry.build(kind, name, 7, **kwargs).steps) == 1  # type: ignore[arg-type]


# --- the command line ------------------------------------------------------------------------


def _cli(*argv: str) -> tuple[int, str]:
    out = StringIO()
    with redirect_stdout(out):
        code = main(list(argv))
    return code, out.getvalue()


def test_list_shows_every_algorithm_with_its_cost() -> None:
    code, out = _cli("list", "--json")
    rows = {(r["collective"], r["algorithm"]): r for r in json.loads(out)["algorithms"]}
    assert code == 0 and set(rows) == set(ALGORITHMS)
    assert all(r["cost"] for r in rows.values())
    assert "group" in rows[("allreduce", "hierarchical")]["parameters"]


@pytest.mark.parametrize(("kind", "name"), ALGORITHMS)
def test_cli_verifies_every_algorithm(kind: str, name: str) -> None:
    extra = ["--root", "4"] if registry.get(kind, name).kind in ROOTED_KINDS else []
    code, out = _cli("verify", "-c", kind, "-a", name, "-p", "12", "--json", *extra)
    assert code == 0 and json.loads(out)["ok"]


def test_cli_rejects_a_bad_group_size(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "-c", "allreduce", "-a", "hierarchical", "-p", "8", "--param", "group=0"]) == 2
    assert "group must be an integer >= 1" in capsys.readouterr().err
