"""Simulation by symmetry: a schedule invariant under a group of torus translations, timed from one transfer
per orbit (docs/design.md, "Simulation by symmetry").

When a schedule (its ``algorithms.symmetric.SymmetricForm``), the topology (links, bandwidths, latencies,
routes) and the run's options are all invariant under a group G of translations that acts freely on the
ranks, the simulation's trajectory is invariant too: the translate of a transfer starts, sends and ends when
the transfer does, and the translate of a link carries the translates of its flows. So the run is computed on
the quotient, by ``sim.engine.fast``'s own closed form and event loop:

- one transfer per orbit (the form's partial schedule: those whose source is a representative rank);
- slots up to G: a transfer into rank r = h·rep writes rep's slot ``chunk_map(-h, ...)`` there, so the dataflow
  dependencies (last writers, readers, write groups) are the orbits' and are counted as often as in the
  explicit run (G acts freely on slots: an orbit meets a write group at most once);
- links up to G: a flow's route is listed by link orbit, a route that crosses two links of one orbit lists it
  twice, and max-min fairness then counts it twice, as the explicit run counts the flow and its translate
  there (their rates are equal by symmetry);
- ports up to G: a message's send and receive ports are link orbits, its batches those of the step.

What is checked before the quotient is trusted, else ``quotient`` says why and ``simulate_form`` runs the
explicit engine on the built schedule: every generator maps every link onto a link of the same bandwidth and
latency; every route a representative transfer takes is the translate of the route of its orbit's other
members (the direct link, or the only best path down the destination's tree; explicit routes: each image
looked up); stragglers are the same on every orbit; no ``message_cpu`` (only simpy models it) and no switch
operations. The form itself (that the schedule is invariant) is the algorithm's claim, checked against the
built schedule by ``check_form`` (the tests do so on every library form at small sizes). The postcondition
is not checked on the quotient: the result says so (``SymmetricResult.checked``).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, overload

import numpy as np

from algorithms.ir import BUFS, Collective, Kind, Schedule
from algorithms.symmetric import SymmetricForm
from sim.engine import reference
from sim.engine.fast import _closed_form, _Fluid, _Plan
from sim.engine.options import EngineOptions, SimulationError
from sim.engine.ports import PortArrays, Ports, StepGates, _side
from sim.engine.reference import SimResult
from sim.topology import Topology
from sim.units import busbw_factor

__all__ = ["Group", "Quotient", "SymmetricResult", "by_symmetry", "check_form", "estimate_bytes", "group", "quotient",
           "simulate", "simulate_form"]

QUOTIENT_TRANSFER_BYTES = 1024
"""Bytes a representative transfer costs through the quotient run (columns, dataflow arrays, the event loop's
state): the fast engine's 0.8 KiB a transfer, rounded up."""


@dataclass(frozen=True, eq=False)
class Group:
    """A group of translations of the torus ``dims``: its elements (as vectors), each rank's representative
    (the smallest rank of its orbit) and the element that takes the representative to the rank."""

    dims: tuple[int, ...]
    elements: np.ndarray
    """|G| x D translation vectors; row 0 is the identity."""
    reps: np.ndarray
    """The representatives, ascending."""
    rep_of: np.ndarray
    """Per rank: the index in ``reps`` of its orbit's representative."""
    shift_of: np.ndarray
    """Per rank: the row of ``elements`` that takes its representative to it."""

    @property
    def order(self) -> int:
        return len(self.elements)

    def coords(self, ranks: np.ndarray) -> np.ndarray:
        return np.stack(np.unravel_index(np.asarray(ranks, dtype=np.int64), self.dims), axis=-1)

    def move(self, ranks: np.ndarray, vectors: np.ndarray) -> np.ndarray:
        """Each rank translated by its vector (rows), wrapping around."""
        c = (self.coords(ranks) + vectors) % np.array(self.dims)
        return np.ravel_multi_index(tuple(c.T), self.dims)


