"""collsched's schedule IR, collective specifications and algorithm library.

Importing the package registers every algorithm; ``registry.algorithms()``
lists them. This package never imports torch.
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
