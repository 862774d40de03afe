"""The MSCCL++ plan writer's in-place and LL forms: every plan it writes verifies after a round trip through the
reader, and computes the collective in an adversarial executor.

References, none of them the code under test: the collectives' postconditions (``sim.verify.plan``, which reads
the plan back), ``sim.verify.plan_machine`` (an executor of the raw JSON sharing no code with the writer or the
reader), and the DSL's in-place layout (mscclpp python/mscclpp/language/collectives.py, ``get_buffer_index``)
written out by hand below.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from algorithms import build
from algorithms.errors import ScheduleError
from algorithms.formats import load
from algorithms.formats.mscclpp import dumps_plan, from_plan, to_plan
from sim.cli import main
from sim.verify import verify
from sim.verify.plan import verify_plan
from sim.verify.plan_machine import outcome_changed
from tests.algorithms import switch_cases
from tests.algorithms.formats.mscclpp_corpus import COLLECTIVES, CORPUS
from tests.algorithms.formats.mscclpp_corpus import load as load_plan_json

COVERED = [
    ("allreduce", "ring"), ("allreduce", "direct"), ("allgather", "ring"), ("allgather", "direct"),
    ("reducescatter", "ring"), ("reducescatter", "direct"), ("allreduce", "recursive_doubling"),
    ("alltoall", "direct"), ("broadcast", "binomial"), ("reduce", "binomial"),
]
ALIASED = ("allgather", "reducescatter", "alltoall")


def _letters(plan: dict[str, Any]) -> set[str]:
    """The local buffer letters the plan's ops name."""
    return {b["type"] for g in plan["gpus"] for tb in g["threadblocks"] for op in tb["ops"]
            for b in op.get("src_buff", []) + op.get("dst_buff", []) if "type" in b}


def _cases() -> list[tuple[str, str, int, bool | None, str, int | None]]:
    out = []
    for kind, algorithm in COVERED:
        for p in (2, 3, 4, 8):
            for inplace in ((None, True) if kind in ALIASED else (None,)):
                for protocol in ("Simple", "LL"):
                    for per_node in ((None, 2) if p % 2 == 0 else (None,)):
                        out.append((kind, algorithm, p, inplace, protocol, per_node))
    return out


@pytest.mark.parametrize(("kind", "algorithm", "p", "inplace", "protocol", "per_node"), _cases())
def test_every_plan_the_writer_writes_verifies_after_a_round_trip(kind: str, algorithm: str, p: int,
                                                                    inplace: bool | None, protocol: str,
                                                                    per_node: int | None) -> None:
    s = build(kind, algorithm, p)
    plan = json.loads(dumps_plan(s, inplace=inplace, protocol=protocol, ranks_per_node=per_node))
    assert plan["protocol"] == protocol and plan["inplace"] is (bool(inplace) or s.collective.in_place)
    report = verify_plan(plan)
    assert report.ok, report.text()
    back = from_plan(plan)
    assert back.collective == s.collective and verify(back).ok
    if p <= 4:
        assert outcome_changed(plan, seeds=3) is None


@pytest.mark.parametrize("kind", ALIASED)
def test_in_place_plans_have_the_dsls_layout(kind: str) -> None:
    p, c = 4, 1
    plan = to_plan(build(kind, "direct", p), inplace=True)
    g = plan["gpus"][0]
    sizes = (g["input_chunks"], g["output_chunks"])
    assert sizes == {"allgather": (c, p * c), "reducescatter": (p * c, c), "alltoall": (p * c, p * c)}[kind]
    # One buffer: an all-gather names only its output, the others only their input (and scratch).
    assert _letters(plan) - {"s"} == ({"o"} if kind == "allgather" else {"i"})


def test_ll_plans_move_data_in_packets_with_no_signal() -> None:
    plan = to_plan(build("allreduce", "ring", 4), protocol="LL")
    names = {op["name"] for g in plan["gpus"] for tb in g["threadblocks"] for op in tb["ops"]}
    assert names <= {"ppkt", "upkt", "repkt", "copy", "re", "nop"} and {"ppkt", "upkt", "repkt"} <= names
    assert plan["use_double_scratch_buffer"] is True
    across = to_plan(build("allgather", "ring", 4), protocol="LL", ranks_per_node=2)
    port = [op for g in across["gpus"] for tb in g["threadblocks"] for op in tb["ops"]
            if op.get("channel_type") == "port"]
    assert port and {op["name"] for op in port} == {"ppkt"}


