"""Discrete-event simulation of a schedule on a topology (simpy), with symbolic payloads.

Model (docs/design.md, "The simulator"). A transfer of b bytes from rank a to rank b':

1. *starts* when it may (``lockstep``: when the previous step has finished;
   ``dataflow``: when its dependencies have finished, ``sim.verify.dataflow``, and
   its message's turn has come on its ranks' ports: ``in_flight``, ``sim.engine.ports``) and
   reads (snapshots) its source then;
2. waits the endpoint overhead, plus the straggler delay when a or b' is a
   straggler;
3. streams its bytes as a *flow* along its route, at its max-min fair rate
   (progressive filling over the active flows, ``sim.engine.fairshare``: a flow
   held back by a slow link elsewhere leaves the rest of a shared link to the
   others), recomputed once per instant at which a flow starts or ends, over
   the flows connected to the links that changed; the link is busy while it
   carries a flow;
4. waits the route's latency (propagation of the last byte), then, for a
   ``reduce``, combines its b bytes at the destination: each rank reduces at
   ``reduce_bandwidth`` bytes/s, shared by the reductions it runs at once
   (a reduction is a flow on the rank's own "reducer" link, shared max-min too);
5. *ends*: writes its destination. In dataflow mode a write also waits for the
   transfers of its own step that read that slot to have started.

Two optional terms model a host-driven runtime (docs/design.md, "Machine model
and calibration"): ``message_cpu``, a rank's processor time per network message
it sends (before step 2) or receives (before the reduction), one message at a
time per rank; and ``launch``, a fixed cost per collective before anything
starts. Both are 0 by default, which leaves every result as described here.

A local transfer (a == b') has no network cost, only the reduction time. On a
contention-free schedule every step costs max(α + b/B + b·γ) and the result
equals the alpha-beta closed form (``sim.engine.closed_form``) to rounding.

Sizes follow nccl-tests (docs/design.md, "Sizes and bandwidths"): ``size`` is the buffer of allreduce,
broadcast and reduce, the output of allgather and gather, the input of
reducescatter, scatter and alltoall, the mean rank's input of alltoallv, and one token of a barrier.

This module is the simpy engine, the reference; ``simulate(engine="fast")``
computes the same model with ``sim.engine.fast`` (numpy arrays, no event per
transfer) and ``engine="auto"``, the default, does so whenever that is exact.
"""

from __future__ import annotations

import gc
import math
from array import array
from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from algorithms.ir import Collective, Kind, Op, Schedule
from sim import progress
from sim.engine.fairshare import FairShare
from sim.engine.options import ENGINES, MODES, EngineOptions, Faults, SimulationError
from sim.topology import Link, Topology, TopologyError
from sim.units import busbw_factor
from sim.verify.semantics import SlotLayout, initial_state, write
from sim.verify.verifier import DOUBLE_COUNT, UNINITIALISED_READ, Violation, check_final

__all__ = ["ENGINES", "MODES", "EngineOptions", "Faults", "SimResult", "SimulationError", "busbw_factor", "chunk_bytes",
           "simulate"]

def chunk_bytes(collective: Collective, size: float) -> float:
    """Bytes per chunk for a message of ``size`` bytes, by the nccl-tests size convention."""
    p, c = collective.ranks, collective.chunks
    k = collective.kind
    if k in (Kind.ALLREDUCE, Kind.BROADCAST, Kind.REDUCE):
        return size / c
    if k is Kind.BARRIER:
        return float(size)
    if k is Kind.ALLTOALLV:
        # size is the mean rank's input (the matrix's total over p), as alltoall's size is each rank's input.
        total = int(collective.traffic().sum())
        return size * p / total if total else 0.0
    # allgather/gather: the output; reducescatter/scatter/alltoall: the input; all p·C chunks.
    return size / (p * c)


