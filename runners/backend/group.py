"""The ``collsched`` torch.distributed backend: unmodified PyTorch code runs verified schedules.

``import runners.backend.group`` registers the backend (so does torch itself at
``import torch`` when collsched is installed: see the ``torch.backends``
entry point in pyproject.toml); then ``init_process_group("collsched")``
makes ``dist.all_reduce`` and every other collective run the schedule that
the policy (``runners.backend.policy``) picks for its kind, size and world size.

Structure. torch hands a Python backend every tensor of every device, so
``CollschedProcessGroup`` (a ``dist.ProcessGroup`` subclass, the only kind of
Python backend torch accepts) dispatches by device itself:

- CPU tensors run on an inner gloo group, CUDA tensors on an inner nccl
  group (made lazily by ProcessGroupNCCL, one per collsched group);
- a device that the backend string maps to another backend
  (``"cpu:gloo,cuda:collsched"``) passes straight through to that backend's
  own collective;
- user ``send``/``recv`` pass through to a second inner group, so their
  tags can never be confused with the schedules' messages;
- shapes no schedule covers (uneven ``all_to_all_single``, ``all_gather``
  into tensors of different lengths) and kinds without a registered
  algorithm run ``runners.backend.direct``'s point-to-point exchanges (``p2p`` in
  the policy).

Every collective method is its job body behind one shared prologue
(``runners.backend.collectives``: default options, pass-through, op and root
checks, the inner group, queueing); the bodies, which translate torch's
arguments into the runner's buffers, live there too, in the ``Collectives``
mixin of the group. ``runners.backend.work`` holds ``CollschedWork`` and the issue
queue, ``runners.backend.inner_groups`` makes the inner groups.

Sparse tensors (``all_reduce`` SUM, as gloo) go to the inner group's own
sparse all-reduce, in issue order; ``monitored_barrier`` is collsched's own
(gloo's semantics, through the store); see docs/backend.md for which torch
features are served and which are handed on.

Schedules run through ``runners.execution.runner.run`` on the inner group, which is
registered in torch's group tables (not in ``pg_names``) because the runner
uses the public ``dist`` point-to-point API. The runner's cross-rank argument
check is on (``COLLSCHED_CHECK=0`` turns it off): each signature's first call
exchanges the ranks' rows, later calls are checked in band at no cost in
messages (``runners.execution.arguments``).

Ordering and errors. Every collective becomes a job on the group's one
worker thread, a FIFO: collectives complete in the order they were issued,
and ``async_op=True`` returns at once. The returned ``CollschedWork`` is a
``dist.Work`` whose ``wait()`` raises the job's exception (the Work torch
builds from a future swallows it), whose ``get_future()`` completes with the
output tensors (what DDP's communication hooks chain on) and whose
``is_completed()`` says whether the job has finished.

CUDA streams. At issue time the job records an event on the caller's
current stream; the worker makes a per-device communication stream wait
for it, runs the schedule on that stream, records a completion event, and
``wait()`` makes the caller's current stream wait for that event (the
host does not block on the GPU, as with nccl). Tensors are recorded on the
communication stream so the caching allocator does not reuse them early.
"""

from __future__ import annotations

import atexit
import collections
import gc
import os
import time
import weakref
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from algorithms.ir import Kind
from runners.backend import alltoallv, direct, settings
from runners.backend import cpp as cpp_backend
from runners.backend.collectives import Collectives, device_type_of, timeout_of
from runners.backend.inner_groups import forget_inner_group, inner_group
from runners.backend.policy import P2P, Choice, Policy, schedule
from runners.backend.registration import BACKEND_NAME, register_creator
from runners.backend.work import CollschedWork, InlineQueue, IssueQueue, Job, JobState
from runners.errors import RunTimeout
from runners.execution import verified
from runners.execution.runner import run

__all__ = ["BACKEND_NAME", "CollschedProcessGroup", "CollschedWork", "MonitoredBarrierError", "collsched_group",
           "create", "register", "settle"]

_R = dist.ReduceOp
ENV_CHECK = "COLLSCHED_CHECK"
_SHUTDOWN_TIMEOUT_S = 30.0


# --------------------------------------------------------------------------- the process group


class MonitoredBarrierError(RunTimeout):
    """``monitored_barrier`` failed: on rank 0 the message names the ranks that did not arrive."""


