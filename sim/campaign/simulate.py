"""One configuration simulated, in whichever process runs it: a pool worker, a Dask worker, or the estimate's.

``simulate_config`` reuses what ``collsched sweep`` does for one run: the topology and the engine options
from ``sim.cli.common`` (``topology_from_args``, ``engine_options``), the simulation under the runtime from
``sim.cli.runtime.run_schedule``, and the bound from ``sim.cli.common.bound_for`` (``sim.bounds``), fed an
``argparse.Namespace`` built from the configuration's canonical JSON. A failure of any kind becomes a row
with ``status = "error"`` and the error's text: the campaign goes on.

Each process keeps the topologies, schedules and bounds it built (small LRU caches): neighbouring
configurations share them, and the expansion's order makes neighbours of those that do.
"""

from __future__ import annotations

import argparse
import json
import math
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from algorithms import registry
from algorithms.errors import CollschedError
from algorithms.ir import Kind

__all__ = ["STATUSES", "code_hash", "run_chunk", "simulate_config"]

STATUSES = ("ok", "incorrect", "unsupported", "error")
"""A row's status: simulated and correct; simulated but its postcondition broken; the algorithm cannot serve
the topology's world (not a failure: the reason is kept); anything raised (the error text is kept)."""

_CACHE_SIZE = 64
_code: str | None = None
_caches: dict[str, OrderedDict[str, Any]] = {}
_imported: set[str] = set()


def code_hash() -> str:
    """sha256 (16 hex digits) of the ``algorithms`` and ``sim`` sources this process loaded from, once: stored
    with each row, so that rows computed by different code (a source tree edited during a campaign, another
    checkout on a Dask worker) can be told apart (``report.Report.codes``)."""
    global _code
    if _code is None:
        import hashlib
        from pathlib import Path

        root = Path(__file__).resolve().parents[2]
        h = hashlib.sha256()
        for pkg in ("algorithms", "sim"):
            for f in sorted((root / pkg).rglob("*.py")):
                h.update(str(f.relative_to(root)).encode())
                h.update(f.read_bytes())
        _code = h.hexdigest()[:16]
    return _code


def _cached(kind: str, key: str, make: Callable[[], Any]) -> Any:
    cache = _caches.setdefault(kind, OrderedDict())
    if key in cache:
        cache.move_to_end(key)
        return cache[key]
    value = make()
    cache[key] = value
    if len(cache) > _CACHE_SIZE:
        cache.popitem(last=False)
    return value


def _namespace(config: Mapping[str, Any]) -> argparse.Namespace:
    """The flags of ``collsched simulate`` that the configuration sets, as the CLI's helpers read them."""
    topo, net = config["topology"], config["network"]
    return argparse.Namespace(
        topology=topo["spec"], bandwidth=topo.get("bandwidth"), latency=topo.get("latency"),
        routing=topo.get("routing", "shortest"), placement=topo.get("placement", "identity"),
        mode=config["mode"], overhead=net.get("overhead"), reduce_bw=net.get("reduce_bw"), launch=net.get("launch"),
        message_cpu=net.get("message_cpu"), step_cost=net.get("step_cost"), protocol=net.get("protocol"),
        engine=net.get("engine", "auto"), runtime=config["runtime"], link_down=[], degrade=[], straggler=[],
        no_progress=True, file=None, matrix=config.get("matrix"), bound=config["bound"],
        collective=config["collective"], algorithm=config["algorithm"], root=config["root"], param=[], chunks=None)


def _finite(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and math.isfinite(x) else None


def simulate_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The result row of one configuration (``Config.canonical()``): its status, the simulated time and
    bandwidths, the bound and efficiency, or the error; ``wall_s`` is what it took here."""
    from sim.cli.common import (
        bound_for,
        engine_options,
        faults_from_args,
        matrix_from_args,
        topology_from_args,
        want_bound,
    )
    from sim.cli.runtime import default_group, run_schedule, runtime_of

    t0 = time.perf_counter()
    row: dict[str, Any] = {"status": "error", "ranks": None, "runtime": None, "params": None, "time_s": None,
                           "algbw_GBps": None, "busbw_GBps": None, "transfers": None, "engine": None,
                           "bound_s": None, "efficiency": None, "error": None}
    try:
        args = _namespace(config)
        where = json.dumps([config["topology"], config["network"]], sort_keys=True)
        topo = _cached("topology", where, lambda: topology_from_args(args))
        p = topo.ranks
        row["ranks"] = p
        row["runtime"] = runtime_of(args, topo)
        opts = _cached("options", json.dumps([where, config["mode"]]), lambda: engine_options(args))
        alg = registry.get(config["collective"], config["algorithm"])
        params = default_group(args, topo, dict(config["params"]))
        row["params"] = json.dumps(params, sort_keys=True)
        reason = alg.unsupported(p, params)
        if reason is not None:
            row.update(status="unsupported", error=alg.refusal(p, params) or reason)
            return _done(row, t0)
        matrix = matrix_from_args(args, config["collective"], p)
        what = json.dumps([config["collective"], config["algorithm"], params, p, config["root"],
                           config.get("matrix")], sort_keys=True)
        schedule = _cached("schedule", what, lambda: alg.build(p, root=config["root"], **params) if matrix is None
                           else alg.build(p, matrix=matrix, **params))
        result = run_schedule(args, schedule, topo, float(config["size"]), opts)[0]
        d = result.to_dict()
        row.update(status="ok" if result.ok else "incorrect", time_s=_finite(result.time),
                   algbw_GBps=_finite(d.get("algbw_GBps")), busbw_GBps=_finite(d.get("busbw_GBps")),
                   transfers=d.get("transfers"), engine=d.get("engine"))
        if want_bound(args, p):
            unit = _cached("bound", json.dumps([where, config["collective"], config["root"], config.get("matrix")]),
                           lambda: bound_for(Kind(config["collective"]), config["root"], topo, 1.0,
                                             faults_from_args(args), schedule.collective))
            if unit is not None:
                b = unit.scaled(float(config["size"]))
                row["bound_s"] = _finite(b.bound_s)
                if row["time_s"]:
                    row["efficiency"] = _finite(b.efficiency(result.time))
    except Exception as e:  # any failure is this configuration's row, not the campaign's end
        row.update(status="error", error=_error_text(e))
    return _done(row, t0)


def _error_text(e: BaseException) -> str:
    if isinstance(e, CollschedError):
        return str(e)
    where = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ is not None else None
    at = f" (at {where.filename.rsplit('/', 1)[-1]}:{where.lineno})" if where is not None else ""
    return f"{type(e).__name__}: {e}{at}"


def _done(row: dict[str, Any], t0: float) -> dict[str, Any]:
    row["wall_s"] = time.perf_counter() - t0
    row["code"] = code_hash()
    return row


def run_chunk(configs: Sequence[tuple[str, Mapping[str, Any]]], imports: Sequence[str] = ()) -> list[
        tuple[str, dict[str, Any]]]:
    """``(key, row)`` for each ``(key, canonical config)``: the task a pool or Dask worker runs. ``imports``:
    the campaign's modules that register algorithms, imported once per process."""
    todo = [m for m in imports if m not in _imported]
    if todo:
        registry.import_modules(todo, where="campaign imports")
        _imported.update(todo)
    return [(key, simulate_config(config)) for key, config in configs]
