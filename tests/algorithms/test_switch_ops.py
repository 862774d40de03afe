"""Switch operations in the IR: builder, validation, the file format, and the MSCCL-IR writer's refusal."""

from __future__ import annotations

import json
import pickle

import pytest

from algorithms import Buf, Collective, Kind, Schedule, ScheduleError
from algorithms.formats import schedule as fmt
from algorithms.formats.msccl.writer import dumps_msccl
from algorithms.ir import Endpoint, SwitchOp, SwitchOpKind, switch_ops_by_step
from tests.algorithms import switch_cases


def _nvls(p: int = 4) -> Schedule:
    return switch_cases.nvls_allreduce(p)  # reduce chunk g into rank g in the switch, then multicast it


def test_builder_keeps_steps_that_hold_only_switch_ops() -> None:
    s = _nvls(4)
    assert (s.num_steps, s.num_transfers, len(s.switch_ops)) == (2, 0, 8)
    by = switch_ops_by_step(s)
    assert [len(x) for x in by] == [4, 4]
    first = by[0][1]
    assert first.op is SwitchOpKind.REDUCE and first.switch == "node0"
    assert first.sources == tuple(Endpoint(r, Buf.INPUT, 1) for r in range(4))
    assert first.targets == (Endpoint(1, Buf.INPUT, 1),)
    assert by[1][0].sources == (Endpoint(0, Buf.INPUT, 0),) and len(by[1][0].targets) == 3


def test_value_semantics_include_the_switch_ops() -> None:
    s = _nvls(4)
    bare = Schedule(s.collective, s.name, s.steps)
    assert s != bare and s == _nvls(4) and hash(s) == hash(_nvls(4))
    assert pickle.loads(pickle.dumps(s)) == s


def test_in_place_kinds_name_input_for_output() -> None:
    op = SwitchOp("multicast", "sw", ((0, "output", 0),), ((1, "output", 0),), 1, 0)
    s = Schedule(Collective(Kind.BROADCAST, 2, 1, root=0), "b", [[]], switch_ops=[op])
    assert s.switch_ops[0].sources == (Endpoint(0, Buf.INPUT, 0),)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"sources": ((0, "input", 0), (1, "input", 0))}, "a multicast has exactly one source, got 2"),
    ({"targets": ()}, "no targets"),
    ({"targets": ((5, "input", 0),)}, "targets rank 5 out of range 0..3"),
    ({"targets": ((1, "input", 3),), "count": 2}, "targets index 3 count 2 out of range for rank 1 input of 4"),
    ({"targets": ((1, "bogus", 0),)}, "unknown buffer 'bogus'"),
    ({"step": 3}, "step 3 out of range for 1 steps"),
    ({"switch": ""}, "switch must be a non-empty name"),
    ({"op": "scatter"}, "unknown op 'scatter'"),
])
def test_bad_switch_ops_are_refused_naming_the_field(kwargs: dict[str, object], message: str) -> None:
    fields: dict[str, object] = {"op": "multicast", "switch": "node0", "sources": ((0, "input", 0),),
                                 "targets": ((1, "input", 0),), "count": 1, "step": 0}
    fields.update(kwargs)
    with pytest.raises(ScheduleError, match=message.replace("(", r"\(").replace(")", r"\)")):
        op = SwitchOp(**fields)  # type: ignore[arg-type]
        Schedule(Collective(Kind.ALLREDUCE, 4, 4), "x", [[]], switch_ops=[op])


def test_file_round_trip_and_version_1_files_without_the_field() -> None:
    s = _nvls(4)
    text = fmt.dumps(s)
    assert fmt.loads(text) == s
    doc = json.loads(text)
    assert len(doc["switch_ops"]) == 8 and doc["format"] == "collsched.schedule/1"
    del doc["switch_ops"]
    assert fmt.from_dict(doc).switch_ops == ()
    plain = Schedule(Collective(Kind.ALLREDUCE, 2, 1), "p", [[]])
    assert "switch_ops" not in fmt.to_dict(plain)


@pytest.mark.parametrize(("path", "value", "message"), [
    (("sources", 0, "rank"), 9, r"^step 0 switch op \(reduce@node0 9.input.*sources rank 9 out of range"),
    (("sources", 0, "buf"), "x", r"switch_ops.0.sources.0.buf: 'x' is not one of"),
    (("count",), 0, r"switch_ops.0.count: 0 is less than the minimum of 1"),
    (("extra",), 1, r"switch_ops.0: Additional properties are not allowed"),
])
def test_bad_switch_op_fields_in_a_file_are_named(path: tuple[object, ...], value: object, message: str) -> None:
    doc = json.loads(fmt.dumps(_nvls(4)))
    obj = doc["switch_ops"][0]
    for k in path[:-1]:
        obj = obj[k]
    obj[path[-1]] = value
    with pytest.raises(ScheduleError, match=message):
        fmt.from_dict(doc)


def test_msccl_ir_refuses_switch_ops_naming_the_op() -> None:
    with pytest.raises(ScheduleError, match=r"cannot write step 0 switch op \(reduce@node0 .*\) as MSCCL-IR"):
        dumps_msccl(_nvls(4))
