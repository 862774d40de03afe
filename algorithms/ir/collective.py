"""Collectives and their buffers: the kinds, buffers and ops, the ``Collective`` value, all-to-allv traffic
matrices, and the limits on a schedule's size.

A collective is ``(kind, ranks p, chunks C, root)`` (all-to-allv adds a traffic
matrix T, p x p chunk counts); every rank has the buffers
``input``, ``output`` and ``scratch``, each an array of chunks, sized by the
table in docs/design.md ("Collectives and buffers").

For the in-place kinds (allreduce, broadcast, reduce, barrier) the output *is*
the input: a transfer may name either buffer and both address the same slots.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from algorithms.errors import ScheduleError

__all__ = [
    "Kind",
    "Buf",
    "Op",
    "Collective",
    "ROOTED_KINDS",
    "IN_PLACE_KINDS",
    "MAX_RANKS",
    "MAX_SLOTS",
    "Matrix",
    "check_matrix",
]


class Kind(StrEnum):
    """The ten collective kinds."""

    ALLREDUCE = "allreduce"
    ALLGATHER = "allgather"
    REDUCESCATTER = "reducescatter"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    SCATTER = "scatter"
    GATHER = "gather"
    ALLTOALL = "alltoall"
    BARRIER = "barrier"
    ALLTOALLV = "alltoallv"


class Buf(StrEnum):
    """The three per-rank buffers."""

    INPUT = "input"
    OUTPUT = "output"
    SCRATCH = "scratch"


class Op(StrEnum):
    """What a transfer does to its destination: overwrite, or combine with ⊕."""

    COPY = "copy"
    REDUCE = "reduce"


ROOTED_KINDS = frozenset({Kind.BROADCAST, Kind.REDUCE, Kind.SCATTER, Kind.GATHER})
IN_PLACE_KINDS = frozenset({Kind.ALLREDUCE, Kind.BROADCAST, Kind.REDUCE, Kind.BARRIER})
# Kinds whose input buffer is p·C chunks rather than C.
_WIDE_INPUT = frozenset({Kind.REDUCESCATTER, Kind.SCATTER, Kind.ALLTOALL})
_WIDE_OUTPUT = frozenset({Kind.ALLGATHER, Kind.GATHER, Kind.ALLTOALL})
Matrix = tuple[tuple[int, ...], ...]
"""An all-to-allv traffic matrix: ``T[i][j]`` chunks go from rank i to rank j (row i is rank i's input)."""


MAX_RANKS = 1 << 16
"""Largest world size a schedule may have."""
MAX_SLOTS = 1 << 27
"""Largest number of chunk slots, over all ranks and buffers, that a schedule may address.
It bounds what the verifier and simulator allocate (about 1 GiB of state at the limit)."""


def _check_int(value: object, name: str, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ScheduleError(f"{name} must be an integer, got {value!r}")
    if value < low:
        raise ScheduleError(f"{name} must be >= {low}, got {value}")
    if high is not None and value > high:
        raise ScheduleError(f"{name} must be <= {high}, got {value}")
    return value


@dataclass(frozen=True, slots=True)
class Collective:
    """A collective operation: its kind, world size, chunk count, root and (all-to-allv) traffic matrix.

    ``chunks`` is C in the buffer table; ``root`` is required for the rooted
    kinds (broadcast, reduce, scatter, gather) and must be None for the others.
    ``matrix`` is required for all-to-allv and None for the others: a p x p
    tuple of non-negative chunk counts, ``matrix[i][j]`` chunks from rank i to
    rank j (lists are accepted and stored as tuples); all-to-allv has ``chunks == 1``.
    """

    kind: Kind
    ranks: int
    chunks: int = 1
    root: int | None = None
    matrix: Matrix | None = None
    # Exclusive prefix sums of the matrix (rows: send offsets; columns: receive offsets), kept for speed.
    _offsets: tuple[np.ndarray, np.ndarray] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            kind = Kind(self.kind)
        except ValueError:
            names = ", ".join(k.value for k in Kind)
            raise ScheduleError(f"collective.kind: unknown kind {self.kind!r} (one of {names})") from None
        object.__setattr__(self, "kind", kind)
        _check_int(self.ranks, "collective.ranks", 1, MAX_RANKS)
        _check_int(self.chunks, "collective.chunks", 1, MAX_SLOTS // self.ranks)
        if kind is Kind.BARRIER and self.chunks != 1:
            raise ScheduleError(f"collective.chunks: a barrier has exactly 1 chunk, got {self.chunks}")
        if kind in ROOTED_KINDS:
            if self.root is None:
                raise ScheduleError(f"collective.root: {kind} needs a root")
            _check_int(self.root, "collective.root", 0)
            if self.root >= self.ranks:
                raise ScheduleError(f"collective.root: root {self.root} out of range for {self.ranks} ranks")
        elif self.root is not None:
            raise ScheduleError(f"collective.root: {kind} has no root, got {self.root!r}")
        if kind is Kind.ALLTOALLV:
            if self.chunks != 1:
                raise ScheduleError(f"collective.chunks: an alltoallv has chunks 1 (its matrix counts the chunks), "
                                    f"got {self.chunks}")
            matrix = check_matrix(self.matrix, self.ranks)
            object.__setattr__(self, "matrix", matrix)
            t = np.array(matrix, dtype=np.int64).reshape(self.ranks, self.ranks)
            send = np.zeros((self.ranks, self.ranks + 1), dtype=np.int64)
            np.cumsum(t, axis=1, out=send[:, 1:])
            recv = np.zeros((self.ranks + 1, self.ranks), dtype=np.int64)
            np.cumsum(t, axis=0, out=recv[1:, :])
            send.flags.writeable = recv.flags.writeable = False
            object.__setattr__(self, "_offsets", (send, recv))
        elif self.matrix is not None:
            raise ScheduleError(f"collective.matrix: only an alltoallv has a traffic matrix, not {kind}")

    @property
    def in_place(self) -> bool:
        """True when the output buffer is the input buffer."""
        return self.kind in IN_PLACE_KINDS

    def input_chunks(self, rank: int) -> int:
        """Size of ``rank``'s input buffer in chunks."""
        if self._offsets is not None:
            return int(self._offsets[0][rank, -1])
        if self.kind is Kind.SCATTER and rank != self.root:
            return 0
        return self.ranks * self.chunks if self.kind in _WIDE_INPUT else self.chunks

    def output_chunks(self, rank: int) -> int:
        """Size of ``rank``'s output buffer in chunks (the input's, for in-place kinds)."""
        if self._offsets is not None:
            return int(self._offsets[1][-1, rank])
        if self.in_place:
            return self.input_chunks(rank)
        if self.kind is Kind.GATHER and rank != self.root:
            return 0
        return self.ranks * self.chunks if self.kind in _WIDE_OUTPUT else self.chunks

    def traffic(self) -> np.ndarray:
        """The p x p traffic matrix in chunks (int64, read-only): alltoallv's matrix, or C everywhere for alltoall."""
        if self._offsets is not None:
            t = np.diff(self._offsets[0], axis=1)
        elif self.kind is Kind.ALLTOALL:
            t = np.full((self.ranks, self.ranks), self.chunks, dtype=np.int64)
        else:
            raise ScheduleError(f"collective: {self.kind} has no traffic matrix (alltoall and alltoallv do)")
        t.flags.writeable = False
        return t

    def block(self, src: int, dst: int) -> int:
        """Chunks that ``src`` sends to ``dst`` (alltoall: C; alltoallv: ``matrix[src][dst]``)."""
        return self.send_offset(src, dst + 1) - self.send_offset(src, dst)

    def send_offset(self, src: int, dst: int) -> int:
        """Where the block for ``dst`` starts in ``src``'s input (``dst == p``: the input's size).

        Rank i's input is its matrix row in rank order; alltoall's is p blocks of C.
        """
        if self._offsets is not None:
            return int(self._offsets[0][src, dst])
        self._exchange()
        return dst * self.chunks

    def recv_offset(self, dst: int, src: int) -> int:
        """Where the block from ``src`` starts in ``dst``'s output (``src == p``: the output's size).

        Rank j's output is its matrix column in source order; alltoall's is p blocks of C.
        """
        if self._offsets is not None:
            return int(self._offsets[1][src, dst])
        self._exchange()
        return src * self.chunks

    def _exchange(self) -> None:
        if self.kind is not Kind.ALLTOALL:
            raise ScheduleError(f"collective: {self.kind} has no per-pair blocks (alltoall and alltoallv do)")

    def describe(self) -> str:
        """One line such as ``allreduce p=4 C=4``, ``broadcast p=8 C=1 root=3`` or ``alltoallv p=4 T=24 chunks``."""
        if self._offsets is not None:
            return f"{self.kind} p={self.ranks} T={int(self._offsets[0][:, -1].sum())} chunks"
        root = f" root={self.root}" if self.root is not None else ""
        return f"{self.kind} p={self.ranks} C={self.chunks}{root}"


def check_matrix(matrix: object, ranks: int) -> Matrix:
    """``matrix`` as a tuple of ``ranks`` rows of ``ranks`` integers >= 0; ``ScheduleError`` names the bad row."""
    if matrix is None:
        raise ScheduleError("collective.matrix: an alltoallv needs a traffic matrix")
    if isinstance(matrix, np.ndarray):
        if matrix.dtype.kind not in "iu" and matrix.size:
            raise ScheduleError(f"collective.matrix: must hold integers, got an array of {matrix.dtype}")
        matrix = matrix.tolist()
    if isinstance(matrix, str | bytes) or not isinstance(matrix, Iterable):
        raise ScheduleError(f"collective.matrix: must be {ranks} rows of {ranks} integers, got {type(matrix).__name__}")
    rows = list(matrix)
    if len(rows) != ranks:
        raise ScheduleError(f"collective.matrix: has {len(rows)} rows, expected {ranks} (one per rank)")
    out: list[tuple[int, ...]] = []
    total = 0
    for i, row in enumerate(rows):
        if isinstance(row, np.ndarray):
            row = row.tolist()
        if isinstance(row, str | bytes) or not isinstance(row, Iterable):
            raise ScheduleError(f"collective.matrix row {i}: must be a list of {ranks} integers, "
                                f"got {type(row).__name__}")
        entries = tuple(row)
        if len(entries) != ranks:
            raise ScheduleError(f"collective.matrix row {i}: has {len(entries)} entries, expected {ranks} "
                                f"(one per rank)")
        for j, v in enumerate(entries):
            if isinstance(v, np.integer):
                v = int(v)
            if v.__class__ is not int or v < 0:
                raise ScheduleError(f"collective.matrix row {i}: entry {j} is {v!r}, must be an integer >= 0")
            total += v
        if total > MAX_SLOTS:
            raise ScheduleError(f"collective.matrix row {i}: the matrix holds over {MAX_SLOTS} chunks, the limit")
        out.append(tuple(int(v) for v in entries))
    return tuple(out)



def _buffer_chunks(coll: Collective, scratch_chunks: int, rank: int, buf: Buf) -> int:
    """Size of one buffer of one rank, in chunks, when every rank has ``scratch_chunks`` of scratch."""
    if buf is Buf.SCRATCH:
        return scratch_chunks
    return coll.input_chunks(rank) if buf is Buf.INPUT else coll.output_chunks(rank)