def group(dims: tuple[int, ...], generators: tuple[tuple[int, ...], ...]) -> Group:
    """The group the translations ``generators`` generate on the torus ``dims``, and its orbits."""
    p = math.prod(dims)
    d = np.array(dims, dtype=np.int64)
    seen = np.zeros(p, dtype=bool)
    seen[0] = True
    frontier = np.zeros((1, len(dims)), dtype=np.int64)
    elements = [frontier]
    gens = np.array(generators, dtype=np.int64).reshape(-1, len(dims))
    while len(frontier):  # breadth first: the orbit of rank 0 is the group, vector for vector
        cand = ((frontier[:, None, :] + gens[None, :, :]) % d).reshape(-1, len(dims))
        ranks = np.ravel_multi_index(tuple(cand.T), dims)
        ranks, first = np.unique(ranks, return_index=True)
        new = ~seen[ranks]
        seen[ranks[new]] = True
        frontier = cand[first[new]]
        elements.append(frontier)
    elem = np.concatenate(elements)
    rep_of = np.full(p, -1, dtype=np.int64)
    shift_of = np.zeros(p, dtype=np.int64)
    reps: list[int] = []
    coords = np.stack(np.unravel_index(np.arange(p), dims), axis=-1)
    for r in range(p):
        if rep_of[r] >= 0:
            continue
        orbit = np.ravel_multi_index(tuple(((coords[r] + elem) % d).T), dims)
        rep_of[orbit] = len(reps)
        shift_of[orbit] = np.arange(len(elem))
        reps.append(r)
    return Group(tuple(dims), elem, np.array(reps, dtype=np.int64), rep_of, shift_of)


@dataclass(frozen=True, eq=False)
class Quotient:
    """What the fast engine runs: the quotient schedule (ranks: the representatives; slots up to G), a plan
    whose links are link orbits, and the send order's queues over port orbits."""

    schedule: Schedule
    plan: _Plan
    ports: Ports
    group: Group
    representatives: int
    transfers: int
    """Transfers of the whole schedule: representatives x |G|."""


class _QuotientPlan(_Plan):
    """``sim.engine.fast._Plan`` over link orbits, built from arrays; remoteness is the real transfer's (a
    transfer to another rank of its own orbit is remote, though the quotient names one rank twice)."""

    remote: np.ndarray

    def __init__(self) -> None:  # filled in by ``quotient``
        pass

    def pre(self, ids: np.ndarray) -> np.ndarray:
        remote = self.remote[ids]
        pre = np.zeros(len(ids))
        if self.any_slow:
            src, dst = self.src[ids], self.dst[ids]
            pre = self.slow[src] + np.where(remote, self.slow[dst], 0.0)
        return np.where(remote, pre + self.overhead, pre) if self.overhead else pre


def _links_invariant(topology: Topology, g: Group, gens: np.ndarray) -> str | None:
    """Why some generator does not map the links onto links of the same bandwidth and latency, or None."""
    p = topology.ranks
    if topology.graph.number_of_nodes() != p:
        return "the topology has switches (only ranks are translated)"
    links = topology.links
    u = np.array([a for a, _b in links], dtype=np.int64)
    v = np.array([b for _a, b in links], dtype=np.int64)
    bw = np.array(topology.link_bandwidths())
    lat = np.array([topology.latency(a, b) for a, b in links])
    key = u * p + v
    order = np.argsort(key)
    skey = key[order]
    for gen in gens:
        shift = np.broadcast_to(gen, (len(u), len(gen)))
        ik = g.move(u, shift) * p + g.move(v, shift)
        at = np.searchsorted(skey, ik)
        ok = (at < len(skey)) & (skey[np.minimum(at, len(skey) - 1)] == ik)
        if not ok.all():
            bad = int(np.flatnonzero(~ok)[0])
            return f"translation {tuple(gen)} maps link {links[bad]} onto no link"
        img = order[at]
        if not (np.array_equal(bw[img], bw) and np.array_equal(lat[img], lat)):
            return f"translation {tuple(gen)} maps a link onto one of another bandwidth or latency"
    return None


