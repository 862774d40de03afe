"""Every registered algorithm meets its postcondition for every world size, root and chunk count."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from algorithms import Schedule, registry
from algorithms.ir import ROOTED_KINDS
from sim.verify import strategies as cst
from sim.verify.verifier import verify

ALGORITHMS = [(a.kind.value, a.name) for a in registry.algorithms()]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@pytest.mark.parametrize(("kind", "name"), ALGORITHMS)
@given(data=cst.st.data())
def test_postcondition_over_ranks_1_to_64(kind: str, name: str, data) -> None:  # type: ignore[no-untyped-def]
    schedule: Schedule = data.draw(cst.schedules(kinds=[kind], names=[name], max_ranks=64, max_chunks=4))
    report = verify(schedule)
    assert report.ok, str(report)


@pytest.mark.parametrize(("kind", "name"), ALGORITHMS)
def test_small_world_sizes_exhaustively(kind: str, name: str) -> None:
    algo = registry.get(kind, name)
    chunked = any(p.name == "chunks" for p in algo.parameters)
    for p in range(1, 10):
        if algo.unsupported(p) is not None:
            continue
        for root in range(p) if algo.kind in ROOTED_KINDS else [None]:
            for k in (1, 2, 3) if chunked else (None,):
                params = {} if k is None else {"chunks": k}
                report = verify(algo.build(p, root=root, **params))
                assert report.ok, str(report)
