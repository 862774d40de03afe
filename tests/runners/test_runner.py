"""The runner against torch's own collectives, on gloo with spawned processes.

Each test spawns one job that runs many cases and returns the failures, so
that the suite pays for process start-up a few times, not once per case.
Integer data (also stored in float dtypes, where sums of small integers are
exact) must match torch exactly; random floats match to rounding.
"""

from __future__ import annotations

import os
import random
import signal
import time
from typing import Any

import pytest
import torch
import torch.distributed as dist

from algorithms import registry
from algorithms.builder import ScheduleBuilder
from algorithms.errors import CollschedError
from algorithms.ir import Collective, Kind, Schedule
from runners.commands.launch import SpawnError, spawn
from runners.execution import executors
from runners.execution import native as native_module
from runners.execution.runner import InputError, RunError, run
from tests.runners import limits
from tests.runners.runner_schedules import extra_schedules

R = dist.ReduceOp
OPS = {"SUM": R.SUM, "PRODUCT": R.PRODUCT, "MIN": R.MIN, "MAX": R.MAX, "AVG": R.AVG, "BAND": R.BAND,
       "BOR": R.BOR, "BXOR": R.BXOR}
REDUCING = {Kind.ALLREDUCE, Kind.REDUCE, Kind.REDUCESCATTER}
DEVICE = [torch.device("cpu")]  # tests/gpu sets this to the rank's GPU in its processes


def schedules(p: int) -> list[Schedule]:
    """Every registered algorithm that serves p ranks (with 1 and 2 chunks), plus the hand-built ones."""
    out: list[Schedule] = []
    for alg in registry.algorithms():
        for k in (1, 2) if any(prm.name == "chunks" for prm in alg.parameters) else (None,):
            params = {} if k is None else {"chunks": k}
            if alg.unsupported(p, params) is None:
                root = p - 1 if alg.kind in (Kind.BROADCAST, Kind.REDUCE, Kind.SCATTER, Kind.GATHER) else None
                out.append(alg.build(p, root=root, **params))
    return out + extra_schedules(p)


def valid_ops(kind: Kind, dtype: torch.dtype) -> list[str]:
    """The ops torch's gloo collectives accept for this dtype (only SUM for non-reducing kinds)."""
    if kind not in REDUCING:
        return ["SUM"]
    if dtype.is_complex:
        return ["SUM", "AVG"]
    if dtype.is_floating_point:
        return ["SUM", "PRODUCT", "MIN", "MAX", "AVG"]
    return ["SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"]


def make_data(n: int, dtype: torch.dtype, op: str, gen: torch.Generator, exact: bool) -> torch.Tensor:
    """Per-rank test data: small integers (exact in every dtype) or random floats."""
    if dtype is torch.bool:
        return torch.randint(0, 2, (n,), generator=gen).bool()
    if not exact and (dtype.is_floating_point or dtype.is_complex):
        if op == "PRODUCT":
            return (torch.rand(n, generator=gen) + 0.5).to(dtype)
        return torch.randn(n, generator=gen, dtype=torch.float64).to(dtype)
    low = 0 if dtype is torch.uint8 else -3
    return torch.randint(low, 4, (n,), generator=gen).to(dtype)


