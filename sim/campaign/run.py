"""Run a campaign: what is missing from the store, estimated, then computed on a pool or on Dask.

``run_campaign`` expands the campaign (after ``spec.check_cap`` has refused one too large from the product
of its axis lengths), keeps the configurations whose keys the store lacks, and computes a sample of them
here (stored like any other: nothing is computed twice) to estimate the rest: seconds per configuration
times those left over the workers, and the memory of that many workers. A campaign over ``max_hours`` or
``max_memory`` is refused (``CampaignRefused``, with the estimate). The rest goes to the executor in tasks of
about ``TASK_SECONDS`` each; every completed task's rows are one transaction in the store, and the
progress bar (tqdm, with its ETA) advances.
"""

from __future__ import annotations

import math
import os
import resource
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sim.campaign.spec import MAX_CONFIGS, Campaign, CampaignError, check_cap
from sim.campaign.store import Store

__all__ = ["TASK_SECONDS", "CampaignRefused", "Estimate", "RunSummary", "plan_tasks", "run_campaign"]

TASK_SECONDS = 0.5
"""Aim for tasks of about this long: long enough that handing one over costs little, short enough that a
kill loses little and the progress bar moves."""
MAX_TASK = 256
SAMPLE = 12
"""Configurations the estimate times here (after one that warms the imports), in runs of ``RUN`` neighbours
spread over the missing ones."""
RUN = 3


@dataclass(frozen=True)
class Estimate:
    """What a campaign is expected to cost, from a sample of its configurations timed in this process."""

    total: int
    """Configurations in the campaign."""
    missing: int
    """Those not yet in the store (the sample's included)."""
    sampled: int
    seconds_each: float
    workers: int
    worker_bytes: float
    """Peak memory of this process after the sample: what each worker is expected to hold."""

    @property
    def seconds(self) -> float:
        """Wall time to compute what is missing after the sample, on ``workers`` workers."""
        return self.seconds_each * max(0, self.missing - self.sampled) / max(1, self.workers)

    @property
    def memory_bytes(self) -> float:
        return self.worker_bytes * self.workers

    def to_dict(self) -> dict[str, Any]:
        return {"configurations": self.total, "missing": self.missing, "sampled": self.sampled,
                "seconds_each": self.seconds_each, "workers": self.workers, "hours": self.seconds / 3600,
                "memory_bytes": self.memory_bytes}

    def describe(self) -> str:
        return (f"{self.total:,} configurations, {self.missing:,} to compute; {self.seconds_each * 1e3:.3g} ms each "
                f"(a sample of {self.sampled}): about {_duration(self.seconds)} on {self.workers} worker"
                f"{'s' if self.workers != 1 else ''}, {self.memory_bytes / 2**20:,.0f} MiB of memory")


def _duration(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


class CampaignRefused(CampaignError):
    """The estimate exceeds the time or memory given; ``estimate`` holds it."""

    def __init__(self, message: str, estimate: Estimate) -> None:
        super().__init__(message)
        self.estimate = estimate


@dataclass
class RunSummary:
    """What one ``run_campaign`` did."""

    total: int
    already: int
    """Configurations found in the store."""
    computed: int = 0
    errors: int = 0
    executor: str = "none"
    workers: int = 0
    wall_s: float = 0.0
    run_id: int | None = None
    estimate: Estimate | None = None
    statuses: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"configurations": self.total, "already_stored": self.already, "computed": self.computed,
                "errors": self.errors, "executor": self.executor, "workers": self.workers, "wall_s": self.wall_s,
                "run_id": self.run_id, "estimate": self.estimate.to_dict() if self.estimate else None,
                "statuses": self.statuses}


def _peak_rss() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return float(peak if sys.platform == "darwin" else peak * 1024)


def plan_tasks(items: Sequence[tuple[str, Mapping[str, Any]]], seconds_each: float, workers: int) -> list[
        list[tuple[str, Mapping[str, Any]]]]:
    """``items`` in consecutive tasks of about ``TASK_SECONDS`` each (at most ``MAX_TASK`` configurations),
    and at least four tasks per worker where there are enough configurations. The last tasks shrink (each at
    most the remainder over twice the workers, down to an eighth of the others): the workers finish together
    instead of one idling through the other's last task."""
    if not items:
        return []
    w = max(1, workers)
    size = max(1, min(MAX_TASK, int(TASK_SECONDS / max(seconds_each, 1e-6))))
    size = max(1, min(size, math.ceil(len(items) / (4 * w))))
    tasks, i = [], 0
    while i < len(items):
        n = min(size, max(math.ceil((len(items) - i) / (2 * w)), math.ceil(size / 8)))
        tasks.append(list(items[i:i + n]))
        i += n
    return tasks


