"""Run a schedule on torch.distributed, with the semantics of torch's own collective of its kind.

``run(schedule, tensor, output, op=SUM, group=None)`` moves real tensors with
point-to-point operations on the current process group: gloo for CPU tensors,
nccl for CUDA tensors. Tensor arguments follow torch's single-tensor APIs
(``N`` is the per-rank element count, ``p`` the group size):

| kind | ``tensor`` | ``output`` | like |
|---|---|---|---|
| allreduce, broadcast, reduce | N, updated in place | - | ``all_reduce``, ``broadcast``, ``reduce`` |
| allgather | N | p·N | ``all_gather_into_tensor`` |
| reducescatter | p·N | N | ``reduce_scatter_tensor`` |
| scatter | p·N on the root (ignored elsewhere, may be None) | N | ``scatter`` with one flat tensor |
| gather | N | p·N on the root (ignored elsewhere, may be None) | ``gather`` into one flat tensor |
| alltoall | p·N | p·N | ``all_to_all_single`` with equal splits |
| alltoallv | row r of T, times N | column r of T, times N | ``all_to_all_single`` with split sizes |
| barrier | None | - | ``barrier`` |

For alltoallv, N is the elements of one chunk of its matrix T (``algorithms.ir``): rank r's ``tensor``
holds its blocks for ranks 0..p-1 in order, ``output`` those from ranks 0..p-1.

Chunks. Every buffer is an array of the schedule's chunks of ``S = ceil(N/C)``
elements, and segment s of a p·N tensor holds chunks ``s·C .. s·C+C-1``, so the
layout of wide buffers is that of the per-rank ones. When C divides N the
runner works in the caller's tensors directly; otherwise it works in padded
copies (the last chunks hold fewer real elements, possibly none) and copies
the result back. An out-of-place kind never writes the caller's input: when
its schedule writes the input buffer, the runner works on a copy.

Execution (``executor=``, see runners.execution.executors). ``"grouped"``: steps in
program order, all of a rank's sends and receives of a step posted as one
group (nccl: one ``batch_isend_irecv`` on the group's own communicator),
reductions and local copies after it. ``"dataflow"`` (gloo only): sends and
receives posted with ``isend``/``irecv`` as their dependencies complete, each
on its own tag. ``"auto"`` (default): grouped for CUDA tensors; on gloo the
one that measured faster for the schedule's kind (``AUTO_CPU``). On nccl the
host returns once everything is enqueued on the current stream (a barrier
synchronises it); ``timeout`` is then NCCL's watchdog's business (the process
group's timeout), not the runner's. Before the first CUDA run on a group that
was not initialised eagerly (``init_process_group(device_id=...)``), the
runner all-reduces one element on it, so that the group's communicator exists
(made by every rank) before any point-to-point operation.

Memory: what one run allocates beyond the caller's tensors, and the staging
buffer kept between runs, is described in ``runners.execution.staging``.

Validation happens before any data moves. The schedule itself is verified the first time it runs
(``runners.execution.verified``: a schedule the verifier rejects is refused on every rank, naming its
first violations; the verdict is cached by content, in memory and on disk). Checks that need only the
arguments run on every rank identically (including ``plan.step_race``: a
schedule whose step writes a slot twice with a copy among the writes is
refused); then the ranks all-gather a row of integers of metadata (size,
dtype, op, schedule checksum, local error) in one collective and every rank
runs the same check over the table, so a bad argument on one rank raises the
same ``InputError`` on every rank and nothing hangs. With the native engine on
CPU the exchange runs once per signature and group; a later call of the
signature is checked in band (salted tags and a stall watch, see
``runners.execution.arguments``), so that no data moves between ranks that disagree and
the ranks that stall on them raise an ``InputError`` naming the argument.

Modules: ``runners.execution.arguments`` (the cross-rank argument check), ``runners.execution.buffers``
(working buffers and reduce ops), ``runners.execution.staging`` (staging memory), ``runners.execution.executors``
(the two executors),
``runners.execution.native`` (the same two in C++, without the GIL: the default wherever the extension builds;
``engine=`` or ``COLLSCHED_EXECUTOR`` chooses) and ``runners.errors``.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from algorithms.ir import Buf, Kind, Schedule
from runners.errors import InputError, RunError, RunTimeout
from runners.execution import native, verified
from runners.execution.arguments import (
    OP_NAMES,
    REDUCING,
    SUPPORTED_DTYPES,
    check_own_row,
    check_table,
    checked_before,
    common_count,
    devices_of,
    exchange,
    local_check,
    meta_device,
    metadata,
    op_index,
    salt_shift,
    signature,
    stall_seconds,
)
from runners.execution.arguments import salt as salt_of
from runners.execution.buffers import Buffers, combine
from runners.execution.executors import EXECUTORS, Context, execute_grouped, execute_host
from runners.execution.plan import RankPlan, rank_plan
from runners.execution.staging import release_memory, staging_bytes
from runners.execution.switching import SwitchError, on_torch

__all__ = ["AUTO_CPU", "EXECUTORS", "SUPPORTED_DTYPES", "InputError", "Prepared", "RunError", "RunTimeout",
           "prepare", "release_memory", "run", "staging_bytes"]

ReduceOp = dist.ReduceOp

AUTO_CPU: dict[Kind, str] = {}
"""``executor="auto"`` on gloo: the executor per kind where the grouped one measured faster (see
docs/backend.md, "Performance"); kinds not listed use the dataflow executor."""

# Groups whose communicator is known to exist (CUDA), held weakly (see runners.execution.arguments._CACHES).
_READY: weakref.WeakSet[Any] = weakref.WeakSet()


def _ensure_communicator(group: Any, device: torch.device) -> None:
    """Make sure ``group``'s own nccl communicator exists before the first point-to-point operation.

    torch makes it at ``init_process_group(device_id=...)`` (eager init); otherwise lazily at the first
    operation, and a first ``batch_isend_irecv`` that not every rank joins (step 0 of a tree) is
    undefined. So a group that is not bound to a device gets one all-reduce of one element, once, which
    every rank of the run reaches.
    """
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if pg in _READY:
        return
    if getattr(pg, "bound_device_id", None) is None:
        dist.all_reduce(torch.zeros(1, device=device), group=group)
    _READY.add(pg)


def _executor(executor: str, device: torch.device, kind: Kind) -> str:
    if executor not in EXECUTORS:
        raise InputError(f"executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    if device.type == "cuda":
        if executor == "dataflow":
            raise InputError("executor 'dataflow' needs gloo's tag matching; nccl matches a pair's messages in "
                             "posting order: use 'grouped' (or 'auto') for CUDA tensors")
        return "grouped"
    if executor == "auto":
        return AUTO_CPU.get(kind, "dataflow")
    return executor


def _seconds(timeout: float | timedelta | None) -> float:
    if timeout is None:
        return dist.default_pg_timeout.total_seconds()
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    if not seconds > 0:
        raise InputError(f"timeout must be positive, got {timeout!r}")
    return seconds


@dataclass
class Prepared:
    """What a run needs before any data moves (``prepare``): the schedule as it runs, this rank's plan, the
    arguments checked across ranks, and the engine, executor, device and time limits chosen."""

    schedule: Schedule
    """With switch operations as point-to-point transfers (``on_torch``)."""
    plan: RankPlan
    op: int
    """``runners.execution.arguments.OP_NAMES`` index."""
    row: list[int]
    """This rank's metadata row (``runners.execution.arguments.metadata``)."""
    n: int
    """Elements per rank the ranks agree on (for a barrier, 1); 0 or less: nothing to move."""
    group: Any
    globals_: list[int]
    seconds: float
    deadline: float
    engine: str
    """``native`` or ``python``."""
    executor: str
    """``grouped`` or ``dataflow``, as chosen for the device."""
    device: torch.device
    dtype: torch.dtype
    check: Any = None
    """The native in-band check of this call (``runners.execution.native.watch``), or None."""
    salt: int = 0


