"""``nvls_tree``'s stage count from NCCL's NVLSTree chunking of the whole buffer (src/enqueue.cc), by hand.

NCCL 2.19-2.30 ``calcCollChunking`` for NCCL_ALGO_NVLS_TREE: chunk = nvlsChunkSize (128 KiB), at most 64 KiB from
4 nodes on; then 256/128/64/32 KiB while nBytes < 32/16/4/1 x (nChannels x nHeads) x chunk. An iteration of the
kernel's loop moves nHeads chunks per channel (``computeCollLastChunkInfo``), so the buffer takes
nBytes / (nChannels x nHeads x chunk) iterations: the schedule's stages.
"""

from __future__ import annotations

import pytest

from algorithms.ir import Kind
from sim.machine import nccl
from sim.machine.nccl import _params, nvls_tree_chunk, nvls_tree_stages
from sim.topology.forms import from_spec

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


@pytest.mark.parametrize(("size", "nodes", "ops", "chunk"), [
    (1 * GiB, 64, 64, 64 * KiB),    # 4+ nodes: 64 KiB; 1 GiB >= 4 x 64 x 64 KiB = 16 MiB, kept
    (1 * GiB, 2, 64, 128 * KiB),    # 2 nodes: the NVLS chunk; 1 GiB >= 16 x 64 x 128 KiB = 128 MiB, kept
    (64 * MiB, 2, 64, 128 * KiB),   # 64 MiB < 16 x 8 MiB, but the chunk is not above 128 KiB; >= 4 x 8 MiB
    (16 * MiB, 2, 64, 64 * KiB),    # 16 MiB < 4 x 8 MiB: 64 KiB
    (3 * MiB, 64, 64, 32 * KiB),    # 3 MiB < 1 x 64 x 64 KiB = 4 MiB: 32 KiB
    (4 * MiB, 64, 64, 64 * KiB),    # not below 4 MiB: kept
])
def test_the_chunk_is_nccls(size: int, nodes: int, ops: int, chunk: int) -> None:
    assert nvls_tree_chunk(size, nodes, ops) == chunk


def test_the_stages_cover_the_whole_buffer_not_each_ranks_piece(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nccl, "NVLS_TREE_STAGE_TRANSFERS", 1 << 40)
    # 1 GiB on 2,048 nodes of 8 H100s, 8 NVLS channels of 8 heads: 1 GiB / (64 x 64 KiB) = 256 iterations, the
    # pipeline full at 64. Each rank's piece (1 GiB / 16,384 = 64 KiB) would have given one stage.
    assert nvls_tree_stages(GiB, 2048, 8, 8, 16384) == 64
    # 32 MiB on 64 nodes: 32 MiB / (64 x 64 KiB) = 8.
    assert nvls_tree_stages(32 * MiB, 64, 8, 8, 512) == 8
    # 3 MiB on 64 nodes: the 32 KiB chunk, 3 MiB / (64 x 32 KiB) = 1.5, so 2.
    assert nvls_tree_stages(3 * MiB, 64, 8, 8, 512) == 2


def test_the_transfer_budget_caps_the_stages() -> None:
    assert nvls_tree_stages(GiB, 2048, 8, 8, 16384) == max(1, nccl.NVLS_TREE_STAGE_TRANSFERS // (4 * 16384))


def test_a_cluster_beyond_the_search_takes_nccls_stages() -> None:
    t = from_spec("dgx-h100:64")
    assert _params(Kind.ALLREDUCE, "nvls_tree", t, GiB)["chunks"] == nvls_tree_stages(GiB, 64, 8, 8, 512) == 64
    small = from_spec("dgx-h100:8")  # up to 64 ranks: the 128 KiB rule, searched (_stage_counts)
    assert _params(Kind.ALLREDUCE, "nvls_tree", small, GiB)["chunks"] == 64
    assert _params(Kind.ALLREDUCE, "nvls_tree", small, 4 * MiB)["chunks"] == 1