def _route(topology: Topology, g: Group, src: int, dst: int, trees: dict[int, Any]) -> tuple[int, ...] | None:
    """The node path from src to dst when it is provably the translate of its orbit's other routes, else None.

    Explicit routes: None unless the explicit route of every translate of the pair is the translate of this
    one. Otherwise the direct link when it is the shortest route (a translation-invariant test), else the walk
    down the representative destination's tree from the translated source, when every node on it has one best
    next hop only (ties are broken by the destination's digits, which translations do not keep).
    Uses ``Topology``'s own routing internals (``_direct``, ``_tree``) so as to take the very route it takes.
    """
    if topology.routes:
        explicit = topology.route(src, dst)
        base = np.array(explicit, dtype=np.int64)
        srcs = g.move(np.full(g.order, src), g.elements)
        dsts = g.move(np.full(g.order, dst), g.elements)
        for i in range(g.order):
            want = g.move(base, np.broadcast_to(g.elements[i], (len(base), len(g.dims))))
            if topology.route(int(srcs[i]), int(dsts[i])) != tuple(int(x) for x in want):
                return None
        return tuple(int(x) for x in base)
    direct = topology._direct(src, dst)
    if direct is not None:
        return (src, dst)
    j = int(g.rep_of[dst])
    rep = int(g.reps[j])
    h = g.elements[g.shift_of[dst]]
    start = int(g.move(np.array([src]), -h[None, :])[0])
    tree = trees.get(rep)
    if tree is None:
        tree = trees[rep] = topology._tree(rep)
    _lat, hops, _widest, nexts = tree
    if hops[start] < 0:
        return None
    path: list[int] = [start]
    u = start
    while u != rep:
        if len(nexts[u]) != 1:
            return None
        u = nexts[u][0]
        if u >= topology.ranks:
            return None
        path.append(u)
    moved = g.move(np.array(path), np.broadcast_to(h, (len(path), len(h))))
    return tuple(int(x) for x in moved)