def run(
    schedule: Schedule,
    tensor: torch.Tensor | None = None,
    output: torch.Tensor | None = None,
    op: Any = ReduceOp.SUM,
    group: Any = None,
    *,
    timeout: float | timedelta | None = None,
    check: bool = True,
    executor: str = "auto",
    engine: str | None = None,
) -> torch.Tensor | None:
    """Run ``schedule`` on ``group`` (default: the world); returns the result tensor of this rank.

    Semantics are those of torch's collective of the schedule's kind (see the
    module docstring for the tensor arguments): in-place kinds update
    ``tensor``; the others fill ``output``; the result on ranks that receive
    none (non-roots of reduce and gather) is unspecified, as in torch. ``op``
    is a ``ReduceOp`` (SUM, PRODUCT, MIN, MAX, AVG, BAND, BOR, BXOR with
    torch's dtype rules). Ranks of the schedule are ranks of ``group``.

    Raises ``InputError`` on every rank, before any data moves, for invalid
    arguments, and ``verified.UnverifiedSchedule`` (an ``InputError``) for a schedule the verifier
    rejects (the first run of each schedule verifies it: ``runners.execution.verified``;
    ``COLLSCHED_VERIFY=0`` skips that); ``RunError`` when a peer fails; ``RunTimeout`` when the run
    does not finish within ``timeout`` seconds (default: torch's default
    process-group timeout). Both name the step, the transfer and the peer.
    A process outside ``group`` returns None at once, as torch does.

    ``check=True`` exchanges a row of 12 integers per rank the first time a
    signature (schedule, sizes, dtype, op) runs on the group; with the native
    engine on CPU a later call of it skips the exchange and is checked in band
    (runners.execution.arguments). ``check=False`` skips the metadata exchange and the
    in-band check: arguments are still checked locally, but a
    rank whose arguments are bad raises alone and its peers time out, naming
    it; arguments that differ between ranks (schedules included) are not
    detected, as in torch.

    ``executor``: ``"grouped"``, ``"dataflow"`` (gloo only) or ``"auto"``
    (see the module docstring). ``engine``: ``"native"`` (runners.execution.native: the C++ executor, no GIL),
    ``"python"`` (runners.execution.executors), or None: ``COLLSCHED_EXECUTOR``, native where it builds.
    """
    member = _member(schedule, group, timeout)
    if member is None:
        return None
    rank, p, seconds = member
    prepared = prepare(schedule, tensor, output, op_index(op), group, rank=rank, p=p, seconds=seconds, check=check,
                       executor=executor, engine=engine)
    coll = prepared.schedule.collective
    result = output if not coll.in_place else tensor
    if coll.kind is not Kind.BARRIER and prepared.n <= 0:
        return result
    bufs = Buffers(prepared.schedule, prepared.plan, tensor, output, prepared.n, prepared.dtype, prepared.device)
    _execute(prepared, bufs)
    bufs.finish()
    _average(prepared, rank, result)
    return result


