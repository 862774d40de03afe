"""Send order (``sim.engine.ports``, ``EngineOptions.in_flight``): the default dataflow mode reproduces the closed
forms of the classic algorithms of Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication
Operations in MPICH", IJHPCA 19(1), 2005, on ``switch:P``.

Each formula below is written by hand from the paper, not read from the registry's ``Cost``. The model is the
paper's (Hockney): a message of b bytes costs α + bβ, combining b bytes costs bγ. On ``switch:P`` a message
crosses two links (rank -> switch -> rank), so α = 2 x the link latency and β = 1 / the link bandwidth; γ =
1 / ``reduce_bandwidth`` (None: reductions are free, γ = 0). Every algorithm is simulated at several P, powers of
two and not, and a latency-bound and a bandwidth-bound size, in the default mode, and must come within 2% of
its formula (they agree to rounding).

The approximations in the published formulas, and the exact forms tested instead:

- ``lg p`` for p not a power of two. The paper derives most costs for p = 2^k. Binomial trees, Bruck's
  algorithms and dissemination take ⌈lg p⌉ rounds for any p, which is what is tested. The recursive-doubling and
  recursive-halving families (all-gather, reduce-scatter, all-reduce, Rabenseifner's all-reduce and reduce)
  first fold the r = p - P extra ranks onto the first r of P = 2^⌊lg p⌋ (one extra round in, one out: MPICH's
  scheme for all-reduce, §4.4), so their exact forms have ⌊lg p⌋ + 2 rounds and the bytes of the fold; the
  paper's lg p α + ... holds at p = 2^k only. (MPICH's own recursive-doubling all-gather for p ≠ 2^k exchanges
  extra blocks inside the recursion instead, at most 2⌊lg p⌋ rounds; it uses Bruck or the ring there.)
- Bruck's all-to-all: the paper's (n/2)·lg p·β counts half the buffer per round, exact at p = 2^k; in general
  round k moves the blocks whose index has bit k set, Σ_{i<p} popcount(i) blocks of n/p in all.
- Pairwise-exchange all-to-all: the paper writes (p-1)α + nβ with n the bytes a process sends to the others;
  with n the whole buffer (a block of n/p stays home, nccl-tests' size) that is (p-1)/p·nβ.
- The paper's reduce-scatter by pairwise exchange: the library has no algorithm of that name; the ring
  reduce-scatter has the same formula, (p-1)α + (p-1)/p·n(β+γ), round by round on a switch, and stands in.
- Barrier: the paper's ⌈lg p⌉α counts no bytes; a token here is ``size`` bytes, so each round adds its β.

Before the send order (``in_flight=0``, the engine as it was) the tree algorithms came out slower than their
formulas (a root's sends all started at once and split its port: binomial broadcast 1.9x on switch:8 at 1 MiB)
and the all-to-alls faster (a rank's rounds overlapped), which ``test_without_the_order_the_trees_are_slow``
keeps as the record.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import pytest

from algorithms import registry
from sim.engine import EngineOptions, SimulationError, simulate
from sim.topology import single_switch

LATENCY, BANDWIDTH, REDUCE_BW = 1e-6, 50e9, 20e9
ALPHA, BETA = 2 * LATENCY, 1 / BANDWIDTH
SIZES = (64 * 2**10, 2**20)
POWERS = (2, 4, 8, 16)
ANY = (3, 5, 6, 12, 13)

Formula = Callable[[int, float, float], float]
"""(p, n, γ) -> seconds."""


def lg(p: int) -> int:
    """⌊lg p⌋."""
    return p.bit_length() - 1


def clg(p: int) -> int:
    """⌈lg p⌉."""
    return (p - 1).bit_length()


def fold(p: int) -> tuple[int, int, int]:
    """P = 2^⌊lg p⌋, r = p - P extra ranks, e = [r > 0]."""
    big = 1 << lg(p)
    return big, p - big, int(p != big)


def doubled(p: int) -> int:
    """Blocks on the critical path of recursive doubling over P ranks, the first r holding an extra's block too:
    round j moves the 2^j blocks of a half plus the extras' blocks among them, min(2^j, r)."""
    big, r, _e = fold(p)
    return big - 1 + sum(min(2**j, r) for j in range(lg(p)))


def allgather_recursive_doubling(p: int, n: float, g: float) -> float:
    _big, _r, e = fold(p)
    if not e:
        return lg(p) * ALPHA + (p - 1) / p * n * BETA  # the paper's form
    # Fold: each extra sends its block in (1 block); doubling; unfold: the whole result back out (p blocks).
    return (lg(p) + 2) * ALPHA + (1 + doubled(p) + p) * n / p * BETA


