"""PyTorch's own distributed test suite on the collsched backend.

``torch.testing._internal.distributed.distributed_test`` is the suite PyTorch runs against its own
backends (test/distributed/test_distributed_spawn.py upstream): each test spawns WORLD_SIZE ranks that
call ``init_process_group(backend=BACKEND)``. This file binds it to a test case the same way, so that
``BACKEND=collsched WORLD_SIZE=2 python -m pytest --noconftest tests/runners/torch_suite_driver.py``
runs it on collsched.
``tests/runners/test_torch_suite.py`` runs it in a subprocess (the suite reads BACKEND at import); pytest does
not collect this file by itself (no ``test_`` prefix).
"""

from __future__ import annotations

import torch.multiprocessing
from torch.testing._internal.common_utils import run_tests
from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend


class TestCollschedWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    """Upstream's way: each rank a fresh interpreter, which finds the collsched backend by itself."""

    def setUp(self) -> None:
        super().setUp()
        self._spawn_processes()


class TestCollschedWithFork(TestDistBackend, DistributedTest._DistTestBase):
    """The same tests with forked ranks (PyTorch ran the suite so too, test_distributed_fork.py): a rank
    starts in well under a second instead of re-importing torch and the suite, about ten seconds here."""

    def setUp(self) -> None:
        super().setUp()
        self._start_processes(torch.multiprocessing.get_context("fork").Process)


if __name__ == "__main__":
    run_tests()
