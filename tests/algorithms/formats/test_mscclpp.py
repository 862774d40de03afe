"""MSCCL++ execution plans: what the writer emits loads by the executor's rules, computes the collective, and
reads back to a schedule with the same final state.

References, none of them the code under test: the executor's parser rules (mscclpp
src/core/executor/execution_plan.cc: op names of getOpType, buffer letters of convertToBufferType, gpus
indexed by rank, channel and remote-buffer ids indexing the thread block's lists) written out by hand
below; the collectives' results by their definitions (``mscclpp_emulator.expected``), against a test-only
emulator that runs the plan's thread blocks in random interleavings; and the verifier's symbolic final
state of the original schedule.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from algorithms import build
from algorithms.builder import ScheduleBuilder
from algorithms.errors import ScheduleError
from algorithms.formats import loads
from algorithms.formats.mscclpp import dumps_plan, from_plan, stage_reads, to_plan
from algorithms.ir import Buf, Collective, Kind, Schedule, Transfer
from sim.cli import main
from sim.verify import verify
from sim.verify.verifier import execute
from tests.algorithms import switch_cases
from tests.algorithms.formats.mscclpp_emulator import emulate, expected, inputs

# (kind, algorithm): the library's ring and direct algorithms, and others with exchanges and roots.
COVERED = [
    ("allreduce", "ring"), ("allreduce", "direct"), ("allgather", "ring"), ("allgather", "direct"),
    ("reducescatter", "ring"), ("reducescatter", "direct"), ("allreduce", "recursive_doubling"),
    ("alltoall", "direct"), ("broadcast", "binomial"), ("reduce", "binomial"),
]
RANKS = (2, 3, 4, 8)
# execution_plan.cc, getOpType: every name the executor accepts.
EXECUTOR_OPS = {"nop", "barrier", "put", "pws", "pwsf", "get", "copy", "signal", "wait", "flush", "re", "res", "rre",
                "rres", "ppkt", "rppkt", "respkt", "cpkt", "upkt", "repkt", "recpkt", "recspkt", "glres", "gstore",
                "gstorepkt", "rlxsignal", "rlxwait", "pipeline", "sem_acquire", "sem_release"}


def _final(s: Schedule) -> dict[tuple[int, Buf, int], object]:
    """The verifier's final content of every input and output slot."""
    state, _bad, layout = execute(s)
    out = {}
    for slot, content in enumerate(state):
        r, buf, i = layout.where(slot)
        if buf is not Buf.SCRATCH:
            out[(r, buf, i)] = content
    return out


@pytest.mark.parametrize(("kind", "algorithm"), COVERED)
@pytest.mark.parametrize("p", RANKS)
def test_every_plan_reads_back_to_the_same_final_state(kind: str, algorithm: str, p: int) -> None:
    s = build(kind, algorithm, p)
    back = from_plan(dumps_plan(s))
    assert back.collective == s.collective
    assert verify(back).ok
    assert _final(back) == _final(s)


@pytest.mark.parametrize(("kind", "algorithm"), COVERED)
@pytest.mark.parametrize("p", (3, 4))
def test_the_executor_computes_the_collective(kind: str, algorithm: str, p: int) -> None:
    s = build(kind, algorithm, p)
    plan = to_plan(s)
    given = inputs(s.collective)
    want = expected(s.collective, given)
    for seed in range(6):
        got = emulate(plan, s.collective, seed)
        for r, value in want.items():
            assert np.array_equal(got[r], value), f"rank {r}, seed {seed}: {got[r]} != {value}"


def _tb_ids(tb: dict, ctype: str) -> list[int]:
    return [c for ch in tb.get("channels", []) if ch["channel_type"] == ctype for c in ch["channel_ids"]]


