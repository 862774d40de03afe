"""The argument check after a signature's first call: salted tags and the stall watch (runners.execution.arguments,
runners/csrc/check.h).

The first checked call of a signature exchanges rows; later ones must still catch a rank whose arguments
differ, name it and the argument, leave the group usable, and not mistake a late peer for a mismatch.
"""

from __future__ import annotations

import random
import time

import pytest
import torch
import torch.distributed as dist

from algorithms import registry
from runners.commands.launch import spawn
from runners.errors import InputError
from runners.execution import arguments, native
from runners.execution.runner import run
from tests.runners import limits

needs_native = pytest.mark.skipif(not native.available(), reason=f"native executor not built: {native.build_note()}")

# ------------------------------------------------------------------ without processes


def _fnv_by_hand(values: list[int]) -> int:
    """FNV-1a 64 over little-endian int64s, written out from its definition (Fowler, Noll, Vo)."""
    h = 0xCBF29CE484222325
    for v in values:
        for byte in (v & (2**64 - 1)).to_bytes(8, "little"):
            h = ((h ^ byte) * 0x100000001B3) % 2**64
    return h


def test_the_salt_is_fnv1a_of_the_agreed_fields_and_the_counter_above_the_transfer_ids() -> None:
    row = [0, 0, 1024, 1024, 1024, 0, 0, 0x1234ABCD, 0, 4, 4, -1, 1]
    for counter, shift in ((0, 3), (7, 10), (2**40, 22)):
        bits = 30 - shift
        agreed = [row[f] for f in (0, 2, 5, 6, 7, 8, 9, 10, 11)]
        want = ((_fnv_by_hand([*agreed, counter]) % (2**bits - 1)) + 1) << shift
        got = arguments.salt(row, counter, shift)
        assert got == want
        assert got & ((1 << shift) - 1) == 0 and 0 < got < 1 << 30  # transfer ids and the runner's tags untouched
    assert arguments.salt(row, 0, 23) == 0  # 7 bits left: no salt, every call exchanges
    # What every rank must agree on changes the salt; the flag (checked before or not) does not.
    assert arguments.salt([*row[:12], 0], 5, 10) == arguments.salt(row, 5, 10)
    for field in (2, 5, 6, 7):
        other = list(row)
        other[field] += 1
        assert arguments.salt(other, 5, 10) != arguments.salt(row, 5, 10)
    assert arguments.salt(row, 6, 10) != arguments.salt(row, 5, 10)


@needs_native
def test_python_and_the_extension_compute_the_same_salt() -> None:
    module = native.load()
    rng = random.Random(3)
    for _ in range(200):
        row = [rng.choice((0, 0, 6)), 0, rng.choice((-1, 1, 4096, 2**33)), 8, 8, rng.randrange(11), rng.randrange(8),
               rng.getrandbits(32), rng.randrange(10), rng.randrange(2, 64), rng.randrange(1, 9),
               rng.choice((-1, 0, 3)), rng.randrange(2)]
        counter, shift = rng.getrandbits(rng.choice((4, 20, 40))), rng.randrange(1, 26)
        assert module.salt_of(row, counter, shift) == arguments.salt(row, counter, shift)


def test_a_stall_names_the_ranks_and_the_argument_from_the_rows_seen() -> None:
    sched = registry.build("allreduce", "ring", 3)
    base = [0, 0, 64, 64, 64, 0, 0, 0xABC, 0, 3, 3, -1, 1]
    rows = {0: list(base), 2: [*base[:2], 128, 128, 128, *base[5:12], 0]}
    text = str(arguments.stalled(sched, rows, 3))
    assert "ranks disagree on the per-rank element count (rank 0: 64, rank 2: 128)" in text
    assert "rank 1 had not stalled" in text
    ops = {0: [*base[:6], 3, *base[7:]], 1: list(base), 2: list(base)}
    assert "ranks disagree on the op (rank 0: MAX, rank 1: SUM, rank 2: SUM)" in str(arguments.stalled(sched, ops, 3))
    flags = {0: list(base), 1: [*base[:12], 0]}
    assert "whether this signature was checked before" in str(arguments.stalled(sched, flags, 2))
    # The text a stalled native run returns, parsed back.
    assert arguments.parse_rows("0:1,2,3;2:4,5,6") == {0: [1, 2, 3], 2: [4, 5, 6]}