def quotient(form: SymmetricForm, topology: Topology, options: EngineOptions) -> Quotient | str:
    """The quotient run of ``form`` on ``topology`` with ``options`` (module docstring), or why there is none."""
    if options.message_cpu:
        return "message_cpu is modelled by the simpy engine only"
    if options.engine not in ("auto",):
        return f"engine {options.engine} asked for"
    coll = form.collective
    if coll.kind is Kind.ALLTOALLV:
        return "all-to-allv is not translated"
    if topology.ranks != form.ranks:
        return f"topology {topology.name} has {topology.ranks} ranks, the schedule {form.ranks}"
    if not form.generators:
        return "no symmetry (a trivial group)"
    g = group(form.dims, form.generators)
    if g.order == 1:
        return "no symmetry (a trivial group)"
    gens = np.array(form.generators, dtype=np.int64)
    why = _links_invariant(topology, g, gens)
    if why is not None:
        return why
    p = form.ranks
    slow = np.zeros(p)
    for r, delay in options.faults.stragglers.items():
        slow[r] = float(delay)
    for gen in gens:
        if not np.array_equal(slow[g.move(np.arange(p), np.broadcast_to(gen, (p, len(gen))))], slow):
            return f"the stragglers are not invariant under translation {tuple(gen)}"
    cols = form.transfers(g.reps)
    src = cols.src.astype(np.int64)
    dst = cols.dst.astype(np.int64)
    if (g.shift_of[src] != 0).any():
        return "the partial schedule has transfers from ranks that are not representatives"
    k = len(g.reps)
    n = len(src)
    # Slots up to G: the destination's slot, moved back to its orbit's representative.
    dst_index = cols.dst_index.astype(np.int64).copy()
    h = g.shift_of[dst]
    moved = np.flatnonzero(h != 0)
    if len(moved):
        keys = h[moved] * len(BUFS) + cols.dst_buf[moved]
        for key in np.unique(keys):
            sel = moved[keys == key]
            e, b = divmod(int(key), len(BUFS))
            back = tuple(int(x) for x in -g.elements[e])
            cnt = cols.count[sel].astype(np.int64)
            first = np.cumsum(cnt) - cnt
            idx = np.repeat(dst_index[sel], cnt) + np.arange(int(cnt.sum())) - np.repeat(first, cnt)
            img = np.asarray(form.chunk_map(back, BUFS[b], idx), dtype=np.int64)
            if len(img) != len(idx):
                return f"the chunk map of {back} returned {len(img)} indices for {len(idx)}"
            head = img[first]
            if not np.array_equal(img, np.repeat(head, cnt) + (idx - np.repeat(dst_index[sel], cnt))):
                return f"translation {back} splits a transfer's chunks apart"
            dst_index[sel] = head
    q_coll = Collective(coll.kind, k, coll.chunks, root=None if coll.root is None else 0)
    q_cols = {"src": g.rep_of[src], "dst": g.rep_of[dst], "src_buf": cols.src_buf, "src_index": cols.src_index,
              "dst_buf": cols.dst_buf, "dst_index": dst_index, "count": cols.count, "op": cols.op,
              "step_offsets": cols.step_offsets}
    try:
        sched = Schedule.from_columns(q_coll, f"{form.name} (quotient)", q_cols, form.scratch_chunks)
    except Exception as e:  # a form whose chunk map leaves the buffer: not trusted
        return f"the quotient schedule is not valid: {e}"
    # Routes and link orbits.
    remote = src != dst
    pair_key = np.where(remote, src * p + dst, -1)
    keys, pair_of = np.unique(pair_key, return_inverse=True)
    pair_of = pair_of.reshape(-1)
    if len(keys) and keys[0] == -1:
        keys = keys[1:]
    else:
        pair_of = pair_of + 1
    trees: dict[int, Any] = {}
    link_orbit: dict[int, int] = {}
    caps: list[float] = []
    bws = topology.link_bandwidths()
    m = len(keys) + 1
    route_len = np.zeros(m, dtype=np.int64)
    pair_lat = np.zeros(m)
    flat: list[int] = []
    first_link = np.zeros(m, dtype=np.int64)
    last_link = np.zeros(m, dtype=np.int64)
    for i, key in enumerate(keys.tolist(), start=1):
        s, d = divmod(int(key), p)
        path = _route(topology, g, s, d, trees)
        if path is None:
            return f"the route {s} -> {d} is not the translate of its orbit's (a tie between equal routes)"
        lat = 0.0
        for a, b in itertools.pairwise(path):
            lat += topology.graph.edges[a, b]["latency"]
            ja = int(g.rep_of[a])
            back = -g.elements[g.shift_of[a]]
            cb = int(g.move(np.array([b]), back[None, :])[0])
            canon = topology.link_id(int(g.reps[ja]), cb)
            o = link_orbit.get(canon)
            if o is None:
                o = link_orbit[canon] = len(caps)
                caps.append(bws[canon])
            flat.append(o)
        route_len[i] = len(path) - 1
        pair_lat[i] = lat
        first_link[i] = flat[-int(route_len[i])]
        last_link[i] = flat[-1]
    plan = _QuotientPlan()
    plan.p, plan.n = k, n
    plan.src, plan.dst = sched.columns().src, sched.columns().dst
    plan.count, plan.red, plan.offsets = cols.count, cols.op == 1, cols.step_offsets
    plan.remote = remote
    plan.overhead = options.overhead
    plan.slow = slow[g.reps]
    plan.any_slow = bool(plan.slow.any())
    plan.reduce_bandwidth = options.reduce_bandwidth
    nl = len(caps)
    plan.nl = nl
    plan.caps = np.array(caps + [float(options.reduce_bandwidth or 1.0)] * k)
    plan.pair_of = pair_of.astype(np.int32)
    plan.pair_lat = pair_lat
    plan.route_ptr = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(route_len, out=plan.route_ptr[1:])
    plan.route_links = np.array(flat, dtype=np.int64)
    plan.route_len = route_len
    plan.pair_bw = np.full(m, math.inf)
    if flat:
        has = route_len > 0
        plan.pair_bw[has] = np.minimum.reduceat(plan.caps[plan.route_links], plan.route_ptr[:-1][has])
    plan.chunk = 0.0
    return Quotient(sched, plan, _ports(cols.step_offsets, remote, pair_of, first_link, last_link, src, dst, p),
                    g, n, n * g.order)


def _ports(offsets: np.ndarray, remote: np.ndarray, pair_of: np.ndarray, first: np.ndarray, last: np.ndarray,
           src: np.ndarray, dst: np.ndarray, p: int) -> Ports:
    """``sim.engine.ports.ports`` of the quotient: messages by (step, source, real destination), ports by
    link orbit."""
    n = len(remote)
    step_of = np.repeat(np.arange(len(offsets) - 1, dtype=np.int64), np.diff(offsets))
    rem = np.flatnonzero(remote)
    msg_of = np.full(n, -1, dtype=np.int64)
    pair = src[rem] * p + dst[rem]
    mkeys, m_inv = np.unique(step_of[rem] * (p * p) + pair, return_inverse=True)
    m_inv = m_inv.reshape(-1)
    nm = len(mkeys)
    msg_of[rem] = m_inv
    m_pair = np.zeros(nm, dtype=np.int64)
    m_pair[m_inv] = pair_of[rem]
    m_step = mkeys // (p * p)
    msg_ptr = np.zeros(nm + 1, dtype=np.int64)
    np.cumsum(np.bincount(m_inv, minlength=nm), out=msg_ptr[1:])
    msg_transfers = rem[np.argsort(m_inv, kind="stable")]
    return Ports(msg_of, msg_ptr, msg_transfers, m_step, _side(first[m_pair], m_step), _side(last[m_pair], m_step))


