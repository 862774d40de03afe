"""collsched calibrate / validate / tune (runners.commands.calibrate; the fits, predictions and tuning in sim.machine).

The fits are checked on synthetic measurements made from hand-chosen parameters (plus noise and outliers)
with hand-written closed forms; tune's file is loaded by the policy and its choice checked against the
closed form; the commands run end to end on 2 gloo ranks at tiny sizes (slow, multiprocess)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from algorithms import registry
from algorithms.ir import Kind
from runners.backend.policy import Choice, Policy
from runners.commands import calibrate as C
from sim.machine import model as M
from sim.machine.calibration import calibration_report, fit_host_cap, fit_machine
from sim.machine.fit import CalibrationError, fit_alpha_beta, fit_bandwidth, fit_knee, fit_linear
from sim.machine.predict import algorithms_for, copy_seconds, load_machine, predict, validation_stats
from sim.machine.tune import tune

KIB, MIB = 1024, 1 << 20
SIZES = [8, KIB, 4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB, MIB, 4 * MIB, 16 * MIB]


def _noisy(values: list[float], seed: int, spread: float = 0.03) -> list[float]:
    rng = np.random.default_rng(seed)
    return [v * (1 + spread * float(rng.uniform(-1, 1))) for v in values]


# -- fits -------------------------------------------------------------------------------------------------------


def test_alpha_beta_fit_recovers_known_parameters_despite_outliers() -> None:
    alpha, bw = 50e-6, 3e9
    times = _noisy([alpha + s / bw for s in SIZES], seed=1)
    times[2] *= 4.0  # a burst of load from elsewhere
    fit = fit_alpha_beta(SIZES, times)
    assert fit["alpha_s"] == pytest.approx(alpha, rel=0.05)
    assert fit["bandwidth_Bps"] == pytest.approx(bw, rel=0.05)
    assert fit["dropped_sizes"] == [4 * KIB] and fit["rms_rel"] < 0.05
    with pytest.raises(CalibrationError):
        fit_alpha_beta([1.0], [1.0])


def test_the_copy_fit_goes_through_the_origin() -> None:
    # The 4-rank calibration of 2026-12-01 measured the runner's input copy at 157.0 and 288.5 ms for 64 and
    # 128 MiB: an α-β line through them says α = 25.4 ms, which priced a 4 KiB reduce-scatter's copy at 25 ms.
    sizes, times = [64 * 2**20, 128 * 2**20], [0.1569509, 0.2885211]
    assert fit_alpha_beta(sizes, times)["alpha_s"] > 0.02
    fit = fit_bandwidth(sizes, times)
    # By hand: r = x/t is 427.6 and 465.2 MB/s; B = Σr² / Σr = 447.2 MB/s.
    r = [x / t for x, t in zip(sizes, times, strict=True)]
    assert fit["alpha_s"] == 0.0 and fit["bandwidth_Bps"] == pytest.approx(sum(v * v for v in r) / sum(r))
    assert fit["bandwidth_Bps"] == pytest.approx(447.2e6, rel=1e-3)
    assert fit["max_rel"] == pytest.approx(0.0438, abs=1e-3)
    assert fit_bandwidth([1e6, 2e6, 4e6], [1e-3, 2e-3, 4e-3])["bandwidth_Bps"] == pytest.approx(1e9)  # exact data
    with pytest.raises(CalibrationError, match="positive sizes and times"):
        fit_bandwidth([1e6], [0.0])


def test_linear_fit_stays_non_negative() -> None:
    # Times that fall with size would give a negative slope: the fit keeps b >= 0 (a constant).
    a, b, _ = fit_linear([1.0, 2.0, 3.0], [3.0, 2.0, 1.0])
    assert b == 0.0 and a > 0


def test_knee_fit_finds_the_protocol_switch() -> None:
    below = [20e-6 + s / 8e9 for s in SIZES if s < MIB]
    above = [200e-6 + s / 2e9 for s in SIZES if s >= MIB]
    fit = fit_knee(SIZES, _noisy(below + above, seed=2, spread=0.01))
    assert fit["knee_bytes"] == MIB
    assert fit["below"]["alpha_s"] == pytest.approx(20e-6, rel=0.05)
    assert fit["above"]["bandwidth_Bps"] == pytest.approx(2e9, rel=0.05)


def _record(p: int, alpha: float, bw: float, cap: float, gamma: float, launch: float, cpu: float) -> dict:
    """A calibration record as measure() returns it, made from hand-chosen parameters.

    Flow patterns by hand (equal sharing, FLOW bytes per flow): k flows out of one rank share its link, and
    n flows in all share the host link."""
    flow = 8 * MIB
    pats = {"one": [(0, 1)], "exchange": [(0, 1), (1, 0)]}
    by_hand = {"one": alpha + flow / min(bw, cap), "exchange": alpha + flow / min(bw, cap / 2)}
    if p > 2:
        pats |= {"out": [(0, r) for r in range(1, p)], "in": [(r, 0) for r in range(1, p)],
                 "shift": [(r, (r + 1) % p) for r in range(p)]}
        by_hand |= {"out": alpha + flow / min(bw / (p - 1), cap / (p - 1)),
                    "in": alpha + flow / min(bw / (p - 1), cap / (p - 1)),
                    "shift": alpha + flow / min(bw, cap / p)}
    if p >= 4:
        pats["pairs"] = [(r, r ^ 1) for r in range(p)]
        by_hand["pairs"] = alpha + flow / min(bw, cap / p)
    rsizes = [64 * KIB, MIB, 8 * MIB]
    reduce_times = {"alone": [2e-6 + s / (2 * gamma) for s in rsizes], "together": [2e-6 + s / gamma for s in rsizes]}
    pairs = [f"{i}-{j}" for i in range(p) for j in range(i + 1, p)]
    rec: dict[str, Any] = {"ranks": p, "p2p_sizes": SIZES, "flow_bytes": flow, "reduce_sizes": rsizes, "seconds": 1.0,
           "p2p": {pair: _noisy([alpha + s / bw for s in SIZES], seed=i) for i, pair in enumerate(pairs)},
           "flows": by_hand, "patterns": pats, "reduce": {"float32": reduce_times, "int64": reduce_times}}
    # The runner's runs: what the engine gives with these figures (its launch and message_cpu terms are held
    # to closed forms in tests/sim/machine/test_machine.py).
    topo = M.host(p, bandwidth=bw, latency=alpha, host_bandwidth=cap if math.isfinite(cap) else None)
    rec["runner"] = []
    for kind, name, chunks in C.RUNNER_CASES:
        s = registry.build(kind, name, p, root=0 if kind == "broadcast" else None, chunks=chunks)
        for size in C.RUNNER_SIZES:
            from sim.engine.reference import simulate
            from sim.machine.model import RUNNER_IN_FLIGHT  # the runner's send order, as the fit assumes

            t = simulate(s, topo, size, reduce_bandwidth=gamma, launch=launch, message_cpu=cpu,
                         in_flight=RUNNER_IN_FLIGHT).time
            rec["runner"].append({"collective": kind, "algorithm": name, "chunks": chunks, "size": size,
                                  "time_s": t * (1.01 if len(rec["runner"]) % 2 else 0.99)})
    rec["copy_sizes"] = list(C.COPY_SIZES)
    rec["copies"] = [COPY_ALPHA + size / COPY_BW for size in C.COPY_SIZES]
    rec["collectives"] = _collectives(p, alpha, bw, cap, gamma, launch, cpu)
    return rec


COPY_ALPHA, COPY_BW = 20e-6, 5e9
"""The runner's buffer copy in the hand-made records: t = α + bytes/B."""


