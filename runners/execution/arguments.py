"""The cross-rank argument check of ``runners.execution.runner.run``.

Validation happens before any data moves. Checks that need only the
arguments run on every rank identically; then the ranks all-gather a few
integers of metadata (size, dtype, op, schedule checksum, local error) in
one collective on the group and every rank runs the same check over the
table, so a bad argument on one rank raises the same ``InputError`` on every
rank and nothing hangs. Only when that collective fails or times out do the
ranks fall back to point-to-point messages (``_exchange_p2p``), whose waits
name the peer that is missing.

The check after the first call. Each (schedule, arguments) signature is
checked by the exchange once per group (``checked_before``); a later checked
call of that signature skips the exchange and is checked in band instead, at
no cost in messages:

- its transfers' tags carry a salt (``salt``): a hash of the rank's row and
  of the group's call counter, in the bits above the transfer ids. Ranks that
  agree post the same tags; a rank whose arguments differ posts tags no peer
  posts, so none of its data moves (nor can a message larger than its receive
  reach gloo, which would abort the process);
- such a run stalls, and every wait of a checked native run is watched
  (runners/csrc/check.h): a wait outstanding for ``COLLSCHED_STALL_S``
  seconds (default 1) writes the rank's row, and a flag saying whether it
  skipped the exchange, to the group's store and reads its peers'. Rows that
  differ end the run on every stalled rank with the same kind of
  ``InputError`` as the exchange's (``stalled``), naming the ranks and the
  argument. A peer that is only late writes nothing and is waited for.

The Python executor has no watch: with it every checked call exchanges rows.
"""

from __future__ import annotations

import os
import time
import weakref
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from algorithms.ir import Buf, Kind, Schedule
from runners.errors import InputError, RunError, RunTimeout, peer_report, report_failure
from runners.execution.plan import RankPlan

ReduceOp = dist.ReduceOp


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
OP_NAMES = ("SUM", "PRODUCT", "MIN", "MAX", "AVG", "BAND", "BOR", "BXOR")
REDUCING = frozenset({Kind.ALLREDUCE, Kind.REDUCE, Kind.REDUCESCATTER})

# Local error codes carried in the metadata exchange.
_OK, _NO_TENSOR, _NOT_CONTIGUOUS, _BAD_DTYPE, _BAD_OP, _BAD_DEVICE, _BAD_SIZE, _DTYPE_MISMATCH = range(8)


def op_index(op: object) -> int:
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
    if kind not in REDUCING:
        return _OK
    name = OP_NAMES[op]
    if dtype.is_complex and name not in ("SUM", "AVG"):
        return _BAD_OP
    if name in ("BAND", "BOR", "BXOR") and (dtype.is_floating_point or dtype.is_complex):
        return _BAD_OP
    if name == "AVG" and not (dtype.is_floating_point or dtype.is_complex):
        return _BAD_OP
    return _OK


# ---------------------------------------------------------------------------- sizes


def segments(schedule: Schedule, rank: int, buf: Buf) -> int:
    """How many N-element segments ``rank``'s ``buf`` holds (0, 1 or p)."""
    return schedule.buffer_chunks(rank, buf) // schedule.collective.chunks


def _per_rank_count(schedule: Schedule, rank: int, tensor: torch.Tensor | None,
                    output: torch.Tensor | None) -> tuple[int, int]:
    """(error code, N): the per-rank element count implied by this rank's tensors."""
    kind = schedule.collective.kind
    if kind is Kind.BARRIER:
        return _OK, 1
    n_in = segments(schedule, rank, Buf.INPUT)
    n_out = 0 if schedule.collective.in_place else segments(schedule, rank, Buf.OUTPUT)
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
    # No buffer at all (an alltoallv rank that neither sends nor receives): no count to say (-1).
    return _OK, counts[0] if counts else -1


def _expected_numel(schedule: Schedule, rank: int, n: int) -> tuple[int, int]:
    """(input, output) element counts of ``rank`` for per-rank count ``n`` (output 0 for in-place kinds)."""
    n_out = 0 if schedule.collective.in_place else segments(schedule, rank, Buf.OUTPUT) * n
    return segments(schedule, rank, Buf.INPUT) * n, n_out


# ---------------------------------------------------------------------------- validation


def devices_of(group: Any) -> set[str]:
    backend = str(dist.get_backend(group))
    if ":" not in backend:
        return {"cuda"} if backend == "nccl" else {"cpu"} if backend == "gloo" else {"cpu", "cuda"}
    return {part.split(":")[0] for part in backend.split(",")}


