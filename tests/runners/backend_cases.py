"""Multi-process cases for the collsched backend, run by tests/test_backend*.py under spawn.

Every case runs one torch.distributed call on the collsched default group and
the same call, with the same inputs, on a gloo group over the same ranks, and
compares: exactly for integers, to rounding for floats. Where gloo cannot do
the call (an all_gather into tensors of different lengths), the expected
result is built from every rank's input, which each rank can regenerate from
the seed. A worker collects every mismatch and raises one AssertionError
listing them, so one spawned job checks hundreds of cases.
"""

from __future__ import annotations

import faulthandler
import os
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from runners.commands.launch import free_port, start_method
from tests.runners import limits

R = dist.ReduceOp
FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
INTS = (torch.int32, torch.int64, torch.uint8, torch.int8)
ARITH_OPS = (R.SUM, R.PRODUCT, R.MIN, R.MAX)


def _entry(rank: int, world: int, port: int, backend: str, fn: Callable[..., None], env: dict[str, str],
           args: tuple[Any, ...]) -> None:
    # A hung collective must fail the test, not the whole suite: dump every thread's stack and exit.
    os.environ.clear()  # the caller's environment (a fork server's rank starts with the server's)
    os.environ.update(env)
    faulthandler.dump_traceback_later(limits.JOB, exit=True)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    import runners.backend.group  # noqa: F401  (registers collsched)

    if backend:
        dist.init_process_group(backend, rank=rank, world_size=world)
    try:
        fn(rank, world, *args)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _bare_entry(rank: int, world: int, port: int, backend: str) -> None:
    """Like ``_entry`` but never destroys the group: what a careless training script does."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import runners.backend.group  # noqa: F401

    exit_without_destroy(rank, world, backend)


def spawn(fn: Callable[..., None], nprocs: int, *args: Any, backend: str = "collsched",
          env: dict[str, str] | None = None) -> None:
    """Run ``fn(rank, world, *args)`` on ``nprocs`` ranks inside an initialised group, with this process's
    environment and ``env`` (ranks start as ``runners.commands.launch.spawn``'s do: ``start_method``)."""
    mp.start_processes(_entry, args=(nprocs, free_port(), backend, fn, {**os.environ, **(env or {})}, args),
                       nprocs=nprocs, join=True, start_method=start_method())


@dataclass
class Checker:
    """Collects mismatches; ``finish()`` raises one AssertionError naming every failed case."""

    rank: int
    failures: list[str] = field(default_factory=list)
    count: int = 0

    def equal(self, case: str, got: torch.Tensor, want: torch.Tensor) -> None:
        self.count += 1
        try:
            if got.dtype != want.dtype or got.shape != want.shape:
                raise AssertionError(f"dtype/shape {got.dtype}{tuple(got.shape)} != {want.dtype}{tuple(want.shape)}")
            if want.is_floating_point():
                # Reduction order differs from gloo's: allow a few roundings of a sum of O(1) values.
                tol = {torch.bfloat16: 8e-2, torch.float16: 1e-2}.get(want.dtype, 1e-5)
                torch.testing.assert_close(got, want, rtol=tol, atol=tol)
            elif not torch.equal(got, want):
                raise AssertionError(f"got {got.flatten()[:8].tolist()} want {want.flatten()[:8].tolist()}")
        except AssertionError as err:
            self.failures.append(f"rank {self.rank} {case}: {str(err).splitlines()[0][:300]}")

    def run(self, case: str, body: Callable[..., Any], *args: Any) -> None:
        """Run ``body(*args)`` as one case; an exception fails that case, not the whole job."""
        self.count += 1
        try:
            body(*args)
        except Exception as err:  # the case failed; keep checking the others
            self.failures.append(f"rank {self.rank} {case}: raised {type(err).__name__}: {err}"[:400])

    def finish(self, least: int = 1) -> None:
        if self.failures:
            listing = "\n".join(self.failures[:40])
            raise AssertionError(f"{len(self.failures)} of {self.count} checks failed:\n{listing}")
        if self.count < least:
            raise AssertionError(f"only {self.count} checks ran, expected at least {least}")


def make(dtype: torch.dtype, n: int, rank: int, seed: int, op: Any = R.SUM) -> torch.Tensor:
    """Rank ``rank``'s input for case ``seed``: reproducible on every rank."""
    g = torch.Generator().manual_seed(seed * 1009 + rank)
    if dtype.is_floating_point:
        t = torch.randn(n, generator=g, dtype=torch.float64)
        if op == R.PRODUCT:
            t = 0.5 + t.abs()
        return t.to(dtype)
    low, high = (1, 3) if op == R.PRODUCT else ((0, 8) if dtype == torch.uint8 else (-8, 8))
    return torch.randint(low, high, (n,), generator=g, dtype=torch.int64).to(dtype)


def wait(work: Any, async_op: bool) -> None:
    if async_op:
        if not isinstance(work, dist.Work):
            raise AssertionError(f"async_op=True returned {type(work).__name__}, not a Work")
        work.wait()
    elif work is not None:
        raise AssertionError(f"async_op=False returned {work!r}")


@contextmanager
def gloo_group() -> Iterator[dist.ProcessGroup]:
    group = dist.new_group(backend="gloo")
    try:
        yield group
    finally:
        dist.destroy_process_group(group)


SIZES = (0, 1, 3, 1000, 40_003)


# ----------------------------------------------------------------------------- reductions


def reductions(rank: int, world: int, full: bool = False, few: bool = False) -> None:
    """all_reduce, reduce, reduce_scatter (list and tensor) against gloo: dtypes x ops x sizes x sync/async.

    ``full``: every dtype and size; ``few``: one float and one integer type (for pinning each algorithm).
    """
    c = Checker(rank)
    seed = 0
    dtypes = FLOATS + INTS if full else (torch.float32, torch.int64) if few else \
        (torch.float32, torch.bfloat16, torch.int64, torch.uint8)
    with gloo_group() as gloo:
        for dtype in dtypes:
            ops = ARITH_OPS + ((R.AVG,) if dtype.is_floating_point else (R.BAND, R.BOR, R.BXOR))
            for op in ops:
                for n in SIZES if full else (0, 3, 40_003):
                    for async_op in (False, True):
                        seed += 1
                        case = f"all_reduce {dtype} {op} n={n} async={async_op}"
                        c.run(case, _all_reduce, c, case, gloo, rank, world, dtype, op, n, seed, async_op)
                if op in (R.BAND, R.BOR, R.BXOR):
                    continue
                for n in (1, 1000):
                    seed += 1
                    root = seed % world
                    case = f"reduce {dtype} {op} n={n} root={root}"
                    c.run(case, _reduce, c, case, gloo, rank, dtype, op, n, seed, root)
                    for async_op in (False, True):
                        seed += 1
                        case = f"reduce_scatter_tensor {dtype} {op} n={n} async={async_op}"
                        c.run(case, _reduce_scatter, c, case, gloo, rank, world, dtype, op, n, seed, async_op)
    c.finish(least=500 if full else 90 if few else 200)


def _all_reduce(c: Checker, case: str, gloo: Any, rank: int, world: int, dtype: torch.dtype, op: Any, n: int,
                seed: int, async_op: bool) -> None:
    a = make(dtype, n, rank, seed, op)
    b = a.clone()
    wait(dist.all_reduce(a, op=op, async_op=async_op), async_op)
    dist.all_reduce(b, op=op, group=gloo)
    c.equal(case, a, b)


def _reduce(c: Checker, case: str, gloo: Any, rank: int, dtype: torch.dtype, op: Any, n: int, seed: int,
            root: int) -> None:
    a = make(dtype, n, rank, seed, op)
    b = a.clone()
    dist.reduce(a, dst=root, op=op)
    dist.reduce(b, dst=root, op=op, group=gloo)
    if rank == root:
        c.equal(case, a, b)


def _reduce_scatter(c: Checker, case: str, gloo: Any, rank: int, world: int, dtype: torch.dtype, op: Any, n: int,
                    seed: int, async_op: bool) -> None:
    src = make(dtype, n * world, rank, seed, op)
    a, b = torch.empty(n, dtype=dtype), torch.empty(n, dtype=dtype)
    wait(dist.reduce_scatter_tensor(a, src, op=op, async_op=async_op), async_op)
    dist.reduce_scatter_tensor(b, src.clone(), op=op, group=gloo)
    c.equal(case, a, b)
    la, lb = torch.empty(n, dtype=dtype), torch.empty(n, dtype=dtype)
    wait(dist.reduce_scatter(la, list(src.chunk(world)), op=op, async_op=async_op), async_op)
    dist.reduce_scatter(lb, list(src.clone().chunk(world)), op=op, group=gloo)
    c.equal(case.replace("_tensor", " list"), la, lb)


# ----------------------------------------------------------------------------- data movement


def movement(rank: int, world: int, full: bool = False, few: bool = False) -> None:
    """broadcast, all_gather (list, tensor, uneven), gather, scatter, all_to_all (list, single, uneven), barrier.

    ``full``: every dtype and size; ``few``: float32 only (for pinning each algorithm).
    """
    c = Checker(rank)
    seed = 10_000
    with gloo_group() as gloo:
        dtypes = (torch.float32, torch.float16, torch.int64, torch.uint8, torch.bool)
        for dtype in dtypes[:None if full else 1 if few else 3]:
            for n in (0, 1, 5, 3001) if full else (0, 5, 3001):
                for async_op in (False, True):
                    seed += 1
                    args = (c, gloo, rank, world, dtype, n, seed, async_op)
                    for name, body in CASES.items():
                        case = f"{name} {dtype} n={n} async={async_op}"
                        c.run(case, body, case, *args)
        c.run("barrier", lambda: [wait(dist.barrier(async_op=a), a) for a in (False, True)])
    c.finish(least=300 if full else 30 if few else 90)


def every_kind(rank: int, world: int, few: bool = False) -> None:
    """``reductions`` then ``movement`` in one job (one spawn instead of two)."""
    reductions(rank, world, few=few)
    movement(rank, world, few=few)


def pinned_rounds(rank: int, world: int, specs: list[str], store_dir: str) -> None:
    """``every_kind`` (few dtypes) once per COLLSCHED_ALGORITHMS value, each on a fresh collsched default group.

    The backend reads the variable when it is created, so each round sets it and initialises a new group
    (over a file store of its own) in the same processes: one spawn for every round. Start with
    ``spawn(..., backend="")``.
    """
    for i, spec in enumerate(specs):
        os.environ["COLLSCHED_ALGORITHMS"] = spec
        store = dist.FileStore(os.path.join(store_dir, f"round{i}"), world)
        dist.init_process_group("collsched", store=store, rank=rank, world_size=world)
        try:
            every_kind(rank, world, few=True)
        except AssertionError as err:
            raise AssertionError(f"COLLSCHED_ALGORITHMS={spec}: {err}") from None
        finally:
            dist.destroy_process_group()


def _input(dtype: torch.dtype, n: int, rank: int, seed: int) -> torch.Tensor:
    if dtype == torch.bool:
        return make(torch.int64, n, rank, seed) > 0
    return make(dtype, n, rank, seed)


def _broadcast(case: str, c: Checker, gloo: Any, rank: int, world: int, dtype: torch.dtype, n: int, seed: int,
               async_op: bool) -> None:
    root = seed % world
    a = _input(dtype, n, rank, seed)
    b = a.clone()
    wait(dist.broadcast(a, src=root, async_op=async_op), async_op)
    dist.broadcast(b, src=root, group=gloo)
    c.equal(case + f" root={root}", a, b)


def _all_gather(case: str, c: Checker, gloo: Any, rank: int, world: int, dtype: torch.dtype, n: int, seed: int,
                async_op: bool) -> None:
    x = _input(dtype, n, rank, seed)
    a = [torch.empty(n, dtype=dtype) for _ in range(world)]
    b = [torch.empty(n, dtype=dtype) for _ in range(world)]
    wait(dist.all_gather(a, x, async_op=async_op), async_op)
    dist.all_gather(b, x, group=gloo)
    c.equal(case, torch.stack(a), torch.stack(b))
    ta, tb = torch.empty(n * world, dtype=dtype), torch.empty(n * world, dtype=dtype)
    wait(dist.all_gather_into_tensor(ta, x, async_op=async_op), async_op)
    dist.all_gather_into_tensor(tb, x, group=gloo)
    c.equal(case + " into_tensor", ta, tb)


def _all_gather_uneven(case: str, c: Checker, gloo: Any, rank: int, world: int, dtype: torch.dtype, n: int,
                       seed: int, async_op: bool) -> None:
    # gloo rejects tensors of different lengths; every rank's input is reproducible, so build the answer.
    sizes = [n + s for s in range(world)]
    a = [torch.empty(m, dtype=dtype) for m in sizes]
    wait(dist.all_gather(a, _input(dtype, sizes[rank], rank, seed), async_op=async_op), async_op)
    for s in range(world):
        c.equal(f"{case} from {s}", a[s], _input(dtype, sizes[s], s, seed))


def _gather_scatter(case: str, c: Checker, gloo: Any, rank: int, world: int, dtype: torch.dtype, n: int, seed: int,
                    async_op: bool) -> None:
    root = (seed + 1) % world
    x = _input(dtype, n, rank, seed)
    a = [torch.empty(n, dtype=dtype) for _ in range(world)] if rank == root else None
    b = [torch.empty(n, dtype=dtype) for _ in range(world)] if rank == root else None
    wait(dist.gather(x, a, dst=root, async_op=async_op), async_op)
    dist.gather(x, b, dst=root, group=gloo)
    if a is not None and b is not None:
        c.equal(f"gather {case} root={root}", torch.stack(a), torch.stack(b))
    pieces = [_input(dtype, n, root * 100 + s, seed) for s in range(world)] if rank == root else None
    sa, sb = torch.empty(n, dtype=dtype), torch.empty(n, dtype=dtype)
    wait(dist.scatter(sa, pieces, src=root, async_op=async_op), async_op)
    dist.scatter(sb, pieces, src=root, group=gloo)
    c.equal(f"scatter {case} root={root}", sa, sb)


def _all_to_all(case: str, c: Checker, gloo: Any, rank: int, world: int, dtype: torch.dtype, n: int, seed: int,
                async_op: bool) -> None:
    x = _input(dtype, n * world, rank, seed).view(world, n) if n else torch.empty(world, 0, dtype=dtype)
    a, b = torch.empty_like(x), torch.empty_like(x)
    wait(dist.all_to_all_single(a, x, async_op=async_op), async_op)
    dist.all_to_all_single(b, x, group=gloo)
    c.equal(case + " single", a, b)
    la = [torch.empty(n, dtype=dtype) for _ in range(world)]
    lb = [torch.empty(n, dtype=dtype) for _ in range(world)]
    wait(dist.all_to_all(la, list(x.reshape(-1).chunk(world)) if n else [x[0]] * world, async_op=async_op), async_op)
    dist.all_to_all(lb, list(x.reshape(-1).chunk(world)) if n else [x[0]] * world, group=gloo)
    c.equal(case + " list", torch.stack(la), torch.stack(lb))
    # Uneven: rank r sends (r + s + n) % 4 rows of width 2 to rank s.
    send = [(rank + s + n) % 4 for s in range(world)]
    recv = [(s + rank + n) % 4 for s in range(world)]
    ux = _input(dtype, 2 * sum(send), rank, seed).view(-1, 2)
    ua, ub = torch.empty(sum(recv), 2, dtype=dtype), torch.empty(sum(recv), 2, dtype=dtype)
    wait(dist.all_to_all_single(ua, ux, recv, send, async_op=async_op), async_op)
    dist.all_to_all_single(ub, ux, recv, send, group=gloo)
    c.equal(case + " uneven", ua, ub)


CASES: dict[str, Callable[..., None]] = {
    "broadcast": _broadcast,
    "all_gather": _all_gather,
    "all_gather uneven": _all_gather_uneven,
    "gather/scatter": _gather_scatter,
    "all_to_all": _all_to_all,
}


# ----------------------------------------------------------------------------- API surface


def api_surface(rank: int, world: int) -> None:
    """Objects, coalesced and deprecated paths, point-to-point, functional collectives, subgroups."""
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.distributed_c10d import _coalescing_manager

    c = Checker(rank)
    with gloo_group() as gloo:
        objs: list[Any] = [None] * world
        c.run("all_gather_object", lambda: dist.all_gather_object(objs, {"rank": rank, "data": list(range(rank))}))
        c.run("all_gather_object check", _same, objs, [{"rank": s, "data": list(range(s))} for s in range(world)])
        lst: list[Any] = [rank, f"from {rank}", None]
        c.run("broadcast_object_list", lambda: dist.broadcast_object_list(lst, src=world - 1))
        c.run("broadcast_object_list check", lambda: _same(lst, [world - 1, f"from {world - 1}", None]))
        got: list[Any] = [None]
        c.run("scatter_object_list", lambda: dist.scatter_object_list(got, [f"to {s}" for s in range(world)], src=0))
        c.run("scatter_object_list check", lambda: _same(got, [f"to {rank}"]))

        # Coalesced entry points: the coalescing manager and the deprecated list APIs.
        xs = [make(torch.float32, n, rank, 7 + n) for n in (3, 0, 17)]
        ys = [x.clone() for x in xs]
        def coalesced_allreduce() -> None:
            with _coalescing_manager(async_ops=True) as cm:
                for x in xs:
                    dist.all_reduce(x)
            cm.wait()
            for y in ys:
                dist.all_reduce(y, group=gloo)
            for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
                c.equal(f"coalescing_manager all_reduce {i}", x, y)
        c.run("coalescing_manager all_reduce", coalesced_allreduce)

        def coalesced_with_device() -> None:
            zs = [make(torch.float32, n, rank, 60 + n) for n in (4, 9)]
            refs = [z.clone() for z in zs]
            with _coalescing_manager(device=torch.device("cpu"), async_ops=True) as cm:
                for z in zs:
                    dist.all_reduce(z)
            cm.wait()
            for i, (z, r) in enumerate(zip(zs, refs, strict=True)):
                dist.all_reduce(r, group=gloo)
                c.equal(f"coalescing_manager(device=cpu) all_reduce {i}", z, r)
        c.run("coalescing_manager with a device", coalesced_with_device)

        def coalesced_gather_scatter() -> None:
            ins = [make(torch.float64, 6, rank, 70 + i) for i in range(3)]
            outs = [torch.empty(6 * world, dtype=torch.float64) for _ in ins]
            with _coalescing_manager():
                for o, i in zip(outs, ins, strict=True):
                    dist.all_gather_into_tensor(o, i)
            for o, i in zip(outs, ins, strict=True):
                ref = torch.empty_like(o)
                dist.all_gather_into_tensor(ref, i, group=gloo)
                c.equal("coalescing_manager all_gather_into_tensor", o, ref)
            rs_in = [make(torch.float64, 4 * world, rank, 80 + i) for i in range(2)]
            rs_out = [torch.empty(4, dtype=torch.float64) for _ in rs_in]
            with _coalescing_manager():
                for o, i in zip(rs_out, rs_in, strict=True):
                    dist.reduce_scatter_tensor(o, i)
            for o, i in zip(rs_out, rs_in, strict=True):
                ref = torch.empty_like(o)
                dist.reduce_scatter_tensor(ref, i.clone(), group=gloo)
                c.equal("coalescing_manager reduce_scatter_tensor", o, ref)
        c.run("coalescing_manager gather/scatter", coalesced_gather_scatter)

        def deprecated_lists() -> None:
            a = [make(torch.float32, 5, rank, 90), make(torch.float32, 2, rank, 91)]
            b = [t.clone() for t in a]
            dist.all_reduce_coalesced(a)
            dist.all_reduce_coalesced(b, group=gloo)
            for x, y in zip(a, b, strict=True):
                c.equal("all_reduce_coalesced", x, y)
            ins = [make(torch.float32, 3, rank, 92), make(torch.float32, 2, rank, 93)]
            oa = [[torch.empty(3), torch.empty(2)] for _ in range(world)]
            ob = [[torch.empty(3), torch.empty(2)] for _ in range(world)]
            dist.all_gather_coalesced(oa, ins)
            dist.all_gather_coalesced(ob, ins, group=gloo)
            for s in range(world):
                for i in range(2):
                    c.equal("all_gather_coalesced", oa[s][i], ob[s][i])
        c.run("deprecated coalesced", deprecated_lists)

        def non_contiguous() -> None:
            # gloo refuses non-contiguous tensors; collsched works on a contiguous copy and writes back.
            x = make(torch.float32, 12, rank, 95).view(3, 4).t()
            y = x.contiguous()
            dist.all_reduce(x)
            dist.all_reduce(y, group=gloo)
            c.equal("non-contiguous all_reduce", x.contiguous(), y)
            b = make(torch.int64, 12, rank, 96).view(3, 4).t()
            dist.broadcast(b, src=1)
            want = make(torch.int64, 12, 1, 96).view(3, 4).t().contiguous()
            c.equal("non-contiguous broadcast", b.contiguous(), want)
        c.run("non-contiguous", non_contiguous)

        c.run("point-to-point", lambda: _point_to_point(c, rank, world))
        c.run("functional collectives", lambda: _functional(c, funcol, gloo, rank, world))
    c.run("subgroups", lambda: _subgroups(c, rank, world))
    c.finish(least=25)


def _same(got: Any, want: Any) -> None:
    if got != want:
        raise AssertionError(f"got {got!r}, want {want!r}")


def _point_to_point(c: Checker, rank: int, world: int) -> None:
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    out = make(torch.float32, 9, rank, 200)
    inbox = torch.empty(9)
    # A ring of isend/irecv (a ring of blocking sends would deadlock on gloo) ...
    works = [dist.isend(out, nxt), dist.irecv(inbox, prv)]
    for w in works:
        w.wait()
    c.equal("isend/irecv ring", inbox, make(torch.float32, 9, prv, 200))
    # ... batch_isend_irecv with tags ...
    a, b = torch.empty(4, dtype=torch.int64), torch.empty(4, dtype=torch.int64)
    ops = [dist.P2POp(dist.isend, torch.full((4,), rank), nxt, tag=3),
           dist.P2POp(dist.irecv, a, prv, tag=3),
           dist.P2POp(dist.isend, torch.full((4,), 10 * rank), prv, tag=4),
           dist.P2POp(dist.irecv, b, nxt, tag=4)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    c.equal("batch_isend_irecv tag 3", a, torch.full((4,), prv))
    c.equal("batch_isend_irecv tag 4", b, torch.full((4,), 10 * nxt))
    # ... blocking send/recv, and a receive from any source.
    if rank == 0:
        x = torch.empty(2)
        for _ in range(world - 1):
            src = dist.recv(x)
            c.equal(f"recv anysource from {src}", x, torch.full((2,), float(src)))
    else:
        dist.send(torch.full((2,), float(rank)), 0)
    dist.barrier()


def _functional(c: Checker, funcol: Any, gloo: Any, rank: int, world: int) -> None:
    pg = dist.group.WORLD
    x = make(torch.float32, 12, rank, 300)
    ref = x.clone()
    dist.all_reduce(ref, group=gloo)
    def done(t: Any) -> torch.Tensor:
        return t.wait() if isinstance(t, funcol.AsyncCollectiveTensor) else t

    c.equal("funcol.all_reduce", done(funcol.all_reduce(x, "sum", pg)), ref)
    got = funcol.all_gather_tensor(x, 0, pg)
    want = torch.empty(12 * world)
    dist.all_gather_into_tensor(want, x, group=gloo)
    c.equal("funcol.all_gather_tensor", done(got).reshape(-1), want)
    big = make(torch.float32, 4 * world, rank, 301)
    rs = torch.empty(4)
    dist.reduce_scatter_tensor(rs, big.clone(), group=gloo)
    c.equal("funcol.reduce_scatter_tensor", done(funcol.reduce_scatter_tensor(big, "sum", 0, pg)), rs)
    a2a = torch.empty(4 * world)
    dist.all_to_all_single(a2a, big, group=gloo)
    c.equal("funcol.all_to_all_single", done(funcol.all_to_all_single(big, None, None, pg)), a2a)
    bc = make(torch.float32, 5, rank, 302)
    bref = bc.clone()
    dist.broadcast(bref, src=1, group=gloo)
    c.equal("funcol.broadcast", done(funcol.broadcast(bc, 1, pg)), bref)
    xs = [make(torch.float32, 3, rank, 303), make(torch.float32, 5, rank, 304)]
    refs = [t.clone() for t in xs]
    for t in refs:
        dist.all_reduce(t, group=gloo)
    for got_t, want_t in zip(funcol.all_reduce_coalesced(xs, "sum", pg), refs, strict=True):
        c.equal("funcol.all_reduce_coalesced", done(got_t), want_t)
    outs = funcol.all_gather_into_tensor_coalesced(xs, pg)
    for got_t, t in zip(outs, xs, strict=True):
        want = torch.empty(t.numel() * world)
        dist.all_gather_into_tensor(want, t, group=gloo)
        c.equal("funcol.all_gather_into_tensor_coalesced", done(got_t).reshape(-1), want)
    bigs = [make(torch.float32, 2 * world, rank, 305), make(torch.float32, 3 * world, rank, 306)]
    for got_t, t in zip(funcol.reduce_scatter_tensor_coalesced(bigs, "sum", [0, 0], pg), bigs, strict=True):
        want = torch.empty(t.numel() // world)
        dist.reduce_scatter_tensor(want, t.clone(), group=gloo)
        c.equal("funcol.reduce_scatter_tensor_coalesced", done(got_t), want)


def _subgroups(c: Checker, rank: int, world: int) -> None:
    evens = list(range(0, world, 2))
    sub = dist.new_group(evens, backend="collsched")
    ref = dist.new_group(evens, backend="gloo")
    if rank in evens:
        x = make(torch.float64, 33, rank, 400)
        y = x.clone()
        dist.all_reduce(x, group=sub)
        dist.all_reduce(y, group=ref)
        c.equal("subgroup all_reduce", x, y)
        b, bb = make(torch.int32, 7, rank, 401), make(torch.int32, 7, rank, 401)
        dist.broadcast(b, src=evens[-1], group=sub)
        dist.broadcast(bb, src=evens[-1], group=ref)
        c.equal("subgroup broadcast (global src)", b, bb)
        outs = [torch.empty(4, dtype=torch.int64) for _ in evens]
        dist.all_gather(outs, torch.full((4,), rank), group=sub)
        c.equal("subgroup all_gather", torch.stack(outs), torch.stack([torch.full((4,), s) for s in evens]))
        if len(evens) > 1:
            peer = evens[1] if rank == evens[0] else evens[0]
            inbox = torch.empty(3)
            for w in (dist.isend(torch.full((3,), float(rank)), peer, group=sub), dist.irecv(inbox, peer, group=sub)):
                w.wait()
            c.equal("subgroup isend/irecv (global peer)", inbox, torch.full((3,), float(peer)))
        dist.barrier(group=sub)
    dist.destroy_process_group(sub)
    dist.destroy_process_group(ref)


def run_all(rank: int, world: int) -> None:
    """Every case family in one job (for a quick manual run)."""
    for fn in (reductions, movement, api_surface):
        try:
            fn(rank, world)
        except AssertionError:
            traceback.print_exc()
            raise


# ----------------------------------------------------------------------------- training


def _mlp(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 4))


def _batches(rank: int, steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    out = []
    for step in range(steps):
        g = torch.Generator().manual_seed(1000 * step + rank)
        out.append((torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)))
    return out


def ddp_training(rank: int, world: int) -> None:
    """Five SGD steps of DDP on collsched end within rounding of the same steps on gloo."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from runners.backend.group import collsched_group, settle

    c = Checker(rank)
    pg = dist.group.WORLD
    cg = collsched_group(pg)
    if cg is None:
        raise AssertionError(f"the default group is a {type(pg).__name__}, not collsched")
    with gloo_group() as gloo:
        final = {}
        for name, group in (("collsched", pg), ("gloo", gloo)):
            model = _mlp(seed=rank)  # different on every rank: DDP's initial broadcast must fix that
            # Small buckets: several allreduces per step, issued while backward is still running.
            ddp = DDP(model, process_group=group, bucket_cap_mb=0.004)
            opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
            for x, y in _batches(rank, 5):
                opt.zero_grad()
                torch.nn.functional.mse_loss(ddp(x), y).backward()
                opt.step()
            final[name] = [p.detach().clone() for p in model.parameters()]
            dist.barrier(group=group)
            del ddp, opt  # while the group is alive and idle: see runners.backend.group.settle
            settle()
        for i, (a, b) in enumerate(zip(final["collsched"], final["gloo"], strict=True)):
            c.equal(f"DDP parameter {i}", a, b)
    if cg.executed["allreduce/" + str(cg.policy.choose("allreduce", 1 << 14, world))] == 0:
        c.failures.append(f"rank {rank}: DDP ran no allreduce schedule: {dict(cg.executed)}")
    c.finish(least=6)


def fsdp2_training(rank: int, world: int) -> None:
    """Three steps of FSDP2 (fully_shard) on collsched end within rounding of the same steps on gloo."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    c = Checker(rank)
    with gloo_group() as gloo:
        final = {}
        for name, group in (("collsched", dist.group.WORLD), ("gloo", gloo)):
            mesh = DeviceMesh.from_group(group, "cpu")
            model = _mlp(seed=0)
            for layer in model:
                if isinstance(layer, torch.nn.Linear):
                    fully_shard(layer, mesh=mesh)
            fully_shard(model, mesh=mesh)
            opt = torch.optim.Adam(model.parameters(), lr=1e-2)
            for x, y in _batches(rank, 3):
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
            final[name] = [p.full_tensor().detach().clone() for p in model.parameters()]  # type: ignore[attr-defined]
        for i, (a, b) in enumerate(zip(final["collsched"], final["gloo"], strict=True)):
            c.equal(f"FSDP2 parameter {i}", a, b)
    from runners.backend.group import collsched_group

    executed = collsched_group().executed  # type: ignore[union-attr]
    kinds = {k.split("/")[0] for k in executed}
    if not {"allgather", "reducescatter"} <= kinds:
        c.failures.append(f"rank {rank}: FSDP2 did not all-gather and reduce-scatter on collsched: {dict(executed)}")
    c.finish(least=6)


# ----------------------------------------------------------------------------- Work semantics


# ----------------------------------------------------------------------------- configuration


def per_device_string(rank: int, world: int, config: str) -> None:
    """``init_process_group(config)``: CPU tensors run on gloo's own collectives or on schedules as mapped."""
    from runners.backend.group import collsched_group

    dist.init_process_group(config, rank=rank, world_size=world)
    c = Checker(rank)
    cg = collsched_group()
    if cg is None:
        raise AssertionError(f"{config}: the default group is a {type(dist.group.WORLD).__name__}")
    with gloo_group() as gloo:
        x = make(torch.float32, 1001, rank, 500)
        y = x.clone()
        dist.all_reduce(x)
        dist.all_reduce(y, group=gloo)
        c.equal(f"{config} all_reduce", x, y)
        outs = [torch.empty(3, dtype=torch.int64) for _ in range(world)]
        dist.all_gather(outs, torch.full((3,), rank))
        c.equal(f"{config} all_gather", torch.stack(outs), torch.stack([torch.full((3,), s) for s in range(world)]))
        dist.barrier()
    native = config.startswith("cpu:gloo")
    ran = sum(v for k, v in cg.executed.items() if not k.startswith("barrier"))
    if native and ran:
        c.failures.append(f"rank {rank}: {config}: CPU collectives ran schedules: {dict(cg.executed)}")
    if not native and not ran:
        c.failures.append(f"rank {rank}: {config}: CPU collectives did not run schedules")
    c.finish(least=2)


def bad_policy(rank: int, world: int) -> None:
    """An unknown algorithm in COLLSCHED_ALGORITHMS fails init_process_group on every rank, naming it."""
    from runners.backend.policy import PolicyError

    try:
        dist.init_process_group("collsched", rank=rank, world_size=world)
    except PolicyError as err:
        if "allreduce" not in str(err) or "nope" not in str(err) or "ring" not in str(err):
            raise AssertionError(f"unclear error: {err}") from err
        return
    raise AssertionError("init_process_group accepted allreduce=nope")


def exit_without_destroy(rank: int, world: int, backend: str) -> None:
    """Initialise, leave a collective outstanding and return without destroy_process_group."""
    dist.init_process_group(backend, rank=rank, world_size=world)
    sub = dist.new_group(backend=backend)
    x = torch.ones(1000)
    dist.all_reduce(x)
    dist.all_reduce(x, group=sub, async_op=True)  # never waited on
    dist.barrier()


if __name__ == "__main__":  # python -m tests.runners.backend_cases exit BACKEND: the process must exit with status 0
    import sys

    import runners.backend.group  # noqa: F401

    os.environ[limits.ENV] = str(limits.RUN)
    mp.spawn(_bare_entry, args=(2, free_port(), sys.argv[2]), nprocs=2, join=True)
