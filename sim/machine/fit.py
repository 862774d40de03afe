"""Curve fits for calibration (numpy only): α-β lines by least squares on relative error, robust to
outliers, two segments split at a knee, and a one-dimensional search over a positive parameter.

``sim.machine.calibration`` fits a machine model with them from ``collsched calibrate``'s measurements
(docs/design.md, "Machine model and calibration"). This module imports no torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from algorithms.errors import CollschedError

__all__ = ["CalibrationError", "Fit", "Floats", "fit_alpha_beta", "fit_knee", "fit_linear", "fit_robust",
           "search_log"]


class CalibrationError(CollschedError, ValueError):
    """Calibration, validation or tuning options that cannot work; the message names the option or file."""


Floats = Sequence[float] | np.ndarray
"""Measurements: a list of floats or a numpy array."""


class Fit(dict[str, Any]):
    """A fit's parameters and residual as a JSON-ready dict."""


def fit_linear(x: Floats, y: Floats, *, weights: Floats | None = None,
               ) -> tuple[float, float, float]:
    """Least squares ``y ≈ a + b·x`` with a, b >= 0. ``weights`` default to 1/y, so that each point's
    relative error counts the same. Returns (a, b, rms of the weighted residuals: the rms relative error
    with the default weights)."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(xs) < 2 or len(xs) != len(ys) or not np.all(np.isfinite(ys)):
        raise CalibrationError(f"a fit needs at least 2 finite measurements, got {len(ys)}")
    if weights is None:
        if not np.all(ys > 0):
            raise CalibrationError("a relative fit needs positive measurements")
        w = 1.0 / ys
    else:
        w = np.asarray(weights, dtype=float)

    def sse(ab: tuple[float, float]) -> float:
        return float(np.sum(((ab[0] + ab[1] * xs - ys) * w) ** 2))

    a_mat = np.stack([np.ones_like(xs), xs], axis=1) * w[:, None]
    sol, *_ = np.linalg.lstsq(a_mat, ys * w, rcond=None)
    a, b = float(sol[0]), float(sol[1])
    if a < 0 or b < 0:  # the optimum is outside a, b >= 0: the best fit lies on an edge (a = 0 or b = 0)
        ww = w * w
        b0 = max(float(np.sum(ww * xs * ys) / np.sum(ww * xs * xs)), 0.0) if np.any(xs != 0) else 0.0
        a0 = max(float(np.sum(ww * ys) / np.sum(ww)), 0.0)
        a, b = min([(0.0, b0), (a0, 0.0)], key=sse)
    return a, b, math.sqrt(sse((a, b)) / len(xs))


def fit_robust(x: Floats, y: Floats, *, weights: Floats | None = None,
               ) -> tuple[float, float, float, list[int]]:
    """``fit_linear``, then drop the worst point while its weighted residual is over 20% and over 3x the
    median one (at most a third of the points: load from elsewhere makes outliers, not trends), and refit.
    Returns (a, b, rms over the kept points, indices dropped)."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    w = (1.0 / ys) if weights is None else np.asarray(weights, dtype=float)
    keep = list(range(len(xs)))
    dropped: list[int] = []
    while True:
        a, b, rms = fit_linear(xs[keep], ys[keep], weights=w[keep])
        if len(dropped) >= len(xs) // 3 or len(keep) <= 3:
            return a, b, rms, dropped
        res = np.abs((a + b * xs[keep] - ys[keep]) * w[keep])
        worst = int(np.argmax(res))
        if res[worst] <= max(0.2, 3 * float(np.median(res))):
            return a, b, rms, dropped
        dropped.append(keep.pop(worst))


def fit_alpha_beta(sizes: Floats, times: Floats) -> Fit:
    """``t = α + b/B`` over the sizes (robust, relative): α (s), B (bytes/s), rms and max relative residual
    over the kept sizes, and the sizes dropped as outliers."""
    a, b, rms, dropped = fit_robust(sizes, times)
    xs, ys = np.asarray(sizes, dtype=float), np.asarray(times, dtype=float)
    keep = [i for i in range(len(xs)) if i not in dropped]
    worst = float(np.max(np.abs(a + b * xs[keep] - ys[keep]) / ys[keep]))
    return Fit(alpha_s=a, bandwidth_Bps=(1.0 / b if b > 0 else math.inf), rms_rel=rms, max_rel=worst,
               dropped_sizes=[float(xs[i]) for i in sorted(dropped)])


def fit_bandwidth(sizes: Floats, times: Floats) -> Fit:
    """``t = b/B`` through the origin (relative least squares: B = Σ(x/t)² / Σ(x/t)): for a cost that has no
    fixed part of its own at the sizes measured, where an α-β line through two large sizes would turn the
    curve's bend into an intercept (at 4 ranks a 25 ms "α" for copying 4 KiB). α is 0; nothing is dropped."""
    xs, ys = np.asarray(sizes, dtype=float), np.asarray(times, dtype=float)
    if len(xs) < 1 or len(xs) != len(ys) or not np.all(ys > 0) or not np.all(xs > 0):
        raise CalibrationError(f"a bandwidth fit needs positive sizes and times, got {len(ys)} measurement(s)")
    r = xs / ys
    bw = float(np.sum(r ** 2) / np.sum(r))
    rel = xs / bw / ys - 1
    return Fit(alpha_s=0.0, bandwidth_Bps=bw, rms_rel=float(np.sqrt(np.mean(rel ** 2))),
               max_rel=float(np.max(np.abs(rel))), dropped_sizes=[])


def fit_knee(sizes: Floats, times: Floats) -> Fit:
    """Two α-β segments split at the knee (the split with the smallest total squared relative residual;
    each segment has at least 2 sizes). ``knee_bytes`` is the first size of the upper segment."""
    order = np.argsort(sizes)
    xs, ys = np.asarray(sizes, dtype=float)[order], np.asarray(times, dtype=float)[order]
    best: tuple[float, int] | None = None
    for k in range(2, len(xs) - 1):
        lo, hi = fit_linear(xs[:k], ys[:k]), fit_linear(xs[k:], ys[k:])
        sse = lo[2] ** 2 * k + hi[2] ** 2 * (len(xs) - k)
        if best is None or sse < best[0]:
            best = (sse, k)
    if best is None:
        raise CalibrationError(f"a knee needs at least 4 sizes, got {len(xs)}")
    k = best[1]
    below, above = fit_alpha_beta(xs[:k], ys[:k]), fit_alpha_beta(xs[k:], ys[k:])
    return Fit(knee_bytes=float(xs[k]), below=below, above=above, rms_rel=math.sqrt(best[0] / len(xs)))


def search_log(f: Callable[[float], float], lo: float, hi: float, points: int = 60) -> float:
    """The x in [lo, hi] (or inf) with the least f(x): a geometric grid, then golden-section search in
    log x between the best point's neighbours."""
    grid = list(np.geomspace(lo, hi, points))
    vals = [f(x) for x in grid]
    k = int(np.argmin(vals))
    if f(math.inf) < vals[k]:
        return math.inf
    a, b = math.log(grid[max(k - 1, 0)]), math.log(grid[min(k + 1, points - 1)])
    ratio = (math.sqrt(5) - 1) / 2
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = f(math.exp(c)), f(math.exp(d))
    for _ in range(25):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = f(math.exp(c))
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = f(math.exp(d))
    best = min((fc, math.exp(c)), (fd, math.exp(d)), (vals[k], grid[k]))
    return float(best[1])

