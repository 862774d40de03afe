"""The ``collsched`` torch.distributed backend: unmodified PyTorch code runs verified schedules.

``import runners.backend`` registers the backend (so does torch itself at
``import torch`` when collsched is installed: see the ``torch.backends``
entry point in pyproject.toml); then ``init_process_group("collsched")``
makes ``dist.all_reduce`` and every other collective run the schedule that
the policy (``runners.policy``) picks for its kind, size and world size.

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
  algorithm run ``runners.direct``'s point-to-point exchanges (``p2p`` in
  the policy).

Every collective method is its job body behind one shared prologue
(``_collective``: default options, pass-through, op and root checks, the
inner group, queueing). ``runners.work`` holds ``CollschedWork`` and the
issue queue, ``runners.inner_groups`` makes the inner groups.

Sparse tensors (``all_reduce`` SUM, as gloo) go to the inner group's own
sparse all-reduce, in issue order; ``monitored_barrier`` is collsched's own
(gloo's semantics, through the store); see docs/backend.md for which torch
features are served and which are handed on.

Schedules run through ``runners.runner.run`` on the inner group, which is
registered in torch's group tables (not in ``pg_names``) because the runner
uses the public ``dist`` point-to-point API. The runner's cross-rank argument
check is off unless ``COLLSCHED_CHECK=1``: it costs an all-gather per call.

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
import functools
import gc
import inspect
import os
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as _c10d
from torch.distributed import distributed_c10d as c10d

from algorithms.ir import Kind
from runners import direct
from runners.errors import RunTimeout
from runners.inner_groups import forget_inner_group, inner_group
from runners.policy import P2P, Choice, Policy, schedule
from runners.registration import BACKEND_NAME, register_creator
from runners.runner import run
from runners.work import CollschedWork, IssueQueue, Job, JobState

__all__ = ["BACKEND_NAME", "CollschedProcessGroup", "CollschedWork", "MonitoredBarrierError", "create", "register",
           "settle"]

_R = dist.ReduceOp
ENV_CHECK = "COLLSCHED_CHECK"
_OPS = frozenset({_R.SUM, _R.PRODUCT, _R.MIN, _R.MAX, _R.AVG, _R.BAND, _R.BOR, _R.BXOR})
_SHUTDOWN_TIMEOUT_S = 30.0


# --------------------------------------------------------------------------- the process group


class MonitoredBarrierError(RunTimeout):
    """``monitored_barrier`` failed: on rank 0 the message names the ranks that did not arrive."""


def _op_of(opts: Any) -> dist.ReduceOp.RedOpType:
    op = opts.reduceOp
    return op.op if hasattr(op, "op") else op


def _timeout_of(opts: Any) -> timedelta | None:
    """A per-call timeout from a torch options object, or None where it is unset (torch's -1 ms)."""
    timeout = getattr(opts, "timeout", None)
    if isinstance(timeout, timedelta) and timeout > timedelta(0):
        return timeout
    return None


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _flat(t: torch.Tensor) -> torch.Tensor:
    """A contiguous 1-D view of ``t`` (a copy when ``t`` is not contiguous; the caller copies back)."""
    return t.reshape(-1) if t.is_contiguous() else t.contiguous().reshape(-1)


def _write_back(dst: torch.Tensor, flat: torch.Tensor) -> None:
    if flat.data_ptr() != dst.data_ptr() or not dst.is_contiguous():
        dst.copy_(flat.view(dst.shape))


def _check_same(tensors: Sequence[torch.Tensor], what: str) -> None:
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) > 1:
        raise ValueError(f"collsched {what}: tensors must share one dtype, got {sorted(map(str, dtypes))}")


def _device_type(tensors: Sequence[torch.Tensor], what: str) -> str:
    types = {t.device.type for t in tensors}
    if len(types) != 1:
        raise ValueError(f"collsched {what}: tensors must be on one device type, got {sorted(types)}")
    return types.pop()


@dataclass(frozen=True)
class _Call:
    """What the shared prologue hands a collective's body: the options, the inner group, the op and the root."""

    opts: Any
    group: dist.ProcessGroup
    op: Any = _R.SUM
    root: int = 0