@pytest.mark.parametrize(("kind", "algorithm"), COVERED)
def test_the_plan_follows_the_executors_rules(kind: str, algorithm: str) -> None:
    p = 4
    s = build(kind, algorithm, p)
    plan = json.loads(dumps_plan(s))
    coll = s.collective
    assert {"name", "collective", "protocol", "inplace", "gpus"} <= plan.keys()
    assert plan["collective"] == kind and plan["protocol"] == "Simple"
    assert plan["inplace"] is (kind in ("allreduce", "broadcast", "reduce"))
    assert [g["id"] for g in plan["gpus"]] == list(range(p))
    signals: dict[tuple[int, int], int] = {}
    for g in plan["gpus"]:
        r = g["id"]
        # Buffer sizes: the table of docs/design.md, "Collectives and buffers".
        wide_in = kind in ("reducescatter", "alltoall")
        wide_out = kind in ("allgather", "alltoall")
        assert g["input_chunks"] == coll.chunks * (p if wide_in else 1)
        assert g["output_chunks"] == (g["input_chunks"] if plan["inplace"] else coll.chunks * (p if wide_out else 1))
        sizes = {"i": g["input_chunks"], "o": g["output_chunks"], "s": g["scratch_chunks"]}
        memory = [q for ch in g["channels"] if ch["channel_type"] == "memory" for q in ch["connected_to"]]
        assert r not in memory and len(set(memory)) == len(memory)
        for rb in g["remote_buffers"]:
            assert rb["type"] in sizes and 0 <= rb["rank"] < p and rb["rank"] != r
        for t, tb in enumerate(g["threadblocks"]):
            assert tb["id"] == t
            mem = _tb_ids(tb, "memory")
            assert all(0 <= c < len(memory) for c in mem)
            refs = [i for ref in tb["remote_buffer_refs"] for i in ref["remote_buffer_ids"]]
            assert all(0 <= i < len(g["remote_buffers"]) for i in refs)
            for op in tb["ops"]:
                assert op["name"] in EXECUTOR_OPS
                for c in op.get("channel_ids", []):
                    assert 0 <= c < len(mem)
                    if op["name"] == "signal":
                        key = (r, memory[mem[c]])
                        signals[key] = signals.get(key, 0) + 1
                    elif op["name"] == "wait":
                        key = (memory[mem[c]], r)
                        signals[key] = signals.get(key, 0) - 1
                for side in ("src_buff", "dst_buff"):
                    for b in op.get(side, []):
                        if "buffer_id" in b:
                            owner = g["remote_buffers"][refs[b["buffer_id"]]]
                            size = plan["gpus"][owner["rank"]][{"i": "input_chunks", "o": "output_chunks",
                                                                "s": "scratch_chunks"}[owner["type"]]]
                        else:
                            assert b["type"] in sizes
                            size = sizes[b["type"]]
                        assert 0 <= b["index"] and b["index"] + b["size"] <= size
    assert all(v == 0 for v in signals.values()), f"signals and waits do not pair up: {signals}"


def test_a_step_that_writes_what_it_reads_is_staged_through_scratch() -> None:
    coll = Collective(Kind.ALLGATHER, 2, 1)
    own = [Transfer(0, 0, "input", 0, "output", 0), Transfer(1, 1, "input", 0, "output", 1)]
    exchange = Schedule(coll, "x", [own, [Transfer(0, 1, "output", 0, "output", 0),
                                          Transfer(1, 0, "output", 1, "output", 1)]])
    assert stage_reads(exchange) is exchange  # step 1 reads 0.output[0], 1.output[1] and writes the others
    # Step 1 also rewrites 0.output[0] (from the input) while rank 1 reads it: one range of rank 0 is staged.
    hazard = Schedule(coll, "h", [own, [Transfer(0, 1, "output", 0, "output", 0),
                                        Transfer(1, 0, "output", 1, "output", 1),
                                        Transfer(0, 0, "input", 0, "output", 0)]])
    staged = stage_reads(hazard)
    assert staged.scratch_chunks == 1 and staged.num_steps == 3
    assert staged.steps[1].transfers == (Transfer(0, 0, "output", 0, "scratch", 0),)
    assert Transfer(0, 1, "scratch", 0, "output", 0) in staged.steps[2].transfers
    assert verify(staged).ok and _final(staged) == _final(hazard)


