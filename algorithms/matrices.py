"""Traffic matrices for all-to-allv: uniform, mixture-of-experts routing with Zipf popularity, files, traces.

A matrix ``T`` is p rows of p integers >= 0: ``T[i][j]`` chunks go from rank
i to rank j (``algorithms.ir.Collective(Kind.ALLTOALLV, p, matrix=T)``).

- ``uniform(p, chunks)``: every pair, the rank itself included, ``chunks``.
- ``zipf(p, s, tokens=..., experts=..., top_k=..., seed=...)``: each rank
  routes ``tokens`` tokens to ``top_k`` distinct experts each, expert
  popularity Zipf(s) (the k-th most popular expert drawn with weight
  1/k^s; which expert is k-th is a seeded shuffle), experts placed on ranks
  in contiguous blocks of E/p as expert-parallel MoE layers do. ``T[i][j]``
  counts the token copies rank i sends to rank j's experts.
- ``load(path, p)``: a JSON file (``[[...], ...]`` or ``{"matrix": [[...]]}``),
  a CSV file of p lines of p integers, or a router trace (``trace(path, p)``).
- ``trace(path, p)``: a router trace, one routed token copy per line,
  ``SOURCE_RANK,EXPERT`` (CSV, ``#`` comments, an optional ``rank,expert``
  header) or a JSON ``{"experts": E, "routes": [[rank, expert], ...]}``;
  experts placed on ranks in blocks as for ``zipf``.
- ``parse(spec, p)``: what ``--matrix`` takes: ``uniform``, ``uniform:N``,
  ``zipf:S`` (options ``zipf:S,tokens=T,experts=E,top_k=K,seed=X``),
  ``trace:FILE`` or a FILE.

Every bad input is a ``ScheduleError`` naming the file and line, or the row.
"""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import numpy as np

from algorithms.errors import ScheduleError
from algorithms.formats.schedule import read_bytes
from algorithms.ir import MAX_SLOTS, Matrix, check_matrix

__all__ = ["MATRIX_FORMS", "expert_rank", "load", "parse", "scaled", "trace", "uniform", "zipf"]

MATRIX_FORMS = ("uniform, uniform:N (N chunks a pair), zipf:S (MoE tokens routed to experts of Zipf(S) popularity; "
                "zipf:S,tokens=T,experts=E,top_k=K,seed=X), trace:FILE (a router trace: rank,expert a line), "
                "or a FILE (JSON [[...]] or CSV, p lines of p integers)")
MAX_MATRIX_FILE_BYTES = 64 * 1024 * 1024
"""Largest matrix or trace file read: 64 MiB."""
DEFAULT_TOKENS = 4096
"""Tokens per rank for ``zipf`` unless told: a 4096-token micro-batch per GPU."""


def uniform(ranks: int, chunks: int = 1) -> Matrix:
    """The uniform matrix: ``chunks`` from every rank to every rank (alltoall's traffic)."""
    _positive(ranks, "ranks")
    _positive(chunks, "chunks", 0)
    return tuple((chunks,) * ranks for _ in range(ranks))


def expert_rank(expert: np.ndarray | int, experts: int, ranks: int) -> np.ndarray:
    """The rank that holds each expert: contiguous blocks, expert e on rank e·p // E."""
    return np.asarray(expert, dtype=np.int64) * ranks // experts


def zipf(ranks: int, s: float, *, tokens: int = DEFAULT_TOKENS, experts: int | None = None, top_k: int = 1,
         seed: int = 0) -> Matrix:
    """Token copies routed rank to rank when each rank's ``tokens`` go to ``top_k`` experts of Zipf(s) popularity.

    ``experts`` defaults to p (one a rank). Each token draws ``top_k`` distinct experts with probability
    proportional to 1/k^s for the k-th most popular (without replacement); s = 0 is uniform routing.
    """
    _positive(ranks, "ranks")
    e = ranks if experts is None else experts
    _positive(e, "experts")
    _positive(tokens, "tokens", 0)
    _positive(top_k, "top_k")
    if isinstance(s, bool) or not isinstance(s, int | float) or not 0 <= s < 100:
        raise ScheduleError(f"zipf: exponent s must be a number in [0, 100), got {s!r}")
    if top_k > e:
        raise ScheduleError(f"zipf: top_k {top_k} is more than the {e} experts")
    if ranks * tokens * top_k > MAX_SLOTS:
        raise ScheduleError(f"zipf: {ranks} ranks x {tokens} tokens x top_k {top_k} is over the limit of "
                            f"{MAX_SLOTS} chunks")
    rng = np.random.default_rng(seed)
    weight = 1.0 / np.arange(1, e + 1, dtype=np.float64) ** s
    popularity = np.empty(e)
    popularity[rng.permutation(e)] = weight / weight.sum()  # which expert is k-th: a seeded shuffle
    owner = expert_rank(np.arange(e), e, ranks)
    out = np.zeros((ranks, ranks), dtype=np.int64)
    for i in range(ranks):
        if not tokens:
            continue
        if top_k == 1:
            out[i] = np.bincount(owner, weights=rng.multinomial(tokens, popularity), minlength=ranks).astype(np.int64)
            continue
        # top_k distinct experts per token: Gumbel top-k sampling is sampling without replacement by weight.
        keys = np.log(popularity)[None, :] + rng.gumbel(size=(tokens, e))
        chosen = np.argpartition(-keys, top_k - 1, axis=1)[:, :top_k] if top_k < e else np.tile(np.arange(e),
                                                                                                 (tokens, 1))
        out[i] = np.bincount(owner[chosen.ravel()], minlength=ranks)
    return check_matrix(out, ranks)


