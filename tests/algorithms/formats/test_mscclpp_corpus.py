"""MSCCL++ plans that MSCCL++ itself wrote (tests/data/foreign/mscclpp; SOURCES.md says where each comes from)
read, verified and checked for deadlock, and the ops behind them: in-place buffers, packets (LL), rres,
pipelines, semaphores, barriers and thread-block groups.

References, none of them the code under test: the collectives' definitions (``sim.verify`` on the schedule,
and ``sim.verify.plan_machine``, an adversarial executor of the raw JSON that shares no code with the reader)
and, for the op semantics, the executor's handlers as mscclpp src/include/execution_kernel.hpp has them.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from algorithms.errors import ScheduleError
from algorithms.formats import loads
from algorithms.formats.mscclpp import from_plan, read_plan
from algorithms.ir import Buf, Collective, Kind
from sim.verify import verify
from sim.verify.plan import verify_plan
from sim.verify.plan_machine import outcome_changed
from tests.algorithms.formats.mscclpp_corpus import (
    COLLECTIVES,
    CORPUS,
    UNITS,
    load,
    out_of_place_allgather,
    ring_sendrecv_plan,
    sendrecv_plan,
    split_across_blocks,
)

UNREADABLE = {"unit_switch_reduce_test.json"}  # op glre: the executor's parser refuses it too (SOURCES.md)
BIG = {"alltoall_ring_4gpu.json", "alltoall_ring_oop_4gpu.json", "alltoall_ring_peers_4gpu.json"}


def test_the_corpus_is_here_with_its_provenance() -> None:
    assert (CORPUS / "SOURCES.md").is_file() and (CORPUS / "LICENSE").is_file()
    assert len(COLLECTIVES) == 19 and len(UNITS) == 12


@pytest.mark.parametrize("name", COLLECTIVES)
def test_every_collective_plan_reads_and_verifies(name: str) -> None:
    plan = load(name)
    s = from_plan(plan)
    assert s.collective.kind.value == plan["collective"]
    report = verify_plan(plan)
    assert report.ok, report.text()
    assert verify(s).ok


@pytest.mark.parametrize("name", sorted(set(COLLECTIVES) - BIG))
def test_every_collective_plan_computes_in_the_adversarial_executor(name: str) -> None:
    assert outcome_changed(load(name), seeds=3) is None


@pytest.mark.parametrize("name", sorted(set(UNITS) - UNREADABLE))
def test_every_unit_plan_reads_without_deadlock(name: str) -> None:
    got = read_plan(load(name))
    assert got.schedule is not None and got.schedule.name.startswith("custom:")
    assert not [p for p in got.problems if p.kind == "deadlock"]
    from_plan(load(name))  # a test plan is refused for a deadlock only: it has no postcondition to verify


def test_an_op_the_executor_does_not_take_is_refused_naming_gpu_threadblock_and_index() -> None:
    with pytest.raises(ScheduleError, match=r"^gpu 0 threadblock 0 op 0: unknown op name 'glre'"):
        read_plan(load("unit_switch_reduce_test.json"))
    plan = load("alltoall_4gpu.json")
    plan["gpus"][2]["threadblocks"][3]["ops"][5]["name"] = "zap"
    with pytest.raises(ScheduleError, match=r"^gpu 2 threadblock 3 op 5: unknown op name 'zap'"):
        from_plan(plan)
    plan = load("allreduce_pipeline_2gpu.json")
    plan["gpus"][1]["threadblocks"][2]["ops"][0]["ops"][3]["name"] = "zap"
    with pytest.raises(ScheduleError, match=r"gpu 1 threadblock 2 op 0 \(pipeline op 3\): unknown op name 'zap'"):
        from_plan(plan)


# ------------------------------------------------------------------ in-place buffers


def test_an_in_place_all_gather_reads_its_input_from_its_own_slice_of_the_output() -> None:
    got = read_plan(load("allgather_2gpu.json"))
    s = got.schedule
    assert s is not None and s.collective == Collective(Kind.ALLGATHER, 2, 1)
    # The input lands in the rank's slice with the first step (nothing there touches it), not a step of its own.
    first = s.steps[0].transfers
    assert all(any(t.src == t.dst == r and t.src_buf is Buf.INPUT and t.dst_index == r for t in first) for r in (0, 1))
    assert s.num_steps == 2 and verify(s).ok
    assert got.layout.describe(1, Buf.OUTPUT, 0) == "gpu 1 o[0]"


@pytest.mark.parametrize("name", ["mn_reducescatter_2x2.json", "alltoall_4gpu.json", "alltoall_ring_4gpu.json"])
def test_in_place_reduce_scatter_and_all_to_all_end_in_their_output(name: str) -> None:
    s = from_plan(load(name))
    assert s.collective.kind in (Kind.REDUCESCATTER, Kind.ALLTOALL) and verify(s).ok
    last = s.steps[-1].transfers
    assert any(t.src_buf is Buf.INPUT and t.dst_buf is Buf.OUTPUT and t.src == t.dst for t in last)


def test_an_in_place_plan_that_overwrites_its_own_input_is_caught() -> None:
    plan = load("allgather_2gpu.json")
    put = plan["gpus"][1]["threadblocks"][0]["ops"][5]
    put["dst_buff"][0]["index"] = 0  # gpu 1 writes its chunk over gpu 0's own input slice
    report = verify_plan(plan)
    assert not report.ok and "gpu 1 threadblock 0 op 5" in report.ops


def test_sendrecv_is_a_two_rank_all_to_allv_in_place_or_not() -> None:
    for inplace in (False, True):
        s = from_plan(sendrecv_plan(inplace))
        assert s.collective.kind is Kind.ALLTOALLV and s.collective.matrix == ((0, 1), (1, 0))
        assert verify(s).ok, inplace


def test_a_multi_node_sendrecv_shifts_around_a_ring() -> None:
    plan = ring_sendrecv_plan(4)  # gpu r sends to r + 1: the matrix's one entry a row
    s = from_plan(plan)
    assert s.collective.matrix == ((0, 1, 0, 0), (0, 0, 1, 0), (0, 0, 0, 1), (1, 0, 0, 0))
    assert verify_plan(plan).ok and outcome_changed(plan, seeds=3) is None
    plan["gpus"][2]["threadblocks"][0]["ops"][3]["name"] = "put"  # its signal dropped: gpu 3's wait starves
    report = verify_plan(plan)
    assert report.findings[0].kind == "deadlock" and "gpu 3 threadblock 0 op 4" in report.ops


def test_multi_node_plans_and_an_out_of_place_copy_verify() -> None:
    for name in ("mn_allgather_2x2.json", "mn_reducescatter_2x2.json"):
        assert verify_plan(load(name)).ok
    assert verify(from_plan(out_of_place_allgather(load("mn_allgather_2x2.json")))).ok


# ------------------------------------------------------------------ pws / pwsf (the bug of issue 35)


def test_put_with_signal_and_flush_counts_its_signal() -> None:
    # MSCCL++'s multi-node all-gather (2 nodes x 2 gpus) crosses nodes with pwsf: its signal is what the peer's
    # wait meets. Read as a plain put, the wait starves and a correct plan looked like a deadlock.
    s = from_plan(out_of_place_allgather(load("mn_allgather_2x2.json")))
    assert verify(s).ok
    for name in ("unit_put_with_signal_test.json", "unit_put_with_signal_and_flush_test.json"):
        assert read_plan(load(name)).schedule is not None


def test_put_with_signal_read_as_a_plain_put_is_a_deadlock() -> None:
    plan = out_of_place_allgather(load("mn_allgather_2x2.json"))
    ops = plan["gpus"][0]["threadblocks"][0]["ops"]
    k = next(i for i, op in enumerate(ops) if op["name"] == "pwsf")
    ops[k]["name"] = "put"  # the mutant: the signal is gone, the data still moves
    with pytest.raises(ScheduleError, match=r"deadlock: gpu 2 threadblock 0 op \d+ \(wait\) waits for a signal "
                                            r"from gpu 0 over port channel 0"):
        from_plan(plan)


# ------------------------------------------------------------------ packets (LL)


@pytest.mark.parametrize("name", [n for n in COLLECTIVES if "pkt" in n or "naive" in n])
def test_ll_plans_read_with_their_protocol(name: str) -> None:
    got = read_plan(load(name))
    assert got.protocol == "LL" and got.schedule is not None and not got.problems
    assert loads((CORPUS / name).read_bytes()).collective == got.schedule.collective  # files.loads takes them


def test_a_packet_read_waits_for_its_packet() -> None:
    plan = load("allgather_pkt_4gpu.json")
    del plan["gpus"][0]["threadblocks"][0]["ops"][0]  # gpu 0 never puts its packet to gpu 1
    got = read_plan(plan)
    assert got.schedule is None
    assert got.problems[0].message.startswith(
        "deadlock: gpu 1 threadblock 5 op 0 (upkt) waits for a packet in gpu 1 ps[0], which no op left provides")


# ------------------------------------------------------------------ rres, pipeline, semaphores, barriers, tbg_info


def test_read_reduce_send_reduces_then_sends_the_sum() -> None:
    s = from_plan(load("allreduce_allpairs_rres_2gpu.json"))
    assert s.num_steps == 2 and verify(s).ok
    kinds = [{(t.op.value, t.src != t.dst) for t in step.transfers} for step in s.steps]
    assert kinds == [{("reduce", True)}, {("copy", True)}]


def test_a_pipeline_with_semaphores_reads_and_a_missing_release_deadlocks() -> None:
    assert verify(from_plan(load("allreduce_pipeline_2gpu.json"))).ok
    plan = load("allreduce_pipeline_2gpu.json")
    inner = plan["gpus"][0]["threadblocks"][0]["ops"][0]["ops"]
    del inner[next(i for i, op in enumerate(inner) if op["name"] == "sem_release")]
    with pytest.raises(ScheduleError, match=r"gpu 0 threadblock 1 op 0 \(pipeline op 0\) \(sem_acquire\) waits for "
                                            "a release of gpu 0 semaphore 0, which no op left provides"):
        from_plan(plan)


def test_a_barrier_short_of_a_thread_block_deadlocks() -> None:
    plan = load("allgather_tbg_2gpu.json")
    del plan["gpus"][0]["threadblocks"][2]["ops"][2]
    with pytest.raises(ScheduleError, match=r"barrier 0 of gpu 0 \(3 of the 4 thread blocks it needs are there\)"):
        from_plan(plan)


def test_an_op_split_across_thread_blocks_counts_once() -> None:
    got = read_plan(load("allgather_tbg_2gpu.json"))
    assert got.layout.refine == 4 and verify(got.schedule).ok  # type: ignore[arg-type]
    # rres of chunk 0 on gpu 0, split across its thread block and a new one: each reduces half, once.
    plan = split_across_blocks(load("allreduce_allpairs_rres_2gpu.json"), gpu=0, tb=0, op=5)
    assert verify_plan(plan).ok
    assert outcome_changed(plan, seeds=3) is None
    twice = copy.deepcopy(plan)  # both halves without tbg_info: two blocks each reduce the whole chunk
    for tb in twice["gpus"][0]["threadblocks"]:
        for op in tb["ops"]:
            op.pop("tbg_info", None)
    report = verify_plan(twice)
    assert not report.ok and report.findings[0].kind == "race"
    assert {"gpu 0 threadblock 0 op 6", "gpu 0 threadblock 8 op 1"} <= report.ops
    assert outcome_changed(twice, seeds=6) is not None


def _names(plan: dict[str, Any]) -> list[str]:
    return [op["name"] for g in plan["gpus"] for tb in g["threadblocks"] for op in tb["ops"]]


def test_the_corpus_holds_every_op_family_the_issue_names() -> None:
    names = {n for name in COLLECTIVES + UNITS for n in _names(load(name))}
    assert {"ppkt", "rppkt", "upkt", "cpkt", "respkt", "gstorepkt", "rres", "pipeline", "barrier", "sem_acquire",
            "sem_release", "pws", "pwsf", "flush", "glres", "gstore", "get"} <= names


@pytest.mark.parametrize("kind", ("broadcast", "reduce"))
def test_a_rooted_plan_without_a_root_takes_the_one_its_writes_point_at(kind: str) -> None:
    from algorithms import build
    from algorithms.formats.mscclpp import to_plan

    plan = to_plan(build(kind, "binomial", 4, root=2))
    del plan["root"]  # MSCCL++'s DSL writes none
    s = from_plan(plan)
    assert s.collective.root == 2 and verify(s).ok


def test_a_fused_switch_op_moves_each_of_its_pairs() -> None:
    # One glres with two (src, dst) pairs, as the DSL writes fused multimem ops (GroupLoadReduceStore).
    def gpu(r: int) -> dict[str, Any]:
        pair = [{"switch_channel_id": 0, "index": k, "size": 1} for k in (0, 1)]
        ops = [{"name": "nop"}, {"name": "signal", "channel_ids": [0], "channel_type": "memory"},
               {"name": "wait", "channel_ids": [0], "channel_type": "memory"}, {"name": "nop"}]
        if r == 0:
            ops += [{"name": "glres", "src_buff": pair, "dst_buff": pair, "channel_type": "switch",
                     "reduce_op": "sum"}, {"name": "nop"}]
        ops += [{"name": "signal", "channel_ids": [0], "channel_type": "memory"},
                {"name": "wait", "channel_ids": [0], "channel_type": "memory"}, {"name": "nop"}]
        return {"id": r, "input_chunks": 2, "output_chunks": 2, "scratch_chunks": 0, "remote_buffers": [],
                "channels": [{"channel_type": "memory", "connected_to": [1 - r]},
                             {"channel_type": "switch", "buffer_type": "i",
                              "rank_groups": [{"size": 2, "ranks": [0, 1]}]}],
                "threadblocks": [{"id": 0, "ops": ops, "channels": [{"channel_type": "memory", "channel_ids": [0]},
                                                                    {"channel_type": "switch", "channel_ids": [0]}]}]}

    plan = {"name": "fused", "collective": "allreduce", "protocol": "Simple", "inplace": True,
            "gpus": [gpu(0), gpu(1)]}
    s = from_plan(plan)
    assert len(s.switch_ops) == 2 and verify(s).ok
    assert outcome_changed(plan, seeds=3) is None
