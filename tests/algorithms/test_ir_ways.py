"""``Schedule.ways``: per transfer, which of the tied shortest routes it takes; checked when built, kept by value,
carried by the builder, pickling and the collsched.schedule/1 JSON format (not by MSCCL-IR XML)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from algorithms import registry
from algorithms.builder import ScheduleBuilder
from algorithms.errors import ScheduleError
from algorithms.formats import schedule as fmt
from algorithms.ir import Buf, Collective, Kind, Op, Schedule, Transfer


def _pair(ways: list[int] | None) -> Schedule:
    t = [Transfer(0, 1, Buf.INPUT, 0, Buf.INPUT, 0, 1, Op.REDUCE),
         Transfer(1, 0, Buf.INPUT, 1, Buf.INPUT, 1, 1, Op.REDUCE)]
    return Schedule(Collective(Kind.ALLREDUCE, 2, 2), "pair", [t], ways=ways)


def test_ways_are_checked() -> None:
    assert _pair([0, 3]).ways is not None and _pair([0, 3]).ways.tolist() == [0, 3]
    with pytest.raises(ScheduleError, match="2 transfers"):
        _pair([1])
    with pytest.raises(ScheduleError, match=r"ways\[1\] is -1"):
        _pair([0, -1])
    with pytest.raises(ScheduleError, match=r"ways\[0\] is 65536"):
        _pair([65536, 0])
    with pytest.raises(ScheduleError, match="integers"):
        _pair([0.5, 1])  # type: ignore[list-item]


def test_all_default_ways_are_none_and_ways_count_in_equality() -> None:
    assert _pair([0, 0]).ways is None
    assert _pair([0, 0]) == _pair(None)
    assert _pair([0, 1]) != _pair(None)
    assert hash(_pair([0, 1])) == hash(_pair([0, 1]))
    s = _pair([2, 1])
    assert pickle.loads(pickle.dumps(s)) == s
    ways = s.ways
    assert ways is not None and not ways.flags.writeable


def test_the_builder_carries_a_transfers_way() -> None:
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, 2, 2), "pair")
    with b.step():
        b.add(Transfer(0, 1, Buf.INPUT, 0, Buf.INPUT, 0, 1, Op.REDUCE))
        b.add(Transfer(1, 0, Buf.INPUT, 1, Buf.INPUT, 1, 1, Op.REDUCE), way=2)
    assert b.build() == _pair([0, 2])
    with b.step(), pytest.raises(ScheduleError, match="way"):
        b.add(Transfer(0, 1, Buf.INPUT, 0, Buf.INPUT, 0, 1, Op.COPY), way=-1)


def test_json_round_trips_ways() -> None:
    s = registry.build("allreduce", "rabenseifner_torus", 16, dims="4x4")
    assert s.ways is not None and 0 < int(np.count_nonzero(s.ways)) < s.num_transfers
    assert fmt.loads(fmt.dumps(s)) == s
    assert fmt.from_dict(fmt.to_dict(s)) == s
    assert "ways" not in fmt.to_dict(_pair(None))
    doc = fmt.to_dict(_pair([0, 1]))
    doc["ways"][1] = True
    with pytest.raises(ScheduleError, match=r"ways\.1"):
        fmt.from_dict(doc)
    doc["ways"] = [0]
    with pytest.raises(ScheduleError, match="ways has 1 entries"):
        fmt.from_dict(doc)
