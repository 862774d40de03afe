"""The all-to-allv library meets an independent postcondition for random matrices (zeros and empty ranks included).

The check here does not use the verifier: it runs the schedule on concrete values (input slot k of rank i
holds the number i·10^6 + k, copies only, reads at the start of a step) and compares every output block with
the input block the matrix says, offsets summed by hand.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from algorithms import registry
from algorithms.errors import RegistryError, ScheduleError
from algorithms.ir import Buf, Op, Schedule
from algorithms.library.alltoallv import _hier_loads

CASES = [("direct", {}), ("pairwise", {}), ("bruck", {}), ("hierarchical", {"group": 2}),
         ("hierarchical", {"group": 3, "via": "source"}), ("hierarchical", {"group": 4})]


@st.composite
def matrices(draw: st.DrawFn, max_ranks: int = 9, most: int = 4) -> list[list[int]]:
    p = draw(st.integers(1, max_ranks))
    rows = draw(st.lists(st.lists(st.integers(0, most), min_size=p, max_size=p), min_size=p, max_size=p))
    for r in draw(st.lists(st.integers(0, p - 1), max_size=2)):  # empty senders
        rows[r] = [0] * p
    for c in draw(st.lists(st.integers(0, p - 1), max_size=2)):  # empty receivers
        for row in rows:
            row[c] = 0
    return rows


def run_values(s: Schedule) -> list[np.ndarray]:
    """Each rank's output after running ``s`` on distinct values, with the step semantics (snapshot reads)."""
    p = s.ranks
    coll = s.collective
    state = {(r, Buf.INPUT): np.arange(coll.input_chunks(r), dtype=np.int64) + r * 10**6 for r in range(p)}
    for r in range(p):
        state[(r, Buf.OUTPUT)] = np.full(coll.output_chunks(r), -1, dtype=np.int64)
        state[(r, Buf.SCRATCH)] = np.full(s.scratch_chunks, -1, dtype=np.int64)
    for step in s.steps:
        snap = {k: v.copy() for k, v in state.items()}
        for t in step.transfers:
            assert t.op is Op.COPY
            got = snap[(t.src, t.src_buf)][t.src_index:t.src_index + t.count]
            assert (got >= 0).all(), f"{t} reads an empty slot"
            state[(t.dst, t.dst_buf)][t.dst_index:t.dst_index + t.count] = got
    return [state[(r, Buf.OUTPUT)] for r in range(p)]


def expected_outputs(t: list[list[int]]) -> list[np.ndarray]:
    """Rank j's output: for each source i in order, i's input slots from Σ_{k<j} T[i][k], T[i][j] of them."""
    p = len(t)
    out = []
    for j in range(p):
        parts = [np.arange(sum(t[i][:j]), sum(t[i][:j]) + t[i][j], dtype=np.int64) + i * 10**6 for i in range(p)]
        out.append(np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64))
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@pytest.mark.parametrize(("name", "params"), CASES)
@given(t=matrices(), chunks=st.sampled_from([1, 2]))
def test_every_block_lands_where_the_matrix_says(name: str, params: dict[str, object], t: list[list[int]],
                                                 chunks: int) -> None:
    s = registry.build("alltoallv", name, len(t), matrix=t, chunks=chunks, **params)
    want = expected_outputs([[v * chunks for v in row] for row in t])
    got = run_values(s)
    for j, (a, b) in enumerate(zip(got, want, strict=True)):
        assert np.array_equal(a, b), f"rank {j}: got {a.tolist()}, want {b.tolist()}"


def test_worked_example_direct() -> None:
    # p = 3, T = [[1,2,0],[0,0,0],[3,1,1]]: rank 1 sends nothing, rank 2 gets only from 0 and itself.
    s = registry.build("alltoallv", "direct", 3, matrix=[[1, 2, 0], [0, 0, 0], [3, 1, 1]])
    assert sorted((t.src, t.dst, t.src_index, t.dst_index, t.count) for t in s.steps[0].transfers) == [
        (0, 0, 0, 0, 1), (0, 1, 1, 0, 2), (2, 0, 0, 1, 3), (2, 1, 3, 2, 1), (2, 2, 4, 0, 1)]


def test_bruck_sends_one_message_per_round() -> None:
    # p = 8: 3 rounds, each rank one network message per round, whatever the matrix (no empty positions here).
    t = [[(i * 3 + j) % 4 + 1 for j in range(8)] for i in range(8)]
    s = registry.build("alltoallv", "bruck", 8, matrix=t)
    net = [[x for x in step.transfers if x.src != x.dst] for step in s.steps]
    assert [len(n) for n in net if n] == [8, 8, 8]
    assert all(len({x.src for x in n}) == len(n) for n in net if n)


def test_pxn_crosses_nodes_once_per_rail_and_node() -> None:
    # 2 nodes of 4, uniform: each GPU sends one inter-node message (to its rail peer), carrying 4 blocks.
    s = registry.build("alltoallv", "hierarchical", 8, group=4)
    inter = [x for step in s.steps for x in step.transfers if x.src // 4 != x.dst // 4]
    assert sorted((x.src, x.dst, x.count) for x in inter) == [(r, (r + 4) % 8, 4) for r in range(8)]


@pytest.mark.parametrize("via", ["dest", "source"])
@pytest.mark.parametrize(("p", "g"), [(8, 4), (7, 3), (10, 4), (5, 8), (9, 1)])
def test_hierarchical_loads_closed_form(via: str, p: int, g: int) -> None:
    # The closed form of per-step network blocks against the blocks the uniform schedule moves.
    s = registry.build("alltoallv", "hierarchical", p, group=g, via=via)
    measured = []
    for step in s.steps:
        sent, recv = [0] * p, [0] * p
        for x in step.transfers:
            if x.src != x.dst:
                sent[x.src] += x.count
                recv[x.dst] += x.count
        measured.append((sent, recv))
    want = [load for load in _hier_loads(p, g, via) if any(load[0])]
    assert [m for m in measured if any(m[0])] == want


def test_bad_inputs_are_named() -> None:
    with pytest.raises(ScheduleError, match="row 1: entry 0 is -1"):
        registry.build("alltoallv", "direct", 2, matrix=[[0, 1], [-1, 0]])
    with pytest.raises(RegistryError, match="takes no traffic matrix"):
        registry.build("alltoall", "direct", 2, matrix=[[0, 1], [1, 0]])
    with pytest.raises(RegistryError, match="via must be one of dest, source"):
        registry.build("alltoallv", "hierarchical", 4, via="rail")
