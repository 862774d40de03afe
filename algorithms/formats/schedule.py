"""Strict JSON load/save of schedules in the ``collsched.schedule/1`` format.

This module reads and writes JSON only; ``algorithms.formats`` (``load``, ``loads``, ``save``) picks
between it and MSCCL-IR XML (``algorithms.formats.msccl``) by a file's content and name.

JSON only (no pickle, no eval). The document is checked against a JSON
Schema first (unknown keys, wrong types, out-of-range values), then built
into a ``Schedule``, which checks ranks and indices against the collective.
Every failure is a ``ScheduleError`` whose message names the field.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import jsonschema

from algorithms.disk import read_capped, write_output
from algorithms.errors import ScheduleError
from algorithms.ir import Buf, Collective, Endpoint, Kind, Op, Schedule, Step, SwitchOp, SwitchOpKind, Transfer

__all__ = ["FORMAT", "MAX_FILE_BYTES", "dumps", "from_dict", "is_xml_path", "load", "loads", "read_bytes", "save",
           "to_dict"]

FORMAT = "collsched.schedule/1"
MAX_FILE_BYTES = 256 * 1024 * 1024
"""Largest schedule file accepted: 256 MiB, about 2 M transfers as written by ``save``."""

_INDEX = {"type": "integer", "minimum": 0}
_TRANSFER = {
    "type": "object",
    "additionalProperties": False,
    "required": ["src", "dst", "src_buf", "src_index", "dst_buf", "dst_index", "count", "op"],
    "properties": {
        "src": _INDEX,
        "dst": _INDEX,
        "src_buf": {"enum": [b.value for b in Buf]},
        "src_index": _INDEX,
        "dst_buf": {"enum": [b.value for b in Buf]},
        "dst_index": _INDEX,
        "count": {"type": "integer", "minimum": 1},
        "op": {"enum": [o.value for o in Op]},
    },
}
# The transfers are checked by a fast loop below, not by jsonschema: files
# hold millions of them and jsonschema would take minutes.
SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["format", "name", "collective", "scratch_chunks", "steps"],
    "properties": {
        "format": {"const": FORMAT},
        "name": {"type": "string", "minLength": 1},
        "collective": {
            "type": "object",
            "additionalProperties": False,
            "required": ["kind", "ranks", "chunks", "root"],
            "properties": {
                "kind": {"enum": [k.value for k in Kind]},
                "ranks": {"type": "integer", "minimum": 1},
                "chunks": {"type": "integer", "minimum": 1},
                "root": {"type": ["integer", "null"], "minimum": 0},
                "matrix": {"type": "array"},  # rows and entries are checked by Collective, which names the row
            },
        },
        "scratch_chunks": _INDEX,
        "steps": {"type": "array", "items": {"type": "array", "items": {"type": "object"}}},
        "switch_ops": {"type": "array", "items": {"type": "object"}},
        # Optional (files without it route every transfer the default way): Schedule.ways, one per transfer,
        # checked by _ways (as the transfers, too many for jsonschema).
        "ways": {"type": "array"},
    },
}
_ENDPOINT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["rank", "buf", "index"],
    "properties": {"rank": _INDEX, "buf": {"enum": [b.value for b in Buf]}, "index": _INDEX},
}
# Optional (files without it are the same format): what a switch does, docs/design.md "Switch operations".
_SWITCH_OP = {
    "type": "object",
    "additionalProperties": False,
    "required": ["step", "op", "switch", "sources", "targets", "count"],
    "properties": {
        "step": _INDEX,
        "op": {"enum": [o.value for o in SwitchOpKind]},
        "switch": {"type": "string", "minLength": 1},
        "sources": {"type": "array", "minItems": 1, "items": _ENDPOINT},
        "targets": {"type": "array", "minItems": 1, "items": _ENDPOINT},
        "count": {"type": "integer", "minimum": 1},
    },
}
_VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
_TRANSFER_VALIDATOR = jsonschema.Draft202012Validator(_TRANSFER)
_SWITCH_OP_VALIDATOR = jsonschema.Draft202012Validator(_SWITCH_OP)
_KEYS: tuple[str, ...] = tuple(_TRANSFER["properties"])  # type: ignore[arg-type]
_KEYSET = frozenset(_KEYS)
_BUFS = {b.value: b for b in Buf}
_OPS = {o.value: o for o in Op}


def _path(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "(document)"


def to_dict(schedule: Schedule) -> dict[str, Any]:
    """The schedule as a JSON-ready dict in the ``collsched.schedule/1`` format."""
    c = schedule.collective
    ops: dict[str, Any] = {"switch_ops": [_switch_op_dict(o) for o in schedule.switch_ops]} \
        if schedule.switch_ops else {}
    if schedule.ways is not None:
        ops["ways"] = schedule.ways.tolist()
    return {
        "format": FORMAT,
        "name": schedule.name,
        "collective": _collective_dict(c),
        "scratch_chunks": schedule.scratch_chunks,
        "steps": [
            [
                {"src": t.src, "dst": t.dst, "src_buf": t.src_buf.value, "src_index": t.src_index,
                 "dst_buf": t.dst_buf.value, "dst_index": t.dst_index, "count": t.count, "op": t.op.value}
                for t in step.transfers
            ]
            for step in schedule.steps
        ],
        **ops,
    }


def _switch_op_dict(op: SwitchOp) -> dict[str, Any]:
    def ends(xs: tuple[Endpoint, ...]) -> list[dict[str, Any]]:
        return [{"rank": e.rank, "buf": e.buf.value, "index": e.index} for e in xs]

    return {"step": op.step, "op": op.op.value, "switch": op.switch, "sources": ends(op.sources),
            "targets": ends(op.targets), "count": op.count}


def _switch_op(obj: object, where: str) -> SwitchOp:
    err = jsonschema.exceptions.best_match(_SWITCH_OP_VALIDATOR.iter_errors(obj))
    if err is not None:
        raise ScheduleError(f"{where}{'.' + _path(err) if err.absolute_path else ''}: {err.message}")
    assert isinstance(obj, dict)  # guaranteed by the schema
    ends = [tuple(Endpoint(e["rank"], _BUFS[e["buf"]], e["index"]) for e in obj[k]) for k in ("sources", "targets")]
    try:
        return SwitchOp(SwitchOpKind(obj["op"]), obj["switch"], ends[0], ends[1], obj["count"], obj["step"])
    except ScheduleError as e:
        raise ScheduleError(f"{where}: {e}") from None


def _collective_dict(c: Collective) -> dict[str, Any]:
    d: dict[str, Any] = {"kind": c.kind.value, "ranks": c.ranks, "chunks": c.chunks, "root": c.root}
    if c.matrix is not None:
        d["matrix"] = [list(row) for row in c.matrix]
    return d


def dumps(schedule: Schedule) -> str:
    """The schedule as JSON text, one step per line."""
    d = to_dict(schedule)
    steps = d.pop("steps")
    ops = d.pop("switch_ops", None)
    ways = d.pop("ways", None)
    head = json.dumps(d)[:-1]
    body = ",\n  ".join(json.dumps(s, separators=(",", ":")) for s in steps)
    tail = ""
    if ops is not None:
        tail = ', "switch_ops": [\n  ' + ",\n  ".join(json.dumps(o, separators=(",", ":")) for o in ops) + "\n]"
    if ways is not None:
        tail += ', "ways": ' + json.dumps(ways, separators=(",", ":"))
    return f'{head}, "steps": [\n  {body}\n]{tail}}}\n'


def _transfer(obj: object, where: str) -> Transfer:
    if not isinstance(obj, dict) or obj.keys() != _KEYSET:
        err = jsonschema.exceptions.best_match(_TRANSFER_VALIDATOR.iter_errors(obj))
        detail = err.message if err is not None else "not a transfer object"
        raise ScheduleError(f"{where}: {detail}")
    src, dst, sb, sx, db, dx, n, op = (obj[k] for k in _KEYS)
    for name, v in (("src", src), ("dst", dst), ("src_index", sx), ("dst_index", dx), ("count", n)):
        if v.__class__ is not int or v < (1 if name == "count" else 0):
            raise ScheduleError(f"{where}.{name}: must be an integer >= {1 if name == 'count' else 0}, got {v!r}")
    for name, v, allowed in (("src_buf", sb, _BUFS), ("dst_buf", db, _BUFS), ("op", op, _OPS)):
        if v.__class__ is not str or v not in allowed:
            raise ScheduleError(f"{where}.{name}: must be one of {', '.join(allowed)}, got {v!r}")
    return Transfer(src, dst, _BUFS[sb], sx, _BUFS[db], dx, n, _OPS[op])


def from_dict(doc: object) -> Schedule:
    """Build a schedule from a parsed JSON document; ``ScheduleError`` names the bad field."""
    err = jsonschema.exceptions.best_match(_VALIDATOR.iter_errors(doc))
    if err is not None:
        raise ScheduleError(f"schedule file field {_path(err)}: {err.message}")
    assert isinstance(doc, dict)  # guaranteed by the schema
    c = doc["collective"]
    collective = Collective(Kind(c["kind"]), c["ranks"], c["chunks"], c["root"], c.get("matrix"))
    steps = tuple(
        Step(tuple(_transfer(t, f"steps.{si}.{ti}") for ti, t in enumerate(step)))
        for si, step in enumerate(doc["steps"])
    )
    ops = [_switch_op(o, f"switch_ops.{i}") for i, o in enumerate(doc.get("switch_ops", ()))]
    return Schedule(collective, doc["name"], steps, doc["scratch_chunks"], switch_ops=ops, ways=_ways(doc))


def _ways(doc: dict[str, Any]) -> list[int] | None:
    """The file's ``ways`` (None without it); ``ScheduleError`` names an entry that is not an integer."""
    ways = doc.get("ways")
    if ways is None:
        return None
    for i, w in enumerate(ways):
        if w.__class__ is not int:
            raise ScheduleError(f"schedule file field ways.{i}: must be an integer, got {w!r}")
    return list(ways)