def _collectives(p: int, alpha: float, bw: float, cap: float, gamma: float, launch: float,
                 cpu: float) -> list[dict[str, Any]]:
    """Large runner collectives as measure() records them, timed by hand from the figures: t = launch + the
    critical path's messages (each a CPU cost on both ends, α, bytes over its share) + the reductions.

    Ring all-gather at p ranks: p-1 steps of one message of S/p bytes per rank (a CPU cost on each end);
    every rank sends at once, so each of the p flows gets min(B, H/p). Ring reduce-scatter: p-1 steps like
    the ring all-gather's, each reducing S/p bytes at γ; ring all-reduce: a reduce-scatter then an
    all-gather, 2(p-1) steps. (The ring cases only: they have these closed forms.)"""
    out = []
    for kind, name, _ in C.COLLECTIVE_CASES:
        if name != "ring":
            continue
        for size in C.COLLECTIVE_SIZES:
            piece = size / p
            ring_step = 2 * cpu + alpha + piece / min(bw, cap / p)
            if (kind, name) == ("allgather", "ring"):
                t = launch + (p - 1) * ring_step
            elif (kind, name) == ("reducescatter", "ring"):
                t = launch + (p - 1) * (ring_step + piece / gamma)
                if p > 2:  # from 3 ranks the ring reduces into input chunks: the runner copies the input first
                    t += COPY_ALPHA + size / COPY_BW
            else:
                assert (kind, name) == ("allreduce", "ring")
                t = launch + (p - 1) * (ring_step + piece / gamma) + (p - 1) * ring_step
            out.append({"collective": kind, "algorithm": name, "chunks": 1, "size": size, "time_s": t})
    return out


