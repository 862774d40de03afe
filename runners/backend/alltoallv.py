"""All-to-allv on the backend: the split sizes of every rank, the traffic matrix in chunks, and its schedule.

torch's ``all_to_all_single(out, in, output_split_sizes, input_split_sizes)`` and ``all_to_all(outs, ins)``
give each rank only its own row (what it sends to each peer) and column (what it receives from each). A
collsched schedule needs the whole matrix on every rank, identical, so ``split_table`` all-gathers each
rank's row and column (2p integers) in one collective, and every rank checks the same table: rank i's
piece for j must be as large as rank j's piece from i, or every rank raises the same ``ValueError``.

``unit_matrix`` turns the table of element counts into a matrix of chunks: one chunk is the greatest common
divisor of the non-zero counts, so that the schedule moves whole chunks and stays small (the counts of an
MoE dispatch share the hidden size, for instance). ``schedule_for`` builds (and caches) the policy's
alltoallv algorithm for that matrix.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from algorithms import registry
from algorithms.ir import Kind, Matrix, Schedule
from runners.backend.policy import FILE_PREFIX, Choice, describe_choice, schedule
from runners.execution import verified
from runners.execution.arguments import SUPPORTED_DTYPES

__all__ = ["SCHEDULE_CACHE", "schedule_for", "split_table", "unit_matrix"]

SCHEDULE_CACHE = 64
"""Alltoallv schedules kept (by algorithm and matrix): an MoE layer's matrix changes every step, so few repeat."""

_DTYPES = tuple(SUPPORTED_DTYPES)

# torch 2.13 renamed all_gather_into_tensor (the old name warns).
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def split_table(group: dist.ProcessGroup, sends: Sequence[int], receives: Sequence[int], device: torch.device,
                dtype: torch.dtype) -> list[list[int]]:
    """The p x p matrix of element counts, ``table[i][j]`` from rank i to rank j, the same on every rank.

    ``sends[j]`` is what this rank sends to j, ``receives[i]`` what it receives from i. Raises ``ValueError``
    (on every rank alike) when a rank's piece for a peer and that peer's piece from it differ in size, or
    when the ranks' tensors differ in dtype: what the runner's own cross-rank check would find, so the run
    that follows can skip it (one collective less per call).
    """
    p = group.size()
    code = _DTYPES.index(dtype) if dtype in _DTYPES else len(_DTYPES)
    mine = torch.tensor([*sends, *receives, code], dtype=torch.int64, device=device)
    rows = torch.empty(p * (2 * p + 1), dtype=torch.int64, device=device)
    _ALL_GATHER(rows, mine, group=group)
    every = rows.view(p, 2 * p + 1).tolist()
    codes = [row[-1] for row in every]
    if len(set(codes)) > 1:
        names = ", ".join(f"rank {r}: {_DTYPES[c] if c < len(_DTYPES) else 'other'}" for r, c in enumerate(codes))
        raise ValueError(f"collsched all_to_all: ranks disagree on the dtype ({names})")
    table = [row[:p] for row in every]
    for j in range(p):
        for i in range(p):
            if every[j][p + i] != table[i][j]:
                raise ValueError(f"collsched all_to_all: rank {i} sends {table[i][j]} elements to rank {j}, "
                                 f"but rank {j} expects {every[j][p + i]} from rank {i} (input split sizes of "
                                 f"rank {i} against output split sizes of rank {j})")
    return table


def unit_matrix(table: Sequence[Sequence[int]]) -> tuple[int, Matrix]:
    """(elements per chunk, the matrix in chunks): the chunk is the gcd of the non-zero counts (1 if none)."""
    unit = 0
    for row in table:
        for v in row:
            unit = math.gcd(unit, int(v))
    unit = unit or 1
    return unit, tuple(tuple(int(v) // unit for v in row) for row in table)


def schedule_for(choice: Choice, matrix: Matrix) -> Schedule:
    """The alltoallv schedule of the policy's ``choice`` for ``matrix`` (a file's when its matrix is this one)."""
    if choice.algorithm.startswith(FILE_PREFIX):
        s = schedule(Kind.ALLTOALLV, choice, len(matrix))
        if s.collective.matrix == matrix:
            return s
        choice = Choice("direct")  # a file holds one matrix; any other goes direct
    return _built(choice.algorithm, choice.params, matrix)


@functools.lru_cache(maxsize=SCHEDULE_CACHE)
def _built(algorithm: str, params: tuple[tuple[str, Any], ...], matrix: Matrix) -> Schedule:
    """Built and verified (``runners.execution.verified``: an error names the choice and the world size)."""
    s = registry.get(Kind.ALLTOALLV, algorithm).build(len(matrix), matrix=matrix, **dict(params))
    verified.require(s, describe_choice(Kind.ALLTOALLV, Choice(algorithm, params), len(matrix)) + " for a "
                     "traffic matrix of the call's split sizes")
    return s