@dataclass(frozen=True, eq=False)
class SymmetricResult:
    """The outcome of a run by symmetry: the time and what ran, without per-transfer arrays.

    ``transfers`` counts the whole schedule's, ``representatives`` those simulated (one per orbit of
    ``group_order``). ``checked`` is False: the quotient does not check the postcondition (module docstring).
    """

    name: str
    collective: Collective
    topology: Topology
    mode: str
    size: float
    chunk_bytes: float
    time: float
    transfers: int
    representatives: int
    group_order: int
    events: int
    engine: str = "symmetric"
    checked: bool = False
    violations: tuple[Any, ...] = ()

    @property
    def ok(self) -> bool:
        """True: nothing was found wrong (the postcondition is not checked here, ``checked``)."""
        return not self.violations

    @property
    def algbw(self) -> float:
        return self.size / self.time if self.time > 0 else math.inf

    @property
    def busbw(self) -> float:
        return self.algbw * busbw_factor(self.collective.kind, self.collective.ranks)

    def to_dict(self) -> dict[str, Any]:
        def gb(x: float) -> float | None:
            return x / 1e9 if math.isfinite(x) else None

        return {"ok": self.ok, "time_s": self.time, "algbw_GBps": gb(self.algbw), "busbw_GBps": gb(self.busbw),
                "transfers": self.transfers, "events": self.events, "engine": self.engine,
                "representatives": self.representatives, "group_order": self.group_order,
                "postcondition_checked": self.checked}


def run_quotient(q: Quotient, chunk: float, options: EngineOptions) -> tuple[float, int]:
    """(the time, the events) of the quotient run with chunks of ``chunk`` bytes: the fast engine's closed
    form, else its event loop."""
    q.plan.chunk = chunk
    dataflow = options.mode == "dataflow"
    queues = q.ports if dataflow and options.in_flight else None
    got = _closed_form(q.schedule, q.plan, options.mode, None,
                       None if queues is None else StepGates(queues, options.in_flight))
    if got is None:
        gates = None if queues is None else PortArrays(queues, options.in_flight)
        run = _Fluid(q.schedule, q.plan, options.mode, gates)
        run.run(None)
        end, events = run.t_end, run.events
    else:
        end, events = got["end"], got["events"]
    if np.isnan(end).any():
        raise SimulationError(f"{q.schedule.name}: {int(np.isnan(end).sum())} representative transfer(s) never "
                              "finished (a deadlock)")
    return (float(end.max()) if len(end) else 0.0), int(events)


def by_symmetry(form: SymmetricForm, topology: Topology, size: float, options: EngineOptions
                ) -> SymmetricResult | str:
    """``form`` timed on ``topology`` (faults not yet applied) by symmetry, or why that does not apply."""
    if isinstance(size, bool) or not isinstance(size, int | float) or not 0 <= size < math.inf:
        raise SimulationError(f"size must be a finite number of bytes >= 0, got {size!r}")
    faulted = options.faults.apply(topology)
    q = quotient(form, faulted, options)
    if isinstance(q, str):
        return q
    chunk = reference.chunk_bytes(form.collective, float(size))
    time, events = run_quotient(q, chunk, options)
    return SymmetricResult(form.name, form.collective, faulted, options.mode, float(size), chunk,
                           time + (options.launch or 0.0), q.transfers, q.representatives, q.group.order, events)


@overload
def simulate(schedule: Schedule, topology: Topology, size: float, options: EngineOptions | None = None,
             **fields: Any) -> SimResult: ...


@overload
def simulate(schedule: SymmetricForm, topology: Topology, size: float, options: EngineOptions | None = None,
             **fields: Any) -> SimResult | SymmetricResult: ...