@pytest.mark.parametrize("p", [2, 4])
def test_machine_fit_recovers_every_parameter(p: int, tmp_path: Path) -> None:
    alpha, bw, cap, gamma, launch, cpu = 60e-6, 4e9, 3e9, 30e9, 150e-6, 40e-6
    m = fit_machine(_record(p, alpha, bw, cap, gamma, launch, cpu))
    topo, e = m.topology, m.engine
    assert topo.ranks == p
    assert topo.graph.edges["tx", "rx"]["latency"] == pytest.approx(alpha, rel=0.05)
    assert topo.bandwidth(0, "tx") == pytest.approx(bw, rel=0.05)
    assert topo.bandwidth("tx", "rx") == pytest.approx(cap, rel=0.05)
    assert e.reduce_bandwidth == pytest.approx(gamma, rel=0.05)
    assert e.launch == pytest.approx(launch, rel=0.1)
    assert e.message_cpu == pytest.approx(cpu, rel=0.1)
    assert m.model["runner"]["rms_rel"] < 0.03
    # The machine file round-trips and loads as a topology everywhere.
    path = tmp_path / "m.json"
    M.save(m, path)
    back = M.load(path)
    assert back.engine == e and back.model == m.model


@pytest.mark.parametrize("p", [2, 4])
def test_collectives_set_the_host_cap_and_gamma_when_the_flow_patterns_disagree(p: int) -> None:
    """Flow patterns made with one cap, collectives with another (and a slower γ than x.add_ shows): the
    model takes what the collectives see. A flows-only fit would give the patterns' cap and γ: it fails."""
    alpha, bw, launch, cpu = 60e-6, 4e9, 150e-6, 40e-6
    rec = _record(p, alpha, bw, 1.5e9, 30e9, launch, cpu)
    rec["collectives"] = _collectives(p, alpha, bw, 3e9, 2e9, launch, cpu)
    m = fit_machine(rec)
    assert m.model["flows"]["fit"]["host_bandwidth_Bps"] == pytest.approx(1.5e9, rel=0.05)  # what flows say
    assert m.topology.bandwidth("tx", "rx") == pytest.approx(3e9, rel=0.05)
    assert m.engine.reduce_bandwidth == pytest.approx(2e9, rel=0.05)
    assert m.model["collectives"]["fit"]["rms_rel"] < 0.03
    assert "collectives     host cap 3.0" in calibration_report(m)


