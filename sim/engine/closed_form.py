"""Closed-form alpha-beta-gamma costs of the registered algorithms, beside the simulator.

Hockney's model as used by Thakur, Rabenseifner & Gropp 2005: a message of b
bytes costs α + bβ, and combining b bytes costs bγ. Each registered algorithm
carries its cost (``algorithms.registry.Cost``): steps on the critical path,
bytes on it, bytes reduced on it. ``predict`` evaluates one; ``predict_all``
lists every algorithm of a kind; ``compare`` puts a simulated time beside it.
On a contention-free network (every step's messages on disjoint links of
equal latency α and bandwidth 1/β) the simulator must agree to rounding.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass

from algorithms import registry
from algorithms.errors import RegistryError
from algorithms.ir import Kind
from sim.topology import Topology

__all__ = ["Prediction", "compare", "cost_failure", "predict", "predict_all", "relative_error", "route_alpha_beta"]


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
    alike); on others it is one sample, and the closed form is only a guide.
    """
    if topology.ranks < 2:
        return 0.0, 0.0
    path = topology.route(src, dst)
    alpha = sum(topology.latency(u, v) for u, v in itertools.pairwise(path))
    bw = min(topology.bandwidth(u, v) for u, v in itertools.pairwise(path))
    return alpha, 1.0 / bw
