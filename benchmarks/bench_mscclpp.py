"""Benchmark: read and verify MSCCL++ execution plans, the corpus MSCCL++ itself wrote and larger ones made here.

    python benchmarks/bench_mscclpp.py [--corpus DIR] [--big 8x8,16x16,32x16,32x32] [--repeat 3] [--json]
    python benchmarks/bench_mscclpp.py --mutants 25 [--seeds 6]

For each plan: its GPUs, thread blocks, ops and size, then the best of ``--repeat`` times of reading it
(``read_plan``: parse, replay on the happens-before of its synchronisation, lay out the schedule) and of
verifying it (``sim.verify.plan.verify_plan``: the reading again, the schedule's postcondition and the
ops named), the CPU time of that (the process's own, which a busy shared machine does not inflate), and the
verdict. The corpus is tests/data/foreign/mscclpp (MSCCL++'s DSL output and checked-in
plans, SOURCES.md there). ``--big PxK`` adds an all-pairs all-reduce in the DSL's shape (its
tests/single_node/allreduce.py: every GPU's K thread blocks each reduce one chunk from every peer with
``rres`` and write the sum back, between a relaxed handshake and a signal/wait) on P GPUs, P·K thread
blocks in all; and collsched's own writer's plans of a 32-rank ring all-reduce, Simple and LL. The last
line names the largest plan and its read + verify time.

``--mutants N``: mutation testing of every corpus plan instead (``sim.verify.plan_mutation``: at most N
mutants of each kind a plan, the adversarial executor judging the ones the verifier lets through over
``--seeds`` runs): mutants, caught, survivors (missed though the outcome changed), equivalent (the
executor saw no change) and caught but not named by the blamed op.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from algorithms import build
from algorithms.errors import ScheduleError
from algorithms.formats.mscclpp import dumps_plan, read_plan
from sim.verify.plan import verify_plan

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "data" / "foreign" / "mscclpp"


def allpairs(p: int, k: int) -> dict[str, Any]:
    """An all-pairs all-reduce in the shape MSCCL++'s DSL writes (module docstring): P GPUs, K thread blocks each."""
    gpus = []
    for r in range(p):
        peers = [q for q in range(p) if q != r]
        every = list(range(p - 1))
        tbs = []
        for j in range(k):
            c = r * k + j
            mine = {"type": "i", "index": c, "size": 1}
            theirs = [{"buffer_id": i, "index": c, "size": 1} for i in every]
            ops = [{"name": "nop"}, {"name": "rlxsignal", "channel_ids": every, "channel_type": "memory"},
                   {"name": "nop"}, {"name": "rlxwait", "channel_ids": every, "channel_type": "memory"},
                   {"name": "nop"},
                   {"name": "rres", "src_buff": [mine, *theirs], "dst_buff": [mine, *theirs],
                    "channel_type": "memory", "reduce_op": "sum"},
                   {"name": "nop"}, {"name": "signal", "channel_ids": every, "channel_type": "memory"},
                   {"name": "nop"}, {"name": "wait", "channel_ids": every, "channel_type": "memory"},
                   {"name": "nop"}]
            tbs.append({"id": j, "ops": ops,
                        "channels": [{"channel_type": "memory", "channel_ids": [j * (p - 1) + i for i in every]}],
                        "remote_buffer_refs": [{"access_channel_type": "memory", "remote_buffer_ids": every}]})
        gpus.append({"id": r, "input_chunks": p * k, "output_chunks": p * k, "scratch_chunks": 0,
                     "channels": [{"channel_type": "memory", "connected_to": peers * k}],
                     "remote_buffers": [{"rank": q, "type": "i", "access_channel_types": ["memory"]} for q in peers],
                     "semaphores": [], "threadblocks": tbs})
    return {"name": f"allpairs_{p}x{k}", "collective": "allreduce", "protocol": "Simple", "inplace": True,
            "gpus": gpus}


def _shape(text: str) -> tuple[int, int, int]:
    obj = json.loads(text)
    tbs = sum(len(g["threadblocks"]) for g in obj["gpus"])
    ops = sum(len(tb["ops"]) + sum(len(op.get("ops", [])) for op in tb["ops"])
              for g in obj["gpus"] for tb in g["threadblocks"])
    return len(obj["gpus"]), tbs, ops


