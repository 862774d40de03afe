"""Progress bars on stderr, only when someone is watching.

``bar(...)`` is a tqdm bar when stderr is a terminal and ``enabled`` is true,
and a silent stand-in otherwise, so output piped to a file or another
program carries no carriage-return updates.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["bar", "wanted"]


class _Silent:
    """Does nothing; stands in for a tqdm bar."""

    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> _Silent:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def wanted(enabled: bool = True) -> bool:
    """Whether a bar would be shown: ``enabled`` and stderr is a terminal."""
    isatty = getattr(sys.stderr, "isatty", None)
    return enabled and callable(isatty) and bool(isatty())


def bar(total: int, *, unit: str, desc: str | None = None, enabled: bool = True) -> Any:
    """A tqdm bar on stderr (shown after 0.5 s, erased at the end) when ``wanted(enabled)``, else a no-op."""
    if not wanted(enabled):
        return _Silent()
    from tqdm import tqdm

    return tqdm(total=total, unit=unit, desc=desc, file=sys.stderr, delay=0.5, leave=False)
