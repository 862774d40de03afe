"""Ranks started with different settings are told so when the group is made, on every rank, within seconds.

Before, ranks with different COLLSCHED_EXECUTOR or check settings (or one rank whose native build failed, which
runs the Python executor) waited on each other for torch's whole group timeout (30 minutes) and then blamed
a peer (issue 34).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest
import torch
import torch.distributed as dist

from runners.execution import native
from tests.runners import backend_cases as cases
from tests.runners import limits

pytestmark = pytest.mark.multiprocess

# (what rank 1 changes, the words of the error): one group per case, each on a store of its own.
CASES: list[tuple[str, dict[str, str], str]] = [
    ("executor", {"COLLSCHED_EXECUTOR": "python"}, "the executor engine (COLLSCHED_EXECUTOR"),
    ("check", {"COLLSCHED_CHECK": "0"}, "the argument check (COLLSCHED_CHECK): rank 0: 1; rank 1: 0"),
    ("verify", {"COLLSCHED_VERIFY": "0"}, "verification (COLLSCHED_VERIFY): rank 0: 1; rank 1: 0"),
    ("failed build", {}, "the native build: rank 0: built; rank 1: collsched: native executor unavailable (test)"),
    ("same", {}, ""),
]


def _without_the_build() -> None:
    """What a rank whose native build failed looks like (runners.execution.native.load's fallback)."""
    native._module, native._tried = None, True
    native._note = "collsched: native executor unavailable (test); the Python executor runs"


def rounds(rank: int, world: int, store_dir: str) -> None:
    seen: list[tuple[str, str, float]] = []
    base = dict(os.environ)
    for i, (name, env, _) in enumerate(CASES):
        os.environ.clear()
        os.environ.update(base)
        if rank == 1:
            os.environ.update(env)
        saved = (native._module, native._tried, native._note)
        if rank == 1 and name == "failed build":
            _without_the_build()
        store = dist.FileStore(os.path.join(store_dir, f"round{i}"), world)
        start = time.monotonic()
        try:
            dist.init_process_group("collsched", store=store, rank=rank, world_size=world)
            x = torch.ones(4)
            dist.all_reduce(x)  # the group works when the settings agree
            seen.append((name, f"ok {x.tolist()}", time.monotonic() - start))
            dist.destroy_process_group()
        except Exception as e:
            seen.append((name, f"{type(e).__name__}: {e}", time.monotonic() - start))
        finally:
            native._module, native._tried, native._note = saved
    with open(os.path.join(store_dir, f"seen{rank}.json"), "w") as f:
        json.dump(seen, f)


def test_ranks_with_different_settings_are_named_at_group_creation(tmp_path: Any) -> None:
    if not native.available():
        pytest.skip(f"native extension not built: {native.build_note()}")
    cases.spawn(rounds, 2, str(tmp_path), backend="")
    got = [json.loads((tmp_path / f"seen{r}.json").read_text()) for r in range(2)]
    for rank, seen in enumerate(got):
        for (name, _, words), (case, text, took) in zip(CASES, seen, strict=True):
            assert case == name
            if name == "same":
                assert text == "ok [2.0, 2.0, 2.0, 2.0]", (rank, text)
                continue
            assert text.startswith("SettingsMismatch: collsched group of 2 ranks"), (rank, name, text)
            assert words in text, (rank, name, text)
            assert took < limits.PROMPT, (rank, name, took)  # not torch's 30-minute group timeout
    assert [t for _, t, _ in got[0]] == [t for _, t, _ in got[1]]  # the same error on every rank
