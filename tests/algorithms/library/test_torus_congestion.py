"""The congestion of the multiport Swing and Rabenseifner all-reduces on a torus, simulated against the hand formula
of ``benchmarks/bench_scale.py`` (``congestion_by_hand``: De Sensi et al., NSDI 2024, the bandwidth term as the
message size times the most messages crossing one link, summed over the steps).

With no latency and no per-message overhead the simulated time is the bandwidth term alone, so it equals the hand
formula exactly, in lockstep and in dataflow: Swing and Rabenseifner as the paper counts them. Rabenseifner's
half-way steps load q/2 because its mirrored part names the other way round (``Schedule.ways``): the same schedule
without its ways sends both of a rank's parts to their common peer down one route and loads q there (the bench's
``one_route_a_pair``).
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

from algorithms import registry
from algorithms.ir import Schedule
from sim.engine import simulate
from sim.topology import from_spec

BANDWIDTH = 50e9


def _bench() -> ModuleType:
    path = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_scale.py"
    spec = importlib.util.spec_from_file_location("bench_scale", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_scale", module)
    spec.loader.exec_module(module)
    return module


BENCH = _bench()


def _simulated_factor(algorithm: str, dims: str, mode: str, *, ways: bool = True, engine: str = "auto") -> float:
    qs = [int(q) for q in dims.split("x")]
    p, d = math.prod(qs), len(qs)
    n = float(1 << 24)
    schedule = registry.get("allreduce", algorithm).build(p, dims=dims)
    if not ways:
        schedule = Schedule.from_columns(schedule.collective, schedule.name, schedule.columns(),
                                         schedule.scratch_chunks)
    topo = from_spec(f"torus:{dims}", bandwidth=BANDWIDTH, latency=0.0)
    time = simulate(schedule, topo, n, mode=mode, engine=engine).time
    return time / (2 * (p - 1) / p * n / (2 * d * BANDWIDTH))


@pytest.mark.parametrize("dims", ["4x4", "8x8", "4x4x4"])
@pytest.mark.parametrize("mode", ["lockstep", "dataflow"])
def test_swing_congestion_is_the_papers(dims: str, mode: str) -> None:
    want = BENCH.congestion_by_hand("swing_torus", dims)
    assert _simulated_factor("swing_torus", dims, mode) == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("dims", ["4x4", "8x8", "4x4x4"])
@pytest.mark.parametrize("mode", ["lockstep", "dataflow"])
@pytest.mark.parametrize("engine", ["fast", "simpy"])
def test_rabenseifner_congestion_is_the_papers(dims: str, mode: str, engine: str) -> None:
    got = _simulated_factor("rabenseifner_torus", dims, mode, engine=engine)
    assert got == pytest.approx(BENCH.congestion_by_hand("rabenseifner_torus", dims), rel=1e-9)


@pytest.mark.parametrize("dims", ["4x4", "8x8", "4x4x4"])
@pytest.mark.parametrize("mode", ["lockstep", "dataflow"])
def test_rabenseifner_without_its_ways_takes_one_route_a_pair(dims: str, mode: str) -> None:
    """Without the mirrored part's way both parts share one route at the half-way steps: load q, not q/2."""
    got = _simulated_factor("rabenseifner_torus", dims, mode, ways=False)
    assert got == pytest.approx(BENCH.congestion_by_hand("rabenseifner_torus", dims, one_route_a_pair=True), rel=1e-9)
    assert got > BENCH.congestion_by_hand("rabenseifner_torus", dims) * 1.1


def test_hand_formula_worked_values() -> None:
    """8x8 by hand: Swing (1/2 + 1/4 + 1/8 + 1/16 + 3/32 + 3/64)·64/63, Rabenseifner (1/2 + 1/4 + 2/8 + 2/16 + 4/32
    + 4/64)·64/63; and a broken formula (recursive doubling's loads for Swing) is told apart."""
    assert BENCH.congestion_by_hand("swing_torus", "8x8") == pytest.approx(1.078125 * 64 / 63)
    assert BENCH.congestion_by_hand("rabenseifner_torus", "8x8") == pytest.approx(1.3125 * 64 / 63)
    assert _simulated_factor("swing_torus", "8x8", "lockstep") != pytest.approx(
        BENCH.congestion_by_hand("rabenseifner_torus", "8x8"), rel=1e-3)
    with pytest.raises(ValueError, match="q\\^D"):
        BENCH.congestion_by_hand("swing_torus", "8x4")