_Body = Callable[..., Job]


def _collective(
    what: str,
    options: Callable[[], Any],
    tensors: Callable[..., Sequence[torch.Tensor]],
    *,
    reduces: bool = False,
    rooted: bool = False,
) -> Callable[[_Body], Callable[..., dist.Work]]:
    """The prologue every collective of ``CollschedProcessGroup`` shares, around a body that returns its job.

    The method keeps torch's signature: the body's arguments after ``call``, then ``opts=None``. The prologue
    fills torch's default options (``options()``), passes the call straight to the inner group's method of the
    same name when the backend string maps the device of ``tensors(*args)`` to another backend, checks the
    reduce op (``reduces``) and ``opts.rootRank`` (``rooted``), finds the inner group, lets the body check its
    own arguments and build its job, and queues the job behind every earlier collective (``_submit``).
    """

    def wrap(body: _Body) -> Callable[..., dist.Work]:
        signature = inspect.signature(body)
        params = list(signature.parameters.values())
        names = [p.name for p in params[2:]]  # after self and call

        @functools.wraps(body)
        def method(self: CollschedProcessGroup, *args: Any, **kwargs: Any) -> dist.Work:
            if len(args) > len(names) + 1:
                raise TypeError(f"{body.__name__}() takes {len(names) + 1} arguments, got {len(args)}")
            bound = dict(zip([*names, "opts"], args, strict=False))
            bound.update(kwargs)
            missing = [n for n in names if n not in bound]
            if missing or set(bound) - {*names, "opts"}:
                raise TypeError(f"{body.__name__}() arguments: missing {missing}, got {sorted(bound)}")
            opts = bound.pop("opts", None)
            opts = options() if opts is None else opts
            values = [bound[n] for n in names]
            given = tensors(*values)
            device = _device_type(given, what)
            if self._mode(device) != "schedule":
                return getattr(self._group(device), body.__name__)(*values, opts)
            op = _op_of(opts) if reduces else _R.SUM
            if reduces:
                self._check_op(op, what)
            root = self._check_root(opts.rootRank, what) if rooted else 0
            call = _Call(opts, self._group(device), op, root)
            return self._submit(what, given, body(self, call, *values), opts)

        opts_param = inspect.Parameter("opts", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)
        method.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[params[0], *params[2:], opts_param], return_annotation="dist.Work"
        )
        return method

    return wrap


