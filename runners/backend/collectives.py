"""The collectives of ``runners.backend.group.CollschedProcessGroup``: torch's calling conventions, translated.

``Collectives`` (a mixin of the process group) holds one method per torch
collective (``allreduce`` ... ``all_to_all_single``, their coalesced and
``_base`` forms): each is a job body behind the shared prologue
(``collective``: default options, pass-through to another backend, op and
root checks, the inner group, queueing) that checks torch's arguments, turns
its tensors into the contiguous 1-D buffers of ``runners.execution.runner.run`` and
back, and falls back to ``runners.backend.direct`` for shapes no schedule covers
(uneven pieces). The group itself (``runners.backend.group``) provides the
dispatch these bodies call: ``_execute`` (the policy's schedule or the direct
fallback), ``_mode``, ``_group`` and ``_submit``.
"""

from __future__ import annotations

import collections
import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as _c10d

from algorithms.ir import Kind
from runners.backend import alltoallv, direct
from runners.backend.policy import P2P
from runners.backend.work import Job

if TYPE_CHECKING:
    from runners.backend.work import CollschedWork

__all__ = ["Body", "Call", "Collectives", "check_same_dtype", "collective", "device_type_of", "flat_view",
           "nbytes_of", "op_of", "timeout_of", "write_back"]

_R = dist.ReduceOp
_OPS = frozenset({_R.SUM, _R.PRODUCT, _R.MIN, _R.MAX, _R.AVG, _R.BAND, _R.BOR, _R.BXOR})


def op_of(opts: Any) -> dist.ReduceOp.RedOpType:
    op = opts.reduceOp
    return op.op if hasattr(op, "op") else op


def timeout_of(opts: Any) -> timedelta | None:
    """A per-call timeout from a torch options object, or None where it is unset (torch's -1 ms)."""
    timeout = getattr(opts, "timeout", None)
    if isinstance(timeout, timedelta) and timeout > timedelta(0):
        return timeout
    return None


def nbytes_of(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def flat_view(t: torch.Tensor) -> torch.Tensor:
    """A contiguous 1-D view of ``t`` (a copy when ``t`` is not contiguous; the caller copies back)."""
    return t.reshape(-1) if t.is_contiguous() else t.contiguous().reshape(-1)


def write_back(dst: torch.Tensor, flat: torch.Tensor) -> None:
    if flat.data_ptr() != dst.data_ptr() or not dst.is_contiguous():
        dst.copy_(flat.view(dst.shape))


def check_same_dtype(tensors: Sequence[torch.Tensor], what: str) -> None:
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) > 1:
        raise ValueError(f"collsched {what}: tensors must share one dtype, got {sorted(map(str, dtypes))}")


def device_type_of(tensors: Sequence[torch.Tensor], what: str) -> str:
    types = {t.device.type for t in tensors}
    if len(types) != 1:
        raise ValueError(f"collsched {what}: tensors must be on one device type, got {sorted(types)}")
    return types.pop()


@dataclass(frozen=True)
class Call:
    """What the shared prologue hands a collective's body: the options, the inner group, the op and the root."""

    opts: Any
    group: dist.ProcessGroup
    op: Any = _R.SUM
    root: int = 0


Body = Callable[..., Job]


def collective(
    what: str,
    options: Callable[[], Any],
    tensors: Callable[..., Sequence[torch.Tensor]],
    *,
    reduces: bool = False,
    rooted: bool = False,
) -> Callable[[Body], Callable[..., dist.Work]]:
    """The prologue every collective of ``CollschedProcessGroup`` shares, around a body that returns its job.

    The method keeps torch's signature: the body's arguments after ``call``, then ``opts=None``. The prologue
    fills torch's default options (``options()``), passes the call straight to the inner group's method of the
    same name when the backend string maps the device of ``tensors(*args)`` to another backend, checks the
    reduce op (``reduces``) and ``opts.rootRank`` (``rooted``), finds the inner group, lets the body check its
    own arguments and build its job, and queues the job behind every earlier collective (``_submit``).
    """

    def wrap(body: Body) -> Callable[..., dist.Work]:
        signature = inspect.signature(body)
        params = list(signature.parameters.values())
        names = [p.name for p in params[2:]]  # after self and call

        @functools.wraps(body)
        def method(self: Collectives, *args: Any, **kwargs: Any) -> dist.Work:
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
            device = device_type_of(given, what)
            if self._mode(device) != "schedule":
                return getattr(self._group(device), body.__name__)(*values, opts)
            op = op_of(opts) if reduces else _R.SUM
            if reduces:
                self._check_op(op, what)
            root = self._check_root(opts.rootRank, what) if rooted else 0
            call = Call(opts, self._group(device), op, root)
            return self._submit(what, given, body(self, call, *values), opts)

        opts_param = inspect.Parameter("opts", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)
        method.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[params[0], *params[2:], opts_param], return_annotation="dist.Work"
        )
        return method

    return wrap