@dataclass(frozen=True, eq=False)
class SimResult:
    """The outcome of one simulated run.

    Per-transfer arrays are indexed in program order (step by step, as
    ``Schedule.transfers()``): ``start`` (issued, source read), ``send_start``
    and ``send_end`` (bytes on the wire), ``end`` (destination written).
    ``link_busy`` maps each link that carried data to the seconds it carried
    at least one flow. Bandwidths are in bytes/s; ``algbw`` is size / time
    (infinite for a run that takes no time), ``busbw`` is algbw times
    ``busbw_factor``.
    """

    schedule: Schedule
    topology: Topology
    mode: str
    size: float
    chunk_bytes: float
    time: float
    start: np.ndarray = field(repr=False)
    send_start: np.ndarray = field(repr=False)
    send_end: np.ndarray = field(repr=False)
    end: np.ndarray = field(repr=False)
    link_busy: Mapping[Link, float] = field(repr=False)
    events: int
    violations: tuple[Violation, ...] = ()
    engine: str = "simpy"
    """The engine that ran: ``simpy`` or ``fast``; ``events`` counts its events (simpy: timeouts; fast:
    event times, or steps when it computed the run in closed form)."""
    switch_spans: tuple[tuple[float, float], ...] = field(default=(), repr=False)
    """Per switch op of the schedule (``Schedule.switch_ops``): when its first leg started and its last ended."""

    def __repr__(self) -> str:
        return (f"SimResult({self.schedule.name} {self.schedule.collective.describe()} on {self.topology.name}, "
                f"{self.mode}, size={self.size:g}, time={self.time:.9g}, transfers={self.transfers}, "
                f"events={self.events}, ok={self.ok})")

    @property
    def ok(self) -> bool:
        """True when every transfer ran and the final state meets the postcondition."""
        return not self.violations

    @property
    def transfers(self) -> int:
        """Number of transfers simulated."""
        return self.schedule.num_transfers

    @property
    def algbw(self) -> float:
        """Algorithm bandwidth in bytes/s (nccl-tests): size / time."""
        return self.size / self.time if self.time > 0 else math.inf

    @property
    def busbw(self) -> float:
        """Bus bandwidth in bytes/s (nccl-tests): algbw x the kind's factor."""
        coll = self.schedule.collective
        return self.algbw * busbw_factor(coll.kind, coll.ranks)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (no per-transfer data); infinite bandwidths become null."""
        def gb(x: float) -> float | None:
            return x / 1e9 if math.isfinite(x) else None

        return {"ok": self.ok, "time_s": self.time, "algbw_GBps": gb(self.algbw), "busbw_GBps": gb(self.busbw),
                "transfers": self.transfers, "events": self.events, "engine": self.engine}


def simulate(schedule: Schedule, topology: Topology, size: float, options: EngineOptions | None = None,
             **fields: Any) -> SimResult:
    """Simulate ``schedule`` moving a message of ``size`` bytes over ``topology`` (module docstring).

    ``options``: the run's ``EngineOptions`` (None: the defaults), checked when it was made: the mode, the
    per-message ``overhead``, ``reduce_bandwidth``, ``launch`` (every time in the result is later by it; None
    is 0 here), ``message_cpu`` (a transfer's send waits until its source's processor is free, then that long;
    its landing likewise at its destination), the faults, the progress bar and the engine. Keyword ``fields``
    name its fields and replace them (``simulate(s, t, n, overhead=2e-6)``, ``EngineOptions.of``).
    ``engine``: ``simpy``, ``fast`` or ``auto`` (``ENGINES``): both give the same times (to rounding) and
    the same verdict; auto takes fast unless the run needs what only simpy models (``message_cpu``) or the
    schedule races (two writes to a slot in one step, whose order only simpy's event order decides).
    """
    return _simulate(schedule, topology, size, EngineOptions.of(options, **fields), None)


def _simulate(schedule: Schedule, topology: Topology, size: float, options: EngineOptions,
              queued: np.ndarray | None, channels: np.ndarray | None = None) -> SimResult:
    """``simulate``; ``queued``: the transfers dataflow's send order queues (None: every remote one), so that a
    lowered switch operation's legs and gates, which no rank posts, stay out of the ranks' queues;
    ``channels``: each transfer's channel in the send order (None: ``schedule.channels``)."""
    if isinstance(size, bool) or not isinstance(size, int | float) or not 0 <= size < math.inf:
        raise SimulationError(f"size must be a finite number of bytes >= 0, got {size!r}")
    if topology.ranks != schedule.ranks:
        raise TopologyError(
            f"topology {topology.name} has {topology.ranks} ranks but the schedule needs {schedule.ranks}")
    faults = options.faults
    topology = faults.apply(topology)
    # The run allocates millions of small objects and frees none of them in cycles; the cyclic
    # collector's full passes over that heap would make the run superlinear in transfers.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        result = None
        if schedule.switch_ops:  # lowered to the flows they cause, run on the engine asked for, lifted back
            from sim.engine.switched import lift, lower

            if schedule.ways is not None:  # the lowering pins every pair to one explicit route
                raise SimulationError(f"schedule {schedule.name}: ways (Schedule.ways) are not simulated with "
                                      "switch operations")

            low = lower(schedule, topology, gates=options.mode == "dataflow")
            chunk = chunk_bytes(schedule.collective, size)
            per_byte = chunk_bytes(low.schedule.collective, 1.0)
            real = np.zeros(low.schedule.num_transfers, dtype=bool)
            real[low.transfers] = True
            low_channels = None
            if schedule.channels is not None:  # the real transfers keep theirs; legs and gates are not queued
                low_channels = np.zeros(low.schedule.num_transfers, dtype=np.int64)
                low_channels[low.transfers] = schedule.channels
            got = _simulate(low.schedule, low.topology, chunk / per_byte if per_byte else 0.0,
                            options.replace(faults=Faults(stragglers=faults.stragglers), launch=0.0), real,
                            low_channels)
            result = lift(got, low, schedule, topology, float(size), chunk)
        elif options.engine == "fast" or (options.engine == "auto" and not options.message_cpu):
            result = _fast(schedule, topology, float(size), options, strict=options.engine == "auto",
                           queued=queued, channels=channels)
        if result is None:
            result = _Run(schedule, topology, float(size), options, queued, channels).go()
        return _delayed(result, options.launch) if options.launch else result
    finally:
        if was_enabled:
            gc.enable()


def _fast(schedule: Schedule, topology: Topology, size: float, options: EngineOptions,
          strict: bool, queued: np.ndarray | None = None, channels: np.ndarray | None = None) -> SimResult | None:
    """The run on ``sim.engine.fast``; None when ``strict`` and the schedule races (simpy's event order decides)."""
    from sim.engine.fast import run_fast
    from sim.verify import fast as fastverify
    from sim.verify.verifier import RACE

    state, bad = fastverify.run(schedule, races=True)
    if any(v.kind == RACE for v in bad):
        if strict:
            return None
        bad = [v for v in bad if v.kind != RACE]  # reported by verify; the run keeps the first write
    bad.extend(fastverify.check(schedule, state))
    del state
    chunk = chunk_bytes(schedule.collective, size)
    got = run_fast(schedule, topology, size, options, chunk, queued=queued, channels=channels)

    def frozen(a: np.ndarray) -> np.ndarray:
        a.flags.writeable = False
        return a

    return SimResult(
        schedule=schedule, topology=topology, mode=options.mode, size=size, chunk_bytes=chunk, time=got["time"],
        start=frozen(got["start"]), send_start=frozen(got["send_start"]), send_end=frozen(got["send_end"]),
        end=frozen(got["end"]), link_busy=got["link_busy"], events=got["events"], violations=tuple(bad),
        engine="fast")


def _delayed(result: SimResult, launch: float) -> SimResult:
    """``result`` with every transfer, and the end, ``launch`` seconds later (a fixed cost per collective)."""
    def later(a: np.ndarray) -> np.ndarray:
        b = a + launch
        b.flags.writeable = False
        return b

    return replace(result, time=result.time + launch, start=later(result.start),
                   send_start=later(result.send_start), send_end=later(result.send_end), end=later(result.end),
                   switch_spans=tuple((s + launch, e + launch) for s, e in result.switch_spans))


class _Run:
    """One simulation: flat per-transfer arrays, driven by simpy timeouts (no processes).

    Hot paths avoid a simpy process per transfer: a transfer costs at most
    four timeouts (pre-delay, end of its flow, latency, end of its reduction),
    and rates are settled once per instant (an event after the instant's
    others), over the flows connected to the links that changed. Link ids
    from ``len(topology.links)`` on are the ranks' reducers.
    """

    def __init__(self, schedule: Schedule, topology: Topology, size: float, options: EngineOptions,
                 queued: np.ndarray | None = None, channels: np.ndarray | None = None) -> None:
        import simpy
        import simpy.events

        mode, overhead, reduce_bandwidth = options.mode, options.overhead, options.reduce_bandwidth
        self.env = simpy.Environment()
        self.Timeout = simpy.Timeout
        self.schedule = schedule
        self.topology = topology
        self.mode = mode
        self.dataflow = mode == "dataflow"
        self.size = size
        self.chunk = chunk_bytes(schedule.collective, size)
        self.progress = options.progress
        self.layout = SlotLayout(schedule)
        self.state = initial_state(self.layout)
        self.idempotent = schedule.collective.kind is Kind.BARRIER
        self.violations: list[Violation] = []

        flat = [t for s in schedule.steps for t in s.transfers]
        self.transfers = flat
        # First transfer number of every step, to name a transfer (step, index) on demand.
        self.step_first: list[int] = []
        i = 0
        for s in schedule.steps:
            self.step_first.append(i)
            i += len(s.transfers)
        self.step_first.append(i)
        n = len(flat)
        self.n = n
        bases = self.layout.bases
        # Flat per-transfer arrays: array('d'/'q') keeps p = 1024 (2 M transfers) within memory.
        self.src_slot = array("q", [bases[t.src_buf][t.src] + t.src_index for t in flat])
        self.dst_slot = array("q", [bases[t.dst_buf][t.dst] + t.dst_index for t in flat])
        self.snap: list[Any] = [None] * n

        # Timing of every transfer: pre-delay, links, post-delay (latency), bytes, reducer.
        nl = len(topology.links)
        self.nl = nl
        slow = {r: float(d) for r, d in options.faults.stragglers.items() if d}
        self.pre = array("d", bytes(8 * n))
        self.post = array("d", bytes(8 * n))
        self.nbytes = array("d", bytes(8 * n))
        self.flinks: list[tuple[int, ...]] = [()] * n
        self.reducer = array("q", [-1]) * n
        ways = [0] * n if schedule.ways is None else schedule.ways.tolist()
        routes = topology.route_links_ways({(t.src, t.dst, w) for t, w in zip(flat, ways, strict=True)
                                            if t.src != t.dst})
        reduce_op = Op.REDUCE
        for i, (t, way) in enumerate(zip(flat, ways, strict=True)):
            b = t.count * self.chunk
            self.nbytes[i] = b
            pre = slow.get(t.src, 0.0) + (slow.get(t.dst, 0.0) if t.dst != t.src else 0.0)
            post = 0.0
            if reduce_bandwidth is not None and t.op is reduce_op and b > 0:
                self.reducer[i] = nl + t.dst
            if t.src != t.dst:
                links, lat = routes[(t.src, t.dst, way)]
                self.flinks[i] = links if b > 0 else ()
                pre += overhead
                post += lat
            self.pre[i] = pre
            self.post[i] = post

        p = schedule.ranks
        # message_cpu: when each rank's processor is next free (a rank handles one message at a time).
        self.cpu = options.message_cpu
        self.cpu_free = [0.0] * p
        self.bw = topology.link_bandwidths() + [float(reduce_bandwidth or 1.0)] * p
        self.share = FairShare(self.bw)
        self.settling = False
        self.late = simpy.events.EventPriority(2)  # after simpy's NORMAL events of the same instant
        self.busy = [0.0] * (nl + p)
        self.busy_since = [0.0] * (nl + p)
        self.cur_links: list[tuple[int, ...]] = [()] * n
        self.reducing = bytearray(n)
        self.rate = [0.0] * n
        self.remaining = [0.0] * n
        self.last = [0.0] * n
        self.version = [0] * n
        unset = array("d", [math.nan]) * n
        self.t_start = array("d", unset)
        self.t_send_start = array("d", unset)
        self.t_send_end = array("d", unset)
        self.t_end = unset
        self.finished = 0
        self.events = 0
        self.to_start: list[int] = []
        self.to_finish: list[int] = []
        self.to_issue: list[int] = []  # transfers their port's queue lets start
        self.order: Any = None  # dataflow's send queues (sim.engine.ports.SendOrder); None: no queue
        self._bar: Any = None

        if mode == "lockstep":
            self.step = -1
            self.outstanding = 0
        else:
            from sim.verify.dataflow import Readiness, dataflow_graph

            self.ready = Readiness(dataflow_graph(schedule, progress=self.progress))
            if options.in_flight:
                from sim.engine.ports import SendOrder, ports

                self.order = SendOrder(ports(schedule, topology, queued, channels), options.in_flight)

    def _where(self, t: int) -> tuple[int, int]:
        si = bisect_right(self.step_first, t) - 1
        return si, t - self.step_first[si]

    # -- driver --------------------------------------------------------------------------

    def go(self) -> SimResult:
        if self.progress and self.n >= 20000 and progress.wanted():
            self._bar = progress.bar(self.n, unit="transfer", desc=self.schedule.name)
        try:
            if self.mode == "lockstep":
                self._next_step()
            else:
                self.to_start.extend(self.ready.startable())
            self._drain()
            self.env.run()
        finally:
            if self._bar is not None:
                self._bar.close()
        return self._result()

    def _drain(self) -> None:
        """Start and finish whatever became ready at this instant, then settle the link shares."""
        to_start, to_finish = self.to_start, self.to_finish
        order, to_issue = self.order, self.to_issue
        while to_start or to_issue or to_finish:
            while to_start:
                t = to_start.pop()
                if order is None:
                    self._start(t)
                else:  # t may start by its dependencies; its port's queue says when it does
                    to_issue.extend(order.ready(t))
            while to_issue:
                self._start(to_issue.pop())
            while to_finish:
                self._finish(to_finish.pop())
        if self.share.dirty and not self.settling:
            # Settle once the instant's other events have run (priority 2 sorts after simpy's NORMAL):
            # rates depend only on the set of flows, and many flows often start or end together.
            self.settling = True
            ev = self.env.event()
            ev.callbacks.append(self._on_settle)
            ev._ok = True
            ev._value = None
            self.env.schedule(ev, priority=self.late)

    def _next_step(self) -> None:
        # Lockstep: every transfer of the step reads before any of them writes.
        while self.outstanding == 0 and self.step + 1 < len(self.step_first) - 1:
            self.step += 1
            lo, hi = self.step_first[self.step], self.step_first[self.step + 1]
            self.outstanding = hi - lo
            self.to_start.extend(range(hi - 1, lo - 1, -1))

    # -- a transfer's life ---------------------------------------------------------------

    def _start(self, t: int) -> None:
        now = self.env.now
        self.t_start[t] = now
        s = self.src_slot[t]
        tr = self.transfers[t]
        snap = self.state[s:s + tr.count]
        self.snap[t] = snap
        if None in snap:
            k = snap.index(None)
            si, ti = self._where(t)
            self.violations.append(Violation(
                UNINITIALISED_READ, f"step {si} transfer {ti} ({tr!r}): reads rank {tr.src} {tr.src_buf}"
                f"[{tr.src_index + k}], which holds nothing", si, ti, tr.src, tr.src_buf.value, tr.src_index + k))
        if self.dataflow:
            self.to_finish.extend(self.ready.start(t))
        pre = self.pre[t]
        if self.cpu and tr.src != tr.dst:
            free = self.cpu_free
            free[tr.src] = max(now, free[tr.src]) + self.cpu
            pre += free[tr.src] - now
        if pre > 0:
            self.events += 1
            self.Timeout(self.env, pre, t).callbacks.append(self._on_pre)
        else:
            self._send(t)

    def _on_pre(self, ev: Any) -> None:
        self._send(ev._value)
        self._drain()

    def _send(self, t: int) -> None:
        self.t_send_start[t] = self.env.now
        links = self.flinks[t]
        if links:
            self._flow(t, links)
        else:
            self._sent(t)

    def _flow(self, t: int, links: tuple[int, ...]) -> None:
        now = self.env.now
        self.cur_links[t] = links
        self.remaining[t] = self.nbytes[t]
        self.last[t] = now
        flows_on = self.share.flows_on
        for lk in links:
            if not flows_on[lk]:
                self.busy_since[lk] = now
        self.share.add(t, links)

    def _on_settle(self, ev: Any) -> None:
        self.settling = False
        self._settle()

    def _settle(self) -> None:
        """Max-min rates over the component of the links whose flows changed; reschedule the flows whose rate moved."""
        now = self.env.now
        rate, remaining, last, version = self.rate, self.remaining, self.last, self.version
        timeout, env, cb = self.Timeout, self.env, self._on_sent
        for f, r in self.share.settle().items():
            old = rate[f]
            if old > 0:
                left = remaining[f] - old * (now - last[f])
                remaining[f] = left if left > 0 else 0.0
            last[f] = now
            rate[f] = r
            v = version[f] + 1
            version[f] = v
            self.events += 1
            timeout(env, remaining[f] / r, (f, v)).callbacks.append(cb)

    def _on_sent(self, ev: Any) -> None:
        f, v = ev._value
        if self.version[f] != v:
            return  # a rate change superseded this completion
        now = self.env.now
        self.share.remove(f)  # the flows left on its links speed up at the next settle
        flows_on = self.share.flows_on
        for lk in self.cur_links[f]:
            if not flows_on[lk]:
                self.busy[lk] += now - self.busy_since[lk]
        self.rate[f] = 0.0
        if self.reducing[f]:
            self._arrive(f)
        else:
            self._sent(f)
        self._drain()

    def _sent(self, t: int) -> None:
        self.t_send_end[t] = self.env.now
        post = self.post[t]
        if post > 0:
            self.events += 1
            self.Timeout(self.env, post, t).callbacks.append(self._on_post)
        else:
            self._landed(t)

    def _on_post(self, ev: Any) -> None:
        self._landed(ev._value)
        self._drain()

    def _landed(self, t: int) -> None:
        """The bytes are at the destination: free the ports (send order), then deliver the message."""
        if self.order is None:
            self._deliver(t)
            return
        deliver, go = self.order.landed(t)
        self.to_issue.extend(go)
        for u in deliver:
            self._deliver(u)

    def _deliver(self, t: int) -> None:
        """Combine the bytes at the destination (a flow on its reducer), or write them."""
        if self.cpu:
            tr = self.transfers[t]
            if tr.src != tr.dst:
                now, free = self.env.now, self.cpu_free
                free[tr.dst] = max(now, free[tr.dst]) + self.cpu
                self.events += 1
                self.Timeout(self.env, free[tr.dst] - now, t).callbacks.append(self._on_received)
                return
        self._received(t)

    def _on_received(self, ev: Any) -> None:
        self._received(ev._value)
        self._drain()

    def _received(self, t: int) -> None:
        reducer = self.reducer[t]
        if reducer >= 0:
            self.reducing[t] = 1
            self._flow(t, (reducer,))
        else:
            self._arrive(t)

    def _arrive(self, t: int) -> None:
        if self.dataflow and not self.ready.arrive(t):
            return  # a same-step reader of the destination has not read yet: write when it has
        self.to_finish.append(t)

    def _finish(self, t: int) -> None:
        self.t_end[t] = self.env.now
        self._write(t)
        self.finished += 1
        if self._bar is not None and self.finished & 4095 == 0:
            self._bar.update(4096)
        if not self.dataflow:
            self.outstanding -= 1
            if self.outstanding == 0:
                self._next_step()
        else:
            self.to_start.extend(self.ready.finish(t))

    def _write(self, t: int) -> None:
        tr = self.transfers[t]
        snap = self.snap[t]
        self.snap[t] = None
        # The write rule is sim.verify.semantics.combine; an empty source was reported when the transfer started.
        for k in write(self.state, self.dst_slot[t], snap, tr.op is Op.COPY, self.idempotent):
            if self.state[self.dst_slot[t] + k] is None:
                self._bad(t, k, UNINITIALISED_READ, "which holds nothing")
            else:
                self._bad(t, k, DOUBLE_COUNT, "and the incoming data share a contribution (counted twice)")

    def _bad(self, t: int, k: int, kind: str, why: str) -> None:
        tr = self.transfers[t]
        si, ti = self._where(t)
        self.violations.append(Violation(
            kind, f"step {si} transfer {ti} ({tr!r}): reduces into rank {tr.dst} {tr.dst_buf}[{tr.dst_index + k}], "
            f"{why}", si, ti, tr.dst, tr.dst_buf.value, tr.dst_index + k))

    # -- result ----------------------------------------------------------------------------

    def _result(self) -> SimResult:
        bad = list(self.violations)
        if self.finished != self.n:
            stuck = next(t for t in range(self.n) if math.isnan(self.t_end[t]))
            si, ti = self._where(stuck)
            bad.append(Violation("deadlock", f"{self.n - self.finished} transfer(s) never finished, "
                                 f"first step {si} transfer {ti}", si, ti))
        bad.extend(check_final(self.schedule, self.state, self.layout))
        links = self.topology.links
        busy = {links[i]: b for i, b in enumerate(self.busy[:self.nl]) if b > 0}
        ends = [e for e in self.t_end if not math.isnan(e)]

        def arr(xs: array[float]) -> np.ndarray:
            a = np.frombuffer(xs, dtype=np.float64).copy()
            a.flags.writeable = False
            return a

        return SimResult(
            schedule=self.schedule, topology=self.topology, mode=self.mode, size=self.size,
            chunk_bytes=self.chunk, time=max(ends, default=0.0),
            start=arr(self.t_start), send_start=arr(self.t_send_start), send_end=arr(self.t_send_end),
            end=arr(self.t_end), link_busy=busy, events=self.events, violations=tuple(bad))
