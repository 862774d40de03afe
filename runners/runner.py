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
| barrier | None | - | ``barrier`` |

Chunks. Every buffer is an array of the schedule's chunks of ``S = ceil(N/C)``
elements, and segment s of a p·N tensor holds chunks ``s·C .. s·C+C-1``, so the
layout of wide buffers is that of the per-rank ones. When C divides N the
runner works in the caller's tensors directly; otherwise it works in padded
copies (the last chunks hold fewer real elements, possibly none) and copies
the result back. An out-of-place kind never writes the caller's input: when
its schedule writes the input buffer, the runner works on a copy.

Execution (gloo): a dataflow engine, see runners.plan. Sends and receives are
posted with ``isend``/``irecv`` as their dependencies complete, each transfer
on its own tag (gloo matches tags exactly), staged receives are posted ahead in
program order, and the runner blocks on the earliest outstanding operation,
then takes every other completed one. Execution (nccl): operations are issued
step by step in program order, every dependency expressed as a stream wait
(``Work.wait`` makes the current stream wait), so the host never blocks and
each pair of ranks posts its messages in the same order (nccl ignores tags).
The host returns once everything is enqueued on the current stream (a
barrier synchronises it); ``timeout`` is then NCCL's watchdog's business
(the process group's timeout), not the runner's.

Memory. Beyond the caller's tensors, one run allocates at most:
scratch ``scratch_chunks·S``; staging for receives ``budget_chunks·S`` (at most
twice the most chunks this rank stages in one step; for ring all-reduce
``2·N/p``); snapshots of local transfers that a same-step write would
clobber; a copy of the input when an out-of-place schedule writes it; and,
when C does not divide N, padded copies of the input and output. All of it is
released when ``run`` returns, except the staging buffer: one per device, as
large as the largest staging bound seen, kept between runs and carved into
each run's staged receives (fresh large buffers cost a page fault per page;
``release_memory()`` frees it). A receive that finds it fragmented, or a run
that finds it lent to another thread's run, gets fresh memory instead, so
staging never exceeds that buffer plus ``budget_chunks·S``. On nccl staging is not budgeted:
a step's staged receives are allocated when the step is issued and freed
after its applies (the caching allocator reuses them).

Validation happens before any data moves. Checks that need only the
arguments run on every rank identically; then the ranks all-gather a few
integers of metadata (size, dtype, op, schedule checksum, local error) and
every rank runs the same check over the table, so a bad argument on one rank
raises the same ``InputError`` on every rank and nothing hangs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from heapq import heappush
from typing import Any

import torch
import torch.distributed as dist

from algorithms.errors import CollschedError
from algorithms.ir import Buf, Kind, Op, Schedule
from runners.plan import Item, RankPlan, Role, rank_plan

__all__ = ["SUPPORTED_DTYPES", "InputError", "RunError", "RunTimeout", "release_memory", "run", "staging_bytes"]

ReduceOp = dist.ReduceOp


class RunError(CollschedError, RuntimeError):
    """A run failed while moving data; the message names the rank, step, transfer and peer."""


class RunTimeout(RunError, TimeoutError):
    """A run did not finish within its timeout; the message names the step and the peer waited on."""


class InputError(CollschedError, ValueError):
    """The arguments of a run are invalid; raised on every rank of the group with the same message."""


# What torch's gloo collectives accept (measured on torch 2.13: int16, uint16,
# uint32 and the float8 types are rejected with "Invalid scalar type").
SUPPORTED_DTYPES: tuple[torch.dtype, ...] = (
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
    torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128,
)
# Dtypes we can name in a message about another rank, in a fixed order (index = code).
_NAMED_DTYPES: tuple[torch.dtype, ...] = (*SUPPORTED_DTYPES, torch.int16, torch.uint16, torch.uint32,
                                          torch.uint64, torch.float8_e4m3fn, torch.float8_e5m2)
_OPS: tuple[Any, ...] = (ReduceOp.SUM, ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.MAX, ReduceOp.AVG,
                         ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR)
_OP_NAMES = ("SUM", "PRODUCT", "MIN", "MAX", "AVG", "BAND", "BOR", "BXOR")
_REDUCING = frozenset({Kind.ALLREDUCE, Kind.REDUCE, Kind.REDUCESCATTER})

