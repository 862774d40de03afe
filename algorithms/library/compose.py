"""Per-dimension composition: run 1-D algorithms on every line of a grid of ranks at once.

A ``Grid(dims)`` numbers ranks row-major, the last dimension fastest, as
``sim.topology.torus(rows, cols)`` numbers its nodes (rank = row·cols + col,
so ``Grid((rows, cols))``; dimension 0 is the rows' index, dimension 1 the
columns'). A *line* along dimension d is the ``dims[d]`` ranks that differ
only in coordinate d, in coordinate order.

Which chunks a line works on is a ``Layout``: one ``(start, count)`` region
per rank. ``whole(grid, C)`` gives every rank the whole buffer;
``grid.split(layout, d)`` is what a reduce-scatter along d leaves: each
rank's region cut into ``dims[d]`` equal blocks, the rank at coordinate c
keeping block c (the hierarchical chunk arithmetic: after a reduce-scatter
along x each rank owns 1/X of its region, which then goes through y).

``along(grid, d, line, layout)`` embeds a 1-D schedule ``line`` of
``dims[d]`` ranks (an all-reduce, a reduce-scatter or an all-gather:
``ring_allreduce``, ``ring_reducescatter``, ``ring_allgather`` below, or any
registered builder's schedule) on every line along d at once, inside each
line's region, and returns its steps (a ``Phase``: a list of steps, each a
list of transfers). ``parallel(*phases)`` runs phases side by side (step i
is every phase's step i), ``emit(builder, phase)`` appends the steps.
``butterfly(matchings, ...)`` builds recursive halving and doubling over any
sequence of perfect matchings (Swing's, recursive doubling's, or one
dimension after another); ``fold(p, C)`` is the pre- and post-step that let
a power-of-two algorithm serve any p (``algorithms.library.fold``).

A 2-D torus all-reduce, reduce-scatter along x, all-reduce along y,
all-gather along x (the bucket algorithm), in a few lines:

>>> from algorithms.builder import ScheduleBuilder
>>> from algorithms.ir import Collective, Kind
>>> from sim.verify import verify
>>> g = Grid((4, 4))             # torus:4x4; dimension 1 is x, 0 is y
>>> b = ScheduleBuilder(Collective(Kind.ALLREDUCE, g.ranks, 16), "bucket")
>>> full = whole(g, 16)          # every rank: chunks 0..15
>>> mine = g.split(full, 1)      # what rank (y, x) owns after the reduce-scatter along x
>>> emit(b, along(g, 1, ring_reducescatter(4), full))
>>> emit(b, along(g, 0, ring_allreduce(4), mine))
>>> emit(b, along(g, 1, ring_allgather(4), full))
>>> s = b.build()
>>> verify(s).ok, len(s.steps)
(True, 12)

The embedding identifies a reduce-scatter's output slot j on line position
i with its input slot i·C + j (an all-gather's input slot j with its output
slot i·C + j), so the local copy between them vanishes; that is right for
schedules that leave that input slot alone once the output is written, as
the library's do. Schedules with scratch are refused. Verify the composite.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from algorithms.builder import ScheduleBuilder
from algorithms.errors import ScheduleError
from algorithms.ir import Buf, Collective, Kind, Op, Schedule, Transfer
from algorithms.library.fold import pow2floor

__all__ = ["Grid", "Layout", "Phase", "Region", "along", "butterfly", "butterfly_in_order", "butterfly_sets", "emit",
           "fold", "parallel", "ring_allgather", "ring_allreduce", "ring_reducescatter", "whole"]

Region = tuple[int, int]
"""(start, count): a contiguous run of chunks."""
Layout = tuple[Region, ...]
"""One region per rank: the chunks that rank works on."""
Phase = list[list[Transfer]]
"""Steps of transfers, not yet in a builder."""

_IN_PLACE = (Kind.ALLREDUCE, Kind.BROADCAST, Kind.REDUCE)


@dataclass(frozen=True)
class Grid:
    """Ranks on a grid of ``dims``, row-major (the last dimension varies fastest)."""

    dims: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.dims or any(isinstance(q, bool) or not isinstance(q, int) or q < 1 for q in self.dims):
            raise ScheduleError(f"grid dims must be integers >= 1, got {self.dims!r}")

    @classmethod
    def parse(cls, text: str) -> Grid:
        """``"4x4"`` (or ``"2x4x4"``, ``"8"``): the grid those sizes name."""
        if not re.fullmatch(r"\s*[0-9]+(\s*x\s*[0-9]+)*\s*", text):
            raise ScheduleError(f"dims must look like 4x4 (sizes joined by x), got {text!r}")
        return cls(tuple(int(v) for v in text.split("x")))

    @classmethod
    def auto(cls, p: int, *, pow2: bool = False) -> Grid:
        """A near-square 2-D grid of p ranks: rows the largest divisor of p not above √p.

        ``pow2`` (p a power of two): rows 2^⌊L/2⌋, columns 2^⌈L/2⌉, L = log2 p (16: 4x4, 32: 4x8).
        """
        if pow2:
            half = (p.bit_length() - 1) // 2
            return cls((1 << half, p >> half))
        rows = max(d for d in range(1, math.isqrt(p) + 1) if p % d == 0)
        return cls((rows, p // rows))

    def __str__(self) -> str:
        return "x".join(map(str, self.dims))

    @property
    def ranks(self) -> int:
        """How many ranks the grid holds."""
        return math.prod(self.dims)

    @property
    def ndim(self) -> int:
        return len(self.dims)

    def _stride(self, dim: int) -> int:
        return math.prod(self.dims[dim + 1:])

    def coords(self, rank: int) -> tuple[int, ...]:
        """The coordinates of ``rank``."""
        out = []
        for q in reversed(self.dims):
            rank, c = divmod(rank, q)
            out.append(c)
        return tuple(reversed(out))

    def rank(self, coords: Sequence[int]) -> int:
        """The rank at ``coords`` (each taken modulo its dimension: the torus wraps)."""
        r = 0
        for c, q in zip(coords, self.dims, strict=True):
            r = r * q + c % q
        return r

    def shift(self, rank: int, dim: int, delta: int) -> int:
        """The rank ``delta`` steps along ``dim`` from ``rank``, wrapping around."""
        q, stride = self.dims[dim], self._stride(dim)
        c = rank // stride % q
        return rank + ((c + delta) % q - c) * stride

    def lines(self, dim: int) -> list[list[int]]:
        """Every line along ``dim``: the ranks that differ only in coordinate ``dim``, in coordinate order."""
        q, stride = self.dims[dim], self._stride(dim)
        starts = [r for r in range(self.ranks) if r // stride % q == 0]
        return [[s + c * stride for c in range(q)] for s in starts]

    def split(self, layout: Layout, dim: int) -> Layout:
        """Each rank's region cut into ``dims[dim]`` equal blocks; the rank at coordinate c keeps block c."""
        q, stride = self.dims[dim], self._stride(dim)
        out = []
        for r, (start, count) in enumerate(layout):
            if count % q:
                raise ScheduleError(f"rank {r}: a region of {count} chunks does not split into {q} blocks")
            w = count // q
            out.append((start + r // stride % q * w, w))
        return tuple(out)


def whole(grid: Grid, chunks: int) -> Layout:
    """Every rank works on all ``chunks`` chunks."""
    return ((0, chunks),) * grid.ranks


def _line_regions(grid: Grid, dim: int, layout: Layout) -> list[tuple[list[int], Region]]:
    if len(layout) != grid.ranks:
        raise ScheduleError(f"layout has {len(layout)} regions for a grid of {grid.ranks} ranks")
    out = []
    for line in grid.lines(dim):
        regions = {layout[r] for r in line}
        if len(regions) != 1:
            raise ScheduleError(f"the ranks of line {line} along dimension {dim} work on different regions "
                                f"{sorted(regions)}")
        out.append((line, regions.pop()))
    return out


def along(grid: Grid, dim: int, line: Schedule, layout: Layout, *, split: bool = False,
          sources: frozenset[int] | None = None) -> Phase:
    """``line``, a schedule of ``dims[dim]`` ranks, run on every line along ``dim`` inside its region.

    Line position i is the rank at coordinate i. The line schedule's C chunks
    (q·C for the reduce-scatter input and the all-gather output) cover the
    region evenly, w = count / (its chunks) each, so chunk j is region chunks
    start + j·w .. +w. ``split``: one transfer per chunk (a dataflow
    execution then pipelines them) instead of one per line transfer.
    ``sources``: keep only the transfers from these ranks (a symmetric form's partial schedule,
    ``algorithms.symmetric``); its steps may then be empty, and are kept, so that they line up.
    """
    q = grid.dims[dim]
    c = line.collective
    if c.ranks != q:
        raise ScheduleError(f"line schedule {line.name!r} has {c.ranks} ranks, dimension {dim} has {q}")
    if line.scratch_chunks:
        raise ScheduleError(f"line schedule {line.name!r} uses scratch; along() embeds only input and output")
    if c.kind not in (*_IN_PLACE, Kind.REDUCESCATTER, Kind.ALLGATHER):
        raise ScheduleError(f"along() embeds all-reduce, reduce-scatter and all-gather schedules, not {c.kind}")
    wide = c.chunks * (q if c.kind in (Kind.REDUCESCATTER, Kind.ALLGATHER) else 1)

    def slot(pos: int, buf: str, index: int) -> int:
        # The line's chunk (buffer, index) at position pos, as an index of the region's chunks.
        if (c.kind is Kind.REDUCESCATTER and buf == Buf.OUTPUT) or (c.kind is Kind.ALLGATHER and buf == Buf.INPUT):
            return pos * c.chunks + index
        return index

    per_step = [[(t.src, t.dst, slot(t.src, t.src_buf, t.src_index), slot(t.dst, t.dst_buf, t.dst_index),
                  t.count, t.op) for t in step.transfers] for step in line.steps]
    phase: Phase = [[] for _ in per_step]
    for ranks, (start, count) in _line_regions(grid, dim, layout):
        if sources is not None and sources.isdisjoint(ranks):
            continue
        if count % wide:
            raise ScheduleError(f"a region of {count} chunks does not hold the {wide} chunks of {line.name!r} "
                                "evenly")
        w = count // wide
        for out, step in zip(phase, per_step, strict=True):
            for src, dst, sx, dx, n, op in step:
                if src == dst and sx == dx:
                    if op is Op.REDUCE:
                        raise ScheduleError(f"{line.name!r}: a local reduce of a slot into itself after embedding")
                    continue  # a copy between slots the embedding identifies
                a, z = ranks[src], ranks[dst]
                if sources is not None and a not in sources:
                    continue
                if split:
                    out.extend(Transfer(a, z, Buf.INPUT, start + sx * w + i, Buf.INPUT, start + dx * w + i, 1, op)
                               for i in range(n * w))
                else:
                    out.append(Transfer(a, z, Buf.INPUT, start + sx * w, Buf.INPUT, start + dx * w, n * w, op))
    if sources is not None:  # the whole schedule's empty steps are those that move nothing at all
        return [s for s, full in zip(phase, per_step, strict=True) if any(
            src != dst or sx != dx for src, dst, sx, dx, _n, _op in full)]
    return [s for s in phase if s]


def parallel(*phases: Phase) -> Phase:
    """Phases side by side: step i holds step i of every phase that has one."""
    out: Phase = []
    for phase in phases:
        for i, step in enumerate(phase):
            if i == len(out):
                out.append([])
            out[i].extend(step)
    return out


def emit(builder: ScheduleBuilder, phase: Phase, ways: Sequence[Sequence[int]] | None = None) -> None:
    """Append the phase's steps to ``builder``, one builder step per step; ``ways``: each transfer's way
    (``Schedule.ways``), shaped as the phase (None: all 0)."""
    for i, step in enumerate(phase):
        with builder.step():
            if ways is None:
                for t in step:
                    builder.add(t)
            else:
                for t, w in zip(step, ways[i], strict=True):
                    builder.add(t, way=w)


# --- 1-D ring schedules whose line position i ends owning block i ------------------------------


def _ring(q: int, direction: int) -> int:
    if direction not in (1, -1):
        raise ScheduleError(f"ring direction must be 1 or -1, got {direction!r}")
    return direction


def ring_reducescatter(q: int, direction: int = 1) -> Schedule:
    """Ring reduce-scatter of q ranks (Patarasuk & Yuan 2009), each passing to position i + direction.

    At step s position i adds block i - direction·(s+1) into its neighbour, so
    block b travels from b + direction round to b, where it ends whole.
    """
    d = _ring(q, direction)
    b = ScheduleBuilder(Collective(Kind.REDUCESCATTER, q, 1), f"ring_reducescatter{'-' if d < 0 else ''}")
    for s in range(q - 1):
        with b.step():
            for i in range(q):
                b.reduce(i, (i + d) % q, (i - d * (s + 1)) % q)
    with b.step():  # local: the whole block into the output (the embedding drops it)
        for i in range(q):
            b.copy(i, i, i, dst_buf=Buf.OUTPUT, dst_index=0)
    return b.build()


def ring_allgather(q: int, direction: int = 1) -> Schedule:
    """Ring all-gather of q ranks: at step s position i passes block i - direction·s on to i + direction."""
    d = _ring(q, direction)
    b = ScheduleBuilder(Collective(Kind.ALLGATHER, q, 1), f"ring_allgather{'-' if d < 0 else ''}")
    with b.step():  # local: the own block into the output (the embedding drops it)
        for i in range(q):
            b.copy(i, i, 0, dst_buf=Buf.OUTPUT, dst_index=i)
    for s in range(q - 1):
        with b.step():
            for i in range(q):
                blk = (i - d * s) % q
                b.copy(i, (i + d) % q, blk, buf=Buf.OUTPUT)
    return b.build()


def ring_allreduce(q: int, direction: int = 1) -> Schedule:
    """Ring all-reduce of q ranks on q blocks: ``ring_reducescatter`` then ``ring_allgather``, in place."""
    d = _ring(q, direction)
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, q, q), f"ring_allreduce{'-' if d < 0 else ''}")
    for s in range(q - 1):
        with b.step():
            for i in range(q):
                b.reduce(i, (i + d) % q, (i - d * (s + 1)) % q)
    for s in range(q - 1):
        with b.step():
            for i in range(q):
                b.copy(i, (i + d) % q, (i - d * s) % q)
    return b.build()


