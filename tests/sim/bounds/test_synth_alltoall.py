"""``-a synth`` for alltoall and alltoallv (sim.bounds.synth over sim.bounds.flows): served by the registry, from
Python and from the command line, with the traffic matrix the registry passes; results verified and compared with
the hand answer on a ring."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import numpy as np
import pytest

from algorithms import registry
from algorithms.ir import Kind
from sim.engine.reference import simulate
from sim.topology import ring
from sim.verify.verifier import verify


def _cli(*argv: str) -> tuple[int, str]:
    from sim.cli import main

    out = io.StringIO()
    with redirect_stdout(out):
        code = main(list(argv))
    return code, out.getvalue()


def test_alltoall_synth_from_the_registry_reaches_the_ring_answer() -> None:
    a = registry.get(Kind.ALLTOALL, "synth")
    s = a.build(4, chunks=16, topology="ring:4")
    assert s.name == "synth" and s.collective.kind is Kind.ALLTOALL and verify(s).ok
    assert "synth" not in {x.name for x in registry.algorithms(Kind.ALLTOALL)}
    # ring:4 (25 GB/s links, ring()'s default): 4 sources x (1 + 1 + 2) hops x M/4 over 8 links, M/2 per link.
    t = ring(4)
    m = 2**28
    bw = t.graph.edges[0, 1]["bandwidth"]
    assert simulate(s, t, m).time == pytest.approx(m / 2 / bw, rel=0.05)


def test_alltoallv_synth_takes_the_matrix() -> None:
    matrix = [[0, 3, 0, 1], [0, 0, 0, 0], [5, 0, 2, 0], [0, 4, 0, 0]]
    s = registry.build("alltoallv", "synth", 4, matrix=matrix, topology="ring:4")
    assert s.collective.kind is Kind.ALLTOALLV
    assert np.array_equal(np.array(s.collective.traffic()), np.array(matrix))
    assert verify(s).ok
    # Without a matrix: the uniform one of ``chunks`` a pair.
    u = registry.build("alltoallv", "synth", 3, chunks=2)
    assert np.array_equal(np.array(u.collective.traffic()), np.full((3, 3), 2))
    with pytest.raises(registry.RegistryError, match="has 5 ranks, not 4"):
        registry.build("alltoall", "synth", 4, topology="ring:5")


def test_cli_simulates_alltoallv_synth_with_a_generated_matrix() -> None:
    code, out = _cli("simulate", "-c", "alltoallv", "--matrix", "zipf:1.2", "-a", "synth", "--param",
                     "topology=ring:4", "-t", "ring:4", "-s", "1MiB", "--json")
    assert code == 0, out
    assert json.loads(out)["ok"] is True
