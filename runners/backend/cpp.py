"""The ``collsched`` backend in C++ (``runners/csrc/backend.h``): Work objects with real futures, no GIL on a hit.

``wrap(group)`` turns a ``runners.backend.group.CollschedProcessGroup`` made with an inline queue into the
C++ ``c10d::Backend`` that torch's creator returns. The C++ backend owns the group's one worker
thread (a FIFO, as the Python backend's); its collectives return C++ ``Work`` objects whose
``c10::ivalue::Future`` that thread completes. For dense contiguous CPU tensors of the kinds below,
the first call of each signature (kind, sizes, dtype, op, root) runs on that thread and asks ``Core.prepare``
(with the GIL) once: the policy's choice, the plan and the argument check (``runners.execution.runner.prepare``,
the step ``run`` takes too) run once each, and the answer (backend.h's ``Spec``: the plan, its buffer layout
and the checks) is cached; C++ then runs that call, and every later call of the signature, without any Python:
buffers bound, the plan run over the inner gloo group by the native executor, results copied back, the future
completed. From ``dist.all_reduce`` to the executor the first call crosses between Python and C++ twice (into
the backend, into ``prepare``), a later call once. Everything else (other shapes, lists, coalesced calls,
sparse tensors, CUDA tensors, signatures ``prepare`` declines) runs the Python backend's own body for the call
on the same worker thread, with the GIL, in issue order
(``Core.serve``). ``group_of(pg)`` finds the Python group behind either backend (its ``executed``
counter, policy, ``monitored_barrier``).

Choice: the C++ backend wherever the native extension builds, unless ``COLLSCHED_BACKEND=python`` or
``COLLSCHED_EXECUTOR=python`` (then the Python backend and its worker thread run, as before).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.distributed as dist

from algorithms.errors import UsageError
from algorithms.ir import Buf, Kind
from runners.backend.policy import P2P, schedule
from runners.errors import RunError
from runners.execution import native, runner
from runners.execution.arguments import (
    OP_NAMES,
    REDUCING,
    SIGNATURE_CACHE,
    parse_rows,
    salt_shift,
    segments,
    signature_cache,
    stall_seconds,
    stalled,
)
from runners.execution.executors import Context
from runners.execution.plan import RankPlan
from sim import units

__all__ = ["ENV_BACKEND", "ENV_INLINE", "INLINE_BYTES", "KINDS", "SIGNATURE_CACHE", "Core", "group_of",
           "inline_bytes", "signature_cache", "unavailable", "wrap"]

ENV_BACKEND = "COLLSCHED_BACKEND"
ENV_INLINE = "COLLSCHED_INLINE_BYTES"
INLINE_BYTES = 256 << 10
"""Default of ``COLLSCHED_INLINE_BYTES``: synchronous native collectives up to this size (the larger of input and
output) run in the calling thread once the group's queue has drained (docs/backend.md, "The C++ backend")."""
KINDS = (Kind.ALLREDUCE, Kind.BROADCAST, Kind.REDUCE, Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLTOALL,
         Kind.BARRIER)
"""The kinds backend.h serves natively, in its ``Kind`` enum's order."""
_ROOTED = (Kind.BROADCAST, Kind.REDUCE)


def unavailable() -> str | None:
    """Why the C++ backend is not used (the Python backend runs), or None when it is."""
    want = os.environ.get(ENV_BACKEND, "").strip().lower() or "cpp"
    if want not in ("cpp", "python"):
        raise ValueError(f"{ENV_BACKEND} must be 'cpp' or 'python', got {want!r}")
    if want == "python":
        return f"{ENV_BACKEND}=python"
    if native.chosen() == "python":
        return native.build_note() or f"{native.ENV_EXECUTOR}=python"
    return None


def inline_bytes() -> int:
    """``COLLSCHED_INLINE_BYTES`` (a size such as ``256KiB``; 0: every collective goes to the worker thread)."""
    text = os.environ.get(ENV_INLINE, "").strip()
    if not text:
        return INLINE_BYTES
    try:
        value = units.parse_size(text, ENV_INLINE)
    except UsageError as e:
        raise ValueError(str(e)) from None
    return int(value)


@dataclass(frozen=True)
class _Prepared:
    plan: RankPlan
    compiled: native.NativePlan


