"""Send order: in dataflow, each rank sends and receives its messages in schedule order on each of its ports,
a number of its steps in flight (``EngineOptions.in_flight``; docs/design.md, "Send order").

A *message* is what one step moves from one rank to another: the remote transfers of one step with the same
source and destination (one MPI message, one NCCL channel step), sent as one when all of its data is ready.
It leaves by its *send port*, the first link of its route, and comes in by its *receive port*, the last (on
``switch:p`` a rank's uplink and downlink; on a torus, one each way per direction). A port's *batch* is its
messages of one step, posted together as nonblocking sends and receives are. With ``in_flight = N >= 1`` a
message starts when

1. every transfer in it may start (its dataflow dependencies have ended),
2. on each of its two ports, every message of the port's earlier batches has started (in schedule order), and
3. on each of its two ports, every message of the batches N or more before its own has *landed*: its last
   byte is at the destination (sent, plus the route's latency; the destination's reduction and its write come
   after and hold neither port).

A message is delivered whole: its transfers go on to their reductions and writes when its last byte has
landed, as a receive completes (a part that lands early does not start reducing while the rest streams).

``N = 1`` is MPI's blocking exchange per step (``MPI_Sendrecv``, or ``Isend``/``Irecv`` + ``Waitall``
rounds, as MPICH's collectives run): a port's next step starts once its previous one has arrived, and a rank
that runs ahead cannot flood a receiver still busy with an earlier step. A larger N lets N of a port's steps
overlap, as NCCL's channels keep ``NCCL_STEPS`` slots in flight. ``N = 0`` (``IN_FLIGHT_ALL``) turns the
queues off: every transfer starts when its dependencies have ended and a rank's ready sends share its port,
the engine's behaviour before the queues. Local transfers (``src == dst``) use no port and are never queued.
Lockstep mode runs one step at a time everywhere and has no queues.

*Channels* (``Schedule.channels``: an MSCCL++ plan's thread blocks, an NCCL or MSCCL channel): when a schedule
gives each transfer the channel that issues it, a message is one channel's transfers of one step from one rank
to one rank, and each port keeps one queue per channel, with the three rules above on each: channels run
concurrently and share the port's bandwidth, each in its own order. A plan's channels number its GPUs' thread
blocks apart, so two thread blocks never share a queue, at the sender or at the receiver. Without channels,
every transfer is on one channel: the queues above, unchanged.

*Ways* (``Schedule.ways``): a transfer that names a way takes that one of the tied shortest routes, so a step's
transfers from one rank to one rank on two ways are two messages, each on the ports of its own route.

``Ports`` is the queues' structure, computed once from the schedule and the routes; ``SendOrder`` is their
state during a run of the simpy engine (``sim.engine.reference``), one Python call per event; ``PortArrays``
is the same state on numpy arrays for ``sim.engine.fast``'s event loop, and ``sim.engine.fast``'s closed form
applies the three rules step by step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from algorithms.ir import Schedule
from sim.topology import Topology

__all__ = ["IN_FLIGHT_ALL", "PortArrays", "Ports", "SendOrder", "Side", "StepGates", "counted", "ports"]

IN_FLIGHT_ALL = 0
"""``in_flight`` without queues: every ready transfer starts at once."""
FEW = 16
"""``PortArrays`` takes this many transfers or fewer element by element, more as arrays."""


@dataclass(frozen=True, eq=False)
class Side:
    """One side of the queues (send ports or receive ports), as int64 arrays: batches numbered port by port in
    step order, so a port's batches are a contiguous range. With channels a port is a (link, channel): one
    queue each."""

    batch: np.ndarray
    """Per message: its batch on this side."""
    batch_ptr: np.ndarray
    """CSR: batch b's messages are ``batch_msgs[batch_ptr[b]:batch_ptr[b + 1]]``."""
    batch_msgs: np.ndarray
    batch_port: np.ndarray
    """Per batch: its port."""
    port_ptr: np.ndarray
    """CSR: port q's batches are ``port_ptr[q]:port_ptr[q + 1]``."""
    port_link: np.ndarray
    """Per port: the topology's link id (several ports share one with channels)."""

    @property
    def batches(self) -> int:
        return len(self.batch_port)

    @property
    def ports(self) -> int:
        return len(self.port_link)