def native(kind: Kind, x: torch.Tensor | None, op: str, root: int | None, p: int, n: int, group: Any,
           dtype: torch.dtype) -> torch.Tensor | None:
    """torch's own collective of this kind on the same data (AVG where gloo lacks it: SUM / p)."""
    me = dist.get_rank(group)
    groot = dist.get_global_rank(group, root) if root is not None and group is not None else root
    if op == "AVG" and kind is not Kind.ALLREDUCE:
        ref = native(kind, x, "SUM", root, p, n, group, dtype)
        if ref is not None:
            (torch.view_as_real(ref) if ref.is_complex() else ref).div_(p)  # as gloo's AVG does
        return ref
    if dtype.is_complex and kind in (Kind.SCATTER, Kind.GATHER):
        # gloo's scatter and gather reject complex tensors ("Invalid scalar type"); compare as real pairs.
        real = None if x is None else torch.view_as_real(x).reshape(-1)
        ref = native(kind, real, op, root, p, 2 * n, group, real.dtype if real is not None else torch.float32
                     if dtype is torch.complex64 else torch.float64)
        return None if ref is None else torch.view_as_complex(ref.view(-1, 2))
    rop = OPS[op]
    if kind is Kind.ALLREDUCE:
        assert x is not None
        y = x.clone()
        dist.all_reduce(y, op=rop, group=group)
        return y
    if kind is Kind.BROADCAST:
        assert x is not None
        y = x.clone()
        dist.broadcast(y, src=groot, group=group)
        return y
    if kind is Kind.REDUCE:
        assert x is not None
        y = x.clone()
        dist.reduce(y, dst=groot, op=rop, group=group)
        return y if me == root else None
    device = x.device if x is not None else DEVICE[0]
    out = torch.empty(n * (p if kind in (Kind.ALLGATHER, Kind.ALLTOALL) else 1), dtype=dtype, device=device)
    if kind is Kind.ALLGATHER:
        dist.all_gather_into_tensor(out, x, group=group)
    elif kind is Kind.REDUCESCATTER:
        dist.reduce_scatter_tensor(out, x, op=rop, group=group)
    elif kind is Kind.ALLTOALL:
        dist.all_to_all_single(out, x, group=group)
    elif kind is Kind.SCATTER:
        dist.scatter(out, list(x.chunk(p)) if me == root and x is not None else None, src=groot, group=group)
    elif kind is Kind.GATHER:
        gathered = [torch.empty(n, dtype=dtype, device=device) for _ in range(p)] if me == root else None
        dist.gather(x, gathered, dst=groot, group=group)
        return torch.cat(gathered) if gathered is not None else None
    return out


EXECUTORS: tuple[str, ...] = ("dataflow", "grouped")  # tests/gpu sets ("grouped",): the only executor nccl takes
# runners.execution.executors and the C++ one (runners.execution.native), taking turns case by case
ENGINES = ("python", "native")


def one_case(sched: Schedule, dtype: torch.dtype, op: str, n: int, seed: int, group: Any, exact: bool,
             executors_: tuple[str, ...] | None = None, engine: str = "python") -> str | None:
    """Run one case on this rank with every executor (or those given); what differs from torch, or None.

    torch's collective runs once; each executor then runs on a fresh copy of the same data."""
    chosen = EXECUTORS if executors_ is None else executors_
    coll = sched.collective
    kind, p, root = coll.kind, coll.ranks, coll.root
    me = dist.get_rank(group)
    gen = torch.Generator().manual_seed(seed * 1000 + me)
    label = f"{sched.name} {coll.describe()} {str(dtype)[6:]} {op} N={n} {engine}"
    if kind is Kind.BARRIER:
        for executor in chosen:
            run(sched, group=group, timeout=limits.RUN, executor=executor, engine=engine)
        return None
    segs_in = p if kind in (Kind.REDUCESCATTER, Kind.SCATTER, Kind.ALLTOALL) else 1
    if kind is Kind.ALLTOALLV:  # N elements a chunk: the rank's row of the matrix
        segs_in = coll.input_chunks(me)
    data: torch.Tensor | None = make_data(segs_in * n, dtype, op, gen, exact).to(DEVICE[0])
    if kind is Kind.SCATTER and me != root:
        data = None  # non-roots pass no input, as torch allows
    if kind is Kind.ALLTOALLV:
        assert data is not None
        ref = torch.empty(coll.output_chunks(me) * n, dtype=dtype, device=data.device)
        dist.all_to_all_single(ref, data, [coll.block(i, me) * n for i in range(p)],
                               [coll.block(me, j) * n for j in range(p)], group=group)
    else:
        ref = native(kind, data, op, root, p, n, group, dtype)
    for executor in chosen:
        err = _one_run(sched, data, ref, op, n, group, exact, executor, f"{label} [{executor}]", engine)
        if err:
            return err
    return None


