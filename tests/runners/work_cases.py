"""Multi-process cases of Work semantics for tests/runners/test_backend.py: issue order, errors, timeouts.

Nothing here depends on how fast a process is: a rank that must be "late" waits for a key its peer sets in
the group's store once it has seen what the case is about (a wait that timed out), and the only bound on a
duration is the generous ``limits.PROMPT``, derived from ``COLLSCHED_TEST_TIMEOUT``.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from tests.runners import limits
from tests.runners.backend_cases import Checker, R, _same


def _later(store: Any, key: str) -> None:
    """Wait (up to a job's time) for ``key``: what a rank does instead of sleeping to be late."""
    store.wait([key], timedelta(seconds=limits.JOB))


def work_semantics(rank: int, world: int) -> None:
    """Issue order, is_completed/get_future, errors raised by wait(), timeouts, the group surviving an error."""
    c = Checker(rank)
    store = c10d._get_default_store()
    # Many outstanding collectives, big ones first: they complete in issue order.
    order: list[int] = []
    tensors = [torch.full((200_000 // (i + 1),), float(rank + i)) for i in range(12)]
    works = [dist.all_reduce(t, async_op=True) for t in tensors]
    callbacks = [w.get_future().then(lambda _f, i=i: order.append(i)) for i, w in enumerate(works)]
    for w in works:
        w.wait()
    torch.futures.wait_all(callbacks)  # the callbacks run on the worker thread: every one has now
    c.run("issue order", lambda: _same(order, list(range(12))))
    for i, t in enumerate(tensors):
        want = sum(float(r + i) for r in range(world))
        c.equal(f"outstanding all_reduce {i}", t, torch.full_like(t, want))
    c.run("is_completed after wait", lambda: _same([w.is_completed() for w in works], [True] * 12))
    fut_value = works[0].get_future().value()
    c.run("future holds the output", lambda: _same(fut_value[0] is tensors[0], True))

    # A callback chained on a collective's future may itself wait for a collective (it runs on the worker thread).
    def chained() -> None:
        a, b = torch.ones(5), torch.full((5,), 2.0)
        fut = dist.all_reduce(a, async_op=True).get_future().then(lambda _f: (dist.all_reduce(b), b.clone())[1])
        _same(fut.wait().tolist(), [2.0 * world] * 5)
        _same(a.tolist(), [float(world)] * 5)
    c.run("callback waits for a collective", chained)

    # An error in a queued collective: wait() raises it, on every rank, and the group stays usable.
    def failing() -> None:
        w = dist.all_reduce(torch.ones(4), op=R.BAND, async_op=True)  # BAND on floats: torch's rules forbid it
        try:
            w.wait()
        except Exception as err:
            if "BAND" not in str(err):
                raise AssertionError(f"error does not name the op: {err}") from err
        else:
            raise AssertionError("wait() returned although the collective failed")
        _same((w.is_completed(), w.is_success(), w.exception() is not None), (True, False, True))
        try:
            w.get_future().wait()
        except Exception:
            pass
        else:
            raise AssertionError("the future completed without the error")
        try:
            dist.all_reduce(torch.ones(4), op=R.BAND)
        except Exception:
            pass
        else:
            raise AssertionError("a synchronous failing all_reduce did not raise")
    c.run("error surfaces", failing)
    t = torch.ones(3)
    c.run("usable after error", lambda: dist.all_reduce(t))
    c.equal("usable after error", t, torch.full((3,), float(world)))

    # wait(timeout) gives up while a peer has not joined, and a later wait() still succeeds: on a signature's
    # first call (prepared on the worker) and on a later one (small: once run in the caller's thread, so that
    # the call itself blocked and wait() had nothing left to time out).
    def timed(round_: int) -> None:
        x = torch.ones(2)
        key = f"work-case/timed/{round_}"
        if rank == 1:
            _later(store, key)  # joins once rank 0's wait(200 ms) has given up
        w = dist.all_reduce(x, async_op=True)
        if rank == 0:
            try:
                try:
                    w.wait(timedelta(milliseconds=200))
                except TimeoutError:
                    pass
                else:
                    raise AssertionError("wait(200 ms) returned while rank 1 had not joined")
                _same(w.is_completed(), False)
            finally:
                store.set(key, "1")
        w.wait()
        _same(x.tolist(), [float(world)] * 2)
    for round_ in range(2):
        c.run(f"wait timeout, call {round_ + 1} of its signature", timed, round_)

    # A timeout in the call's options (torch leaves it unset) replaces the group's for that collective.
    pair = dist.new_group([0, 1], backend="collsched")

    def per_call_timeout() -> None:
        y = torch.full((4,), float(rank))
        if rank == 1:
            _later(store, "work-case/gave-up")
            try:  # gloo closed the pair when rank 0 gave up: this fails, naming rank 0
                dist.broadcast(y, src=1, group=pair)
            except RuntimeError as err:
                if isinstance(err, TimeoutError) or "rank 0" not in str(err):
                    raise AssertionError(f"rank 0's failure reported as {type(err).__name__}: {err}") from err
            else:
                raise AssertionError("a broadcast to the rank that gave up succeeded")
            return
        opts = dist.BroadcastOptions()
        opts.rootRank, opts.rootTensor, opts.timeout = 1, 0, timedelta(milliseconds=300)
        start = time.monotonic()
        try:
            pair.broadcast([y], opts).wait()
        except TimeoutError as err:
            if "rank 1" not in str(err):
                raise AssertionError(f"the timeout does not name the late peer: {err}") from err
        else:
            raise AssertionError("broadcast with a 300 ms timeout returned while rank 1 had not joined")
        finally:
            store.set("work-case/gave-up", "1")
        if time.monotonic() - start > limits.PROMPT:  # the group's own timeout is 30 minutes
            raise AssertionError(f"gave up after {time.monotonic() - start:.1f} s, not at the call's 0.3 s")

    def after_the_timeout() -> None:
        # gloo closed the pair when rank 0 gave up: the next collective fails at once on both ranks, as the
        # peer's failure (not as a timeout of its own, though gloo's message says "timeout").
        start = time.monotonic()
        try:
            dist.barrier(group=pair)
        except RuntimeError as err:
            if isinstance(err, TimeoutError) or f"rank {1 - rank}" not in str(err):
                raise AssertionError(f"the closed pair reported as {type(err).__name__}: {err}") from err
        else:
            raise AssertionError("a barrier over the pair gloo closed succeeded")
        if time.monotonic() - start > limits.PROMPT:
            raise AssertionError(f"the barrier took {time.monotonic() - start:.1f} s to fail")
    if rank in (0, 1):
        c.run("per-call timeout", per_call_timeout)
        c.run("after a per-call timeout", after_the_timeout)
    dist.destroy_process_group(pair)
    c.finish(least=19)
