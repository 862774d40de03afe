"""Closed-form alpha-beta-gamma costs of the registered algorithms, beside the simulator.

Hockney's model as used by Thakur, Rabenseifner & Gropp 2005: a message of b
bytes costs α + bβ, and combining b bytes costs bγ. Each registered algorithm
carries its cost (``algorithms.registry.Cost``): steps on the critical path,
bytes on it, bytes reduced on it. ``predict`` evaluates one; ``predict_all``
lists every algorithm of a kind; ``compare`` puts a simulated time beside it.
On a contention-free network (every step's messages on disjoint links of
equal latency α and bandwidth 1/β) the simulator must agree to rounding:
``check_cost`` checks an algorithm's cost so, term by term against its schedules' transfers and in time
against the simulator on ``switch:p`` (``collsched verify --cost``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from algorithms import registry
from algorithms.errors import RegistryError
from algorithms.ir import Kind
from sim.topology import Topology

__all__ = ["CostCase", "CostCheck", "Prediction", "RouteTerms", "check_cost", "compare", "cost_failure", "predict",
           "predict_all", "relative_error", "route_alpha_beta", "schedule_alpha_beta"]


@dataclass(frozen=True)
class Prediction:
    """A closed-form time for one algorithm, with its terms."""

    kind: Kind
    algorithm: str
    ranks: int
    size: float
    steps: float
    bytes: float
    reduced: float
    time: float
    formula: str


def predict(kind: Kind | str, algorithm: str, p: int, n: float, *, alpha: float, beta: float,
            gamma: float = 0.0, launch: float = 0.0, params: Mapping[str, int] | None = None) -> Prediction:
    """The closed-form time of ``kind``/``algorithm`` for p ranks and n bytes (nccl-tests size):
    steps·α + bytes·β + reduced·γ, plus ``launch`` once (the engine's fixed cost per collective).

    To match the simulator's endpoint terms, pass α = route latency + ``overhead`` (each step's message pays
    both) and γ = 1 / ``reduce_bandwidth``; ``message_cpu`` has no closed form here.

    Raises ``RegistryError`` when the algorithm is unknown, cannot serve p,
    has no registered cost, or its cost raises (``cost_failure``).
    """
    alg = registry.get(kind, algorithm)
    refusal = alg.refusal(p, params)
    if refusal is not None:
        raise RegistryError(refusal)
    if alg.cost is None:
        raise RegistryError(f"{alg.kind}/{alg.name} has no closed-form cost")
    resolved = alg.resolve(params or {})
    c = alg.cost
    failure = cost_failure(alg, p, n, resolved)
    if failure is not None:
        raise RegistryError(failure)
    steps, nbytes, reduced = c.steps(p, n, resolved), c.bytes(p, n, resolved), c.reduced(p, n, resolved)
    return Prediction(alg.kind, alg.name, p, n, steps, nbytes, reduced,
                      launch + steps * alpha + nbytes * beta + reduced * gamma,
                      c.formula + (" + launch" if launch else ""))


def cost_failure(alg: registry.Algorithm, p: int, n: float, params: Mapping[str, int | str]) -> str | None:
    """Why ``alg``'s ``Cost`` cannot be evaluated at (p, n, params), naming the algorithm, its module and the
    function, or None when each function returns a finite number. ``params``: resolved (defaults filled in)."""
    if alg.cost is None:
        return None
    where = f"{alg.kind}/{alg.name} (registered in module {alg.module})"
    for name in registry.COST_FIELDS:
        fn = getattr(alg.cost, name)
        if fn is None:
            continue
        try:
            value = float(fn(p, n, params))
        except Exception as e:  # the user's own function: whatever it raises is reported, not a traceback
            return f"{where}: its Cost.{name} raises {type(e).__name__}: {e} (at p={p}, n={n:g})"
        if not math.isfinite(value):
            return f"{where}: its Cost.{name} returns {value} (at p={p}, n={n:g})"
    return None


def predict_all(kind: Kind | str, p: int, n: float, *, alpha: float, beta: float,
                gamma: float = 0.0) -> list[Prediction]:
    """Predictions of every algorithm of ``kind`` that serves p with default parameters and has a cost."""
    out = []
    for alg in registry.algorithms(kind):
        if alg.cost is None or alg.unsupported(p) is not None:
            continue
        out.append(predict(alg.kind, alg.name, p, n, alpha=alpha, beta=beta, gamma=gamma))
    return out


def relative_error(measured: float, predicted: float) -> float:
    """|measured - predicted| / |predicted| (0 when both are 0, inf when only predicted is)."""
    if predicted == 0:
        return 0.0 if measured == 0 else math.inf
    return abs(measured - predicted) / abs(predicted)


def compare(simulated: float, prediction: Prediction) -> str:
    """One line: simulated vs closed-form time and their ratio."""
    ratio = simulated / prediction.time if prediction.time > 0 else math.nan
    return (f"{prediction.kind}/{prediction.algorithm}: simulated {simulated:.6g} s, closed form "
            f"{prediction.time:.6g} s ({prediction.formula}), ratio {ratio:.4f}")


def route_alpha_beta(topology: Topology, src: int = 0, dst: int = 1) -> tuple[float, float]:
    """(α, β) of one route: its total latency and the inverse of its slowest link's bandwidth.

    A fair summary of a uniform topology (every route between neighbours
    alike); on others it is one sample, and the closed form is only a guide:
    ``schedule_alpha_beta`` takes the slowest route a schedule uses instead.
    """
    if topology.ranks < 2:
        return 0.0, 0.0
    path = topology.route(src, dst)
    alpha = sum(topology.latency(u, v) for u, v in itertools.pairwise(path))
    bw = min(topology.bandwidth(u, v) for u, v in itertools.pairwise(path))
    return alpha, 1.0 / bw


# -- check_cost: a Cost against the schedules it describes -----------------------------------------------------------

TERMS = ("steps", "bytes", "reduced", "sent_per_rank")
"""What a ``Cost`` states, in the order ``check_cost`` reports them."""


@dataclass(frozen=True)
class CostCase:
    """One world size and parameter set of ``check_cost``: the terms measured from the schedule's transfers and
    the ones the formula gives (bytes at the check's message size), and the lockstep time on ``switch:p``
    beside the closed form's at the same α, β (γ = 0). ``problems`` says what disagrees (empty: nothing)."""

    ranks: int
    params: dict[str, int | str]
    root: int | None
    measured: dict[str, float]
    formula: dict[str, float]
    simulated_s: float
    closed_form_s: float
    problems: tuple[str, ...]

    def where(self) -> str:
        """``p=4 chunks=2 root=1``: the case, as the report names it."""
        extra = "".join(f" {k}={v}" for k, v in self.params.items())
        return f"p={self.ranks}{extra}" + (f" root={self.root}" if self.root is not None else "")


@dataclass(frozen=True)
class CostCheck:
    """What ``check_cost`` found: ``ok`` when every case agrees and the cost could be evaluated."""

    kind: Kind
    algorithm: str
    module: str
    formula: str
    size: float
    """The message size n of every case, in bytes."""
    cases: tuple[CostCase, ...]
    skipped: tuple[int, ...] = ()
    """World sizes the algorithm cannot serve with the parameters given (its registry check refuses them)."""
    error: str | None = None
    """Why the cost could not be evaluated at all (it raises; ``cost_failure``), else None."""

    @property
    def ok(self) -> bool:
        return self.error is None and all(not c.problems for c in self.cases)

    @property
    def mismatches(self) -> list[str]:
        """One line per disagreement, ``p=4 chunks=1: bytes measured 1572864, formula 786432``."""
        return [f"{c.where()}: {problem}" for c in self.cases for problem in c.problems]

    def text(self, limit: int | None = 20) -> str:
        """The report: the algorithm, its module and formula, what was checked, then OK or the mismatches."""
        lines = [f"{self.kind}/{self.algorithm} (module {self.module}): Cost {self.formula}"]
        if self.error is not None:
            lines.append(f"  cannot evaluate: {self.error}")
            return "\n".join(lines)
        ranks = sorted({c.ranks for c in self.cases})
        span = f"p = {ranks[0]}..{ranks[-1]}" if ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 1 \
            else f"p = {', '.join(map(str, ranks))}" if ranks else "no world size"
        lines.append(f"  {len(self.cases)} case(s), {span}, n = {self.size:.10g} bytes: the terms measured from the "
                     "schedule's transfers (one send and one receive port per rank) and the lockstep time on "
                     "switch:p (α = 2 us, β = 1/10 GB/s, γ = 0) against the formula")
        if self.skipped:
            lines.append(f"  skipped p = {', '.join(map(str, self.skipped))} (the algorithm's check refuses them)")
        bad = self.mismatches
        lines += [f"  {m}" for m in bad[:limit]]
        if limit is not None and len(bad) > limit:
            lines.append(f"  ... and {len(bad) - limit} more")
        lines.append("  OK" if self.ok else f"  {len(bad)} mismatch(es)")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, object]:
        """``{"ok", "kind", "algorithm", "module", "formula", "size", "ranks", "cases", "skipped", "mismatches",
        "error"}``."""
        return {"ok": self.ok, "kind": self.kind.value, "algorithm": self.algorithm, "module": self.module,
                "formula": self.formula, "size": self.size, "ranks": sorted({c.ranks for c in self.cases}),
                "cases": len(self.cases), "skipped": list(self.skipped), "mismatches": self.mismatches,
                "error": self.error}

    def __str__(self) -> str:
        return self.text()