class CollschedProcessGroup(Collectives, dist.ProcessGroup):
    """A process group whose collectives run collsched schedules on inner gloo/nccl groups (the collective
    methods themselves: ``runners.backend.collectives.Collectives``).

    Made by ``init_process_group("collsched")`` or ``new_group(backend="collsched")``;
    see the module docstring for how calls are dispatched.
    """

    def __init__(
        self,
        store: dist.Store,
        rank: int,
        size: int,
        timeout: timedelta,
        *,
        global_ranks: Sequence[int] = (),
        policy: Policy | None = None,
        inline: bool = False,
    ) -> None:
        super().__init__(rank, size)  # type: ignore[call-arg]  # torch 2.13: a Python subclass cannot use (store, rank, size)
        self._policy = Policy.from_env() if policy is None else policy
        self._policy.validate(size)
        self._global_ranks = tuple(global_ranks) or tuple(range(size))
        self._store = store
        self._timeout = timeout
        self._job_timeout: timedelta | None = None  # a per-call timeout (opts.timeout) while its job runs
        # The cross-rank argument check: on by default (COLLSCHED_CHECK=0 turns it off). Each signature is
        # exchanged once per group; later calls are checked in band (runners.execution.arguments).
        want = os.environ.get(ENV_CHECK, "").strip() or "1"
        if want not in ("0", "1"):
            raise ValueError(f"{ENV_CHECK} must be 0 or 1, got {want!r}")
        self._check = want == "1"
        # Schedules are verified before they run (runners.execution.verified); COLLSCHED_VERIFY=0 says so once.
        if not verified.enabled():
            verified.warn_unverified()
        self._group_name = ""
        self._group_desc = ""
        self._modes: dict[str, str] | None = None
        # gloo connects every pair when it is made: that needs every rank, so
        # the CPU groups are made now (and not at a first send, which only two
        # ranks would reach).
        self._inner: dict[str, dist.ProcessGroup] = {
            "cpu": inner_group(store, rank, size, timeout, "cpu", self._global_ranks, "cpu"),
            "cpu-p2p": inner_group(store, rank, size, timeout, "cpu", self._global_ranks, "cpu-p2p"),
        }
        # Every rank is connected now: compare the settings that make ranks run different code (executor,
        # check, verification, native build, version), once, through the store (runners.backend.settings).
        try:
            settings.exchange(store, rank, size, timeout, self._global_ranks)
        except BaseException:
            for inner in self._inner.values():
                forget_inner_group(inner)
            self._inner.clear()
            raise
        if torch.cuda.is_available() and dist.is_nccl_available():
            # Eager, as torch's own subgroups are, when the default group is bound to a device.
            bound = getattr(c10d._world.default_pg, "bound_device_id", None) if dist.is_initialized() else None
            self._inner["cuda"] = inner_group(store, rank, size, timeout, "cuda", self._global_ranks, "cuda",
                                              bound_device=bound)
        # inline: the C++ backend (runners.backend.cpp) runs this group's jobs on its own worker thread.
        self._queue: IssueQueue = InlineQueue(f"r{rank}") if inline else IssueQueue(f"r{rank}")
        self._streams: dict[int, Any] = {}
        self._coalesced: list[JobState] | None = None
        self._monitored = 0  # monitored_barrier calls so far (every rank counts alike)
        self._closed = False
        self._executed: collections.Counter[str] = collections.Counter()
        self._native_counts: Any = None  # the C++ backend's counts of its native runs (runners.backend.cpp)
        self._folded: dict[str, int] = {}
        _LIVE.add(self)

    @property
    def executed(self) -> collections.Counter[str]:
        """How many collectives ran each way, as ``kind/algorithm`` (``p2p``: the direct fallback)."""
        if self._native_counts is not None:  # fold in what the C++ backend ran without Python
            for label, total in self._native_counts.items().items():
                if total != self._folded.get(label, 0):
                    self._executed[label] += total - self._folded.get(label, 0)
                    self._folded[label] = total
        return self._executed

    @executed.setter
    def executed(self, value: collections.Counter[str]) -> None:
        self._executed = value

    # ------------------------------------------------------------------ identity

    def getBackendName(self) -> str:
        """The backend name torch reports: ``collsched``."""
        return BACKEND_NAME

    def getGroupName(self) -> str:
        return self._group_name

    def setGroupName(self, name: str) -> None:
        self._group_name = name

    def getGroupDesc(self) -> str:
        return self._group_desc

    def setGroupDesc(self, desc: str) -> None:
        self._group_desc = desc

    @property
    def policy(self) -> Policy:
        """The algorithm policy this group was made with."""
        return self._policy

    def __repr__(self) -> str:
        return f"CollschedProcessGroup(rank={self.rank()}, size={self.size()}, name={self._group_name!r})"

    # ------------------------------------------------------------------ dispatch

    def _mode(self, device: str) -> str:
        """``schedule`` if the backend string maps ``device`` to collsched, else the backend it names."""
        if self._modes is None:
            try:
                config = dist.get_backend_config(self)  # TypeError: a group made outside torch's tables
            except (ValueError, RuntimeError, AssertionError, KeyError, TypeError):
                config = BACKEND_NAME
            modes: dict[str, str] = {}
            for pair in config.split(","):
                dev, sep, backend = pair.partition(":")
                if sep:
                    modes[dev.strip()] = backend.strip()
            self._modes = modes
        backend = self._modes.get(device, BACKEND_NAME)
        return "schedule" if backend == BACKEND_NAME else backend

    def _group(self, device: str) -> dist.ProcessGroup:
        try:
            return self._inner[device]
        except KeyError:
            raise RuntimeError(f"collsched has no backend for {device} tensors (available: cpu"
                               f"{', cuda' if 'cuda' in self._inner else ''})") from None

    def _submit(self, what: str, tensors: Sequence[torch.Tensor], job: Job, opts: Any = None) -> CollschedWork:
        """Queue ``job`` (which returns the outputs) behind every earlier collective of this group.

        A timeout set in ``opts`` (torch's options objects leave it unset)
        replaces the group's for this collective's schedule.
        """
        state = JobState()
        device = device_type_of(tensors, what) if tensors else "cpu"
        run = job
        timeout = timeout_of(opts)
        if timeout is not None:
            run = self._with_timeout(job, timeout)
        if device == "cuda":
            run = self._on_stream(tensors, run, state)
        self._queue.submit(run, state)
        if self._coalesced is not None:
            self._coalesced.append(state)
        return CollschedWork(state, what, self._queue)

    def _with_timeout(self, job: Job, timeout: timedelta) -> Job:
        def run() -> Any:
            # Jobs run one at a time on the worker thread (nested ones through run_until): save and restore.
            outer, self._job_timeout = self._job_timeout, timeout
            try:
                return job()
            finally:
                self._job_timeout = outer

        return run

    # ------------------------------------------------------------------ coalescing manager

    def _start_coalescing(self, device: torch.device) -> None:
        """``_coalescing_manager(device=...)``: start collecting the collectives issued until ``_end_coalescing``.

        torch 2.13 does not route these two calls of a Python ProcessGroup to
        Python from C++, but the coalescing manager calls them from Python.
        """
        self._coalesced = []

    def _end_coalescing(self, device: torch.device) -> CollschedWork:
        """A Work done when every collective issued since ``_start_coalescing`` is, raising the first error."""
        states, self._coalesced = self._coalesced or [], None

        def job() -> list[torch.Tensor]:
            for st in states:  # all done already: the queue runs in issue order
                if st.error is not None:
                    raise st.error
            return []

        return self._submit("coalesced", [], job)

    def _on_stream(self, tensors: Sequence[torch.Tensor], job: Job, state: JobState) -> Job:
        """Wrap ``job`` to run on the device's communication stream after the caller's current stream."""
        index = tensors[0].device.index if tensors[0].device.index is not None else torch.cuda.current_device()
        stream = self._streams.get(index)
        if stream is None:
            stream = self._streams[index] = torch.cuda.Stream(device=index)
        ready = torch.cuda.Event()
        ready.record(torch.cuda.current_stream(index))

        def run() -> Any:
            with torch.cuda.device(index), torch.cuda.stream(stream):
                stream.wait_event(ready)
                value = job()
                for t in tensors:
                    t.record_stream(stream)
                done = torch.cuda.Event()
                done.record(stream)
                state.cuda_done = done
            return value

        return run

    def _choose(self, kind: Kind, nbytes: int) -> Choice:
        return self._policy.choose(kind, nbytes, self.size())

    def _execute(
        self,
        kind: Kind,
        group: dist.ProcessGroup,
        tensor: torch.Tensor | None,
        output: torch.Tensor | None = None,
        *,
        nbytes: int,
        op: dist.ReduceOp.RedOpType = _R.SUM,
        root: int | None = None,
        matrix: Any = None,
    ) -> None:
        """Run the policy's schedule for ``kind`` on contiguous 1-D tensors (or the direct fallback).

        Tensors follow ``runners.execution.runner.run``: in-place kinds use ``tensor``;
        ``tensor`` is None on the non-roots of scatter and ``output`` on the
        non-roots of gather; a barrier has neither. ``nbytes`` is the size the
        policy sees (nccl-tests conventions), identical on every rank. ``matrix``: an alltoallv's traffic
        matrix in chunks (``runners.backend.alltoallv``; its caller handles the direct fallback).
        """
        choice = self._choose(kind, nbytes)
        if choice.algorithm == P2P:
            self.executed[f"{kind}/{P2P}"] += 1
            direct.run_kind(kind, group, tensor, output, op=op, root=root)
            return
        self.executed[f"{kind}/{choice}"] += 1
        sched = (schedule(kind, choice, self.size(), root) if matrix is None
                 else alltoallv.schedule_for(choice, matrix))
        # An alltoallv's split table was all-gathered and checked on every rank (sizes, dtype): no second check.
        run(sched, tensor, output, op=op, group=group, timeout=self._job_timeout or self._timeout,
            check=self._check and matrix is None)

    # ------------------------------------------------------------------ barrier and point-to-point

    def barrier(self, opts: Any = None) -> dist.Work:
        """``dist.barrier``: the barrier schedule on a one-element token, after every earlier collective."""
        group = self._inner["cpu"]

        def job() -> list[torch.Tensor]:
            self._execute(Kind.BARRIER, group, None, nbytes=0)
            return []

        return self._submit("barrier", [], job, opts)

    def send(self, tensors: list[torch.Tensor], dstRank: int, tag: int) -> dist.Work:
        """``dist.send``/``isend``: passed through to the inner backend (a separate channel for CPU)."""
        device = device_type_of(tensors, "send")
        if device == "cpu" or self._mode(device) != "schedule":
            return self._p2p(device).send(tensors, dstRank, tag)
        group = self._group(device)
        return self._submit("send", tensors, lambda: (group.send(tensors, dstRank, tag).wait(), tensors)[1])

    def recv(self, tensors: list[torch.Tensor], srcRank: int, tag: int) -> dist.Work:
        """``dist.recv``/``irecv``: passed through to the inner backend (a separate channel for CPU)."""
        device = device_type_of(tensors, "recv")
        if device == "cpu" or self._mode(device) != "schedule":
            return self._p2p(device).recv(tensors, srcRank, tag)
        group = self._group(device)
        return self._submit("recv", tensors, lambda: (group.recv(tensors, srcRank, tag).wait(), tensors)[1])

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int) -> dist.Work:
        """``dist.recv`` without a source: passed through to the inner backend."""
        return self._p2p(device_type_of(tensors, "recv")).recv_anysource(tensors, tag)

    def _p2p(self, device: str) -> dist.ProcessGroup:
        return self._inner["cpu-p2p"] if device == "cpu" else self._group(device)

    def monitored_barrier(self, timeout: timedelta | None = None, wait_all_ranks: bool = False) -> None:
        """``pg.monitored_barrier``, with gloo's semantics: rank 0 names the ranks that do not arrive.

        Every rank but 0 reports its arrival and waits for rank 0's release;
        rank 0 waits for each arrival in rank order, up to ``timeout`` (default:
        the group's) in all, and raises ``MonitoredBarrierError`` naming the
        first rank that did not arrive (every such rank with
        ``wait_all_ranks``). The others then time out, naming rank 0. Like
        gloo's, it runs at once on the calling thread (not behind queued
        collectives) and moves no tensor: the arrivals go through the group's
        store, so it needs no connection to a rank that is missing.
        ``dist.monitored_barrier`` refuses every backend but gloo by name;
        call this method on the group (``dist.group.WORLD.monitored_barrier()``).
        """
        seconds = (timeout if isinstance(timeout, timedelta) and timeout > timedelta(0) else self._timeout)
        limit = seconds.total_seconds()
        ms = int(limit * 1000)
        n = self._monitored
        self._monitored += 1
        me, p = self.rank(), self.size()
        key = f"collsched/monitored_barrier/{n}"

        def name(r: int) -> str:
            return f"rank {r} (global rank {self._global_ranks[r]})"

        if me != 0:
            self._store.set(f"{key}/arrived/{me}", "1")
            try:
                self._store.wait([f"{key}/released"], timedelta(seconds=limit))
            except Exception as e:  # the store raises its own timeout error
                raise MonitoredBarrierError(
                    f"[Rank {me}]: monitoredBarrier: {name(0)} did not release the barrier in {ms} ms (it failed, "
                    f"or other ranks did not arrive) ({str(e).strip().splitlines()[0] if str(e).strip() else e!r})"
                ) from e
            return
        deadline = time.monotonic() + limit
        missing: list[int] = []
        for r in range(1, p):
            arrived = f"{key}/arrived/{r}"
            left = deadline - time.monotonic()
            try:
                if left > 0:
                    self._store.wait([arrived], timedelta(seconds=left))
                elif not self._store.check([arrived]):
                    raise TimeoutError
            except Exception:
                missing.append(r)
                if not wait_all_ranks:
                    break
        if missing:
            which = (f"Rank {missing[0]}" if len(missing) == 1 else
                     "Ranks " + ", ".join(str(r) for r in missing))
            raise MonitoredBarrierError(
                f"[Rank 0]: {which} failed to pass monitoredBarrier in {ms} ms "
                f"({', '.join(name(r) for r in missing)} did not arrive)")
        for r in range(1, p):
            try:
                self._store.delete_key(f"{key}/arrived/{r}")
            except Exception:  # a store without delete_key keeps a few bytes per barrier
                break
        self._store.set(f"{key}/released", "1")

    def _get_backend(self, device: torch.device) -> Any:
        """The inner backend that moves ``device``'s tensors at the transport level (CUDA: the inner nccl).

        torch asks for it in ``init_process_group(..., device_id=...)`` to connect the communicator
        eagerly (``eager_connect_single_device``); without this, that call failed with "No backend type
        associated with device type cuda". Other device types raise as torch's own method does.
        """
        kind = torch.device(device).type
        if kind == "cuda" and "cuda" in self._inner:
            return self._inner["cuda"]._get_backend(torch.device(device))
        raise RuntimeError(f"No backend type associated with device type {kind}")

    # ------------------------------------------------------------------ lifetime

    def shutdown(self) -> None:
        """Finish queued collectives, stop the worker thread and release the inner groups (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._queue.close(_SHUTDOWN_TIMEOUT_S)
        for inner in self._inner.values():
            forget_inner_group(inner)
        self._inner.clear()
        _LIVE.discard(self)

    def abort(self) -> None:
        """Stop without waiting for queued collectives; release the inner groups."""
        if self._closed:
            return
        self._closed = True
        self._queue.close(0.0)
        for inner in self._inner.values():
            try:
                inner.abort()
            except RuntimeError:  # gloo has no abort in some torch versions; shutdown below still runs
                pass
            forget_inner_group(inner)
        self._inner.clear()
        _LIVE.discard(self)



def settle(seconds: float = 0.2) -> None:
    """Let gloo's worker threads release what DDP left them; call after dropping DDP, before destroying groups.

    torch 2.13's ~ProcessGroupGloo joins gloo's worker threads while holding
    the GIL (pytorch/pytorch#56297), and a worker releasing a finished work
    item that captured Python thread-local state needs the GIL: if the last
    reference to a gloo group (collsched's inner groups included) goes with a
    DDP reducer at the wrong moment, the rank deadlocks in ~Reducer ->
    ~ProcessGroupGloo. The same holds for plain gloo groups. So: quiesce the
    group (a barrier), ``del`` the DDP model and its optimizer while the group
    is still alive, then call this: it collects the reducer and sleeps (which
    releases the GIL) so the workers can finish.
    """
    gc.collect()
    time.sleep(seconds)


# --------------------------------------------------------------------------- registration

_LIVE: weakref.WeakSet[CollschedProcessGroup] = weakref.WeakSet()


def create(opts: Any, backend_options: Any = None) -> Any:
    """The creator torch calls (extended API): the C++ backend (``runners.backend.cpp``) around a
    ``CollschedProcessGroup``, or the Python group itself where the C++ one is not available or not wanted."""
    why = cpp_backend.unavailable()
    group = CollschedProcessGroup(
        opts.store,
        opts.group_rank,
        opts.group_size,
        opts.timeout,
        global_ranks=list(opts.global_ranks_in_group),
        inline=why is None,
    )
    return group if why is not None else cpp_backend.wrap(group)


def collsched_group(pg: Any = None) -> CollschedProcessGroup | None:
    """The ``CollschedProcessGroup`` behind ``pg`` (default: the world) under either backend, else None."""
    found = cpp_backend.group_of(pg)
    return found if isinstance(found, CollschedProcessGroup) else None


@atexit.register
def _shutdown_live_groups() -> None:
    """Release groups the program did not destroy: a gloo group alive at interpreter exit can abort it."""
    for pg in list(_LIVE):
        pg.shutdown()


def register() -> None:
    """Register the ``collsched`` backend with this module's ``create`` (a no-op when already registered)."""
    register_creator(create)


register()
