"""Machine models: the engine parameters that make simulated times match a real machine.

- ``model``: machine files (a topology plus ``EngineParams``), preset engines, the one-host topology;

and the numpy side of calibration, which ``runners.calibrate`` feeds with measurements (see
docs/design.md, "Machine model and calibration"). Nothing here imports torch.
"""

from sim.machine.model import ENGINE_KEYS, PRESET_ENGINES, EngineParams, Machine, engine_for, host, load, save

__all__ = ["ENGINE_KEYS", "PRESET_ENGINES", "EngineParams", "Machine", "engine_for", "host", "load", "save"]
