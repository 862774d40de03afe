"""How fast a collective can be on a topology, and schedules that get there.

- ``budget``: the time the cut bound may take, estimated before it starts, and its error;
- ``cuts``: exact max-flow cut bounds, the all-reduce traffic term and the latency term per kind, with
  the cut that attains them (``bound``);
- ``packing``: synthesis by pipelined spanning-tree packing (``synthesize``); explicit routes
  (``routed``: widest, neighbour) are ``sim.topology.routing``'s, re-exported here;
- ``lp``: the exact all-to-all(v) bound by max-concurrent-flow LP (HiGHS), with its bottleneck links;
- ``flows``: all-to-all(v) synthesis from the LP's flows, over several paths, pipelined;
- ``symmetry``: rank orbits and automorphisms found from the graph, for the symmetric packing;
- ``synth``: the synthesizer as the registered algorithm ``synth`` (``-a synth --param topology=SPEC``),
  registered through the ``collsched.algorithms`` entry point.

>>> from sim.bounds import bound, synthesize
>>> from sim.engine import simulate
>>> from sim.topology import ring
>>> topo = ring(4, bandwidth=1e9, latency=0.0)
>>> b = bound("allgather", topo, 4e6)
>>> round(b.bound_s * 1e3, 3)  # (p-1)/p * N over each rank's two in-links of 1 GB/s
1.5
>>> schedule = synthesize("allgather", topo)
>>> round(b.efficiency(simulate(schedule, topo, 4e6).time), 9)
1.0
"""

from __future__ import annotations

from sim.lazy import lazy_exports

_HOMES = {"BOUND_KINDS": "cuts", "Bound": "cuts", "BoundError": "cuts", "bound": "cuts",
          "ROUTINGS": "..topology.routing", "SYNTH_KINDS": "packing", "SynthesisError": "packing",
          "routed": "..topology.routing", "synthesize": "packing"}

__all__ = ["BOUND_KINDS", "ROUTINGS", "SYNTH_KINDS", "Bound", "BoundError", "SynthesisError", "bound", "routed",
           "synthesize"]


# Lazily: the registry imports ``sim.bounds.synth`` at its first lookup, which must not pull in networkx.
__getattr__ = lazy_exports(__name__, _HOMES)