def test_copy_seconds_counts_the_private_input_copy_of_out_of_place_schedules_that_write_their_input() -> None:
    copy = {"alpha_s": 1e-5, "bandwidth_Bps": 1e9}
    size = 64 * MIB
    rs = {name: registry.build("reducescatter", name, 2) for name in ("ring", "direct")}
    # 2 ranks: the ring writes only outputs; direct reduces into input chunk 0 on rank 0 and 1 on rank 1, so
    # each rank copies its whole input, which is the sized buffer of a reduce-scatter: 64 MiB.
    assert copy_seconds(rs["ring"], size, copy) == 0.0
    assert copy_seconds(rs["direct"], size, copy) == pytest.approx(1e-5 + size / 1e9)
    # 4 ranks: the ring reduces into input chunks too.
    assert copy_seconds(registry.build("reducescatter", "ring", 4), size, copy) == pytest.approx(1e-5 + size / 1e9)
    # In-place kinds and schedules that write only outputs copy nothing; no fit: nothing.
    assert copy_seconds(registry.build("allreduce", "ring", 4), size, copy) == 0.0
    assert copy_seconds(registry.build("allgather", "ring", 4), size, copy) == 0.0
    assert copy_seconds(rs["direct"], size, None) == 0.0


def test_a_calibrated_copy_makes_predictions_and_tune_count_it(tmp_path: Path) -> None:
    """The machine's copy fit reaches predict (the difference is the hand-made copy time) and tune."""
    m = fit_machine(_record(2, 60e-6, 4e9, 3e9, 30e9, 150e-6, 40e-6))
    assert m.model["copies"]["fit"]["bandwidth_Bps"] == pytest.approx(COPY_BW, rel=0.01)
    bare = M.Machine(m.topology, m.engine, {})
    size = 64 * MIB
    extra = predict(m, "reducescatter", "direct", 2, size) - predict(bare, "reducescatter", "direct", 2, size)
    assert extra == pytest.approx(COPY_ALPHA + size / COPY_BW, rel=0.01)
    assert predict(m, "reducescatter", "ring", 2, size) == predict(bare, "reducescatter", "ring", 2, size)
    # tune: at 64 KiB on 2 ranks the built-in default, recursive halving, writes its input; with a copy
    # this slow (65 ms) an algorithm that does not (the ring) wins, without it the default stays.
    slow = M.Machine(m.topology, m.engine, {"copies": {"fit": {"alpha_s": 0.0, "bandwidth_Bps": 1e6}}})
    hand_made = C.hand_made_preference()
    pick = {name: tune(x, 2, [64 * KIB], kinds=[Kind.REDUCESCATTER], prefer=hand_made)["reducescatter"][0]["algorithm"]
            for name, x in (("slow", slow), ("bare", bare))}
    # (nccl_ring on ranks of one GPU per node is the same ring, and ties with it)
    assert pick["bare"] == "recursive_halving" and pick["slow"] in {"ring", "nccl_ring"}


def test_without_collectives_the_flow_patterns_set_the_host_cap() -> None:
    """Records from before the collectives existed still fit, with the patterns' cap."""
    rec = _record(4, 60e-6, 4e9, 1.5e9, 30e9, 150e-6, 40e-6)
    del rec["collectives"]
    m = fit_machine(rec)
    assert m.topology.bandwidth("tx", "rx") == pytest.approx(1.5e9, rel=0.05)
    assert "collectives" not in m.model


def test_no_host_cap_when_the_flows_do_not_show_one() -> None:
    rec = _record(4, 60e-6, 4e9, math.inf, 30e9, 0.0, 0.0)
    fit = fit_host_cap(rec, 60e-6, 4e9)
    assert fit["host_bandwidth_Bps"] is None  # JSON-ready: no cap


# -- validate's stats ------------------------------------------------------------------------------------------


