"""A ``Cost``'s functions take ``(p, n, params)``: ``register`` refuses any other signature, naming the algorithm and
the module, and the library, README and docs name the third argument ``params`` (it is the parameter dictionary,
not a chunk count)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from algorithms import Collective, Kind, ScheduleBuilder, registry
from algorithms.errors import RegistryError
from algorithms.registry import Cost, register

ROOT = Path(__file__).resolve().parents[2]


def _ring(ranks: int, *, chunks: int = 1) -> Any:
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, ranks, ranks), "cost-test-ring")
    return b.build()


@pytest.fixture
def scratch_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    yield


def _cost(**overrides: Callable[..., float]) -> Cost:
    fns: dict[str, Any] = {"steps": lambda p, n, params: 2 * (p - 1), "bytes": lambda p, n, params: n,
                           "reduced": lambda p, n, params: n}
    fns.update(overrides)
    return Cost("2(p-1)α", **fns)


@pytest.mark.parametrize("bad", [lambda p, n: 2 * (p - 1), lambda p, n, k, extra: 0, lambda: 0,
                                 lambda p, n, *, params: 0])
def test_register_refuses_a_cost_function_that_does_not_take_p_n_params(scratch_registry: None,
                                                                        bad: Callable[..., float]) -> None:
    with pytest.raises(RegistryError) as e:
        register(Kind.ALLREDUCE, "cost-test-bad", source="here", cost=_cost(steps=bad))(_ring)
    message = str(e.value)
    assert "allreduce/cost-test-bad" in message and "Cost.steps" in message
    assert "(p, n, params)" in message and f"module {__name__}" in message
    with pytest.raises(RegistryError, match="unknown algorithm"):
        registry.get("allreduce", "cost-test-bad")  # nothing half-registered


def test_register_refuses_a_bad_sent_per_rank_and_a_cost_that_is_not_a_cost(scratch_registry: None) -> None:
    with pytest.raises(RegistryError, match=r"Cost\.sent_per_rank"):
        register(Kind.ALLREDUCE, "cost-test-bad", source="here", cost=_cost(sent_per_rank=lambda p: p))(_ring)
    with pytest.raises(RegistryError, match=r"must be an algorithms\.registry\.Cost"):
        register(Kind.ALLREDUCE, "cost-test-bad", source="here", cost=lambda p, n, params: 0)(_ring)  # type: ignore


def test_register_takes_any_function_that_accepts_three_positional_arguments(scratch_registry: None) -> None:
    def with_default(p: int, n: float, params: Any, scale: float = 1.0) -> float:
        return scale * n

    register(Kind.ALLREDUCE, "cost-test-good", source="here",
             cost=_cost(bytes=with_default, reduced=lambda *a: 0.0))(_ring)
    alg = registry.get("allreduce", "cost-test-good")
    assert alg.cost is not None and alg.cost.bytes(4, 8.0, {"chunks": 1}) == 8.0
    assert alg.module == __name__


def test_the_library_names_the_third_argument_params() -> None:
    odd = []
    for alg in [*registry.algorithms(), *registry.by_name_only()]:
        if alg.cost is None:
            continue
        for field in ("steps", "bytes", "reduced", "sent_per_rank"):
            fn = getattr(alg.cost, field)
            if fn is None:
                continue
            names = list(inspect.signature(fn).parameters)
            if names[:3] != ["p", "n", "params"]:
                odd.append(f"{alg.kind}/{alg.name} Cost.{field}{inspect.signature(fn)}")
    assert odd == []


def test_readme_and_docs_name_the_third_argument_params() -> None:
    for path in (ROOT / "README.md", *(ROOT / "docs").glob("*.md")):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"lambda p, n, (?!params\b)\w+", text), path.name
    assert "lambda p, n, params" in (ROOT / "README.md").read_text(encoding="utf-8")
