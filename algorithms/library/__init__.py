"""The algorithm library: one module per collective kind, each registering its algorithms.

Importing this package registers every built-in algorithm with ``algorithms.registry``;
``fold`` holds the power-of-two arithmetic the recursive algorithms share; ``compose`` the
per-dimension composition (grids, lines, embedding 1-D schedules) that ``swing``, ``torus`` and
``torus_doubling`` use; ``hamiltonian`` the rings on a torus's edge-disjoint Hamiltonian cycles. Users reach the
algorithms through the registry (``registry.get(kind, name)``), not through these modules.
"""

from algorithms.library import (
    allgather,
    allreduce,
    alltoall,
    alltoallv,
    barrier,
    broadcast,
    gather,
    hamiltonian,
    innetwork,
    nccl,
    pat,
    reduce,
    reducescatter,
    scatter,
    swing,
    torus,
    torus_doubling,
)

__all__ = ["allgather", "allreduce", "alltoall", "alltoallv", "barrier", "broadcast", "gather", "hamiltonian",
           "innetwork", "nccl", "pat", "reduce", "reducescatter", "scatter", "swing", "torus", "torus_doubling"]