def reducescatter_recursive_halving(p: int, n: float, g: float) -> float:
    _big, _r, e = fold(p)
    if not e:
        return lg(p) * ALPHA + (p - 1) / p * n * (BETA + g)  # the paper's form
    # Fold: each extra sends its whole buffer in, reduced there (p blocks); halving over P ranks, whose blocks
    # mirror doubling's; unfold: each extra's block back (1 block, nothing reduced).
    return (lg(p) + 2) * ALPHA + (p + doubled(p) + 1) * n / p * BETA + (p + doubled(p)) * n / p * g


def allreduce_recursive_doubling(p: int, n: float, g: float) -> float:
    if not fold(p)[2]:
        return lg(p) * (ALPHA + n * BETA + n * g)  # the paper's form
    # MPICH's fold (§4.4): the whole buffer in and reduced, lg P exchanges, the whole result out.
    return (lg(p) + 2) * (ALPHA + n * BETA) + (lg(p) + 1) * n * g


def allreduce_rabenseifner(p: int, n: float, g: float) -> float:
    big, _r, e = fold(p)
    # The paper's 2 lg p α + 2(p-1)/p nβ + (p-1)/p nγ at p = 2^k; else the fold's whole buffer in and out.
    return (2 * (lg(p) + e) * ALPHA + (2 * (big - 1) / big + 2 * e) * n * BETA
            + ((big - 1) / big + e) * n * g)


def reduce_rabenseifner(p: int, n: float, g: float) -> float:
    big, _r, e = fold(p)
    # Reduce-scatter by halving, then a binomial gather to the root: 2 lg p α + 2(p-1)/p nβ + (p-1)/p nγ at
    # p = 2^k; else the fold's whole buffer in (once: the root gathers, nothing goes back out).
    return ((2 * lg(p) + e) * ALPHA + (2 * (big - 1) / big + e) * n * BETA
            + ((big - 1) / big + e) * n * g)


CLASSIC: dict[tuple[str, str], tuple[Formula, tuple[int, ...]]] = {
    # §4.1 all-gather.
    ("allgather", "ring"): (lambda p, n, g: (p - 1) * ALPHA + (p - 1) / p * n * BETA, POWERS + ANY),
    ("allgather", "recursive_doubling"): (allgather_recursive_doubling, POWERS + ANY),
    ("allgather", "bruck"): (lambda p, n, g: clg(p) * ALPHA + (p - 1) / p * n * BETA, POWERS + ANY),
    # §4.2 broadcast: binomial tree; van de Geijn's binomial scatter + ring all-gather.
    ("broadcast", "binomial"): (lambda p, n, g: clg(p) * (ALPHA + n * BETA), POWERS + ANY),
    ("broadcast", "scatter_allgather"): (
        lambda p, n, g: (clg(p) + p - 1) * ALPHA + 2 * (p - 1) / p * n * BETA, POWERS + ANY),
    # §4.3 reduce-scatter: recursive halving; pairwise exchange (the ring stands in, module docstring).
    ("reducescatter", "recursive_halving"): (reducescatter_recursive_halving, POWERS + ANY),
    ("reducescatter", "ring"): (lambda p, n, g: (p - 1) * ALPHA + (p - 1) / p * n * (BETA + g), POWERS + ANY),
    # §4.4 all-reduce: recursive doubling; Rabenseifner's; the old reduce + broadcast.
    ("allreduce", "recursive_doubling"): (allreduce_recursive_doubling, POWERS + ANY),
    ("allreduce", "rabenseifner"): (allreduce_rabenseifner, POWERS + ANY),
    ("allreduce", "binomial"): (lambda p, n, g: 2 * clg(p) * (ALPHA + n * BETA) + clg(p) * n * g, POWERS + ANY),
    # §4.5 reduce: binomial tree; Rabenseifner's reduce-scatter + gather.
    ("reduce", "binomial"): (lambda p, n, g: clg(p) * (ALPHA + n * BETA + n * g), POWERS + ANY),
    ("reduce", "reducescatter_gather"): (reduce_rabenseifner, POWERS + ANY),
    # Scatter and gather: binomial trees.
    ("scatter", "binomial"): (lambda p, n, g: clg(p) * ALPHA + (p - 1) / p * n * BETA, POWERS + ANY),
    ("gather", "binomial"): (lambda p, n, g: clg(p) * ALPHA + (p - 1) / p * n * BETA, POWERS + ANY),
    # §4.6 all-to-all: Bruck's (short), pairwise exchange (long).
    ("alltoall", "bruck"): (
        lambda p, n, g: clg(p) * ALPHA + sum(bin(i).count("1") for i in range(p)) * n / p * BETA, POWERS + ANY),
    ("alltoall", "pairwise"): (lambda p, n, g: (p - 1) * ALPHA + (p - 1) / p * n * BETA, POWERS + ANY),
    # Barrier: dissemination, ⌈lg p⌉ rounds of one token.
    ("barrier", "dissemination"): (lambda p, n, g: clg(p) * (ALPHA + n * BETA), POWERS + ANY),
}
REDUCING = {"reducescatter", "allreduce", "reduce"}

