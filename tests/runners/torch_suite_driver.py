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

from torch.testing._internal.common_utils import run_tests
from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend


class TestCollschedWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self) -> None:
        super().setUp()
        self._spawn_processes()


if __name__ == "__main__":
    run_tests()
