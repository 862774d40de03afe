"""Machine models: the engine parameters that make simulated times match a real machine.

- ``model``: machine files (a topology plus ``EngineParams``), preset engines, the one-host topology;

and the numpy side of calibration, which ``runners.calibrate`` feeds with measurements (see
docs/design.md, "Machine model and calibration"):

- ``fit``: curve fits (α-β lines, robust to outliers, a knee; a search over one parameter);
- ``predict``: a machine's prediction of the gloo runner's time, machine files for another world size,
  and the scores of ``collsched validate``;
- ``calibration``: the machine model fitted to ``collsched calibrate``'s measurements, and its report;
- ``tune``: the ``COLLSCHED_TUNING`` rules the model predicts best (``collsched tune``).

Nothing here imports torch.
"""

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

__all__ = ["ENGINE_KEYS", "PRESET_ENGINES", "TUNE_CHUNKS", "TUNE_MARGIN", "CalibrationError", "EngineParams", "Fit",
           "Machine", "Preference", "algorithms_for", "build_schedule", "calibration_report", "copy_fit",
           "copy_seconds", "engine_for", "fit_alpha_beta", "fit_collectives", "fit_host_cap", "fit_knee",
           "fit_linear", "fit_machine", "fit_robust", "fit_runner", "host", "load", "load_machine",
           "plot_validation", "predict", "save", "search_log", "tune", "validation_stats", "validation_table"]
