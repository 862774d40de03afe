"""Lazy exports for a package's ``__init__``: names imported from their modules when first used.

A package whose modules need networkx, simpy or numpy can still be imported by code that only needs a
light part of it (the command line's parser, the registry's plugin loading):

    __getattr__ = lazy_exports(__name__, {"Topology": "graph", "from_spec": "forms"})

A home is a module of the package (``"graph"``: ``<package>.graph``) or, with leading dots, a module named
as a relative import from the package's ``__init__`` names it (``"..topology.routing"`` in ``sim.bounds``:
``sim.topology.routing``). A dotted name without a leading dot is below the package, never absolute.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that imports ``name`` from its home (relative to the package), once."""

    def __getattr__(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        home = homes[name]
        value = getattr(importlib.import_module(home if home.startswith(".") else f".{home}", package), name)
        setattr(sys.modules[package], name, value)  # once: later lookups find it without this hook
        return value

    return __getattr__
