"""algorithms.library.compose: grids, lines, regions, embedding 1-D schedules, butterflies, the fold.

Expected values are worked out by hand or by brute force here, never read back from the helper.
"""

from __future__ import annotations

import doctest
import itertools

import pytest

from algorithms import registry
from algorithms.builder import ScheduleBuilder
from algorithms.errors import ScheduleError
from algorithms.ir import Buf, Collective, Kind, Op, Schedule, Transfer
from algorithms.library import compose
from algorithms.library.compose import (
    Grid,
    along,
    butterfly,
    butterfly_sets,
    emit,
    fold,
    parallel,
    ring_allgather,
    ring_allreduce,
    ring_reducescatter,
    whole,
)
from sim.topology import torus
from sim.verify import verify


def test_module_docstring_example_runs() -> None:
    result = doctest.testmod(compose, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("dims", [(1,), (5,), (3, 4), (2, 3, 4), (2, 1, 3, 2)])
def test_coords_and_rank_are_row_major_inverses(dims: tuple[int, ...]) -> None:
    g = Grid(dims)
    # Brute force: itertools.product enumerates coordinates row-major, the last one fastest.
    every = list(itertools.product(*(range(q) for q in dims)))
    assert g.ranks == len(every)
    for r, c in enumerate(every):
        assert g.coords(r) == c and g.rank(c) == r


def test_grid_matches_the_torus_topology_numbering() -> None:
    # torus(3, 4): rank = row·4 + col; its links go one step along a row or a column, wrapping.
    g, topo = Grid((3, 4)), torus(3, 4)
    for r in range(12):
        mine = {g.shift(r, d, delta) for d in (0, 1) for delta in (1, -1)}
        assert mine == set(topo.graph.successors(r)), r
    assert g.shift(3, 1, 1) == 0 and g.shift(0, 0, -1) == 8 and g.rank((-1, 5)) == 9


def test_lines_along_each_dimension() -> None:
    g = Grid((2, 3))  # ranks 0 1 2 / 3 4 5
    assert g.lines(1) == [[0, 1, 2], [3, 4, 5]]
    assert g.lines(0) == [[0, 3], [1, 4], [2, 5]]


def test_parse_auto_and_str() -> None:
    assert Grid.parse("4x4") == Grid((4, 4)) and Grid.parse("2x3x4").dims == (2, 3, 4) and str(Grid((8, 2))) == "8x2"
    assert Grid.auto(12).dims == (3, 4) and Grid.auto(7).dims == (1, 7) and Grid.auto(16).dims == (4, 4)
    assert Grid.auto(32, pow2=True).dims == (4, 8) and Grid.auto(8, pow2=True).dims == (2, 4)
    for bad in ("", "4x", "x4", "4*4", "a"):
        with pytest.raises(ScheduleError):
            Grid.parse(bad)
    with pytest.raises(ScheduleError):
        Grid((4, 0))


def test_split_keeps_the_block_of_the_rank_coordinate() -> None:
    g = Grid((2, 3))
    start = whole(g, 12)
    # Along dimension 1 (q = 3): blocks of 4, the rank at column c keeps chunks 4c..4c+3.
    assert g.split(start, 1) == ((0, 4), (4, 4), (8, 4), (0, 4), (4, 4), (8, 4))
    # Then along dimension 0 (q = 2): blocks of 2 inside each of those.
    assert g.split(g.split(start, 1), 0) == ((0, 2), (4, 2), (8, 2), (2, 2), (6, 2), (10, 2))
    with pytest.raises(ScheduleError, match="does not split"):
        g.split(whole(g, 4), 1)


@pytest.mark.parametrize("q", range(1, 13))
@pytest.mark.parametrize("direction", [1, -1])
def test_the_1d_ring_schedules_are_correct(q: int, direction: int) -> None:
    for s in (ring_reducescatter(q, direction), ring_allgather(q, direction), ring_allreduce(q, direction)):
        assert verify(s).ok, (s.name, q)
    # q - 1 network steps each way (2(q-1) for the all-reduce), one block per rank per step.
    net = [st for st in ring_allreduce(q, direction).steps if any(t.src != t.dst for t in st.transfers)]
    assert len(net) == 2 * (q - 1)
    for st in net:
        assert sorted(t.src for t in st.transfers) == list(range(q))
        assert all(t.dst == (t.src + direction) % q for t in st.transfers)


def _bucket(dims: tuple[int, ...], rs_x: Schedule, ar_y: Schedule, ag_x: Schedule, chunks: int) -> Schedule:
    g = Grid(dims)
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, g.ranks, chunks), "composite")
    start = whole(g, chunks)
    emit(b, along(g, 1, rs_x, start))
    emit(b, along(g, 0, ar_y, g.split(start, 1)))
    emit(b, along(g, 1, ag_x, start))
    return b.build()


@pytest.mark.parametrize(("rows", "cols"), [(1, 1), (2, 2), (3, 4), (4, 3), (2, 5), (5, 1)])
def test_ring_bucket_composite_verifies(rows: int, cols: int) -> None:
    s = _bucket((rows, cols), ring_reducescatter(cols), ring_allreduce(rows), ring_allgather(cols), rows * cols * 2)
    assert verify(s).ok


@pytest.mark.parametrize(("rs", "ar", "ag"), [("recursive_halving", "rabenseifner", "recursive_doubling"),
                                              ("ring", "ring", "ring"), ("direct", "recursive_doubling", "bruck")])
