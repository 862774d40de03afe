"""Switch ops under the verifier: the library's in-network algorithms against a concrete numeric run,
hand-built faults named by op, and mutation testing of the new operations."""

from __future__ import annotations

import numpy as np
import pytest

from algorithms import Collective, Kind, Schedule, ScheduleBuilder, registry
from algorithms.ir import Buf, switch_ops_by_step
from sim.verify.mutation import kill_rate
from sim.verify.report import DOUBLE_COUNT, RACE, UNINITIALISED_READ, WRONG_SLOT
from sim.verify.verifier import verify


def _numeric(s: Schedule, rng: np.random.Generator) -> tuple[dict[tuple[int, str, int], float], np.ndarray]:
    """Run ``s`` on random numbers (snapshot reads, + for ⊕, a switch op sums its sources and copies the sum
    out): the independent reference. Returns the final slots and the inputs."""
    c = s.collective
    p = c.ranks
    x = rng.standard_normal((p, c.input_chunks(0)))
    state: dict[tuple[int, str, int], float] = {}
    for r in range(p):
        if c.kind is Kind.BROADCAST and r != c.root:
            continue
        for i in range(c.input_chunks(r)):
            state[(r, "input", i)] = float(x[r, i])
    by = switch_ops_by_step(s)
    for si, step in enumerate(s.steps):
        snap = dict(state)
        writes: list[tuple[tuple[int, str, int], float, bool]] = []
        for t in step.transfers:
            for k in range(t.count):
                writes.append(((t.dst, t.dst_buf.value, t.dst_index + k),
                               snap[(t.src, t.src_buf.value, t.src_index + k)], t.op.value == "reduce"))
        for op in by[si]:
            for k in range(op.count):
                total = sum(snap[(e.rank, e.buf.value, e.index + k)] for e in op.sources)
                writes.extend(((e.rank, e.buf.value, e.index + k), total, False) for e in op.targets)
        for key, v, add in writes:
            state[key] = state[key] + v if add else v
    return state, x


CASES = [("allreduce", "nvls", {"chunks": 2}), ("allreduce", "nvls_tree", {"group": 4}),
         ("allreduce", "nvls_tree", {"group": 3, "chunks": 2}), ("allreduce", "sharp", {"group": 4}),
         ("allreduce", "sharp", {"group": 5, "chunks": 2}), ("allreduce", "sharp", {"group": 1}),
         ("broadcast", "multicast", {"chunks": 2}), ("allgather", "multicast", {"chunks": 2})]


@pytest.mark.parametrize(("kind", "name", "params"), CASES)
@pytest.mark.parametrize("p", range(2, 17))
def test_in_network_algorithms_verify_and_compute_the_collective(kind: str, name: str, params: dict[str, int],
                                                                 p: int) -> None:
    # p = 2..16 with groups of 1, 3, 4, 5 ranks: one to sixteen nodes, the last often a partial one.
    root = p - 1 if kind == "broadcast" else None
    s = registry.build(kind, name, p, root=root, **params)
    assert s.switch_ops and verify(s).ok
    state, x = _numeric(s, np.random.default_rng(p))
    c = s.collective.chunks
    for r in range(p):
        for i in range(c):
            if kind == "allreduce":
                assert state[(r, "input", i)] == pytest.approx(x[:, i].sum())
            elif kind == "broadcast":
                assert state[(r, "input", i)] == x[root, i]
            else:
                assert [state[(r, "output", q * c + i)] for q in range(p)] == list(x[:, i])


def test_nvls_tree_and_sharp_span_one_to_four_dgx_nodes() -> None:
    for nodes in (1, 2, 3, 4):
        for name in ("nvls_tree", "sharp"):
            assert verify(registry.build("allreduce", name, 8 * nodes, group=8)).ok, (name, nodes)


def _builder(p: int = 3) -> ScheduleBuilder:
    return ScheduleBuilder(Collective(Kind.ALLREDUCE, p, 1), "bad", scratch_chunks=1)


def test_a_source_listed_twice_is_a_double_count_naming_the_op() -> None:
    b = _builder()
    with b.step():
        b.switch_reduce("nvls", [0, 1, 2, 1], [0, 1, 2], 0)
    r = verify(b.build())
    first = r.violations[0]
    assert first.kind == DOUBLE_COUNT and first.step == 0 and first.transfer == 0
    assert first.message.startswith("step 0 switch op 0 (reduce@nvls 0.input[0:1],1.input[0:1],2.input[0:1],"
                                    "1.input[0:1] -> ")
    assert "counts a contribution twice" in first.message


def test_a_delivery_racing_a_transfer_and_a_read_of_nothing_are_named() -> None:
    b = _builder()
    with b.step():
        b.copy(1, 2, 0)
        b.multicast("nvls", 0, [1, 2], 0)
        b.switch_reduce("nvls", [0, 1], [0], 0, buf=Buf.SCRATCH, dst_buf=Buf.SCRATCH)
    r = verify(b.build())
    kinds = [(v.kind, v.transfer) for v in r.violations if v.kind != WRONG_SLOT]
    assert (RACE, 1) in kinds and (UNINITIALISED_READ, 2) in kinds
    race = next(v for v in r.violations if v.kind == RACE)
    assert race.message.startswith("step 0 switch op 1 (multicast@nvls 0.input[0:1] -> 1.input[0:1],2.input[0:1]): "
                                   "writes rank 2 input[0], which entry 0 of the same step also writes")


def test_a_wrong_slot_names_the_switch_op_that_last_wrote_it() -> None:
    b = _builder()
    with b.step():
        b.switch_reduce("nvls", [0, 1], [0, 1, 2], 0)  # rank 2's contribution left out
    (v, *_rest) = verify(b.build()).violations
    assert v.kind == WRONG_SLOT and v.writer is not None and v.writer[:2] == (0, 0)
    assert "last written by step 0 switch op 0 (reduce@nvls" in v.message


@pytest.mark.parametrize(("kind", "name", "params", "p"), [
    ("allreduce", "nvls", {"chunks": 2}, 4), ("allreduce", "nvls_tree", {"group": 2}, 4),
    ("allreduce", "sharp", {"group": 2}, 6), ("broadcast", "multicast", {"chunks": 2}, 4),
    ("allgather", "multicast", {}, 3)])
def test_every_outcome_changing_mutant_of_a_switch_schedule_is_caught(kind: str, name: str,
                                                                       params: dict[str, int], p: int) -> None:
    s = registry.build(kind, name, p, root=1 if kind == "broadcast" else None, **params)
    report = kill_rate(s, samples=150, seed=3)
    assert report.changed >= 40  # the mutants do break things, so the rate below measures something
    assert report.rate == 1.0, report.survivors[:3]


def test_the_compact_verifier_refuses_switch_ops_and_verify_takes_them_to_the_slot_executor(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from sim.verify import fast, verifier

    s = registry.build("allreduce", "nvls", 4, chunks=2)
    with pytest.raises(ValueError, match="the compact verifier has no switch ops"):
        fast.verdict(s)
    monkeypatch.setattr(verifier, "COMPACT_FROM", 0)  # every schedule "large"
    assert verifier.verify(s).ok
