"""Simulator speed and memory at cluster scale: whole `collsched simulate` commands, side by side.

    python benchmarks/bench_sim.py                        # the issue-14 table (simpy up to p = 1024)
    python benchmarks/bench_sim.py --ranks 256 1024 --engines fast
    python benchmarks/bench_sim.py --simpy-max 4096 --timeout 900   # simpy at 4096 too (hours, ~25 GB)

Every case is one `collsched simulate --json` command in a fresh process,
measured as `/usr/bin/time -v` measures a command: wall seconds from start to
exit (interpreter start-up, imports, building the schedule, the dependency
graph, the simulation, the postcondition and the JSON included) and the
process's peak resident memory (``ru_maxrss`` from ``wait4``). Cases:

- ring all-reduce on ring:P (50 GB/s, 1 us links), 256 MiB, P = 256, 1024, 4096;
- direct all-reduce on switch:1024 (every rank sends to every other at once:
  1023 flows share every link);
- pairwise all-to-all on fattree:8 (128 ranks);

each in both modes and with both engines. The simpy engine is skipped above
``--simpy-max`` ranks (at 4096 it needs about ten minutes and more memory than
a 23 GB machine has); a skipped or timed-out case prints its reason. Goals
(issue 14): ring:1024 under 3 s and 500 MB in both modes; ring:4096 under 60 s
and 8 GB; direct switch:1024 under 30 s.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple[str, ...]
    ranks: int
    simpy_skip: dict[str, str] | None = None
    """mode -> why the simpy engine cannot run this case here."""


def cases(ranks: list[int], direct: bool, alltoall: bool) -> list[Case]:
    out = [Case(f"ring allreduce ring:{p}", ("-c", "allreduce", "-a", "ring", "-t", f"ring:{p}", "--size", "256MiB",
                                             "--bandwidth", "50GB/s", "--latency", "1us"), p) for p in ranks]
    if direct:
        out.append(Case("direct allreduce switch:1024", ("-c", "allreduce", "-a", "direct", "-t", "switch:1024",
                                                         "--size", "256MiB"), 1024,
                        {"dataflow": "its dependency lists hold every copy's 1023 reductions: 10^9 entries"}))
    if alltoall:
        out.append(Case("pairwise alltoall fattree:8", ("-c", "alltoall", "-a", "pairwise", "-t", "fattree:8",
                                                        "--size", "256MiB"), 128))
    return out


def command() -> list[str]:
    """The `collsched` console script of this interpreter's environment (else `python -m runners.commands.cli`)."""
    script = Path(sys.executable).with_name("collsched")
    if script.exists():
        return [str(script)]
    found = shutil.which("collsched")
    return [found] if found else [sys.executable, "-m", "runners.commands.cli"]


def measure(argv: list[str], timeout: float, mem_limit: float) -> tuple[float, float, int, str]:
    """(wall s, peak MB, exit status, stdout) of one command, as /usr/bin/time -v sees it (-9: timed out).

    The command's address space is capped at ``mem_limit`` GB, so that a case too big for the machine
    fails with a MemoryError instead of pushing everything else on it into swap or the OOM killer.
    """
    def cap() -> None:
        limit = int(mem_limit * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, cwd=ROOT, preexec_fn=cap)
        deadline = t0 + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                rc = os.waitstatus_to_exitcode(status)
                break
            if time.perf_counter() > deadline:
                proc.kill()
                _pid, status, usage = os.wait4(proc.pid, 0)
                rc = -9
                break
            time.sleep(0.02)
        wall = time.perf_counter() - t0
        proc.returncode = rc  # reaped by wait4: tell Popen, so that it does not wait again
        out.seek(0)
        return wall, usage.ru_maxrss / 1024, rc, out.read().decode()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--ranks", type=int, nargs="+", default=[256, 1024, 4096], help="ring sizes")
    parser.add_argument("--modes", nargs="+", choices=("lockstep", "dataflow"), default=["lockstep", "dataflow"])
    parser.add_argument("--engines", nargs="+", choices=("simpy", "fast"), default=["simpy", "fast"])
    parser.add_argument("--simpy-max", type=int, default=1024, metavar="P", help="skip simpy above P ranks")
    parser.add_argument("--no-direct", action="store_true", help="skip direct all-reduce on switch:1024")
    parser.add_argument("--no-alltoall", action="store_true", help="skip pairwise all-to-all on fattree:8")
    parser.add_argument("--timeout", type=float, default=600.0, metavar="S", help="seconds per case (default 600)")
    parser.add_argument("--mem-limit", type=float, default=12.0, metavar="GB",
                        help="address-space cap per case (default 12 GB)")
    args = parser.parse_args()
    base = command()
    print(f"whole `collsched simulate --json` commands, each in a fresh process; {os.cpu_count()} CPUs; "
          f"load average {os.getloadavg()[0]:.1f} at the start")
    print(f"{'case':<30} {'mode':<9} {'engine':<6} {'transfers':>10} {'wall s':>8} {'peak MB':>8} "
          f"{'sim time s':>12} ok")
    for case in cases(args.ranks, not args.no_direct, not args.no_alltoall):
        for mode in args.modes:
            for engine in args.engines:
                head = f"{case.name:<30} {mode:<9} {engine:<6}"
                if engine == "simpy" and case.ranks > args.simpy_max:
                    print(f"{head} {'-':>10} skipped (simpy above --simpy-max {args.simpy_max})", flush=True)
                    continue
                if engine == "simpy" and case.simpy_skip and mode in case.simpy_skip:
                    print(f"{head} {'-':>10} skipped (simpy: {case.simpy_skip[mode]})", flush=True)
                    continue
                argv = [*base, "simulate", *case.args, "--mode", mode, "--engine", engine, "--json",
                        "--no-progress"]
                wall, peak, rc, out = measure(argv, args.timeout, args.mem_limit)
                if rc == -9:
                    print(f"{head} {'-':>10} {wall:>8.1f} {peak:>8.0f} timed out after {args.timeout:g} s",
                          flush=True)
                    continue
                try:
                    doc = json.loads(out.strip().splitlines()[-1])
                except (ValueError, IndexError):
                    print(f"{head} {'-':>10} {wall:>8.1f} {peak:>8.0f} failed (exit {rc}; over --mem-limit "
                          f"{args.mem_limit:g} GB?)", flush=True)
                    continue
                print(f"{head} {doc['transfers']:>10} {wall:>8.2f} {peak:>8.0f} {doc['time_s']:>12.6e} "
                      f"{doc['ok']}", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
