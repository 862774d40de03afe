"""The public hypothesis strategies: they draw what they promise and refuse bad arguments."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from algorithms import Collective, CollschedError, Kind
from algorithms.ir import ROOTED_KINDS
from sim import strategies as cst


@settings(max_examples=100, deadline=None)
@given(cst.collectives(max_ranks=9, max_chunks=3))
def test_collectives_are_valid(c: Collective) -> None:
    assert 1 <= c.ranks <= 9 and 1 <= c.chunks <= 3
    assert (c.root is not None) == (c.kind in ROOTED_KINDS)


@settings(max_examples=50, deadline=None)
@given(cst.schedules(kinds=["broadcast"], max_ranks=7))
def test_schedules_respect_kinds(s) -> None:  # type: ignore[no-untyped-def]
    assert s.collective.kind is Kind.BROADCAST and s.ranks <= 7


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: cst.world_sizes(max_ranks=0), "max_ranks"),
        (lambda: cst.chunk_counts(max_chunks=0), "max_chunks"),
        (lambda: cst.collectives(kinds=["allsum"]), "allsum"),
        (lambda: cst.collectives(kinds=[]), "at least one"),
        (lambda: cst.schedules(names=["no-such-algorithm"]), "no registered algorithm"),
        (lambda: cst.roots(0), "ranks"),
    ],
)
def test_bad_arguments_are_clear_errors(call, match: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CollschedError, match=match):
        call()
