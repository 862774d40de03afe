"""Hypothesis strategies for testing collective algorithms, yours and ours.

Use them in your own test suite to check a new algorithm for every world
size, root and chunk count, and under every execution order::

    from hypothesis import given
    from sim import strategies as cst
    from sim.verify import verify

    @given(cst.schedules(kinds=["allreduce"], max_ranks=32))
    def test_every_allreduce_is_correct(schedule):
        assert verify(schedule).ok

    @given(cst.schedules(), cst.dataflow_orders())
    def test_any_order_agrees(schedule, choose):
        assert differences(schedule, choose) == []

``topologies(p)`` draws random strongly connected networks of p ranks (with
switches, bandwidths and latencies) for ``sim.engine.simulate``.

To test a builder that is not registered, draw its inputs with
``world_sizes``/``roots``/``chunk_counts`` and call it. Strategies are
built bottom-up from integers, so failures shrink to the smallest world
size, root and chunk count.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from hypothesis import strategies as st

from algorithms import registry
from algorithms.errors import CollschedError
from algorithms.ir import ROOTED_KINDS, Collective, Kind, Schedule
from sim.dataflow import Chooser
from sim.topology_strategies import topologies

__all__ = ["algorithms", "chunk_counts", "collectives", "dataflow_orders", "roots", "schedules", "topologies",
           "world_sizes"]


def _check_bound(name: str, value: int, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise CollschedError(f"{name} must be an integer >= {low}, got {value!r}")


def world_sizes(*, min_ranks: int = 1, max_ranks: int = 16) -> st.SearchStrategy[int]:
    """World sizes p in [min_ranks, max_ranks]; shrinks towards min_ranks."""
    _check_bound("min_ranks", min_ranks, 1)
    _check_bound("max_ranks", max_ranks, min_ranks)
    return st.integers(min_ranks, max_ranks)


def chunk_counts(*, max_chunks: int = 4) -> st.SearchStrategy[int]:
    """Chunk counts in [1, max_chunks]; shrinks towards 1."""
    _check_bound("max_chunks", max_chunks, 1)
    return st.integers(1, max_chunks)


def roots(ranks: int) -> st.SearchStrategy[int]:
    """A root rank for p = ``ranks``; shrinks towards 0."""
    _check_bound("ranks", ranks, 1)
    return st.integers(0, ranks - 1)


def _kinds(kinds: Iterable[Kind | str] | None) -> list[Kind]:
    if kinds is None:
        return list(Kind)
    out = []
    for k in kinds:
        try:
            out.append(Kind(k))
        except ValueError:
            raise CollschedError(f"unknown collective kind {k!r}") from None
    if not out:
        raise CollschedError("kinds must name at least one collective kind")
    return out


def collectives(
    *, kinds: Iterable[Kind | str] | None = None, max_ranks: int = 16, max_chunks: int = 4
) -> st.SearchStrategy[Collective]:
    """Collective specifications: any kind (or one of ``kinds``), world size, chunk count and root."""
    ks = _kinds(kinds)

    @st.composite
    def build(draw: st.DrawFn) -> Collective:
        kind = draw(st.sampled_from(ks))
        p = draw(world_sizes(max_ranks=max_ranks))
        c = 1 if kind is Kind.BARRIER else draw(chunk_counts(max_chunks=max_chunks))
        root = draw(roots(p)) if kind in ROOTED_KINDS else None
        return Collective(kind, p, c, root)

    return build()


def algorithms(kinds: Iterable[Kind | str] | None = None) -> st.SearchStrategy[registry.Algorithm]:
    """Registered algorithms, optionally only of ``kinds``."""
    ks = set(_kinds(kinds))
    found: Sequence[registry.Algorithm] = [a for a in registry.algorithms() if a.kind in ks]
    if not found:
        raise CollschedError(f"no registered algorithm for {sorted(k.value for k in ks)}")
    return st.sampled_from(found)


def schedules(
    *,
    kinds: Iterable[Kind | str] | None = None,
    names: Iterable[str] | None = None,
    max_ranks: int = 16,
    max_chunks: int = 4,
) -> st.SearchStrategy[Schedule]:
    """Schedules built by registered algorithms over world sizes, roots and chunk counts.

    ``names`` restricts to algorithms with those names. World sizes an
    algorithm cannot serve (its registry check says why) are skipped.
    """
    _check_bound("max_ranks", max_ranks, 1)
    _check_bound("max_chunks", max_chunks, 1)
    wanted = None if names is None else set(names)
    ks = set(_kinds(kinds))
    pool = [a for a in registry.algorithms() if a.kind in ks and (wanted is None or a.name in wanted)]
    if not pool:
        raise CollschedError("no registered algorithm matches the given kinds and names")

    @st.composite
    def build(draw: st.DrawFn) -> Schedule:
        algo = draw(st.sampled_from(pool))
        p = draw(world_sizes(max_ranks=max_ranks))
        params = {}
        if any(prm.name == "chunks" for prm in algo.parameters):
            params["chunks"] = draw(chunk_counts(max_chunks=max_chunks))
        reason = algo.unsupported(p, params)
        if reason is not None:
            from hypothesis import reject

            reject()
        root = draw(roots(p)) if algo.kind in ROOTED_KINDS else None
        return algo.build(p, root=root, **params)

    return build()


def dataflow_orders() -> st.SearchStrategy[Chooser]:
    """Choosers for ``sim.dataflow.execute_in_order``: each picks the next enabled event at random."""
    return st.randoms(use_true_random=False).map(lambda rng: (lambda items: rng.randrange(len(items))))
