"""NCCL's rings and trees as its source builds them: rail-matched rings that use every NIC (counted by hand),
and the chain + double binary tree whose parent tables are written out by hand from src/graph/trees.cc."""

from __future__ import annotations

from collections import Counter

import pytest

from algorithms import registry
from algorithms.errors import RegistryError
from algorithms.ir import Schedule
from algorithms.library.nccl import rail_rings, tree_parents
from algorithms.library.pat import aggregation, offset_groups
from sim.verify.verifier import verify


def _edges(ring: list[int]) -> list[tuple[int, int]]:
    return [(ring[i], ring[(i + 1) % len(ring)]) for i in range(len(ring))]


def test_a_two_node_ring_written_out_by_hand() -> None:
    # G = 4, 2 nodes, channel 0: node 0 enters at GPU 0 and walks up to GPU 3; node 1 enters at GPU 3
    # (rank 7) and walks down to GPU 0 (rank 4), which hands over to GPU 0 of node 0.
    assert rail_rings(8, 4, 1) == [[0, 1, 2, 3, 7, 6, 5, 4]]
    # Channel 1 starts one GPU on: crossings on GPUs 0 and 1 instead of 3 and 0.
    assert rail_rings(8, 4, 2)[1] == [1, 2, 3, 0, 4, 7, 6, 5]


@pytest.mark.parametrize(("g", "nodes"), [(2, 2), (2, 4), (4, 2), (4, 3), (4, 4), (8, 1), (8, 2), (8, 3), (8, 4)])
def test_rings_cross_nodes_only_on_one_rail_and_every_nic_sends_and_receives_once(g: int, nodes: int) -> None:
    p = g * nodes
    rings = rail_rings(p, g, g)
    sent: Counter[int] = Counter()
    received: Counter[int] = Counter()
    for ring in rings:
        assert sorted(ring) == list(range(p))  # each ring visits every rank once
        for a, b in _edges(ring):
            if a // g != b // g:
                assert a % g == b % g, f"ring edge {a} -> {b} changes rails"
                sent[a] += 1
                received[b] += 1
    if nodes == 1:
        assert not sent
        return
    # G channels, one network hop out of each node per channel: every GPU's NIC sends exactly once.
    assert sent == Counter(range(p)) and received == Counter(range(p))


