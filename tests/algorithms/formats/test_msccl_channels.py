"""MSCCL-IR export over several channels (``dumps_msccl(..., nchannels=N)``, ``collsched export --nchannels N``).

References, none of them the code under test: the collective's postcondition (sim.verify.verifier) for the
re-imported file, the executability check for the file, and the original schedule's traffic, counted by hand
below (a split moves the same data: per step and pair of ranks, the chunks sent scale by the factor each
chunk was cut into).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from algorithms import Schedule, ScheduleError, build
from algorithms.formats.msccl import check_msccl, dumps_msccl, loads_msccl, parse_msccl
from sim.verify.verifier import verify


def _channels(text: str) -> tuple[set[int], int]:
    """The channels the thread blocks use, and the file's nchannels attribute."""
    program = parse_msccl(text)
    return {t.chan for g in program.gpus.values() for t in g.tbs}, int(program.attrs["nchannels"])


def _traffic(s: Schedule) -> list[Counter[tuple[int, int]]]:
    """Per step, chunks sent from rank to rank (local work left out)."""
    out = []
    for step in s.steps:
        c: Counter[tuple[int, int]] = Counter()
        for t in step.transfers:
            if t.src != t.dst:
                c[(t.src, t.dst)] += t.count
        if c:
            out.append(c)
    return out


# The ring all-reduce at p=4 sends, per step, `chunks` one-chunk transfers to the right neighbour.
@pytest.mark.parametrize(("kind", "name", "chunks", "n"), [
    ("allreduce", "ring", 1, 4),  # 1 transfer per connection: each chunk cut in 4
    ("allreduce", "ring", 2, 4),  # 2 transfers: each chunk cut in 2
    ("allreduce", "ring", 3, 4),  # 3 transfers: chunks cut in 2, one transfer in 2 pieces, two whole
    ("allreduce", "ring", 1, 3),
    ("allgather", "ring", 1, 2),
    ("reducescatter", "ring", 2, 3),
    ("alltoall", "direct", 1, 2),
    ("allreduce", "recursive_doubling", 1, 2),
])
def test_nchannels_spreads_every_connection_over_n_channels(kind: str, name: str, chunks: int, n: int) -> None:
    s = build(kind, name, 4, chunks=chunks)
    text = dumps_msccl(s, nchannels=n)
    chans, declared = _channels(text)
    assert chans == set(range(n)) and declared == n
    assert [f for f in check_msccl(text) if f.severity == "error"] == []
    back = loads_msccl(text)
    assert verify(back).ok
    # Same data between the same ranks in the same steps, in chunks cut f ways.
    f, rest = divmod(back.collective.chunks, s.collective.chunks)
    assert rest == 0 and f >= 1
    assert _traffic(back) == [Counter({k: v * f for k, v in c.items()}) for c in _traffic(s)]


def test_nchannels_cuts_a_one_chunk_ring_as_said() -> None:
    # Ring all-reduce, p=4, chunks=1, 4 channels: nchunksperloop 4 -> 16; every message one chunk of 16.
    text = dumps_msccl(build("allreduce", "ring", 4), nchannels=4)
    assert 'nchunksperloop="16"' in text.splitlines()[0]
    program = parse_msccl(text)
    assert {st.cnt for g in program.gpus.values() for t in g.tbs for st in t.steps} == {1}
    # Each rank: one sending and one receiving thread block per channel.
    for g in program.gpus.values():
        assert sorted((t.send >= 0, t.chan) for t in g.tbs) == sorted((b, c) for b in (False, True) for c in range(4))


def test_transfers_already_on_n_lanes_are_not_cut() -> None:
    s = build("allreduce", "ring", 4, chunks=4)
    assert dumps_msccl(s, nchannels=4) == dumps_msccl(s, nchannels=1)
    assert dumps_msccl(s, nchannels=2) == dumps_msccl(s)


def test_too_many_channels_fail_clearly() -> None:
    s = build("allreduce", "ring", 4)
    with pytest.raises(ScheduleError, match="nchannels"):
        dumps_msccl(s, nchannels=5000)


def test_export_cli_writes_n_channels_and_verify_accepts_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                            ) -> None:
    from sim.cli import main

    out = tmp_path / "r.xml"
    assert main(["export", "-c", "allreduce", "-a", "ring", "-p", "4", "--chunks", "2", "-o", str(out),
                 "--nchannels", "4"]) == 0
    said = capsys.readouterr().out
    assert "(allreduce p=4 C=8)" in said
    assert "MSCCL-IR on 4 channels, every chunk cut in 2 to spread the transfers (nchunksperloop=16)" in said
    chans, declared = _channels(out.read_text())
    assert chans == {0, 1, 2, 3} and declared == 4
    assert main(["verify", "--file", str(out)]) == 0
    printed = capsys.readouterr().out
    assert ": OK" in printed
    assert len(set(re.findall(r'chan="(\d+)"', out.read_text()))) == 4
