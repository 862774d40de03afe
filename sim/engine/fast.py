"""A vectorised engine: the simpy engine's times without a Python event per transfer.

Same model as ``sim.engine.reference`` (docs/design.md, "The simulator"): a transfer starts
(lockstep: when its step starts; dataflow: when its dependencies have ended and its ports' send
order lets it, ``sim.engine.ports``),
waits its pre-delay (endpoint overhead, stragglers), streams its bytes as a
flow over its route, waits the route's latency, reduces at the destination
(a flow on the rank's reducer) and ends; the flows share links max-min fairly
(``sim.engine.fairshare``). What differs is the bookkeeping. First a closed form,
step by step (``_closed_form``): while no two flows ever share a link, every
flow runs at its route's bottleneck and every time follows from earlier
steps, which is checked link by link as it goes. At the first doubt, an event
loop (``_Fluid``) where everything that happens at one instant is handled as
numpy arrays (the transfers that start, the flows that end, the max-min rates
of every active flow), so the cost is per distinct event time, not per
transfer, with the dataflow dependencies joined from sorted slot keys
(``dataflow_arrays``) instead of Python sets.

The postcondition verdict comes from a lockstep symbolic execution on compact
columns (``sim.verify.fast``, called by ``sim.engine.reference.simulate``): every
execution the simulator can run respects the dataflow dependencies, so for a
schedule without same-step write races it ends in the lockstep state
(``sim.verify.dataflow``) and the verdict is the simpy engine's. With such a race the
final state depends on which simultaneous write lands last, which only
simpy's event order decides: ``simulate(engine="auto")`` leaves those
schedules to simpy.
"""

from __future__ import annotations

import heapq
import itertools
import math
from typing import Any

import numpy as np

from algorithms.ir import BUFS, Schedule
from sim.engine.options import EngineOptions
from sim.engine.ports import PortArrays, StepGates, counted, ports
from sim.topology import Topology
from sim.verify.semantics import SlotLayout

__all__ = ["run_fast", "dataflow_arrays", "slot_columns"]

_SEND, _LAND = 0, 1


def slot_columns(schedule: Schedule) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                              np.ndarray, np.ndarray]:
    """Per transfer in program order: src rank, dst rank, src slot, dst slot, count, is_reduce, and step offsets.

    Slots are numbered as ``sim.verify.semantics.SlotLayout`` numbers them.
    """
    cols = schedule.columns()
    layout = SlotLayout(schedule)
    bases = np.array([layout.bases[b] for b in BUFS], dtype=np.int64)
    src = cols.src.astype(np.int64)
    dst = cols.dst.astype(np.int64)
    src_slot = bases[cols.src_buf, src] + cols.src_index
    dst_slot = bases[cols.dst_buf, dst] + cols.dst_index
    return src, dst, src_slot, dst_slot, cols.count.astype(np.int64), cols.op.astype(bool), cols.step_offsets


