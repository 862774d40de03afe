"""Every algorithm's closed-form cost equals what its schedule does, exactly, for p = 1..64.

The schedule is measured directly from its transfers, in the model the
registry's ``Cost`` states: a step costs α when it moves data between ranks
(a local-only step is free); β is paid on the most bytes any one rank sends or
receives in a step; γ on the most bytes any rank reduces in a step;
``sent_per_rank`` is the most bytes any rank sends over the network in total.
Sizes follow nccl-tests, so one chunk is n / (chunks of the sized buffer);
n is chosen as that chunk count so that every value is a whole number.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest

from algorithms import registry
from algorithms.ir import OPS, ROOTED_KINDS, Kind, Op, Schedule

ALGORITHMS = [(a.kind.value, a.name) for a in registry.algorithms()]
# Pipelined double binary tree: the ramp-up and ramp-down of two overlapping
# trees make the per-step load irregular, so β and γ are stated as bounds.
BOUNDED = {("allreduce", "double_binary_tree"): ("bytes", "reduced"),
           # NCCL's trees (a chain head has up to 3 children); its rings' chains, which differ per channel
           # across nodes, so that a step's busiest rank may carry fewer than K chunks.
           ("allreduce", "nccl_tree"): ("bytes", "reduced"),
           ("broadcast", "nccl_ring"): ("bytes",), ("reduce", "nccl_ring"): ("bytes", "reduced")}
# The buffer whose size is n (nccl-tests): p·C chunks for these kinds, C otherwise.
_WIDE = {Kind.ALLGATHER, Kind.GATHER, Kind.REDUCESCATTER, Kind.SCATTER, Kind.ALLTOALL}


def sized_chunks(schedule: Schedule) -> int:
    """Chunks in the buffer whose size is the message size n."""
    c = schedule.collective
    if c.kind is Kind.ALLTOALLV:  # the mean rank's input: the matrix's total over p
        return sum(map(sum, c.matrix or ())) // c.ranks
    return c.ranks * c.chunks if c.kind in _WIDE else c.chunks


def measure_by_loop(schedule: Schedule) -> dict[str, int]:
    """Steps, bytes, reduced and sent_per_rank of a schedule, in chunks, counted transfer by transfer."""
    p = schedule.ranks
    total_sent = [0] * p
    out = {"steps": 0, "bytes": 0, "reduced": 0}
    for step in schedule.steps:
        sent, received, reduced = [0] * p, [0] * p, [0] * p
        for t in step.transfers:
            if t.src != t.dst:
                sent[t.src] += t.count
                received[t.dst] += t.count
            if t.op is Op.REDUCE:
                reduced[t.dst] += t.count
        out["steps"] += any(sent)
        out["bytes"] += max(max(a, b) for a, b in zip(sent, received, strict=True))
        out["reduced"] += max(reduced)
        for r in range(p):
            total_sent[r] += sent[r]
    out["sent_per_rank"] = max(total_sent)
    return out


def measure(schedule: Schedule) -> dict[str, int]:
    """``measure_by_loop`` on the schedule's columns, with numpy (the sweeps below build 10^4 schedules)."""
    p, c = schedule.ranks, schedule.columns()
    steps = len(c.step_offsets) - 1
    if steps == 0:
        return {"steps": 0, "bytes": 0, "reduced": 0, "sent_per_rank": 0}
    step = np.repeat(np.arange(steps), np.diff(c.step_offsets))
    count = c.count.astype(np.int64)
    net = np.where(c.src != c.dst, count, 0)

    def per_step(rank: np.ndarray, weight: np.ndarray) -> np.ndarray:
        flat = np.bincount(step * p + rank, weights=weight, minlength=steps * p)
        return flat.reshape(steps, p).astype(np.int64)

    sent, received = per_step(c.src, net), per_step(c.dst, net)
    reduced = per_step(c.dst, np.where(c.op == OPS.index(Op.REDUCE), count, 0))
    return {"steps": int((sent.sum(axis=1) > 0).sum()),
            "bytes": int(np.maximum(sent, received).max(axis=1).sum()),
            "reduced": int(reduced.max(axis=1).sum()),
            "sent_per_rank": int(sent.sum(axis=0).max())}