def _best(fn: Any, repeat: int) -> tuple[float, Any, float]:
    """The best wall time of ``repeat`` calls, the last result, and the best CPU time (the process's own: on a
    shared machine the wall time counts other processes' turns too)."""
    best, out, cpu = float("inf"), None, float("inf")
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        best, cpu = min(best, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    return best, out, cpu


def bench(plans: list[tuple[str, str]], repeat: int) -> list[dict[str, Any]]:
    rows = []
    for name, text in plans:
        gpus, tbs, ops = _shape(text)
        row: dict[str, Any] = {"plan": name, "gpus": gpus, "threadblocks": tbs, "ops": ops,
                               "KiB": round(len(text) / 1024, 1)}
        try:
            row["read_s"], got, _ = _best(lambda text=text: read_plan(text), repeat)
            row["read_verify_s"], report, row["cpu_s"] = _best(lambda text=text: verify_plan(text), repeat)
            row["verdict"] = ("OK" if report.ok else f"{len(report.findings)} problem(s)") if got.schedule is not None \
                or report.findings else "OK"
            if got.layout.custom:
                row["verdict"] += " (test plan: sync only)"
        except ScheduleError as e:
            row["read_s"] = row["read_verify_s"] = row["cpu_s"] = None
            row["verdict"] = f"refused: {str(e)[:60]}"
        rows.append(row)
    return rows


def mutants(names: list[str], n: int, seeds: int) -> list[dict[str, Any]]:
    from sim.verify.plan_mutation import mutation_test

    rows = []
    for name in names:
        plan = json.loads((CORPUS / name).read_text())
        t0 = time.perf_counter()
        try:
            rep = mutation_test(plan, sample=n, seeds=seeds)
        except ScheduleError as e:
            rows.append({"plan": name, "error": str(e)[:60]})
            continue
        rows.append({"plan": name, "mutants": len(rep.results), "caught": rep.caught,
                     "survivors": len(rep.survivors), "equivalent": rep.equivalent, "unnamed": len(rep.unnamed),
                     "kill_rate": rep.kill_rate, "s": time.perf_counter() - t0})
    return rows


def _table(rows: list[dict[str, Any]], cols: list[str]) -> str:
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.3f}"
        return "-" if v is None else str(v)

    width = {c: max(len(c), *(len(cell(r.get(c))) for r in rows)) for c in cols}
    lines = ["  ".join(c.ljust(width[c]) for c in cols)]
    lines += ["  ".join(cell(r.get(c)).ljust(width[c]) for c in cols) for r in rows]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--big", default="8x8,16x16,32x16,32x32", help="all-pairs plans PxK to add ('' for none)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--mutants", type=int, default=0, metavar="N")
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    names = sorted(p.name for p in args.corpus.glob("*.json"))
    if args.mutants:
        rows = mutants(names, args.mutants, args.seeds)
        if args.json:
            print(json.dumps(rows))
        else:
            print(_table(rows, ["plan", "mutants", "caught", "survivors", "equivalent", "unnamed", "kill_rate", "s"]))
            n = sum(r.get("mutants", 0) for r in rows)
            caught = sum(r.get("caught", 0) for r in rows)
            surv = sum(r.get("survivors", 0) for r in rows)
            print(f"all: {n} mutants, {caught} caught, {surv} survivors, kill rate "
                  f"{caught / (caught + surv) if caught + surv else 1.0:.3f}, "
                  f"{sum(r.get('unnamed', 0) for r in rows)} caught without naming the blamed op")
        return 0
    plans = [(n, (args.corpus / n).read_text()) for n in names]
    for spec in filter(None, args.big.split(",")):
        p, k = (int(x) for x in spec.lower().split("x"))
        plans.append((f"allpairs {p}x{k} (DSL shape)", json.dumps(allpairs(p, k))))
    for protocol in ("Simple", "LL"):
        plans.append((f"collsched ring 32 {protocol}", dumps_plan(build("allreduce", "ring", 32), protocol=protocol)))
    rows = bench(plans, args.repeat)
    if args.json:
        print(json.dumps(rows))
        return 0
    print(_table(rows, ["plan", "gpus", "threadblocks", "ops", "KiB", "read_s", "read_verify_s", "cpu_s", "verdict"]))
    corpus = [r for r in rows[:len(names)] if r["read_verify_s"] is not None]
    for label, group in (("corpus", corpus), ("all", [r for r in rows if r["read_verify_s"] is not None])):
        big = max(group, key=lambda r: r["KiB"])
        print(f"largest {label} plan: {big['plan']} ({big['KiB']} KiB, {big['ops']} ops): read + verify "
              f"{big['read_verify_s']:.3f} s ({big['cpu_s']:.3f} s of CPU)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
