"""The IR: buffer sizes per docs/design.md's buffer table, validation that names the field, immutability."""

from __future__ import annotations

import dataclasses

import pytest

from algorithms import Buf, Collective, Kind, Op, Schedule, ScheduleBuilder, ScheduleError, Step, Transfer
from algorithms.errors import CollschedError

# (kind, root) -> (input chunks, output chunks) for p = 4, C = 3, from docs/design.md's table.
P, C = 4, 3
TABLE = {
    Kind.ALLREDUCE: ((C, C), (C, C)),
    Kind.BROADCAST: ((C, C), (C, C)),
    Kind.REDUCE: ((C, C), (C, C)),
    Kind.ALLGATHER: ((C, P * C), (C, P * C)),
    Kind.REDUCESCATTER: ((P * C, C), (P * C, C)),
    Kind.SCATTER: ((P * C, C), (0, C)),  # (root, non-root)
    Kind.GATHER: ((C, P * C), (C, 0)),
    Kind.ALLTOALL: ((P * C, P * C), (P * C, P * C)),
}


@pytest.mark.parametrize("kind", list(TABLE))
def test_buffer_sizes_follow_the_design_table(kind: Kind) -> None:
    root = 1 if kind in (Kind.BROADCAST, Kind.REDUCE, Kind.SCATTER, Kind.GATHER) else None
    coll = Collective(kind, P, C, root)
    at_root, elsewhere = TABLE[kind]
    assert (coll.input_chunks(1), coll.output_chunks(1)) == at_root  # rank 1 is the root where there is one
    assert (coll.input_chunks(2), coll.output_chunks(2)) == elsewhere


def test_barrier_is_one_token() -> None:
    assert Collective(Kind.BARRIER, 5).input_chunks(3) == 1
    with pytest.raises(ScheduleError, match="chunks"):
        Collective(Kind.BARRIER, 5, 2)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("allreduce", 0, 1, None), "collective.ranks"),
        (("allreduce", 4, 0, None), "collective.chunks"),
        (("allreduce", 4, 1, 0), "collective.root"),
        (("broadcast", 4, 1, None), "collective.root"),
        (("broadcast", 4, 1, 4), "collective.root"),
        (("gather", 4, 1, -1), "collective.root"),
        (("nonsense", 4, 1, None), "collective.kind"),
        (("allreduce", True, 1, None), "collective.ranks"),
        (("allreduce", 4, 1.0, None), "collective.chunks"),
        (("allreduce", 10**20, 1, None), "collective.ranks must be <= 65536"),
        (("alltoall", 65536, 1 << 20, None), "collective.chunks must be <="),
    ],
)
def test_collective_validation_names_the_field(args: tuple, field: str) -> None:
    with pytest.raises(ScheduleError, match=field.replace(".", r"\.")):
        Collective(*args)


def test_errors_form_one_family() -> None:
    assert issubclass(ScheduleError, CollschedError)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"count": 0}, "count"),
        ({"src_buf": "heap"}, "src_buf"),
        ({"dst_buf": 3}, "dst_buf"),
        ({"op": "max"}, "op"),
        ({"src_index": 1.5}, "indices"),
    ],
)
def test_transfer_validation(kwargs: dict, match: str) -> None:
    with pytest.raises(ScheduleError, match=match):
        Transfer(0, 1, **kwargs)


def test_transfer_is_immutable_and_hashable() -> None:
    t = Transfer(0, 1, "input", 2, "output", 3, 1, "reduce")
    assert t.src_buf is Buf.INPUT and t.dst_buf is Buf.OUTPUT and t.op is Op.REDUCE
    assert {t: 1}[Transfer(0, 1, Buf.INPUT, 2, Buf.OUTPUT, 3, 1, Op.REDUCE)] == 1
    with pytest.raises(AttributeError):
        t.count = 2  # type: ignore[misc]


def _one(t: Transfer, coll: Collective | None = None, scratch: int = 0) -> Schedule:
    return Schedule(coll or Collective(Kind.ALLGATHER, 4, 2), "x", (Step((Transfer(0, 0), t)),), scratch)