def test_ll_packets_sit_after_the_plain_scratch() -> None:
    s = build("allreduce", "recursive_doubling", 2)  # staged through scratch: plain scratch chunks in use
    plan = to_plan(s, protocol="LL")
    plain = max((b["index"] + b["size"] for g in plan["gpus"] for tb in g["threadblocks"] for op in tb["ops"]
                 if op["name"] in ("copy", "re") for b in op["src_buff"] + op["dst_buff"] if b.get("type") == "s"),
                default=0)
    packets = [b["index"] for g in plan["gpus"] for tb in g["threadblocks"] for op in tb["ops"]
               if op["name"] in ("upkt", "repkt") for b in op["src_buff"][op["name"] == "repkt":]]
    assert plain > 0 and min(packets) * 2 >= plain  # packet slot k is at plain offset 2k
    assert verify_plan(plan).ok


def test_what_the_writer_cannot_write_is_refused() -> None:
    with pytest.raises(ScheduleError, match="LL plans carry no switch operations"):
        to_plan(switch_cases.nvls_allreduce(4), protocol="LL")
    with pytest.raises(ScheduleError, match="protocol 'LL128'"):
        to_plan(build("allreduce", "ring", 4), protocol="LL128")
    with pytest.raises(ScheduleError, match="allreduce is in place; it has no out-of-place plan"):
        to_plan(build("allreduce", "ring", 4), inplace=False)


@pytest.mark.parametrize("p", (2, 4))
def test_switch_schedules_still_round_trip_in_place(p: int) -> None:
    for s in switch_cases.every(p, chunks=2):
        assert verify_plan(to_plan(s, inplace=s.collective.kind.value in ALIASED or None)).ok, s.name


# ------------------------------------------------------------------ the command line: export and convert


def test_export_writes_ll_and_in_place_plans(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ag.json"
    assert main(["export", "-c", "allgather", "-a", "ring", "-p", "4", "--format", "mscclpp", "--proto", "LL",
                 "--inplace", "-o", str(out)]) == 0
    plan = json.loads(out.read_text())
    assert plan["protocol"] == "LL" and plan["inplace"] is True and verify_plan(plan).ok
    assert main(["export", "-c", "allgather", "-a", "ring", "-p", "4", "--inplace", "-o", str(out)]) == 2
    assert "--inplace is for MSCCL++ plans" in capsys.readouterr().err
    assert main(["export", "-c", "allgather", "-a", "ring", "-p", "4", "--format", "mscclpp", "--proto", "LL128",
                 "-o", str(out)]) == 2
    assert "MSCCL++ plans run Simple or LL" in capsys.readouterr().err


def test_convert_takes_an_mscclpp_plan_to_collsched_msccl_ir_and_back(tmp_path: Path) -> None:
    src = CORPUS / "allreduce_pkt_4gpu.json"
    as_json, as_xml, as_plan = tmp_path / "s.json", tmp_path / "s.xml", tmp_path / "p.json"
    assert main(["convert", str(src), str(as_json)]) == 0
    assert verify(load(as_json)).ok and json.loads(as_json.read_text())["format"].startswith("collsched.schedule")
    assert main(["convert", str(src), str(as_xml)]) == 0
    assert 'proto="LL"' in as_xml.read_text().splitlines()[0] and verify(load(as_xml)).ok
    assert main(["convert", str(src), str(as_plan), "--format", "mscclpp"]) == 0
    assert json.loads(as_plan.read_text())["protocol"] == "LL" and verify_plan(as_plan).ok
    # In place stays in place; a plan MSCCL-IR cannot hold (switch channels) is refused by name.
    assert main(["convert", str(CORPUS / "allgather_2gpu.json"), str(as_plan), "--format", "mscclpp"]) == 0
    assert json.loads(as_plan.read_text())["inplace"] is True
    assert main(["convert", str(CORPUS / "allreduce_nvls_zero_copy_4gpu.json"), str(as_xml)]) == 2


@pytest.mark.parametrize("name", COLLECTIVES)
@pytest.mark.parametrize("protocol", ("Simple", "LL"))
def test_mscclpps_own_plans_written_back_verify(name: str, protocol: str) -> None:
    original = load_plan_json(name)
    s = from_plan(original)
    if protocol == "LL" and s.switch_ops:
        pytest.skip("LL plans carry no switch operations")
    inplace = bool(original["inplace"]) or None
    plan = to_plan(s, inplace=inplace if not s.collective.in_place else None, protocol=protocol)
    assert plan["inplace"] is bool(original["inplace"] or s.collective.in_place)
    report = verify_plan(plan)
    assert report.ok, report.text()
