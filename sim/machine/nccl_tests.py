"""nccl-tests output as a typed table: the logs users already have, and the shared published ``.tsv`` tables.

nccl-tests (github.com/NVIDIA/nccl-tests, src/common.cu) prints, for each of all_reduce_perf,
all_gather_perf, reduce_scatter_perf, alltoall_perf, sendrecv_perf, broadcast_perf and the rest:

- ``#`` header lines: ``# nThread 1 nGpus 1 minBytes ... graph: 0``, one ``#  Rank  0 Group  0 Pid ... on
  HOST device  0 [0x..] NAME`` line per rank (older versions omit ``Group``), newer versions also
  ``# nccl-tests version ...`` and ``# Collective test starting: all_reduce_perf``;
- a two-line column header, ``out-of-place`` and ``in-place`` over ``size count type redop root time
  algbw busbw #wrong`` (older versions: no ``root``, ``error`` for ``#wrong``; broadcast once had no
  ``redop``), then a units line;
- one row per size: bytes in nccl-tests' convention for the collective, element count, type, reduction
  (blank for alltoall in older versions), root (-1 where none), then time (us), algbw and busbw (GB/s)
  and the error count, out of place, then in place; a field that does not apply reads ``N/A``;
- the trailer ``# Avg bus bandwidth    : 12.3`` (and ``# Out of bounds values : 0 OK``).

Lines that mpirun tags (``[1,0]<stdout>:``) lose their tag; lines that are neither ``#`` lines nor rows
(NCCL INFO and WARN lines, the shell's command line) are skipped; a line that starts like a row (its
first field a whole number) but does not read as one is an error naming the file, line and field.

``parse`` reads text, ``read`` a log file, ``read_published`` a published nccl-tests ``.tsv`` table
(its README gives the format), ``load`` either by the file's extension; all return ``NcclTestsTable``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

from algorithms.disk import read_capped
from algorithms.errors import CollschedError

__all__ = ["COLLECTIVES", "NcclTestsError", "NcclTestsRow", "NcclTestsTable", "Timing", "load", "parse", "parse_all",
           "read", "read_all", "read_published"]

COLLECTIVES = {"all_reduce": "allreduce", "all_gather": "allgather", "reduce_scatter": "reducescatter",
               "alltoall": "alltoall", "sendrecv": "sendrecv", "broadcast": "broadcast", "reduce": "reduce",
               "gather": "gather", "scatter": "scatter", "hypercube": "hypercube"}
"""nccl-tests' binary stem (``all_reduce`` of all_reduce_perf) -> the collective's name here (collsched's
``Kind`` values where one exists; ``sendrecv`` and ``hypercube`` have none)."""

_NAMES = set(COLLECTIVES.values())
# The largest log read: a whole nccl-tests run of every size on thousands of ranks is a few MB.
MAX_LOG_BYTES = 64 * 1024 * 1024
_TAG = re.compile(r"^\s*\[\d+(?:,\d+)*\](?:<std(?:out|err)>)?:")
_RANK = re.compile(r"Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+\[[^\]]*\]\s*(.*)$")
_START = re.compile(r"^\s*(?:\[\d+(?:,\d+)*\](?:<std(?:out|err)>)?:)?\s*#?\s*Collective test starting:", re.M)
_PERF = re.compile(r"\b(" + "|".join(COLLECTIVES) + r")_perf\b")
_FIELDS = {"size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "error"}
_MODERN = ("size", "count", "type", "redop", "root")
_PER_SIDE = ("time", "algbw", "busbw", "#wrong")


class NcclTestsError(CollschedError, ValueError):
    """An nccl-tests log or published table that cannot be read; the message names the file and line."""


@dataclass(frozen=True)
class Timing:
    """One side (out-of-place or in-place) of a row: None where nccl-tests printed N/A."""

    time_us: float | None
    algbw: float | None
    busbw: float | None
    wrong: float | None = None

    @property
    def seconds(self) -> float | None:
        """The time in seconds."""
        return None if self.time_us is None else self.time_us * 1e-6


@dataclass(frozen=True)
class NcclTestsRow:
    """One size of an nccl-tests table: ``size`` in bytes (nccl-tests' convention), then both sides."""

    size: int
    count: int | None
    dtype: str | None
    redop: str | None
    root: int | None
    oop: Timing
    ip: Timing | None
    line: int


@dataclass(frozen=True)
class NcclTestsTable:
    """A parsed nccl-tests run: the collective, who ran it, and its rows in file order."""

    collective: str
    rows: tuple[NcclTestsRow, ...]
    source: str
    ranks: int | None = None
    nodes: int | None = None
    devices: tuple[str, ...] = ()
    avg_busbw: float | None = None
    nccl_version: str | None = None
    params: Mapping[str, str] = field(default_factory=dict)
    """The ``# nThread 1 nGpus 1 minBytes ...`` line's keys and values; for a published table its header."""

    @property
    def gpus_per_node(self) -> int | None:
        """Ranks per node, when both are known and the nodes hold equal shares."""
        if self.ranks is None or not self.nodes or self.ranks % self.nodes:
            return None
        return self.ranks // self.nodes

    def sizes(self) -> list[int]:
        """The message sizes, in file order."""
        return [r.size for r in self.rows]


def _err(source: str, line: int, what: str) -> NcclTestsError:
    return NcclTestsError(f"{source}:{line}: {what}")


def _number(text: str, source: str, line: int, name: str) -> float | None:
    if text.upper() == "N/A":
        return None
    try:
        return float(text)
    except ValueError:
        raise _err(source, line, f"field {name}: {text!r} is not a number or N/A") from None


def _whole(text: str, source: str, line: int, name: str) -> int | None:
    value = _number(text, source, line, name)
    if value is not None and value != int(value):
        raise _err(source, line, f"field {name}: {text!r} is not a whole number")
    return None if value is None else int(value)


def _columns(tokens: list[str]) -> list[str] | None:
    """The row layout a column-header line names (``#wrong`` for ``error``), or None if it is not one."""
    if "size" not in tokens or "count" not in tokens or "time" not in tokens:
        return None
    return ["#wrong" if t == "error" else t for t in tokens if t in _FIELDS]


def _default_columns(n: int) -> list[str] | None:
    """A row layout from its field count alone, for a log whose column header was cut off."""
    if n == 13:
        return [*_MODERN, *_PER_SIDE, *_PER_SIDE]
    if n == 12:
        return [*_MODERN[:4], *_PER_SIDE, *_PER_SIDE]
    return None


def _row(tokens: list[str], columns: list[str], in_place_first: bool, source: str, line: int) -> NcclTestsRow:
    if len(tokens) == len(columns) - 1 and "redop" in columns:
        # Older alltoall_perf prints nothing in the redop column.
        at = columns.index("redop")
        if _looks_numeric(tokens[at]):
            tokens = [*tokens[:at], "", *tokens[at:]]
    head = [c for c in columns if c not in _PER_SIDE]
    sides = (len(columns) - len(head)) // len(_PER_SIDE)
    if len(tokens) != len(columns) or sides not in (1, 2):
        raise _err(source, line, f"a row needs {len(columns)} fields ({' '.join(columns)}), got {len(tokens)}")
    values = dict(zip(head, tokens[:len(head)], strict=True))
    size = _whole(values["size"], source, line, "size")
    if size is None or size < 0:
        raise _err(source, line, f"field size: {values['size']!r} is not a size in bytes")
    timings = []
    for s in range(sides):
        part = tokens[len(head) + s * 4: len(head) + s * 4 + 4]
        names = ("time", "algbw", "busbw", "#wrong")
        t, a, b, w = (_number(v, source, line, n) for v, n in zip(part, names, strict=True))
        timings.append(Timing(t, a, b, w))
    if in_place_first and sides == 2:
        timings.reverse()
    return NcclTestsRow(
        size=size,
        count=_whole(values["count"], source, line, "count") if "count" in values else None,
        dtype=values.get("type") or None,
        redop=values.get("redop") or None,
        root=_whole(values["root"], source, line, "root") if "root" in values else None,
        oop=timings[0], ip=timings[1] if sides == 2 else None, line=line)


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return text.upper() == "N/A"
    return True


def _starts_like_a_row(tokens: list[str]) -> bool:
    return bool(tokens) and tokens[0].isdigit()


def parse(text: str, *, source: str = "<text>", collective: str | None = None, first_line: int = 1) -> NcclTestsTable:
    """The table in nccl-tests output ``text``; ``collective`` names it when the text does not.

    The collective comes from ``collective`` (nccl-tests' stem such as ``all_reduce`` or our name such as
    ``allreduce``), else from a ``Collective test starting`` line, else from the first ``*_perf`` named
    anywhere in the text (a command line), else from ``source``'s file name. A text that holds more than
    one run (a second ``Collective test starting`` line after rows) is an error: ``parse_all`` reads them.
    ``first_line`` is the number of the text's first line in its file (for the messages).
    """
    columns: list[str] | None = None
    in_place_first = False
    rows: list[NcclTestsRow] = []
    ranks: dict[int, tuple[str, str]] = {}
    params: dict[str, str] = {}
    named: str | None = None
    version: str | None = None
    avg: float | None = None
    for number, raw in enumerate(text.splitlines(), first_line):
        line = _TAG.sub("", raw, count=1).rstrip()
        body = line.lstrip()
        hashed = body.startswith("#")
        content = body.lstrip("#").strip()
        tokens = content.split()
        if not tokens:
            continue
        if not hashed and _starts_like_a_row(tokens):
            layout = columns or _default_columns(len(tokens))
            if layout is None:
                raise _err(source, number, f"a row before any column header, with {len(tokens)} fields "
                                           "(nccl-tests prints 12 or 13)")
            rows.append(_row(tokens, layout, in_place_first, source, number))
            continue
        if "out-of-place" in content and "in-place" in content:
            in_place_first = content.index("in-place") < content.index("out-of-place")
            continue
        found = _columns(tokens)
        if found is not None:
            columns = found
            continue
        if (m := _RANK.search(content)) is not None:
            ranks[int(m.group(1))] = (m.group(3), m.group(5).strip())
        elif content.startswith("nThread"):
            params.update(re.findall(r"([A-Za-z][\w ]*?):? (\S+)(?: |$)", content))
        elif (m := re.match(r"Collective test starting:\s*(\w+)", content)) is not None:
            if rows:
                raise _err(source, number, "a second test run starts here; read the file with parse_all/read_all")
            named = m.group(1)
        elif (m := re.match(r"Avg bus bandwidth\s*:\s*(\S+)", content)) is not None:
            avg = _number(m.group(1), source, number, "Avg bus bandwidth")
        elif (m := re.search(r"nccl-library=(\d+)|NCCL version (\S+)", content)) is not None:
            version = version or m.group(1) or m.group(2)
    if not rows:
        raise NcclTestsError(f"{source}: no result rows (is this nccl-tests output?)")
    kind = _collective(collective, named, text, source)
    hosts = {h for h, _ in ranks.values()}
    return NcclTestsTable(collective=kind, rows=tuple(rows), source=source, ranks=len(ranks) or None,
                          nodes=len(hosts) or None, devices=tuple(d for _, d in (ranks[r] for r in sorted(ranks))),
                          avg_busbw=avg, nccl_version=version, params=params)


def parse_all(text: str, *, source: str = "<text>") -> list[NcclTestsTable]:
    """Every run in ``text``, one table each: a log of several ``*_perf`` runs splits at each
    ``Collective test starting`` line (the lines before the first belong to the first run)."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if _START.match(line)]
    if len(starts) <= 1:
        return [parse(text, source=source)]
    bounds = [0, *starts[1:], len(lines)]
    return [parse("\n".join(lines[a:b]), source=source, first_line=a + 1) for a, b in pairwise(bounds)]


def _collective(given: str | None, named: str | None, text: str, source: str) -> str:
    for candidate in (given, named):
        if candidate:
            name = _canonical(candidate)
            if name is None:
                raise NcclTestsError(f"{source}: unknown collective {candidate!r} "
                                     f"(one of {', '.join(sorted(_NAMES))})")
            return name
    for where in (text, Path(source).name):
        if (m := _PERF.search(where)) is not None:
            return COLLECTIVES[m.group(1)]
    raise NcclTestsError(f"{source}: cannot tell which collective this is (no 'Collective test starting' line "
                         "and no *_perf named); pass it, e.g. collective='all_reduce'")


def _canonical(name: str) -> str | None:
    stem = name.strip().lower().removesuffix("_perf")
    return COLLECTIVES.get(stem) or (stem if stem in _NAMES else None)


def read_text(path: str | os.PathLike[str]) -> str:
    """The text of an nccl-tests log, at most ``MAX_LOG_BYTES``; ``NcclTestsError`` naming the file otherwise."""
    return read_capped(path, MAX_LOG_BYTES, "nccl-tests log ", NcclTestsError).decode("utf-8", errors="replace")


def read(path: str | Path, *, collective: str | None = None) -> NcclTestsTable:
    """The table in the nccl-tests log at ``path`` (``parse``)."""
    return parse(read_text(path), source=str(path), collective=collective)


def read_all(path: str | Path) -> list[NcclTestsTable]:
    """Every run in the nccl-tests log at ``path`` (``parse_all``)."""
    return parse_all(read_text(path), source=str(path))


_TSV_HEADER = ["size_bytes", "time_us", "algbw_GBps", "busbw_GBps"]


def read_published(path: str | Path) -> NcclTestsTable:
    """A shared published ``.tsv`` table (``# key: value`` lines, a header row, one row per size) as a table.

    Its rows are the out-of-place columns; ``nodes_x_gpus`` (``2x8``) gives nodes and ranks, and the
    header lines are the table's ``params``.
    """
    source = str(path)
    meta: dict[str, str] = {}
    rows: list[NcclTestsRow] = []
    header_seen = False
    for number, raw in enumerate(read_text(path).splitlines(), 1):
        if not raw.strip():
            continue
        if raw.startswith("#"):
            key, sep, value = raw[1:].partition(":")
            if sep:
                meta[key.strip()] = value.strip()
            continue
        fields = raw.rstrip("\n").split("\t")
        if not header_seen:
            if [f.strip() for f in fields] != _TSV_HEADER:
                raise _err(source, number, f"header row must be {' '.join(_TSV_HEADER)} (tab-separated), "
                                           f"got {raw.strip()!r}")
            header_seen = True
            continue
        if len(fields) != 4:
            raise _err(source, number, f"a row needs 4 tab-separated fields ({' '.join(_TSV_HEADER)}), "
                                       f"got {len(fields)}")
        size = _whole(fields[0].strip(), source, number, "size_bytes")
        if size is None or size < 0:
            raise _err(source, number, f"field size_bytes: {fields[0]!r} is not a size in bytes")
        t, a, b = (_number(f.strip(), source, number, n) for f, n in zip(fields[1:], _TSV_HEADER[1:], strict=True))
        rows.append(NcclTestsRow(size, None, None, None, None, Timing(t, a, b), None, number))
    if not rows:
        raise NcclTestsError(f"{source}: no rows under a {' '.join(_TSV_HEADER)} header")
    kind = _canonical(meta.get("collective", ""))
    if kind is None:
        raise NcclTestsError(f"{source}: header 'collective' must name one of {', '.join(sorted(_NAMES))}, "
                             f"got {meta.get('collective')!r}")
    nodes = ranks = None
    if (m := re.fullmatch(r"(\d+)\s*x\s*(\d+)", meta.get("nodes_x_gpus", ""))) is not None:
        nodes, ranks = int(m.group(1)), int(m.group(1)) * int(m.group(2))
    return NcclTestsTable(collective=kind, rows=tuple(rows), source=source, ranks=ranks, nodes=nodes,
                          nccl_version=meta.get("nccl_version"), params=meta)


def load(path: str | Path, *, collective: str | None = None) -> NcclTestsTable:
    """``read_published`` for a ``.tsv`` file, else ``read`` (an nccl-tests log)."""
    if str(path).endswith(".tsv"):
        return read_published(path)
    return read(path, collective=collective)
