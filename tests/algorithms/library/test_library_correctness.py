"""The algorithm library is correct: every algorithm meets its postcondition for every world size, root and
chunk count, in lockstep and under every dataflow order, exhaustively at small sizes; and mutants are caught."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from algorithms import registry
from algorithms.ir import ROOTED_KINDS, Schedule
from sim.verify import mutation
from sim.verify import strategies as cst
from sim.verify.dataflow import differences
from sim.verify.verifier import verify

ALGORITHMS = [(a.kind.value, a.name) for a in registry.algorithms()]
TORUS_ALGORITHMS = {"swing_torus", "torus_bucket", "swing_torus_latency_optimal", "rabenseifner_torus",
                    "recursive_doubling_torus", "hamiltonian_rings"}


def instances(kind: str, name: str, max_ranks: int = 64) -> st.SearchStrategy[Schedule]:
    """A schedule of one algorithm at a drawn world size, root, chunk count and (if any) group size."""
    algo = registry.get(kind, name)  # an unknown name fails here, never skips
    names = {prm.name for prm in algo.parameters}
    caps = {n: cap for n, cap in (("group", 9), ("channels", 4)) if n in names} or None
    return cst.schedules(kinds=[kind], names=[name], max_ranks=max_ranks, max_chunks=4, max_params=caps)


def _correct_in_any_order(schedule: Schedule, seed: int) -> None:
    report = verify(schedule)
    assert report.ok, str(report)
    # A seeded order rather than hypothesis' randoms(): schedules of 10^4 transfers would
    # draw more entropy than hypothesis allows per example.
    rng = random.Random(seed)
    assert differences(schedule, lambda items: rng.randrange(len(items))) == [], "an order disagrees with lockstep"


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@pytest.mark.parametrize(("kind", "name"), ALGORITHMS)
@given(data=st.data())
def test_correct_in_lockstep_and_in_any_dataflow_order(kind: str, name: str, data: st.DataObject) -> None:
    # Up to 48 ranks (powers of two and the sizes between them to 32, then the folds of 33-48); the torus
    # algorithms move 2·D parts per rank: up to 24 ranks here (test_library_torus.py verifies their grids
    # up to 64).
    most = 24 if name in TORUS_ALGORITHMS else 48
    _correct_in_any_order(data.draw(instances(kind, name, most)), data.draw(st.integers(0, 2**32)))


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


# --- mutation testing ------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "name"), ALGORITHMS)
def test_every_outcome_changing_mutant_is_caught_on_folded_and_rooted_instances(kind: str, name: str) -> None:
    # Complements tests/sim/verify/test_mutation.py (p = 2, 3, 5, 8, root p-1): non-power-of-two sizes where
    # the folds are active, a root in the middle, and a group size that leaves ranks over.
    algo = registry.get(kind, name)
    names = {prm.name for prm in algo.parameters}
    for p in (6, 7):
        params = {n: v for n, v in (("chunks", 2), ("group", 3)) if n in names}
        if algo.unsupported(p, params) is not None:  # NCCL's algorithms need group | p: their nodes
            params.pop("group")
        schedule = algo.build(p, root=3 if algo.kind in ROOTED_KINDS else None, **params)
        report = mutation.kill_rate(schedule, samples=60, seed=p)
        assert report.changed > 0
        assert report.rate == 1.0, report.survivors[:3]
