"""Time: the discrete-event simulator of schedules on topologies, and what it prints.

- ``options``: ``EngineOptions``, the one frozen value of a run's options (mode, machine costs, ``Faults``,
  engine), checked when made;
- ``reference``: the simpy simulator, the reference model (``simulate``, ``SimResult``, nccl-tests sizes and
  bus bandwidth);
- ``symmetric``: simulation by symmetry, one transfer per orbit of a group of torus translations; its
  ``simulate`` is this package's: a schedule as ``reference.simulate``, a symmetric form by symmetry where exact;
- ``fast``: the same model vectorised on numpy arrays (a closed form, else an event loop over arrays);
- ``fairshare``: max-min fair link sharing by progressive filling;
- ``closed_form``: α-β-γ predictions of the library's algorithms beside the simulator;
- ``trace``: Chrome/Perfetto traces, timeline and sweep plots.

>>> from algorithms import build
>>> from sim.topology import ring
>>> r = simulate(build("allreduce", "ring", 4), ring(4, bandwidth=1e9, latency=0.0), 4e6)
>>> round(r.time * 1e3, 3)  # 2(p-1)/p * N / B on a ring of 1 GB/s links
6.0
"""

from sim.engine.options import ENGINES, MODES, EngineOptions, Faults, SimulationError
from sim.engine.reference import SimResult, busbw_factor
from sim.engine.symmetric import simulate

__all__ = ["ENGINES", "MODES", "EngineOptions", "Faults", "SimResult", "SimulationError", "busbw_factor", "simulate"]