def _one_run(sched: Schedule, data: torch.Tensor | None, ref: torch.Tensor | None, op: str, n: int, group: Any,
             exact: bool, executor: str, label: str, engine: str = "python") -> str | None:
    coll = sched.collective
    kind, p, root = coll.kind, coll.ranks, coll.root
    me = dist.get_rank(group)
    x = None if data is None else data.clone()
    dtype = data.dtype if data is not None else ref.dtype if ref is not None else torch.float32
    if coll.in_place:
        assert x is not None
        got: torch.Tensor | None = x
        run(sched, x, op=OPS[op], group=group, timeout=limits.RUN, executor=executor, engine=engine)
    else:
        segs_out = p if kind in (Kind.ALLGATHER, Kind.ALLTOALL, Kind.GATHER) else 1
        if kind is Kind.ALLTOALLV:
            segs_out = coll.output_chunks(me)
        out = None if kind is Kind.GATHER and me != root else torch.full((segs_out * n,), 7).to(DEVICE[0], dtype)
        got = run(sched, x, out, op=OPS[op], group=group, timeout=limits.RUN, executor=executor, engine=engine)
        if x is not None and data is not None and not torch.equal(x, data):
            return f"{label}: rank {me}: the input of an out-of-place kind was modified"
    if ref is None:
        return None
    assert got is not None
    try:
        if exact or not (dtype.is_floating_point or dtype.is_complex):
            torch.testing.assert_close(got, ref, rtol=0, atol=0, equal_nan=True)
        else:
            # Sums in another order: a few units in the last place of the largest partial sum.
            eps = torch.finfo(got.real.dtype if got.is_complex() else got.dtype).eps
            torch.testing.assert_close(got, ref, rtol=0, atol=8 * p * eps * float(ref.abs().max()), equal_nan=True)
    except AssertionError as e:
        return f"{label}: rank {me}: differs from torch: {str(e).splitlines()[0:3]}"
    return None


def sizes(rng: random.Random, chunks: int) -> list[int]:
    """Edge sizes (0, 1, fewer than C, a multiple of C), each once, then a random one."""
    return [*dict.fromkeys([0, 1, max(chunks - 1, 1), chunks * 3]), rng.randrange(2, 400)]


