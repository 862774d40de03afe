"""The benchmark's expected results for every dtype, and its refusal of more local ranks than fit."""

from __future__ import annotations

import json

import pytest
import torch

from algorithms.ir import Kind
from runners.commands.bench import _buffers
from runners.commands.cli import main

DTYPES = (torch.bool, torch.int8, torch.uint8, torch.int32, torch.float16, torch.bfloat16, torch.float32)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("p", [2, 3, 5])
def test_the_expected_reductions_are_torchs_for_every_dtype(dtype: torch.dtype, p: int) -> None:
    # The reference: the ranks' inputs stacked and reduced by torch itself (SUM on bool is OR, as gloo's is).
    def reduced(xs: list[torch.Tensor]) -> torch.Tensor:
        stacked = torch.stack(xs)
        return stacked.any(0) if dtype is torch.bool else stacked.sum(0, dtype=dtype)

    n = 64
    xs = [_buffers(Kind.ALLREDUCE, p, r, None, n, dtype)[0] for r in range(p)]
    assert torch.equal(_buffers(Kind.ALLREDUCE, p, 0, None, n, dtype)[2], reduced(xs))
    wide = [_buffers(Kind.REDUCESCATTER, p, r, None, n, dtype)[0] for r in range(p)]
    for r in range(p):
        want = reduced([w[r * n:(r + 1) * n] for w in wide])
        assert torch.equal(_buffers(Kind.REDUCESCATTER, p, r, None, n, dtype)[2], want)


def test_bool_inputs_do_cancel_as_integers() -> None:
    # Without this the test above could not tell OR from a sum of the raw integers cast to bool.
    xs = [_buffers(Kind.ALLREDUCE, 2, r, None, 64, torch.int64)[0] for r in range(2)]
    assert bool(((xs[0] + xs[1]) == 0).any()) and bool(((xs[0] != 0) & (xs[1] != 0) & (xs[0] + xs[1] == 0)).any())


def test_more_local_ranks_than_fit_are_refused_with_the_estimate(monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLLSCHED_MEMORY", "4GB")
    code = main(["bench", "--nproc", "400", "-c", "allreduce", "-a", "ring", "--sizes", "1MiB", "--json"])
    out = json.loads(capsys.readouterr().out)
    # 400 ranks at 180 MB and 6 MiB of buffers each: 74.5 GB, against 4 GB; 4e9 // 186.3e6 = 21 fit.
    assert code == 2 and out["error"].startswith("--nproc 400: 400 local ranks need about 74.5 GB (186 MB each")
    assert "this machine has 4 GB to spare (COLLSCHED_MEMORY overrides): about 21 would fit" in out["error"]
