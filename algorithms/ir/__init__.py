"""The schedule IR: collectives, transfers, steps and schedules as immutable values.

A collective is ``(kind, ranks p, chunks C, root)`` (all-to-allv adds a traffic
matrix T, p x p chunk counts); every rank has the buffers
``input``, ``output`` and ``scratch``, each an array of chunks, sized by the
table in docs/design.md ("Collectives and buffers"). A transfer moves
``count`` contiguous chunks from one (rank, buffer, index) to another with op
``copy`` or ``reduce``; a step is a set of transfers that run concurrently; a
schedule is an ordered tuple of steps.

For the in-place kinds (allreduce, broadcast, reduce, barrier) the output *is*
the input: a transfer may name either buffer and both address the same slots.

Import the names from here (``from algorithms.ir import Schedule``); the modules own:

- ``collective``: ``Kind``, ``Buf``, ``Op``, ``Collective`` and its buffer sizes, ``ROOTED_KINDS``,
  ``IN_PLACE_KINDS``, the all-to-allv ``Matrix`` and ``check_matrix``, the limits ``MAX_RANKS`` and ``MAX_SLOTS``;
- ``transfer``: ``Transfer`` and ``Step``;
- ``schedule``: ``Schedule``, its numpy ``Columns`` with their codes ``BUFS`` and ``OPS``, the checks of
  transfers against a collective, and ``switch_ops_by_step``;
- ``switch``: the switch operations ``SwitchOpKind``, ``Endpoint``, ``SwitchOp``, and their checks against a
  collective.

They build on each other in that order (``schedule`` uses ``switch``); none imports this package.
"""

from algorithms.ir.collective import (
    IN_PLACE_KINDS,
    MAX_RANKS,
    MAX_SLOTS,
    ROOTED_KINDS,
    Buf,
    Collective,
    Kind,
    Matrix,
    Op,
    check_matrix,
)
from algorithms.ir.schedule import BUFS, OPS, Columns, Schedule, switch_ops_by_step
from algorithms.ir.switch import Endpoint, SwitchOp, SwitchOpKind
from algorithms.ir.transfer import Step, Transfer

__all__ = [
    "Kind",
    "Buf",
    "Op",
    "Collective",
    "Transfer",
    "Step",
    "Schedule",
    "Columns",
    "BUFS",
    "OPS",
    "ROOTED_KINDS",
    "IN_PLACE_KINDS",
    "MAX_RANKS",
    "MAX_SLOTS",
    "Endpoint",
    "SwitchOpKind",
    "SwitchOp",
    "switch_ops_by_step",
    "Matrix",
    "check_matrix",
]