def plan_cases(scheds: list[Schedule], dtypes: list[str], rng: random.Random, offset: int) -> list[tuple[Any, ...]]:
    """The (schedule, dtype, op, n, exact, engine) cases of a job: a covering design, not the full product.

    Every schedule runs on the first dtype at every edge size (0, 1, fewer than C, a multiple of C) with the
    kind's first op, and once with each of its other ops; then on two more dtypes in turn (``offset`` shifts
    the turn, so each world size pairs other schedules with each dtype), each with the next op of that dtype's
    own rotation on both engines; and every float dtype once on random values. The engines take turns on the
    rest. Each (dtype, op, engine) that a reducing kind accepts so comes up on several schedules, each
    schedule on three dtypes; ``uncovered`` checks the first."""
    cases: list[list[Any]] = []
    first, rest = dtypes[0], dtypes[1:]
    turn = {d: 0 for d in rest}
    for si, sched in enumerate(scheds):
        kind = sched.collective.kind
        picked = list(dict.fromkeys(rest[(2 * si + j + offset) % len(rest)] for j in range(2))) if rest else []
        for dt_name in [first, *picked]:
            dtype = getattr(torch, dt_name)
            ops = valid_ops(kind, dtype)
            every = sizes(rng, sched.collective.chunks)
            if dt_name == first:
                cases += [[sched, dtype, ops[0], n, True, None] for n in every]
                cases += [[sched, dtype, op, every[-1], True, None] for op in ops[1:]]
            else:
                op = ops[turn[dt_name] % len(ops)]
                cases += [[sched, dtype, op, every[-1], True, engine] for engine in ENGINES]
                turn[dt_name] += kind in REDUCING
            if dtype.is_floating_point:
                cases.append([sched, dtype, "SUM", rng.randrange(1, 3000), False, None])
    free = 0
    for case in cases:  # two by two, so that with executors taking turns every pairing comes up
        if case[5] is None:
            case[5] = ENGINES[free // 2 % len(ENGINES)]
            free += 1
    return [tuple(c) for c in cases]


def uncovered(cases: list[tuple[Any, ...]], dtypes: list[str]) -> set[tuple[str, str, str]]:
    """The (dtype, op, engine) triples of a reducing kind that no case runs."""
    want = {(d, op, e) for d in dtypes for op in valid_ops(Kind.ALLREDUCE, getattr(torch, d)) for e in ENGINES}
    return want - {(str(dt)[6:], op, e) for sched, dt, op, _, _, e in cases if sched.collective.kind in REDUCING}


def correctness_job(rank: int, dtypes: list[str], subgroup: list[int] | None, seed: int,
                    alternate: bool = False) -> list[str]:
    """Every schedule on random sizes, dtypes and ops (``plan_cases``), against torch; this rank's failures.

    ``alternate``: each case runs on one executor, taking turns case by case (the same on every rank:
    the case count is), instead of on every executor; for the large worlds, where a case costs most, and
    always on the subgroup."""
    count = 0
    world = dist.get_world_size()
    failures: list[str] = []
    jobs: list[tuple[Any, list[Schedule]]] = [(None, schedules(world))]
    if subgroup is not None:
        group = dist.new_group(subgroup)
        jobs.append((group, schedules(len(subgroup)) if rank in subgroup else []))
    rng = random.Random(seed)  # the same stream on every rank: every rank picks the same sizes
    for group, scheds in jobs:
        # On the subgroup, groups go through dist.batch_isend_irecv's P2POps as on nccl (group ranks, tags).
        executors.FORCE_BATCH_API = group is not None
        # The subgroup is there for group ranks and tags, so the first dtype serves it.
        mine = dtypes if group is None else dtypes[:1]
        cases = plan_cases(scheds, mine, rng, world + (group is not None))
        if scheds and any(sched.collective.kind in REDUCING for sched in scheds):
            failures += [f"the job leaves {d} {op} on the {e} engine untested"
                         for d, op, e in sorted(uncovered(cases, mine))]
        for sched, dtype, op, n, exact, engine in cases:
            turns = alternate or group is not None  # the subgroup's cases take turns too
            turn = (EXECUTORS[count % len(EXECUTORS)],) if turns else None
            count += 1
            err = one_case(sched, dtype, op, n, rng.randrange(1 << 30), group, exact=exact,
                           executors_=turn if exact else None, engine=engine)
            if err:
                failures.append(err)
        if group is not None:
            dist.barrier()
            dist.destroy_process_group(group)
    return failures


ALL_DTYPES = ["int64", "float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32", "bool",
              "complex64", "complex128"]


def _check(results: list[list[str]]) -> None:
    failures = [f for r in results for f in r]
    assert failures == [], "\n".join(failures[:20])


@pytest.mark.multiprocess
def test_every_kind_matches_torch_on_4_ranks_and_a_subgroup() -> None:
    # Three dtypes here (a float, an integer, bool); every dtype runs at 2 and 3 ranks.
    _check(spawn(correctness_job, 4, ["float32", "int64", "bool"], [1, 2, 3], 4, timeout=limits.job(2)))


@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.parametrize(("p", "dtypes"), [(2, ALL_DTYPES), (5, ["float32", "int64"]), (8, ["int64"])])
def test_every_kind_and_dtype_matches_torch(p: int, dtypes: list[str]) -> None:
    # At 5 and 8 ranks on 2 cores a case costs most: each case runs on one executor, in turns (every case
    # runs on both executors at 2, 3 and 4 ranks).
    _check(spawn(correctness_job, p, dtypes, None, p, p > 4, timeout=limits.job(6)))


@pytest.mark.multiprocess
def test_every_dtype_matches_torch_on_3_ranks() -> None:
    _check(spawn(correctness_job, 3, ALL_DTYPES, None, 3, timeout=limits.job(2)))


def test_the_case_plan_covers_every_schedule_dtype_and_op() -> None:
    # The jobs above run a covering design (plan_cases), so check the design itself, without processes.
    for p, dtypes in ((2, ALL_DTYPES), (3, ALL_DTYPES), (4, ["float32", "int64", "bool"]), (8, ["int64"])):
        scheds = schedules(p)
        cases = plan_cases(scheds, dtypes, random.Random(p), p)
        assert uncovered(cases, dtypes) == set(), p
        for sched in scheds:  # every edge size on the first dtype
            mine = {(str(dt)[6:], n) for s, dt, _, n, _, _ in cases if s is sched}
            assert {n for d, n in mine if d == dtypes[0]} >= {0, 1}, sched.name
            assert len({d for d, _ in mine}) == min(3, len(dtypes)), sched.name
    # ... and that the coverage check finds a gap: two reducing schedules cannot carry ten dtypes' ops.
    few = [s for s in schedules(2) if s.collective.kind in REDUCING][:2]
    assert ("bool", "BXOR", "native") in uncovered(plan_cases(few, ALL_DTYPES, random.Random(0), 2), ALL_DTYPES)


# ------------------------------------------------------------------ bad inputs


def racing(p: int) -> Schedule:
    """An all-reduce whose last step copies into rank 0's chunk from two peers at once (a race)."""
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, p, 1), "test-race")
    for r in range(1, p):
        with b.step():
            b.reduce(r, 0, 0)
    with b.step():
        for r in range(1, p):
            b.copy(0, r, 0)
    with b.step():
        b.copy(1, 0, 0)
        b.copy(2, 0, 0)
    return b.build()