@dataclass(frozen=True, eq=False)
class Ports:
    """The queues of one schedule on one topology (module docstring). Messages are numbered by step, source,
    destination (and channel, with channels); a message's transfers are in program order."""

    msg_of: np.ndarray
    """Per transfer (program order): its message, or -1 for a local transfer (never queued)."""
    msg_ptr: np.ndarray
    """CSR: message m's transfers are ``msg_transfers[msg_ptr[m]:msg_ptr[m + 1]]``."""
    msg_transfers: np.ndarray
    msg_step: np.ndarray
    send: Side
    recv: Side

    @property
    def messages(self) -> int:
        return len(self.msg_step)


def _side(m_link: np.ndarray, m_step: np.ndarray, per: int = 1) -> Side:
    """The queues of messages on ports ``m_link`` (link id x ``per`` + channel: one queue per link and channel)."""
    nm = len(m_link)
    # Messages are numbered step-major, so a stable sort by link keeps each port's steps (and a step's messages)
    # in order.
    order = np.argsort(m_link, kind="stable")
    lk, st = m_link[order], m_step[order]
    new_batch = np.r_[True, (lk[1:] != lk[:-1]) | (st[1:] != st[:-1])] if nm else np.zeros(0, dtype=bool)
    batch_sorted = np.cumsum(new_batch) - 1
    batch = np.empty(nm, dtype=np.int64)
    batch[order] = batch_sorted
    batch_ptr = np.r_[np.flatnonzero(new_batch), nm].astype(np.int64)
    b_link = lk[batch_ptr[:-1]]
    new_port = np.r_[True, b_link[1:] != b_link[:-1]] if len(b_link) else np.zeros(0, dtype=bool)
    batch_port = (np.cumsum(new_port) - 1).astype(np.int64)
    port_ptr = np.r_[np.flatnonzero(new_port), len(b_link)].astype(np.int64)
    return Side(batch, batch_ptr, order.astype(np.int64), batch_port, port_ptr, b_link[port_ptr[:-1]] // per)


def ports(schedule: Schedule, topology: Topology, queued: np.ndarray | None = None,
          channels: np.ndarray | None = None) -> Ports:
    """The queues of ``schedule`` on ``topology`` (its faults applied: a rerouted message may use other
    ports). ``queued``: a mask of the transfers to queue (None: every remote one). ``channels``: per transfer,
    the channel that issues it (None: ``schedule.channels``); with channels, a message is one channel's, and
    each port has one queue per channel (module docstring)."""
    cols = schedule.columns()
    n = len(cols.src)
    src = cols.src.astype(np.int64)
    dst = cols.dst.astype(np.int64)
    p = schedule.ranks
    step_of = np.repeat(np.arange(len(cols.step_offsets) - 1, dtype=np.int64), np.diff(cols.step_offsets))
    remote = np.flatnonzero((src != dst) if queued is None else (src != dst) & queued)
    msg_of = np.full(n, -1, dtype=np.int64)
    pair = src[remote] * p + dst[remote]
    if schedule.ways is not None:  # a route is a (way, src, dst): two ways of one pair are two messages
        pair = pair + schedule.ways[remote].astype(np.int64) * (p * p)
    pairs, pair_inv = np.unique(pair, return_inverse=True)
    if schedule.ways is None:
        two = [(int(k) // p, int(k) % p) for k in pairs.tolist()]
        by_pair = topology.route_links_many(two)
        routes = [by_pair[k] for k in two]
    else:
        keys = [(int(k) // p % p, int(k) % p, int(k) // (p * p)) for k in pairs.tolist()]
        ways = topology.route_links_ways(keys)
        routes = [ways[k] for k in keys]
    first = np.array([links[0] for links, _lat in routes], dtype=np.int64)
    last = np.array([links[-1] for links, _lat in routes], dtype=np.int64)
    if channels is None:
        channels = schedule.channels
    # Messages: the remote transfers of one step from one rank to one rank (on one channel), numbered step-major.
    if channels is None and schedule.ways is None:
        per, key, across = 1, step_of[remote] * (p * p) + pair, p * p
    elif channels is None:
        per, across = 1, len(pairs)
        key = step_of[remote] * len(pairs) + pair_inv.reshape(-1)
    else:
        if len(channels) != n:
            raise ValueError(f"channels: {len(channels)} entries for {n} transfers")
        ids, chan = np.unique(np.asarray(channels, dtype=np.int64)[remote], return_inverse=True)
        per, across = max(1, len(ids)), len(pairs) * max(1, len(ids))  # dense: no overflow
        key = (step_of[remote] * len(pairs) + pair_inv.reshape(-1)) * per + chan.reshape(-1)
    mkeys, m_inv = np.unique(key, return_inverse=True)
    m_inv = m_inv.reshape(-1)
    nm = len(mkeys)
    msg_of[remote] = m_inv
    m_pair = np.zeros(nm, dtype=np.int64)
    m_pair[m_inv] = pair_inv.reshape(-1)
    m_step = mkeys // across
    m_chan = mkeys % per
    msg_ptr = np.zeros(nm + 1, dtype=np.int64)
    np.cumsum(np.bincount(m_inv, minlength=nm), out=msg_ptr[1:])
    msg_transfers = remote[np.argsort(m_inv, kind="stable")]
    return Ports(msg_of, msg_ptr, msg_transfers, m_step, _side(first[m_pair] * per + m_chan, m_step, per),
                 _side(last[m_pair] * per + m_chan, m_step, per))


def _ranges(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For ranges [lo_i, hi_i): (i repeated once per element, the elements); as ``sim.engine.fast``'s."""
    n = np.maximum(hi - lo, 0)
    if len(n) < 64 and bool((n == 1).all()):  # the event loop's common case: ranges of one
        return np.arange(len(lo), dtype=np.int64), lo.astype(np.int64, copy=False)
    total = int(n.sum())
    owner = np.repeat(np.arange(len(lo), dtype=np.int64), n)
    if total == 0:
        return owner, np.zeros(0, dtype=np.int64)
    starts = np.cumsum(n) - n
    return owner, np.arange(total, dtype=np.int64) - np.repeat(starts - lo, n)


def counted(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(a, return_counts=True)`` for the event loop's small arrays, in a few numpy calls (np.unique
    costs tens of microseconds of Python whatever the size, and the loop calls it several times an event)."""
    if len(a) < 2:
        return a.astype(np.int64, copy=False), np.ones(len(a), dtype=np.int64)
    a = np.sort(a)
    new = np.empty(len(a), dtype=bool)
    new[0] = True
    np.not_equal(a[1:], a[:-1], out=new[1:])
    if bool(new.all()):
        return a, np.ones(len(a), dtype=np.int64)
    at = np.flatnonzero(new)
    return a[at], np.diff(np.append(at, len(a)))



class _Queue:
    """One side's state in ``SendOrder``: per port, its first batch not wholly started and not wholly landed."""

    def __init__(self, side: Side) -> None:
        self.batch = side.batch.tolist()
        self.port = side.batch_port.tolist()
        self.unstarted = np.diff(side.batch_ptr).tolist()
        self.unlanded = list(self.unstarted)
        self.pending: list[list[int]] = [[] for _ in range(side.batches)]
        ptr = side.port_ptr.tolist()
        self.started_upto = ptr[:-1]
        self.landed_upto = list(ptr[:-1])
        self.end = ptr[1:]


class SendOrder:
    """The queues' state during one run, event by event (the simpy engine's): ``ready`` and ``landed`` return
    the transfers that may start now."""

    def __init__(self, structure: Ports, in_flight: int) -> None:
        if in_flight < 1:
            raise ValueError("SendOrder needs in_flight >= 1 (0: no queues)")
        s = structure
        self.n_flight = in_flight
        self.msg_of = s.msg_of.tolist()
        ptr = s.msg_ptr.tolist()
        tr = s.msg_transfers.tolist()
        self.transfers = [tr[ptr[m]:ptr[m + 1]] for m in range(s.messages)]
        self.unready = np.diff(s.msg_ptr).tolist()  # per message: transfers still waiting for dependencies
        self.unlanded = list(self.unready)  # per message: transfers not yet landed
        self.started = bytearray(s.messages)
        self.sides = (_Queue(s.send), _Queue(s.recv))

    def _open(self, m: int) -> bool:
        for side in self.sides:
            b = side.batch[m]
            q = side.port[b]
            if b != side.started_upto[q] or b >= side.landed_upto[q] + self.n_flight:
                return False
        return True

    def _run(self, ms: list[int]) -> list[int]:
        """Start the messages ``ms`` (each open on both sides) and every message that opens as a result."""
        out: list[int] = []
        work: list[tuple[_Queue, int]] = []
        while ms or work:
            for m in ms:
                if self.started[m]:
                    continue
                self.started[m] = 1
                out.extend(self.transfers[m])
                for side in self.sides:
                    b = side.batch[m]
                    side.unstarted[b] -= 1
                    if side.unstarted[b] == 0:
                        q = side.port[b]
                        while side.started_upto[q] < side.end[q] and side.unstarted[side.started_upto[q]] == 0:
                            side.started_upto[q] += 1
                        work.append((side, q))
            ms = []
            while work and not ms:
                side, q = work.pop()
                b = side.started_upto[q]
                if b < side.end[q] and b < side.landed_upto[q] + self.n_flight and side.pending[b]:
                    waiting, side.pending[b] = side.pending[b], []
                    # A message still closed on its other side is in that side's pending list too.
                    ms = [m for m in waiting if not self.started[m] and self._open(m)]
        return out

    def ready(self, t: int) -> list[int]:
        """Transfer t's dependencies have ended: the transfers that start now (t itself when not queued)."""
        m = self.msg_of[t]
        if m < 0:
            return [t]
        self.unready[m] -= 1
        if self.unready[m]:
            return []
        if self._open(m):
            return self._run([m])
        for side in self.sides:
            side.pending[side.batch[m]].append(m)
        return []

    def landed(self, t: int) -> tuple[list[int], list[int]]:
        """Transfer t's last byte is at its destination: the transfers delivered now (t alone when not queued; a
        message's all at once, when its last lands) and the transfers that start now."""
        m = self.msg_of[t]
        if m < 0:
            return [t], []
        self.unlanded[m] -= 1
        if self.unlanded[m]:
            return [], []
        ms: list[int] = []
        for side in self.sides:
            b = side.batch[m]
            side.unlanded[b] -= 1
            q = side.port[b]
            if side.unlanded[b] or b != side.landed_upto[q]:
                continue
            while side.landed_upto[q] < side.end[q] and side.unlanded[side.landed_upto[q]] == 0:
                side.landed_upto[q] += 1
            cur = side.started_upto[q]
            if cur < side.end[q] and cur < side.landed_upto[q] + self.n_flight and side.pending[cur]:
                waiting, side.pending[cur] = side.pending[cur], []
                ms.extend(w for w in waiting if not self.started[w] and self._open(w))
        return self.transfers[m], self._run(ms) if ms else []


class _SideArrays:
    def __init__(self, side: Side) -> None:
        self.s = side
        self.unstarted = np.diff(side.batch_ptr)
        self.unlanded = self.unstarted.copy()
        self.started_upto = side.port_ptr[:-1].copy()
        self.landed_upto = side.port_ptr[:-1].copy()
        self.end = side.port_ptr[1:]

    def open(self, ms: np.ndarray, n_flight: int) -> np.ndarray:
        b = self.s.batch[ms]
        q = self.s.batch_port[b]
        return (b == self.started_upto[q]) & (b < self.landed_upto[q] + n_flight)

    def current_open(self, qs: np.ndarray, n_flight: int) -> np.ndarray:
        """Messages of ports ``qs``' current batches, where those are open."""
        b = self.started_upto[qs]
        b = b[(b < self.end[qs]) & (b < self.landed_upto[qs] + n_flight)]
        _o, e = _ranges(self.s.batch_ptr[b], self.s.batch_ptr[b + 1])
        return self.s.batch_msgs[e]

    def open_one(self, m: int, n_flight: int) -> bool:
        b = self.s.batch[m]
        q = self.s.batch_port[b]
        return bool(b == self.started_upto[q] and b < self.landed_upto[q] + n_flight)

    def count_down(self, m: int, left: np.ndarray, upto: np.ndarray, n_flight: int) -> list[int]:
        """Message ``m`` is one fewer of its batch's ``left`` (unstarted or unlanded); when that was the batch's
        last, ``advance_one`` its port along ``upto``: the messages that may now start."""
        b = int(self.s.batch[m])
        left[b] -= 1
        return self.advance_one(upto, left, int(self.s.batch_port[b]), n_flight) if left[b] == 0 else []

    def advance_one(self, upto: np.ndarray, left: np.ndarray, q: int, n_flight: int) -> list[int]:
        """``move`` for port q alone, then ``current_open`` of it, as a list."""
        u, end = int(upto[q]), int(self.end[q])
        while u < end and left[u] == 0:
            u += 1
        upto[q] = u
        b = int(self.started_upto[q])
        if b < end and b < self.landed_upto[q] + n_flight:
            return self.s.batch_msgs[self.s.batch_ptr[b]:self.s.batch_ptr[b + 1]].tolist()
        return []

    def move(self, upto: np.ndarray, left: np.ndarray, qs: np.ndarray) -> None:
        """Advance ``upto`` of ports ``qs`` past their batches with nothing ``left``."""
        while len(qs):
            b = upto[qs]
            more = b < self.end[qs]
            more[more] = left[b[more]] == 0
            qs = qs[more]
            upto[qs] += 1


class PortArrays:
    """``SendOrder``'s rules on numpy arrays, for many transfers at one instant (``sim.engine.fast``)."""

    def __init__(self, structure: Ports, in_flight: int) -> None:
        if in_flight < 1:
            raise ValueError("PortArrays needs in_flight >= 1 (0: no queues)")
        s = structure
        self.s = s
        self.n_flight = in_flight
        self.unready = np.diff(s.msg_ptr)
        self.unlanded = self.unready.copy()
        self.ready_m = np.zeros(s.messages, dtype=bool)
        self.started = np.zeros(s.messages, dtype=bool)
        self.sides = (_SideArrays(s.send), _SideArrays(s.recv))

    def _startable(self, ms: np.ndarray) -> np.ndarray:
        ms = counted(ms)[0]
        ok = self.ready_m[ms] & ~self.started[ms]
        for side in self.sides:
            ok &= side.open(ms, self.n_flight)
        return ms[ok]

    def _run(self, ms: np.ndarray) -> np.ndarray:
        """Start ``ms`` (open on both sides) and every message that opens as a result: their transfers."""
        out = []
        s = self.s
        while len(ms):
            self.started[ms] = True
            _o, e = _ranges(s.msg_ptr[ms], s.msg_ptr[ms + 1])
            out.append(s.msg_transfers[e])
            nxt = []
            for side in self.sides:
                bs, c = counted(side.s.batch[ms])
                side.unstarted[bs] -= c
                qs = side.s.batch_port[bs[side.unstarted[bs] == 0]]
                if len(qs):
                    side.move(side.started_upto, side.unstarted, qs)
                    nxt.append(side.current_open(qs, self.n_flight))
            ms = self._startable(np.concatenate(nxt)) if nxt else np.zeros(0, dtype=np.int64)
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)

    # -- a few transfers at a time: the same rules element by element (an event loop whose instants each move a
    # handful of transfers would otherwise pay some sixty numpy calls an instant here). Both paths keep the same
    # state, and reach the same messages: a message starts when ready and open on both sides, and starting or
    # landing only ever opens more, so the order in which one instant's messages are taken does not matter.

    def _run_few(self, ms: list[int]) -> list[int]:
        """``_run`` on candidates ``ms`` (each checked here): the transfers that start now."""
        out: list[int] = []
        s, n_flight = self.s, self.n_flight
        while ms:
            m = ms.pop()
            if self.started[m] or not self.ready_m[m]:
                continue
            if not all(side.open_one(m, n_flight) for side in self.sides):
                continue
            self.started[m] = True
            out.extend(s.msg_transfers[s.msg_ptr[m]:s.msg_ptr[m + 1]].tolist())
            for side in self.sides:
                ms.extend(side.count_down(m, side.unstarted, side.started_upto, n_flight))
        return out

    def _ready_few(self, ts: np.ndarray) -> np.ndarray:
        out: list[int] = []
        cand: list[int] = []
        for t in ts.tolist():
            m = int(self.s.msg_of[t])
            if m < 0:
                out.append(t)
                continue
            self.unready[m] -= 1
            if self.unready[m] == 0:
                self.ready_m[m] = True
                cand.append(m)
        if cand:
            out.extend(self._run_few(cand))
        return np.array(out, dtype=np.int64)

    def _landed_few(self, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s, n_flight = self.s, self.n_flight
        delivered: list[int] = []
        cand: list[int] = []
        for t in ts.tolist():
            m = int(s.msg_of[t])
            if m < 0:
                delivered.append(t)
                continue
            self.unlanded[m] -= 1
            if self.unlanded[m]:
                continue
            delivered.extend(s.msg_transfers[s.msg_ptr[m]:s.msg_ptr[m + 1]].tolist())
            for side in self.sides:
                cand.extend(side.count_down(m, side.unlanded, side.landed_upto, n_flight))
        started = self._run_few(cand) if cand else []
        return np.array(delivered, dtype=np.int64), np.array(started, dtype=np.int64)

    def ready(self, ts: np.ndarray) -> np.ndarray:
        """Transfers ``ts`` may start by their dependencies: those that start now (local ones at once)."""
        if len(ts) <= FEW:
            return self._ready_few(ts)
        m = self.s.msg_of[ts]
        local = ts[m < 0]
        m = m[m >= 0]
        if not len(m):
            return local
        ms, c = counted(m)
        self.unready[ms] -= c
        ms = ms[self.unready[ms] == 0]
        self.ready_m[ms] = True
        return np.concatenate([local, self._run(self._startable(ms))])

    def landed(self, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Transfers ``ts`` have landed: the transfers delivered now (``SendOrder.landed``) and those that start
        now."""
        if len(ts) <= FEW:
            return self._landed_few(ts)
        s = self.s
        m = s.msg_of[ts]
        local = ts[m < 0]
        m = m[m >= 0]
        empty = np.zeros(0, dtype=np.int64)
        if not len(m):
            return local, empty
        ms, c = counted(m)
        self.unlanded[ms] -= c
        ms = ms[self.unlanded[ms] == 0]
        _o, e = _ranges(s.msg_ptr[ms], s.msg_ptr[ms + 1])
        delivered = np.concatenate([local, s.msg_transfers[e]])
        nxt = []
        for side in self.sides:
            if not len(ms):
                break
            bs, c = counted(side.s.batch[ms])
            side.unlanded[bs] -= c
            qs = side.s.batch_port[bs[side.unlanded[bs] == 0]]
            if len(qs):
                side.move(side.landed_upto, side.unlanded, qs)
                nxt.append(side.current_open(qs, self.n_flight))
        if not nxt:
            return delivered, empty
        return delivered, self._run(self._startable(np.concatenate(nxt)))


class StepGates:
    """The rules step by step, for ``sim.engine.fast``'s closed form: each step's messages are one batch per
    port, so a message's start follows from earlier steps alone (``starts``), which ``record`` then extends."""

    def __init__(self, structure: Ports, in_flight: int) -> None:
        if in_flight < 1:
            raise ValueError("StepGates needs in_flight >= 1 (0: no queues)")
        s = structure
        self.s = s
        self.n_flight = in_flight
        self.single = bool((np.diff(s.msg_ptr) == 1).all())  # every message one transfer: no grouping needed
        self.begin = np.zeros(s.messages)
        self.land = np.zeros(s.messages)
        steps = int(s.msg_step.max()) + 1 if s.messages else 0
        self.state = []
        for side in (s.send, s.recv):
            most = int(np.diff(side.port_ptr).max()) if side.ports else 1
            h = max(1, min(in_flight, most))
            # Each step's batches (one per port), and where each batch's messages are in batch_msgs.
            b_step = s.msg_step[side.batch_msgs[side.batch_ptr[:-1]]]
            by_step = np.argsort(b_step, kind="stable")
            step_ptr = np.zeros(steps + 1, dtype=np.int64)
            np.cumsum(np.bincount(b_step, minlength=steps), out=step_ptr[1:])
            # Per port: latest start of its batches so far, latest landing so far, batches so far, and the
            # latest landing as it stood after each of its last h batches (a ring).
            self.state.append((side, by_step, step_ptr, np.zeros(side.ports), np.zeros(side.ports),
                               np.zeros(side.ports, dtype=np.int64), np.zeros((side.ports, h))))
        self._cur: tuple[int, np.ndarray, np.ndarray, np.ndarray] | None = None

    def starts(self, lo: int, hi: int, need: np.ndarray) -> np.ndarray:
        """Transfers lo..hi-1 (one step) may start at ``need`` by their dependencies: when they start."""
        m = self.s.msg_of[lo:hi]
        g = m >= 0
        if not g.any():
            self._cur = None
            return need
        if self.single:
            ms, inv = m[g], np.arange(int(g.sum()))
            begin = need[g].copy()
        else:
            ms, inv = np.unique(m[g], return_inverse=True)
            inv = inv.reshape(-1)
            begin = np.zeros(len(ms))
            np.maximum.at(begin, inv, need[g])
        n = self.n_flight
        for side, _by_step, _ptr, last_start, _land, count, ring in self.state:
            q = side.batch_port[side.batch[ms]]
            j = count[q]
            gate = last_start[q]
            w = j >= n
            gate[w] = np.maximum(gate[w], ring[q[w], j[w] % ring.shape[1]])
            begin = np.maximum(begin, gate)
        self._cur = (int(self.s.msg_step[ms[0]]), ms, inv, g)
        out = need.copy()
        out[g] = begin[inv]
        return out

    def record(self, start: np.ndarray, land: np.ndarray) -> None:
        """The step that ``starts`` last saw starts at ``start`` and lands at ``land`` (per transfer)."""
        if self._cur is None:
            return
        step, ms, inv, g = self._cur
        self.begin[ms[inv]] = start[g]
        if self.single:
            self.land[ms] = land[g]
        else:
            self.land[ms] = 0.0
            np.maximum.at(self.land, ms[inv], land[g])
        for side, by_step, step_ptr, last_start, land_max, count, ring in self.state:
            bs = by_step[step_ptr[step]:step_ptr[step + 1]]  # this step's batches, one per port
            lo, hi = side.batch_ptr[bs], side.batch_ptr[bs + 1]
            _o, e = _ranges(lo, hi)
            msgs = side.batch_msgs[e]
            at = np.cumsum(hi - lo) - (hi - lo)
            q = side.batch_port[bs]
            last_start[q] = np.maximum(last_start[q], np.maximum.reduceat(self.begin[msgs], at))
            land_max[q] = np.maximum(land_max[q], np.maximum.reduceat(self.land[msgs], at))
            ring[q, count[q] % ring.shape[1]] = land_max[q]
            count[q] += 1