def test_stall_seconds_refuses_what_is_not_a_positive_number(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(arguments.ENV_STALL, "0.25")
    assert arguments.stall_seconds() == 0.25
    for bad in ("0", "-1", "soon"):
        monkeypatch.setenv(arguments.ENV_STALL, bad)
        with pytest.raises(InputError, match=arguments.ENV_STALL):
            arguments.stall_seconds()


# ------------------------------------------------------------------ ranks


def _attempt(fn) -> str:  # type: ignore[no-untyped-def]
    try:
        fn()
    except InputError as e:
        return f"InputError: {e}"
    except Exception as e:  # reported to the test, which says what it expected
        return f"{type(e).__name__}: {e}"
    return "no error"


def runner_job(rank: int, p: int) -> dict[str, object]:
    sched = registry.build("allreduce", "ring", p)
    total = float(sum(range(1, p + 1)))
    seen: dict[str, object] = {}
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.SUM):  # SUM and MAX on 64 floats: checked
        x = torch.full((64,), float(rank + 1))
        run(sched, x, op=op, timeout=limits.RUN)
    y = torch.full((64,), rank + 1, dtype=torch.int32)
    run(sched, y, timeout=limits.RUN)  # int32 on 64 elements: checked too (the same bytes as float32)
    # A late peer (past the stall time) is waited for: nothing differs.
    if rank == p - 1:
        time.sleep(2.5)
    x = torch.full((64,), float(rank + 1))
    run(sched, x, timeout=limits.RUN)
    seen["late peer"] = x.tolist() == [total] * 64
    # One rank with a new size (its first call of that signature) against peers whose signature is cached.
    n = 128 if rank == p - 1 else 64
    seen["count"] = _attempt(lambda: run(sched, torch.ones(n), timeout=limits.RUN))
    # Every signature cached, ops differ: sizes alike, so only the salt keeps the data apart.
    op = dist.ReduceOp.MAX if rank == 0 else dist.ReduceOp.SUM
    seen["op"] = _attempt(lambda: run(sched, torch.full((64,), float(rank + 1)), op=op, timeout=limits.RUN))
    dtype = torch.int32 if rank == 1 else torch.float32
    seen["dtype"] = _attempt(lambda: run(sched, torch.ones(64, dtype=dtype), timeout=limits.RUN))
    x = torch.full((64,), float(rank + 1))
    run(sched, x, timeout=limits.RUN)
    seen["after"] = x.tolist() == [total] * 64
    # A new signature is exchanged again: rows the failed exchange above left unmatched must not answer it.
    x = torch.full((96,), float(rank + 1))
    seen["new signature"] = _attempt(lambda: run(sched, x, timeout=limits.RUN))
    seen["new signature sum"] = x.tolist() == [total] * 96
    return seen


@pytest.mark.multiprocess
@needs_native
def test_a_later_call_whose_arguments_differ_on_one_rank_is_named_in_band() -> None:
    p = 3
    for rank, seen in enumerate(spawn(runner_job, p, p, timeout=limits.JOB)):
        assert seen["late peer"] is True, (rank, seen)
        # Which peers a rank's error lists depends on which had stalled when it looked; the rank that differs
        # and one that agrees are always among them.
        assert seen["count"].startswith("InputError") and \
            "ranks disagree on the per-rank element count (" in seen["count"] and "rank 2: 128" in seen["count"] \
            and ": 64" in seen["count"], (rank, seen["count"])
        assert seen["op"].startswith("InputError") and "ranks disagree on the op (rank 0: MAX" in seen["op"] and \
            ": SUM" in seen["op"], (rank, seen["op"])
        assert seen["dtype"].startswith("InputError") and "ranks disagree on the dtype" in seen["dtype"] and \
            "rank 1: int32" in seen["dtype"], (rank, seen["dtype"])
        assert seen["after"] is True, (rank, seen)  # the group is usable afterwards
        assert seen["new signature"] == "no error" and seen["new signature sum"] is True, (rank, seen)


def backend_job(rank: int, p: int) -> dict[str, object]:
    from runners.backend.cpp import group_of
    seen: dict[str, object] = {}
    total = float(sum(range(1, p + 1)))
    for _ in range(3):
        x = torch.full((1024,), float(rank + 1))
        dist.all_reduce(x)
    seen["sum"] = x.tolist() == [total] * 1024
    n = 2048 if rank == 1 else 1024
    seen["count"] = _attempt(lambda: dist.all_reduce(torch.ones(n)))
    x = torch.full((1024,), float(rank + 1))
    dist.all_reduce(x)
    seen["after"] = x.tolist() == [total] * 1024
    seen["check"] = bool(group_of()._check)
    return seen


@pytest.mark.multiprocess
@needs_native
def test_the_backend_checks_by_default_and_names_a_later_differing_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLLSCHED_CHECK", raising=False)
    p = 3
    for rank, seen in enumerate(spawn(backend_job, p, p, backend="collsched", timeout=limits.JOB,
                                      group_timeout=limits.RUN)):
        assert seen["check"] is True and seen["sum"] is True and seen["after"] is True, (rank, seen)
        assert "InputError" in seen["count"] and "ranks disagree on the per-rank element count (" in seen["count"] \
            and "rank 1: 2048" in seen["count"] and ": 1024" in seen["count"], (rank, seen["count"])


def _released_job(rank: int) -> bool:
    """A checked native run on a subgroup, which is then destroyed: whether collsched still holds the group."""
    import gc
    import weakref

    group = dist.new_group([0, 1])
    sched = registry.get("allreduce", "ring").build(2)
    for _ in range(2):  # the exchange, then in band: the group's signature cache is made
        run(sched, torch.ones(8), group=group, check=True)
    ref = weakref.ref(group)
    dist.destroy_process_group(group)
    del group
    gc.collect()
    return ref() is None


@needs_native
@pytest.mark.multiprocess
def test_a_destroyed_group_is_not_kept_alive_by_the_checks_cache() -> None:
    # A cache that keeps the group keeps its gloo worker threads into interpreter shutdown, where one still
    # dropping its last Work needs the GIL and aborts the process ("terminate called without an active exception").
    assert spawn(_released_job, 2, timeout=limits.JOB) == [True, True]
