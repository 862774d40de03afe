"""collsched's schedule IR, collective specifications and algorithm library.

- ``ir``: the schedule IR (``Kind``, ``Buf``, ``Op``, ``Collective``, ``Transfer``, ``Step``, ``Schedule``);
- ``builder``: ``ScheduleBuilder``, to write a schedule step by step;
- ``registry``: ``register``, ``get``, ``build``: the library's index, parameters and closed-form costs;
- ``formats``: schedule files (``load``, ``save``: collsched.schedule/1 JSON and MSCCL-IR XML);
- ``library``: the built-in algorithms, one module per kind.

Importing the package registers every algorithm; ``registry.algorithms()``
lists them. This package never imports torch or ``sim``.

Register an algorithm and build it by name:

>>> @register(Kind.BROADCAST, "doc-chain", source="a chain, for the example")
... def chain(ranks: int, *, chunks: int = 1, root: int | None = 0) -> Schedule:
...     b = ScheduleBuilder(Collective(Kind.BROADCAST, ranks, 1, root=0), "doc-chain")
...     for r in range(ranks - 1):
...         with b.step():
...             b.copy(r, r + 1, 0)
...     return b.build()
>>> build("broadcast", "doc-chain", 4).num_transfers
3
"""

from algorithms import library  # noqa: F401  (registration: importing the library registers every algorithm)
from algorithms.builder import ScheduleBuilder
from algorithms.errors import CollschedError, RegistryError, ScheduleError
from algorithms.formats import load, loads, save
from algorithms.ir import Buf, Collective, Kind, Op, Schedule, Step, Transfer
from algorithms.registry import Algorithm, Cost, Parameter, algorithms, build, get, register

__all__ = [
    "Algorithm", "Buf", "Collective", "CollschedError", "Cost", "Kind", "Op", "Parameter",
    "RegistryError", "Schedule", "ScheduleBuilder", "ScheduleError", "Step", "Transfer",
    "algorithms", "build", "get", "load", "loads", "register", "save",
]
