"""sim.machine.calibration's collective fit: what it does when the measurements cannot tell γ."""

from __future__ import annotations

import math

from sim.machine.calibration import fit_collectives


def _cases(time_s: float) -> list[dict[str, object]]:
    return [{"collective": "allreduce", "algorithm": "ring", "chunks": 1, "size": 1 << 20, "time_s": time_s}]


def test_collectives_faster_than_free_reductions_keep_the_measured_rate() -> None:
    # 1 us for a 1 MiB all-reduce over a 1 GB/s link is faster than any reduction rate explains (the wire
    # alone takes 1 ms): the fit cannot tell γ, so the micro-benchmark's 5 GB/s stands instead of "free".
    fit = fit_collectives(_cases(1e-6), 2, alpha=1e-6, bw=1e9, host_bw=math.inf, reduce_bw=5e9, launch=0.0,
                          message_cpu=0.0)
    assert fit["reduce_bandwidth_Bps"] == 5e9


def test_slow_reductions_are_fitted_below_the_micro_benchmark() -> None:
    # A ring all-reduce of 1 MiB on 2 ranks moves 0.5 MiB each way and reduces 0.5 MiB: at 1 GB/s the wire
    # takes ~0.52 ms; measured 2.62 ms leaves ~2.1 ms of reduction, i.e. ~0.25 GB/s, well under 5 GB/s.
    fit = fit_collectives(_cases(2.62e-3), 2, alpha=1e-6, bw=1e9, host_bw=math.inf, reduce_bw=5e9, launch=0.0,
                          message_cpu=0.0)
    assert 0.1e9 < fit["reduce_bandwidth_Bps"] < 1e9
