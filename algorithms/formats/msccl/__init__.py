"""MSCCL-IR XML interop: import the field's schedules, export ours, and check that a file can run.

MSCCL-IR (msccl-tools' MSCCLang, TACCL, TE-CCL and ForestColl emit it; Microsoft's
MSCCL executor for NCCL and AMD's RCCL run it) describes a collective as, per GPU,
thread blocks that each run a list of steps in order, with waits on other thread
blocks of the same GPU. docs/design.md ("MSCCL-IR mapping") describes the mapping
onto collsched's steps in full. The package owns that format, one concern a module:

- ``program``: the program model (``Program``, ``ProgramGpu``, ``ProgramTb``,
  ``ProgramStep``), the format's constants and the parser (``parse_msccl``).
- ``execution``: running a program as the runtime would (message matching,
  bounded buffering) and its happens-before graph over collsched slots, shared
  by the reader and the check.
- ``reader``: import as a ``Schedule`` (``load_msccl``, ``loads_msccl``, ``to_schedule``).
- ``check``: the static executability check (``check_msccl``, ``Finding``).
- ``writer``: export (``dumps_msccl``, ``save_msccl``, ``stage_reductions``).

Every failure on bad input is a ``ScheduleError``. Nothing here imports torch.
"""

from algorithms.formats.msccl.check import Finding, check_msccl
from algorithms.formats.msccl.program import (
    COLLS,
    MAX_CNT,
    PROTO_SLOTS,
    Program,
    ProgramGpu,
    ProgramStep,
    ProgramTb,
    looks_like_xml,
    parse_msccl,
)
from algorithms.formats.msccl.reader import load_msccl, loads_msccl, to_schedule
from algorithms.formats.msccl.writer import dumps_msccl, save_msccl, stage_reductions

__all__ = [
    "Finding", "Program", "ProgramGpu", "ProgramTb", "ProgramStep",
    "parse_msccl", "load_msccl", "loads_msccl", "to_schedule", "check_msccl", "dumps_msccl", "save_msccl",
    "looks_like_xml", "stage_reductions", "COLLS", "MAX_CNT", "PROTO_SLOTS",
]