def simulate(schedule: Schedule | SymmetricForm, topology: Topology, size: float,
             options: EngineOptions | None = None, **fields: Any) -> SimResult | SymmetricResult:
    """``sim.engine.simulate``: ``sim.engine.reference.simulate`` of a schedule; a symmetric form
    (``algorithms.symmetric``, ``Algorithm.symmetric_form``) is timed by symmetry where that is exact (a
    ``SymmetricResult``, engine ``symmetric``), else built and simulated (a ``SimResult`` naming its engine)."""
    opts = EngineOptions.of(options, **fields)
    if isinstance(schedule, SymmetricForm):
        return simulate_form(schedule, topology, size, opts)
    return reference.simulate(schedule, topology, size, opts)


def simulate_form(form: SymmetricForm, topology: Topology, size: float,
                  options: EngineOptions) -> SimResult | SymmetricResult:
    """``form`` timed on ``topology``: by symmetry where ``quotient`` applies (a ``SymmetricResult``), else the
    explicit engine on the built schedule (its ``SimResult``, whose ``engine`` names the engine that ran)."""
    got = by_symmetry(form, topology, size, options)
    if isinstance(got, str):
        return reference.simulate(form.build(), topology, size, options)
    return got


def estimate_bytes(representatives: float) -> float:
    """Peak bytes of a quotient run of so many representative transfers (``QUOTIENT_TRANSFER_BYTES`` each)."""
    return representatives * QUOTIENT_TRANSFER_BYTES


def check_form(form: SymmetricForm, schedule: Schedule | None = None) -> list[str]:
    """What is wrong with ``form`` against the whole schedule (built unless given): per step, the translates
    of the partial schedule's transfers by every element of the group, chunk by chunk, must be the step's
    transfers, chunk by chunk, and name no ways (``Schedule.ways``). Empty when the form is right."""
    full = form.build() if schedule is None else schedule
    g = group(form.dims, form.generators)
    pc = form.transfers(g.reps)
    problems: list[str] = []
    if full.ways is not None:  # a form carries no ways: its quotient would route every transfer the default way
        problems.append("the whole schedule names ways (Schedule.ways), which a symmetric form does not carry")
    if len(pc.step_offsets) - 1 != full.num_steps:
        return [f"the partial schedule has {len(pc.step_offsets) - 1} steps, the whole {full.num_steps}"]
    if len(pc.src) * g.order != full.num_transfers:
        problems.append(f"{len(pc.src)} representatives x |G| = {g.order} is not the whole schedule's "
                        f"{full.num_transfers} transfers")

    def moves(cols: Any, lo: int, hi: int) -> np.ndarray:
        cnt = cols.count[lo:hi].astype(np.int64)
        first = np.cumsum(cnt) - cnt
        kk = np.arange(int(cnt.sum())) - np.repeat(first, cnt)
        return np.stack([np.repeat(cols.src[lo:hi], cnt), np.repeat(cols.dst[lo:hi], cnt),
                         np.repeat(cols.src_buf[lo:hi], cnt), np.repeat(cols.src_index[lo:hi], cnt) + kk,
                         np.repeat(cols.dst_buf[lo:hi], cnt), np.repeat(cols.dst_index[lo:hi], cnt) + kk,
                         np.repeat(cols.op[lo:hi], cnt)], axis=1).astype(np.int64)

    fc = full.columns()
    for s in range(full.num_steps):
        mine = moves(pc, int(pc.step_offsets[s]), int(pc.step_offsets[s + 1]))
        want = moves(fc, int(fc.step_offsets[s]), int(fc.step_offsets[s + 1]))
        images = []
        for e in g.elements:
            vec = np.broadcast_to(e, (len(mine), len(e)))
            img = mine.copy()
            img[:, 0] = g.move(mine[:, 0], vec)
            img[:, 1] = g.move(mine[:, 1], vec)
            tup = tuple(int(x) for x in e)
            for col, buf_col in ((3, 2), (5, 4)):
                for b in np.unique(mine[:, buf_col]):
                    sel = mine[:, buf_col] == b
                    img[sel, col] = form.chunk_map(tup, BUFS[int(b)], mine[sel, col])
            images.append(img)
        got = np.concatenate(images) if images else mine
        a = got[np.lexsort(got.T[::-1])]
        b = want[np.lexsort(want.T[::-1])]
        if a.shape != b.shape or not np.array_equal(a, b):
            problems.append(f"step {s}: the translates of the representatives are not the step's transfers")
            if len(problems) >= 5:
                break
    return problems