def run_campaign(campaign: Campaign, store: Store, *, workers: int | None = None, scheduler: str | None = None,
                 client: Any = None, max_hours: float | None = None, max_memory: float | None = None,
                 max_configs: int = MAX_CONFIGS, sample: int = SAMPLE, estimate_only: bool = False,
                 progress: bool = True, log: Any = None) -> RunSummary:
    """Compute the campaign's configurations missing from ``store``.

    ``workers``: pool processes (default ``os.cpu_count()``); ``scheduler`` (an address) or ``client``: run
    on that Dask cluster instead. ``max_hours``, ``max_memory`` (bytes; default ``sim.guards.memory_budget``):
    refuse, after the sample, a campaign whose estimate exceeds them. ``estimate_only``: stop after the
    estimate. ``log``: a stream for one line of estimate (default none)."""
    from sim.guards import memory_budget
    from sim.progress import bar

    t0 = time.perf_counter()
    total = check_cap(campaign, max_configs)
    by_key: dict[str, Mapping[str, Any]] = {}
    for c in campaign.configs():
        by_key.setdefault(c.key, c.canonical())
    missing = store.missing(by_key)
    summary = RunSummary(total=total, already=total - len(missing))
    if not missing:
        return summary
    own_client = None
    if scheduler is not None and client is None:
        from distributed import Client

        try:
            client = own_client = Client(scheduler, timeout="30s")
        except OSError as e:
            raise CampaignError(f"--scheduler {scheduler}: cannot connect: {e}") from None
    try:
        if client is not None:
            from sim.campaign.executors import dask_threads

            executor, n = "dask", dask_threads(client=client)
        else:
            executor, n = "pool", max(1, workers or os.cpu_count() or 1)
        summary.executor, summary.workers = executor, n
        run_id = store.begin_run(campaign.name, executor, n, total, len(missing))
        pool: Any = None
        summary.run_id = run_id
        status = "interrupted"
        try:
            with bar(len(missing), unit="config", desc=campaign.name, enabled=progress) as pbar:
                def sink(rows: list[tuple[str, dict[str, Any]]]) -> None:
                    store.add([(k, by_key[k], r) for k, r in rows], campaign.version, run_id)
                    summary.computed += len(rows)
                    for _k, r in rows:
                        summary.statuses[r["status"]] = summary.statuses.get(r["status"], 0) + 1
                        summary.errors += r["status"] == "error"
                    pbar.update(len(rows))

                if executor == "pool" and not estimate_only and len(missing) > sample + 1:
                    from sim.campaign.executors import start_pool

                    pool = start_pool(n, campaign.imports)  # its workers warm up while the sample runs here
                estimate, rest = _sample(campaign, missing, by_key, total, n, sample, sink)
                summary.estimate = estimate
                if log is not None:
                    print(f"collsched campaign: estimate: {estimate.describe()}", file=log)
                budget = memory_budget() if max_memory is None else max_memory
                refusal = []
                if max_hours is not None and estimate.seconds > max_hours * 3600:
                    refusal.append(f"more than --max-hours {max_hours:g}")
                if estimate.memory_bytes > budget:
                    refusal.append(f"more than the memory there is ({budget / 2**20:,.0f} MiB; --max-memory)")
                if refusal:
                    status = "refused"
                    raise CampaignRefused(f"refused: {estimate.describe()}: {' and '.join(refusal)} (the "
                                          f"{estimate.sampled} sampled configurations are stored)", estimate)
                if estimate_only:
                    status = "estimated"
                    return summary
                items = [(k, by_key[k]) for k in rest]
                tasks = plan_tasks(items, estimate.seconds_each, n)
                if client is not None:
                    from sim.campaign.executors import run_dask

                    run_dask(tasks, campaign.imports, sink, client=client)
                else:
                    from sim.campaign.executors import run_pool

                    run_pool(tasks, n, campaign.imports, sink, pool)
                    pool = None  # run_pool shut it down
                status = "done"
        finally:
            if pool is not None:  # refused, estimated only, or the sample raised: nothing may stay running
                pool.shutdown(wait=True, cancel_futures=True)
            store.end_run(run_id, status)
    finally:
        if own_client is not None:
            own_client.close()
        summary.wall_s = time.perf_counter() - t0
    return summary


def _sample(campaign: Campaign, missing: Sequence[str], by_key: Mapping[str, Mapping[str, Any]], total: int,
            workers: int, sample: int, sink: Any) -> tuple[Estimate, list[str]]:
    """Compute one configuration (the imports warm), then ``sample`` more here, in runs of ``RUN`` neighbours
    spread over ``missing``; the estimate and the keys left.

    Neighbours share a topology and a schedule (sizes vary fastest), which a worker builds once for all
    the sizes: the first of a run prices a cold configuration, the others warm ones, and a configuration
    is expected to cost the warm time plus the cold excess shared by the campaign's sizes."""
    from sim.campaign.simulate import run_chunk

    sink(run_chunk([(missing[0], by_key[missing[0]])], campaign.imports))
    rest = missing[1:]
    runs = max(1, min(sample, len(rest)) // RUN)
    starts = sorted({round(i * max(0, len(rest) - RUN) / max(1, runs - 1)) for i in range(runs)})
    picks: list[list[str]] = []
    taken: set[str] = set()
    for i in starts:
        run = [k for k in rest[i:i + RUN] if k not in taken]
        taken.update(run)
        if run:
            picks.append(run)
    cold: list[float] = []
    warm: list[float] = []
    for run in picks:
        for j, key in enumerate(run):
            t = time.perf_counter()
            sink(run_chunk([(key, by_key[key])], campaign.imports))
            (cold if j == 0 else warm).append(time.perf_counter() - t)
    c = sum(cold) / len(cold) if cold else 0.0
    w = sum(warm) / len(warm) if warm else c
    each = w + max(0.0, c - w) / max(1, len(campaign.sizes))
    done = {missing[0], *taken}
    est = Estimate(total=total, missing=len(missing), sampled=len(done), seconds_each=each, workers=workers,
                   worker_bytes=_peak_rss())
    return est, [key for key in missing if key not in done]
