"""Suite-wide guard: a test that starts a process must carry ``@pytest.mark.multiprocess``.

The quick loop (``pytest -m "not slow and not multiprocess"``) stays quick only if
every test that spawns ranks or runs a subprocess says so. Unmarked tests get
``subprocess.Popen`` and ``multiprocessing``'s ``Process.start`` replaced by a
function that fails the test, naming the marker.
"""

from __future__ import annotations

import multiprocessing.process
import subprocess
from typing import Any

import matplotlib
import pytest

# matplotlib lists the system's fonts with `fc-list` the first time its font manager loads on a machine
# (a fresh virtual environment, a new CI machine): do it here, before the guard below is in place.
matplotlib.use("Agg")
import matplotlib.font_manager


@pytest.fixture(autouse=True)
def _processes_need_the_multiprocess_marker(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.node.get_closest_marker("multiprocess") is not None:
        return

    def refuse(*args: Any, **kwargs: Any) -> None:
        pytest.fail(f"{request.node.nodeid} starts a process: mark it @pytest.mark.multiprocess", pytrace=False)

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refuse)