def meta_device(group: Any) -> torch.device:
    devices = devices_of(group)
    if devices == {"cuda"}:
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def local_check(schedule: Schedule, rank: int, tensor: Any, output: Any, op: int,
                 devices: set[str]) -> tuple[int, int, int]:
    """(error code, detail, N) from this rank's arguments alone."""
    kind = schedule.collective.kind
    if kind is Kind.BARRIER:
        return _OK, 0, 1
    seen: list[torch.Tensor] = []
    for which, t, segs in ((0, tensor, segments(schedule, rank, Buf.INPUT)),
                           (1, output, 0 if schedule.collective.in_place else
                            segments(schedule, rank, Buf.OUTPUT))):
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
    code = _op_error(seen[0].dtype, op, kind) if seen else _OK  # seen is empty for an idle alltoallv rank
    if code:
        return code, 0, 0
    code, n = _per_rank_count(schedule, rank, tensor, output)
    return code, 0, n


def metadata(schedule: Schedule, plan: RankPlan, tensor: Any, output: Any, op: int, code: int, detail: int,
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
        name = OP_NAMES[op] if 0 <= op < len(OP_NAMES) else "this ReduceOp"
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
        Kind.ALLTOALLV: "tensor = the rank's matrix row, output = its column, in chunks of one size",
    }.get(kind, "any size")


def _disagreement(schedule: Schedule, ordered: list[tuple[int, list[int]]]) -> str | None:
    """What is wrong with these ranks' rows ((group rank, row) pairs), or None when nothing differs
    or is bad: the schedules, then any rank's local error, then the op, dtype and per-rank count."""
    what = f"run({schedule.name} {schedule.collective.describe()})"
    if len({row[7] for _, row in ordered}) > 1:
        # Each rank names its own schedule here, so say everything from the rows alone.
        kinds = list(Kind)
        detail = ", ".join(f"rank {r}: {kinds[row[8]]} p={row[9]} C={row[10]}"
                           f"{'' if row[11] < 0 else f' root={row[11]}'} #{row[7]:08x}" for r, row in ordered)
        return f"run: ranks disagree on the schedule ({detail})"
    bad = [_describe_error(schedule, r, row) for r, row in ordered if row[0] != _OK]
    if bad:
        return f"{what}: invalid input: " + "; ".join(bad)
    for field, name in ((6, "op"), (5, "dtype"), (2, "per-rank element count")):
        values = [(r, row[field]) for r, row in ordered if field != 2 or row[field] >= 0]
        if len({v for _, v in values}) > 1:
            if field == 6:
                shown = [(r, OP_NAMES[v] if 0 <= v < len(OP_NAMES) else str(v)) for r, v in values]
            elif field == 5:
                shown = [(r, _dtype_name(v).removeprefix("torch.")) for r, v in values]
            else:
                shown = [(r, str(v)) for r, v in values]
            detail = ", ".join(f"rank {r}: {v}" for r, v in shown)  # (alltoallv: ranks with a count)
            return f"{what}: ranks disagree on the {name} ({detail})"
    return None


def check_table(schedule: Schedule, table: list[list[int]]) -> None:
    """Raise the same InputError on every rank when any rank's metadata is bad or inconsistent."""
    what = f"run({schedule.name} {schedule.collective.describe()})"
    wrong = _disagreement(schedule, list(enumerate(table)))
    if wrong is not None:
        raise InputError(wrong)
    if schedule.collective.kind is Kind.BARRIER:
        return
    n = common_count(table)
    for r, row in enumerate(table):
        want_in, want_out = _expected_numel(schedule, r, n)
        if (want_in and row[3] not in (want_in,)) or (want_out and row[4] != want_out):
            raise InputError(f"{what}: rank {r}: sizes do not fit: tensor has {row[3]} elements, "
                             f"output {row[4]}; with {n} elements per rank it needs {want_in} and {want_out}")


def common_count(table: list[list[int]]) -> int:
    """The per-rank element count the ranks agree on (for alltoallv: elements per chunk); 0 when none has one."""
    return max((row[2] for row in table), default=0) if table else 0


# Tags at and above this carry the runner's own messages; transfer tags (transfer ids) stay below.
_META_TAG = 1 << 30


def check_own_row(schedule: Schedule, rank: int, row: list[int]) -> None:
    """Without the exchange: this rank's own arguments only (its peers cannot know)."""
    if row[0] != _OK:
        raise InputError(f"run({schedule.name} {schedule.collective.describe()}): invalid input: "
                         + _describe_error(schedule, rank, row))


# torch 2.13 renamed all_gather_into_tensor (the old name warns).
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor

# After the collective failed or timed out: how long the point-to-point probe may take to name the peer.
PROBE_GRACE_S = 2.0


def exchange(row: list[int], group: Any, globals_: list[int], device: torch.device, rank: int, deadline: float,
             what: str) -> list[list[int]]:
    """Every rank's metadata row: one all-gather on the group; point-to-point only to name a missing peer.

    ``globals_[r]`` is the global rank of group rank r."""
    p = len(globals_)
    mine = torch.tensor(row, dtype=torch.int64, device=device)
    rows = torch.empty(p * len(row), dtype=torch.int64, device=device)
    started = time.monotonic()
    try:
        left = deadline - started
        if left <= 0:
            raise TimeoutError("timed out")
        work = _ALL_GATHER(rows, mine, group=group, async_op=True)
        assert work is not None
        work.wait(timedelta(seconds=left))
        return rows.view(p, len(row)).tolist()
    except Exception as e:  # which peer is missing is the probe's to say
        first = e
    text = str(first).strip().splitlines()[0] if str(first).strip() else type(first).__name__
    timed_out = isinstance(first, TimeoutError) or "timeout" in text.lower() or "timed out" in text.lower()
    grace = min(PROBE_GRACE_S, max(deadline - started, 0.1))  # a peer's run() starts within its own timeout
    return _exchange_p2p(row, group, globals_, device, rank, time.monotonic() + grace, what, text, timed_out)


def _exchange_p2p(row: list[int], group: Any, globals_: list[int], device: torch.device, rank: int,
                  deadline: float, what: str, why: str, timed_out: bool) -> list[list[int]]:
    """Every rank's row by point-to-point messages, so that a missing peer can be named (``why``: the
    collective's failure)."""
    p = len(globals_)
    mine = torch.tensor(row, dtype=torch.int64, device=device)
    rows = torch.empty(p, len(row), dtype=torch.int64, device=device)
    rows[rank] = mine
    # Every rank posts its messages in one global order (message src -> dst, by src then dst), so
    # both ends of a pair post them in the same order: nccl matches by order and ignores tags.
    works: list[tuple[int, str, Any]] = []
    for src in range(p):
        posts = [(dst, "send to") for dst in range(p) if dst != rank] if src == rank else [(src, "receive from")]
        for r, verb in posts:
            try:
                work = (dist.isend(mine, globals_[r], group=group, tag=_META_TAG) if verb == "send to" else
                        dist.irecv(rows[r], globals_[r], group=group, tag=_META_TAG))
            except Exception as e:  # posting to a pair that gloo closed fails at once: the peer failed
                text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise RunError(f"rank {rank} (global rank {globals_[rank]}): {what}: before step 0, exchanging "
                               f"metadata (the all-gather failed: {why}): {verb} peer rank {r} (global rank "
                               f"{globals_[r]}) failed ({peer_report(globals_[r]) or text})") from e
            works.append((r, verb, work))
    for r, verb, work in works:
        left = deadline - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError("timed out")
            work.wait(timedelta(seconds=left))
        except Exception as e:
            text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            head = (f"rank {rank} (global rank {globals_[rank]}): {what}: before step 0, exchanging metadata "
                    f"(the all-gather failed: {why}): {verb} peer rank {r} (global rank {globals_[r]})")
            if timed_out or "timed out" in text.lower() or isinstance(e, TimeoutError):
                raise RunTimeout(f"{head} did not complete in time; is rank {r} running the same run()? "
                                 f"({text})") from e
            report_failure(globals_[rank], f"exchanging metadata: {verb} peer rank {r} (global rank {globals_[r]}) "
                            f"failed ({text})")
            raise RunError(f"{head} failed ({peer_report(globals_[r]) or text})") from e
    return rows.tolist()


# ---------------------------------------------------------------------------- the check after the first call

ENV_STALL = "COLLSCHED_STALL_S"
# Row fields every rank must agree on, as check_table compares them (and check.h's kAgree, less the flag).
_AGREE = (0, 2, 5, 6, 7, 8, 9, 10, 11)
_SALT_TOP = 30  # tags from 1 << 30 up are the runner's own (_META_TAG)
_MIN_SALT_BITS = 8


def stall_seconds() -> float:
    """How long a checked run's wait may stall before its rank compares rows through the store."""
    text = os.environ.get(ENV_STALL, "").strip()
    try:
        value = float(text) if text else 1.0
    except ValueError:
        value = -1.0
    if not value > 0:
        raise InputError(f"{ENV_STALL} must be a positive number of seconds, got {text!r}")
    return value


def signature(row: list[int]) -> tuple[int, ...]:
    """What a row says that every rank must agree on: the key of ``checked_before``."""
    return tuple(row[f] for f in _AGREE)


