"""Max-min fair bandwidth sharing by progressive filling, kept up to date as flows come and go.

The model (SimGrid's flow-level model, the one TCP, InfiniBand and NVLink
approximate): every flow crosses a set of links, each link has a capacity,
and the rates are the max-min fair allocation. Progressive filling computes
it: raise every unfrozen flow's rate together; when a link saturates (its
capacity is used up), freeze the flows through it at the rate reached; go on
with the others until every flow is frozen. A flow bottlenecked on a slow link
therefore leaves the rest of a shared fast link to the flows that can use it,
where the older "min over links of capacity / flows" rule left it idle.

``FairShare`` keeps the allocation incrementally: ``add`` and ``remove`` mark
the links whose flow set changed, and ``settle`` refills only the connected
component (flows and links reachable through shared links) of those links;
flows elsewhere keep their rates, which max-min guarantees are unchanged.
``max_min_rates`` is the same computation for one set of flows at once.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping, Sequence

from algorithms.errors import CollschedError

__all__ = ["FairShare", "FairShareError", "max_min_rates"]


class FairShareError(CollschedError, ValueError):
    """A bad capacity, link id or flow id; the message names it."""


def _check_capacities(capacities: Sequence[float]) -> list[float]:
    caps = [float(c) for c in capacities]
    for i, c in enumerate(caps):
        if not 0 < c < math.inf:
            raise FairShareError(f"link {i}: capacity must be a positive finite number, got {capacities[i]!r}")
    return caps


def _fill(flows: Iterable[int], routes: Mapping[int, Sequence[int]] | Sequence[Sequence[int]],
          caps: Sequence[float], out: dict[int, float]) -> None:
    """Progressive filling of ``flows`` (each over ``routes[f]``) into ``out``; a flow with no links gets inf.

    Links are frozen in order of the rate at which they saturate (a heap of
    capacity left / unfrozen flows, refreshed lazily when a link's numbers change).
    """
    left: dict[int, float] = {}
    count: dict[int, int] = {}
    on: dict[int, list[int]] = {}
    for f in flows:
        links = routes[f]
        if not links:
            out[f] = math.inf
            continue
        for lk in links:
            if lk in count:
                count[lk] += 1
                on[lk].append(f)
            else:
                count[lk] = 1
                left[lk] = caps[lk]
                on[lk] = [f]
    heap = [(left[lk] / n, lk) for lk, n in count.items()]
    heapq.heapify(heap)
    frozen: set[int] = set()
    while heap:
        share, lk = heapq.heappop(heap)
        n = count[lk]
        if n == 0 or share != left[lk] / n:
            continue  # stale entry: the link's numbers changed since it was pushed
        # Every link that saturates at exactly this share saturates now, together: freezing them one by one
        # would shift the others' shares by rounding and scatter equal flows' rates (and so their end times).
        full = [lk]
        while heap and heap[0][0] == share:
            _s, other = heapq.heappop(heap)
            if count[other] and left[other] / count[other] == share:
                full.append(other)
        newly: list[int] = []
        for lk in full:
            for f in on[lk]:
                if f not in frozen:
                    frozen.add(f)
                    out[f] = share
                    newly.append(f)
        for lk in full:
            count[lk] = 0
        # The frozen flows leave every other link they cross.
        touched: set[int] = set()
        for f in newly:
            for other in routes[f]:
                if count[other]:
                    count[other] -= 1
                    rest = left[other] - share
                    left[other] = rest if rest > 0 else 0.0
                    touched.add(other)
        for other in touched:
            if count[other]:
                heapq.heappush(heap, (left[other] / count[other], other))


def max_min_rates(routes: Sequence[Sequence[int]], capacities: Sequence[float]) -> list[float]:
    """The max-min fair rate of every flow; flow i crosses links ``routes[i]`` (ids into ``capacities``).

    A flow that crosses no link is unconstrained: its rate is ``inf``. A link a
    flow lists twice counts once.
    """
    caps = _check_capacities(capacities)
    clean = [tuple(dict.fromkeys(r)) for r in routes]
    for i, r in enumerate(clean):
        for lk in r:
            if isinstance(lk, bool) or not isinstance(lk, int) or not 0 <= lk < len(caps):
                raise FairShareError(f"flow {i}: link {lk!r} out of range 0..{len(caps) - 1}")
    out: dict[int, float] = {}
    _fill(range(len(clean)), clean, caps, out)
    return [out[i] for i in range(len(clean))]


class FairShare:
    """Max-min fair rates of a changing set of flows over links of fixed capacities.

    ``add(f, links)`` and ``remove(f)`` change the flow set; ``settle()``
    recomputes the rates of the flows in the connected component of the
    changed links and returns those whose rate changed. ``rate(f)`` reads one.
    """

    def __init__(self, capacities: Sequence[float]) -> None:
        self.capacities = _check_capacities(capacities)
        self.routes: dict[int, tuple[int, ...]] = {}
        self.rates: dict[int, float] = {}
        self.flows_on: list[set[int]] = [set() for _ in self.capacities]
        self.dirty: set[int] = set()
        self._new: set[int] = set()

    def __len__(self) -> int:
        return len(self.routes)

    def __contains__(self, flow: object) -> bool:
        return flow in self.routes

    def add(self, flow: int, links: Sequence[int]) -> None:
        """Start ``flow`` over ``links`` (link ids; a repeated link counts once)."""
        if flow in self.routes:
            raise FairShareError(f"flow {flow!r} is already active")
        route = tuple(dict.fromkeys(links))
        n = len(self.capacities)
        for lk in route:
            if isinstance(lk, bool) or not isinstance(lk, int) or not 0 <= lk < n:
                raise FairShareError(f"flow {flow!r}: link {lk!r} out of range 0..{n - 1}")
        self.routes[flow] = route
        self.rates[flow] = 0.0
        self._new.add(flow)
        for lk in route:
            self.flows_on[lk].add(flow)
        self.dirty.update(route)

    def remove(self, flow: int) -> None:
        """End ``flow``; the flows that shared its links get its bandwidth at the next ``settle``."""
        route = self.routes.pop(flow, None)
        if route is None:
            raise FairShareError(f"flow {flow!r} is not active")
        del self.rates[flow]
        self._new.discard(flow)
        for lk in route:
            self.flows_on[lk].discard(flow)
        self.dirty.update(route)

    def rate(self, flow: int) -> float:
        """The flow's rate as of the last ``settle`` (0 for a flow added since)."""
        try:
            return self.rates[flow]
        except KeyError:
            raise FairShareError(f"flow {flow!r} is not active") from None

    def component(self, links: Iterable[int]) -> set[int]:
        """Every active flow connected to ``links`` through shared links."""
        flows: set[int] = set()
        seen = set(links)
        todo = list(seen)
        flows_on, routes = self.flows_on, self.routes
        while todo:
            lk = todo.pop()
            for f in flows_on[lk]:
                if f in flows:
                    continue
                flows.add(f)
                for other in routes[f]:
                    if other not in seen:
                        seen.add(other)
                        todo.append(other)
        return flows

    def settle(self) -> dict[int, float]:
        """Refill the component of the changed links; the flows whose rate changed -> their new rate."""
        flows = self.component(self.dirty)
        flows.update(f for f in self._new if not self.routes[f])  # link-less flows touch no link
        self.dirty.clear()
        self._new.clear()
        fresh: dict[int, float] = {}
        _fill(flows, self.routes, self.capacities, fresh)
        rates = self.rates
        changed = {f: r for f, r in fresh.items() if rates[f] != r}
        rates.update(changed)
        return changed