# --- recursive halving and doubling over any matchings -------------------------------------------


def butterfly_sets(matchings: Sequence[Sequence[int]]) -> list[list[frozenset[int]]]:
    """R[s][x]: the ranks whose blocks x is responsible for before step s of the halving.

    ``matchings[s][x]`` is x's partner at step s (an involution without fixed
    points). R[L][x] = {x} and R[s][x] = R[s+1][x] ∪ R[s+1][partner]; the
    matchings make a butterfly when every union is disjoint and R[0][x] is
    every rank. Raises ``ScheduleError`` otherwise.
    """
    p = len(matchings[0]) if matchings else 1
    for s, m in enumerate(matchings):
        if len(m) != p or any(not 0 <= m[x] < p or m[x] == x or m[m[x]] != x for x in range(p)):
            raise ScheduleError(f"step {s}: not a perfect matching of {p} ranks: {list(m)}")
    sets = [[frozenset((x,)) for x in range(p)]]
    for s in reversed(range(len(matchings))):
        below = sets[0]
        here = []
        for x in range(p):
            mine, theirs = below[x], below[matchings[s][x]]
            if mine & theirs:
                raise ScheduleError(f"step {s}: ranks {x} and {matchings[s][x]} both cover {sorted(mine & theirs)}")
            here.append(mine | theirs)
        sets.insert(0, here)
    if any(len(r) != p for r in sets[0]):
        raise ScheduleError("the matchings do not reach every rank: not a butterfly")
    return sets


