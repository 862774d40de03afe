"""collsched's semantics and timing: verifier, dataflow, strategies, topologies, simulator."""