def test_two_gpus_and_an_odd_node_count_change_rails_once_per_ring() -> None:
    # Two GPU indices cannot alternate around 3 nodes: one hop of each ring changes rails.
    for ring in rail_rings(6, 2, 2):
        changes = [(a, b) for a, b in _edges(ring) if a // 2 != b // 2 and a % 2 != b % 2]
        assert len(changes) == 1


def test_the_ring_schedule_loads_every_nic_equally() -> None:
    # 2 nodes of 4 GPUs, 4 channels, all-reduce of 32 chunks: each ring has 2 crossings carrying one chunk in
    # each of its 2(p-1) = 14 steps, 4 x 2 x 14 = 112 chunks over the network, 14 per NIC, none cross-rail.
    s = registry.build("allreduce", "nccl_ring", 8, group=4, channels=4)
    per_nic: Counter[int] = Counter()
    for step in s.steps:
        for t in step.transfers:
            if t.src // 4 != t.dst // 4:
                assert t.src % 4 == t.dst % 4
                per_nic[t.src] += t.count
    assert per_nic == Counter({r: 14 for r in range(8)})


def test_one_node_channels_share_the_textbook_ring() -> None:
    s = registry.build("allreduce", "nccl_ring", 4, group=4, channels=2)
    assert {(t.src, t.dst) for step in s.steps for t in step.transfers} == {(0, 1), (1, 2), (2, 3), (3, 0)}


def test_group_must_divide_the_world_size() -> None:
    with pytest.raises(RegistryError, match="group=3 does not fit 8 ranks: group=3 does not divide 8 ranks"):
        registry.build("allreduce", "nccl_ring", 8, group=3)


# --- trees -----------------------------------------------------------------------------------------------

# ncclGetBtree / ncclGetDtree by hand: 4 nodes, tree 0 is 0 -> 2 -> {1, 3}; its mirror 3 -> 1 -> {0, 2}.
DTREE_4 = ([-1, 2, 0, 2], [1, 3, 1, -1])
# 8 nodes: 0 -> 4 -> {2, 6}, 2 -> {1, 3}, 6 -> {5, 7}; mirror 7 -> 3 -> {1, 5}, 1 -> {0, 2}, 5 -> {4, 6}.
DTREE_8 = ([-1, 2, 4, 2, 0, 6, 4, 6], [1, 3, 1, 7, 5, 3, 5, -1])


@pytest.mark.parametrize("table", [DTREE_4, DTREE_8])
def test_one_gpu_per_node_gives_nccls_double_binary_tree(table: tuple[list[int], list[int]]) -> None:
    nodes = len(table[0])
    assert tuple(tree_parents(nodes, 1, 1)) == table


def test_chains_hang_under_the_heads_of_the_parent_nodes() -> None:
    # 4 nodes of 2 GPUs. Channel 0: heads are GPU 0 (ranks 0, 2, 4, 6), tails GPU 1; tree 0 over the heads
    # is DTREE_4[0] on node numbers: node 1 under node 2, node 2 under node 0, node 3 under node 2.
    trees = tree_parents(8, 2, 2)
    assert trees[0] == [-1, 0, 4, 2, 0, 4, 4, 6]
    assert trees[1] == [2, 0, 6, 2, 2, 4, -1, 6]  # the mirror: node 3 (rank 6) is the root, node 1 under it
    # Channel 1: heads are GPU 1 (ranks 1, 3, 5, 7), chains 1 -> 0.
    assert trees[2] == [1, -1, 3, 5, 5, 1, 7, 5]


def test_tree_schedule_stays_on_the_heads_rail_and_pipelines_in_k_plus_2h_minus_1_steps() -> None:
    # 4 nodes of 8 GPUs, 2 chunks per tree: height H = 7 down a chain + log2 4 = 9 node hops, so
    # 2 + 2·9 - 1 = 19 steps.
    s = registry.build("allreduce", "nccl_tree", 32, group=8, channels=2, chunks=2)
    assert s.num_steps == 19
    rails = {t.src % 8 for step in s.steps for t in step.transfers if t.src // 8 != t.dst // 8}
    assert rails == {0, 1}  # channel c's trees cross between nodes on rail c only
    assert all(t.src % 8 == t.dst % 8 for step in s.steps for t in step.transfers if t.src // 8 != t.dst // 8)
    assert verify(s).ok


# --- PAT -------------------------------------------------------------------------------------------------


def _network_steps(s: Schedule) -> list[set[tuple[int, int]]]:
    return [{(t.src, t.dst) for t in step.transfers} for step in s.steps if any(t.src != t.dst for t in step.transfers)]


def test_pat_reduces_each_block_along_a_binomial_tree_written_out_by_hand() -> None:
    # p = 8, one block per step. Block 0's partial sums, from the offsets 8 - r with the lowest bit cleared:
    # 1 -> 2 -> 4 -> 0, 3 -> 4, 5 -> 6 -> 0, 7 -> 0 (each hop a power of two ahead, as NCCL's peers are).
    s = registry.build("reducescatter", "pat", 8)
    edges = {(t.src, t.dst) for step in s.steps for t in step.transfers
             if t.src != t.dst and t.src_index == 0}
    assert edges == {(1, 2), (2, 4), (4, 0), (3, 4), (5, 6), (6, 0), (7, 0)}
    # Offsets 7, 6, ..., 1 in turn: rank 0 sends to 1, 2, 1, 4, 1, 2, 1 (rank + lowbit(offset)).
    assert [{d for (a, d) in st if a == 0} for st in _network_steps(s)] == [{1}, {2}, {1}, {4}, {1}, {2}, {1}]


def test_pat_aggregation_joins_offsets_with_the_same_peer() -> None:
    assert offset_groups(8, 1) == [[7], [6], [5], [4], [3], [2], [1]]
    assert offset_groups(8, 2) == [[3, 7], [2, 6], [1, 5], [4]]  # D = 4, then the multiple of 4
    assert offset_groups(8, 4) == [[1, 3, 5, 7], [2, 6], [4]]  # log2 8 steps, as recursive halving
    assert offset_groups(6, 4) == [[1, 3, 5], [2], [4]]  # offsets >= 6 do not exist
    s = registry.build("reducescatter", "pat", 6, aggregate=4)
    assert [len(st) for st in _network_steps(s)] == [6, 6, 6]  # every rank sends each step (to one peer)
    assert registry.get("allgather", "pat").refusal(8, {"aggregate": 8}) is not None  # more than P/2


def test_pat_allgather_runs_the_reduce_scatter_backwards() -> None:
    rs, ag = registry.build("reducescatter", "pat", 8), registry.build("allgather", "pat", 8)
    assert _network_steps(ag) == [{(d, a) for a, d in st} for st in reversed(_network_steps(rs))]


def test_nccls_aggregation_factor_by_hand() -> None:
    # PatRSAlgorithm's constructor, 16 ranks, a 512 KiB step (Simple: 4 MiB buffer / NCCL_STEPS 8):
    # 1 KiB per channel doubles agg while 512 KiB / (1 KiB · agg) >= 2, up to p/2 = 8.
    assert aggregation(16, 1 << 10, 512 << 10) == 8
    # 1 MiB per channel: no doubling from the size, three from the step depth 8 -> 4 -> 2 -> 1.
    assert aggregation(16, 1 << 20, 512 << 10) == 8
    assert aggregation(16, 1 << 20, 512 << 10, step_depth=2) == 2
    assert aggregation(4, 1 << 20, 512 << 10, step_depth=1) == 1


@pytest.mark.parametrize("g", [2, 4, 8])
def test_nccl_algorithms_verify_on_one_to_four_nodes(g: int) -> None:
    # The symbolic verifier on every node count 1-4 at this node size, all G channels (one per NIC).
    for nodes in range(1, 5):
        p = g * nodes
        for kind in ("allreduce", "allgather", "reducescatter", "broadcast", "reduce"):
            root = p - 1 if kind in ("broadcast", "reduce") else None
            report = verify(registry.build(kind, "nccl_ring", p, root=root, group=g))
            assert report.ok, f"{kind} nccl_ring p={p} G={g}: {report}"
        assert verify(registry.build("allreduce", "nccl_tree", p, group=g, chunks=2)).ok, f"nccl_tree p={p}"


def test_pat_verifies_for_p_2_to_16_at_every_aggregation() -> None:
    for p in range(2, 17):
        a = 1
        while a == 1 or a <= (1 << (p - 1).bit_length()) // 2:
            for kind in ("reducescatter", "allgather"):
                assert verify(registry.build(kind, "pat", p, aggregate=a)).ok, f"{kind} pat p={p} aggregate={a}"
            a *= 2
