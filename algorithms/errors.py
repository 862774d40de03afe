"""The collsched exception family: every error the package raises on purpose."""

from __future__ import annotations

__all__ = ["CollschedError", "ScheduleError", "RegistryError"]


class CollschedError(Exception):
    """Root of every error collsched raises deliberately."""


class ScheduleError(CollschedError, ValueError):
    """A schedule, collective or schedule file is invalid; the message names the field."""


class RegistryError(CollschedError, LookupError):
    """An algorithm is unknown, or cannot serve the requested collective."""