def bad_input_job(rank: int) -> list[tuple[str, str]]:
    """Each case is bad on some ranks only; returns (case, error class: message) for every case."""
    p = dist.get_world_size()
    ring = registry.get("allreduce", "ring").build(p)
    gather = registry.get("allgather", "ring").build(p)
    f32 = torch.ones(6)
    cases: dict[str, Any] = {
        "size on rank 1": lambda: run(ring, torch.ones(7 if rank == 1 else 6)),
        "dtype int16 on rank 2": lambda: run(ring, torch.ones(6, dtype=torch.int16 if rank == 2 else torch.float32)),
        "dtypes differ": lambda: run(ring, torch.ones(6, dtype=torch.int32 if rank == 0 else torch.int64)),
        "MAX on complex": lambda: run(ring, torch.ones(6, dtype=torch.complex64), op=R.MAX),
        "AVG on integers": lambda: run(ring, torch.ones(6, dtype=torch.int32), op=R.AVG),
        "BAND on floats on rank 0": lambda: run(ring, f32.clone(), op=R.BAND if rank == 0 else R.SUM),
        "not contiguous on rank 1": lambda: run(ring, torch.ones(6, 2)[:, 0] if rank == 1 else torch.ones(6)),
        "no output on rank 2": lambda: run(gather, f32, None if rank == 2 else torch.empty(6 * p)),
        "output too small": lambda: run(gather, f32, torch.empty(6 * p - 1)),
        "schedule for another size": lambda: run(registry.get("allreduce", "ring").build(p + 1), f32.clone()),
        "schedules differ": lambda: run(registry.get("allreduce", "ring").build(p, chunks=1 + (rank == 1)),
                                        f32.clone()),
        "bad timeout": lambda: run(ring, f32.clone(), timeout=-1),
        "unknown executor": lambda: run(ring, f32.clone(), executor="fast"),
        "unknown engine": lambda: run(ring, f32.clone(), engine="cuda"),
        "a racing step": lambda: run(racing(p), f32.clone()),
    }
    seen = []
    for i, (name, call) in enumerate(cases.items()):
        try:
            call()
            seen.append((name, "no error"))
        except Exception as e:
            seen.append((name, f"{type(e).__name__}: {e}"))
        # The group still works after every rejected call: nothing is left half-posted
        # (every other time without the metadata exchange).
        y = torch.full((5,), float(rank))
        run(ring, y, timeout=limits.RUN, check=i % 2 == 0, executor=("dataflow", "grouped")[i // 2 % 2],
            engine=ENGINES[i // 4 % 2])
        if y.tolist() != [float(sum(range(p)))] * 5:
            seen.append((name, f"group broken afterwards: {y.tolist()}"))
    return seen


@pytest.mark.multiprocess
def test_bad_inputs_raise_the_same_clear_error_on_every_rank() -> None:
    results = spawn(bad_input_job, 3, timeout=limits.JOB)
    by_case = list(zip(*results, strict=True))
    expect = {
        "size on rank 1": "rank 1", "dtype int16 on rank 2": "rank 2: tensor has dtype torch.int16",
        "dtypes differ": "disagree on the dtype", "MAX on complex": "ReduceOp.MAX",
        "AVG on integers": "ReduceOp.AVG", "BAND on floats on rank 0": "rank 0",
        "not contiguous on rank 1": "rank 1: tensor must be contiguous", "no output on rank 2": "rank 2: output",
        "output too small": "sizes do not fit", "schedule for another size": "the group has 3",
        "schedules differ": "disagree on the schedule", "bad timeout": "timeout must be positive",
        "unknown executor": "executor must be one of grouped, dataflow, auto",
        "unknown engine": "engine must be 'native', 'python' or None, got 'cuda'",
        "a racing step": "step 3: transfers 0 (0.input[0:1] = 1.input[0:1]) and 1 (0.input[0:1] = 2.input[0:1]) "
                         "both write rank 0 input chunk 0",
    }
    assert len(by_case) == len(expect)
    for per_rank in by_case:
        names = {name for name, _ in per_rank}
        assert len(names) == 1
        name = names.pop()
        messages = [m for _, m in per_rank]
        assert all(m.startswith("InputError") for m in messages), (name, messages)
        assert len(set(messages)) == 1, (name, messages)  # the same message on every rank
        assert expect[name] in messages[0], (name, messages[0])


# ------------------------------------------------------------------ failures


def _store() -> Any:
    return dist.distributed_c10d._get_default_store()


def _wait_count(key: str, n: int) -> None:
    """Wait until the counter ``key`` in the store reaches ``n`` (up to a job's time)."""
    store = _store()
    end = time.monotonic() + limits.JOB
    while store.add(key, 0) < n and time.monotonic() < end:
        time.sleep(0.05)


def _leave_together(key: str, n: int) -> None:
    """The ``n`` ranks that call this leave together, rank 0 (which hosts the store) last: it must not exit,
    taking the store and the notes in it, while a peer still reads them."""
    store = _store()
    store.add(key, 1)
    _wait_count(key, n)
    if dist.get_rank() != 0:
        store.add(f"{key}/left", 1)
        return
    _wait_count(f"{key}/left", n - 1)


def killed_peer_job(rank: int, executor: str = "dataflow", engine: str = "python") -> tuple[str, float]:
    """Rank 2 kills itself right after posting its first data send of a large all-reduce (native: as it
    starts executing, after the metadata exchange); the others' outcome and how long they took."""
    sched = registry.get("allreduce", "ring").build(3, chunks=4)
    if rank == 2 and engine == "native":
        def die(*args: Any, **kwargs: Any) -> None:
            os.kill(os.getpid(), signal.SIGKILL)

        native_module.execute = die  # type: ignore[assignment]
    elif rank == 2:
        isend = dist.isend

        def isend_then_die(*args: Any, tag: int = 0, **kwargs: Any) -> Any:
            work = isend(*args, tag=tag, **kwargs)
            if tag < sched.num_transfers:  # a transfer's tag, not the metadata exchange's
                os.kill(os.getpid(), signal.SIGKILL)
            return work

        dist.isend = isend_then_die  # type: ignore[assignment]
    start = time.monotonic()
    try:
        run(sched, torch.ones(1 << 20), timeout=limits.RUN, executor=executor, engine=engine)
        outcome = "finished"
    except RunError as e:
        outcome = f"{type(e).__name__}: {e}"
    except Exception as e:
        outcome = f"unexpected {type(e).__name__}: {e}"
    took = time.monotonic() - start
    _leave_together("killed/done", 2)
    return outcome, took


@pytest.mark.multiprocess
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("executor", ["dataflow", "grouped"])
def test_a_killed_peer_makes_the_others_fail_naming_it(executor: str, engine: str) -> None:
    # Each survivor names rank 2: the one whose transfer with it failed directly, the other through the note
    # of the peer that failed first (it waited on that peer, which stopped sending). Neither waits for its
    # run's timeout: the stall watch finds the note within about COLLSCHED_STALL_S (before: the full 60 s,
    # unless the first one's exit happened to close the connection, and then the wrong peer was named).
    with pytest.raises(SpawnError) as info:
        spawn(killed_peer_job, 3, executor, engine, timeout=limits.JOB)
    outcomes = info.value.outcomes
    assert outcomes[2].exitcode == -signal.SIGKILL
    for o in outcomes[:2]:
        assert o.ok, o.error
        text, took = o.value
        assert text.startswith("RunError"), text
        assert "peer rank 2" in text and "step" in text, text
        assert took < limits.RUN, (took, text)


def silent_peer_job(rank: int, stall: bool, executor: str = "dataflow", engine: str = "python",
                    world: int = 2) -> str:
    """The last rank never joins the run, or (``stall``) joins and stops after its first send (native: as it
    starts executing, after the metadata exchange); it stays alive, and lets go only once every other rank has
    given up (a counter in the store: no sleeping)."""
    sched = registry.get("allreduce", "ring").build(world, chunks=2)
    silent = world - 1
    dist.barrier()

    def until_the_others_gave_up() -> None:
        _wait_count("silent/gave-up", world - 1)

    outcome = "finished"
    if rank == silent and engine == "native":
        def stall_then_stop(*args: Any, **kwargs: Any) -> None:
            until_the_others_gave_up()
            raise KeyboardInterrupt("stalled on purpose")

        native_module.execute = stall_then_stop  # type: ignore[assignment]
    elif rank == silent:
        isend = dist.isend

        def isend_then_stall(*args: Any, tag: int = 0, **kwargs: Any) -> Any:
            work = isend(*args, tag=tag, **kwargs)
            if tag >= sched.num_transfers:  # the metadata exchange goes through
                return work
            until_the_others_gave_up()
            raise KeyboardInterrupt("stalled on purpose")

        dist.isend = isend_then_stall  # type: ignore[assignment]
    if rank == silent and not stall:
        until_the_others_gave_up()
        outcome = "stayed out"
    elif rank == silent:
        try:
            run(sched, torch.ones(100), timeout=limits.RUN, executor=executor, engine=engine)
        except KeyboardInterrupt:
            outcome = "stalled"
    else:
        try:
            run(sched, torch.ones(100), timeout=1.5 if world == 2 else limits.RUN / 10, executor=executor,
                engine=engine)
        except RunError as e:
            outcome = f"{type(e).__name__}: {e}"
        finally:
            _store().add("silent/gave-up", 1)
    _leave_together("silent/done", world)
    return outcome


@pytest.mark.multiprocess
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("executor", ["dataflow", "grouped"])
def test_a_run_that_cannot_finish_times_out_naming_step_and_peer(executor: str, engine: str) -> None:
    stalled = spawn(silent_peer_job, 2, True, executor, engine, timeout=limits.JOB)
    assert stalled[1] == "stalled"
    assert stalled[0].startswith("RunTimeout"), stalled[0]
    assert "step 0 transfer" in stalled[0] and "peer rank 1" in stalled[0] and "1.5 s" in stalled[0], stalled[0]
    assert "no word from rank(s) 1" in stalled[0], stalled[0]  # the stall watch: rank 1 is not stalled on anyone
    if executor == "dataflow":  # a peer that never calls run() fails the metadata check, whatever the executor
        absent = spawn(silent_peer_job, 2, False, executor, engine, timeout=limits.JOB)
        assert absent[1] == "stayed out"
        assert absent[0].startswith("RunTimeout"), absent[0]
        assert "before step 0" in absent[0] and "peer rank 1" in absent[0], absent[0]


@pytest.mark.multiprocess
@pytest.mark.parametrize("engine", ENGINES)
def test_a_stopped_rank_is_blamed_not_the_healthy_peer_waiting_on_it(engine: str) -> None:
    # Issue 34: after SIGSTOP of one rank, a rank blamed a healthy peer. In a ring of 3, rank 1 waits on rank
    # 0, which waits on the stopped rank 2: whichever way each one ends (its own timeout, or the note of the
    # peer that timed out first), its error names rank 2 as the one that never said a word.
    got = spawn(silent_peer_job, 3, True, "dataflow", engine, 3, timeout=limits.JOB)
    assert got[2] == "stalled"
    for text in got[:2]:
        assert text.startswith(("RunTimeout", "RunError")), text
        named = ("no word from rank(s) 2" in text or ("no word from rank(s) " in text and ", 2" in text)
                 or ("had failed first" in text and "peer rank 2" in text))
        assert named, text


def test_run_needs_an_initialised_group() -> None:
    with pytest.raises(InputError, match="not initialised"):
        run(registry.get("allreduce", "ring").build(2), torch.ones(4))


def warm_up_job(rank: int) -> list[int]:
    """How many all-reduces _ensure_communicator issues on a fresh group, the same group again, a new group."""
    from runners.execution import runner as runner_module

    calls = []
    real = dist.all_reduce

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    dist.all_reduce = counting  # type: ignore[assignment]
    try:
        seen = []
        runner_module._ensure_communicator(None, torch.device("cpu"))
        seen.append(len(calls))
        runner_module._ensure_communicator(None, torch.device("cpu"))
        seen.append(len(calls))
        group = dist.new_group([0, 1])
        runner_module._ensure_communicator(group, torch.device("cpu"))
        seen.append(len(calls))
        dist.destroy_process_group(group)
        return seen
    finally:
        dist.all_reduce = real


@pytest.mark.multiprocess
def test_a_group_not_bound_to_a_device_gets_one_collective_before_its_first_run() -> None:
    # On nccl this makes the group's own communicator (with every rank) before any batch_isend_irecv.
    assert spawn(warm_up_job, 2, timeout=limits.JOB) == [[1, 1, 2], [1, 1, 2]]


def environment_job(rank: int, name: str) -> tuple[str | None, bool]:
    import sys

    return os.environ.get(name), "torch" in sys.modules


@pytest.mark.multiprocess
def test_spawned_ranks_see_the_callers_environment_as_it_is_now(monkeypatch: pytest.MonkeyPatch) -> None:
    from runners.commands import launch

    spawn(environment_job, 2, "COLLSCHED_PROBE")  # the fork server (where there is one) starts here
    for value in ("one", "two"):  # set after the server started, which a fork server's rank would not see
        monkeypatch.setenv("COLLSCHED_PROBE", value)
        assert spawn(environment_job, 2, "COLLSCHED_PROBE") == [(value, True)] * 2
    monkeypatch.setenv(launch.ENV_START, "fork")
    with pytest.raises(CollschedError, match="COLLSCHED_START_METHOD='fork': expected forkserver or spawn"):
        spawn(environment_job, 2, "COLLSCHED_PROBE")
    monkeypatch.setenv(launch.ENV_START, "spawn")
    assert spawn(environment_job, 2, "COLLSCHED_PROBE") == [("two", True)] * 2
