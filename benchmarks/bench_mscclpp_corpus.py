"""Benchmark: every MSCCL++ plan of a directory read, verified and simulated, one row a plan.

    python benchmarks/bench_mscclpp_corpus.py DIR [DIR ...] [--topology dgx-h100] [--size 1MiB] [--json]
                                              [--no-simulate]

For each ``*.json`` plan (sorted by name): its collective, GPUs, protocol and thread blocks; whether it reads
(``read_plan``: parsed, replayed on the happens-before of its synchronisation, laid out as a schedule, with
no problem of its own, or for a ``test`` plan no deadlock), verifies (``sim.verify.plan.verify_plan``: no
finding; a ``test`` plan has no postcondition and counts when it reads) and simulates
(``simulate_under("msccl", ...)`` with the plan's protocol, its ranks on the preset's first ones, at
``--size``); the wall and CPU time of reading + verifying (``verify_plan`` reads the plan itself) and the
simulated time. A failure names its first error. The last lines count each column and name the largest plan
with its read + verify time.

The preset (``--topology auto``, the default): ``dgx-h100`` with as many nodes of 8 GPUs as the plan needs,
but ``gb200-nvl72:1`` for a plan whose switch channels group more than 8 GPUs (an NVLink SHARP multicast
object spans one NVLink domain: 8 GPUs in a DGX H100, 72 in a GB200 NVL72). ``--topology PRESET`` takes that
preset with as many nodes as the plan needs, for every plan.

Plans of MSCCL++'s own DSL: tests/data/mscclpp_heldout (SOURCES.md there) and tests/data/foreign/mscclpp.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from algorithms.errors import CollschedError
from algorithms.formats.mscclpp import read_plan
from sim.machine.runtime import simulate_under
from sim.topology import from_spec
from sim.topology.placement import place
from sim.units import parse_size
from sim.verify.plan import verify_plan

GPUS_PER_NODE = {"dgx-h100": 8, "hgx-h200": 8, "dgx-a100": 8, "dgx-b200": 8, "gb200-nvl72": 72}


def preset_for(doc: dict[str, Any], preset: str) -> str:
    """The topology spec a plan runs on (module docstring)."""
    gpus = len(doc.get("gpus", []))
    if preset == "auto":
        widest = max((grp.get("size", 0) for g in doc.get("gpus", []) for ch in g.get("channels", [])
                      if ch.get("channel_type") == "switch" for grp in ch.get("rank_groups", [])), default=0)
        preset = "gb200-nvl72" if widest > GPUS_PER_NODE["dgx-h100"] else "dgx-h100"
    per = GPUS_PER_NODE.get(preset, 8)
    return f"{preset}:{max(1, math.ceil(gpus / per))}"


def _first_line(e: BaseException) -> str:
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    return f"{type(e).__name__}: {text}"[:160]


def row(path: Path, *, preset: str, size: float, simulate: bool) -> dict[str, Any]:
    """One plan's row (module docstring)."""
    text = path.read_bytes()
    doc = json.loads(text)
    gpus = len(doc.get("gpus", []))
    blocks = sum(len(g.get("threadblocks", [])) for g in doc.get("gpus", []))
    out: dict[str, Any] = {"plan": path.name, "collective": doc.get("collective"), "gpus": gpus,
                           "protocol": doc.get("protocol", "Simple"), "threadblocks": blocks, "bytes": len(text),
                           "topology": preset_for(doc, preset), "read": False, "verified": False, "simulated": None,
                           "read_verify_s": None, "read_verify_cpu_s": None, "sim_time_us": None, "error": ""}
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        report = verify_plan(text)
    except (CollschedError, ValueError, KeyError, TypeError) as e:  # a plan that cannot be read at all
        out["error"] = _first_line(e)
        return out
    out["read_verify_s"] = time.perf_counter() - t0
    out["read_verify_cpu_s"] = time.process_time() - c0
    got = read_plan(text)
    out["read"] = got.schedule is not None and got.error() is None
    test_plan = got.layout.custom
    out["verified"] = out["read"] if test_plan else report.ok
    if not report.ok and not test_plan:
        out["error"] = report.findings[0].message[:160]
    elif not out["read"]:
        err = got.error()
        out["error"] = str(err)[:160] if err else "no schedule"
    if not simulate or got.schedule is None:
        return out
    s = got.schedule
    try:
        whole = from_spec(out["topology"])
        topo = place(whole, tuple(range(s.ranks)), partial=True) if s.ranks < whole.ranks else whole
        result, _ = simulate_under("msccl", s, topo, size, msccl_proto=got.protocol)
        out["simulated"] = True
        out["sim_time_us"] = result.time * 1e6
    except Exception as e:
        out["simulated"] = False
        out["error"] = out["error"] or _first_line(e)
    return out


def table(rows: list[dict[str, Any]]) -> str:
    head = f"{'plan':<48} {'coll':<13} {'gpus':>4} {'proto':<6} {'tbs':>5} {'read':>4} {'verif':>5} {'sim':>4} " \
           f"{'r+v s':>7} {'cpu s':>6} {'topology':<14} {'sim us':>9}  error"
    lines = [head, "-" * len(head)]
    yes = {True: "ok", False: "NO", None: "-"}
    for r in rows:
        rv = f"{r['read_verify_s']:.3f}" if r["read_verify_s"] is not None else "-"
        cpu = f"{r['read_verify_cpu_s']:.2f}" if r["read_verify_cpu_s"] is not None else "-"
        st = f"{r['sim_time_us']:.2f}" if r["sim_time_us"] is not None else "-"
        lines.append(f"{r['plan'][:48]:<48} {str(r['collective'])[:13]:<13} {r['gpus']:>4} {r['protocol']:<6} "
                     f"{r['threadblocks']:>5} {yes[r['read']]:>4} {yes[r['verified']]:>5} {yes[r['simulated']]:>4} "
                     f"{rv:>7} {cpu:>6} {r['topology']:<14} {st:>9}  {r['error']}")
    n = len(rows)
    lines.append(f"read {sum(r['read'] for r in rows)}/{n}, verified {sum(r['verified'] for r in rows)}/{n}, "
                 f"simulated {sum(bool(r['simulated']) for r in rows)}/{n}")
    if rows:
        big = max(rows, key=lambda r: r["bytes"])
        rv = (f"{big['read_verify_s']:.2f} s wall, {big['read_verify_cpu_s']:.2f} s CPU"
              if big["read_verify_s"] is not None else "not read")
        lines.append(f"largest plan: {big['plan']} ({big['bytes'] / 1e6:.1f} MB, {big['gpus']} GPUs, "
                     f"{big['threadblocks']} thread blocks): read + verify {rv}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dirs", nargs="+", type=Path, help="directories of MSCCL++ plans (*.json)")
    p.add_argument("--topology", default="auto", help="a GPU preset taking a node count, or auto (the default: "
                                                      "module docstring)")
    p.add_argument("--size", default="1MiB", help="message size to simulate (default 1MiB)")
    p.add_argument("--no-simulate", action="store_true", help="read and verify only")
    p.add_argument("--json", action="store_true", help="one JSON object a row instead of the table")
    args = p.parse_args(argv)
    paths = sorted(q for d in args.dirs for q in d.glob("*.json"))
    size = parse_size(args.size)
    rows = []
    for path in paths:
        r = row(path, preset=args.topology, size=size, simulate=not args.no_simulate)
        rows.append(r)
        if args.json:
            print(json.dumps(r), flush=True)
    if not args.json:
        print(table(rows))
    return 0 if all(r["verified"] and r["simulated"] is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