def _ranges(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For ranges [lo_i, hi_i): (i repeated once per element, the elements)."""
    n = np.maximum(hi - lo, 0)
    if len(n) <= 8:  # the event loop's common case: a few ranges, element by element (a few calls, not ten)
        ls, ns = lo.tolist(), n.tolist()
        return (np.repeat(np.arange(len(ns), dtype=np.int64), n),
                np.array([x for a, k in zip(ls, ns, strict=True) for x in range(a, a + k)], dtype=np.int64))
    total = int(n.sum())
    owner = np.repeat(np.arange(len(lo), dtype=np.int64), n)
    if total == 0:
        return owner, np.zeros(0, dtype=np.int64)
    starts = np.cumsum(n) - n
    elems = np.arange(total, dtype=np.int64) - np.repeat(starts - lo, n)
    return owner, elems


def segments(src_slot: np.ndarray, dst_slot: np.ndarray, count: np.ndarray
             ) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The slots cut at every transfer's ends into segments: every transfer reads and writes whole segments, so
    a segment's slots have the same readers and writers, step by step, and one entry stands for them all (a
    halving's runs: a few segments each, not one a chunk). The number of segments, and per transfer: its first
    source segment and how many, its first destination segment and how many."""
    cuts = np.unique(np.concatenate([src_slot, src_slot + count, dst_slot, dst_slot + count]))
    a = np.searchsorted(cuts, src_slot)
    d = np.searchsorted(cuts, dst_slot)
    return len(cuts), a, np.searchsorted(cuts, src_slot + count) - a, d, np.searchsorted(cuts, dst_slot + count) - d


def _csr(keys: np.ndarray, values: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Group ``values`` by ``keys`` in 0..n-1: (indptr, values sorted by key, stable)."""
    order = np.argsort(keys, kind="stable")
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys, minlength=n), out=indptr[1:])
    return indptr, values[order]


def dataflow_arrays(schedule: Schedule) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray],
                                                 np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """The dataflow relations of ``sim.verify.dataflow`` as arrays, joined from sorted (segment, step) keys.

    Returns ``waiting`` (per node, its dependency edges, counted with
    multiplicity), ``dependents`` (CSR: for each node, the nodes that wait for
    it to end, one entry per edge), ``readers_left`` (per transfer, the
    same-step readers of its destination) and ``write_waiters`` (CSR: for each
    transfer, the writers waiting for it to start). Nodes 0..n-1 are the
    transfers; nodes from n on are *joins* that end, taking no time, when
    everything they wait for has ended: one per write group of several
    writers (what the group's later readers and writers wait for) and one per
    set of several readers that several writers must outwait. Without them
    the direct all-reduce at p = 1024 would list a billion edges (every copy
    of its second step waits for the 1023 reductions into its source). A
    dependency listed twice is waited for twice and released twice.
    """
    _src, _dst, src_slot, dst_slot, count, _red, offsets = slot_columns(schedule)
    n = len(count)
    if n == 0:
        e = np.zeros(0, dtype=np.int64)
        return e, (np.zeros(1, dtype=np.int64), e), e, (np.zeros(1, dtype=np.int64), e)
    nsteps = len(offsets) - 1
    step_of = np.repeat(np.arange(nsteps, dtype=np.int64), np.diff(offsets))
    width = nsteps + 1
    _nseg, a_first, a_n, d_first, d_n = segments(src_slot, dst_slot, count)  # keyed by segment, not by slot

    def moves(first: np.ndarray, many: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # (transfer, key) a segment
        t, seg = _ranges(first, first + many)
        return t, seg * width + step_of[t]

    rt, rkey = moves(a_first, a_n)
    rorder = np.argsort(rkey, kind="stable")
    rkey_s, rt_s = rkey[rorder], rt[rorder]
    del rorder, rkey, rt
    wt, wkey = moves(d_first, d_n)
    worder = np.argsort(wkey, kind="stable")
    wkey_s, wt_s = wkey[worder], wt[worder]
    del worder, wt
    # Write groups: the writes of one slot in one step. A group of one is its writer; larger ones get a join.
    gstart = np.flatnonzero(np.r_[True, wkey_s[1:] != wkey_s[:-1]])
    gkey = wkey_s[gstart]
    gend = np.r_[gstart[1:], len(wkey_s)]
    gsize = gend - gstart
    big = gsize > 1
    node_of_group = np.where(big, 0, wt_s[gstart])
    node_of_group[big] = n + np.arange(int(big.sum()), dtype=np.int64)
    nodes = n + int(big.sum())
    owners: list[np.ndarray] = []
    deps: list[np.ndarray] = []
    # A join waits for its group's writers.
    o, e = _ranges(gstart[big], gend[big])
    owners.append(node_of_group[big][o])
    deps.append(wt_s[e])

    def last_group(keys: np.ndarray) -> np.ndarray:
        """Index of the last write group of the same slot in an earlier step (-1 if none)."""
        g = np.searchsorted(gkey, keys, side="left") - 1
        ok = g >= 0
        ok[ok] = gkey[g[ok]] // width == keys[ok] // width
        return np.where(ok, g, -1)

    # Read after write: each read waits for the last write group of its slot.
    g = last_group(rkey_s)
    has = g >= 0
    owners.append(rt_s[has])
    deps.append(node_of_group[g[has]])
    # Write after write: each write waits for the slot's previous write group.
    g = last_group(gkey)
    has = g >= 0
    o, e = _ranges(gstart[has], gend[has])
    owners.append(wt_s[e])
    deps.append(np.repeat(node_of_group[g[has]], gsize[has]))
    # Write after read: a group's writers wait for the slot's readers after the previous group's step,
    # before this one (directly, or through a join when there are several of each).
    slot = gkey // width
    prev_step = np.where(has, gkey[np.maximum(g, 0)] % width, -1)
    lo = np.searchsorted(rkey_s, slot * width + prev_step + 1, side="left")
    hi = np.searchsorted(rkey_s, gkey, side="left")
    nread = hi - lo
    joined = (gsize > 1) & (nread > 1)
    plain = ~joined & (nread > 0)
    o, e = _ranges(lo[plain], hi[plain])  # few of each: every writer waits for every reader
    pair_of_writer, ww = _ranges(gstart[plain][o], gend[plain][o])
    owners.append(wt_s[ww])
    deps.append(rt_s[e][pair_of_writer])
    join = nodes + np.arange(int(joined.sum()), dtype=np.int64)
    nodes += len(join)
    o, e = _ranges(lo[joined], hi[joined])
    owners.append(join[o])
    deps.append(rt_s[e])
    o, e = _ranges(gstart[joined], gend[joined])
    owners.append(wt_s[e])
    deps.append(join[o])
    owner = np.concatenate(owners)
    dep = np.concatenate(deps)
    del owners, deps
    waiting = np.bincount(owner, minlength=nodes).astype(np.int64)
    dependents = _csr(dep, owner, nodes)
    del owner, dep
    # Same-step readers of a slot a transfer writes (other than itself): the write waits for them to start.
    lo = np.searchsorted(rkey_s, wkey_s, side="left")
    hi = np.searchsorted(rkey_s, wkey_s, side="right")
    o, e = _ranges(lo, hi)
    w_owner, w_reader = wt_s[o], rt_s[e]
    keep = w_owner != w_reader
    w_owner, w_reader = w_owner[keep], w_reader[keep]
    # One edge per (writer, reader) pair, as sim.verify.dataflow lists each once.
    pair = np.unique(w_owner * n + w_reader)
    w_owner, w_reader = pair // n, pair % n
    readers_left = np.bincount(w_owner, minlength=n).astype(np.int64)
    write_waiters = _csr(w_reader, w_owner, n)
    return waiting, dependents, readers_left, write_waiters


def _max_min(e_flow: np.ndarray, e_link: np.ndarray, nflows: int, caps: np.ndarray) -> np.ndarray:
    """Max-min fair rates by progressive filling, every bottleneck level at once (see ``sim.engine.fairshare``)."""
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


class _Plan:
    """What the model needs of each transfer, kept compact (int32 columns, per-pair routes), computed on demand.

    Pair 0 is "no network" (a local transfer); every distinct remote (src, dst)
    pair (and way, ``Schedule.ways``) gets an id, its route as CSR over link
    ids, its latency and its bottleneck bandwidth. Link ids from ``nl`` on are the ranks' reducers.
    """

    def __init__(self, schedule: Schedule, topology: Topology, options: EngineOptions, chunk: float) -> None:
        overhead, reduce_bandwidth = options.overhead, options.reduce_bandwidth
        cols = schedule.columns()
        p = schedule.ranks
        self.p = p
        self.src, self.dst, self.count = cols.src, cols.dst, cols.count
        self.red = cols.op == 1
        self.offsets = cols.step_offsets
        self.n = len(self.src)
        self.chunk = chunk
        self.overhead = overhead
        self.slow = np.zeros(p)
        for r, d in options.faults.stragglers.items():
            if d:
                self.slow[r] = float(d)
        self.any_slow = bool(self.slow.any())
        self.reduce_bandwidth = reduce_bandwidth
        nl = len(topology.links)
        self.nl = nl
        self.caps = np.array(topology.link_bandwidths() + [float(reduce_bandwidth or 1.0)] * p)
        # Pair ids without sorting n keys where a dense p x p table fits; with ways a route is a (way, src, dst).
        remote = self.src != self.dst
        ways = schedule.ways
        if ways is not None:
            key = np.where(remote, (ways.astype(np.int64) * p + self.src) * p + self.dst, -1)
            keys, inv = np.unique(key, return_inverse=True)
            if len(keys) and keys[0] == -1:
                keys = keys[1:]
            else:
                inv = inv + 1
            self.pair_of = inv.reshape(-1).astype(np.int32)
            del key, inv
        elif p * p <= 1 << 26:
            key = self.src.astype(np.int64) * p + self.dst
            used = np.zeros(p * p, dtype=bool)
            used[key[remote]] = True
            keys = np.flatnonzero(used)
            table = np.zeros(p * p, dtype=np.int32)
            table[keys] = np.arange(1, len(keys) + 1, dtype=np.int32)
            self.pair_of = np.where(remote, table[key], 0).astype(np.int32)
            del key, used, table
        else:
            key = np.where(remote, self.src.astype(np.int64) * p + self.dst, -1)
            keys, inv = np.unique(key, return_inverse=True)
            if len(keys) and keys[0] == -1:
                keys = keys[1:]
            else:
                inv = inv + 1
            self.pair_of = inv.astype(np.int32)
            del key, inv
        pairs: list[Any]
        routes: dict[Any, tuple[tuple[int, ...], float]]
        if ways is None:
            pairs = [(int(k) // p, int(k) % p) for k in keys.tolist()]
            routes = topology.route_links_many(pairs)
        else:
            pairs = [(int(k) // p % p, int(k) % p, int(k) // (p * p)) for k in keys.tolist()]
            routes = topology.route_links_ways(pairs)
        m = len(pairs) + 1
        route_len = np.zeros(m, dtype=np.int64)
        self.pair_lat = np.zeros(m)
        flat: list[int] = []
        for i, pr in enumerate(pairs, start=1):
            links, latency = routes[pr]
            route_len[i] = len(links)
            self.pair_lat[i] = latency
            flat.extend(links)
        self.route_ptr = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(route_len, out=self.route_ptr[1:])
        self.route_links = np.array(flat, dtype=np.int64)
        self.route_len = route_len
        self.pair_bw = np.full(m, math.inf)
        if len(flat):
            has = route_len > 0
            self.pair_bw[has] = np.minimum.reduceat(self.caps[self.route_links], self.route_ptr[:-1][has])

    def nbytes(self, ids: np.ndarray) -> np.ndarray:
        return self.count[ids] * self.chunk

    def pre(self, ids: np.ndarray) -> np.ndarray:
        """Straggler delays (source, and destination when remote), plus the overhead when remote: engine order."""
        src, dst = self.src[ids], self.dst[ids]
        remote = src != dst
        if self.any_slow:
            pre = self.slow[src] + np.where(remote, self.slow[dst], 0.0)
        else:
            pre = np.zeros(len(ids))
        return np.where(remote, pre + self.overhead, pre) if self.overhead else pre

    def post(self, ids: np.ndarray) -> np.ndarray:
        return self.pair_lat[self.pair_of[ids]]

    def has_flow(self, ids: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
        return (self.route_len[self.pair_of[ids]] > 0) & (nbytes > 0)

    def reducer(self, ids: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
        if self.reduce_bandwidth is None:
            return np.full(len(ids), -1, dtype=np.int64)
        return np.where(self.red[ids] & (nbytes > 0), self.nl + self.dst[ids].astype(np.int64), -1)

    def links(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Route link ids of ``ids`` concatenated, and how many each has."""
        pr = self.pair_of[ids]
        lo, hi = self.route_ptr[pr], self.route_ptr[pr + 1]
        _o, e = _ranges(lo, hi)
        return self.route_links[e], hi - lo


class _Fluid:
    """One run: per-transfer arrays, a heap of timer batches, and the active flows as arrays."""

    def __init__(self, schedule: Schedule, plan: _Plan, mode: str, gates: PortArrays | None = None) -> None:
        self.schedule = schedule
        self.gates = gates  # dataflow's send order (sim.engine.ports); None: no queues
        self.mode = mode
        self.plan = plan
        self.offsets = plan.offsets
        n = plan.n
        self.n = n
        nl, p = plan.nl, plan.p
        self.nl = nl
        self.caps = plan.caps
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
        self.f_bw = np.zeros(0)  # the bottleneck capacity of the flow's route: its rate when alone on it
        self._resettle = False
        self._fresh = 0  # flows added since the last settle (the arrays' last ones)
        self.e_link = np.zeros(0, dtype=np.int64)
        self.timers: list[tuple[float, int, int, np.ndarray]] = []
        self._shared: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
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
        first = when[0]
        if (when == first).all():
            times, groups = np.array([first]), [ids]
        else:
            times, inv = np.unique(when, return_inverse=True)
            order = np.argsort(inv, kind="stable")
            groups = np.split(ids[order], np.cumsum(np.bincount(inv))[:-1])
        for t, g in zip(times.tolist(), groups, strict=True):
            self.seq += 1
            heapq.heappush(self.timers, (t, self.seq, kind, g))

    def _add_flows(self, now: float, ids: np.ndarray, reducer: bool) -> None:
        plan = self.plan
        if reducer:
            nls = np.ones(len(ids), dtype=np.int64)
            links = plan.reducer(ids, plan.nbytes(ids))
        else:
            links, nls = plan.links(ids)
        idle = links[self.lcount[links] == 0]
        self.busy_since[idle] = now
        np.add.at(self.lcount, links, 1)
        self._resettle |= bool((self.lcount[links] > 1).any())  # a link shared now: its flows' rates change
        k = len(ids)
        self._fresh += k
        self.f_bw = np.concatenate([self.f_bw, np.minimum.reduceat(self.caps[links], np.cumsum(nls) - nls)])
        self.f_t = np.concatenate([self.f_t, ids])
        self.f_red = np.concatenate([self.f_red, np.full(k, reducer)])
        self.f_rem = np.concatenate([self.f_rem, plan.nbytes(ids)])
        self.f_rate = np.concatenate([self.f_rate, np.zeros(k)])
        self.f_last = np.concatenate([self.f_last, np.full(k, now)])
        self.f_end = np.concatenate([self.f_end, np.full(k, math.inf)])
        self.f_nl = np.concatenate([self.f_nl, nls])
        self.e_link = np.concatenate([self.e_link, links])
        self.changed = True

    def _end_flows(self, now: float) -> tuple[np.ndarray, np.ndarray]:
        done = self.f_end <= now
        keep = ~done
        self._resettle |= self._fresh > 0  # never so (flows end before new ones are added), but then settle all
        e_done = np.repeat(done, self.f_nl)
        links = self.e_link[e_done]
        np.subtract.at(self.lcount, links, 1)
        left = self.lcount[links]
        self._resettle |= bool((left > 0).any())  # a link that was shared: its other flows' rates change
        freed = links[left == 0]
        # An assignment, not +=: a link listed twice gets the same value twice, not the period twice.
        self.busy[freed] = self.busy[freed] + (now - self.busy_since[freed])
        ids, red = self.f_t[done], self.f_red[done]
        self.f_t, self.f_red, self.f_rem = self.f_t[keep], self.f_red[keep], self.f_rem[keep]
        self.f_rate, self.f_last, self.f_end = self.f_rate[keep], self.f_last[keep], self.f_end[keep]
        self.f_nl, self.f_bw = self.f_nl[keep], self.f_bw[keep]
        self.e_link = self.e_link[~e_done]
        self.changed = True
        return ids[~red], ids[red]

    def _settle(self, now: float) -> None:
        nf = len(self.f_t)
        if not nf:
            return
        # A flow alone on every link it crosses is its own component of the sharing: progressive filling
        # gives it its bottleneck capacity (caps / 1, bit for bit), whatever the other flows do. Only the
        # flows that share a link go through the filling (sim.engine.fairshare: flows elsewhere keep their
        # rates), which keeps an event's cost to the flows it concerns when most links carry one flow. When no
        # link became or stopped being shared since the last settle, only the new flows (rate 0) need theirs.
        fresh, self._fresh = self._fresh, 0
        if not self._resettle:
            if fresh:  # the flows added since, at the end of the arrays
                tail = slice(nf - fresh, nf)
                bw = self.f_bw[tail]
                self.f_last[tail] = now
                self.f_rate[tail] = bw
                self.f_end[tail] = now + self.f_rem[tail] / bw
            return
        self._resettle = False
        at = np.cumsum(self.f_nl) - self.f_nl
        shared = np.maximum.reduceat(self.lcount[self.e_link], at) > 1
        rates = self.f_bw.copy()
        if shared.any():
            sh = np.flatnonzero(shared)
            on = np.repeat(shared, self.f_nl)
            key = (self.f_t[sh], self.f_red[sh], self.e_link[on])
            last = self._shared
            # The same sharing flows over the same links as at the last settle: the same rates.
            if last is not None and all(len(a) == len(b) and np.array_equal(a, b)
                                        for a, b in zip(key, last[:3], strict=True)):
                rates[sh] = last[3]
            else:
                e_flow = np.repeat(np.arange(len(sh), dtype=np.int64), self.f_nl[sh])
                got = _max_min(e_flow, key[2], len(sh), self.caps)
                self._shared = (*key, got)
                rates[sh] = got
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
                        ws, c = counted(ww[e])
                        self.readers_left[ws] -= c
                        ws = ws[(self.readers_left[ws] == 0) & self.arrived[ws]]
                        finishing = np.concatenate([finishing, ws])
                pre = self.plan.pre(starting)
                later = pre > 0
                if later.any():
                    self._timer(now, pre[later], starting[later], _SEND)
                sending = np.concatenate([sending, starting[~later]])
                starting = empty
            if len(sending):
                self.t_send_start[sending] = now
                fl = self.plan.has_flow(sending, self.plan.nbytes(sending))
                if fl.any():
                    self._add_flows(now, sending[fl], False)
                sent = np.concatenate([sent, sending[~fl]])
                sending = empty
            if len(sent):
                self.t_send_end[sent] = now
                post = self.plan.post(sent)
                later = post > 0
                if later.any():
                    self._timer(now, post[later], sent[later], _LAND)
                landed = np.concatenate([landed, sent[~later]])
                sent = empty
            if len(landed):
                if self.gates is not None:  # a message is delivered whole, when its last transfer lands
                    landed, go = self.gates.landed(landed)
                    starting = np.concatenate([starting, go])
                rd = self.plan.reducer(landed, self.plan.nbytes(landed)) >= 0
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
                    released = finishing
                    while len(released):
                        _o, e = _ranges(ptr[released], ptr[released + 1])
                        if not len(e):
                            break
                        us, c = counted(dep[e])
                        self.waiting[us] -= c
                        ready = us[self.waiting[us] == 0]
                        go = ready[ready < self.n]
                        if self.gates is not None:
                            go = self.gates.ready(go)
                        starting = np.concatenate([starting, go])
                        released = ready[ready >= self.n]  # joins end at once
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
            first = first[first < self.n]
            if self.gates is not None:
                first = self.gates.ready(first)
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


def _closed_form(schedule: Schedule, plan: _Plan, mode: str, bar: Any = None,
                 gates: StepGates | None = None) -> dict[str, Any] | None:
    """Times step by step when no two flows ever share a link; None as soon as two might.

    Without sharing every flow runs at its route's bottleneck bandwidth, so a
    transfer's times follow from its start alone, and a step's starts from
    earlier steps alone: lockstep, the previous step's end; dataflow, the
    latest end among the last writers and later readers of its slots (kept per
    slot, no dependency lists), and a write waits for the latest start among
    the same step's readers of its slot. This is exactly the event
    simulation's trajectory when, on every link, each flow starts no earlier
    than every earlier step's flows there have ended and a step's own flows
    there do not overlap; that is checked as it goes, and any doubt (a flow
    starting before an earlier one on its link has ended) hands the run back
    to the event loop. ``gates``: the send order's queues (``sim.engine.ports``), which hold a step's
    messages back by earlier steps alone.
    """
    n, p, nl = plan.n, plan.p, plan.nl
    dataflow = mode == "dataflow"
    start = np.empty(n)
    send_start = np.empty(n)
    send_end = np.empty(n)
    end = np.empty(n)
    busy_until = np.zeros(nl + p)
    busy = np.zeros(nl + p)
    mark = np.zeros(nl + p, dtype=np.int64)
    rbw = plan.reduce_bandwidth
    if dataflow:
        _s, _d, src_slot, dst_slot, count, _red, _off = slot_columns(schedule)
        nseg, a_first, a_n, d_first, d_n = segments(src_slot, dst_slot, count)
        # Per segment (``segments``: its slots alike), in one row (one cache line for the random accesses a step
        # makes): the latest end of its last write group, the latest end of its readers since that group's step,
        # and (scratch) the latest start of this step's readers.
        slot_t = np.zeros((nseg, 3))
        slot_t[:, 2] = -math.inf
        wt, rt, rs = slot_t[:, 0], slot_t[:, 1], slot_t[:, 2]
    t0 = 0.0
    steps = 0
    for lo, hi in itertools.pairwise(plan.offsets.tolist()):
        if hi == lo:
            continue
        steps += 1
        ids = np.arange(lo, hi, dtype=np.int64)
        if dataflow:
            an, dn = a_n[lo:hi], d_n[lo:hi]
            ones = bool((an == 1).all() and (dn == 1).all())
            if ones:
                a, d = a_first[lo:hi], d_first[lo:hi]
            else:
                a, fa = _ranges(a_first[lo:hi], a_first[lo:hi] + an)[1], np.cumsum(an) - an
                d, fd = _ranges(d_first[lo:hi], d_first[lo:hi] + dn)[1], np.cumsum(dn) - dn
            unique_a = not bool((np.diff(np.sort(a)) == 0).any())
            unique_d = not bool((np.diff(np.sort(d)) == 0).any())
            row_d = slot_t[d]
            need_a, need_d = wt[a], np.maximum(row_d[:, 0], row_d[:, 1])
            st = np.maximum(need_a, need_d) if ones else np.maximum(np.maximum.reduceat(need_a, fa),
                                                                     np.maximum.reduceat(need_d, fd))
            if gates is not None:
                st = gates.starts(lo, hi, st)
        else:
            st = np.full(hi - lo, t0)
        nb = plan.nbytes(ids)
        ss = st + plan.pre(ids)
        fl = plan.has_flow(ids, nb)
        se = ss.copy()
        se[fl] = ss[fl] + nb[fl] / plan.pair_bw[plan.pair_of[ids[fl]]]
        land = se + plan.post(ids)
        if gates is not None:
            gates.record(st, land)
        red = plan.reducer(ids, nb)
        rd = red >= 0
        arrive = land.copy()
        if rd.any():
            assert rbw is not None
            arrive[rd] = land[rd] + nb[rd] / rbw
        if dataflow:
            st_m = st if ones else np.repeat(st, an)
            if unique_a:
                rs[a] = st_m
            else:
                np.maximum.at(rs, a, st_m)
            wa = rs[d]
            en = np.maximum(arrive, wa if ones else np.maximum.reduceat(wa, fd))
            rs[a] = -math.inf
        else:
            en = arrive
        # Links: the route of each flow over [send start, send end), the reducer over [landed, arrived).
        links, nls = plan.links(ids[fl])
        lk = np.concatenate([links, red[rd]])
        s0 = np.concatenate([np.repeat(ss[fl], nls), land[rd]])
        s1 = np.concatenate([np.repeat(se[fl], nls), arrive[rd]])
        if len(lk):
            if bool((s0 < busy_until[lk]).any()):
                return None
            pos = np.arange(len(lk))
            mark[lk] = pos
            if bool((mark[lk] != pos).any()):  # some link carries two of this step's flows
                order = np.lexsort((s0, lk))
                same = lk[order][1:] == lk[order][:-1]
                if bool((s1[order][:-1][same] > s0[order][1:][same]).any()):
                    return None
            np.maximum.at(busy_until, lk, s1)
            np.add.at(busy, lk, s1 - s0)
        start[lo:hi], send_start[lo:hi], send_end[lo:hi], end[lo:hi] = st, ss, se, en
        if bar is not None:
            bar.update(hi - lo)
        if dataflow:
            en_a = en if ones else np.repeat(en, an)
            en_d = en if ones else np.repeat(en, dn)
            if unique_a:
                rt[a] = np.maximum(rt[a], en_a)
            else:
                np.maximum.at(rt, a, en_a)
            # This step's writes start a new group; readers so far (this step's included) are forgotten.
            rt[d] = 0.0
            if unique_d:
                wt[d] = en_d
            else:
                wt[d] = 0.0
                np.maximum.at(wt, d, en_d)
        else:
            t0 = float(en.max())
    return {"start": start, "send_start": send_start, "send_end": send_end, "end": end, "busy": busy,
            "events": steps}


def run_fast(schedule: Schedule, topology: Topology, size: float, options: EngineOptions, chunk: float,
             closed_form: bool = True, queued: np.ndarray | None = None,
             channels: np.ndarray | None = None) -> dict[str, Any]:
    """Time ``schedule`` with ``options`` on ``topology`` (its link faults already applied; the stragglers are
    ``options.faults``'): the per-transfer arrays and link busy times.

    The closed form when no flow ever shares a link (``closed_form=False``: never), else the event loop.
    ``queued``: the transfers dataflow's send order queues (``sim.engine.ports``; None: every remote one);
    ``channels``: each transfer's channel there (None: ``schedule.channels``).
    """
    from sim import progress as prog

    plan = _Plan(schedule, topology, options, chunk)
    mode = options.mode
    queues = ports(schedule, topology, queued, channels) if mode == "dataflow" and options.in_flight else None
    show = options.progress and plan.n >= 20000
    with prog.bar(plan.n, unit="transfer", desc=schedule.name, enabled=show) as bar:
        got = None
        if closed_form:
            gates = None if queues is None else StepGates(queues, options.in_flight)
            got = _closed_form(schedule, plan, mode, bar, gates)
    closed = got is not None
    if got is None:
        run = _Fluid(schedule, plan, mode, None if queues is None else PortArrays(queues, options.in_flight))
        with prog.bar(run.n, unit="transfer", desc=f"{schedule.name} (shared links)", enabled=show) as bar:
            run.run(bar)
        got = {"start": run.t_start, "send_start": run.t_send_start, "send_end": run.t_send_end, "end": run.t_end,
               "busy": run.busy, "events": run.events}
    links = topology.links
    busy = {links[i]: float(b) for i, b in enumerate(got["busy"][:plan.nl].tolist()) if b > 0}
    ends = got["end"][~np.isnan(got["end"])]
    return {"time": float(ends.max()) if len(ends) else 0.0, "start": got["start"], "send_start": got["send_start"],
            "send_end": got["send_end"], "end": got["end"], "link_busy": busy, "events": got["events"],
            "closed_form": closed}
