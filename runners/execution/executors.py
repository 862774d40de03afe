"""The executors of a rank plan: per-step groups (nccl's path, also on gloo) and host-side dataflow (gloo).

Grouped (``execute_grouped``): steps run in program order; all of a rank's
sends and receives of a step are posted as one group (on nccl one
``batch_isend_irecv``, i.e. ``ncclGroupStart .. ncclGroupEnd`` on the group's
own communicator; on gloo, which has no coalescing, the same list of
``isend``/``irecv``, as ``batch_isend_irecv`` does there); local transfers
whose destination no same-step transfer reads run while the group is in
flight; then the rank waits for the group (on CUDA a stream wait, the host
never blocks) and applies the step's staged receives and snapshots in program
order. A step with no operation for the rank issues nothing. Why this cannot
hang: docs/design.md, "Runner executors".

Dataflow (``execute_host``, gloo only): sends and receives are posted with
``isend``/``irecv`` as their dependencies complete, each transfer on its own
tag (gloo matches tags exactly), staged receives are posted ahead in program
order, and the runner blocks on the earliest outstanding operation, then
takes every other completed one (on gloo, torch's point-to-point works
report ``is_completed()`` only once waited on, so in practice it waits on
them one at a time, earliest first; benchmarks/bench_wait.py probes it).
nccl ignores tags and matches a pair's messages in posting order, which
dataflow order does not keep equal on both ends, so this executor is refused
for CUDA tensors.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from heapq import heappush
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from algorithms.ir import Buf, Op
from runners.errors import RunError, RunTimeout, peer_report, report_failure
from runners.execution.buffers import Buffers
from runners.execution.plan import Item, RankPlan, Role
from runners.execution.staging import STAGING, Carver

EXECUTORS = ("grouped", "dataflow", "auto")
# Post groups with dist.batch_isend_irecv even where the backend cannot coalesce (gloo), so that CPU
# tests run the exact P2POp path nccl takes (tests set it; failures then name the step's first transfer).
FORCE_BATCH_API = False


def coalesces(group: Any, device: torch.device) -> bool:
    """Whether ``batch_isend_irecv`` on ``group`` makes one coalesced group (nccl), as torch decides it."""
    pg = group if group is not None else c10d._get_default_group()
    try:
        return type(pg) is dist.ProcessGroup and bool(pg._get_backend(device).supports_coalescing)
    except (RuntimeError, AttributeError):
        return False


def _bytes(t: torch.Tensor) -> torch.Tensor:
    # Messages travel as bytes: every dtype then moves the same way on every backend.
    return t.view(torch.uint8) if t.dtype is not torch.uint8 else t


class Context:
    """What an engine needs besides the plan: buffers, peers, op, deadline and error reporting."""

    def __init__(self, plan: RankPlan, bufs: Buffers, group: Any, globals_: list[int],
                 combine: Callable[[torch.Tensor, torch.Tensor], None], timeout: float, deadline: float) -> None:
        self.plan = plan
        self.bufs = bufs
        self.group = group
        self.globals = globals_  # global rank of each group rank
        self.combine = combine
        self.timeout = timeout
        self.deadline = deadline
        self.salt = 0  # or'ed into every transfer's tag by a checked run (runners.execution.arguments.salt)
        # A checked run's stall watch (runners.execution.native.watch) and the extension's wait_watched: waits
        # then end early when a peer left a note that its run of this call failed (check.h), and a timeout
        # names the peers stalled too. None: plain waits (no extension, or an unchecked run).
        self.watch: Any = None
        self.wait_watched: Callable[[Any, Any, float], tuple[int, str]] | None = None

    def src(self, it: Item) -> torch.Tensor:
        t = it.transfer
        return self.bufs.slot(t.src_buf, t.src_index, t.count)

    def dst(self, it: Item) -> torch.Tensor:
        t = it.transfer
        return self.bufs.slot(t.dst_buf, t.dst_index, t.count)

    def isend(self, it: Item) -> Any:
        try:
            return dist.isend(_bytes(self.src(it)), self.globals[it.peer], group=self.group, tag=it.tid | self.salt)
        except Exception as e:  # posting to a pair whose peer is gone fails at once
            raise self.failure(it, e) from e

    def irecv(self, it: Item, into: torch.Tensor) -> Any:
        try:
            return dist.irecv(_bytes(into), self.globals[it.peer], group=self.group, tag=it.tid | self.salt)
        except Exception as e:
            raise self.failure(it, e) from e

    def post_group(self, ops: list[tuple[Item, torch.Tensor]], batched: bool) -> list[tuple[Item, Any]]:
        """Post a step's sends and receives (tensor: a send's source, a receive's target) as one group.

        Returns (item, work) pairs to wait on; a coalesced group has one work, attributed to its first item."""
        if not ops:
            return []
        if not batched:
            return [(it, self.isend(it) if it.role is Role.SEND else self.irecv(it, t)) for it, t in ops]
        p2p = [dist.P2POp(c10d.isend if it.role is Role.SEND else c10d.irecv, _bytes(t), group=self.group,
                          tag=it.tid | self.salt, group_peer=it.peer) for it, t in ops]
        try:
            works = dist.batch_isend_irecv(p2p)
        except Exception as e:
            raise self.failure(ops[0][0], e) from e
        if len(works) == len(ops):
            return [(it, w) for (it, _), w in zip(ops, works, strict=True)]
        return [(ops[0][0], w) for w in works]

    def apply(self, it: Item, data: torch.Tensor) -> None:
        if it.transfer.op is Op.REDUCE:
            self.combine(self.dst(it), data)
        else:
            self.dst(it).copy_(data)

    def local(self, it: Item) -> None:
        """A local transfer whose source no same-step write can clobber: read and write at once."""
        t = it.transfer
        src = self.src(it)
        if t.src_buf is t.dst_buf and abs(t.src_index - t.dst_index) < t.count:
            src = src.clone()  # overlapping ranges of one buffer
        self.apply(it, src)

    def failure(self, it: Item, error: BaseException) -> RunError:
        plan = self.plan
        sched = plan.schedule
        verb = "send to" if it.role is Role.SEND else "receive from"
        peer = f"rank {it.peer} (global rank {self.globals[it.peer]})"
        head = (f"rank {plan.rank} (global rank {self.globals[plan.rank]}): {sched.name} "
                f"{sched.collective.describe()}: {it.describe()}: {verb} {peer}")
        text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        timeout_text = "timed out" in text.lower() or "timeout" in text.lower() or isinstance(error, TimeoutError)
        # Only our own deadline makes a timeout: gloo also says "timeout" when a pair was closed because the
        # peer's wait timed out ("Application timeout caused pair closure"), which is the peer failing.
        if timeout_text and time.monotonic() >= self.deadline - 0.01:
            blame = self.watch.blame() if self.watch is not None and "stall watch" not in text else ""
            if self.watch is not None:
                self.watch.note_failure(f"step {it.step}: {verb} peer rank {it.peer}: timed out")
            report_failure(self.globals[plan.rank], f"{it.describe()}: {verb} peer {peer} timed out")
            return RunTimeout(f"{head} did not complete within {self.timeout:g} s; waiting on peer {peer} "
                              f"({text}){blame}")
        # What the peer said it failed with, this call (the stall watch's note, waited for up to the stall time:
        # a peer whose wait timed out closes the pair first and writes its note after), or at all (the store's
        # note): a peer that failed first closes its pairs, and its error is the cause of ours.
        theirs = (self.watch.note_of(it.peer, self.watch.stall_s)
                  if self.watch is not None and "had failed first" not in text else "")
        note = f"rank {it.peer} had failed first: {theirs}" if theirs else peer_report(self.globals[it.peer])
        failure = f"{head} failed: peer {peer} ({note or text})"
        report_failure(self.globals[plan.rank], f"{it.describe()}: {verb} peer {peer} failed ({text})")
        if self.watch is not None:
            self.watch.note_failure(f"step {it.step}: {verb} peer rank {it.peer}: {text}")
        return RunError(failure)

    def abandoned(self, it: Item, text: str) -> RunError:
        """The run gave up waiting on ``it``: the stall watch found that rank ``text``'s prefix had failed this
        call first (``text``: ``"rank:what it said"``); the error names both."""
        plan = self.plan
        failed, _, note = text.partition(":")
        verb = "send to" if it.role is Role.SEND else "receive from"
        who = f"rank {failed} (global rank {self.globals[int(failed)]})" if failed.isdigit() else f"rank {failed}"
        report_failure(self.globals[plan.rank], f"{it.describe()}: abandoned: {who} had failed first ({note})")
        return RunError(f"rank {plan.rank} (global rank {self.globals[plan.rank]}): {plan.schedule.name} "
                        f"{plan.schedule.collective.describe()}: {it.describe()}: {verb} rank {it.peer} (global "
                        f"rank {self.globals[it.peer]}) abandoned: {who} had failed first: {note}")

    def wait(self, it: Item, work: Any) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise self.failure(it, TimeoutError("timed out"))
        if self.watch is not None and self.wait_watched is not None:
            status, text = self.wait_watched(self.watch, work, left)
            if status == 5:  # PEER_FAILED (plan.h)
                raise self.abandoned(it, text)
            if status == 4:  # MISMATCH: rows agreed at the exchange; whatever differs now is no argument of ours
                raise RunError(f"rank {self.plan.rank}: {it.describe()}: the stall watch found rows that differ: "
                               f"{text}")
            if status != 0:
                raise self.failure(it, TimeoutError(text) if "timed out" in text.lower() else RuntimeError(text))
            return
        try:
            work.wait(timedelta(seconds=left))
        except Exception as e:
            raise self.failure(it, e) from e


def execute_host(ctx: Context) -> None:
    """Dataflow execution with host-side completion (gloo): see the module docstrings."""
    ref = ctx.bufs.bufs[Buf.INPUT if Buf.INPUT in ctx.bufs.bufs else Buf.OUTPUT]
    budget = ctx.plan.budget_chunks
    unit = ctx.bufs.s * ref.element_size()
    arena, shared = STAGING.borrow(budget * unit, ref.device)
    ok = False
    try:
        _run_host(ctx, Carver(arena, unit, budget, ref.dtype))
        ok = True
    finally:
        if shared:
            # After a failure receives may still be posted into the buffer: it is not lent again.
            STAGING.give_back(ref.device, keep=ok)


def _run_host(ctx: Context, carver: Carver) -> None:
    plan = ctx.plan
    budget = plan.budget_chunks  # chunks of staged receives that may still be posted
    items = plan.items
    n = len(items)
    deps_left = [len(it.deps) for it in items]
    after_left = [len(it.after) for it in items]
    arrived = [False] * n
    works: dict[int, Any] = {}
    heap: list[int] = []
    held: dict[int, torch.Tensor] = {}  # staging buffers and local snapshots
    slots: dict[int, int] = {}  # carver slot of each staged receive's buffer
    staged = plan.staged_recvs
    next_staged = 0
    done = 0
    # An explicit queue instead of recursion: chains of local transfers can be long.
    todo: list[tuple[int, int]] = []  # (event, item): 0 deps satisfied, 1 try apply, 2 read, 3 complete
    DEPS, APPLY, READ, COMPLETE = 0, 1, 2, 3

    def post_staged() -> None:
        nonlocal next_staged, budget
        while next_staged < len(staged):
            i = staged[next_staged]
            count = items[i].transfer.count
            if count > budget:
                return
            budget -= count
            held[i], slots[i] = carver.take(count)
            works[i] = ctx.irecv(items[i], held[i])
            heappush(heap, i)
            next_staged += 1

    for i in range(n):
        if deps_left[i] == 0:
            todo.append((DEPS, i))
    post_staged()
    while done < n:
        while todo:
            ev, i = todo.pop()
            it = items[i]
            if ev == DEPS:
                if it.role is Role.SEND:
                    works[i] = ctx.isend(it)
                    heappush(heap, i)
                elif it.role is Role.RECV:
                    if it.staged:
                        todo.append((APPLY, i))
                    else:
                        works[i] = ctx.irecv(it, ctx.dst(it))
                        heappush(heap, i)
                elif it.staged:
                    held[i] = ctx.src(it).clone()
                    arrived[i] = True
                    todo.append((APPLY, i))
                    todo.append((READ, i))
                else:
                    ctx.local(it)
                    todo.append((COMPLETE, i))
                    todo.append((READ, i))
            elif ev == APPLY:
                if arrived[i] and deps_left[i] == 0 and after_left[i] == 0:
                    data = held.pop(i)
                    ctx.apply(it, data)
                    if it.role is Role.RECV:
                        carver.give(slots.pop(i), it.transfer.count)
                        budget += it.transfer.count
                        post_staged()
                    todo.append((COMPLETE, i))
            elif ev == READ:
                for k in plan.readers_of[i]:
                    after_left[k] -= 1
                    if after_left[k] == 0:
                        todo.append((APPLY, k))
            else:
                done += 1
                for k in plan.dependents[i]:
                    deps_left[k] -= 1
                    if deps_left[k] == 0:
                        todo.append((DEPS, k))
        if done == n:
            break
        if not heap:
            raise RunError(f"rank {plan.rank}: {plan.schedule.name}: internal error: {n - done} transfers "
                           "cannot start (no operation outstanding)")
        # Block on the earliest outstanding operation, then take every other completed one.
        first = heap[0]
        ctx.wait(items[first], works[first])
        finished = [i for i, w in works.items() if i == first or w.is_completed()]
        for i in finished:
            w = works.pop(i)
            if i != first:
                ctx.wait(items[i], w)  # returns at once; raises a failed operation's error
            it = items[i]
            if it.role is Role.SEND:
                todo.append((COMPLETE, i))
                todo.append((READ, i))
            elif it.staged:
                arrived[i] = True
                todo.append((APPLY, i))
            else:
                todo.append((COMPLETE, i))
        # Filtering breaks the heap order, and waiting on anything but the earliest can deadlock.
        heap = sorted(works)


def execute_grouped(ctx: Context) -> None:
    """One group of sends and receives per step, in program order: see the module docstring."""
    plan = ctx.plan
    items = plan.items
    ref = ctx.bufs.bufs[Buf.INPUT if Buf.INPUT in ctx.bufs.bufs else Buf.OUTPUT]
    cuda = ref.device.type == "cuda"
    batched = FORCE_BATCH_API or coalesces(ctx.group, ref.device)
    s = ctx.bufs.s
    unit = s * ref.element_size()
    # Every staged receive of one step is in flight at once: the budget (>= the most chunks staged in
    # one step) always fits. CUDA allocates per step (the caching allocator reuses it, stream-ordered).
    arena, shared = (None, False) if cuda else STAGING.borrow(plan.budget_chunks * unit, ref.device)
    carver = None if arena is None else Carver(arena, unit, plan.budget_chunks, ref.dtype)
    ok = False
    try:
        n = len(items)
        i = 0
        while i < n:
            step = items[i].step
            j = i
            while j < n and items[j].step == step:
                j += 1
            ops: list[tuple[Item, torch.Tensor]] = []
            held: dict[int, torch.Tensor] = {}
            slots: dict[int, int] = {}
            later: list[int] = []  # unstaged locals: their destination is read by nothing in this step
            for k in range(i, j):
                it = items[k]
                if it.role is Role.SEND:
                    ops.append((it, ctx.src(it)))
                elif it.role is Role.RECV:
                    if it.staged:
                        count = it.transfer.count
                        if carver is None:
                            held[k] = torch.empty(count * s, dtype=ref.dtype, device=ref.device)
                        else:
                            held[k], slots[k] = carver.take(count)
                        ops.append((it, held[k]))
                    else:
                        ops.append((it, ctx.dst(it)))
                elif it.staged:
                    held[k] = ctx.src(it).clone()  # snapshot before any write of the step lands
                else:
                    later.append(k)
            works = ctx.post_group(ops, batched)
            for k in later:
                ctx.local(items[k])
            for it, work in works:
                if cuda:
                    work.wait()  # the current stream waits; the host does not
                else:
                    ctx.wait(it, work)
            for k in sorted(held):
                ctx.apply(items[k], held.pop(k))
                if k in slots and carver is not None:
                    carver.give(slots.pop(k), items[k].transfer.count)
            i = j
        ok = True
    finally:
        if shared:
            STAGING.give_back(ref.device, keep=ok)