_CHECK_LATENCY, _CHECK_BANDWIDTH = 1e-6, 10e9  # switch:p's links in check_cost: α = 2 links' latency


def _terms_in_chunks(schedule: object) -> dict[str, int]:
    """Steps, bytes, reduced and sent_per_rank of a schedule in chunks, in ``Cost``'s model: a step costs α when
    it moves data between ranks; β on the most chunks one rank sends or receives in it; γ on the most one rank
    reduces in it; sent_per_rank: the most one rank sends in all."""
    import numpy as np

    from algorithms.ir import OPS, Op

    p, c = schedule.ranks, schedule.columns()  # type: ignore[attr-defined]
    steps = len(c.step_offsets) - 1
    if steps == 0:
        return {"steps": 0, "bytes": 0, "reduced": 0, "sent_per_rank": 0}
    step = np.repeat(np.arange(steps), np.diff(c.step_offsets))
    count = c.count.astype(np.int64)
    net = np.where(c.src != c.dst, count, 0)

    def per_step(rank: np.ndarray, weight: np.ndarray) -> np.ndarray:
        return np.bincount(step * p + rank, weights=weight, minlength=steps * p).reshape(steps, p).astype(np.int64)

    sent, received = per_step(c.src, net), per_step(c.dst, net)
    reduced = per_step(c.dst, np.where(c.op == OPS.index(Op.REDUCE), count, 0))
    return {"steps": int((sent.sum(axis=1) > 0).sum()), "bytes": int(np.maximum(sent, received).max(axis=1).sum()),
            "reduced": int(reduced.max(axis=1).sum()), "sent_per_rank": int(sent.sum(axis=0).max())}


