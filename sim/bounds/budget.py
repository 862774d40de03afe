"""The time budget of the cut bound (``sim.bounds.cuts``): estimated before any max-flow is solved.

The bound solves about one max-flow per rank (four for allreduce), each about ``MAXFLOW_SECONDS`` x nodes x
links, and one shortest-path tree per rank, after a walk of the p² rank pairs that finds the links no route
uses. A bound whose estimate is over the time budget (``COLLSCHED_TIME_BUDGET`` seconds when set, else
``TIME_BUDGET_S``) is refused with the estimate (``BoundError``), before that walk.
"""

from __future__ import annotations

import os

from algorithms.errors import CollschedError

__all__ = ["BoundError", "estimate_bound_seconds", "guard_bound", "time_budget"]

MAXFLOW_SECONDS = 1.6e-7
"""Seconds of one push-relabel max-flow (networkx) per node x link: measured 1.0e-7 on dgx-h100:16 (153 nodes,
528 links) and 1.6e-7 on uring:300, on this project's 2-core machine; the larger is taken."""
SHORTEST_PATH_SECONDS = 2e-6
"""Seconds of one Dijkstra tree per link (networkx), for the latency term."""
ROUTE_PAIR_SECONDS = 4e-6
"""Seconds per ordered rank pair to find the links that carry a route (``Topology.routed_links``): 36 s measured
for the 9 million pairs of uring:3000."""
TIME_BUDGET_S = 600.0
"""Seconds a bound may be estimated to take before it is refused (``COLLSCHED_TIME_BUDGET`` overrides)."""


class BoundError(CollschedError, ValueError):
    """A bound asked for a kind, root or size it cannot serve, or one over the time budget; the message names
    the field or gives the estimate."""


def time_budget() -> float:
    """Seconds a request may be estimated to take: ``COLLSCHED_TIME_BUDGET`` when set, else ``TIME_BUDGET_S``."""
    text = os.environ.get("COLLSCHED_TIME_BUDGET")
    if not text:
        return TIME_BUDGET_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise BoundError(f"COLLSCHED_TIME_BUDGET must be a number of seconds > 0, got {text!r}")
    return value


def estimate_bound_seconds(kind: str, ranks: int, nodes: int, links: int, *, idle_links: bool = False) -> float:
    """Seconds the cut bound of ``kind`` takes on a graph of ``nodes`` and ``links`` (module docstring);
    ``idle_links``: links on no route, so the bound runs twice (the routes' links, then every link)."""
    once = _max_flows(kind, ranks) * MAXFLOW_SECONDS * nodes * links + ranks * SHORTEST_PATH_SECONDS * (nodes + links)
    return ROUTE_PAIR_SECONDS * ranks * ranks + once * (2 if idle_links else 1)


def guard_bound(kind: str, ranks: int, nodes: int, links: int, *, idle_links: bool = False) -> None:
    """Refuse a cut bound estimated to take longer than ``time_budget()``, with the estimate."""
    seconds = estimate_bound_seconds(kind, ranks, nodes, links, idle_links=idle_links)
    budget = time_budget()
    if seconds > budget:
        raise BoundError(f"the {kind} bound on {ranks} ranks ({nodes} nodes, {links} links) would take about "
                            f"{seconds:.3g} s: about {_max_flows(kind, ranks)} max-flows of "
                            f"{MAXFLOW_SECONDS * nodes * links:.3g} s each, over the budget of {budget:.3g} s "
                            "(COLLSCHED_TIME_BUDGET overrides)")


def _max_flows(kind: str, ranks: int) -> int:
    """Max-flows the cut bound solves: one per rank, four for allreduce (two min cuts each way, two cut ratios)."""
    return {"allreduce": 4 * ranks}.get(kind, ranks)