CASES = [(kind, name, p, n) for (kind, name), (_f, ps) in CLASSIC.items() for p in ps for n in SIZES]


def run(kind: str, name: str, p: int, n: float, **options: Any) -> float:
    r = simulate(registry.build(kind, name, p), single_switch(p, bandwidth=BANDWIDTH, latency=LATENCY), n,
                 **options)
    assert r.ok, r.violations[:3]
    return r.time


def test_seventeen_classic_algorithms() -> None:
    assert len(CLASSIC) == 17


@pytest.mark.parametrize("kind, name, p, n", CASES)
def test_the_default_mode_is_within_two_percent_of_the_papers_closed_form(kind: str, name: str, p: int,
                                                                          n: float) -> None:
    formula, _ps = CLASSIC[(kind, name)]
    got = run(kind, name, p, n)
    want = formula(p, n, 0.0)
    assert abs(got / want - 1) <= 0.02, (got, want, got / want)
    if kind in REDUCING:  # with the reductions' cost, γ = 1 / reduce_bandwidth
        got = run(kind, name, p, n, reduce_bandwidth=REDUCE_BW)
        want = formula(p, n, 1 / REDUCE_BW)
        assert abs(got / want - 1) <= 0.02, ("γ", got, want, got / want)


@pytest.mark.parametrize("kind, name", sorted(CLASSIC))
def test_both_engines_agree_in_send_order(kind: str, name: str) -> None:
    for p in (6, 8):
        for in_flight in (1, 2, 0):
            times = {engine: run(kind, name, p, 2**20, engine=engine, in_flight=in_flight, reduce_bandwidth=REDUCE_BW)
                     for engine in ("simpy", "fast")}
            assert math.isclose(times["simpy"], times["fast"], rel_tol=1e-9), (p, in_flight, times)


def test_without_the_order_the_trees_are_slow() -> None:
    """``in_flight=0``, the engine before the send order: a root's sends all start at once and share its port."""
    n, p = 2**20, 8
    formula = CLASSIC[("broadcast", "binomial")][0](p, n, 0.0)
    assert run("broadcast", "binomial", p, n, in_flight=0) / formula > 1.8
    # ... and a rank's pairwise rounds overlap, faster than a blocking exchange per round.
    assert run("alltoall", "pairwise", p, n, in_flight=0) < 0.7 * CLASSIC[("alltoall", "pairwise")][0](p, n, 0.0)
    # Lockstep (a barrier per step) gives the formula too.
    assert run("broadcast", "binomial", p, n, mode="lockstep") == pytest.approx(formula, rel=1e-9)


def test_more_in_flight_splits_a_roots_port() -> None:
    """A root with N of its rounds in flight sends to N children at once, each at 1/N of its uplink: on a tree
    that only delays the subtrees that start first. At p = 8 the root has 3 rounds: 3 in flight is all."""
    n, p = 2**20, 8
    times = [run("broadcast", "binomial", p, n, in_flight=k) for k in (1, 2, 3, 0)]
    assert times[0] < times[1] < times[2] and times[2] == pytest.approx(times[3], rel=1e-9)


@pytest.mark.parametrize("value", [-1, True, 1.5, "all", None])
def test_in_flight_is_checked(value: object) -> None:
    with pytest.raises(SimulationError, match=r"^in_flight: must be an integer >= 0"):
        EngineOptions(in_flight=value)  # type: ignore[arg-type]


def test_the_command_line_flag(capsys: pytest.CaptureFixture[str]) -> None:
    from sim.cli.app import main

    base = ["simulate", "-c", "broadcast", "-a", "binomial", "-t", "switch:8", "--size", "1MiB", "--json"]
    docs = {}
    for flag in ("1", "0", "all", "2"):
        assert main([*base, "--in-flight", flag]) == 0
        docs[flag] = json.loads(capsys.readouterr().out)
    assert main(base) == 0
    default = json.loads(capsys.readouterr().out)
    assert default["time_s"] == docs["1"]["time_s"] == pytest.approx(3 * (ALPHA + 2**20 * BETA), rel=1e-9)
    assert docs["0"]["time_s"] == docs["all"]["time_s"] > docs["2"]["time_s"] > docs["1"]["time_s"]
    assert default["lockstep_s"] == pytest.approx(default["time_s"]) and default["modes_differ"] is False
    assert docs["all"]["modes_differ"] is True
    # The text output says when the modes differ by more than 10%, with both times.
    assert main([*base[:-1], "--in-flight", "all"]) == 0
    out = capsys.readouterr().out
    assert "  modes      dataflow " in out and ", lockstep " in out and "differ by more than 10%" in out
    assert main(base[:-1]) == 0
    assert "  modes " not in capsys.readouterr().out
    assert main([*base, "--in-flight", "-1"]) == 2
    assert "--in-flight: must be an integer >= 0 or all, got '-1'" in json.loads(capsys.readouterr().out)["error"]