# Local error codes carried in the metadata exchange.
_OK, _NO_TENSOR, _NOT_CONTIGUOUS, _BAD_DTYPE, _BAD_OP, _BAD_DEVICE, _BAD_SIZE, _DTYPE_MISMATCH = range(8)


def _op_index(op: object) -> int:
    for i, o in enumerate(_OPS):
        try:
            if op == o:
                return i
        except TypeError:  # a premul-sum ReduceOp compares with nothing
            break
    return -1


def _dtype_index(dtype: torch.dtype) -> int:
    return _NAMED_DTYPES.index(dtype) if dtype in _NAMED_DTYPES else -1


def _dtype_name(code: int) -> str:
    return str(_NAMED_DTYPES[code]) if 0 <= code < len(_NAMED_DTYPES) else "an unsupported dtype"


def _op_error(dtype: torch.dtype, op: int, kind: Kind) -> int:
    """The error code for using op ``op`` on ``dtype``, matching torch gloo's rules (0 when allowed)."""
    if op < 0:
        return _BAD_OP
    if kind not in _REDUCING:
        return _OK
    name = _OP_NAMES[op]
    if dtype.is_complex and name not in ("SUM", "AVG"):
        return _BAD_OP
    if name in ("BAND", "BOR", "BXOR") and (dtype.is_floating_point or dtype.is_complex):
        return _BAD_OP
    if name == "AVG" and not (dtype.is_floating_point or dtype.is_complex):
        return _BAD_OP
    return _OK


# ---------------------------------------------------------------------------- sizes


def _segments(schedule: Schedule, rank: int, buf: Buf) -> int:
    """How many N-element segments ``rank``'s ``buf`` holds (0, 1 or p)."""
    return schedule.buffer_chunks(rank, buf) // schedule.collective.chunks