def test_staging_is_what_keeps_the_executor_right() -> None:
    # Recursive doubling on 2 ranks exchanges one slot both ways in one step; only the staged copy keeps the
    # value the other rank must read.
    s = build("allreduce", "recursive_doubling", 2)
    assert stage_reads(s) is not s
    given = inputs(s.collective)
    want = expected(s.collective, given)
    for seed in range(4):
        got = emulate(to_plan(s), s.collective, seed)
        assert all(np.array_equal(got[r], want[r]) for r in want)


def test_files_load_a_plan_by_its_content() -> None:
    s = build("allgather", "ring", 3)
    back = loads(dumps_plan(s))
    assert back.name == "ring" and _final(back) == _final(s)


def _plan() -> dict:
    return to_plan(build("allreduce", "ring", 2))


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d["gpus"][1].update(id=0), "gpu 1: id is 0"),
    (lambda d: d["gpus"][0]["threadblocks"][0]["ops"].append({"name": "zap"}), "gpu 0 threadblock 0 op"),
    (lambda d: d["gpus"][0]["threadblocks"][0]["ops"][1].update(channel_ids=[5]), "channel id 5 out of range"),
    (lambda d: d.update(protocol="LL128"), "protocol 'LL128'"),
    (lambda d: d["gpus"][1].update(input_chunks=3), "gpu 1: input_chunks is 3"),
    (lambda d: d["gpus"][0]["threadblocks"][0]["ops"].insert(0, {"name": "wait", "channel_ids": [0],
                                                                   "channel_type": "memory"}), "deadlock: "),
    (lambda d: d["gpus"][0]["channels"][0].update(connected_to=[0]), "connected_to names gpu 0"),
    (lambda d: d["gpus"][0]["threadblocks"][0]["ops"].append({"name": "pipeline"}), "missing field 'iter_context'"),
])
def test_bad_plans_are_refused_naming_the_place(edit, message: str) -> None:  # type: ignore[no-untyped-def]
    d = _plan()
    edit(d)
    with pytest.raises(ScheduleError, match=message.replace("(", r"\(").replace("'", "'")):
        from_plan(d)