@pytest.mark.parametrize(
    ("t", "match"),
    [
        (Transfer(4, 1), "step 0 transfer 1: src rank 4"),
        (Transfer(0, -1), "step 0 transfer 1: dst rank -1"),
        (Transfer(0, 1, Buf.INPUT, 1, Buf.INPUT, 0, 2), "src_index 1 count 2 out of range for rank 0 input of 2"),
        (Transfer(0, 1, Buf.OUTPUT, 7, Buf.OUTPUT, 8), "dst_index 8 count 1 out of range for rank 1 output of 8"),
        (Transfer(0, 1, Buf.SCRATCH, 0, Buf.INPUT, 0), "rank 0 scratch of 0"),
    ],
)
def test_schedule_ranges_name_step_and_transfer(t: Transfer, match: str) -> None:
    with pytest.raises(ScheduleError, match=match):
        _one(t)


def test_scatter_non_root_has_no_input() -> None:
    with pytest.raises(ScheduleError, match="rank 1 input of 0"):
        _one(Transfer(1, 2, Buf.INPUT, 0, Buf.OUTPUT, 0), Collective(Kind.SCATTER, 4, 1, 0))


def test_in_place_kinds_alias_output_to_input() -> None:
    s = _one(Transfer(0, 1, Buf.OUTPUT, 0, Buf.OUTPUT, 1), Collective(Kind.ALLREDUCE, 2, 2))
    assert s.steps[0].transfers[1] == Transfer(0, 1, Buf.INPUT, 0, Buf.INPUT, 1)


def test_schedule_is_frozen() -> None:
    s = _one(Transfer(0, 1, Buf.INPUT, 0, Buf.OUTPUT, 0))
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.name = "y"
    assert isinstance(s.steps, tuple) and s.num_transfers == 2


def test_builder_reads_like_pseudocode() -> None:
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, 3, 3), "ring")
    with b.step():
        b.reduce(0, 1, 0)
        b.copy(2, 0, 1, dst_index=2)
    with b.step():
        pass  # empty steps are dropped
    s = b.build()
    assert s.steps == (Step((Transfer(0, 1, op=Op.REDUCE), Transfer(2, 0, Buf.INPUT, 1, Buf.INPUT, 2))),)


def test_builder_misuse_is_an_error() -> None:
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, 2, 1), "x")
    with pytest.raises(ScheduleError, match="inside"):
        b.copy(0, 1, 0)
    with b.step(), pytest.raises(ScheduleError, match="nest"), b.step():
        pass


def test_schedules_addressing_too_many_slots_are_refused() -> None:
    # Alltoall buffers are p·C chunks per rank: p = 4096, C = 16 is 2^28 slots per buffer kind.
    with pytest.raises(ScheduleError, match="over the limit"):
        Schedule(Collective(Kind.ALLTOALL, 4096, 16), "big", ())
    with pytest.raises(ScheduleError, match="scratch_chunks must be <="):
        Schedule(Collective(Kind.ALLREDUCE, 2, 1), "big", (), 1 << 40)


# -- columnar storage ---------------------------------------------------------------------------


def _ring_by_loops(p: int, k: int) -> Schedule:
    """The ring all-reduce written transfer by transfer, as its paper's pseudocode reads (the reference)."""
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, p, p * k), "ring")
    for s in range(p - 1):
        with b.step():
            for r in range(p):
                for c in range(k):
                    b.reduce(r, (r + 1) % p, (r - s) % p * k + c)
    for s in range(p - 1):
        with b.step():
            for r in range(p):
                for c in range(k):
                    b.copy(r, (r + 1) % p, (r + 1 - s) % p * k + c)
    return b.build()


@pytest.mark.parametrize(("p", "k"), [(1, 1), (2, 1), (3, 2), (5, 3), (8, 1)])
def test_vectorised_ring_builds_the_same_transfers_as_the_loops(p: int, k: int) -> None:
    from algorithms import registry

    got = registry.build("allreduce", "ring", p, chunks=k)
    want = _ring_by_loops(p, k)
    assert got == want and hash(got) == hash(want)
    assert got.steps == want.steps


