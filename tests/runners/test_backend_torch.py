"""What PyTorch's own distributed tests expect of a backend: sparse all-reduce, DDP with a sparse
embedding, a failing collective under DDP raising (not crashing the process), ``monitored_barrier``.

Each test spawns one small job (tests/runners/backend_cases.spawn) and compares with gloo where gloo has the feature.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from tests.runners import backend_cases as cases
from tests.runners import limits

pytestmark = pytest.mark.multiprocess


def _sparse(rank: int, rows: int, cols: int) -> torch.Tensor:
    """A COO gradient touching rows that differ by rank (and one row every rank touches)."""
    index = torch.tensor([[rank % rows, (rank + 2) % rows, rows - 1]])
    values = torch.arange(3 * cols, dtype=torch.float32).view(3, cols) + 10 * rank
    return torch.sparse_coo_tensor(index, values, (rows, cols))


def sparse_all_reduce(rank: int, world: int) -> None:
    """dist.all_reduce of sparse COO tensors: the same as gloo's, and the same as the dense sum."""
    from runners.backend.group import collsched_group

    c = cases.Checker(rank)
    pg = dist.group.WORLD
    cg = collsched_group(pg)  # the Python group behind the C++ backend, or the group itself
    assert cg is not None
    # The dense reference is computed here, independently of any backend.
    want = torch.stack([_sparse(r, 7, 3).to_dense() for r in range(world)]).sum(0)
    with cases.gloo_group() as gloo:
        for name, group in (("collsched", pg), ("gloo", gloo)):
            t = _sparse(rank, 7, 3)
            dist.all_reduce(t, group=group)
            c.equal(f"{name} sparse all_reduce (sync)", t.to_dense(), want)
            t = _sparse(rank, 7, 3)
            work = dist.all_reduce(t, group=group, async_op=True)
            assert work is not None
            work.wait()
            c.equal(f"{name} sparse all_reduce (async)", t.to_dense(), want)
        # Dense all-reduces still run schedules afterwards, in order.
        d = torch.full((5,), float(rank))
        dist.all_reduce(d)
        c.equal("dense after sparse", d, torch.full((5,), float(sum(range(world)))))
    if cg.executed["allreduce/sparse:inner"] != 2:
        c.failures.append(f"rank {rank}: sparse all-reduces did not go to the inner group: {dict(cg.executed)}")
    c.finish(least=5)


def test_sparse_all_reduce_matches_gloo() -> None:
    cases.spawn(sparse_all_reduce, 3)


def _embedding_model(seed: int) -> torch.nn.Sequential:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Embedding(20, 6, sparse=True), torch.nn.Linear(6, 1))


