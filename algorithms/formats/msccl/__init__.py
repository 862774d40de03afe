"""MSCCL-IR XML interop (being split into modules; for now everything lives in ``execution``)."""

from algorithms.formats.msccl.execution import (
    COLLS,
    MAX_CNT,
    PROTO_SLOTS,
    Finding,
    Program,
    ProgramGpu,
    ProgramStep,
    ProgramTb,
    check_msccl,
    dumps_msccl,
    load_msccl,
    loads_msccl,
    looks_like_xml,
    parse_msccl,
    save_msccl,
    stage_reductions,
    to_schedule,
)

__all__ = [
    "Finding", "Program", "ProgramGpu", "ProgramTb", "ProgramStep",
    "parse_msccl", "load_msccl", "loads_msccl", "to_schedule", "check_msccl", "dumps_msccl", "save_msccl",
    "looks_like_xml", "stage_reductions", "COLLS", "MAX_CNT", "PROTO_SLOTS",
]