def test_validation_stats_count_errors_and_predicted_fastest() -> None:
    def row(alg: str, size: int, measured: float, predicted: float) -> dict:
        return {"collective": "allgather", "algorithm": alg, "size": size, "measured_s": measured,
                "predicted_s": predicted, "error": predicted / measured - 1}

    rows = [row("a", 1, 1.0, 1.1), row("b", 1, 2.0, 1.0),   # predicted b, measured a: b is 2x slower: a miss
            row("a", 2, 1.0, 0.9), row("b", 2, 1.05, 1.0),  # predicted a = measured a: a hit
            row("a", 3, 1.08, 1.0), row("b", 3, 1.0, 1.2)]  # predicted a, 8% slower than b: within 10%
    s = validation_stats(rows)
    errs = sorted([0.1, 0.5, 0.1, 1 / 1.05 - 1, 1 / 1.08 - 1, 0.2], key=abs)
    assert s["median_abs_error"] == pytest.approx(float(np.percentile([abs(e) for e in errs], 50)))
    assert s["groups"] == 3
    assert s["predicted_fastest_is_fastest"] == pytest.approx(1 / 3)
    assert s["predicted_fastest_within_10pct"] == pytest.approx(2 / 3)


# -- tune ----------------------------------------------------------------------------------------------------


def test_tune_writes_a_file_the_policy_loads_and_uses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from runners.commands.cli import main

    # Latency-bound host (1 ms a message, bandwidth unlimited in practice): the fewest steps win. allgather on
    # 4 ranks: direct takes 1 step (α), recursive doubling 2, ring 3; the simulated time is α = 1 ms.
    m = M.Machine(M.host(4, bandwidth=1e18, latency=1e-3))
    mpath, out = tmp_path / "m.json", tmp_path / "tuning.json"
    M.save(m, mpath)
    assert main(["tune", "--machine", str(mpath), "--sizes", "1KiB:1MiB:4", "-o", str(out)]) == 0
    capsys.readouterr()
    doc = json.loads(out.read_text())
    (rule,) = doc["rules"]["allgather"]
    assert rule["algorithm"] == "direct" and rule["min_ranks"] == rule["max_ranks"] == 4
    assert all(t == pytest.approx(1e-3) for t in rule["predicted_s"].values())
    policy = Policy.from_env({}, tuning=out)
    assert policy.choose("allgather", 4 * KIB, 4) == Choice("direct")
    assert policy.choose("allgather", 4 * KIB, 3) == Policy.defaults().choose("allgather", 4 * KIB, 3)
    # reducescatter: direct is 1 step too, and ring's 3 steps never win.
    assert {r["algorithm"] for r in doc["rules"]["reducescatter"]} == {"direct"}


def test_tune_resizes_a_calibrated_host(tmp_path: Path) -> None:
    m = M.Machine(M.host(2, bandwidth=2e9, latency=50e-6, host_bandwidth=3e9), M.EngineParams(launch=1e-4))
    path = tmp_path / "m.json"
    M.save(m, path)
    m4 = load_machine(str(path), 4)
    assert m4.topology.ranks == 4 and m4.engine == m.engine
    assert m4.topology.bandwidth("tx", "rx") == 3e9 and m4.topology.bandwidth(3, "tx") == 2e9
    other = tmp_path / "ring.json"
    M.save(M.Machine(__import__("sim.topology", fromlist=["ring"]).ring(2)), other)
    with pytest.raises(CalibrationError, match="not a calibrated host"):
        load_machine(str(other), 4)


def test_commands_reject_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from runners.commands.cli import main

    assert main(["tune", "--machine", str(tmp_path / "missing.json"), "--json"]) == 2
    assert "cannot read" in json.loads(capsys.readouterr().out)["error"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**M.to_dict(M.Machine(M.host(2, bandwidth=1e9, latency=1e-6))),
                               "engine": {"launch": -1}}))
    assert main(["validate", "--machine", str(bad), "--nproc", "2"]) == 2
    assert "topology.engine.launch" in capsys.readouterr().err
    assert main(["calibrate", "--nproc", "1", "--out", str(tmp_path / "x.json")]) == 2
    assert "--nproc must be >= 2" in capsys.readouterr().err


