"""MSCCL++ plans that MSCCL++ itself wrote (tests/data/foreign/mscclpp) read, verified and simulated."""

from __future__ import annotations

import pytest

from algorithms.errors import ScheduleError
from algorithms.formats.mscclpp import from_plan
from sim.verify import verify
from tests.algorithms.formats.mscclpp_corpus import CORPUS, load, out_of_place_allgather


def test_the_corpus_is_here_with_its_provenance() -> None:
    assert (CORPUS / "SOURCES.md").is_file() and (CORPUS / "LICENSE").is_file()
    assert len(list(CORPUS.glob("*.json"))) == 31


def test_put_with_signal_and_flush_counts_its_signal() -> None:
    # MSCCL++'s multi-node all-gather (2 nodes x 2 gpus) crosses nodes with pwsf: its signal is what the peer's
    # wait meets. Read as a plain put, the wait starves and a correct plan looked like a deadlock.
    s = from_plan(out_of_place_allgather(load("mn_allgather_2x2.json")))
    assert verify(s).ok


def test_put_with_signal_read_as_a_plain_put_is_a_deadlock() -> None:
    plan = out_of_place_allgather(load("mn_allgather_2x2.json"))
    ops = plan["gpus"][0]["threadblocks"][0]["ops"]
    k = next(i for i, op in enumerate(ops) if op["name"] == "pwsf")
    ops[k]["name"] = "put"  # the mutant: the signal is gone, the data still moves
    with pytest.raises(ScheduleError, match="deadlock"):
        from_plan(plan)