def ddp_sparse_embedding(rank: int, world: int) -> None:
    """3 SGD steps of DDP with nn.Embedding(sparse=True): collsched ends where gloo ends (this crashed
    every rank with SIGSEGV before)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from runners.backend.group import settle

    c = cases.Checker(rank)
    final = {}
    with cases.gloo_group() as gloo:
        for name, group in (("collsched", dist.group.WORLD), ("gloo", gloo)):
            model = _embedding_model(seed=rank)  # differs by rank: DDP's initial broadcast fixes it
            ddp = DDP(model, process_group=group)
            opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
            for step in range(3):
                g = torch.Generator().manual_seed(100 * step + rank)
                idx = torch.randint(0, 20, (4, 3), generator=g)
                opt.zero_grad()
                ddp(idx).sum().backward()
                opt.step()
            final[name] = [p.detach().clone() for p in model.parameters()]
            dist.barrier(group=group)
            del ddp, opt
            settle()
    for i, (a, b) in enumerate(zip(final["collsched"], final["gloo"], strict=True)):
        c.equal(f"DDP sparse-embedding parameter {i}", a, b)
    # The steps did something: the embedding moved away from its initial (broadcast from rank 0) value.
    start = next(_embedding_model(seed=0).parameters()).detach()
    if torch.equal(final["collsched"][0], start):
        c.failures.append(f"rank {rank}: the embedding did not train")
    c.finish(least=3)


def test_ddp_with_a_sparse_embedding_trains_as_on_gloo() -> None:
    cases.spawn(ddp_sparse_embedding, 3)


def ddp_failing_collective(rank: int, world: int) -> None:
    """A collective that fails inside DDP's backward raises on every rank; the process lives on."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from runners.backend import cpp as cpp_backend
    from runners.backend import group as backend

    ddp = DDP(_embedding_model(seed=0)[1:], process_group=dist.group.WORLD)

    def broken(self: object, *args: object, **kwargs: object) -> None:
        raise RuntimeError("injected all-reduce failure")

    original = backend.CollschedProcessGroup._allreduce_one
    backend.CollschedProcessGroup._allreduce_one = broken  # type: ignore[method-assign]
    prepare = cpp_backend.Core.prepare  # the C++ backend: its Python path, whose error fails the C++ future
    cpp_backend.Core.prepare = lambda *args: None  # type: ignore[method-assign,assignment]
    try:
        ddp(torch.ones(2, 6)).sum().backward()
    except RuntimeError as e:
        if "injected all-reduce failure" not in str(e):
            raise AssertionError(f"rank {rank}: backward raised something else: {e}") from e
    else:
        raise AssertionError(f"rank {rank}: backward did not raise")
    finally:
        backend.CollschedProcessGroup._allreduce_one = original  # type: ignore[method-assign]
        cpp_backend.Core.prepare = prepare  # type: ignore[method-assign]
    # The group still works (a new DDP would re-sync; a plain collective shows the worker is alive).
    t = torch.ones(3)
    dist.all_reduce(t)
    if t.tolist() != [float(world)] * 3:
        raise AssertionError(f"rank {rank}: all_reduce after the failure gave {t.tolist()}")


def test_a_failing_collective_under_ddp_raises_instead_of_crashing() -> None:
    # Before the fix the future of a failed job held the exception as its *value* for C++: DDP's reducer
    # parsed it as a tensor list and every rank died with SIGSEGV (mp.spawn reports the signal).
    cases.spawn(ddp_failing_collective, 2)


def monitored(rank: int, world: int) -> None:
    """pg.monitored_barrier: passes when all arrive; names the ranks that do not (gloo's wording)."""
    from runners.backend.group import collsched_group

    pg = collsched_group()  # the Python group (behind the C++ backend): its method and its call count
    assert pg is not None
    pg.monitored_barrier(timedelta(seconds=limits.RUN))
    pg.monitored_barrier(timedelta(seconds=limits.RUN), wait_all_ranks=True)
    # Rank 2 stays away from this one.
    if rank == 2:
        time.sleep(3)
        pg._monitored += 1  # a rank that skips a call skips its number too
    else:
        try:
            pg.monitored_barrier(timedelta(seconds=1.5))
        except RuntimeError as e:
            text = str(e)
            if rank == 0:
                assert "[Rank 0]: Rank 2 failed to pass monitoredBarrier in 1500 ms" in text, text
            else:
                assert "rank 0 (global rank 0) did not release" in text, text
        else:
            raise AssertionError(f"rank {rank}: monitored_barrier passed without rank 2")
    dist.barrier()
    # Ranks 1 and 2 stay away; wait_all_ranks names both.
    if rank == 0:
        try:
            pg.monitored_barrier(timedelta(seconds=1), wait_all_ranks=True)
        except RuntimeError as e:
            assert "[Rank 0]: Ranks 1, 2 failed to pass monitoredBarrier in 1000 ms" in str(e), str(e)
        else:
            raise AssertionError("monitored_barrier passed without ranks 1 and 2")
    dist.barrier()
    # The same sequence works again afterwards (every rank counts its calls alike).
    if rank != 0:
        pg._monitored += 1  # ranks 1 and 2 skipped the call above
    pg.monitored_barrier(timedelta(seconds=limits.RUN))


def test_monitored_barrier_names_the_ranks_that_do_not_arrive() -> None:
    cases.spawn(monitored, 3)