class Core:
    """The Python side of one C++ backend: plans on a signature miss, the Python bodies, errors.

    The plans of prepared signatures are kept by index (``Spec.index``) for as long as C++ holds their Spec:
    C++ keeps at most ``signature_cache()`` signatures (``SIGNATURE_CACHE``, the one bound of both sides), and
    when it empties its cache it tells ``forget`` which indices no call holds any more (at its next miss).
    """

    def __init__(self, group: Any) -> None:
        self.group = group
        self._prepared: dict[int, _Prepared] = {}
        self._next = 0

    def forget(self, indices: Sequence[int]) -> None:
        """Drop the plans of Specs C++ evicted and no longer holds (called from C++ at a miss)."""
        for index in indices:
            self._prepared.pop(int(index), None)

    def prepared_count(self) -> int:
        """How many prepared signatures' plans this side holds (at most the bound, plus any a queued call holds)."""
        return len(self._prepared)

    # ------------------------------------------------------------------ a signature miss (called from C++)

    def prepare(self, kind_index: int, numel_in: int, numel_out: int, dtype: torch.dtype | None, op: int,
                root: int, seconds: float) -> Any:
        """The first call of a signature, on the worker in issue order: the policy's choice, the schedule's plan
        and the argument check (``runners.execution.runner.prepare``: local, then every rank's row exchanged),
        each once; the answer is backend.h's ``Spec`` (the plan, its buffer layout, the check of this call and of
        later ones), and C++ runs this call and every later one of the signature natively.

        Raises what ``runners.execution.runner.run`` raises for bad arguments, on every rank. None where the
        Python body serves the signature instead: the direct fallback (``p2p``), the Python executor.
        """
        g = self.group
        if native.chosen() != "native":
            return None
        kind = KINDS[kind_index]
        p, rank = g.size(), g.rank()
        esize = torch.empty(0, dtype=dtype).element_size() if dtype is not None else 1
        nbytes = {Kind.ALLGATHER: numel_out, Kind.BARRIER: 0}.get(kind, numel_in) * esize
        choice = g._choose(kind, nbytes)
        if choice.algorithm == P2P:
            return None
        sched = schedule(kind, choice, p, root if kind in _ROOTED else None)
        tensor = torch.empty(numel_in, dtype=dtype) if kind is not Kind.BARRIER else None
        output = torch.empty(numel_out, dtype=dtype) if numel_out >= 0 else None
        prepared = runner.prepare(sched, tensor, output, op, g._inner["cpu"], rank=rank, p=p, seconds=seconds,
                                  check=g._check, engine="native")
        return self._spec(prepared, f"{kind}/{choice}", root, esize)

    def _spec(self, prepared: runner.Prepared, label: str, root: int, esize: int) -> Any:
        """``prepared`` as backend.h's ``Spec``: runners.execution.buffers' layout as numbers, every field named."""
        sched, plan, rank, n = prepared.schedule, prepared.plan, prepared.plan.rank, prepared.n
        coll = sched.collective
        kind, c, in_place = coll.kind, coll.chunks, coll.in_place
        s = -(-n // c)
        padded = s * c != n
        compiled = native.NativePlan(plan)
        index = self._next
        self._next += 1
        self._prepared[index] = _Prepared(plan, compiled)
        return native.load().Spec(
            plan=compiled.compiled, s=s, n=n, c=c,
            in_segs=segments(sched, rank, Buf.INPUT) if kind is not Kind.BARRIER else 0,
            in_copy=padded or (plan.writes_input and not in_place),
            in_initial=not (kind is Kind.BROADCAST and rank != root),
            out_segs=0 if in_place or kind is Kind.BARRIER else segments(sched, rank, Buf.OUTPUT),
            out_copy=padded, in_place=in_place,
            scratch=sched.scratch_chunks * s, budget_bytes=plan.budget_chunks * s * esize, op=prepared.op,
            dataflow=prepared.executor == "dataflow",
            divide=OP_NAMES[prepared.op] == "AVG" and kind in REDUCING and (kind is not Kind.REDUCE or rank == root),
            clone_input=kind is Kind.REDUCE and rank != root, barrier=kind is Kind.BARRIER,
            label=label, index=index,
            checked=bool(self.group._check), row=prepared.row, shift=salt_shift(sched),
            first_check=prepared.check)

    def native_failure(self, index: int, status: int, item: int, text: str, late: bool, seconds: float) -> None:
        """Raise what the Python executor raises for a failed native run (its words: runners.execution.executors)."""
        plan = self._prepared[index].plan
        g = self.group
        if status == native.MISMATCH:
            raise stalled(plan.schedule, parse_rows(text), g.size())
        if status == 3 or item < 0:
            raise RunError(f"rank {plan.rank}: {plan.schedule.name}: native executor: {text}")
        deadline = time.monotonic() if late else math.inf
        ctx = Context(plan, cast(Any, None), g._inner["cpu"], list(g._global_ranks), cast(Any, None), seconds,
                      deadline)
        if status == native.PEER_FAILED:
            raise ctx.abandoned(plan.items[item], text)
        error: BaseException = TimeoutError(text) if status == 2 else RuntimeError(text)
        raise ctx.failure(plan.items[item], error)

    # ------------------------------------------------------------------ the Python path (called from C++)

    def serve(self, method: str, args: tuple[Any, ...]) -> list[torch.Tensor]:
        """Run the Python backend's ``method`` now (its queue is inline) and return its output tensors."""
        work = getattr(self.group, method)(*args)
        work.wait()
        return _tensors(work.get_future().value())

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int) -> Any:
        return self.group.send(tensors, dst, tag)

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int) -> Any:
        return self.group.recv(tensors, src, tag)

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int) -> Any:
        return self.group.recv_anysource(tensors, tag)

    def monitored_barrier(self, timeout: Any, wait_all_ranks: bool) -> None:
        self.group.monitored_barrier(timeout, wait_all_ranks)

    def shutdown(self) -> None:
        self.group.shutdown()


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, Sequence):
        return [t for v in value for t in _tensors(v)]
    return []


def wrap(group: Any) -> Any:
    """The C++ backend around ``group`` (a ``CollschedProcessGroup`` made with ``inline=True``)."""
    module = native.load()
    counts = module.Counts()
    group._native_counts = counts
    core = Core(group)
    inner = group._inner["cpu"]
    return module.make_backend(group.rank(), group.size(), core, inner, group._timeout.total_seconds(), counts, True,
                               native.group_store(inner), stall_seconds(), inline_bytes(), signature_cache())


def group_of(pg: Any = None) -> Any:
    """The Python ``CollschedProcessGroup`` behind ``pg`` (default: the world), under either backend; None if
    ``pg`` is not a collsched group."""
    pg = dist.group.WORLD if pg is None else pg
    if hasattr(pg, "executed"):
        return pg
    module = native.load()
    if module is None or not isinstance(pg, dist.ProcessGroup):
        return None
    for device in ("cpu", "cuda"):
        try:
            backend = pg._get_backend(torch.device(device))
        except (RuntimeError, ValueError):
            continue
        core = module.core_of(backend)
        if core is not None:
            return core.group
    return None
