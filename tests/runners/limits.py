"""The one setting every time limit of the runner tests derives from: ``COLLSCHED_TEST_TIMEOUT``.

It is the seconds one spawned job may take (default 300); CI or a user on a busy machine raises it, and every
limit below grows with it. No test asserts how long something took, nor that one process is faster than
another: a limit only bounds a wait that would otherwise hang, and the bounds of "promptly" are generous
fractions of it (a prompt failure must merely come well before a collective's own timeout).
"""

from __future__ import annotations

import os

ENV = "COLLSCHED_TEST_TIMEOUT"
BASE = float(os.environ.get(ENV, "300"))
"""Seconds one spawned job may take."""
JOB = BASE
RUN = BASE / 5
"""A run's own timeout where a test needs one that is not about timeouts (was 60 s)."""
PROMPT = BASE / 10
"""The bound of "at once": a failure that must come well before RUN, however busy the machine."""


def job(factor: float = 1.0) -> float:
    """The limit of a job ``factor`` times as long as a usual one (a slow test's spawn, a build)."""
    return BASE * factor