def salt_shift(schedule: Schedule) -> int:
    """The bit above every transfer id of ``schedule`` (its tags are transfer ids): where a salt starts."""
    return max(1, sum(len(step.transfers) for step in schedule.steps).bit_length())


def salt(row: list[int], counter: int, shift: int) -> int:
    """The salt of a checked call's tags (0 when the transfer ids leave too few bits; check.h's salt_of)."""
    bits = _SALT_TOP - shift
    if bits < _MIN_SALT_BITS:
        return 0
    mask = (1 << 64) - 1
    h = 14695981039346656037  # FNV-1a 64: offset basis (and prime 1099511628211 below)
    for f in _AGREE:
        v = row[f]
        if f == 2 and v < 0:
            v = -1
        for k in range(8):
            h ^= ((v & mask) >> (8 * k)) & 0xFF
            h = (h * 1099511628211) & mask
    for k in range(8):
        h ^= ((counter & mask) >> (8 * k)) & 0xFF
        h = (h * 1099511628211) & mask
    return ((h % ((1 << bits) - 1)) + 1) << shift


ENV_SIGNATURE_CACHE = "COLLSCHED_SIGNATURE_CACHE"
SIGNATURE_CACHE = 256
"""Signatures a group keeps, on every side: the C++ backend's prepared signatures (and the plans Python keeps
for them, runners.backend.cpp.Core) and the signatures checked by the exchange (``SignatureCache``).
``COLLSCHED_SIGNATURE_CACHE`` overrides it. Past it, the C++ backend empties its cache (every signature is
asked again) and the exchange runs for each new signature."""


def signature_cache() -> int:
    """``COLLSCHED_SIGNATURE_CACHE`` (a positive integer), default ``SIGNATURE_CACHE``."""
    text = os.environ.get(ENV_SIGNATURE_CACHE, "").strip()
    if not text:
        return SIGNATURE_CACHE
    if not text.isdigit() or int(text) < 1:
        raise InputError(f"{ENV_SIGNATURE_CACHE} must be a positive integer, got {text!r}")
    return int(text)


class SignatureCache:
    """The signatures checked by the exchange on one group (bounded by ``signature_cache()``: past the bound,
    every new one is exchanged each call)."""

    def __init__(self) -> None:
        self.seen: set[tuple[int, ...]] = set()
        self.limit = signature_cache()

    def __contains__(self, sig: tuple[int, ...]) -> bool:
        return sig in self.seen

    def add(self, sig: tuple[int, ...]) -> None:
        if len(self.seen) < self.limit:
            self.seen.add(sig)


# Held weakly: a strong reference would keep a destroyed group (and its gloo worker threads) alive into the
# interpreter's shutdown, where a worker still dropping its last Work needs the GIL and aborts the process.
_CACHES: weakref.WeakKeyDictionary[Any, SignatureCache] = weakref.WeakKeyDictionary()


def checked_before(group: Any) -> SignatureCache:
    """The signature cache of ``group``, which lives as long as the group does."""
    cache = _CACHES.get(group)
    if cache is None:
        cache = _CACHES[group] = SignatureCache()
    return cache


def parse_rows(text: str) -> dict[int, list[int]]:
    """The rows a stalled native run saw ("rank:v,v,...;..."), by group rank."""
    rows: dict[int, list[int]] = {}
    for part in text.split(";"):
        rank, _, values = part.partition(":")
        if values:
            rows[int(rank)] = [int(v) for v in values.split(",")]
    return rows


def stalled(schedule: Schedule, rows: dict[int, list[int]], p: int) -> InputError:
    """The InputError of a checked run that stalled on ranks whose rows differ (the rows of ranks that
    stalled too; each row: metadata's 12 fields and the flag)."""
    what = f"run({schedule.name} {schedule.collective.describe()})"
    absent = [r for r in range(p) if r not in rows]
    tail = (" (found when the run stalled, in band: a call after the first of its signature"
            + (f"; rank{'s' if len(absent) > 1 else ''} {', '.join(map(str, absent))} had not stalled"
               if absent else "") + ")")
    wrong = _disagreement(schedule, sorted(rows.items()))
    if wrong is not None:
        return InputError(wrong + tail)
    ordered = sorted(rows.items())
    flags = ", ".join(f"rank {r}: {'skipped the exchange' if row[12] else 'exchanging rows'}" for r, row in ordered)
    return InputError(f"{what}: ranks disagree on whether this signature was checked before on the group "
                      f"({flags}); a rank that raised in an earlier call can leave its peers so{tail}")
