"""From a campaign's winners to the backend policy's tuning table (``collsched.tuning/1``).

The table has the form ``collsched tune`` writes (``sim.machine.tune``) and ``runners.backend.policy``
reads (``parse_tuning``; the policy loads it from ``COLLSCHED_TUNING``): per collective kind, for each world
size, the winner at each size of the campaign; neighbouring sizes with the same winner (algorithm and
parameters) make one rule, which covers calls up to its largest size (the last rule of a world size: every
size), with ``min_ranks`` = ``max_ranks`` = the world size and ``predicted_s`` the winner's simulated seconds
by size. The policy takes the first covering rule, so the rules of one world size never shadow another's.

A table is for one machine: one topology per world size, one mode and one runtime. Where the campaign has
several, ``topology``, ``mode`` and ``runtime`` say which (a ``CampaignError`` otherwise). This module imports
nothing of ``runners``: tests/runners/test_campaign_table.py loads the table with the policy.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from algorithms.errors import UsageError
from sim.campaign.report import Report, Winner
from sim.campaign.spec import CampaignError

__all__ = ["TUNING_FORMAT", "tuning_table", "write_table"]

TUNING_FORMAT = "collsched.tuning/1"
"""``runners.backend.policy.TUNING_FORMAT``, spelled here because sim never imports runners (the round-trip
test holds the two equal)."""


def _pick(values: Sequence[str], given: str | None, what: str) -> str:
    if given is not None:
        if given not in values:
            raise CampaignError(f"--table-{what} {given}: the campaign's winners have {what}s "
                                f"{', '.join(sorted(values)) or 'none'}")
        return given
    if len(set(values)) > 1:
        raise CampaignError(f"--table: the campaign has several {what}s ({', '.join(sorted(set(values)))}); "
                            f"a table is for one machine: name one with --table-{what}")
    return values[0]


def tuning_table(report: Report, *, topology: str | None = None, mode: str | None = None,
                 runtime: str | None = None, comment: str | None = None) -> dict[str, Any]:
    """The tuning table of ``report``'s winners (module docstring)."""
    winners = report.winners
    if not winners:
        raise CampaignError("--table: the campaign has no winners yet (nothing stored ran correctly)")
    mode = _pick([w.mode for w in winners], mode, "mode")
    runtime = _pick([w.runtime for w in winners], runtime, "runtime")
    chosen = [w for w in winners if w.mode == mode and w.runtime == runtime]
    if topology is not None:
        chosen = [w for w in chosen if topology in (w.topology, _spec(report, w.topology))]
        if not chosen:
            raise CampaignError(f"--table-topology {topology}: no winners on it (topologies: "
                                f"{', '.join(sorted({w.topology for w in winners}))})")
    by_ranks: dict[int, set[str]] = {}
    for w in chosen:
        by_ranks.setdefault(w.ranks, set()).add(w.topology)
    for p, topos in by_ranks.items():
        if len(topos) > 1:
            raise CampaignError(f"--table: {p} ranks on several topologies ({', '.join(sorted(topos))}); a table "
                                "is for one machine: name one with --table-topology")
    rules: dict[str, list[dict[str, Any]]] = {}
    for coll in report.campaign.collectives:
        for p in sorted(by_ranks):
            picks = sorted((w for w in chosen if w.collective == coll and w.ranks == p), key=lambda w: w.size)
            rules.setdefault(coll, []).extend(_rules(picks, p))
    rules = {k: v for k, v in rules.items() if v}
    where = ", ".join(f"{p} ranks: {next(iter(t))}" for p, t in sorted(by_ranks.items()))
    text = comment or (f"collsched campaign {report.campaign.name}: the least simulated time per size band "
                       f"({where}; {mode}, runtime {runtime}); predicted_s gives each rule's simulated seconds "
                       "by size in bytes")
    return {"format": TUNING_FORMAT, "comment": text, "rules": rules}


def _spec(report: Report, label: str) -> str:
    return next((t.spec for t in report.campaign.topologies if t.label == label), label)


def _choice(w: Winner) -> tuple[str, str]:
    return w.algorithm, json.dumps(w.params, sort_keys=True)


def _rules(picks: Sequence[Winner], p: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, w in enumerate(picks):
        last = i + 1 == len(picks)
        if not last and _choice(picks[i + 1]) == _choice(w):
            continue
        rule: dict[str, Any] = {"algorithm": w.algorithm, "min_ranks": p, "max_ranks": p}
        if w.params:
            rule["params"] = dict(sorted(w.params.items()))
        if not last:
            rule["max_bytes"] = int(w.size)
        start = next(j for j in range(i, -1, -1) if j == 0 or _choice(picks[j - 1]) != _choice(w))
        rule["predicted_s"] = {str(int(x.size)): x.time_s for x in picks[start:i + 1]}
        out.append(rule)
    return out


def write_table(table: dict[str, Any], path: str | Path) -> None:
    try:
        Path(path).write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from None