def _agrees(measured: float, formula: float, bound: bool) -> bool:
    tol = 1e-9 * max(1.0, abs(formula), abs(measured))
    return measured <= formula + tol if bound else abs(measured - formula) <= tol


def check_cost(kind: Kind | str, name: str, *, ranks: Iterable[int] = range(1, 17),
               params: Mapping[str, int | str] | None = None, size: float = float(1 << 20),
               roots: Iterable[int] | None = None) -> CostCheck:
    """Check ``kind``/``name``'s closed-form ``Cost`` against the schedules it builds.

    For every world size of ``ranks`` the algorithm serves, every chunk count (``params["chunks"]`` if given,
    else 1 and 2) and, for rooted kinds, each root of ``roots`` (default: 0, p//2 and p-1), the schedule is
    built and checked twice: its steps, bytes, reduced bytes and bytes sent per rank, measured from its
    transfers in the ``Cost`` model (one send and one receive port per rank), must equal the formula's at
    n = ``size``; and simulated in lockstep on ``switch:p`` (every rank one link up and one down, 1 us and
    10 GB/s each: α = 2 us, β = 1 / 10 GB/s, reductions free), where the closed form holds, its time must equal
    the closed form's. Where the formula text says ``≤``, bytes, reduced and sent_per_rank are upper bounds
    (measured and simulated may be lower). Schedules with switch operations are refused (their model is the
    switch's: tests/algorithms/library/test_innetwork_costs.py).

    ``RegistryError`` when the algorithm is unknown or has no cost; a cost that raises is ``CostCheck.error``.

    >>> check_cost("allreduce", "ring", ranks=range(2, 6)).ok
    True
    """
    from algorithms.ir import ROOTED_KINDS
    from sim.engine.reference import chunk_bytes, simulate
    from sim.topology import single_switch

    alg = registry.get(kind, name)
    if alg.cost is None:
        raise RegistryError(f"{alg.kind}/{alg.name} has no closed-form cost")
    given = dict(params or {})
    declared = {p.name for p in alg.parameters}
    chunk_counts: tuple[int | None, ...] = ((given.pop("chunks"),) if "chunks" in given  # type: ignore[assignment]
                                           else (1, 2) if "chunks" in declared else (None,))
    bound = "≤" in alg.cost.formula
    cases: list[CostCase] = []
    skipped: list[int] = []
    for p in ranks:
        for k in chunk_counts:
            case_params: dict[str, int | str] = {**given, **({} if k is None else {"chunks": k})}
            if alg.unsupported(p, case_params) is not None:
                if p not in skipped:
                    skipped.append(p)
                continue
            resolved = alg.resolve(case_params)
            failure = cost_failure(alg, p, size, resolved)
            if failure is not None:
                return CostCheck(alg.kind, alg.name, alg.module, alg.cost.formula, size, tuple(cases), (), failure)
            rooted = alg.kind in ROOTED_KINDS
            for root in (sorted({r for r in (roots if roots is not None else (0, p // 2, p - 1)) if 0 <= r < p})
                         if rooted else [None]):
                schedule = alg.build(p, root=root, **case_params)
                if schedule.switch_ops:
                    raise RegistryError(f"{alg.kind}/{alg.name}: its schedules use switch operations, which "
                                        "check_cost does not model (the transfers alone are not its cost)")
                unit = chunk_bytes(schedule.collective, size)
                measured = {t: v * unit if t != "steps" else float(v) for t, v in _terms_in_chunks(schedule).items()}
                fns = {t: getattr(alg.cost, t) for t in TERMS}
                formula = {t: float(fn(p, size, resolved)) for t, fn in fns.items() if fn is not None}
                problems = [f"{t} measured {measured[t]:.10g}, formula {'≤ ' if bound and t != 'steps' else ''}"
                            f"{formula[t]:.10g}" for t in formula
                            if not _agrees(measured[t], formula[t], bound and t != "steps")]
                run = simulate(schedule, single_switch(p, bandwidth=_CHECK_BANDWIDTH, latency=_CHECK_LATENCY),
                               size, mode="lockstep")
                closed = formula["steps"] * 2 * _CHECK_LATENCY + formula["bytes"] / _CHECK_BANDWIDTH
                if not run.ok:
                    problems.append("the simulated run breaks the postcondition (collsched verify says where)")
                if not _agrees(run.time, closed, bound):
                    ratio = f"{run.time / closed:.4f}" if closed > 0 else "-"
                    problems.append(f"simulated {run.time:.6g} s on switch:{p}, closed form {closed:.6g} s "
                                    f"(simulated / closed form {ratio})")
                cases.append(CostCase(p, case_params, root, measured, formula, run.time, closed, tuple(problems)))
    return CostCheck(alg.kind, alg.name, alg.module, alg.cost.formula, size, tuple(cases), tuple(skipped))


# -- the α and β of a closed form on a network whose routes differ ---------------------------------------------------


@dataclass(frozen=True)
class RouteTerms:
    """The α and β a closed form takes for one schedule on one topology: those of the slowest route the
    schedule uses (the largest latency, the narrowest bottleneck; ``alpha_route``, ``beta_route``), with the
    fastest beside them. ``uniform`` when every route it uses has the same α and β: there the closed form is
    the network's; elsewhere it charges every step the slowest route, an estimate."""

    alpha: float
    beta: float
    alpha_route: tuple[int, int]
    beta_route: tuple[int, int]
    min_alpha: float
    min_beta: float
    routes: int
    """How many (src, dst) routes the schedule's transfers use."""

    @property
    def uniform(self) -> bool:
        return math.isclose(self.alpha, self.min_alpha, rel_tol=1e-9, abs_tol=1e-15) and \
            math.isclose(self.beta, self.min_beta, rel_tol=1e-9, abs_tol=1e-30)


def schedule_alpha_beta(schedule: object, topology: Topology) -> RouteTerms:
    """``RouteTerms`` over the routes of every (src, dst) pair that ``schedule``'s transfers connect on
    ``topology``; a schedule without one (a single rank, switch operations only) gets route 0 -> 1's."""
    import numpy as np

    p = topology.ranks
    c = schedule.columns()  # type: ignore[attr-defined]
    remote = c.src != c.dst
    keys = np.unique(c.src[remote].astype(np.int64) * p + c.dst[remote]).tolist() if p > 1 else []
    pairs = [(k // p, k % p) for k in keys] or ([(0, 1)] if p > 1 else [])
    if not pairs:
        return RouteTerms(0.0, 0.0, (0, 0), (0, 0), 0.0, 0.0, 0)
    routes = topology.route_links_many(pairs)
    bandwidths = topology.link_bandwidths()
    alpha = {pair: float(routes[pair][1]) for pair in pairs}
    beta = {pair: 1.0 / min(bandwidths[i] for i in routes[pair][0]) for pair in pairs}
    slow_a = max(pairs, key=lambda q: (alpha[q], -q[0], -q[1]))  # the first of the slowest, in rank order
    slow_b = max(pairs, key=lambda q: (beta[q], -q[0], -q[1]))
    return RouteTerms(alpha[slow_a], beta[slow_b], slow_a, slow_b, min(alpha.values()), min(beta.values()),
                      len(pairs))
