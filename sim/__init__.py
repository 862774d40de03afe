"""collsched's semantics and timing, torch-free, one subpackage per concern.

- ``sim.topology``: topologies (graph, spec table, builders, files, placement, strategies);
- ``sim.verify``: semantics, the symbolic verifiers, dataflow, mutation testing, hypothesis strategies;
- ``sim.engine``: the simpy reference simulator, the fast engine, fair sharing, closed forms, traces;
- ``sim.machine``: machine models and the numpy side of calibration (fitting, prediction, tuning);
- ``sim.bounds``: lower bounds and synthesis;
- ``sim.cli``: the torch-free commands;
- ``sim.units``, ``sim.progress``: sizes and rates on the command line, progress bars.

The layers run one way: ``algorithms`` < ``sim`` < ``runners``; inside ``sim``, topology and verify
< engine < machine < bounds < cli (tests/test_layering.py holds the tree to it).
"""
