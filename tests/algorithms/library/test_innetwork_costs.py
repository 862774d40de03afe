"""The switch algorithms' registry costs (algorithms/library/innetwork.py) against their schedules, measured.

The measuring stick counts, per step and per rank, the chunks a rank sends or receives: each transfer
between two ranks, and each switch operation's crossings of the rank's link (a source sends its chunks up,
a target takes them down), as the cost model states. Sizes follow nccl-tests: n is the sized buffer's chunk
count, so one chunk is one byte.
"""

from __future__ import annotations

import pytest

from algorithms import registry
from algorithms.ir import Op, Schedule

_WIDE = {"allgather"}


def measure(s: Schedule) -> dict[str, int]:
    p = s.ranks
    total = [0] * p
    out = {"steps": 0, "bytes": 0, "reduced": 0}
    ops_by_step: dict[int, list] = {}
    for op in s.switch_ops:
        ops_by_step.setdefault(op.step, []).append(op)
    for i, step in enumerate(s.steps):
        sent, recv, red = [0] * p, [0] * p, [0] * p
        for t in step.transfers:
            if t.src != t.dst:
                sent[t.src] += t.count
                recv[t.dst] += t.count
            if t.op is Op.REDUCE:
                red[t.dst] += t.count
        for op in ops_by_step.get(i, ()):
            for e in op.sources:
                sent[e.rank] += op.count
            for e in op.targets:
                recv[e.rank] += op.count
        out["steps"] += any(sent) or any(recv)
        out["bytes"] += max(max(a, b) for a, b in zip(sent, recv, strict=True))
        out["reduced"] += max(red)
        total = [a + b for a, b in zip(total, sent, strict=True)]
    out["sent_per_rank"] = max(total)
    return out


def _check(kind: str, name: str, p: int, bound: bool = False, **params: int) -> dict[str, int]:
    algo = registry.get(kind, name)
    s = algo.build(p, **params)
    n = s.collective.chunks * (p if kind in _WIDE else 1)
    got = measure(s)
    c, q = algo.cost, algo.resolve(params)
    assert c is not None and c.sent_per_rank is not None
    want = {"steps": c.steps(p, n, q), "bytes": c.bytes(p, n, q), "reduced": c.reduced(p, n, q),
            "sent_per_rank": c.sent_per_rank(p, n, q)}
    if bound:  # the formula text says <=: an upper bound, and steps exact
        assert got["steps"] == want["steps"], (name, p, params, got, want)
        assert all(got[x] <= want[x] + 1e-9 for x in got), (name, p, params, got, want)
    else:
        assert got == pytest.approx(want), (name, p, params, got, want)
    return got


def test_nvls_by_hand() -> None:
    # p = 4, k = 2: 8 chunks. Step 0: each rank sends 4 up (one per owner), its owner gets 1; step 1: 4 up and
    # 1 multicast up, 1 + 4 down; step 2: 1 up, 4 down. 3 steps, 4 + 5 + 4 = 13 chunks, 4 + 5 + 1 = 10 sent.
    assert _check("allreduce", "nvls", 4, chunks=2) == {"steps": 3, "bytes": 13, "reduced": 0, "sent_per_rank": 10}
    for p in (2, 3, 8):
        for k in (1, 3):
            _check("allreduce", "nvls", p, chunks=k)


def test_nvls_tree_and_sharp_by_hand() -> None:
    # 2 nodes of 2 (p = 4), k = 1 stage of q = 2 chunks per piece: 4 chunks in all. nvls_tree: step 0 the node's
    # reduction (each rank 2 pieces x 2 chunks up, 2 down), steps 1-2 the owners' ring (1 chunk each way, one
    # reduced in step 1), step 3 the multicast (2 up, 4 down): 4 steps, 4 + 1 + 1 + 4 = 10, sent 4 + 1 + 1 + 2 = 8.
    assert _check("allreduce", "nvls_tree", 4, chunks=1, group=2) == {
        "steps": 4, "bytes": 10, "reduced": 1, "sent_per_rank": 8}
    # sharp: the ring's two steps are one aggregation of the owners' 2 chunks (2 up, 2 down): 3 steps, 4 + 2 + 4.
    assert _check("allreduce", "sharp", 4, chunks=1, group=2) == {
        "steps": 3, "bytes": 10, "reduced": 0, "sent_per_rank": 8}
    for name in ("nvls_tree", "sharp"):
        for p, g in ((8, 4), (6, 2), (4, 4), (16, 2)):
            for k in (1, 2, 5):
                _check("allreduce", name, p, bound=name == "nvls_tree" and p // g > 2, chunks=k, group=g)


def test_nvls_tree_across_four_nodes_by_hand() -> None:
    # 4 nodes of 2 (p = 8), k = 1. NCCL's trees over nodes 0-3 (ncclGetDtree): root 0 with child 2, whose children
    # are 1 and 3, and its mirror (root 3, child 1, grandchildren 0 and 2): height H = 2, so 1 + 2H + 1 = 6 steps;
    # each of a tree's 3 edges carries one chunk up and one down, 2 trees, 2 pieces: 24 transfers.
    s = registry.build("allreduce", "nvls_tree", 8, chunks=1, group=2)
    assert len(s.steps) == 6 and s.num_transfers == 24
    _check("allreduce", "nvls_tree", 8, bound=True, chunks=1, group=2)


def test_multicast_by_hand() -> None:
    # broadcast of 3 chunks to 4 ranks: one step, the root's 3 chunks up, 3 down at every other rank.
    assert _check("broadcast", "multicast", 4, chunks=3) == {"steps": 1, "bytes": 3, "reduced": 0, "sent_per_rank": 3}
    # all-gather of 2 chunks per rank on 3 ranks (n = 6): each sends 2 up and takes 6 down.
    assert _check("allgather", "multicast", 3, chunks=2) == {"steps": 1, "bytes": 6, "reduced": 0, "sent_per_rank": 2}
    _check("broadcast", "multicast", 1, chunks=2)