def _nested(matchings: Sequence[Sequence[int]]) -> np.ndarray | None:
    """Each rank's position when the butterfly's sets are nested partitions, worked out in numpy; None when the
    sets R[s][x] of ``butterfly_sets`` are not the classes of a partition at every level (then the callers take
    the sets one by one).

    Level by level from the leaves, a class (R[s][x]) is labelled by its smallest rank. Level s's classes are
    level s+1's merged in pairs, x's class with its partner's, when every member of a class has its partner in
    one other class; the position puts, at every merge, the class with the smaller least rank first
    (``butterfly_order``'s tree walk), so that R[s][x] is the run of 2^(L-s) positions from ``pos[x]`` with its
    low L-s bits cleared."""
    p = len(matchings[0]) if matchings else 1
    x = np.arange(p, dtype=np.int64)
    ms = []
    for s, m in enumerate(matchings):
        a = np.asarray(m, dtype=np.int64)
        if a.shape != (p,) or (a < 0).any() or (a >= p).any() or (a == x).any() or (a[a] != x).any():
            raise ScheduleError(f"step {s}: not a perfect matching of {p} ranks: {list(m)}")
        ms.append(a)
    big = len(ms)
    if p != 1 << big:
        return None
    lab = x
    pos = np.zeros(p, dtype=np.int64)
    for s in reversed(range(big)):
        partner = lab[ms[s]]
        if (lab == partner).any():
            return None
        # a partition: each class has one partner class
        if len(np.unique(lab * p + partner)) != len(np.unique(lab)):
            return None
        pos += (lab > partner).astype(np.int64) << (big - s - 1)
        lab = np.minimum(lab, partner)
    return pos if bool((lab == 0).all()) else None


