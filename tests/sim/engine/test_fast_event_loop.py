"""The fast engine's event loop on runs whose instants move a few transfers each, against the simpy engine.

Such runs (a ring placed row-major on a torus, where the row ends' messages take two links and share one with
another: uneven sharing, every step desynchronised) take the paths added for them: ``PortArrays``' element by
element rules for a few transfers (``sim.engine.ports.FEW``), and the rates settled only where a link's sharing
changed (``_Fluid._settle``). The reference is ``sim.engine.reference``'s simpy engine, which shares the model
but none of the bookkeeping (``FairShare`` over the connected component, ``SendOrder`` per transfer).
"""

from __future__ import annotations

import numpy as np
import pytest

from algorithms import registry
from algorithms.ir import Kind
from sim.engine import fast, ports
from sim.engine.reference import simulate
from sim.topology.forms import from_spec

CASES = [("ring", "torus:4x4"), ("ring", "torus:8x4"), ("recursive_doubling", "torus:4x4"),
         ("swing_torus", "torus:4x4"), ("ring", "cluster:2x4")]


def _times(alg: str, spec: str, in_flight: int, engine: str) -> np.ndarray:
    topology = from_spec(spec)
    schedule = registry.build(Kind.ALLREDUCE, alg, topology.ranks)
    r = simulate(schedule, topology, 1 << 22, mode="dataflow", in_flight=in_flight, engine=engine, overhead=1e-6)
    return np.asarray(r.end)


def _event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fast run through the event loop (no closed form), so that the loop is what is compared."""
    run_fast = fast.run_fast

    def loop_only(*args: object, **kwargs: object) -> object:
        return run_fast(*args, **{**kwargs, "closed_form": False})  # type: ignore[arg-type]

    monkeypatch.setattr(fast, "run_fast", loop_only)


@pytest.mark.parametrize("few", [0, ports.FEW, 1 << 30])
@pytest.mark.parametrize("in_flight", [0, 1, 2])
@pytest.mark.parametrize(("alg", "spec"), CASES)
def test_the_event_loop_times_as_simpy_does(monkeypatch: pytest.MonkeyPatch, alg: str, spec: str, in_flight: int,
                                            few: int) -> None:
    # few = 0: every instant's ports as arrays; 1 << 30: every one element by element.
    want = _times(alg, spec, in_flight, "simpy")
    _event_loop(monkeypatch)
    monkeypatch.setattr(ports, "FEW", few)
    got = _times(alg, spec, in_flight, "fast")
    np.testing.assert_allclose(got, want, rtol=1e-9)


def test_uneven_sharing_is_in_these_cases() -> None:
    # The row-major ring on torus:8x4 shares a link (the row ends' two-link routes): the closed form gives up, so
    # the event loop is what times it; without sharing the comparison above would test the closed form only.
    topology = from_spec("torus:8x4")
    schedule = registry.build(Kind.ALLREDUCE, "ring", topology.ranks)
    r = simulate(schedule, topology, 1 << 22, mode="dataflow", in_flight=1, engine="fast")
    assert r.events > 2 * (2 * (topology.ranks - 1))  # not one event a step: the loop ran


def test_the_comparison_fails_when_a_shared_links_rates_go_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    # Break the settle's bookkeeping (a link that becomes shared no longer resettles its flows): the times move
    # and the comparison above says so.
    want = _times("ring", "torus:8x4", 0, "simpy")
    _event_loop(monkeypatch)
    add_flows = fast._Fluid._add_flows

    def stale(self: fast._Fluid, *args: object) -> None:
        add_flows(self, *args)  # type: ignore[arg-type]
        self._resettle = False

    monkeypatch.setattr(fast._Fluid, "_add_flows", stale)
    got = _times("ring", "torus:8x4", 0, "fast")
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(got, want, rtol=1e-9)


def test_the_comparison_fails_when_the_ports_few_path_skips_a_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    # Break the element-by-element path (rule 3 ignored: a message no longer waits for the port's earlier
    # batches to land): the times move and the comparison says so.
    want = _times("ring", "torus:8x4", 1, "simpy")
    _event_loop(monkeypatch)
    monkeypatch.setattr(ports, "FEW", 1 << 30)
    monkeypatch.setattr(ports._SideArrays, "open_one",
                        lambda self, m, n_flight: bool(self.s.batch[m] == self.started_upto[self.s.batch_port[
                            self.s.batch[m]]]))
    got = _times("ring", "torus:8x4", 1, "fast")
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(got, want, rtol=1e-9)