def predicted(algo: registry.Algorithm, p: int, n: int, params: Mapping[str, int]) -> dict[str, float]:
    cost = algo.cost
    assert cost is not None and cost.sent_per_rank is not None, f"{algo.kind}/{algo.name} has no full cost"
    return {"steps": cost.steps(p, n, params), "bytes": cost.bytes(p, n, params),
            "reduced": cost.reduced(p, n, params), "sent_per_rank": cost.sent_per_rank(p, n, params)}


def _cases(algo: registry.Algorithm, chunk_counts: tuple[int, ...]) -> list[tuple[int, int | None, dict[str, int]]]:
    names = {prm.name for prm in algo.parameters}
    groups = (1, 2, 3, 4, 8) if "group" in names else (None,)
    out = []
    for p in range(1, 65):
        root = (p // 3) if algo.kind in ROOTED_KINDS else None
        for k in chunk_counts if "chunks" in names else (None,):
            for g in groups:
                params = {name: v for name, v in (("chunks", k), ("group", g)) if v is not None}
                if algo.unsupported(p, params) is None:  # NCCL's algorithms need group | p
                    out.append((p, root, params))
    return out


def _check(kind: str, name: str, chunk_counts: tuple[int, ...]) -> None:
    algo = registry.get(kind, name)
    bounded = BOUNDED.get((kind, name), ())
    wrong = []
    for p, root, params in _cases(algo, chunk_counts):
        schedule = algo.build(p, root=root, **params)
        n = sized_chunks(schedule)  # one chunk = one byte
        got = measure(schedule)
        want = predicted(algo, p, n, algo.resolve(params))
        for what, value in got.items():
            ok = value <= want[what] + 1e-9 if what in bounded else abs(value - want[what]) < 1e-9
            if not ok:
                wrong.append(f"p={p} {params}: {what} measured {value}, formula {want[what]}")
    assert not wrong, "\n".join(wrong[:10])


@pytest.mark.parametrize(("kind", "name"), ALGORITHMS)
def test_cost_is_exact_for_p_1_to_64(kind: str, name: str) -> None:
    _check(kind, name, (2,))


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "name"), ALGORITHMS)
def test_cost_is_exact_for_p_1_to_64_over_chunk_counts(kind: str, name: str) -> None:
    _check(kind, name, (1, 3))


@pytest.mark.parametrize(("kind", "name"), ALGORITHMS)
def test_the_column_measure_is_the_loop_measure(kind: str, name: str) -> None:
    algo = registry.get(kind, name)
    cases = _cases(algo, (1, 3))
    for p, root, params in cases[len(cases) // 3::max(1, len(cases) // 4)]:  # p from about 20 up
        schedule = algo.build(p, root=root, **params)
        assert measure(schedule) == measure_by_loop(schedule), (p, params)


def test_every_algorithm_states_a_full_cost_and_a_source() -> None:
    for algo in registry.algorithms():
        assert algo.cost is not None and algo.cost.sent_per_rank is not None, algo.name
        assert algo.source and algo.cost.formula, algo.name


def test_measure_counts_network_steps_and_the_busiest_rank() -> None:
    # The measuring stick itself, on a hand-computed case: ring all-reduce, p = 4,
    # one chunk per piece: 6 network steps, each rank sends 1 chunk per step.
    for counted in (measure, measure_by_loop):
        got = counted(registry.build("allreduce", "ring", 4))
        assert got == {"steps": 6, "bytes": 6, "reduced": 3, "sent_per_rank": 6}
    # A local-only step costs no α: ring reduce-scatter at p = 2 copies first.
    s = registry.build("reducescatter", "ring", 2)
    assert len(s.steps) == 2 and measure(s)["steps"] == 1


def test_double_binary_tree_bounds_are_tight_somewhere() -> None:
    # A bound never reached would say little: check it is met at some size.
    algo = registry.get("allreduce", "double_binary_tree")
    hits = set()
    for p in (4, 5, 16, 33):
        for k in (1, 16):
            s = algo.build(p, chunks=k)
            got, want = measure(s), predicted(algo, p, sized_chunks(s), {"chunks": k})
            hits |= {what for what in ("bytes", "reduced") if got[what] >= 0.85 * want[what]}
    assert hits == {"bytes", "reduced"}
