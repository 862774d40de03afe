"""A schedule's symmetric form: a group of torus translations it is invariant under, and the transfers of one
source rank per orbit, so that a simulator can time it without building every transfer.

A *translation* g of the torus ``dims`` (row-major ranks, as ``torus:RxC`` numbers them) moves the rank at
coordinates x to x + g (mod dims), and slot (rank r, buffer b, index i) to (r + g, b, ``chunk_map(g, b, i)``).
The schedule is *invariant* under a group G of translations when, step by step, moving every transfer of the
step by any g in G gives the step's transfers again (chunk by chunk). G acts freely on ranks, so every orbit of
transfers holds exactly one transfer whose source is a *representative* (the smallest rank of its orbit):
``transfers(representatives)`` is the schedule's ``Columns`` with those transfers only, every step kept in its
place (columns, not a ``Schedule``: the whole schedule may address more slots than a ``Schedule`` may hold,
as the synchronized bucket's scratch does on torus:64x64).

``sim.engine.symmetric`` times that partial schedule on the quotient (slots, links and ports up to G); the
result equals the explicit simulation's (docs/design.md, "Simulation by symmetry"). The library's torus
algorithms give their forms through the registry (``Algorithm.symmetric_form``); ``restrict`` turns a built
schedule into the partial one, for forms whose full schedule is cheap to build.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from algorithms.errors import ScheduleError
from algorithms.ir import Buf, Collective, Columns, Schedule

__all__ = ["ChunkMap", "SymmetricForm", "identity_chunks", "restrict"]

ChunkMap = Callable[[tuple[int, ...], Buf, np.ndarray], np.ndarray]
"""``chunk_map(g, buffer, indices)``: where translation g moves each of ``indices`` of ``buffer``."""


def identity_chunks(g: tuple[int, ...], buf: Buf, index: np.ndarray) -> np.ndarray:
    """The chunk map of a schedule whose translations leave every chunk index alone."""
    return index


@dataclass(frozen=True, eq=False)
class SymmetricForm:
    """A schedule given by its symmetry (module docstring): the collective, the torus, the group's generators
    (translation vectors, one entry per dimension), how a translation moves chunk indices, the partial
    schedule of given source ranks, and the full schedule (built only for the explicit fallback)."""

    name: str
    collective: Collective
    dims: tuple[int, ...]
    generators: tuple[tuple[int, ...], ...]
    transfers: Callable[[np.ndarray], Columns] = field(repr=False)
    """The schedule's transfers whose source is one of the given ranks, every step in its place."""
    build: Callable[[], Schedule] = field(repr=False)
    """The whole schedule."""
    chunk_map: ChunkMap = field(default=identity_chunks, repr=False)
    scratch_chunks: int = 0
    """The whole schedule's scratch chunks per rank."""

    def __post_init__(self) -> None:
        if math.prod(self.dims) != self.collective.ranks:
            raise ScheduleError(f"symmetric form {self.name}: torus {'x'.join(map(str, self.dims))} holds "
                                f"{math.prod(self.dims)} ranks, the collective {self.collective.ranks}")
        for g in self.generators:
            if len(g) != len(self.dims):
                raise ScheduleError(f"symmetric form {self.name}: generator {g} has {len(g)} entries for a torus "
                                    f"of {len(self.dims)} dimensions")

    @property
    def ranks(self) -> int:
        """The world size p."""
        return self.collective.ranks


def restrict(schedule: Schedule, sources: np.ndarray) -> Columns:
    """``schedule``'s columns with only the transfers whose source is in ``sources``, each step in its place
    (a step left empty stays, empty, so that step numbers agree with the whole schedule)."""
    cols = schedule.columns()
    keep = np.isin(cols.src, np.asarray(sources))
    kept_before = np.r_[0, np.cumsum(keep)]
    arrays = {f: getattr(cols, f)[keep] for f in Columns._fields[:-1]}
    return Columns(**arrays, step_offsets=kept_before[cols.step_offsets])