def scaled(matrix: Matrix, factor: int) -> Matrix:
    """Every entry times ``factor`` (>= 1): the same traffic in chunks ``factor`` times finer."""
    _positive(factor, "factor")
    return tuple(tuple(v * factor for v in row) for row in matrix)


def parse(spec: str, ranks: int) -> Matrix:
    """The matrix ``--matrix SPEC`` names for ``ranks`` ranks (``MATRIX_FORMS``)."""
    if not isinstance(spec, str) or not spec:
        raise ScheduleError(f"--matrix: expected {MATRIX_FORMS}, got {spec!r}")
    head, _, rest = spec.partition(":")
    if head == "uniform":
        return uniform(ranks, _int(rest, "uniform:N", 0) if rest else 1)
    if head == "zipf" and rest:
        return _zipf_spec(rest, ranks)
    if head == "trace" and rest:
        return trace(rest, ranks)
    if os.path.exists(spec):
        return load(spec, ranks)
    raise ScheduleError(f"--matrix: no file {spec!r} and not a known form ({MATRIX_FORMS})")


def _zipf_spec(text: str, ranks: int) -> Matrix:
    exponent, *options = text.split(",")
    try:
        s = float(exponent)
    except ValueError:
        raise ScheduleError(f"--matrix zipf:S: S must be a number, got {exponent!r}") from None
    known = {"tokens": DEFAULT_TOKENS, "experts": ranks, "top_k": 1, "seed": 0}
    for opt in options:
        name, sep, value = opt.partition("=")
        if not sep or name not in known:
            raise ScheduleError(f"--matrix zipf: unknown option {opt!r} (tokens=T, experts=E, top_k=K, seed=X)")
        known[name] = _int(value, f"zipf {name}", 0)
    return zipf(ranks, s, tokens=known["tokens"], experts=known["experts"], top_k=known["top_k"],
                seed=known["seed"])


def load(path: str | os.PathLike[str], ranks: int) -> Matrix:
    """A p x p matrix from a JSON or CSV file; ``ScheduleError`` naming the file and the row or line."""
    text = _read(path)
    where = str(path)
    if text.lstrip().startswith(("[", "{")):
        try:
            doc = json.loads(text, parse_constant=_no_constant)
        except ValueError as e:
            raise ScheduleError(f"{where}: not valid JSON: {e}") from None
        if isinstance(doc, dict) and "routes" in doc:
            return _trace_json(doc, ranks, where)
        rows = doc.get("matrix") if isinstance(doc, dict) else doc
        if isinstance(doc, dict) and set(doc) - {"matrix", "format"}:
            raise ScheduleError(f"{where}: unknown keys {sorted(set(doc) - {'matrix', 'format'})} (expected matrix)")
        try:
            return check_matrix(rows, ranks)
        except ScheduleError as e:
            raise ScheduleError(f"{where}: {str(e).replace('collective.matrix', 'matrix', 1)}") from None
    rows_out: list[list[int]] = []
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip() and not line.startswith("#")]
    for n, line in lines:
        try:
            rows_out.append([int(v) for v in next(csv.reader(io.StringIO(line)))])
        except ValueError:
            raise ScheduleError(f"{where} line {n}: expected integers separated by commas, got {line.strip()!r}") \
                from None
    if len(rows_out) != ranks:
        raise ScheduleError(f"{where}: {len(rows_out)} rows, expected {ranks} (one per rank)")
    try:
        return check_matrix(rows_out, ranks)
    except ScheduleError as e:
        msg = str(e).replace("collective.matrix ", "", 1)
        row = msg.split(":")[0].removeprefix("row ")
        line_no = lines[int(row)][0] if row.isdigit() else 0
        raise ScheduleError(f"{where} line {line_no}: {msg}") from None