def _per_rank_count(schedule: Schedule, rank: int, tensor: torch.Tensor | None,
                    output: torch.Tensor | None) -> tuple[int, int]:
    """(error code, N): the per-rank element count implied by this rank's tensors."""
    kind = schedule.collective.kind
    if kind is Kind.BARRIER:
        return _OK, 1
    n_in = _segments(schedule, rank, Buf.INPUT)
    n_out = 0 if schedule.collective.in_place else _segments(schedule, rank, Buf.OUTPUT)
    counts = []
    for t, segs in ((tensor, n_in), (output, n_out)):
        if segs == 0:
            continue
        if t is None:
            return _NO_TENSOR, 0
        if t.numel() % segs:
            return _BAD_SIZE, 0
        counts.append(t.numel() // segs)
    if len(counts) == 2 and counts[0] != counts[1]:
        return _BAD_SIZE, 0
    return _OK, counts[0]


def _expected_numel(schedule: Schedule, rank: int, n: int) -> tuple[int, int]:
    """(input, output) element counts of ``rank`` for per-rank count ``n`` (output 0 for in-place kinds)."""
    n_out = 0 if schedule.collective.in_place else _segments(schedule, rank, Buf.OUTPUT) * n
    return _segments(schedule, rank, Buf.INPUT) * n, n_out


# ---------------------------------------------------------------------------- validation


def _devices_of(group: Any) -> set[str]:
    backend = str(dist.get_backend(group))
    if ":" not in backend:
        return {"cuda"} if backend == "nccl" else {"cpu"} if backend == "gloo" else {"cpu", "cuda"}
    return {part.split(":")[0] for part in backend.split(",")}


def _meta_device(group: Any) -> torch.device:
    devices = _devices_of(group)
    if devices == {"cuda"}:
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _local_check(schedule: Schedule, rank: int, tensor: Any, output: Any, op: int,
                 devices: set[str]) -> tuple[int, int, int]:
    """(error code, detail, N) from this rank's arguments alone."""
    kind = schedule.collective.kind
    if kind is Kind.BARRIER:
        return _OK, 0, 1
    seen: list[torch.Tensor] = []
    for which, t, segs in ((0, tensor, _segments(schedule, rank, Buf.INPUT)),
                           (1, output, 0 if schedule.collective.in_place else
                            _segments(schedule, rank, Buf.OUTPUT))):
        if segs == 0:
            continue
        if not isinstance(t, torch.Tensor):
            return _NO_TENSOR, which, 0
        if not t.is_contiguous():
            return _NOT_CONTIGUOUS, which, 0
        if t.device.type not in devices:
            return _BAD_DEVICE, which, 0
        if t.dtype not in SUPPORTED_DTYPES:
            return _BAD_DTYPE, which, 0
        seen.append(t)
    if len(seen) == 2 and seen[0].dtype != seen[1].dtype:
        return _DTYPE_MISMATCH, 0, 0
    if seen and seen[0].device.type == "cuda" and seen[0].device.index != torch.cuda.current_device():
        return _BAD_DEVICE, 0, 0
    code = _op_error(seen[0].dtype, op, kind)
    if code:
        return code, 0, 0
    code, n = _per_rank_count(schedule, rank, tensor, output)
    return code, 0, n


def _metadata(schedule: Schedule, plan: RankPlan, tensor: Any, output: Any, op: int, code: int, detail: int,
              n: int) -> list[int]:
    t = tensor if isinstance(tensor, torch.Tensor) else output if isinstance(output, torch.Tensor) else None
    numel_in = tensor.numel() if isinstance(tensor, torch.Tensor) else -1
    numel_out = output.numel() if isinstance(output, torch.Tensor) else -1
    dtype = _dtype_index(t.dtype) if t is not None else -1
    kind = list(Kind).index(schedule.collective.kind)
    root = -1 if schedule.collective.root is None else schedule.collective.root
    return [code, detail, n, numel_in, numel_out, dtype, op, plan.fingerprint, kind, schedule.ranks,
            schedule.collective.chunks, root]


def _describe_error(schedule: Schedule, rank: int, row: list[int]) -> str:
    code, detail, _n, numel_in, numel_out, dtype, op = row[:7]
    which = ("tensor", "output")[detail] if code in (_NO_TENSOR, _NOT_CONTIGUOUS, _BAD_DEVICE, _BAD_DTYPE) else ""
    kind = schedule.collective.kind
    if code == _NO_TENSOR:
        return f"rank {rank}: {which} must be a tensor for {kind}"
    if code == _NOT_CONTIGUOUS:
        return f"rank {rank}: {which} must be contiguous (torch's collectives require it too)"
    if code == _BAD_DEVICE:
        return f"rank {rank}: {which} is on a device the group's backend does not serve (gloo: cpu, nccl: cuda " \
               f"device of LOCAL_RANK = torch.cuda.current_device())"
    if code == _BAD_DTYPE:
        names = ", ".join(str(d).removeprefix("torch.") for d in SUPPORTED_DTYPES)
        return f"rank {rank}: {which} has dtype {_dtype_name(dtype)}, which torch's collectives do not " \
               f"support (supported: {names})"
    if code == _DTYPE_MISMATCH:
        return f"rank {rank}: tensor and output have different dtypes"
    if code == _BAD_OP:
        name = _OP_NAMES[op] if 0 <= op < len(_OP_NAMES) else "this ReduceOp"
        return f"rank {rank}: {kind} cannot use ReduceOp.{name} with dtype {_dtype_name(dtype)} " \
               "(torch's rules: complex only SUM/AVG; BAND/BOR/BXOR integers only; AVG floating point only; " \
               "no premul-sum)"
    if code == _BAD_SIZE:
        return f"rank {rank}: sizes do not fit {kind} on {schedule.ranks} ranks: tensor has {numel_in} " \
               f"elements, output {numel_out} (need {_shape_rule(kind)})"
    return f"rank {rank}: invalid input (code {code})"


def _shape_rule(kind: Kind) -> str:
    return {
        Kind.ALLGATHER: "output = p·tensor",
        Kind.GATHER: "root's output = p·tensor",
        Kind.REDUCESCATTER: "tensor = p·output",
        Kind.SCATTER: "root's tensor = p·output",
        Kind.ALLTOALL: "tensor = output, a multiple of p",
    }.get(kind, "any size")


def _check_table(schedule: Schedule, table: list[list[int]]) -> None:
    """Raise the same InputError on every rank when any rank's metadata is bad or inconsistent."""
    what = f"run({schedule.name} {schedule.collective.describe()})"
    fingerprints = {row[7] for row in table}
    if len(fingerprints) > 1:
        # Each rank names its own schedule here, so say everything from the table alone.
        kinds = list(Kind)
        detail = ", ".join(f"rank {r}: {kinds[row[8]]} p={row[9]} C={row[10]}"
                           f"{'' if row[11] < 0 else f' root={row[11]}'} #{row[7]:08x}" for r, row in enumerate(table))
        raise InputError(f"run: ranks disagree on the schedule ({detail})")
    bad = [_describe_error(schedule, r, row) for r, row in enumerate(table) if row[0] != _OK]
    if bad:
        raise InputError(f"{what}: invalid input: " + "; ".join(bad))
    for field, name in ((6, "op"), (5, "dtype"), (2, "per-rank element count")):
        values = [row[field] for row in table]
        if len(set(values)) > 1:
            if field == 6:
                shown = [_OP_NAMES[v] if 0 <= v < len(_OP_NAMES) else str(v) for v in values]
            elif field == 5:
                shown = [_dtype_name(v).removeprefix("torch.") for v in values]
            else:
                shown = [str(v) for v in values]
            detail = ", ".join(f"rank {r}: {v}" for r, v in enumerate(shown))
            raise InputError(f"{what}: ranks disagree on the {name} ({detail})")
    if schedule.collective.kind is Kind.BARRIER:
        return
    n = table[0][2]
    for r, row in enumerate(table):
        want_in, want_out = _expected_numel(schedule, r, n)
        if (want_in and row[3] not in (want_in,)) or (want_out and row[4] != want_out):
            raise InputError(f"{what}: rank {r}: sizes do not fit: tensor has {row[3]} elements, "
                             f"output {row[4]}; with {n} elements per rank it needs {want_in} and {want_out}")


# Tags at and above this carry the runner's own messages; transfer tags (transfer ids) stay below.
_META_TAG = 1 << 30


def _check_own_row(schedule: Schedule, rank: int, row: list[int]) -> None:
    """Without the exchange: this rank's own arguments only (its peers cannot know)."""
    if row[0] != _OK:
        raise InputError(f"run({schedule.name} {schedule.collective.describe()}): invalid input: "
                         + _describe_error(schedule, rank, row))


def _exchange(row: list[int], group: Any, globals_: list[int], device: torch.device, rank: int, deadline: float,
              what: str) -> list[list[int]]:
    """Every rank's metadata row, by point-to-point messages so that a missing peer can be named.

    ``globals_[r]`` is the global rank of group rank r."""
    p = len(globals_)
    mine = torch.tensor(row, dtype=torch.int64, device=device)
    rows = torch.empty(p, len(row), dtype=torch.int64, device=device)
    rows[rank] = mine
    # Every rank posts its messages in one global order (message src -> dst, by src then dst), so
    # both ends of a pair post them in the same order: nccl matches by order and ignores tags.
    works: list[tuple[int, str, Any]] = []
    for src in range(p):
        if src == rank:
            works += [(dst, "send to", dist.isend(mine, globals_[dst], group=group, tag=_META_TAG))
                      for dst in range(p) if dst != rank]
        else:
            works.append((src, "receive from", dist.irecv(rows[src], globals_[src], group=group, tag=_META_TAG)))
    for r, verb, work in works:
        left = deadline - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError("timed out")
            work.wait(timedelta(seconds=left))
        except Exception as e:
            text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            head = (f"rank {rank} (global rank {globals_[rank]}): {what}: before step 0, exchanging metadata: "
                    f"{verb} peer rank {r} (global rank {globals_[r]})")
            if "timed out" in text.lower() or isinstance(e, TimeoutError):
                raise RunTimeout(f"{head} did not complete in time; is rank {r} running the same run()? "
                                 f"({text})") from e
            _report_failure(globals_[rank], f"exchanging metadata: {verb} peer rank {r} (global rank {globals_[r]}) "
                            f"failed ({text})")
            raise RunError(f"{head} failed ({_peer_report(globals_[r]) or text})") from e
    return rows.tolist()


def _store() -> Any:
    try:
        return dist.distributed_c10d._get_default_store()
    except Exception:
        return None


def _report_failure(me: int, text: str) -> None:
    """Leave a note in the group's store that this rank failed, for peers that fail because it exits."""
    store = _store()
    if store is not None:
        try:
            store.set(f"collsched/run-failed/{me}", text)
        except Exception:  # the store may be gone with the rank that hosted it
            pass


def _peer_report(peer: int) -> str | None:
    """The note of a peer that failed first, if it left one."""
    store = _store()
    key = f"collsched/run-failed/{peer}"
    try:
        if store is not None and store.check([key]):
            return f"rank {peer} had failed first: {store.get(key).decode(errors='replace')}"
    except Exception:
        pass
    return None


# ---------------------------------------------------------------------------- buffers and ops


def _sum(dst: torch.Tensor, src: torch.Tensor) -> None:
    dst.add_(src)


def _product(dst: torch.Tensor, src: torch.Tensor) -> None:
    dst.mul_(src)


def _min(dst: torch.Tensor, src: torch.Tensor) -> None:
    torch.minimum(dst, src, out=dst)


def _max(dst: torch.Tensor, src: torch.Tensor) -> None:
    torch.maximum(dst, src, out=dst)


def _band(dst: torch.Tensor, src: torch.Tensor) -> None:
    dst.bitwise_and_(src)


def _bor(dst: torch.Tensor, src: torch.Tensor) -> None:
    dst.bitwise_or_(src)


def _bxor(dst: torch.Tensor, src: torch.Tensor) -> None:
    dst.bitwise_xor_(src)


def _token(dst: torch.Tensor, src: torch.Tensor) -> None:
    """A barrier token carries no data: receiving it is the whole point."""


_COMBINE = {"SUM": _sum, "AVG": _sum, "PRODUCT": _product, "MIN": _min, "MAX": _max, "BAND": _band, "BOR": _bor,
            "BXOR": _bxor}


def _combine(op: int, kind: Kind) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """dst ⊕= src for this op, in place (the barrier's token union needs no arithmetic)."""
    if kind is Kind.BARRIER:
        return _token
    return _COMBINE[_OP_NAMES[op] if op >= 0 else "SUM"]


class _Buffers:
    """This rank's working buffers as flat tensors of chunks of S elements, and how to copy results back."""

    def __init__(self, schedule: Schedule, plan: RankPlan, tensor: torch.Tensor | None,
                 output: torch.Tensor | None, n: int, dtype: torch.dtype, device: torch.device) -> None:
        coll = schedule.collective
        rank = plan.rank
        self.c = c = coll.chunks
        self.s = s = -(-n // c)
        self.padded = s * c != n
        self.n = n
        self._copy_back: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.bufs: dict[Buf, torch.Tensor] = {}
        if coll.kind is Kind.BARRIER:
            self.bufs[Buf.INPUT] = torch.zeros(1, dtype=torch.uint8, device=device)
        else:
            segs = _segments(schedule, rank, Buf.INPUT)
            if segs:
                assert tensor is not None
                writable = coll.in_place
                initial = not (coll.kind is Kind.BROADCAST and rank != coll.root)
                copy = self.padded or (plan.writes_input and not coll.in_place)
                self.bufs[Buf.INPUT] = self._bind(tensor, segs, writable, copy, initial)
            if not coll.in_place:
                segs = _segments(schedule, rank, Buf.OUTPUT)
                if segs:
                    assert output is not None
                    self.bufs[Buf.OUTPUT] = self._bind(output, segs, True, self.padded, False)
            else:
                self.bufs[Buf.OUTPUT] = self.bufs.get(Buf.INPUT, torch.empty(0, dtype=dtype, device=device))
        if schedule.scratch_chunks:
            self.bufs[Buf.SCRATCH] = torch.empty(schedule.scratch_chunks * s, dtype=dtype, device=device)

    def _bind(self, user: torch.Tensor, segs: int, writable: bool, copy: bool, initial: bool) -> torch.Tensor:
        flat = user.view(-1)
        if not copy:
            return flat
        # Zeros, not empty: padding is reduced along with real data and must hold finite values.
        work = torch.zeros(segs * self.c * self.s, dtype=user.dtype, device=user.device)
        real = work.view(segs, -1)[:, :self.n]
        if initial:
            real.copy_(flat.view(segs, self.n))
        if writable:
            self._copy_back.append((flat.view(segs, self.n), real))
        return work

    def slot(self, buf: Buf, index: int, count: int) -> torch.Tensor:
        """The elements of chunks ``index .. index+count-1`` of ``buf``."""
        return self.bufs[buf][index * self.s:(index + count) * self.s]

    def finish(self) -> None:
        """Copy padded or private working buffers back into the caller's tensors."""
        for user, work in self._copy_back:
            user.copy_(work)


class _Arena:
    """Staging memory kept between runs: one byte buffer per device, lent to one run at a time.

    Fresh large buffers cost a page fault per page (malloc maps them and
    unmaps them when freed), and a training loop all-reduces buckets of a few
    sizes over and over; so the runner keeps one buffer per device, as large as
    the largest staging bound seen, and carves each run's staged receives out
    of it (``_Carver``). A run that finds the buffer lent (another thread's run,
    e.g. two groups of the collsched backend) gets private memory instead.
    ``release_memory()`` frees it.
    """

    def __init__(self) -> None:
        self.buffers: dict[torch.device, torch.Tensor] = {}
        self.lent: set[torch.device] = set()
        self.lock = threading.Lock()

    def borrow(self, nbytes: int, device: torch.device) -> tuple[torch.Tensor, bool]:
        """A byte buffer of at least ``nbytes``, and whether it is the shared one (give it back)."""
        with self.lock:
            if device in self.lent:
                return torch.empty(nbytes, dtype=torch.uint8, device=device), False
            buf = self.buffers.get(device)
            if buf is None or buf.numel() < nbytes:
                self.buffers.pop(device, None)  # free the old one before allocating the larger
                buf = self.buffers[device] = torch.empty(nbytes, dtype=torch.uint8, device=device)
            self.lent.add(device)
            return buf, True

    def give_back(self, device: torch.device, keep: bool = True) -> None:
        with self.lock:
            self.lent.discard(device)
            if not keep:
                self.buffers.pop(device, None)

    def clear(self) -> None:
        with self.lock:
            for device in list(self.buffers):
                if device not in self.lent:
                    del self.buffers[device]


_ARENA = _Arena()


class _Carver:
    """First-fit allocation of contiguous chunk slots from a run's staging buffer.

    The engine never has more than ``units`` chunks staged at once (the plan's
    budget), but slots are freed out of order, so a request can find the free
    space fragmented; it then gets fresh memory (correct, just not reused).
    """

    def __init__(self, buffer: torch.Tensor, unit: int, units: int, dtype: torch.dtype) -> None:
        self.buffer = buffer
        self.unit = unit  # bytes per chunk slot
        self.dtype = dtype
        self.free: list[list[int]] = [[0, units]] if units else []  # sorted [start, length] runs

    def take(self, count: int) -> tuple[torch.Tensor, int]:
        """A staging tensor of ``count`` chunks and its slot (-1: fresh memory, nothing to give back)."""
        for k, (start, length) in enumerate(self.free):
            if length >= count:
                if length == count:
                    del self.free[k]
                else:
                    self.free[k] = [start + count, length - count]
                view = self.buffer[start * self.unit:(start + count) * self.unit]
                return view.view(self.dtype), start
        return torch.empty(count * self.unit, dtype=torch.uint8, device=self.buffer.device).view(self.dtype), -1

    def give(self, start: int, count: int) -> None:
        if start < 0:
            return
        free = self.free
        k = 0
        while k < len(free) and free[k][0] < start:
            k += 1
        free.insert(k, [start, count])
        if k + 1 < len(free) and start + count == free[k + 1][0]:  # merge with the next run
            free[k][1] += free.pop(k + 1)[1]
        if k > 0 and free[k - 1][0] + free[k - 1][1] == start:  # and with the previous one
            free[k - 1][1] += free.pop(k)[1]


def release_memory() -> None:
    """Free the staging memory the runner keeps between runs."""
    _ARENA.clear()


def _bytes(t: torch.Tensor) -> torch.Tensor:
    # Messages travel as bytes: every dtype then moves the same way on every backend.
    return t.view(torch.uint8) if t.dtype is not torch.uint8 else t


class _Context:
    """What an engine needs besides the plan: buffers, peers, op, deadline and error reporting."""

    def __init__(self, plan: RankPlan, bufs: _Buffers, group: Any, globals_: list[int],
                 combine: Callable[[torch.Tensor, torch.Tensor], None], timeout: float, deadline: float) -> None:
        self.plan = plan
        self.bufs = bufs
        self.group = group
        self.globals = globals_  # global rank of each group rank
        self.combine = combine
        self.timeout = timeout
        self.deadline = deadline

    def src(self, it: Item) -> torch.Tensor:
        t = it.transfer
        return self.bufs.slot(t.src_buf, t.src_index, t.count)

    def dst(self, it: Item) -> torch.Tensor:
        t = it.transfer
        return self.bufs.slot(t.dst_buf, t.dst_index, t.count)

    def isend(self, it: Item) -> Any:
        try:
            return dist.isend(_bytes(self.src(it)), self.globals[it.peer], group=self.group, tag=it.tid)
        except Exception as e:  # posting to a pair whose peer is gone fails at once
            raise self.failure(it, e) from e

    def irecv(self, it: Item, into: torch.Tensor) -> Any:
        try:
            return dist.irecv(_bytes(into), self.globals[it.peer], group=self.group, tag=it.tid)
        except Exception as e:
            raise self.failure(it, e) from e

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
            return RunTimeout(f"{head} did not complete within {self.timeout:g} s; waiting on peer {peer} "
                              f"({text})")
        note = _peer_report(self.globals[it.peer])
        failure = f"{head} failed: peer {peer} ({note or text})"
        _report_failure(self.globals[plan.rank], f"{it.describe()}: {verb} peer {peer} failed ({text})")
        return RunError(failure)

    def wait(self, it: Item, work: Any) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise self.failure(it, TimeoutError("timed out"))
        try:
            work.wait(timedelta(seconds=left))
        except Exception as e:
            raise self.failure(it, e) from e


def _execute_host(ctx: _Context) -> None:
    """Dataflow execution with host-side completion (gloo): see the module docstrings."""
    ref = ctx.bufs.bufs[Buf.INPUT if Buf.INPUT in ctx.bufs.bufs else Buf.OUTPUT]
    budget = ctx.plan.budget_chunks
    unit = ctx.bufs.s * ref.element_size()
    arena, shared = _ARENA.borrow(budget * unit, ref.device)
    ok = False
    try:
        _run_host(ctx, _Carver(arena, unit, budget, ref.dtype))
        ok = True
    finally:
        if shared:
            # After a failure receives may still be posted into the buffer: it is not lent again.
            _ARENA.give_back(ref.device, keep=ok)


def _run_host(ctx: _Context, carver: _Carver) -> None:
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


def _execute_stream(ctx: _Context) -> None:
    """Stream-ordered execution (nccl): issue step by step in program order; waits are stream waits."""
    plan = ctx.plan
    items = plan.items
    works: dict[int, Any] = {}
    held: dict[int, torch.Tensor] = {}
    s = ctx.bufs.s
    ref = next(iter(ctx.bufs.bufs.values()))
    i = 0
    n = len(items)

    def after(i: int) -> None:
        # Stream-wait on every outstanding operation item i depends on (sends also for reads).
        for d in (*items[i].deps, *items[i].after):
            w = works.get(d)
            if w is not None:
                w.wait()

    while i < n:
        step = items[i].step
        j = i
        while j < n and items[j].step == step:
            j += 1
        # Starts: every read of the step happens before any write of the step.
        applies: list[int] = []
        for k in range(i, j):
            it = items[k]
            after_deps = it.deps
            for d in after_deps:
                w = works.get(d)
                if w is not None:
                    w.wait()
            if it.role is Role.SEND:
                works[k] = ctx.isend(it)
            elif it.role is Role.RECV:
                if it.staged:
                    held[k] = torch.empty(it.transfer.count * s, dtype=ref.dtype, device=ref.device)
                    works[k] = ctx.irecv(it, held[k])
                    applies.append(k)
                else:
                    works[k] = ctx.irecv(it, ctx.dst(it))
            elif it.staged:
                held[k] = ctx.src(it).clone()
                applies.append(k)
            else:
                ctx.local(it)
        for k in applies:
            after(k)
            w = works.pop(k, None)
            if w is not None:
                w.wait()
            ctx.apply(items[k], held.pop(k))
        i = j
    for w in works.values():
        w.wait()


# ---------------------------------------------------------------------------- run


def staging_bytes(schedule: Schedule, rank: int, n: int, dtype: torch.dtype) -> int:
    """The most bytes of staged receives rank ``rank`` holds at once for ``n`` elements per rank."""
    plan = rank_plan(schedule, rank)
    s = -(-n // schedule.collective.chunks)
    return plan.budget_chunks * s * torch.empty(0, dtype=dtype).element_size()


def _seconds(timeout: float | timedelta | None) -> float:
    if timeout is None:
        return dist.default_pg_timeout.total_seconds()
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    if not seconds > 0:
        raise InputError(f"timeout must be positive, got {timeout!r}")
    return seconds


def run(
    schedule: Schedule,
    tensor: torch.Tensor | None = None,
    output: torch.Tensor | None = None,
    op: Any = ReduceOp.SUM,
    group: Any = None,
    *,
    timeout: float | timedelta | None = None,
    check: bool = True,
) -> torch.Tensor | None:
    """Run ``schedule`` on ``group`` (default: the world); returns the result tensor of this rank.

    Semantics are those of torch's collective of the schedule's kind (see the
    module docstring for the tensor arguments): in-place kinds update
    ``tensor``; the others fill ``output``; the result on ranks that receive
    none (non-roots of reduce and gather) is unspecified, as in torch. ``op``
    is a ``ReduceOp`` (SUM, PRODUCT, MIN, MAX, AVG, BAND, BOR, BXOR with
    torch's dtype rules). Ranks of the schedule are ranks of ``group``.

    Raises ``InputError`` on every rank, before any data moves, for invalid
    arguments; ``RunError`` when a peer fails; ``RunTimeout`` when the run
    does not finish within ``timeout`` seconds (default: torch's default
    process-group timeout). Both name the step, the transfer and the peer.
    A process outside ``group`` returns None at once, as torch does.

    ``check=False`` skips the metadata exchange (one round of tiny messages,
    about a millisecond on gloo): arguments are still checked locally, but a
    rank whose arguments are bad raises alone and its peers time out, naming
    it; arguments that differ between ranks are not detected, as in torch.
    """
    if not isinstance(schedule, Schedule):
        raise InputError(f"schedule must be a Schedule, got {type(schedule).__name__}")
    if not dist.is_initialized():
        raise InputError("torch.distributed is not initialised: call init_process_group (or runners.launch)")
    seconds = _seconds(timeout)
    rank = dist.get_rank(group)
    if rank < 0:
        return None
    p = dist.get_world_size(group)
    coll = schedule.collective
    if p != coll.ranks:
        raise InputError(f"run({schedule.name} {coll.describe()}): the schedule is for {coll.ranks} ranks but "
                         f"the group has {p}")
    plan = rank_plan(schedule, rank)
    opi = _op_index(op)
    devices = _devices_of(group)
    code, detail, n = _local_check(schedule, rank, tensor, output, opi, devices)
    row = _metadata(schedule, plan, tensor, output, opi, code, detail, n)
    deadline = time.monotonic() + seconds
    what = f"{schedule.name} {coll.describe()}"
    globals_ = [dist.get_global_rank(group, r) if group is not None else r for r in range(p)]
    if check and p > 1:
        table = _exchange(row, group, globals_, _meta_device(group), rank, deadline, what)
        _check_table(schedule, table)
    else:
        _check_own_row(schedule, rank, row)
        table = [row]
    result = output if not coll.in_place else tensor
    if coll.kind is not Kind.BARRIER:
        n = table[0][2]
        if n == 0:
            return result
    ref = tensor if isinstance(tensor, torch.Tensor) and plan.schedule.buffer_chunks(rank, Buf.INPUT) else output
    if coll.kind is Kind.BARRIER or ref is None:
        device = _meta_device(group)
        dtype = torch.uint8 if ref is None else ref.dtype
    else:
        device, dtype = ref.device, ref.dtype
    bufs = _Buffers(schedule, plan, tensor, output, n, dtype, device)
    ctx = _Context(plan, bufs, group, globals_, _combine(opi, coll.kind), seconds, deadline)
    if device.type == "cuda":
        _execute_stream(ctx)
        if coll.kind is Kind.BARRIER:
            torch.cuda.current_stream(device).synchronize()  # a barrier holds the host, as torch's does
    else:
        _execute_host(ctx)
    bufs.finish()
    if coll.kind is not Kind.BARRIER and _OP_NAMES[opi] == "AVG" and coll.kind in _REDUCING:
        if coll.kind is not Kind.REDUCE or rank == coll.root:
            assert result is not None
            # As gloo does: complex values are divided as (re, im) pairs of reals.
            (torch.view_as_real(result) if result.is_complex() else result).div_(p)
    return result