def test_any_registered_1d_schedule_embeds(rs: str, ar: str, ag: str) -> None:
    # Library schedules (none uses scratch) on a 4x4 grid; the chunk arithmetic: 32 chunks, x-lines
    # reduce-scatter 4 pieces of 8, y-lines all-reduce the 8 each rank then owns.
    rs_x, ag_x = registry.build("reducescatter", rs, 4), registry.build("allgather", ag, 4)
    assert rs_x.scratch_chunks == ag_x.scratch_chunks == 0
    assert verify(_bucket((4, 4), rs_x, registry.build("allreduce", ar, 4), ag_x, 32)).ok


def test_along_places_each_line_inside_its_region() -> None:
    # A 2x2 grid, the x-ring all-reduce (2 blocks) on region (4, 4): blocks are chunks 4-5 and 6-7.
    g = Grid((2, 2))
    phase = along(g, 1, ring_allreduce(2), ((4, 4),) * 4)
    # Ring of 2: RS step: position i adds block (i - 1) % 2 into i + 1; AG step: position i sends block i.
    want_rs = {Transfer(a, z, Buf.INPUT, x, Buf.INPUT, x, 2, Op.REDUCE)
               for a, z, x in ((0, 1, 6), (1, 0, 4), (2, 3, 6), (3, 2, 4))}
    assert len(phase) == 2 and set(phase[0]) == want_rs
    assert {(t.src, t.dst, t.src_index) for t in phase[1]} == {(0, 1, 4), (1, 0, 6), (2, 3, 4), (3, 2, 6)}
    split = along(g, 1, ring_allreduce(2), ((4, 4),) * 4, split=True)
    assert [len(s) for s in split] == [8, 8] and all(t.count == 1 for s in split for t in s)


def test_along_refuses_what_it_cannot_embed() -> None:
    g = Grid((2, 3))
    with pytest.raises(ScheduleError, match="3 ranks, dimension 0 has 2"):
        along(g, 0, ring_allreduce(3), whole(g, 6))
    with pytest.raises(ScheduleError, match="evenly"):
        along(g, 1, ring_allreduce(3), whole(g, 4))
    with pytest.raises(ScheduleError, match="different regions"):
        along(g, 1, ring_allreduce(3), g.split(whole(g, 6), 1))
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, 3, 1), "scratchy", scratch_chunks=1)
    with b.step():
        b.copy(0, 0, 0, dst_buf=Buf.SCRATCH)
    with pytest.raises(ScheduleError, match="scratch"):
        along(g, 1, b.build(), whole(g, 3))
    with pytest.raises(ScheduleError, match="embeds all-reduce"):
        along(g, 1, registry.build("alltoall", "pairwise", 3), whole(g, 9))


def test_parallel_zips_steps() -> None:
    a, b_, c = (Transfer(0, 1), Transfer(1, 0)), (Transfer(0, 1, Buf.INPUT, 1, Buf.INPUT, 1),), (Transfer(2, 3),)
    assert parallel([list(a), list(b_)], [list(c)]) == [[*a, *c], list(b_)]
    assert parallel() == []


def test_butterfly_sets_of_recursive_halving_are_aligned_blocks() -> None:
    # Matchings x ^ 4, x ^ 2, x ^ 1 (p = 8): before step s, x covers the ranks that differ from it in the
    # low 3 - s bits only.
    p, bits = 8, 3
    m = [[x ^ (1 << (bits - 1 - s)) for x in range(p)] for s in range(bits)]
    sets = butterfly_sets(m)
    for s in range(bits + 1):
        for x in range(p):
            assert sets[s][x] == {y for y in range(p) if y >> (bits - s) == x >> (bits - s)}


def test_butterfly_sets_reject_what_is_not_a_butterfly() -> None:
    with pytest.raises(ScheduleError, match="both cover"):
        butterfly_sets([[1, 0, 3, 2], [1, 0, 3, 2]])  # the same pairs twice
    with pytest.raises(ScheduleError, match="perfect matching"):
        butterfly_sets([[1, 2, 0]])
    with pytest.raises(ScheduleError, match="reach every rank"):
        butterfly_sets([[1, 0, 3, 2]])  # one step of four ranks


@pytest.mark.parametrize("p", [1, 2, 4, 8, 16, 32])
def test_butterfly_over_xor_matchings_is_rabenseifner(p: int) -> None:
    bits = p.bit_length() - 1
    m = [[x ^ (1 << (bits - 1 - s)) for x in range(p)] for s in range(bits)]
    rs, ag = butterfly(m, lambda blk: 2 * blk, 2)
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, p, 2 * p), "xor")
    emit(b, rs + ag)
    s = b.build()
    assert verify(s).ok
    # Halving step t sends p / 2^(t+1) blocks of 2 chunks, one transfer per chunk, per rank.
    assert [len(st) for st in rs] == [p * p // (1 << (t + 1)) * 2 for t in range(bits)]


def test_fold_hands_the_extra_ranks_in_and_out() -> None:
    pre, post = fold(6, 2)  # P = 4: ranks 4, 5 fold into 0, 1
    assert pre == [[Transfer(4, 0, Buf.INPUT, 0, Buf.INPUT, 0, 1, Op.REDUCE),
                    Transfer(4, 0, Buf.INPUT, 1, Buf.INPUT, 1, 1, Op.REDUCE),
                    Transfer(5, 1, Buf.INPUT, 0, Buf.INPUT, 0, 1, Op.REDUCE),
                    Transfer(5, 1, Buf.INPUT, 1, Buf.INPUT, 1, 1, Op.REDUCE)]]
    assert [(t.src, t.dst, t.op) for t in post[0]] == [(0, 4, Op.COPY)] * 2 + [(1, 5, Op.COPY)] * 2
    assert fold(8, 3) == ([], [])