# -- end to end on 2 gloo ranks ----------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.multiprocess
def test_calibrate_validate_tune_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from runners.commands.cli import main
    from sim.cli import main as sim_main

    mpath = tmp_path / "machine.json"
    assert main(["calibrate", "--nproc", "2", "--rounds", "1", "--out", str(mpath), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    m = M.load(mpath)
    assert out["engine"] == m.engine.to_dict() and m.topology.ranks == 2
    assert set(m.model) >= {"p2p", "flows", "reduce", "runner"}
    assert 1e-7 < m.topology.graph.edges["tx", "rx"]["latency"] < 0.1  # α of gloo over loopback: us to ms
    assert m.engine.reduce_bandwidth is not None and m.engine.reduce_bandwidth > 1e7
    # the machine file is a topology for simulate
    assert sim_main(["simulate", "-c", "allreduce", "-a", "ring", "-t", str(mpath), "--size", "1MiB", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["time_s"] > m.engine.launch

    plot = tmp_path / "v.png"
    assert main(["validate", "--machine", str(mpath), "--nproc", "2", "--sizes", "4KiB,16KiB", "--collectives",
                 "allgather,broadcast", "--launches", "1", "--iters", "1", "--warmup", "0", "--plot", str(plot),
                 "--json"]) == 0
    v = json.loads(capsys.readouterr().out)
    names = {(r["collective"], r["algorithm"]) for r in v["rows"]}
    assert names == {("allgather", a) for a in algorithms_for("allgather", 2)} | \
        {("broadcast", a) for a in algorithms_for("broadcast", 2)}
    assert all(r["measured_s"] > 0 and r["predicted_s"] > 0 for r in v["rows"])
    assert v["summary"]["points"] == len(v["rows"]) == 2 * len(names)
    assert plot.stat().st_size > 1000

    tpath = tmp_path / "t.json"
    assert main(["tune", "--machine", str(mpath), "--nproc", "2", "--nproc", "4", "-o", str(tpath)]) == 0
    policy = Policy.from_env({}, tuning=tpath)
    doc = json.loads(tpath.read_text())
    first = doc["rules"]["allreduce"][0]
    assert policy.choose("allreduce", 1024, 2).algorithm == first["algorithm"]


@pytest.mark.slow  # 9-13 s: off the quick loop
def test_the_checked_in_table_is_what_tune_writes_from_the_checked_in_machines(tmp_path: Path) -> None:
    """runners/backend/tuning/gloo.json is regenerated by the command in its comment (docs/backend.md): running it on
    the machine files next to it gives the same rules, so the table and its machines cannot drift apart."""
    from runners.backend.policy import TUNED_TABLE
    from runners.commands.cli import main

    here = TUNED_TABLE.parent
    out = tmp_path / "t.json"
    assert main(["tune", "--machine", str(here / "gloo-2.json"), "--machine", str(here / "gloo-4.json"),
                 "-o", str(out)]) == 0
    checked_in = json.loads(TUNED_TABLE.read_text())
    assert json.loads(out.read_text())["rules"] == checked_in["rules"]
    assert checked_in["comment"].startswith("collsched tune --machine runners/backend/tuning/gloo-2.json --machine "
                                            "runners/backend/tuning/gloo-4.json")


def test_rounds_combine_as_medians() -> None:
    a = {"p2p": {"0-1": [1.0, 10.0]}, "runner": [{"collective": "allgather", "size": 4, "time_s": 3.0}]}
    b = {"p2p": {"0-1": [2.0, 30.0]}, "runner": [{"collective": "allgather", "size": 4, "time_s": 1.0}]}
    c = {"p2p": {"0-1": [9.0, 20.0]}, "runner": [{"collective": "allgather", "size": 4, "time_s": 2.0}]}
    assert C._median_of([a, b, c]) == {"p2p": {"0-1": [2.0, 20.0]},
                                       "runner": [{"collective": "allgather", "size": 4, "time_s": 2.0}]}
