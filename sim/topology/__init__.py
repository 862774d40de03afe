"""Network topologies: the one import for the class, the builders and the files.

Three modules hold the parts, and this one gathers them so that
``from sim.topology import ...`` reaches everything:

- ``sim.topology.graph``: ``Topology`` (a frozen DiGraph of ranks and
  switches, link attributes, deterministic routing, link faults) and
  ``TopologyError``;
- ``sim.topology.builders``: ring, uring, full, switch, torus, fattree,
  cluster and dgx-h100, and ``from_spec`` for the SPEC syntax (``SPEC_FORMS``);
- ``sim.topology.files``: ``collsched.topology/1`` JSON and GraphML files.

Rank placement (which node each rank runs on) is in ``sim.topology.placement``.
"""

from __future__ import annotations

from sim.topology.builders import (
    DEFAULT_BANDWIDTH,
    DEFAULT_LATENCY,
    MAX_SPEC_RANKS,
    NIC_BANDWIDTH,
    NIC_LATENCY,
    NVLINK_BANDWIDTH,
    NVLINK_LATENCY,
    SPEC_FORMS,
    cluster,
    dgx_h100,
    fat_tree,
    from_spec,
    fully_connected,
    ring,
    single_switch,
    torus,
    unidirectional_ring,
)
from sim.topology.files import FORMAT, MAX_FILE_BYTES, dumps, from_dict, load, loads, save, to_dict
from sim.topology.graph import Link, Node, RouteLinks, Topology, TopologyError

__all__ = [
    "DEFAULT_BANDWIDTH",
    "DEFAULT_LATENCY",
    "FORMAT",
    "MAX_FILE_BYTES",
    "MAX_SPEC_RANKS",
    "NIC_BANDWIDTH",
    "NIC_LATENCY",
    "NVLINK_BANDWIDTH",
    "NVLINK_LATENCY",
    "SPEC_FORMS",
    "Link",
    "Node",
    "RouteLinks",
    "Topology",
    "TopologyError",
    "cluster",
    "dgx_h100",
    "dumps",
    "fat_tree",
    "from_dict",
    "from_spec",
    "fully_connected",
    "load",
    "loads",
    "ring",
    "save",
    "single_switch",
    "to_dict",
    "torus",
    "unidirectional_ring",
]
