"""The campaign store: one SQLite file (stdlib ``sqlite3``), written as results arrive.

Tables:

- ``meta(name, value)``: ``format`` = ``STORE_FORMAT``;
- ``results``: one row per configuration, ``key`` its primary key (``spec.config_key``: the configuration's
  canonical JSON, collsched's version and ``CAMPAIGN_FORMAT``); ``config`` the canonical JSON; the axes
  (``collective``, ``algorithm``, ``params`` as run, ``topology`` SPEC, ``ranks``, ``size``, ``mode``,
  ``runtime`` as resolved); the outcome (``status``: ok, incorrect, unsupported or error; ``time_s``,
  ``algbw_GBps``, ``busbw_GBps``, ``transfers``, ``engine``, ``bound_s``, ``efficiency``, ``error``); and
  how it was computed (``wall_s``, ``run_id``, ``finished``, and ``code``: a hash of the ``algorithms`` and
  ``sim`` sources that computed it, ``simulate.code_hash``);
- ``runs``: one row per ``collsched campaign`` that computed anything: its executor and workers, the
  configurations it had to compute (``planned``) and those it stored (``stored``), and how it ended.

The file is in WAL mode and every batch of rows (one worker task's) is one transaction, so a process
killed at any moment leaves every row it had received: a re-run computes only the keys missing. A key is
inserted once: ``INSERT`` (not ``REPLACE``) makes a second computation of a stored key an error, not a
silent overwrite.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from algorithms.errors import CollschedError

__all__ = ["RESULT_COLUMNS", "STORE_FORMAT", "Store", "StoreError"]

STORE_FORMAT = "collsched.campaign-store/1"
AXIS_COLUMNS = ("collective", "algorithm", "params", "topology", "ranks", "size", "mode", "runtime")
RESULT_COLUMNS = ("status", "time_s", "algbw_GBps", "busbw_GBps", "transfers", "engine", "bound_s", "efficiency",
                  "error")
"""What a configuration's simulation gave: equal whichever executor ran it (``wall_s`` and ``run_id`` are not)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS results (
    key TEXT PRIMARY KEY,
    config TEXT NOT NULL,
    version TEXT NOT NULL,
    collective TEXT NOT NULL,
    algorithm TEXT NOT NULL,
    params TEXT,
    topology TEXT NOT NULL,
    ranks INTEGER,
    size INTEGER NOT NULL,
    mode TEXT NOT NULL,
    runtime TEXT,
    status TEXT NOT NULL CHECK (status IN ('ok', 'incorrect', 'unsupported', 'error')),
    time_s REAL,
    algbw_GBps REAL,
    busbw_GBps REAL,
    transfers INTEGER,
    engine TEXT,
    bound_s REAL,
    efficiency REAL,
    error TEXT,
    wall_s REAL,
    run_id INTEGER,
    finished REAL NOT NULL,
    code TEXT
);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    campaign TEXT NOT NULL,
    started REAL NOT NULL,
    finished REAL,
    executor TEXT NOT NULL,
    workers INTEGER,
    total INTEGER NOT NULL,
    planned INTEGER NOT NULL,
    stored INTEGER NOT NULL DEFAULT 0,
    errors INTEGER NOT NULL DEFAULT 0,
    status TEXT NOT NULL DEFAULT 'running'
);
"""


class StoreError(CollschedError):
    """The store file cannot be opened or is not a campaign store."""


class Store:
    """A campaign store at ``path`` (created when missing). Use as a context manager, or ``close()``."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")  # in WAL: a commit survives the process, not power loss
            self._db.executescript(_SCHEMA)
            found = self._db.execute("SELECT value FROM meta WHERE name = 'format'").fetchone()
            if found is None:
                self._db.execute("INSERT INTO meta VALUES ('format', ?)", (STORE_FORMAT,))
            elif found[0] != STORE_FORMAT:
                raise StoreError(f"{self.path}: a store of format {found[0]!r}, not {STORE_FORMAT!r}")
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path}: not a campaign store: {e}") from None
        except OSError as e:
            raise StoreError(f"{self.path}: cannot open: {e.strerror or e}") from None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    def keys(self) -> set[str]:
        """Every key stored."""
        return {k for (k,) in self._db.execute("SELECT key FROM results")}

    def missing(self, keys: Iterable[str]) -> list[str]:
        """``keys`` not in the store, in their order."""
        have = self.keys()
        return [k for k in keys if k not in have]

    def begin_run(self, campaign: str, executor: str, workers: int | None, total: int, planned: int) -> int:
        cur = self._db.execute("INSERT INTO runs (campaign, started, executor, workers, total, planned) "
                               "VALUES (?, ?, ?, ?, ?, ?)", (campaign, time.time(), executor, workers, total, planned))
        return int(cur.lastrowid or 0)

    def end_run(self, run_id: int, status: str) -> None:
        self._db.execute("UPDATE runs SET finished = ?, status = ? WHERE id = ?", (time.time(), status, run_id))

    def add(self, rows: Sequence[tuple[str, Mapping[str, Any], Mapping[str, Any]]], version: str,
            run_id: int | None = None) -> None:
        """Store ``(key, canonical config, result row)`` triples in one transaction (and count them in the
        run's ``stored`` and ``errors``)."""
        now = time.time()
        values = []
        for key, config, row in rows:
            values.append((key, json.dumps(config, sort_keys=True), version, config["collective"],
                           config["algorithm"], row.get("params"), config["topology"]["spec"], row.get("ranks"),
                           int(config["size"]), config["mode"], row.get("runtime"),
                           *(row.get(c) for c in RESULT_COLUMNS), row.get("wall_s"), run_id, now, row.get("code")))
        marks = ", ".join("?" * len(values[0])) if values else ""
        errors = sum(1 for _k, _c, r in rows if r.get("status") == "error")
        with self._transaction():
            self._db.executemany(f"INSERT INTO results VALUES ({marks})", values)
            if run_id is not None:
                self._db.execute("UPDATE runs SET stored = stored + ?, errors = errors + ? WHERE id = ?",
                                 (len(rows), errors, run_id))

    def _transaction(self) -> Any:
        db = self._db

        class _Tx:
            def __enter__(self) -> None:
                db.execute("BEGIN IMMEDIATE")

            def __exit__(self, kind: object, *rest: object) -> None:
                db.execute("COMMIT" if kind is None else "ROLLBACK")

        return _Tx()

    def rows(self, keys: Iterable[str] | None = None) -> Iterator[dict[str, Any]]:
        """Stored rows as dicts (every column), of ``keys`` only when given."""
        cur = self._db.execute("SELECT * FROM results ORDER BY key")
        names = [d[0] for d in cur.description]
        wanted = set(keys) if keys is not None else None
        for values in cur:
            row = dict(zip(names, values, strict=True))
            if wanted is None or row["key"] in wanted:
                yield row

    def runs(self) -> list[dict[str, Any]]:
        cur = self._db.execute("SELECT * FROM runs ORDER BY id")
        names = [d[0] for d in cur.description]
        return [dict(zip(names, v, strict=True)) for v in cur]

    def count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM results").fetchone()[0])