def butterfly_order(matchings: Sequence[Sequence[int]]) -> list[int]:
    """pos[b]: a position for each block b such that every set R[s][x] of ``butterfly_sets`` is a run
    of consecutive positions (the sets nest as a binary tree; its leaves in order)."""
    nested = _nested(matchings)
    if nested is not None:
        return nested.tolist()
    sets = butterfly_sets(matchings)
    p = len(sets[0])
    order: list[int] = []

    def walk(s: int, x: int) -> None:  # R[s][x] = R[s+1][x] then R[s+1][partner]
        if s == len(matchings):
            order.append(x)
            return
        y = matchings[s][x]
        first, second = (x, y) if min(sets[s + 1][x]) < min(sets[s + 1][y]) else (y, x)
        walk(s + 1, first)
        walk(s + 1, second)

    walk(0, 0)
    pos = [0] * p
    for i, blk in enumerate(order):
        pos[blk] = i
    return pos


def butterfly(matchings: Sequence[Sequence[int]], place: Callable[[int], int], width: int,
              ranks: Callable[[int], int] = lambda x: x, *, stride: int = 1, runs: bool = False) -> tuple[
                  Phase, Phase]:
    """Reduce-scatter by recursive halving, then all-gather by recursive doubling, over ``matchings``.

    At halving step s, x adds into its partner y the blocks of R[s+1][y]
    (``butterfly_sets``) and keeps R[s+1][x]; x ends owning block x whole.
    The doubling runs the matchings backwards, x sending R[s+1][x]. Chunk c
    (of ``width``) of block b is chunk ``place(b) + c·stride``, one transfer
    per chunk; with ``runs``, one transfer per chunk c and run of consecutive
    such chunks (a place from ``butterfly_order`` and ``stride`` at least the
    blocks' count make each step one run: P log P transfers, not P²).
    ``ranks`` maps the matchings' ranks to the schedule's (for a fold).
    """
    nested = _nested(matchings) if runs else None
    if nested is not None:
        fast = _butterfly_runs(matchings, nested, place, width, ranks, stride)
        if fast is not None:
            return fast
    sets = butterfly_sets(matchings)
    p = len(sets[0])

    def step(s: int, op: Op) -> list[Transfer]:
        out: list[Transfer] = []
        for x in range(p):
            y = matchings[s][x]
            blocks = sets[s + 1][y if op is Op.REDUCE else x]
            if not runs:
                for blk in sorted(blocks):
                    c0 = place(blk)
                    out.extend(Transfer(ranks(x), ranks(y), Buf.INPUT, c0 + c * stride, Buf.INPUT,
                                        c0 + c * stride, 1, op) for c in range(width))
                continue
            starts = sorted(place(blk) for blk in blocks)
            for c in range(width):
                i = 0
                while i < len(starts):
                    j = i + 1
                    while j < len(starts) and starts[j] == starts[j - 1] + 1:
                        j += 1
                    at = starts[i] + c * stride
                    out.append(Transfer(ranks(x), ranks(y), Buf.INPUT, at, Buf.INPUT, at, j - i, op))
                    i = j
        return out

    steps = range(len(matchings))
    return [step(s, Op.REDUCE) for s in steps], [step(s, Op.COPY) for s in reversed(steps)]


