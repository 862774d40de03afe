"""Every public name resolves: each module of algorithms, sim and runners imports, and every name in its
``__all__`` is there (``getattr``, which runs a package's lazy ``__getattr__``: a lazy re-export pointing at a
module that does not exist fails only here, at first use, not when the package is imported)."""

from __future__ import annotations

import importlib
import pkgutil

PACKAGES = ("algorithms", "sim", "runners")


def modules(package: str) -> list[str]:
    """``package`` and every module and subpackage below it, by name."""
    root = importlib.import_module(package)
    return [package, *(m.name for m in pkgutil.walk_packages(root.__path__, package + "."))]


def missing_names(names: list[str]) -> list[str]:
    """``module: what went wrong`` for every module that does not import and every ``__all__`` name not found."""
    broken: list[str] = []
    for name in names:
        try:
            module = importlib.import_module(name)
        except Exception as e:
            broken.append(f"{name}: import: {e!r}")
            continue
        for attr in getattr(module, "__all__", ()):
            try:
                getattr(module, attr)
            except Exception as e:
                broken.append(f"{name}.{attr}: {e!r}")
    return broken


def test_every_name_in_every_all_resolves() -> None:
    names = [m for package in PACKAGES for m in modules(package)]
    assert len(names) > 100 and {"sim.bounds", "sim.topology", "runners.backend"} <= set(names)
    assert missing_names(names) == []

