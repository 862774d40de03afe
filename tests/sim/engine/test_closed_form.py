"""Closed-form helpers: predictions from the registry's costs, errors, one route's α and β."""

from __future__ import annotations

import math

import pytest

from algorithms import registry
from algorithms.errors import RegistryError
from sim import topology as T
from sim.engine.closed_form import compare, predict, predict_all, relative_error, route_alpha_beta


def test_predict_ring_allreduce_by_hand() -> None:
    p, n, a, b, g = 8, 2**20, 1e-6, 1 / 50e9, 1 / 100e9
    pr = predict("allreduce", "ring", p, n, alpha=a, beta=b, gamma=g)
    assert (pr.steps, pr.bytes, pr.reduced) == (14, 14 * n / 8, 7 * n / 8)
    assert pr.time == pytest.approx(14 * a + 14 * n / 8 * b + 7 * n / 8 * g, rel=1e-12)


def test_predict_all_lists_the_kind() -> None:
    names = {x.algorithm for x in predict_all("allreduce", 8, 1024.0, alpha=1e-6, beta=1e-9)}
    want = {a.name for a in registry.algorithms("allreduce") if a.cost is not None and a.unsupported(8) is None}
    assert names == want and "ring" in names


def test_predict_errors() -> None:
    with pytest.raises(RegistryError, match="unknown algorithm"):
        predict("allreduce", "nope", 4, 1.0, alpha=0, beta=0)


def test_relative_error_and_compare() -> None:
    assert relative_error(1.0, 1.0) == 0 and relative_error(0.0, 0.0) == 0
    assert math.isinf(relative_error(1.0, 0.0))
    assert relative_error(1.1, 1.0) == pytest.approx(0.1)
    pr = predict("broadcast", "binomial", 4, 100.0, alpha=1.0, beta=0.01)
    assert "ratio 1.0000" in compare(pr.time, pr)


def test_route_alpha_beta() -> None:
    assert route_alpha_beta(T.single_switch(4, bandwidth=5.0, latency=2.0)) == (4.0, 1 / 5.0)
    assert route_alpha_beta(T.ring(1)) == (0.0, 0.0)
    alpha, beta = route_alpha_beta(T.dgx_h100(2), 0, 8)
    # dgx-h100 carries NCCL's Simple figures: 14 us a network step (tuning.cc, NCCL 2.2x), 0.94 x 50 GB/s per NIC
    assert alpha == pytest.approx(14e-6) and beta == pytest.approx(1 / (0.94 * T.NIC_BANDWIDTH))