def test_cli_exports_a_plan_and_reads_it_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ring.json"
    assert main(["export", "-c", "allreduce", "-a", "ring", "-p", "4", "--format", "mscclpp", "-o", str(out)]) == 0
    assert json.loads(out.read_text())["gpus"][3]["id"] == 3
    assert main(["verify", "--file", str(out)]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith(": OK")
    bad = json.loads(out.read_text())
    bad["gpus"][2]["threadblocks"][0]["ops"][0]["name"] = "zap"
    out.write_text(json.dumps(bad))
    assert main(["verify", "--file", str(out)]) == 2
    assert "gpu 2 threadblock 0 op 0: unknown op name 'zap'" in capsys.readouterr().err


def test_a_barrier_has_no_plan() -> None:
    with pytest.raises(ScheduleError, match="barrier has no data"):
        to_plan(build("barrier", "dissemination", 4))


def test_reductions_into_one_slot_are_serialised() -> None:
    # Direct reduce-scatter: every rank reduces p-1 chunks into one slot in one step; the executor gets a nop
    # between them (two rre on the same chunk, unordered, would lose one).
    plan = to_plan(build("reducescatter", "direct", 3))
    ops = plan["gpus"][0]["threadblocks"][0]["ops"]
    names = [o["name"] for o in ops]
    first = names.index("rre")
    assert names[first:first + 3] == ["rre", "nop", "rre"]


# ------------------------------------------------------------------ switch operations (glres, gstore)


@pytest.mark.parametrize("p", (2, 3, 4, 8))
def test_switch_schedules_round_trip_and_compute_the_collective(p: int) -> None:
    for s in switch_cases.every(p, chunks=2):
        plan = to_plan(s)
        back = from_plan(plan)
        assert verify(back).ok, s.name
        assert _final(back) == _final(s), s.name
        assert back.switch_ops, s.name  # the switch operations stay switch operations
        want = expected(s.collective, inputs(s.collective))
        for seed in range(3):
            got = emulate(plan, s.collective, seed)
            assert all(np.array_equal(got[r], want[r]) for r in want), f"{s.name} p={p} seed {seed}"


@pytest.mark.parametrize("p", (2, 4))
def test_switch_channels_follow_the_executors_rules(p: int) -> None:
    for s in switch_cases.every(p, chunks=2):
        plan = to_plan(s)
        declared: dict[int, list[tuple[str, tuple[int, ...]]]] = {}
        for g in plan["gpus"]:
            groups = [(ch["buffer_type"], tuple(rg["ranks"])) for ch in g["channels"]
                      if ch["channel_type"] == "switch" for rg in ch["rank_groups"]]
            for ch in g["channels"]:
                for rg in ch.get("rank_groups", []):
                    assert rg["size"] == len(rg["ranks"]) and g["id"] in rg["ranks"]
            declared[g["id"]] = groups
            for tb in g["threadblocks"]:
                ids = _tb_ids(tb, "switch")
                assert all(0 <= c < len(groups) for c in ids)
                for op in tb["ops"]:
                    if op["name"] in ("glres", "gstore"):
                        assert op["channel_type"] == "switch"
                        for b in op["src_buff"] + op["dst_buff"]:
                            if "switch_channel_id" in b:
                                assert 0 <= b["switch_channel_id"] < len(ids)
                        if op["name"] == "gstore":
                            assert "type" in op["src_buff"][0]
        # Setting up a multicast object takes every member: each declares every group it belongs to.
        every = {c for groups in declared.values() for c in groups}
        for r, groups in declared.items():
            assert set(groups) == {c for c in every if r in c[1]}, (s.name, r)


def test_a_hand_written_nvls_plan_reads_as_an_all_reduce() -> None:
    # Two GPUs, two chunks of input; each loads-reduces its own chunk through one switch channel over the
    # input of both and stores the sum to both (the shape of mscclpp's NVLS all-reduce examples, with the nops
    # that order a thread block's data ops after its wait and before its signal).
    def gpu(r: int) -> dict:
        return {"id": r, "input_chunks": 2, "output_chunks": 2, "scratch_chunks": 0, "remote_buffers": [],
                "channels": [{"channel_type": "memory", "connected_to": [1 - r]},
                             {"channel_type": "switch", "buffer_type": "i",
                              "rank_groups": [{"size": 2, "ranks": [0, 1]}]}],
                "threadblocks": [{"id": 0, "channels": [{"channel_type": "memory", "channel_ids": [0]},
                                                        {"channel_type": "switch", "channel_ids": [0]}],
                                  "ops": [{"name": "signal", "channel_ids": [0], "channel_type": "memory"},
                                          {"name": "wait", "channel_ids": [0], "channel_type": "memory"},
                                          {"name": "nop"},
                                          {"name": "glres", "channel_type": "switch", "reduce_op": "sum",
                                           "src_buff": [{"switch_channel_id": 0, "index": r, "size": 1}],
                                           "dst_buff": [{"switch_channel_id": 0, "index": r, "size": 1}]},
                                          {"name": "nop"},
                                          {"name": "signal", "channel_ids": [0], "channel_type": "memory"},
                                          {"name": "wait", "channel_ids": [0], "channel_type": "memory"}]}]}

    plan = {"name": "nvls2", "collective": "allreduce", "protocol": "Simple", "inplace": True,
            "gpus": [gpu(0), gpu(1)]}
    s = from_plan(plan)
    assert s.collective == Collective(Kind.ALLREDUCE, 2, 2) and s.num_transfers == 0 and len(s.switch_ops) == 2
    assert verify(s).ok
    bad = json.loads(json.dumps(plan))
    bad["gpus"][1]["channels"][1]["rank_groups"][0]["size"] = 3
    with pytest.raises(ScheduleError, match=r"gpu 1 channels\[1\] rank_groups\[0\]: size is 3"):
        from_plan(bad)
    bad = json.loads(json.dumps(plan))
    bad["gpus"][0]["threadblocks"][0]["ops"][3]["src_buff"][0]["switch_channel_id"] = 1
    with pytest.raises(ScheduleError, match=r"gpu 0 threadblock 0 op 3 src_buff\[0\]: switch_channel_id 1 out of"):
        from_plan(bad)


# ------------------------------------------------------------------ several nodes: port channels


@pytest.mark.parametrize(("kind", "algorithm"), COVERED)
def test_across_nodes_data_goes_over_port_channels_and_the_plan_still_computes(kind: str, algorithm: str) -> None:
    p, per_node = 4, 2
    s = build(kind, algorithm, p)
    plan = to_plan(s, ranks_per_node=per_node)
    for g in plan["gpus"]:
        r = g["id"]
        for ch in g["channels"]:
            if ch["channel_type"] in ("memory", "port"):
                same = {q // per_node == r // per_node for q in ch["connected_to"]}
                assert same <= {ch["channel_type"] == "memory"}, (r, ch)
        port_buffers = [i for i, rb in enumerate(g["remote_buffers"]) if rb["access_channel_types"] == ["port"]]
        assert all(g["remote_buffers"][i]["rank"] // per_node != r // per_node for i in port_buffers)
        for tb in g["threadblocks"]:
            for op in tb["ops"]:
                assert not (op["name"] == "rre" and op["channel_type"] == "port")  # a proxy cannot read
                if op["name"] == "put" and op["channel_type"] == "port":
                    assert len(op["channel_ids"]) == 1
    back = from_plan(plan)
    assert verify(back).ok and _final(back) == _final(s)
    want = expected(s.collective, inputs(s.collective))
    for seed in range(4):
        got = emulate(plan, s.collective, seed)
        assert all(np.array_equal(got[r], want[r]) for r in want), seed


def test_a_switch_operation_across_nodes_is_refused_and_one_within_a_node_is_not() -> None:
    with pytest.raises(ScheduleError, match=r"step 0 switch op \(reduce@sw .*\) spans nodes \[0, 1\]"):
        to_plan(switch_cases.sharp_allreduce(4), ranks_per_node=2)
    s = switch_cases.nvls_allreduce(4)
    assert from_plan(to_plan(s, ranks_per_node=4)) is not None
    with pytest.raises(ScheduleError, match="ranks_per_node must be an integer >= 1"):
        to_plan(s, ranks_per_node=0)


@pytest.mark.parametrize(("p", "per_node"), [(4, 2), (8, 4)])
def test_nvls_tree_on_several_nodes_keeps_its_switch_ops_within_each(p: int, per_node: int) -> None:
    s = build("allreduce", "nvls_tree", p, group=per_node, chunks=2)
    plan = to_plan(s, ranks_per_node=per_node)
    for g in plan["gpus"]:
        for ch in g["channels"]:
            for rg in ch.get("rank_groups", []):
                assert len({q // per_node for q in rg["ranks"]}) == 1
    back = from_plan(plan)
    assert verify(back).ok and _final(back) == _final(s)
    want = expected(s.collective, inputs(s.collective))
    got = emulate(plan, s.collective, 0)
    assert all(np.array_equal(got[r], want[r]) for r in want)


def test_cli_ranks_per_node_is_for_plans_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "tree.json"
    assert main(["export", "-c", "allreduce", "-a", "nvls_tree", "-p", "4", "--param", "group=2",
                 "--format", "mscclpp", "--ranks-per-node", "2", "-o", str(out)]) == 0
    kinds = {ch["channel_type"] for ch in json.loads(out.read_text())["gpus"][0]["channels"]}
    assert kinds == {"memory", "port", "switch"}
    assert main(["export", "-c", "allreduce", "-a", "ring", "-p", "4", "--ranks-per-node", "2",
                 "-o", str(tmp_path / "r.xml")]) == 2
    assert "--ranks-per-node is for MSCCL++ plans" in capsys.readouterr().err


def test_loading_a_bad_plan_file_names_the_file(tmp_path: Path) -> None:
    from algorithms.formats import load

    path = tmp_path / "plan.json"
    d = _plan()
    d["gpus"][0]["threadblocks"][0]["ops"][1]["channel_type"] = "carrier-pigeon"
    path.write_text(json.dumps(d))
    with pytest.raises(ScheduleError, match=rf"{path}: gpu 0 threadblock 0 op 1: unknown channel_type"):
        load(path)


def _op_names(plan: dict) -> list[str]:
    return [op["name"] for g in plan["gpus"] for tb in g["threadblocks"] for op in tb["ops"]]


def test_nvls_reduce_then_multicast_becomes_one_glres_per_piece() -> None:
    # NVLS all-reduce, p = 4, k = 2 pieces per owner: p·k reductions to an owner, each followed by the owner's
    # multicast. As MSCCL++'s own NVLS all-reduce: p·k glres, no gstore, no local copies.
    p, k = 4, 2
    plan = to_plan(build("allreduce", "nvls", p, chunks=k))
    names = _op_names(plan)
    assert names.count("glres") == p * k and "gstore" not in names and "copy" not in names
    for g in plan["gpus"]:  # every owner issues its own pieces, as NVLS spreads them
        assert [op["name"] for tb in g["threadblocks"] for op in tb["ops"]].count("glres") == k
    names = _op_names(to_plan(switch_cases.nvls_allreduce(p)))
    assert names.count("glres") == p and "gstore" not in names


def test_no_fusion_when_the_next_step_reads_the_groups_slots() -> None:
    # As hand-nvls on 2 ranks, but step 1 also copies rank 1's chunk 0 (which the fused op would already have
    # overwritten with the sum) into scratch: it must see rank 1's own value, so the pair stays apart.
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, 2, 2), "nvls-read", scratch_chunks=1)
    with b.step():
        for g in range(2):
            b.switch_reduce("node0", [0, 1], [g], g)
    with b.step():
        for g in range(2):
            b.multicast("node0", g, [1 - g], g)
        b.copy(1, 1, 0, dst_buf=Buf.SCRATCH, dst_index=0)
    s = b.build()
    plan = to_plan(s)
    assert "gstore" in _op_names(plan)
    back = from_plan(plan)
    assert verify(back).ok
    state_s, state_b = execute(s)[0], execute(back)[0]
    layout_s, layout_b = execute(s)[2], execute(back)[2]
    # rank 1 scratch[0] holds rank 1's own chunk 0 in both
    assert state_b[layout_b.slot(1, Buf.SCRATCH, 0)] == state_s[layout_s.slot(1, Buf.SCRATCH, 0)]
    assert _final(back) == _final(s)


def test_no_fusion_when_a_later_step_reads_the_owners_scratch() -> None:
    # The owner's scratch copy of the sum is read again two steps later: the fused op would not write it.
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, 2, 2), "nvls-keep", scratch_chunks=1)
    with b.step():
        b.switch_reduce("node0", [0, 1], [0], 0, dst_buf=Buf.SCRATCH, dst_index=0)
    with b.step():
        b.multicast("node0", 0, [0, 1], 0, buf=Buf.SCRATCH, dst_buf=Buf.INPUT, dst_index=0)
    with b.step():
        b.copy(0, 1, 0, buf=Buf.SCRATCH, dst_buf=Buf.INPUT, dst_index=1)
    s = b.build()
    assert "gstore" in _op_names(to_plan(s))
    assert _final(from_plan(to_plan(s))) == _final(s)
