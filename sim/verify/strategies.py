"""Hypothesis strategies for testing collective algorithms, yours and ours.

Use them in your own test suite to check a new algorithm for every world
size, root and chunk count, and under every execution order::

    from hypothesis import given
    from sim.verify import strategies as cst
    from sim.verify import assert_verified
    from sim.verify.dataflow import differences

    @cst.settings
    @given(cst.schedules(kinds=["allreduce"], max_ranks=32))
    def test_every_allreduce_is_correct(schedule):
        assert_verified(schedule)        # raises naming the schedule and listing its violations

    @cst.settings
    @given(cst.schedules(), cst.dataflow_orders())
    def test_any_order_agrees(schedule, choose):
        assert differences(schedule, choose) == []

``schedules`` draws every declared parameter of an algorithm (``chunks``
up to ``max_chunks``, any other integer from its minimum up to ``max(default, p)``
or ``max_params[name]``, a text among its declared ``choices``; a text without
choices, such as the synthesizer's topology SPEC, keeps its default), and only
world sizes the algorithm serves.

``settings`` is the profile to run them under: one example of a large
world size can take a second to build, verify and replay, which hypothesis'
default 200 ms deadline and its health checks would call flaky or too slow;
the profile has no deadline, lets large and slow examples through and
bounds the run at ``max_examples=25``. Use it as a decorator (above), or
``settings(cst.settings, max_examples=100)`` to change one field.

``topologies(p)`` draws random strongly connected networks of p ranks (with
switches, bandwidths and latencies) for ``sim.engine.reference.simulate``.

To test a builder that is not registered, draw its inputs with
``world_sizes``/``roots``/``chunk_counts`` and call it. Strategies are
built bottom-up from integers, so failures shrink to the smallest world
size, root and chunk count.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence

import hypothesis
from hypothesis import HealthCheck
from hypothesis import strategies as st

from algorithms import registry
from algorithms.errors import CollschedError
from algorithms.ir import ROOTED_KINDS, Collective, Kind, Schedule
from sim.topology.strategies import topologies
from sim.verify.dataflow import Chooser

__all__ = ["algorithms", "chunk_counts", "collectives", "dataflow_orders", "roots", "schedules", "settings",
           "topologies", "world_sizes"]

settings = hypothesis.settings(
    deadline=None,
    max_examples=25,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                           HealthCheck.large_base_example],
)
"""The settings profile for property tests of schedules (see the module docstring)."""
hypothesis.settings.register_profile("collsched", settings)


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
        if kind is Kind.ALLTOALLV:  # a traffic matrix of 0..max_chunks chunks a pair instead of C
            matrix = draw(st.lists(st.lists(st.integers(0, max_chunks), min_size=p, max_size=p), min_size=p,
                                   max_size=p))
            return Collective(kind, p, matrix=tuple(tuple(row) for row in matrix))
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
    min_ranks: int = 1,
    max_ranks: int = 16,
    max_chunks: int = 4,
    max_params: Mapping[str, int] | None = None,
) -> st.SearchStrategy[Schedule]:
    """Schedules built by registered algorithms over world sizes, roots and every declared parameter.

    ``names`` restricts to algorithms with those names (an unknown name is an
    error, not an empty strategy). Each of an algorithm's integer parameters is
    drawn from its ``minimum`` to ``max_chunks`` for ``chunks``, to
    ``max_params[name]`` where given, else to ``max(default, p)``; each text
    parameter among its ``choices`` (``registry.Parameter``; one without
    choices keeps its default); and among those from the values the
    algorithm's registry check accepts together with the parameters drawn
    before it. World sizes the algorithm cannot
    serve with its default parameters are never drawn; a drawn combination it
    still refuses is rejected.
    """
    _check_bound("min_ranks", min_ranks, 1)
    _check_bound("max_ranks", max_ranks, min_ranks)
    _check_bound("max_chunks", max_chunks, 1)
    wanted = None if names is None else set(names)
    ks = set(_kinds(kinds))
    pool = [a for a in registry.algorithms() if a.kind in ks and (wanted is None or a.name in wanted)]
    if not pool:
        raise CollschedError("no registered algorithm matches the given kinds and names")
    caps = dict(max_params or {})
    declared = {prm.name: prm for a in pool for prm in a.parameters}
    for name, cap in caps.items():
        if name not in declared:
            raise CollschedError(f"max_params: no algorithm drawn here has a parameter {name!r} "
                                 f"(they have: {', '.join(sorted(declared)) or 'none'})")
        _check_bound(f"max_params[{name!r}]", cap, declared[name].minimum)
    sizes: dict[str, list[int]] = {}
    for a in pool:
        ok = list(range(min_ranks, max_ranks + 1)) if a.check is None else \
            [p for p in range(min_ranks, max_ranks + 1) if a.unsupported(p) is None]
        if ok:
            sizes[f"{a.kind.value}/{a.name}"] = ok
    pool = [a for a in pool if f"{a.kind.value}/{a.name}" in sizes]
    if not pool:
        raise CollschedError(f"no algorithm drawn here serves any world size in [{min_ranks}, {max_ranks}]")

    @st.composite
    def build(draw: st.DrawFn) -> Schedule:
        algo = draw(st.sampled_from(pool))
        ok = sizes[f"{algo.kind.value}/{algo.name}"]
        # Integers in a contiguous range shrink by value; otherwise sample the sorted list (shrinks to its head).
        p = draw(st.integers(ok[0], ok[-1]) if len(ok) == ok[-1] - ok[0] + 1 else st.sampled_from(ok))
        params: dict[str, int | str] = {}
        for prm in algo.parameters:
            if isinstance(prm.default, str):
                if prm.choices:  # among the declared values the check accepts with what is drawn so far
                    texts = [v for v in prm.choices if algo.unsupported(p, {**params, prm.name: v}) is None] \
                        if algo.check is not None else list(prm.choices)
                    params[prm.name] = draw(st.sampled_from(texts or list(prm.choices)))
                continue  # a free text (the synthesizer's topology SPEC) keeps its default
            if prm.name == "chunks":
                hi = max_chunks
            else:
                hi = caps.get(prm.name, max(prm.default, p))
            lo, hi = prm.minimum, max(prm.minimum, hi)
            # Draw among the values the algorithm's check accepts with what is drawn so far (a check such
            # as "a power of two <= p/2" would otherwise reject most draws); all values when none is.
            fits = [v for v in range(lo, hi + 1) if algo.unsupported(p, {**params, prm.name: v}) is None] \
                if algo.check is not None and hi - lo <= 256 else []
            params[prm.name] = draw(st.sampled_from(fits) if fits else st.integers(lo, hi))
        if algo.unsupported(p, params) is not None:
            hypothesis.reject()
        root = draw(roots(p)) if algo.kind in ROOTED_KINDS else None
        return algo.build(p, root=root, **params)

    return build()


class _SeededOrder:
    """A chooser that picks uniformly at random from a seeded generator (shows its seed when a test fails)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._rng = random.Random(seed)

    def __call__(self, items: Sequence[int]) -> int:
        return self._rng.randrange(len(items))

    def __repr__(self) -> str:
        return f"dataflow_order(seed={self.seed})"


def dataflow_orders() -> st.SearchStrategy[Chooser]:
    """Choosers for ``sim.verify.dataflow.execute_in_order`` and ``differences``: each picks the next enabled
    event at random from a drawn seed, so a schedule of any size costs hypothesis one integer."""
    return st.integers(0, 2**32 - 1).map(_SeededOrder)
