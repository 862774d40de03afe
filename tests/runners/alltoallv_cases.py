"""Spawned-rank cases for all-to-allv on the collsched backend: random split matrices against gloo.

``random_splits(rank, world, matrices, ...)`` runs, for each matrix T (``T[i][j]`` rows from rank i to rank
j), ``all_to_all_single`` with split sizes and ``all_to_all`` with tensor lists on the collsched group and
``all_to_all_single`` on a gloo group (gloo's ``all_to_all`` takes equal pieces only), and compares them
exactly. It also checks which path ran: the alltoallv schedule (``executed`` counts
``alltoallv/<algorithm>``), not the direct fallback.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from tests.runners.backend_cases import Checker, gloo_group, make


def _calls(c: Checker, gloo: Any, rank: int, world: int, t: list[list[int]], width: int, dtype: torch.dtype,
           seed: int) -> None:
    send = [t[rank][j] for j in range(world)]
    recv = [t[i][rank] for i in range(world)]
    x = make(dtype, sum(send) * width, rank, seed).view(-1, width)
    a = torch.full((sum(recv), width), -7, dtype=dtype)
    b = a.clone()
    dist.all_to_all_single(a, x, recv, send)
    dist.all_to_all_single(b, x, recv, send, group=gloo)
    c.equal(f"single T={t} width={width} {dtype}", a, b)
    # gloo's all_to_all takes equal pieces only: the list call is checked against gloo's single call's pieces.
    pieces = list(x.split(send))
    la = [torch.full((n, width), -7, dtype=dtype) for n in recv]
    work = dist.all_to_all(la, pieces, async_op=True)
    work.wait()
    for s, want in enumerate(b.split(recv)):
        c.equal(f"list T={t} from {s}", la[s], want)


def random_splits(rank: int, world: int, matrices: list[list[list[int]]], expect: str = "") -> None:
    from runners.backend.group import collsched_group

    c = Checker(rank)
    pg = collsched_group()  # the Python group behind the C++ backend, or the group itself
    before = dict(getattr(pg, "executed", {}))
    with gloo_group() as gloo:
        for k, t in enumerate(matrices):
            width = 1 + k % 3
            dtype = (torch.float32, torch.int64)[k % 2]
            c.run(f"matrix {k}", _calls, c, gloo, rank, world, t, width, dtype, 500 + k)
    after = dict(getattr(pg, "executed", {}))
    uneven = sum(1 for t in matrices if len({v for row in t for v in row}) > 1)
    ran = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    v = sum(n for k, n in ran.items() if k.startswith("alltoallv/") and not k.endswith("/p2p"))
    c.count += 1
    if v != 2 * uneven:
        c.failures.append(f"rank {rank}: {v} alltoallv schedule runs for {uneven} uneven matrices x 2 calls ({ran})")
    if expect and not any(k == f"alltoallv/{expect}" and n for k, n in ran.items()):
        c.failures.append(f"rank {rank}: alltoallv/{expect} never ran ({ran})")
    c.finish(least=len(matrices))