class CollschedProcessGroup(dist.ProcessGroup):
    """A process group whose collectives run collsched schedules on inner gloo/nccl groups.

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
    ) -> None:
        super().__init__(rank, size)  # type: ignore[call-arg]  # torch 2.13: a Python subclass cannot use (store, rank, size)
        self._policy = Policy.from_env() if policy is None else policy
        self._policy.validate(size)
        self._global_ranks = tuple(global_ranks) or tuple(range(size))
        self._store = store
        self._timeout = timeout
        self._job_timeout: timedelta | None = None  # a per-call timeout (opts.timeout) while its job runs
        # Cross-rank argument checks cost the runner one metadata all-gather per
        # collective; like TORCH_DISTRIBUTED_DEBUG they are opt-in.
        self._check = os.environ.get(ENV_CHECK, "0") == "1"
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
        if torch.cuda.is_available() and dist.is_nccl_available():
            # Eager, as torch's own subgroups are, when the default group is bound to a device.
            bound = getattr(c10d._world.default_pg, "bound_device_id", None) if dist.is_initialized() else None
            self._inner["cuda"] = inner_group(store, rank, size, timeout, "cuda", self._global_ranks, "cuda",
                                              bound_device=bound)
        self._queue = IssueQueue(f"r{rank}")
        self._streams: dict[int, Any] = {}
        self._coalesced: list[JobState] | None = None
        self._monitored = 0  # monitored_barrier calls so far (every rank counts alike)
        self._closed = False
        self.executed: collections.Counter[str] = collections.Counter()
        """How many collectives ran each way, as ``kind/algorithm`` (``p2p``: the direct fallback)."""
        _LIVE.add(self)

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
        device = _device_type(tensors, what) if tensors else "cpu"
        run = job
        timeout = _timeout_of(opts)
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
    ) -> None:
        """Run the policy's schedule for ``kind`` on contiguous 1-D tensors (or the direct fallback).

        Tensors follow ``runners.runner.run``: in-place kinds use ``tensor``;
        ``tensor`` is None on the non-roots of scatter and ``output`` on the
        non-roots of gather; a barrier has neither. ``nbytes`` is the size the
        policy sees (nccl-tests conventions), identical on every rank.
        """
        choice = self._choose(kind, nbytes)
        if choice.algorithm == P2P:
            self.executed[f"{kind}/{P2P}"] += 1
            direct.run_kind(kind, group, tensor, output, op=op, root=root)
            return
        self.executed[f"{kind}/{choice}"] += 1
        sched = schedule(kind, choice, self.size(), root)
        run(sched, tensor, output, op=op, group=group, timeout=self._job_timeout or self._timeout, check=self._check)

    # ------------------------------------------------------------------ all-reduce

    @_collective("allreduce", _c10d.AllreduceOptions, lambda tensors: tensors, reduces=True)
    def allreduce(self, call: _Call, tensors: list[torch.Tensor]) -> Job:
        """``dist.all_reduce``: the allreduce schedule, in place; sparse tensors go to the inner backend."""
        if any(t.layout is not torch.strided for t in tensors):
            # gloo all-reduces sparse COO tensors (SUM) itself; no schedule covers them. In the job, so that
            # it runs in issue order and never beside a schedule on the same inner group.
            group, opts = call.group, call.opts

            def sparse_job() -> list[torch.Tensor]:
                self.executed[f"{Kind.ALLREDUCE}/sparse:inner"] += 1
                work = group.allreduce(tensors, opts)
                work.wait()
                return list(work.result()) or tensors

            return sparse_job

        def job() -> list[torch.Tensor]:
            for t in tensors:
                self._allreduce_one(call.group, t, call.op)
            return tensors

        return job

    def _allreduce_one(self, group: dist.ProcessGroup, t: torch.Tensor, op: Any) -> None:
        flat = _flat(t)
        self._execute(Kind.ALLREDUCE, group, flat, op=op, nbytes=_nbytes(flat))
        _write_back(t, flat)

    @_collective("allreduce_coalesced", _c10d.AllreduceCoalescedOptions, lambda tensors: tensors, reduces=True)
    def allreduce_coalesced(self, call: _Call, tensors: list[torch.Tensor]) -> Job:
        """``dist.all_reduce_coalesced`` and the coalescing manager: one allreduce per dtype over the concatenation."""

        def job() -> list[torch.Tensor]:
            by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
            for t in tensors:
                by_dtype.setdefault(t.dtype, []).append(t)
            for same in by_dtype.values():
                flat = torch.cat([t.reshape(-1) for t in same])
                self._allreduce_one(call.group, flat, call.op)
                for t, piece in zip(same, flat.split([t.numel() for t in same]), strict=True):
                    t.copy_(piece.view(t.shape))
            return tensors

        return job

    # ------------------------------------------------------------------ broadcast / reduce

    @_collective("broadcast", _c10d.BroadcastOptions, lambda tensors: tensors, rooted=True)
    def broadcast(self, call: _Call, tensors: list[torch.Tensor]) -> Job:
        """``dist.broadcast``: the broadcast schedule rooted at ``opts.rootRank``."""

        def job() -> list[torch.Tensor]:
            for t in tensors:
                flat = _flat(t)
                self._execute(Kind.BROADCAST, call.group, flat, root=call.root, nbytes=_nbytes(flat))
                _write_back(t, flat)
            return tensors

        return job

    @_collective("reduce", _c10d.ReduceOptions, lambda tensors: tensors, reduces=True, rooted=True)
    def reduce(self, call: _Call, tensors: list[torch.Tensor]) -> Job:
        """``dist.reduce``: the reduce schedule to ``opts.rootRank`` (direct if none is registered)."""
        root = call.root

        def job() -> list[torch.Tensor]:
            for t in tensors:
                flat = _flat(t)
                # The schedule may leave partial sums in non-root buffers; torch
                # promises nothing there, but we keep the caller's data intact.
                work = flat if self.rank() == root else flat.clone()
                self._execute(Kind.REDUCE, call.group, work, op=call.op, root=root, nbytes=_nbytes(work))
                if self.rank() == root:
                    _write_back(t, flat)
            return tensors

        return job

    # ------------------------------------------------------------------ all-gather

    @_collective("allgather", _c10d.AllgatherOptions, lambda outs, ins: ins)
    def allgather(
        self, call: _Call, output_tensors: list[list[torch.Tensor]], input_tensors: list[torch.Tensor]
    ) -> Job:
        """``dist.all_gather``: the allgather schedule, or direct exchange when the outputs differ in length."""
        if len(output_tensors) != len(input_tensors):
            raise ValueError("collsched allgather: one output list per input tensor")
        for outs in output_tensors:
            self._check_count(outs, "allgather output list")

        def job() -> list[list[torch.Tensor]]:
            for outs, t in zip(output_tensors, input_tensors, strict=True):
                self._allgather_list(call.group, outs, t)
            return output_tensors

        return job

    def _allgather_list(self, group: dist.ProcessGroup, outs: list[torch.Tensor], t: torch.Tensor) -> None:
        _check_same([*outs, t], "allgather")
        if any(o.numel() != t.numel() for o in outs):
            flats = [_flat(o) for o in outs]
            self.executed[f"{Kind.ALLGATHER}/{P2P}"] += 1
            direct.allgather(group, flats, _flat(t))
            for o, f in zip(outs, flats, strict=True):
                _write_back(o, f)
            return
        out = torch.empty(self.size() * t.numel(), dtype=t.dtype, device=t.device)
        self._execute(Kind.ALLGATHER, group, _flat(t), out, nbytes=_nbytes(out))
        for o, piece in zip(outs, out.chunk(self.size()), strict=True):
            o.copy_(piece.view(o.shape))

    @_collective("all_gather_into_tensor", _c10d.AllgatherOptions, lambda output, input: [output, input])
    def all_gather_single(self, call: _Call, output: torch.Tensor, input: torch.Tensor) -> Job:
        """``dist.all_gather_into_tensor``: the allgather schedule from ``input`` into ``output``."""
        self._check_gather_sizes(output, input, "all_gather_into_tensor")

        def job() -> list[torch.Tensor]:
            self._gather_into(call.group, output, input)
            return [output]

        return job

    _allgather_base = all_gather_single

    def _gather_into(self, group: dist.ProcessGroup, output: torch.Tensor, input: torch.Tensor) -> None:
        out = _flat(output)
        self._execute(Kind.ALLGATHER, group, _flat(input), out, nbytes=_nbytes(out))
        _write_back(output, out)

    @_collective("allgather_coalesced", _c10d.AllgatherOptions, lambda output_lists, input_list: input_list)
    def allgather_coalesced(
        self, call: _Call, output_lists: list[list[torch.Tensor]], input_list: list[torch.Tensor]
    ) -> Job:
        """``dist.all_gather_coalesced``: one all-gather per input tensor, in one queued job."""
        if len(output_lists) != self.size():
            raise ValueError(
                f"collsched allgather_coalesced: expected {self.size()} output lists, got {len(output_lists)}"
            )

        def job() -> list[list[torch.Tensor]]:
            for i, t in enumerate(input_list):
                self._allgather_list(call.group, [outs[i] for outs in output_lists], t)
            return output_lists

        return job

    @_collective("all_gather_into_tensor_coalesced", _c10d.AllgatherOptions, lambda outs, ins: [*outs, *ins])
    def all_gather_single_coalesced(self, call: _Call, outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> Job:
        """All-gather each ``inputs[i]`` into ``outputs[i]`` (coalescing manager, functional collectives)."""
        for o, i in zip(outputs, inputs, strict=True):
            self._check_gather_sizes(o, i, "all_gather_into_tensor_coalesced")

        def job() -> list[torch.Tensor]:
            for o, i in zip(outputs, inputs, strict=True):
                self._gather_into(call.group, o, i)
            return outputs

        return job

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    # ------------------------------------------------------------------ reduce-scatter

    @_collective("reduce_scatter", _c10d.ReduceScatterOptions, lambda outs, ins: outs, reduces=True)
    def reduce_scatter(
        self, call: _Call, output_tensors: list[torch.Tensor], input_tensors: list[list[torch.Tensor]]
    ) -> Job:
        """``dist.reduce_scatter``: the reducescatter schedule, or direct exchange for uneven pieces."""
        for ins in input_tensors:
            self._check_count(ins, "reduce_scatter input list")
        group, op = call.group, call.op

        def job() -> list[torch.Tensor]:
            for out, ins in zip(output_tensors, input_tensors, strict=True):
                _check_same([out, *ins], "reduce_scatter")
                if any(i.numel() != out.numel() for i in ins):
                    flat = _flat(out)
                    self.executed[f"{Kind.REDUCESCATTER}/{P2P}"] += 1
                    direct.reduce_scatter(group, flat, [_flat(i) for i in ins], op)
                    _write_back(out, flat)
                    continue
                src = torch.cat([i.reshape(-1) for i in ins])
                flat = _flat(out)
                self._execute(Kind.REDUCESCATTER, group, src, flat, op=op, nbytes=_nbytes(src))
                _write_back(out, flat)
            return output_tensors

        return job

    @_collective("reduce_scatter_tensor", _c10d.ReduceScatterOptions, lambda output, input: [output, input],
                 reduces=True)
    def reduce_scatter_single(self, call: _Call, output: torch.Tensor, input: torch.Tensor) -> Job:
        """``dist.reduce_scatter_tensor``: the reducescatter schedule from ``input`` into ``output``."""
        self._check_gather_sizes(input, output, "reduce_scatter_tensor")

        def job() -> list[torch.Tensor]:
            self._scatter_from(call.group, output, input, call.op)
            return [output]

        return job

    _reduce_scatter_base = reduce_scatter_single

    def _scatter_from(self, group: dist.ProcessGroup, output: torch.Tensor, input: torch.Tensor, op: Any) -> None:
        out = _flat(output)
        self._execute(Kind.REDUCESCATTER, group, _flat(input), out, op=op, nbytes=_nbytes(input))
        _write_back(output, out)

    @_collective("reduce_scatter_tensor_coalesced", _c10d.ReduceScatterOptions, lambda outs, ins: [*outs, *ins],
                 reduces=True)
    def reduce_scatter_single_coalesced(
        self, call: _Call, outputs: list[torch.Tensor], inputs: list[torch.Tensor]
    ) -> Job:
        """Reduce-scatter each ``inputs[i]`` into ``outputs[i]`` (coalescing manager, functional collectives)."""
        for o, i in zip(outputs, inputs, strict=True):
            self._check_gather_sizes(i, o, "reduce_scatter_tensor_coalesced")

        def job() -> list[torch.Tensor]:
            for o, i in zip(outputs, inputs, strict=True):
                self._scatter_from(call.group, o, i, call.op)
            return outputs

        return job

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    # ------------------------------------------------------------------ gather / scatter

    @_collective("gather", _c10d.GatherOptions, lambda outs, ins: ins, rooted=True)
    def gather(
        self, call: _Call, output_tensors: list[list[torch.Tensor]], input_tensors: list[torch.Tensor]
    ) -> Job:
        """``dist.gather``: the gather schedule to ``opts.rootRank`` (direct when none is registered or uneven)."""
        root, me = call.root, self.rank()
        if me == root:
            if len(output_tensors) != 1:
                raise ValueError("collsched gather: the root needs exactly one gather_list")
            self._check_count(output_tensors[0], "gather_list")
        elif output_tensors and output_tensors[0]:
            raise ValueError(f"collsched gather: gather_list must be empty on non-root rank {me}")
        (t,) = input_tensors
        outs = output_tensors[0] if me == root else None

        def job() -> list[list[torch.Tensor]]:
            if outs is not None and any(o.numel() != t.numel() for o in outs):
                # Only the root knows the sizes; torch's gloo rejects this case, and so do we.
                raise ValueError("collsched gather: every gather_list tensor must have the input's size")
            out = torch.empty(self.size() * t.numel(), dtype=t.dtype, device=t.device) if outs is not None else None
            self._execute(Kind.GATHER, call.group, _flat(t), out, root=root, nbytes=_nbytes(t) * self.size())
            for o, piece in zip(outs or [], out.chunk(self.size()) if out is not None else [], strict=True):
                o.copy_(piece.view(o.shape))
            return output_tensors

        return job

    @_collective("scatter", _c10d.ScatterOptions, lambda outs, ins: outs, rooted=True)
    def scatter(
        self, call: _Call, output_tensors: list[torch.Tensor], input_tensors: list[list[torch.Tensor]]
    ) -> Job:
        """``dist.scatter``: the scatter schedule from ``opts.rootRank`` (direct when none is registered or uneven)."""
        root, me = call.root, self.rank()
        if me == root:
            if len(input_tensors) != 1:
                raise ValueError("collsched scatter: the root needs exactly one scatter_list")
            self._check_count(input_tensors[0], "scatter_list")
        elif input_tensors and input_tensors[0]:
            raise ValueError(f"collsched scatter: scatter_list must be empty on non-root rank {me}")
        (t,) = output_tensors
        ins = input_tensors[0] if me == root else None

        def job() -> list[torch.Tensor]:
            if ins is not None and any(i.numel() != t.numel() for i in ins):
                raise ValueError("collsched scatter: every scatter_list tensor must have the output's size")
            flat = _flat(t)
            src = torch.cat([i.reshape(-1) for i in ins]) if ins is not None else None
            self._execute(Kind.SCATTER, call.group, src, flat, root=root, nbytes=_nbytes(t) * self.size())
            _write_back(t, flat)
            return output_tensors

        return job

    # ------------------------------------------------------------------ all-to-all

    @_collective("all_to_all", _c10d.AllToAllOptions, lambda outs, ins: [*outs, *ins])
    def alltoall(self, call: _Call, output_tensors: list[torch.Tensor], input_tensors: list[torch.Tensor]) -> Job:
        """``dist.all_to_all``: the alltoall schedule, or direct exchange for uneven pieces."""
        self._check_count(output_tensors, "all_to_all output list")
        self._check_count(input_tensors, "all_to_all input list")

        def job() -> list[torch.Tensor]:
            self._alltoall_pieces(call.group, output_tensors, input_tensors)
            return output_tensors

        return job

    def _alltoall_pieces(
        self, group: dist.ProcessGroup, outs: Sequence[torch.Tensor], ins: Sequence[torch.Tensor]
    ) -> None:
        _check_same([*outs, *ins], "all_to_all")
        n = ins[0].numel()
        if all(t.numel() == n for t in (*outs, *ins)):
            src = torch.cat([t.reshape(-1) for t in ins])
            dst = torch.empty_like(src)
            self._execute(Kind.ALLTOALL, group, src, dst, nbytes=_nbytes(src))
            for o, piece in zip(outs, dst.chunk(self.size()), strict=True):
                o.copy_(piece.view(o.shape))
            return
        flats = [_flat(o) for o in outs]
        self.executed[f"{Kind.ALLTOALL}/{P2P}"] += 1
        direct.alltoall(group, flats, [_flat(i) for i in ins])
        for o, f in zip(outs, flats, strict=True):
            _write_back(o, f)

    @_collective("all_to_all_single", _c10d.AllToAllOptions, lambda output, input, outs, ins: [output, input])
    def all_to_all_single(
        self,
        call: _Call,
        output: torch.Tensor,
        input: torch.Tensor,
        output_split_sizes: list[int],
        input_split_sizes: list[int],
    ) -> Job:
        """``dist.all_to_all_single``: the alltoall schedule for even splits, direct exchange otherwise."""
        outs = self._split_rows(output, list(output_split_sizes), "output")
        ins = self._split_rows(input, list(input_split_sizes), "input")

        def job() -> list[torch.Tensor]:
            self._alltoall_pieces(call.group, outs, ins)
            return [output]

        return job

    alltoall_base = all_to_all_single

    def _split_rows(self, t: torch.Tensor, splits: list[int], what: str) -> list[torch.Tensor]:
        """The p pieces of ``t`` along dim 0: equal when ``splits`` is empty (as torch's API)."""
        p = self.size()
        rows = t.shape[0] if t.dim() else t.numel()
        if not splits:
            if rows % p:
                raise ValueError(f"collsched all_to_all_single: {what} dim 0 ({rows}) is not divisible by {p} ranks")
            splits = [rows // p] * p
        if len(splits) != p or any(s < 0 for s in splits) or sum(splits) != rows:
            raise ValueError(
                f"collsched all_to_all_single: {what} split sizes {splits} must be {p} non-negative sizes "
                f"summing to dim 0 ({rows})"
            )
        return list(t.split(splits)) if t.dim() else [t.reshape(-1)[:0] for _ in range(p)]

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
        device = _device_type(tensors, "send")
        if device == "cpu" or self._mode(device) != "schedule":
            return self._p2p(device).send(tensors, dstRank, tag)
        group = self._group(device)
        return self._submit("send", tensors, lambda: (group.send(tensors, dstRank, tag).wait(), tensors)[1])

    def recv(self, tensors: list[torch.Tensor], srcRank: int, tag: int) -> dist.Work:
        """``dist.recv``/``irecv``: passed through to the inner backend (a separate channel for CPU)."""
        device = _device_type(tensors, "recv")
        if device == "cpu" or self._mode(device) != "schedule":
            return self._p2p(device).recv(tensors, srcRank, tag)
        group = self._group(device)
        return self._submit("recv", tensors, lambda: (group.recv(tensors, srcRank, tag).wait(), tensors)[1])

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int) -> dist.Work:
        """``dist.recv`` without a source: passed through to the inner backend."""
        return self._p2p(_device_type(tensors, "recv")).recv_anysource(tensors, tag)

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

    # ------------------------------------------------------------------ checks

    def _check_root(self, root: int, what: str) -> int:
        if not 0 <= root < self.size():
            raise ValueError(f"collsched {what}: root {root} out of range for {self.size()} ranks")
        return root

    def _check_count(self, tensors: Sequence[torch.Tensor], what: str) -> None:
        if len(tensors) != self.size():
            raise ValueError(f"collsched {what}: expected {self.size()} tensors (one per rank), got {len(tensors)}")

    def _check_gather_sizes(self, big: torch.Tensor, small: torch.Tensor, what: str) -> None:
        if big.dtype != small.dtype:
            raise ValueError(f"collsched {what}: dtypes differ ({big.dtype} vs {small.dtype})")
        if big.numel() != self.size() * small.numel():
            raise ValueError(
                f"collsched {what}: the large tensor must hold {self.size()} × {small.numel()} elements, "
                f"got {big.numel()}"
            )

    def _check_op(self, op: Any, what: str) -> None:
        """Every ReduceOp but PREMUL_SUM (an nccl-only op) is served; dtype rules are the runner's."""
        if op not in _OPS:
            raise ValueError(f"collsched {what}: reduce op {op} is not supported (gloo does not have it either)")

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


def create(opts: Any, backend_options: Any = None) -> CollschedProcessGroup:
    """The creator torch calls (extended API): one ``CollschedProcessGroup`` for the group being made."""
    return CollschedProcessGroup(
        opts.store,
        opts.group_rank,
        opts.group_size,
        opts.timeout,
        global_ranks=list(opts.global_ranks_in_group),
    )


@atexit.register
def _shutdown_live_groups() -> None:
    """Release groups the program did not destroy: a gloo group alive at interpreter exit can abort it."""
    for pg in list(_LIVE):
        pg.shutdown()


def register() -> None:
    """Register the ``collsched`` backend with this module's ``create`` (a no-op when already registered)."""
    register_creator(create)


register()