def butterfly_in_order(matchings: Sequence[Sequence[int]], base: int, width: int) -> tuple[Phase, Phase]:
    """``butterfly`` over ``matchings`` with its P blocks laid in ``butterfly_order`` from chunk ``base``, chunk c of
    every block in the c-th row of P: each step's blocks are then one run, one transfer per chunk row (2·k·P·log2 P
    transfers, not k·P²; 64x64: 393,216 for four parts)."""
    pos = butterfly_order(matchings)
    return butterfly(matchings, lambda blk: base + pos[blk], width, stride=len(pos), runs=True)


def _butterfly_runs(matchings: Sequence[Sequence[int]], pos: np.ndarray,
                    place: Callable[[int], int], width: int, ranks: Callable[[int], int], stride: int
                    ) -> tuple[Phase, Phase] | None:
    """``butterfly(..., runs=True)`` from the nested partitions (``_nested``), without a set of ranks per
    rank and step (64x64: 2P² = 33 M members a part): the blocks of a class in position order, split where
    consecutive blocks' places are not consecutive. The same transfers in the same order as the sets give,
    or None when ``place`` is not increasing in position (then sorting by place reorders the runs)."""
    p = len(pos)
    big = p.bit_length() - 1
    order = np.argsort(pos)
    placed = np.array([place(int(b)) for b in order.tolist()], dtype=np.int64)  # by position
    if p > 1 and not bool((np.diff(placed) > 0).all()):
        return None
    cut = np.flatnonzero(np.diff(placed) != 1) + 1  # positions where a run of places breaks
    rank_of = [ranks(x) for x in range(p)]

    def step(s: int, op: Op) -> list[Transfer]:
        size = 1 << (big - s - 1)
        out: list[Transfer] = []
        m = matchings[s]
        owner = np.asarray(m, dtype=np.int64) if op is Op.REDUCE else np.arange(p, dtype=np.int64)
        first = (pos[owner] >> (big - s - 1)) << (big - s - 1)
        lo = np.searchsorted(cut, first, side="right")
        hi = np.searchsorted(cut, first + size, side="left")
        for x, (a, i, j) in enumerate(zip(first.tolist(), lo.tolist(), hi.tolist(), strict=True)):
            bounds = [a, *cut[i:j].tolist(), a + size]
            src, dst = rank_of[x], rank_of[m[x]]
            for c in range(width):
                for u, v in itertools.pairwise(bounds):
                    at = int(placed[u]) + c * stride
                    out.append(Transfer(src, dst, Buf.INPUT, at, Buf.INPUT, at, v - u, op))
        return out

    steps = range(len(matchings))
    return [step(s, Op.REDUCE) for s in steps], [step(s, Op.COPY) for s in reversed(steps)]


def fold(p: int, chunks: int) -> tuple[Phase, Phase]:
    """Thakur, Rabenseifner & Gropp 2005, §4.4: with P = 2^⌊log2 p⌋, extra rank P+i adds its
    ``chunks`` chunks into rank i (the pre-step) and gets the result back after (the post-step).

    Both phases are empty when p is a power of two.
    """
    big = pow2floor(p)
    pairs = [(i, c) for i in range(p - big) for c in range(chunks)]
    pre = [Transfer(big + i, i, Buf.INPUT, c, Buf.INPUT, c, 1, Op.REDUCE) for i, c in pairs]
    post = [Transfer(i, big + i, Buf.INPUT, c, Buf.INPUT, c, 1, Op.COPY) for i, c in pairs]
    return ([pre] if pre else []), ([post] if post else [])
