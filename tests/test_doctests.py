"""The examples in the public entry points' docstrings run, and print what they say.

verify (sim.verify), simulate (sim.engine), bound and synthesize (sim.bounds), register and build
(algorithms), the builder (algorithms.builder), load and save (algorithms.formats.files), the CLI parser
(sim.cli.app). Each module must hold at least one example, so a docstring that loses its examples fails.
"""

from __future__ import annotations

import doctest
import importlib
from collections.abc import Iterator

import pytest

MODULES = ("algorithms", "algorithms.builder", "algorithms.formats.files", "sim.verify", "sim.engine",
           "sim.engine.closed_form", "sim.bounds", "sim.cli.app")


@pytest.fixture
def registry_as_it_was() -> Iterator[None]:
    """The examples register algorithms whose globals doctest clears afterwards: take them out again, or a later
    test in this process that builds every registered algorithm (tune, sweep) meets a NameError."""
    from algorithms import registry

    before = dict(registry._REGISTRY)
    yield
    registry._REGISTRY.clear()
    registry._REGISTRY.update(before)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str, registry_as_it_was: None) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, report=True)
    assert result.attempted > 0, f"{name} has no docstring example"
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed (see stdout)"


def test_a_wrong_example_is_caught() -> None:
    import types

    fake = types.ModuleType("fake_for_doctest")
    fake.__doc__ = ">>> 1 + 1\n3\n"
    result = doctest.testmod(fake, report=False)
    assert (result.attempted, result.failed) == (1, 1)