def _member(schedule: Schedule, group: Any, timeout: float | timedelta | None) -> tuple[int, int, float] | None:
    """(rank, group size, seconds) of a valid call; None on a process outside ``group``."""
    if not isinstance(schedule, Schedule):
        raise InputError(f"schedule must be a Schedule, got {type(schedule).__name__}")
    if not dist.is_initialized():
        raise InputError("torch.distributed is not initialised: call init_process_group (or runners.commands.launch)")
    seconds = _seconds(timeout)
    rank = dist.get_rank(group)
    if rank < 0:
        return None
    p = dist.get_world_size(group)
    coll = schedule.collective
    if p != coll.ranks:
        raise InputError(f"run({schedule.name} {coll.describe()}): the schedule is for {coll.ranks} ranks but "
                         f"the group has {p}")
    return rank, p, seconds


def prepare(schedule: Schedule, tensor: torch.Tensor | None, output: torch.Tensor | None, op: int, group: Any, *,
            rank: int, p: int, seconds: float, check: bool, executor: str = "auto",
            engine: str | None = None) -> Prepared:
    """Everything before data moves, each step once: the schedule on torch, this rank's plan, the engine, the
    local check of the arguments, their cross-rank check (the exchange of rows, or in band), the device and the
    executor. Raises ``InputError`` as ``run`` documents. ``run`` calls it, and so does the C++ backend on the
    first call of a signature (``runners.backend.cpp.Core.prepare``), which then runs the call itself."""
    schedule, plan = _compiled(schedule, rank)
    verified.require(schedule)  # what runs, once per content (and process, or machine): runners.execution.verified
    engine = _engine(executor, engine)
    code, detail, n = local_check(schedule, rank, tensor, output, op, devices_of(group))
    row = metadata(schedule, plan, tensor, output, op, code, detail, n)
    deadline = time.monotonic() + seconds
    globals_ = [dist.get_global_rank(group, r) if group is not None else r for r in range(p)]
    table, watched, salt = _cross_check(schedule, row, code, group, rank, globals_, deadline, check, engine)
    kind = schedule.collective.kind
    if kind is not Kind.BARRIER:
        n = common_count(table)
    device, dtype = _device(schedule, rank, tensor, output, group)
    if kind is Kind.BARRIER or n > 0:  # a call that moves nothing returns before choosing
        executor = _executor(executor, device, kind)
    return Prepared(schedule, plan, op, row, n, group, globals_, seconds, deadline, engine, executor, device, dtype,
                    watched, salt)


