"""Small campaigns the campaign tests share."""

from __future__ import annotations

from pathlib import Path

import pytest

SMALL = """
name = "small"
sizes = ["1KiB", "16KiB", "256KiB", "4MiB"]
topologies = ["ring:4", "switch:4", {spec = "torus:2x3", bandwidth = "100GB/s", label = "torus-fast"}]
[algorithms]
allreduce = ["ring", "direct", "recursive_doubling", {name = "ring", params = {chunks = [2, 4]}}]
allgather = "*"
broadcast = ["binomial", "linear", {name = "chain", params = {chunks = [1, 4]}}]
"""


@pytest.fixture
def small(tmp_path: Path) -> Path:
    path = tmp_path / "small.toml"
    path.write_text(SMALL)
    return path
