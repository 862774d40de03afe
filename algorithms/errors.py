"""The collsched exception family: every error the package raises on purpose."""

from __future__ import annotations

__all__ = ["CollschedError", "ScheduleError", "RegistryError", "UsageError"]


class CollschedError(Exception):
    """Root of every error collsched raises deliberately."""


class ScheduleError(CollschedError, ValueError):
    """A schedule, collective or schedule file is invalid; the message names the field."""


class RegistryError(CollschedError, LookupError):
    """An algorithm is unknown, or cannot serve the requested collective."""


class UsageError(CollschedError):
    """Command-line arguments that do not fit together, or a quantity that cannot be read."""
