"""Machine models: the engine parameters that make simulated times match a real machine.

- ``model``: machine files (a topology plus ``EngineParams``), preset engines, the one-host topology;

and the numpy side of calibration, which ``runners.commands.calibrate`` feeds with measurements (see
docs/design.md, "Machine model and calibration"):

- ``fit``: curve fits (α-β lines, robust to outliers, a knee; a search over one parameter);
- ``predict``: a machine's prediction of the gloo runner's time, machine files for another world size,
  and the scores of ``collsched validate``;
- ``calibration``: the machine model fitted to ``collsched calibrate``'s measurements, and its report;
- ``tune``: the ``COLLSCHED_TUNING`` rules the model predicts best (``collsched tune``).

Nothing here imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.lazy import lazy_exports

if TYPE_CHECKING:
    from sim.machine.calibration import calibration_report, fit_collectives, fit_host_cap, fit_machine, fit_runner
    from sim.machine.fit import CalibrationError, Fit, fit_alpha_beta, fit_knee, fit_linear, fit_robust, search_log
    from sim.machine.model import ENGINE_KEYS, PRESET_ENGINES, EngineParams, Machine, engine_for, host, load, save
    from sim.machine.predict import (
        algorithms_for,
        build_schedule,
        copy_fit,
        copy_seconds,
        load_machine,
        plot_validation,
        predict,
        validation_stats,
        validation_table,
    )
    from sim.machine.tune import TUNE_CHUNKS, TUNE_MARGIN, Preference, tune

_HOMES: dict[str, str] = {
    "CalibrationError": "fit",
    "ENGINE_KEYS": "model",
    "EngineParams": "model",
    "Fit": "fit",
    "Machine": "model",
    "PRESET_ENGINES": "model",
    "Preference": "tune",
    "TUNE_CHUNKS": "tune",
    "TUNE_MARGIN": "tune",
    "algorithms_for": "predict",
    "build_schedule": "predict",
    "calibration_report": "calibration",
    "copy_fit": "predict",
    "copy_seconds": "predict",
    "engine_for": "model",
    "fit_alpha_beta": "fit",
    "fit_collectives": "calibration",
    "fit_host_cap": "calibration",
    "fit_knee": "fit",
    "fit_linear": "fit",
    "fit_machine": "calibration",
    "fit_robust": "fit",
    "fit_runner": "calibration",
    "host": "model",
    "load": "model",
    "load_machine": "predict",
    "plot_validation": "predict",
    "predict": "predict",
    "save": "model",
    "search_log": "fit",
    "tune": "tune",
    "validation_stats": "predict",
    "validation_table": "predict",
}

__all__ = ["ENGINE_KEYS", "PRESET_ENGINES", "TUNE_CHUNKS", "TUNE_MARGIN", "CalibrationError", "EngineParams", "Fit",
           "Machine", "Preference", "algorithms_for", "build_schedule", "calibration_report", "copy_fit",
           "copy_seconds", "engine_for", "fit_alpha_beta", "fit_collectives", "fit_host_cap", "fit_knee",
           "fit_linear", "fit_machine", "fit_robust", "fit_runner", "host", "load", "load_machine",
           "plot_validation", "predict", "save", "search_log", "tune", "validation_stats", "validation_table"]

# The names load when first used: runners.commands.calibrate builds its parser without networkx or simpy.
__getattr__ = lazy_exports(__name__, _HOMES)