def test_columns_hold_the_steps_and_round_trip() -> None:
    coll = Collective(Kind.ALLGATHER, 3, 2)
    steps = (Step((Transfer(0, 1, Buf.INPUT, 1, Buf.OUTPUT, 0, 1, Op.COPY),
                   Transfer(2, 2, Buf.INPUT, 0, Buf.OUTPUT, 4, 2, Op.COPY))),
             Step(()),
             Step((Transfer(1, 0, Buf.OUTPUT, 0, Buf.SCRATCH, 1, 1, Op.REDUCE),)))
    s = Schedule(coll, "x", steps, 2)
    c = s.columns()
    assert c.src.tolist() == [0, 2, 1] and c.dst.tolist() == [1, 2, 0]
    assert c.src_buf.tolist() == [0, 0, 1] and c.dst_buf.tolist() == [1, 1, 2]
    assert c.src_index.tolist() == [1, 0, 0] and c.dst_index.tolist() == [0, 4, 1]
    assert c.count.tolist() == [1, 2, 1] and c.op.tolist() == [0, 0, 1]
    assert c.step_offsets.tolist() == [0, 2, 2, 3] and s.num_steps == 3
    assert not c.src.flags.writeable
    again = Schedule.from_columns(coll, "x", c, 2)
    assert again == s and hash(again) == hash(s) and again.steps == steps
    assert again.transfer(2) == (2, 0, steps[2].transfers[0])
    import pickle

    assert pickle.loads(pickle.dumps(again)) == s
    assert s != Schedule(coll, "x", steps[:1], 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        again.scratch_chunks = 3


def test_from_columns_names_what_is_wrong() -> None:
    coll = Collective(Kind.ALLREDUCE, 4, 4)
    good = ScheduleBuilder(coll, "x")
    with good.step():
        good.add_many([0, 1, 2], [1, 2, 3], [0, 1, 2])
    cols = good.build().columns()._asdict()
    with pytest.raises(ScheduleError, match=r"step 0 transfer 2: dst rank 7 out of range 0\.\.3"):
        Schedule.from_columns(coll, "x", {**cols, "dst": [1, 2, 7]})
    with pytest.raises(ScheduleError, match="step 0 transfer 1: op code 2"):
        Schedule.from_columns(coll, "x", {**cols, "op": [0, 2, 0]})
    with pytest.raises(ScheduleError, match="step_offsets must rise from 0 to 3"):
        Schedule.from_columns(coll, "x", {**cols, "step_offsets": [0, 2]})
    with pytest.raises(ScheduleError, match="missing count"):
        Schedule.from_columns(coll, "x", {f: v for f, v in cols.items() if f != "count"})
    with pytest.raises(ScheduleError, match="src must be a 1-d array"):
        Schedule.from_columns(coll, "x", {**cols, "src": [0.0, 1.0, 2.0]})


def test_add_many_is_the_same_as_one_call_per_element() -> None:
    coll = Collective(Kind.ALLGATHER, 4, 2)
    one = ScheduleBuilder(coll, "x")
    many = ScheduleBuilder(coll, "x")
    with one.step():
        for r in range(4):
            one.copy(r, (r + 1) % 4, 0, 2, dst_buf=Buf.OUTPUT, dst_index=2 * r)
    with one.step():
        for r in range(4):
            one.reduce(r, r, 1, buf=Buf.OUTPUT, dst_index=(r + 3) % 8)
    with many.step():
        many.add_many(range(4), [1, 2, 3, 0], 0, 2, dst_buf=Buf.OUTPUT, dst_index=[0, 2, 4, 6])
    with many.step():
        many.add_many(range(4), range(4), 1, op="reduce", buf="output", dst_index=[3, 4, 5, 6])
    assert many.build() == one.build()
    with many.step(), pytest.raises(ScheduleError, match="step 2 transfer 1: src_index 4294967296"):
        many.add_many([0, 1], 1, [0, 1 << 32])
    with many.step(), pytest.raises(ScheduleError, match="do not broadcast"):
        many.add_many([0, 1], [1, 2, 3], 0)


def _direct_by_loops(p: int, k: int) -> Schedule:
    """The direct all-reduce transfer by transfer (the reference for its vectorised builder)."""
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, p, p * k), "direct")
    with b.step():
        for r in range(p):
            for j in range(p):
                if j != r:
                    for c in range(j * k, (j + 1) * k):
                        b.reduce(r, j, c)
    with b.step():
        for j in range(p):
            for r in range(p):
                if r != j:
                    for c in range(j * k, (j + 1) * k):
                        b.copy(j, r, c)
    return b.build()


@pytest.mark.parametrize(("p", "k"), [(1, 1), (2, 1), (3, 2), (5, 3)])
def test_vectorised_direct_builds_the_same_transfers_as_the_loops(p: int, k: int) -> None:
    from algorithms import registry

    assert registry.build("allreduce", "direct", p, chunks=k).steps == _direct_by_loops(p, k).steps