class Collectives:
    """The torch collectives of ``CollschedProcessGroup`` and their argument checks (a mixin: the group
    provides ``rank``, ``size``, ``executed`` and the dispatch methods declared below)."""

    executed: collections.Counter[str]

    if TYPE_CHECKING:
        def rank(self) -> int: ...

        def size(self) -> int: ...

        def _mode(self, device: str) -> str: ...

        def _group(self, device: str) -> dist.ProcessGroup: ...

        def _submit(self, what: str, tensors: Sequence[torch.Tensor], job: Job, opts: Any = None,
                    ) -> CollschedWork: ...

        def _execute(self, kind: Kind, group: dist.ProcessGroup, tensor: torch.Tensor | None,
                     output: torch.Tensor | None = None, *, nbytes: int, op: dist.ReduceOp.RedOpType = _R.SUM,
                     root: int | None = None, matrix: Any = None) -> None: ...

        def _choose(self, kind: Kind, nbytes: int) -> Any: ...

    # ------------------------------------------------------------------ all-reduce

    @collective("allreduce", _c10d.AllreduceOptions, lambda tensors: tensors, reduces=True)
    def allreduce(self, call: Call, tensors: list[torch.Tensor]) -> Job:
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
        flat = flat_view(t)
        self._execute(Kind.ALLREDUCE, group, flat, op=op, nbytes=nbytes_of(flat))
        write_back(t, flat)

    @collective("allreduce_coalesced", _c10d.AllreduceCoalescedOptions, lambda tensors: tensors, reduces=True)
    def allreduce_coalesced(self, call: Call, tensors: list[torch.Tensor]) -> Job:
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

    @collective("broadcast", _c10d.BroadcastOptions, lambda tensors: tensors, rooted=True)
    def broadcast(self, call: Call, tensors: list[torch.Tensor]) -> Job:
        """``dist.broadcast``: the broadcast schedule rooted at ``opts.rootRank``."""

        def job() -> list[torch.Tensor]:
            for t in tensors:
                flat = flat_view(t)
                self._execute(Kind.BROADCAST, call.group, flat, root=call.root, nbytes=nbytes_of(flat))
                write_back(t, flat)
            return tensors

        return job

    @collective("reduce", _c10d.ReduceOptions, lambda tensors: tensors, reduces=True, rooted=True)
    def reduce(self, call: Call, tensors: list[torch.Tensor]) -> Job:
        """``dist.reduce``: the reduce schedule to ``opts.rootRank`` (direct if none is registered)."""
        root = call.root

        def job() -> list[torch.Tensor]:
            for t in tensors:
                flat = flat_view(t)
                # The schedule may leave partial sums in non-root buffers; torch
                # promises nothing there, but we keep the caller's data intact.
                work = flat if self.rank() == root else flat.clone()
                self._execute(Kind.REDUCE, call.group, work, op=call.op, root=root, nbytes=nbytes_of(work))
                if self.rank() == root:
                    write_back(t, flat)
            return tensors

        return job

    # ------------------------------------------------------------------ all-gather

    @collective("allgather", _c10d.AllgatherOptions, lambda outs, ins: ins)
    def allgather(
        self, call: Call, output_tensors: list[list[torch.Tensor]], input_tensors: list[torch.Tensor]
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
        check_same_dtype([*outs, t], "allgather")
        if any(o.numel() != t.numel() for o in outs):
            flats = [flat_view(o) for o in outs]
            self.executed[f"{Kind.ALLGATHER}/{P2P}"] += 1
            direct.allgather(group, flats, flat_view(t))
            for o, f in zip(outs, flats, strict=True):
                write_back(o, f)
            return
        out = torch.empty(self.size() * t.numel(), dtype=t.dtype, device=t.device)
        self._execute(Kind.ALLGATHER, group, flat_view(t), out, nbytes=nbytes_of(out))
        for o, piece in zip(outs, out.chunk(self.size()), strict=True):
            o.copy_(piece.view(o.shape))

    @collective("all_gather_into_tensor", _c10d.AllgatherOptions, lambda output, input: [output, input])
    def all_gather_single(self, call: Call, output: torch.Tensor, input: torch.Tensor) -> Job:
        """``dist.all_gather_into_tensor``: the allgather schedule from ``input`` into ``output``."""
        self._check_gather_sizes(output, input, "all_gather_into_tensor")

        def job() -> list[torch.Tensor]:
            self._gather_into(call.group, output, input)
            return [output]

        return job

    _allgather_base = all_gather_single

    def _gather_into(self, group: dist.ProcessGroup, output: torch.Tensor, input: torch.Tensor) -> None:
        out = flat_view(output)
        self._execute(Kind.ALLGATHER, group, flat_view(input), out, nbytes=nbytes_of(out))
        write_back(output, out)

    @collective("allgather_coalesced", _c10d.AllgatherOptions, lambda output_lists, input_list: input_list)
    def allgather_coalesced(
        self, call: Call, output_lists: list[list[torch.Tensor]], input_list: list[torch.Tensor]
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

    @collective("all_gather_into_tensor_coalesced", _c10d.AllgatherOptions, lambda outs, ins: [*outs, *ins])
    def all_gather_single_coalesced(self, call: Call, outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> Job:
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

    @collective("reduce_scatter", _c10d.ReduceScatterOptions, lambda outs, ins: outs, reduces=True)
    def reduce_scatter(
        self, call: Call, output_tensors: list[torch.Tensor], input_tensors: list[list[torch.Tensor]]
    ) -> Job:
        """``dist.reduce_scatter``: the reducescatter schedule, or direct exchange for uneven pieces."""
        for ins in input_tensors:
            self._check_count(ins, "reduce_scatter input list")
        group, op = call.group, call.op

        def job() -> list[torch.Tensor]:
            for out, ins in zip(output_tensors, input_tensors, strict=True):
                check_same_dtype([out, *ins], "reduce_scatter")
                if any(i.numel() != out.numel() for i in ins):
                    flat = flat_view(out)
                    self.executed[f"{Kind.REDUCESCATTER}/{P2P}"] += 1
                    direct.reduce_scatter(group, flat, [flat_view(i) for i in ins], op)
                    write_back(out, flat)
                    continue
                src = torch.cat([i.reshape(-1) for i in ins])
                flat = flat_view(out)
                self._execute(Kind.REDUCESCATTER, group, src, flat, op=op, nbytes=nbytes_of(src))
                write_back(out, flat)
            return output_tensors

        return job

    @collective("reduce_scatter_tensor", _c10d.ReduceScatterOptions, lambda output, input: [output, input],
                 reduces=True)
    def reduce_scatter_single(self, call: Call, output: torch.Tensor, input: torch.Tensor) -> Job:
        """``dist.reduce_scatter_tensor``: the reducescatter schedule from ``input`` into ``output``."""
        self._check_gather_sizes(input, output, "reduce_scatter_tensor")

        def job() -> list[torch.Tensor]:
            self._scatter_from(call.group, output, input, call.op)
            return [output]

        return job

    _reduce_scatter_base = reduce_scatter_single

    def _scatter_from(self, group: dist.ProcessGroup, output: torch.Tensor, input: torch.Tensor, op: Any) -> None:
        out = flat_view(output)
        self._execute(Kind.REDUCESCATTER, group, flat_view(input), out, op=op, nbytes=nbytes_of(input))
        write_back(output, out)

    @collective("reduce_scatter_tensor_coalesced", _c10d.ReduceScatterOptions, lambda outs, ins: [*outs, *ins],
                 reduces=True)
    def reduce_scatter_single_coalesced(
        self, call: Call, outputs: list[torch.Tensor], inputs: list[torch.Tensor]
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

    @collective("gather", _c10d.GatherOptions, lambda outs, ins: ins, rooted=True)
    def gather(
        self, call: Call, output_tensors: list[list[torch.Tensor]], input_tensors: list[torch.Tensor]
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
            self._execute(Kind.GATHER, call.group, flat_view(t), out, root=root, nbytes=nbytes_of(t) * self.size())
            for o, piece in zip(outs or [], out.chunk(self.size()) if out is not None else [], strict=True):
                o.copy_(piece.view(o.shape))
            return output_tensors

        return job

    @collective("scatter", _c10d.ScatterOptions, lambda outs, ins: outs, rooted=True)
    def scatter(
        self, call: Call, output_tensors: list[torch.Tensor], input_tensors: list[list[torch.Tensor]]
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
            flat = flat_view(t)
            src = torch.cat([i.reshape(-1) for i in ins]) if ins is not None else None
            self._execute(Kind.SCATTER, call.group, src, flat, root=root, nbytes=nbytes_of(t) * self.size())
            write_back(t, flat)
            return output_tensors

        return job

    # ------------------------------------------------------------------ all-to-all

    @collective("all_to_all", _c10d.AllToAllOptions, lambda outs, ins: [*outs, *ins])
    def alltoall(self, call: Call, output_tensors: list[torch.Tensor], input_tensors: list[torch.Tensor]) -> Job:
        """``dist.all_to_all``: the alltoall schedule, or direct exchange for uneven pieces."""
        self._check_count(output_tensors, "all_to_all output list")
        self._check_count(input_tensors, "all_to_all input list")

        def job() -> list[torch.Tensor]:
            self._alltoall_pieces(call.group, output_tensors, input_tensors)
            return output_tensors

        return job

    def _alltoall_pieces(
        self, group: dist.ProcessGroup, outs: Sequence[torch.Tensor], ins: Sequence[torch.Tensor],
        *, even: bool = False,
    ) -> None:
        """``outs[s]`` := rank s's ``ins[me]``: the alltoall schedule when every piece of every rank has one
        size (``even``: known without asking), else the alltoallv schedule of the ranks' split sizes."""
        check_same_dtype([*outs, *ins], "all_to_all")
        n = ins[0].numel()
        table = None
        if not even:
            # Every rank's pieces: each knows only its own, and all must pick the same schedule.
            table = alltoallv.split_table(group, [t.numel() for t in ins], [t.numel() for t in outs],
                                          ins[0].device, ins[0].dtype)
            even = all(v == n for row in table for v in row)
        if table is not None and not even:
            self._alltoallv_pieces(group, outs, ins, table)
            return
        if all(t.numel() == n for t in (*outs, *ins)):
            src = torch.cat([t.reshape(-1) for t in ins])
            dst = torch.empty_like(src)
            self._execute(Kind.ALLTOALL, group, src, dst, nbytes=nbytes_of(src))
            for o, piece in zip(outs, dst.chunk(self.size()), strict=True):
                o.copy_(piece.view(o.shape))
            return
        flats = [flat_view(o) for o in outs]
        self.executed[f"{Kind.ALLTOALL}/{P2P}"] += 1
        direct.alltoall(group, flats, [flat_view(i) for i in ins])
        for o, f in zip(outs, flats, strict=True):
            write_back(o, f)

    def _alltoallv_pieces(self, group: dist.ProcessGroup, outs: Sequence[torch.Tensor],
                          ins: Sequence[torch.Tensor], table: list[list[int]]) -> None:
        """The policy's alltoallv schedule for the ranks' split sizes ``table`` (elements), or direct exchange."""
        _unit, matrix = alltoallv.unit_matrix(table)  # the runner finds the unit again from the tensors' sizes
        p = self.size()
        nbytes = sum(map(sum, table)) * ins[0].element_size() // p  # the mean rank's input, as the simulator
        if self._choose(Kind.ALLTOALLV, nbytes).algorithm == P2P:
            flats = [flat_view(o) for o in outs]
            self.executed[f"{Kind.ALLTOALLV}/{P2P}"] += 1
            direct.alltoall(group, flats, [flat_view(i) for i in ins])
            for o, f in zip(outs, flats, strict=True):
                write_back(o, f)
            return
        src = torch.cat([t.reshape(-1) for t in ins])
        dst = torch.empty(sum(t.numel() for t in outs), dtype=src.dtype, device=src.device)
        self._execute(Kind.ALLTOALLV, group, src, dst, nbytes=nbytes, matrix=matrix)
        for o, piece in zip(outs, dst.split([t.numel() for t in outs]), strict=True):
            o.copy_(piece.view(o.shape))

    @collective("all_to_all_single", _c10d.AllToAllOptions, lambda output, input, outs, ins: [output, input])
    def all_to_all_single(
        self,
        call: Call,
        output: torch.Tensor,
        input: torch.Tensor,
        output_split_sizes: list[int],
        input_split_sizes: list[int],
    ) -> Job:
        """``dist.all_to_all_single``: the alltoall schedule for even splits, direct exchange otherwise."""
        outs = self._split_rows(output, list(output_split_sizes), "output")
        ins = self._split_rows(input, list(input_split_sizes), "input")
        even = not output_split_sizes and not input_split_sizes  # torch's even split, the same on every rank

        def job() -> list[torch.Tensor]:
            self._alltoall_pieces(call.group, outs, ins, even=even)
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
