"""MSCCL++ execution plans: write collsched schedules as the JSON MSCCL++'s executor runs, and read the plans it
writes (its DSL's output included) as collsched schedules.

MSCCL++ (microsoft/mscclpp) runs a collective from an *execution plan*: per GPU, thread blocks that run
ops on the input, output and scratch buffers, through memory channels (NVLink/PCIe peer access), port
channels (a proxy, e.g. over InfiniBand) and switch channels (NVLink SHARP multicast objects).
docs/design.md ("MSCCL++ execution plans") gives the mapping. One concern a module:

- ``plan``: the format's names, the content sniff (``looks_like_plan``) and the checked view (``parse_plan``);
- ``ops``: what each data op does (``effect_of``), in the plan's own terms;
- ``buffers``: where a plan's buffers sit in collsched's (in-place aliasing, packets, thread-block groups);
- ``replay``: the plan run on the happens-before of its synchronisation: levels, deadlocks, races;
- ``staging``: ``stage_reads``, the schedule in the form the writer maps op for op;
- ``writer``: ``to_plan``, ``dumps_plan``, ``save_plan``;
- ``reader``: ``read_plan``, ``from_plan``, ``loads_plan``, ``load_plan``.

Every failure on bad input is a ``ScheduleError`` naming the gpu, thread block, op and field. Nothing here
imports torch.
"""

from algorithms.formats.mscclpp.plan import ExecutionPlan, looks_like_plan, parse_plan
from algorithms.formats.mscclpp.reader import ReadPlan, from_plan, load_plan, loads_plan, read_plan
from algorithms.formats.mscclpp.staging import stage_reads
from algorithms.formats.mscclpp.writer import PLAN_KINDS, dumps_plan, save_plan, to_plan

__all__ = ["ExecutionPlan", "PLAN_KINDS", "ReadPlan", "dumps_plan", "from_plan", "load_plan", "loads_plan",
           "looks_like_plan", "parse_plan", "read_plan", "save_plan", "stage_reads", "to_plan"]