def _compiled(schedule: Schedule, rank: int) -> tuple[Schedule, RankPlan]:
    """The schedule on torch and this rank's plan of it (refused with InputError when it cannot run)."""
    try:
        schedule = on_torch(schedule)  # switch operations become point-to-point transfers
    except SwitchError as e:
        raise InputError(f"run({e})") from None
    plan = rank_plan(schedule, rank)
    if plan.race is not None:
        raise InputError(f"run({schedule.name} {schedule.collective.describe()}): the schedule cannot run: "
                         f"{plan.race}")
    return schedule, plan


def _engine(executor: str, engine: str | None) -> str:
    """The engine that runs (``native`` or ``python``), after checking ``executor`` and ``engine``."""
    if executor not in EXECUTORS:
        raise InputError(f"executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    if engine not in (None, "native", "python"):
        raise InputError(f"engine must be 'native', 'python' or None, got {engine!r}")
    try:
        return engine or native.chosen()
    except ValueError as e:  # COLLSCHED_EXECUTOR names neither
        raise InputError(str(e)) from None


def _cross_check(schedule: Schedule, row: list[int], code: int, group: Any, rank: int, globals_: list[int],
                 deadline: float, check: bool, engine: str) -> tuple[list[list[int]], Any, int]:
    """(every rank's row, the native check of this call, its salt): the arguments compared across ranks.

    With the native engine on CPU, by ``_native_check``; else the all-gather of rows (``check``), or this
    rank's own row alone (``check=False`` or one rank)."""
    p = len(globals_)
    if check and p > 1 and engine == "native" and meta_device(group).type == "cpu" and native.available():
        return _native_check(schedule, row, code, group, rank, globals_, deadline)
    if check and p > 1:
        what = f"{schedule.name} {schedule.collective.describe()}"
        table = exchange(row, group, globals_, meta_device(group), rank, deadline, what)
        check_table(schedule, table)
        watched = None
        if meta_device(group).type == "cpu" and native.available():
            # The Python engine's waits under the stall watch too: a peer that failed this call is noticed
            # within about COLLSCHED_STALL_S (runners/csrc/check.h); the rows agree (just checked).
            watched = native.watch(group, [*row, 0], rank, p, 0, native.next_call(group), stall_seconds())
        return table, watched, 0
    check_own_row(schedule, rank, row)
    return [row], None, 0


def _native_check(schedule: Schedule, row: list[int], code: int, group: Any, rank: int, globals_: list[int],
                  deadline: float) -> tuple[list[list[int]], Any, int]:
    """Checked once per signature and group by the exchange; later calls in band (runners.execution.arguments)."""
    p = len(globals_)
    cache = checked_before(group if group is not None else dist.group.WORLD)
    sig = signature(row)
    counter = native.next_call(group)
    # An alltoallv (a schedule per traffic matrix) is exchanged every call, never checked in band.
    in_band = schedule.collective.kind is not Kind.ALLTOALLV
    before = in_band and code == 0 and sig in cache
    salt = salt_of([*row, int(before)], counter, salt_shift(schedule)) if in_band else 0
    before = before and salt != 0
    watched = native.watch(group, [*row, int(before)], rank, p, salt, counter, stall_seconds())
    if before:
        return [row], watched, salt
    what = f"{schedule.name} {schedule.collective.describe()}"
    table = native.exchange(row, group, globals_, rank, deadline, what, schedule, watched,
                            counter)  # one round instead of p-1
    check_table(schedule, table)
    if in_band:
        cache.add(sig)
    return table, watched, salt


def _device(schedule: Schedule, rank: int, tensor: torch.Tensor | None, output: torch.Tensor | None,
            group: Any) -> tuple[torch.device, torch.dtype]:
    """The device and dtype of the run's buffers (a barrier's token: the group's device, one byte)."""
    has_input = isinstance(tensor, torch.Tensor) and schedule.buffer_chunks(rank, Buf.INPUT)
    ref = tensor if has_input else output
    if schedule.collective.kind is Kind.BARRIER or ref is None:
        return meta_device(group), torch.uint8 if ref is None else ref.dtype
    return ref.device, ref.dtype


def _execute(prepared: Prepared, bufs: Buffers) -> None:
    """Run the plan on ``bufs`` with the chosen engine and executor."""
    kind = prepared.schedule.collective.kind
    ctx = Context(prepared.plan, bufs, prepared.group, prepared.globals_, combine(prepared.op, kind),
                  prepared.seconds, prepared.deadline)
    ctx.salt = prepared.salt
    device = prepared.device
    if device.type == "cuda":
        _ensure_communicator(prepared.group, device)
    if prepared.engine == "native" and native.available():
        native.execute(ctx, prepared.op, dataflow=prepared.executor == "dataflow", check=prepared.check)
    else:
        if prepared.check is not None and device.type == "cpu":
            ctx.watch, ctx.wait_watched = prepared.check, native.load().wait_watched
        if device.type == "cuda" or prepared.executor == "grouped":
            execute_grouped(ctx)
        else:
            execute_host(ctx)
        if ctx.watch is not None:
            ctx.watch.forget()  # a row written while a wait stalled is nobody's concern now
    if device.type == "cuda" and kind is Kind.BARRIER:
        torch.cuda.current_stream(device).synchronize()  # a barrier holds the host, as torch's does


def _average(prepared: Prepared, rank: int, result: torch.Tensor | None) -> None:
    """AVG: the sum divided by the group size where a result lands."""
    coll = prepared.schedule.collective
    if coll.kind is Kind.BARRIER or OP_NAMES[prepared.op] != "AVG" or coll.kind not in REDUCING:
        return
    if coll.kind is not Kind.REDUCE or rank == coll.root:
        assert result is not None
        # As gloo does: complex values are divided as (re, im) pairs of reals.
        (torch.view_as_real(result) if result.is_complex() else result).div_(len(prepared.globals_))