def trace(path: str | os.PathLike[str], ranks: int) -> Matrix:
    """The matrix of a router trace (``SOURCE_RANK,EXPERT`` lines, or JSON ``routes``); experts in blocks on ranks.

    A CSV trace's experts are 0..max seen unless a ``# experts=E`` line says how many.
    """
    text = _read(path)
    where = str(path)
    if text.lstrip().startswith("{"):
        try:
            doc = json.loads(text, parse_constant=_no_constant)
        except ValueError as e:
            raise ScheduleError(f"{where}: not valid JSON: {e}") from None
        return _trace_json(doc, ranks, where)
    src: list[int] = []
    exp: list[int] = []
    experts: int | None = None
    for n, line in enumerate(text.splitlines(), 1):
        body = line.strip()
        if body.startswith("#"):
            key, sep, value = body.lstrip("# ").partition("=")
            if sep and key.strip() == "experts":
                experts = _int(value.strip(), f"{where} line {n}: experts", 1)
            continue
        if not body or body.replace(" ", "").lower() == "rank,expert":
            continue
        fields = [f.strip() for f in body.split(",")]
        if len(fields) != 2 or not all(f.isdigit() for f in fields):
            raise ScheduleError(f"{where} line {n}: expected SOURCE_RANK,EXPERT (two integers >= 0), got {body!r}")
        src.append(int(fields[0]))
        exp.append(int(fields[1]))
    return _routes(src, exp, experts, ranks, where)


def _trace_json(doc: object, ranks: int, where: str) -> Matrix:
    if not isinstance(doc, dict) or not isinstance(doc.get("routes"), list) or set(doc) - {"routes", "experts"}:
        raise ScheduleError(f'{where}: a JSON trace is {{"experts": E, "routes": [[rank, expert], ...]}}')
    experts = doc.get("experts")
    src: list[int] = []
    exp: list[int] = []
    for k, pair in enumerate(doc["routes"]):
        if (not isinstance(pair, list) or len(pair) != 2
                or any(v.__class__ is not int or v < 0 for v in pair)):
            raise ScheduleError(f"{where}: routes[{k}]: expected [rank, expert] (integers >= 0), got {pair!r}")
        src.append(pair[0])
        exp.append(pair[1])
    if experts is not None and (experts.__class__ is not int or experts < 1):
        raise ScheduleError(f"{where}: experts must be an integer >= 1, got {experts!r}")
    return _routes(src, exp, experts, ranks, where)


def _routes(src: list[int], exp: list[int], experts: int | None, ranks: int, where: str) -> Matrix:
    s = np.array(src, dtype=np.int64)
    e = np.array(exp, dtype=np.int64)
    if len(s) and int(s.max()) >= ranks:
        k = int(np.argmax(s >= ranks))
        raise ScheduleError(f"{where}: route {k} comes from rank {int(s[k])}, out of range for {ranks} ranks")
    count = experts if experts is not None else (int(e.max()) + 1 if len(e) else ranks)
    if len(e) and int(e.max()) >= count:
        k = int(np.argmax(e >= count))
        raise ScheduleError(f"{where}: route {k} goes to expert {int(e[k])}, out of range for {count} experts")
    if len(s) > MAX_SLOTS:
        raise ScheduleError(f"{where}: {len(s)} routes, over the limit of {MAX_SLOTS}")
    out = np.zeros((ranks, ranks), dtype=np.int64)
    np.add.at(out, (s, expert_rank(e, count, ranks)), 1)
    return check_matrix(out, ranks)


def _read(path: str | os.PathLike[str]) -> str:
    try:
        return read_bytes(path, MAX_MATRIX_FILE_BYTES).decode()
    except UnicodeDecodeError:
        raise ScheduleError(f"{Path(path)}: not a text file") from None


def _no_constant(name: str) -> object:
    raise ScheduleError(f"matrix file holds {name}, which is not JSON")


def _int(text: str, what: str, low: int) -> int:
    try:
        v = int(text)
    except ValueError:
        raise ScheduleError(f"{what}: expected an integer >= {low}, got {text!r}") from None
    if v < low:
        raise ScheduleError(f"{what}: expected an integer >= {low}, got {v}")
    return v


def _positive(v: object, what: str, low: int = 1) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise ScheduleError(f"{what} must be an integer >= {low}, got {v!r}")
