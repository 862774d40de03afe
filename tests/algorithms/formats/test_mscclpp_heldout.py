"""MSCCL++ plans beyond the 2- and 4-GPU corpus (tests/data/mscclpp_heldout; SOURCES.md says which program and
arguments made each): 8 to 32 GPUs, multi-node, the plans MSCCL++ installs as its defaults, its executor tests'
plans and the rest of its DSL's unit plans. Every one is read, verified and simulated, but for the three that are
wrong upstream, which are refused naming the ops at fault.

References, none of them the code under test: the collectives' postconditions (``sim.verify`` on the schedule),
the executor's handlers (mscclpp src/core/include/execution_kernel.hpp: a packet op gives packet k of its range to
thread k mod blockDim.x) and its parser (execution_plan.cc: ``tbg_info`` splits an op's whole byte range into
tbg_size consecutive parts), and the sha256 of each file recorded in SOURCES.md.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from algorithms.errors import ScheduleError
from algorithms.formats.mscclpp import from_plan, read_plan
from sim.machine.runtime import simulate_under
from sim.topology import from_spec
from sim.topology.placement import place
from sim.verify import verify
from sim.verify.plan import verify_plan

HELDOUT = Path(__file__).resolve().parents[2] / "data" / "mscclpp_heldout"
PLANS = sorted(p.name for p in HELDOUT.glob("*.json"))
WRONG = {  # wrong upstream (SOURCES.md): the first finding and the ops it must name
    "executor_reduce_tbg_2gpu.json": ("race", "gpu 1 threadblock 1 op 0", "gpu 0 threadblock 0 op 7"),
    "unit_signal_wait_fuse_test.json": ("deadlock", "gpu 0 threadblock 0 op 3", "gpu 1 threadblock 0 op 3"),
    "unit_relaxed_signal_wait_fuse_test.json": ("deadlock", "gpu 0 threadblock 0 op 3", "gpu 1 threadblock 0 op 3"),
}
SLOW = {"shipped_default_allreduce_4nodes_128K_2M.json", "shipped_default_allreduce_2nodes_128K_2M.json"}


def load(name: str) -> dict[str, Any]:
    return json.loads((HELDOUT / name).read_text())


def topology_for(plan: dict[str, Any]) -> str:
    """The preset a plan runs on: DGX H100 nodes of 8 GPUs, or one GB200 NVL72 where a switch channel groups more
    than 8 GPUs (one NVLink SHARP multicast object spans one NVLink domain)."""
    widest = max((grp["size"] for g in plan["gpus"] for ch in g["channels"] if ch["channel_type"] == "switch"
                  for grp in ch["rank_groups"]), default=0)
    return "gb200-nvl72:1" if widest > 8 else f"dgx-h100:{max(1, -(-len(plan['gpus']) // 8))}"


def test_the_held_out_plans_are_here_with_their_provenance_and_hashes() -> None:
    sources = (HELDOUT / "SOURCES.md").read_text()
    assert (HELDOUT / "LICENSE").read_text().startswith("    MIT License") and "1f5f065d7b13ab02" in sources
    recorded = dict(re.findall(r"^\| `(\S+\.json)` \|.* \| ([0-9a-f]{64}) \|$", sources, re.M))
    assert sorted(recorded) == PLANS and len(PLANS) == 62
    for name, digest in recorded.items():
        assert hashlib.sha256((HELDOUT / name).read_bytes()).hexdigest() == digest, name
    sizes = {len(load(n)["gpus"]) for n in PLANS}
    assert {8, 16, 32} <= sizes


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n
                                  for n in PLANS if n not in WRONG])
def test_every_held_out_plan_reads_verifies_and_simulates(name: str) -> None:
    plan = load(name)
    report = verify_plan(plan)
    got = read_plan(plan)
    assert got.schedule is not None and got.error() is None, got.error()
    s = got.schedule
    if plan["collective"] == "test":  # an op-level probe: no postcondition, read for simulation
        assert s.name.startswith("custom:")
    else:
        assert report.ok, report.text()
        assert verify(s).ok
    whole = from_spec(topology_for(plan))
    topo = place(whole, tuple(range(s.ranks)), partial=True) if s.ranks < whole.ranks else whole
    result, model = simulate_under("msccl", s, topo, 1 << 20, msccl_proto=got.protocol)
    assert model is not None and model.protocol == plan["protocol"]
    assert result.time > 0 or s.num_transfers == 0


@pytest.mark.parametrize("name", sorted(WRONG))
def test_the_plans_wrong_upstream_are_refused_naming_the_ops_at_fault(name: str) -> None:
    kind, *ops = WRONG[name]
    report = verify_plan(load(name))
    assert not report.ok
    first = report.findings[0]
    assert first.kind == kind and all(o in first.ops for o in ops), first.message
    with pytest.raises(ScheduleError, match=f"^plan: {kind}: "):
        from_plan(load(name))


# ------------------------------------------------------------------ what these plans needed

def _ops(plan: dict[str, Any], gpu: int, tb: int) -> list[dict[str, Any]]:
    ops: list[dict[str, Any]] = plan["gpus"][gpu]["threadblocks"][tb]["ops"]
    return ops


def test_packet_ops_of_one_thread_block_on_one_range_need_no_barrier() -> None:
    # MSCCL++'s default reduce-scatter: each owner unpacks its local partial into its result (upkt), then adds the
    # remote partials to it (repkt), in one thread block with no nop between: thread k handles packet k in both.
    plan = load("default_reducescatter_multi_nodes_2x2.json")
    ops = _ops(plan, 3, 2)
    assert [o["name"] for o in ops[1:3]] == ["upkt", "repkt"] and ops[1]["dst_buff"][0] == ops[2]["src_buff"][0]
    assert verify_plan(plan).ok
    # The add split differently across the group: its threads take other elements than the ones they unpacked.
    moved = load("default_reducescatter_multi_nodes_2x2.json")
    _ops(moved, 3, 2)[2]["tbg_info"] = {"tb_id": 0, "tbg_size": 3}
    report = verify_plan(moved)
    assert any(f.kind == "race" and "gpu 3 threadblock 2 op 2" in f.ops for f in report.findings), report.text()


def test_a_packet_no_op_reads_is_a_hint_not_a_problem() -> None:
    # The DSL fuses reduce + copy_packets + read_put_packets into one recspkt, which keeps a packet copy the plan
    # never reads (mscclpp test/executor-tests/algos/reduce_pack.py).
    report = verify_plan(load("executor_reduce_pack_2gpu.json"))
    assert report.ok, report.text()
    (hint,) = [h for h in report.hints if h.kind == "dead_packet"]
    assert hint.ops == ("gpu 1 threadblock 1 op 0",) and "gpu 1 ps[2]" in hint.message
    from_plan(load("executor_reduce_pack_2gpu.json"))


def test_a_test_plan_reads_the_packets_its_harness_provides_but_a_collective_waits_for_its_own() -> None:
    probe = load("unit_reduce_packets_test.json")  # repkt of scratch packets no op of the plan writes
    got = read_plan(probe)
    assert got.schedule is not None and not [p for p in got.problems if p.kind == "deadlock"]
    # A collective's packets come from its own ops: the same read there is a deadlock, named by the packet's slot.
    plan = load("allreduce_pkt_8gpu.json")
    for tb in plan["gpus"][0]["threadblocks"]:
        tb["ops"] = [o for o in tb["ops"] if o["name"] != "ppkt"]
    for g in plan["gpus"][1:]:
        for tb in g["threadblocks"]:
            tb["ops"] = [o for o in tb["ops"]
                         if not (o["name"] in ("ppkt", "respkt") and any("buffer_id" in d for d in o["dst_buff"]))]
    problems = read_plan(plan).problems
    assert problems and problems[0].kind == "deadlock" and "waits for a packet in gpu 0 ps[" in problems[0].message


def test_a_scratch_packet_is_named_as_one_in_a_test_plan() -> None:
    # The test layout keeps an empty output region where the packet space starts: the name is the packet slot's.
    report = verify_plan(load("unit_reduce_send_packet_test.json"))
    messages = " ".join(f.message for f in (*report.findings, *report.hints))
    assert "gpu 1 ps[3]" in messages and " o[" not in messages
