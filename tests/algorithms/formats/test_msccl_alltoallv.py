"""MSCCL-IR export of all-to-allv: equal blocks write as the alltoall they are; any other matrix is refused."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from algorithms import Kind, Schedule, ScheduleError, registry
from algorithms.formats.msccl import dumps_msccl, loads_msccl
from sim.verify.verifier import verify


@pytest.mark.parametrize("name", ["direct", "pairwise", "bruck", "hierarchical"])
def test_equal_blocks_round_trip(name: str) -> None:
    s = registry.build("alltoallv", name, 4, matrix=[[3] * 4] * 4, **({"group": 2} if name == "hierarchical" else {}))
    back = loads_msccl(dumps_msccl(s))
    assert back.collective.kind is Kind.ALLTOALL and back.ranks == 4
    assert verify(back).ok
    # The same traffic: per (src, dst) pair, the share of a rank's input moved (the file may cut chunks finer).
    def pairs(x: Schedule) -> dict[tuple[int, int], Fraction]:
        out: dict[tuple[int, int], Fraction] = {}
        c = x.columns()
        whole = x.collective.input_chunks(0)
        for a, b, n in zip(c.src.tolist(), c.dst.tolist(), c.count.tolist(), strict=True):
            out[(a, b)] = out.get((a, b), Fraction(0)) + Fraction(n, whole)
        return out

    assert pairs(back) == pairs(s)


def test_unequal_blocks_are_refused_with_the_reason() -> None:
    t = np.full((3, 3), 2)
    t[1, 2] = 5
    s = registry.build("alltoallv", "direct", 3, matrix=t)
    with pytest.raises(ScheduleError, match=r"equal chunks.*T\[0\]\[0\] = 2 but T\[1\]\[2\] = 5"):
        dumps_msccl(s)
    empty = registry.build("alltoallv", "direct", 2, matrix=[[0, 0], [0, 0]])
    with pytest.raises(ScheduleError, match="every block is empty"):
        dumps_msccl(empty)
