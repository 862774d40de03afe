"""The report of a store: winners, runner-ups and margins, efficiency, the tuning table's bands, CSV, heatmaps."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from sim.campaign.report import heatmaps, load_report, write_csv, write_winners_csv
from sim.campaign.spec import CampaignError, parse_campaign
from sim.campaign.store import Store
from sim.campaign.table import tuning_table

SIZES = [1024, 4096, 16384, 65536]
# Made-up times (seconds) per algorithm and size on each topology: the report only reads the store.
TIMES = {"ring": [4.0, 5.0, 6.0, 7.0], "direct": [2.0, 4.0, 8.0, 16.0], "recursive_doubling": [1.0, 6.0, 9.0, 18.0]}


def _filled(tmp_path: Path, topologies: list[str], modes: tuple[str, ...] = ("dataflow",)) -> tuple[Any, Store]:
    c = parse_campaign({"collectives": ["allreduce"], "algorithms": list(TIMES), "topologies": topologies,
                        "sizes": SIZES, "modes": list(modes)})
    store = Store(tmp_path / "s.sqlite")
    rows = []
    for cfg in c.configs():
        t = TIMES[cfg.variant.algorithm][SIZES.index(cfg.size)] * 1e-6
        ranks = int(cfg.topology.spec.split(":")[1])
        status = "error" if cfg.variant.algorithm == "ring" and cfg.size == 65536 and ranks == 8 else "ok"
        rows.append((cfg.key, cfg.canonical(), {"status": status, "ranks": ranks, "runtime": "plain", "params": "{}",
                                                "time_s": t if status == "ok" else None, "bound_s": 1e-6,
                                                "efficiency": 1e-6 / t, "error": "boom" if status != "ok" else None}))
    store.add(rows, c.version)
    return c, store


def test_winners_runner_ups_margins_and_efficiency(tmp_path: Path) -> None:
    c, store = _filled(tmp_path, ["ring:4", "switch:8"])
    with store:
        report = load_report(c, store)
    assert report.missing == 0 and report.statuses() == {"ok": 23, "error": 1}
    by = {(w.topology, w.size): w for w in report.winners}
    w = by[("ring:4", 1024)]
    assert (w.winner, w.runner_up, w.candidates) == ("recursive_doubling", "direct", 3)
    assert w.margin == pytest.approx(1.0) and w.efficiency == pytest.approx(1.0)
    assert [by[("ring:4", s)].winner for s in SIZES] == ["recursive_doubling", "direct", "ring", "ring"]
    lost = by[("switch:8", 65536)]  # ring failed there: direct wins, the failure is no candidate
    assert (lost.winner, lost.runner_up, lost.candidates) == ("direct", "recursive_doubling", 2)
    assert lost.margin == pytest.approx(18 / 16 - 1)


def test_the_table_merges_neighbouring_sizes_per_world_size(tmp_path: Path) -> None:
    c, store = _filled(tmp_path, ["ring:4", "switch:8"])
    with store:
        table = tuning_table(load_report(c, store))
    rules = table["rules"]["allreduce"]
    assert table["format"] == "collsched.tuning/1"
    assert [(r["algorithm"], r["min_ranks"], r.get("max_bytes")) for r in rules] == [
        ("recursive_doubling", 4, 1024), ("direct", 4, 4096), ("ring", 4, None),
        ("recursive_doubling", 8, 1024), ("direct", 8, 4096), ("ring", 8, 16384), ("direct", 8, None)]
    assert rules[2]["predicted_s"] == {"16384": pytest.approx(6e-6), "65536": pytest.approx(7e-6)}


def test_a_table_is_for_one_machine(tmp_path: Path) -> None:
    c, store = _filled(tmp_path, ["ring:4", "switch:4"], modes=("dataflow", "lockstep"))
    with store:
        report = load_report(c, store)
    with pytest.raises(CampaignError, match="several modes"):
        tuning_table(report)
    with pytest.raises(CampaignError, match="4 ranks on several topologies"):
        tuning_table(report, mode="lockstep")
    table = tuning_table(report, mode="lockstep", topology="switch:4")
    assert "switch:4" in table["comment"] and len(table["rules"]["allreduce"]) == 3


def test_csv_and_heatmaps(tmp_path: Path) -> None:
    c, store = _filled(tmp_path, ["ring:4", "switch:8"])
    with store:
        report = load_report(c, store)
    write_csv(report, tmp_path / "rows.csv")
    write_winners_csv(report, tmp_path / "winners.csv")
    rows = list(csv.DictReader((tmp_path / "rows.csv").open()))
    assert len(rows) == 24 and {r["variant"] for r in rows} == set(TIMES)
    assert next(r for r in rows if r["status"] == "error")["error"] == "boom"
    winners = list(csv.DictReader((tmp_path / "winners.csv").open()))
    assert len(winners) == 8 and winners[0]["winner"] == "recursive_doubling"
    paths = heatmaps(report, tmp_path / "maps")
    assert sorted(p.name for p in paths) == ["allreduce-ring_4-dataflow-default.png",
                                             "allreduce-switch_8-dataflow-default.png"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in paths)
