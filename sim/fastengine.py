"""A vectorised engine: the simpy engine's times without a Python event per transfer.

Same model as ``sim.engine`` (docs/design.md, Simulation): a transfer starts
(lockstep: when its step starts; dataflow: when its dependencies have ended),
waits its pre-delay (endpoint overhead, stragglers), streams its bytes as a
flow over its route, waits the route's latency, reduces at the destination
(a flow on the rank's reducer) and ends; the flows share links max-min fairly
(``sim.fairshare``). What differs is the bookkeeping: everything that happens
at one instant is handled as numpy arrays (the transfers that start, the
flows that end, the rates of every active flow), so the cost is per distinct
event time, not per transfer, and the dataflow dependencies are joined from
sorted slot keys instead of Python sets.

The postcondition verdict comes from a lockstep symbolic execution on compact
columns (``sim.fastverify``): every execution the simulator can run respects
the dataflow dependencies, so for a schedule without same-step write races it
ends in the lockstep state (``sim.dataflow``) and the verdict is the simpy
engine's. With such a race the simpy engine keeps whichever simultaneous write
lands last; this engine keeps program order (the verifier reports the race).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from algorithms.ir import Kind, Schedule
from sim.topology import Topology

__all__ = ["run_fast", "dataflow_arrays", "slot_columns"]

_SEND, _LAND = 0, 1


def slot_columns(schedule: Schedule) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                              np.ndarray, np.ndarray]:
    """Per transfer in program order: src rank, dst rank, src slot, dst slot, count, is_reduce, and step offsets.

    Slots are numbered as ``sim.semantics.SlotLayout`` numbers them.
    """
    from sim.semantics import SlotLayout

    cols = schedule.columns()
    layout = SlotLayout(schedule)
    from algorithms.ir import Buf

    bases = np.array([layout.bases[b] for b in (Buf.INPUT, Buf.OUTPUT, Buf.SCRATCH)], dtype=np.int64)
    src = cols.src.astype(np.int64)
    dst = cols.dst.astype(np.int64)
    src_slot = bases[cols.src_buf, src] + cols.src_index
    dst_slot = bases[cols.dst_buf, dst] + cols.dst_index
    return src, dst, src_slot, dst_slot, cols.count.astype(np.int64), cols.op.astype(bool), cols.step_offsets


def _ranges(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For ranges [lo_i, hi_i): (i repeated once per element, the elements)."""
    n = np.maximum(hi - lo, 0)
    total = int(n.sum())
    owner = np.repeat(np.arange(len(lo), dtype=np.int64), n)
    if total == 0:
        return owner, np.zeros(0, dtype=np.int64)
    starts = np.cumsum(n) - n
    elems = np.arange(total, dtype=np.int64) - np.repeat(starts - lo, n)
    return owner, elems


