"""All-to-allv as a collective kind: the matrix, its buffers, its postcondition in both verifiers, sizes, files."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from algorithms.errors import ScheduleError
from algorithms.formats.schedule import dumps, loads
from algorithms.ir import Buf, Collective, Kind, Schedule, Transfer
from sim.engine.reference import chunk_bytes, simulate
from sim.topology.builders import single_switch
from sim.verify import fast as fastverify
from sim.verify.verifier import verify

T = ((1, 2, 0), (0, 0, 0), (3, 1, 1))  # rank 1 sends nothing; rank 2 receives only from rank 0 and itself


def hand_direct(matrix: tuple[tuple[int, ...], ...]) -> Schedule:
    """Every block straight to its place, offsets worked out by hand from the row/column layout."""
    p = len(matrix)
    steps = []
    for i in range(p):
        for j in range(p):
            n = matrix[i][j]
            if n:
                src = sum(matrix[i][:j])
                dst = sum(matrix[k][j] for k in range(i))
                steps.append(Transfer(i, j, Buf.INPUT, src, Buf.OUTPUT, dst, n))
    return Schedule(Collective(Kind.ALLTOALLV, p, matrix=matrix), "hand", [steps])


def test_buffers_are_rows_and_columns() -> None:
    c = Collective(Kind.ALLTOALLV, 3, matrix=[list(r) for r in T])
    assert c.matrix == T
    assert [c.input_chunks(r) for r in range(3)] == [3, 0, 5]
    assert [c.output_chunks(r) for r in range(3)] == [4, 3, 1]
    # rank 2's input: 3 for rank 0, then 1 for rank 1 (offset 3), then 1 for itself (offset 4)
    assert [c.send_offset(2, j) for j in range(4)] == [0, 3, 4, 5]
    # rank 1's output: 2 from rank 0, 0 from rank 1, then 1 from rank 2 at offset 2
    assert [c.recv_offset(1, i) for i in range(4)] == [0, 2, 2, 3]
    assert c.block(2, 0) == 3 and c.traffic().tolist() == [list(r) for r in T]
    assert pickle.loads(pickle.dumps(c)) == c and pickle.loads(pickle.dumps(c)).input_chunks(2) == 5
    assert c != Collective(Kind.ALLTOALLV, 3, matrix=[[1, 2, 0], [0, 0, 0], [3, 1, 2]])


@pytest.mark.parametrize(("matrix", "message"), [
    ([[1, 2], [0, 0, 0], [3, 1, 1]], "row 0: has 2 entries, expected 3"),
    ([[1, 2, 0], [0, -1, 0], [3, 1, 1]], "row 1: entry 1 is -1"),
    ([[1, 2, 0], [0, 0, 0], [3, 1.5, 1]], "row 2: entry 1 is 1.5"),
    ([[1, 2, 0]], "has 1 rows, expected 3"),
    (None, "needs a traffic matrix"),
])
def test_bad_matrix_names_the_row(matrix: object, message: str) -> None:
    with pytest.raises(ScheduleError, match=message):
        Collective(Kind.ALLTOALLV, 3, matrix=matrix)  # type: ignore[arg-type]


def test_matrix_only_for_alltoallv() -> None:
    with pytest.raises(ScheduleError, match="only an alltoallv"):
        Collective(Kind.ALLTOALL, 2, matrix=((1, 1), (1, 1)))
    with pytest.raises(ScheduleError, match="chunks 1"):
        Collective(Kind.ALLTOALLV, 2, 2, matrix=((1, 1), (1, 1)))


def test_both_verifiers_accept_the_hand_schedule_and_catch_a_swap() -> None:
    good = hand_direct(T)
    assert verify(good).ok
    assert not fastverify.check(good, fastverify.run(good)[0])
    # Rank 0's output is [own 1 chunk, rank 2's 3 chunks]; put rank 2's block first and the own one last.
    moved = [t._replace(dst_index=0) if (t.src, t.dst) == (2, 0) else
             t._replace(dst_index=3) if (t.src, t.dst) == (0, 0) else t for t in good.steps[0].transfers]
    bad = Schedule(good.collective, "bad", [moved])
    assert not verify(bad).ok
    assert fastverify.check(bad, fastverify.run(bad)[0])


def test_file_round_trip_and_old_files_load() -> None:
    s = hand_direct(T)
    assert loads(dumps(s)) == s
    text = dumps(s).replace('"matrix": [[1, 2, 0], [0, 0, 0], [3, 1, 1]]', '"matrix": [[1, 2, 0], [0, 0], [3, 1, 1]]')
    with pytest.raises(ScheduleError, match="row 1: has 2 entries"):
        loads(text)
    old = ('{"format": "collsched.schedule/1", "name": "x", "collective": {"kind": "alltoall", "ranks": 1, '
           '"chunks": 1, "root": null}, "scratch_chunks": 0, "steps": []}')
    assert loads(old).collective == Collective(Kind.ALLTOALL, 1)


def test_size_is_the_mean_rank_input() -> None:
    c = Collective(Kind.ALLTOALLV, 3, matrix=T)
    assert chunk_bytes(c, 800.0) == pytest.approx(800.0 * 3 / 8)  # 8 chunks in all
    assert chunk_bytes(Collective(Kind.ALLTOALLV, 2, matrix=((0, 0), (0, 0))), 1e6) == 0.0
    uniform = Collective(Kind.ALLTOALLV, 4, matrix=np.full((4, 4), 2, dtype=np.int64))
    assert chunk_bytes(uniform, 4096.0) == chunk_bytes(Collective(Kind.ALLTOALL, 4, 2), 4096.0)


@pytest.mark.parametrize("engine", ["simpy", "fast"])
def test_simulated_direct_on_a_switch(engine: str) -> None:
    # One switch, 1e9 B/s per port, no latency, chunk = 1000 B; local copies cost nothing.
    s = hand_direct(T)
    topo = single_switch(3, bandwidth=1e9, latency=0.0)
    size = 8 * 1000 / 3  # the mean input of 8 chunks over 3 ranks; chunk = 1000 B
    res = simulate(s, topo, size, engine=engine)
    # Remote traffic: 0->1: 2, 2->0: 3, 2->1: 1 chunks. Rank 2's uplink carries 4 chunks, the most of any
    # port, and is busy throughout (2->1 ends at 2 us, 2->0 at 4 us; 0->1 at 3 us on rank 1's downlink).
    assert res.time == pytest.approx(4000 / 1e9, rel=1e-9)
