"""The examples in the public entry points' docstrings run, and print what they say.

verify (sim.verify), simulate (sim.engine), bound and synthesize (sim.bounds), register and build
(algorithms), the builder (algorithms.builder), load and save (algorithms.formats.files), the CLI parser
(sim.cli.app). Each module must hold at least one example, so a docstring that loses its examples fails.
"""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ("algorithms", "algorithms.builder", "algorithms.formats.files", "sim.verify", "sim.engine",
           "sim.bounds", "sim.cli.app")


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
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
