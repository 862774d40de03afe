"""``EngineOptions``: the engine's options are one frozen value, checked in one place, that every entry point
(``simulate``'s keywords, a machine file's ``engine`` section, ``replace``) turns into the same value."""

from __future__ import annotations

import dataclasses
import math

import pytest

from algorithms import registry
from sim.engine import EngineOptions, Faults, SimulationError, simulate
from sim.engine.options import ENGINE_KEYS
from sim.machine import model as M
from sim.topology import ring
from sim.topology.errors import TopologyError

BAD = [
    ("mode", "sideways", "mode: must be one of dataflow, lockstep"),
    ("overhead", -1.0, "overhead: must be a finite number of seconds >= 0"),
    ("overhead", math.inf, "overhead: must be a finite number of seconds >= 0"),
    ("overhead", True, "overhead: must be a finite number of seconds >= 0"),
    ("reduce_bandwidth", 0, "reduce_bandwidth: must be a positive finite number of bytes/s or None"),
    ("reduce_bandwidth", "fast", "reduce_bandwidth: must be a positive finite number of bytes/s or None"),
    ("launch", "1us", "launch: must be a finite number of seconds >= 0 or None"),
    ("message_cpu", math.nan, "message_cpu: must be a finite number of seconds >= 0"),
    ("faults", {"down": ()}, "faults: must be a Faults"),
    ("progress", "yes", "progress: must be True or False"),
    ("engine", "quick", "engine: must be one of auto, simpy, fast"),
]


@pytest.mark.parametrize("field, value, message", BAD)
def test_a_bad_field_is_refused_by_the_value_itself_naming_the_field(field: str, value: object,
                                                                     message: str) -> None:
    with pytest.raises(SimulationError, match=f"^{message}") as direct:
        EngineOptions(**{field: value})
    # Every other way in says exactly the same: the check is the constructor's, nowhere else.
    with pytest.raises(SimulationError) as derived:
        EngineOptions().replace(**{field: value})
    with pytest.raises(SimulationError) as keyword:
        simulate(registry.build("allreduce", "ring", 2), ring(2), 1024, **{field: value})
    assert str(direct.value) == str(derived.value) == str(keyword.value)


def test_fields_that_do_not_fit_together_are_refused_too() -> None:
    with pytest.raises(SimulationError, match="engine fast does not model message_cpu"):
        EngineOptions(engine="fast", message_cpu=1e-6)


def test_the_value_is_frozen() -> None:
    opts = EngineOptions(overhead=1e-6)
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.overhead = -1.0  # type: ignore[misc]
    assert opts.replace(overhead=2e-6) == EngineOptions(overhead=2e-6) and opts.overhead == 1e-6


def test_numbers_are_held_as_floats() -> None:
    opts = EngineOptions(overhead=1, reduce_bandwidth=10**9, launch=0, message_cpu=0)
    assert all(type(getattr(opts, k)) is float for k in ENGINE_KEYS)


def test_simulate_takes_the_value_whole_and_its_keywords_are_the_same_value() -> None:
    s, topo = registry.build("allreduce", "ring", 4), ring(4, bandwidth=1e9, latency=1e-6)
    opts = EngineOptions(mode="lockstep", overhead=2e-6, reduce_bandwidth=5e9, launch=3e-6,
                         faults=Faults(stragglers={1: 1e-6}))
    by_value = simulate(s, topo, 2**20, opts)
    by_keywords = simulate(s, topo, 2**20, mode="lockstep", overhead=2e-6, reduce_bandwidth=5e9, launch=3e-6,
                           faults=Faults(stragglers={1: 1e-6}))
    assert by_value.time == by_keywords.time and by_value.mode == "lockstep"
    # Keywords beside a value replace its fields.
    assert simulate(s, topo, 2**20, opts, launch=0.0).time == pytest.approx(by_value.time - 3e-6)
    with pytest.raises(TypeError):
        simulate(s, topo, 2**20, speed=1)
    with pytest.raises(SimulationError, match=r"^options: must be an EngineOptions"):
        simulate(s, topo, 2**20, {"overhead": 1e-6})  # type: ignore[arg-type]


def test_the_machine_file_section_is_the_same_value() -> None:
    assert M.EngineParams is EngineOptions
    doc = {"overhead": 1e-6, "reduce_bandwidth": None, "launch": 2e-6, "message_cpu": 0}
    opts = EngineOptions.from_dict(doc)
    assert opts == EngineOptions(overhead=1e-6, launch=2e-6) and opts.to_dict() == {**doc, "message_cpu": 0.0}
    with pytest.raises(TopologyError, match=r"^machine\.engine\.overhead: must be a finite number"):
        EngineOptions.from_dict({"overhead": -1}, "machine.engine")
    # The section holds the machine's figures only: how a run is driven is not a machine's.
    with pytest.raises(TopologyError, match="unknown field 'mode'"):
        EngineOptions.from_dict({"mode": "lockstep"})