def _csr(keys: np.ndarray, values: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Group ``values`` by ``keys`` in 0..n-1: (indptr, values sorted by key, stable)."""
    order = np.argsort(keys, kind="stable")
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys, minlength=n), out=indptr[1:])
    return indptr, values[order]


def dataflow_arrays(schedule: Schedule) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray],
                                                 np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """The dataflow relations of ``sim.dataflow`` as arrays, joined from sorted (slot, step) keys.

    Returns ``waiting`` (per transfer, its dependency edges, counted with
    multiplicity), ``dependents`` (CSR: for each transfer, the transfers that
    wait for it to end, one entry per edge), ``readers_left`` (per transfer,
    the same-step readers of its destination) and ``write_waiters`` (CSR: for
    each transfer, the writers waiting for it to start). A dependency listed
    twice is waited for twice and released twice, so multiplicity is harmless.
    """
    _src, _dst, src_slot, dst_slot, count, _red, offsets = slot_columns(schedule)
    n = len(count)
    if n == 0:
        e = np.zeros(0, dtype=np.int64)
        return e, (np.zeros(1, dtype=np.int64), e), e, (np.zeros(1, dtype=np.int64), e)
    nsteps = len(offsets) - 1
    step_of = np.repeat(np.arange(nsteps, dtype=np.int64), np.diff(offsets))
    # One move per chunk: transfer, step, source slot, destination slot.
    mt = np.repeat(np.arange(n, dtype=np.int64), count)
    k = np.arange(len(mt), dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
    ms = step_of[mt]
    width = nsteps + 1
    rkey = (src_slot[mt] + k) * width + ms
    wkey = (dst_slot[mt] + k) * width + ms
    del k
    rorder = np.argsort(rkey, kind="stable")
    rkey_s, rt_s = rkey[rorder], mt[rorder]
    del rorder, rkey
    worder = np.argsort(wkey, kind="stable")
    wkey_s, wt_s = wkey[worder], mt[worder]
    del worder
    # Write groups: the writes of one slot in one step.
    gstart = np.flatnonzero(np.r_[True, wkey_s[1:] != wkey_s[:-1]])
    gkey = wkey_s[gstart]
    gend = np.r_[gstart[1:], len(wkey_s)]

    def last_group(keys: np.ndarray) -> np.ndarray:
        """Index of the last write group of the same slot in an earlier step (-1 if none)."""
        g = np.searchsorted(gkey, keys, side="left") - 1
        ok = g >= 0
        ok[ok] = gkey[g[ok]] // width == keys[ok] // width
        return np.where(ok, g, -1)

    owners: list[np.ndarray] = []
    deps: list[np.ndarray] = []
    # Read after write: each read waits for the last write group of its slot.
    g = last_group(rkey_s)
    has = g >= 0
    o, e = _ranges(gstart[g[has]], gend[g[has]])
    owners.append(rt_s[has][o])
    deps.append(wt_s[e])
    # Write after write, and write after read (readers after the last write group's step, before this one).
    g = last_group(wkey_s)
    has = g >= 0
    o, e = _ranges(gstart[g[has]], gend[g[has]])
    owners.append(wt_s[has][o])
    deps.append(wt_s[e])
    slot = wkey_s // width
    prev_step = np.where(has, gkey[np.maximum(g, 0)] % width, -1)
    lo = np.searchsorted(rkey_s, slot * width + prev_step + 1, side="left")
    hi = np.searchsorted(rkey_s, wkey_s, side="left")
    o, e = _ranges(lo, hi)
    owners.append(wt_s[o])
    deps.append(rt_s[e])
    owner = np.concatenate(owners)
    dep = np.concatenate(deps)
    del owners, deps
    waiting = np.bincount(owner, minlength=n).astype(np.int64)
    dependents = _csr(dep, owner, n)
    del owner, dep
    # Same-step readers of a slot a transfer writes (other than itself): the write waits for them to start.
    lo = hi
    hi = np.searchsorted(rkey_s, wkey_s, side="right")
    o, e = _ranges(lo, hi)
    w_owner, w_reader = wt_s[o], rt_s[e]
    keep = w_owner != w_reader
    w_owner, w_reader = w_owner[keep], w_reader[keep]
    # One edge per (writer, reader) pair, as sim.dataflow lists each once.
    pair = np.unique(w_owner * n + w_reader)
    w_owner, w_reader = pair // n, pair % n
    readers_left = np.bincount(w_owner, minlength=n).astype(np.int64)
    write_waiters = _csr(w_reader, w_owner, n)
    return waiting, dependents, readers_left, write_waiters


def _max_min(e_flow: np.ndarray, e_link: np.ndarray, nflows: int, caps: np.ndarray) -> np.ndarray:
    """Max-min fair rates by progressive filling, every bottleneck level at once (see ``sim.fairshare``)."""
    rates = np.full(nflows, math.inf)
    left = caps.copy()
    nl = len(caps)
    live = np.ones(len(e_flow), dtype=bool)
    frozen = np.zeros(nflows, dtype=bool)
    ef, el = e_flow, e_link
    while len(ef):
        cnt = np.bincount(el, minlength=nl)
        used = np.flatnonzero(cnt)
        share = left[used] / cnt[used]
        s = share.min()
        bott = np.zeros(nl, dtype=bool)
        bott[used[share == s]] = True
        fz = ef[bott[el]]
        rates[fz] = s
        frozen[fz] = True
        gone = frozen[ef]
        left -= s * np.bincount(el[gone], minlength=nl)
        np.maximum(left, 0.0, out=left)
        live = ~gone
        ef, el = ef[live], el[live]
    return rates


class _Fluid:
    """One run: per-transfer arrays, a heap of timer batches, and the active flows as arrays."""

    def __init__(self, schedule: Schedule, topology: Topology, size: float, mode: str, overhead: float,
                 reduce_bandwidth: float | None, stragglers: Mapping[int, float], chunk: float) -> None:
        self.schedule = schedule
        self.mode = mode
        src, dst, _ss, _ds, count, red, offsets = slot_columns(schedule)
        self.offsets = offsets
        n = len(count)
        self.n = n
        p = schedule.ranks
        nbytes = count * chunk
        self.nbytes = nbytes
        slow = np.zeros(p)
        for r, d in stragglers.items():
            if d:
                slow[r] = float(d)
        remote = src != dst
        pre = slow[src] + np.where(remote, slow[dst], 0.0)
        pre = np.where(remote, pre + overhead, pre)
        # Routes of the distinct remote pairs, as CSR over link ids.
        pair_key = src * p + dst
        upairs, pair_of = np.unique(np.where(remote, pair_key, -1), return_inverse=True)
        routes = topology.route_links_many((int(k) // p, int(k) % p) for k in upairs if k >= 0)
        route_len = np.zeros(len(upairs), dtype=np.int64)
        lat = np.zeros(len(upairs))
        flat: list[int] = []
        for i, k in enumerate(upairs):
            if k < 0:
                continue
            links, latency = routes[(int(k) // p, int(k) % p)]
            route_len[i] = len(links)
            lat[i] = latency
            flat.extend(links)
        self.route_ptr = np.zeros(len(upairs) + 1, dtype=np.int64)
        np.cumsum(route_len, out=self.route_ptr[1:])
        self.route_links = np.array(flat, dtype=np.int64)
        self.pair_of = pair_of.astype(np.int64)
        self.post = np.where(remote, lat[pair_of], 0.0)
        self.pre = pre
        self.has_flow = remote & (nbytes > 0) & (route_len[pair_of] > 0)
        nl = len(topology.links)
        self.nl = nl
        self.reducer = np.where(red & (nbytes > 0) & (reduce_bandwidth is not None), nl + dst, -1)
        self.caps = np.array(topology.link_bandwidths() + [float(reduce_bandwidth or 1.0)] * p)
        nan = np.full(n, math.nan)
        self.t_start, self.t_send_start, self.t_send_end, self.t_end = nan, nan.copy(), nan.copy(), nan.copy()
        self.busy = np.zeros(nl + p)
        self.busy_since = np.zeros(nl + p)
        self.lcount = np.zeros(nl + p, dtype=np.int64)
        # Active flows: transfer, reducer phase, bytes left, rate, last rate change, end; link entries.
        self.f_t = np.zeros(0, dtype=np.int64)
        self.f_red = np.zeros(0, dtype=bool)
        self.f_rem = np.zeros(0)
        self.f_rate = np.zeros(0)
        self.f_last = np.zeros(0)
        self.f_end = np.zeros(0)
        self.f_nl = np.zeros(0, dtype=np.int64)
        self.e_link = np.zeros(0, dtype=np.int64)
        self.timers: list[tuple[float, int, int, np.ndarray]] = []
        self.seq = 0
        self.events = 0
        self.finished = 0
        self.dataflow = mode == "dataflow"
        if self.dataflow:
            waiting, dependents, readers_left, write_waiters = dataflow_arrays(schedule)
            self.waiting = waiting
            self.dependents = dependents
            self.readers_left = readers_left
            self.write_waiters = write_waiters
            self.arrived = np.zeros(n, dtype=bool)
        else:
            self.step = 0
            self.outstanding = 0

    # -- cascades at one instant ---------------------------------------------------------

    def _timer(self, now: float, delays: np.ndarray, ids: np.ndarray, kind: int) -> None:
        when = now + delays
        times, inv = np.unique(when, return_inverse=True)
        if len(times) == 1:
            groups = [ids]
        else:
            order = np.argsort(inv, kind="stable")
            groups = np.split(ids[order], np.cumsum(np.bincount(inv))[:-1])
        for t, g in zip(times.tolist(), groups, strict=True):
            self.seq += 1
            heapq.heappush(self.timers, (t, self.seq, kind, g))

    def _add_flows(self, now: float, ids: np.ndarray, reducer: bool) -> None:
        if reducer:
            nls = np.ones(len(ids), dtype=np.int64)
            links = self.reducer[ids]
        else:
            pr = self.pair_of[ids]
            lo, hi = self.route_ptr[pr], self.route_ptr[pr + 1]
            nls = hi - lo
            _o, e = _ranges(lo, hi)
            links = self.route_links[e]
        newly = np.unique(links)
        idle = newly[self.lcount[newly] == 0]
        self.busy_since[idle] = now
        np.add.at(self.lcount, links, 1)
        k = len(ids)
        self.f_t = np.concatenate([self.f_t, ids])
        self.f_red = np.concatenate([self.f_red, np.full(k, reducer)])
        self.f_rem = np.concatenate([self.f_rem, self.nbytes[ids]])
        self.f_rate = np.concatenate([self.f_rate, np.zeros(k)])
        self.f_last = np.concatenate([self.f_last, np.full(k, now)])
        self.f_end = np.concatenate([self.f_end, np.full(k, math.inf)])
        self.f_nl = np.concatenate([self.f_nl, nls])
        self.e_link = np.concatenate([self.e_link, links])
        self.changed = True

    def _end_flows(self, now: float) -> tuple[np.ndarray, np.ndarray]:
        done = self.f_end <= now
        keep = ~done
        e_done = np.repeat(done, self.f_nl)
        links = self.e_link[e_done]
        np.subtract.at(self.lcount, links, 1)
        freed = np.unique(links)
        freed = freed[self.lcount[freed] == 0]
        self.busy[freed] += now - self.busy_since[freed]
        ids, red = self.f_t[done], self.f_red[done]
        self.f_t, self.f_red, self.f_rem = self.f_t[keep], self.f_red[keep], self.f_rem[keep]
        self.f_rate, self.f_last, self.f_end = self.f_rate[keep], self.f_last[keep], self.f_end[keep]
        self.f_nl = self.f_nl[keep]
        self.e_link = self.e_link[~e_done]
        self.changed = True
        return ids[~red], ids[red]

    def _settle(self, now: float) -> None:
        nf = len(self.f_t)
        if not nf:
            return
        e_flow = np.repeat(np.arange(nf, dtype=np.int64), self.f_nl)
        rates = _max_min(e_flow, self.e_link, nf, self.caps)
        ch = np.flatnonzero(rates != self.f_rate)
        if not len(ch):
            return
        old = self.f_rate[ch]
        rem = self.f_rem[ch]
        was = old > 0
        rem = np.where(was, np.maximum(rem - old * (now - self.f_last[ch]), 0.0), rem)
        self.f_rem[ch] = rem
        self.f_last[ch] = now
        self.f_rate[ch] = rates[ch]
        self.f_end[ch] = now + rem / rates[ch]

    def _cascade(self, now: float, starting: np.ndarray, sending: np.ndarray, sent: np.ndarray,
                 landed: np.ndarray, arrived: np.ndarray) -> None:
        empty = np.zeros(0, dtype=np.int64)
        finishing = empty
        while len(starting) or len(sending) or len(sent) or len(landed) or len(arrived) or len(finishing):
            if len(starting):
                self.t_start[starting] = now
                if self.dataflow:
                    ptr, ww = self.write_waiters
                    _o, e = _ranges(ptr[starting], ptr[starting + 1])
                    if len(e):
                        ws, c = np.unique(ww[e], return_counts=True)
                        self.readers_left[ws] -= c
                        ws = ws[(self.readers_left[ws] == 0) & self.arrived[ws]]
                        finishing = np.concatenate([finishing, ws])
                pre = self.pre[starting]
                later = pre > 0
                if later.any():
                    self._timer(now, pre[later], starting[later], _SEND)
                sending = np.concatenate([sending, starting[~later]])
                starting = empty
            if len(sending):
                self.t_send_start[sending] = now
                fl = self.has_flow[sending]
                if fl.any():
                    self._add_flows(now, sending[fl], False)
                sent = np.concatenate([sent, sending[~fl]])
                sending = empty
            if len(sent):
                self.t_send_end[sent] = now
                post = self.post[sent]
                later = post > 0
                if later.any():
                    self._timer(now, post[later], sent[later], _LAND)
                landed = np.concatenate([landed, sent[~later]])
                sent = empty
            if len(landed):
                rd = self.reducer[landed] >= 0
                if rd.any():
                    self._add_flows(now, landed[rd], True)
                arrived = np.concatenate([arrived, landed[~rd]])
                landed = empty
            if len(arrived):
                if self.dataflow:
                    self.arrived[arrived] = True
                    arrived = arrived[self.readers_left[arrived] == 0]
                finishing = np.concatenate([finishing, arrived])
                arrived = empty
            if len(finishing):
                self.t_end[finishing] = now
                self.finished += len(finishing)
                if self.dataflow:
                    ptr, dep = self.dependents
                    _o, e = _ranges(ptr[finishing], ptr[finishing + 1])
                    if len(e):
                        us, c = np.unique(dep[e], return_counts=True)
                        self.waiting[us] -= c
                        starting = us[self.waiting[us] == 0]
                else:
                    self.outstanding -= len(finishing)
                    if self.outstanding == 0:
                        starting = self._next_step()
                finishing = empty

    def _next_step(self) -> np.ndarray:
        if self.step >= len(self.offsets) - 1:
            return np.zeros(0, dtype=np.int64)
        lo, hi = int(self.offsets[self.step]), int(self.offsets[self.step + 1])
        self.step += 1
        self.outstanding = hi - lo
        return np.arange(lo, hi, dtype=np.int64)

    def run(self, bar: Any) -> None:
        empty = np.zeros(0, dtype=np.int64)
        self.changed = False
        if self.dataflow:
            first = np.flatnonzero(self.waiting == 0)
        else:
            first = self._next_step()
        now = 0.0
        self._cascade(now, first, empty, empty, empty, empty)
        done = 0
        while True:
            if self.changed:
                self._settle(now)
                self.changed = False
            if bar is not None and self.finished - done >= 4096:
                bar.update(self.finished - done)
                done = self.finished
            t_timer = self.timers[0][0] if self.timers else math.inf
            t_flow = float(self.f_end.min()) if len(self.f_end) else math.inf
            now = min(t_timer, t_flow)
            if now == math.inf:
                break
            self.events += 1
            sending, landed = [empty], [empty]
            while self.timers and self.timers[0][0] == now:
                _t, _s, kind, ids = heapq.heappop(self.timers)
                (sending if kind == _SEND else landed).append(ids)
            sent, arrived = empty, empty
            if t_flow == now:
                sent, arrived = self._end_flows(now)
            self._cascade(now, empty, np.concatenate(sending), sent, np.concatenate(landed), arrived)
        if bar is not None:
            bar.update(self.finished - done)


def run_fast(schedule: Schedule, topology: Topology, size: float, mode: str, overhead: float,
             reduce_bandwidth: float | None, stragglers: Mapping[int, float], chunk: float,
             progress: bool = False) -> dict[str, Any]:
    """Time ``schedule`` (options already checked, faults applied) and return the per-transfer arrays."""
    from sim import progress as prog

    run = _Fluid(schedule, topology, size, mode, overhead, reduce_bandwidth, stragglers, chunk)
    bar = prog.bar(run.n, unit="transfer", desc=schedule.name) if progress and run.n >= 20000 else None
    try:
        run.run(bar)
    finally:
        if bar is not None:
            bar.close()
    links = topology.links
    busy = {links[i]: float(b) for i, b in enumerate(run.busy[:run.nl]) if b > 0}
    ends = run.t_end[~np.isnan(run.t_end)]
    return {"time": float(ends.max()) if len(ends) else 0.0, "start": run.t_start, "send_start": run.t_send_start,
            "send_end": run.t_send_end, "end": run.t_end, "link_busy": busy, "events": run.events,
            "finished": run.finished, "idempotent": schedule.collective.kind is Kind.BARRIER}