def _reject_constant(name: str) -> Any:
    raise ScheduleError(f"schedule file holds {name}, which is not JSON")


def loads(text: str | bytes) -> Schedule:
    """Parse and validate a schedule from ``collsched.schedule/1`` JSON text or bytes."""
    if len(text) > MAX_FILE_BYTES:
        raise ScheduleError(f"schedule file is {len(text)} bytes, over the limit of {MAX_FILE_BYTES}")
    try:
        doc = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        if isinstance(e, ScheduleError):
            raise
        raise ScheduleError(f"schedule file is not valid JSON: {e}") from None
    return from_dict(doc)


def read_bytes(path: str | os.PathLike[str], limit: int | None = None) -> bytes:
    """A schedule file's bytes (at most ``limit``, default ``MAX_FILE_BYTES``); ``ScheduleError`` naming the
    file when it is too large or unreadable."""
    return read_capped(path, MAX_FILE_BYTES if limit is None else limit, error=ScheduleError)


def load(path: str | os.PathLike[str]) -> Schedule:
    """Load a ``collsched.schedule/1`` JSON file (``algorithms.formats.load`` also takes MSCCL-IR XML)."""
    data = read_bytes(path)
    try:
        return loads(data)
    except ScheduleError as e:
        raise ScheduleError(f"{path}: {e}") from None


def is_xml_path(path: str | os.PathLike[str]) -> bool:
    """True when the file name ends in ``.xml`` (any case): an MSCCL-IR file."""
    return Path(path).suffix.lower() == ".xml"


def save(schedule: Schedule, path: str | os.PathLike[str]) -> None:
    """Write the schedule as ``collsched.schedule/1`` JSON (``algorithms.disk.write_output``: atomically, and
    only a regular file is replaced; ``-`` is standard output)."""
    write_output(path, dumps(schedule), ScheduleError)
