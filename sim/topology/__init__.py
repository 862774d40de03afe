"""Network topologies: the one import for the class, the SPEC table, the builders, the files and the routes.

The parts live in their own modules, and this one gathers them so that ``from sim.topology import ...``
reaches everything:

- ``sim.topology.graph``: ``Topology`` (a frozen DiGraph of ranks and switches, link attributes,
  deterministic routing, link faults); ``sim.topology.errors``: ``TopologyError``;
- ``sim.topology.forms``: the table of SPEC forms (``from_spec``, ``topology_forms``, ``register_topology`` for
  forms of your own, ``SPEC_FORMS``), light enough for the command line's help;
- ``sim.topology.builders``: ring, uring, full, switch, N-dimensional torus (per-dimension figures),
  fattree, cluster and dgx-h100;
- ``sim.topology.files``: ``collsched.topology/1`` JSON and GraphML files;
- ``sim.topology.routing``: explicit routes (``routed``: widest, neighbour, dimension order; ``ROUTINGS``);
  ``sim.topology.torus_routes``: the default routes of many pairs on a plain torus in closed form, and
  ``sim.topology.symmetry``: interchangeable NVLink domains, so that one route stands for its relabellings
  (both used by ``Topology.route_links_many`` and ``route_many``).

Rank placement (which node each rank runs on) is in ``sim.topology.placement``.

The names are imported when first used, so that ``import sim.topology.forms`` (the parser's help)
imports no networkx.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.lazy import lazy_exports

if TYPE_CHECKING:
    from sim.topology.builders import (
        DEFAULT_BANDWIDTH,
        DEFAULT_LATENCY,
        NIC_BANDWIDTH,
        NIC_LATENCY,
        NVLINK_BANDWIDTH,
        NVLINK_LATENCY,
        TORUS_DIMENSIONS,
        cluster,
        dgx_h100,
        fat_tree,
        fully_connected,
        ring,
        single_switch,
        torus,
        torus_dimension,
        unidirectional_ring,
    )
    from sim.topology.errors import TopologyError
    from sim.topology.files import FORMAT, MAX_FILE_BYTES, dumps, from_dict, load, loads, save, to_dict
    from sim.topology.forms import (
        MAX_SPEC_RANKS,
        SPEC_FORMS,
        Form,
        from_spec,
        parse_shape,
        register_topology,
        spec_forms,
        topology_forms,
    )
    from sim.topology.graph import Link, Node, RouteLinks, Topology
    from sim.topology.routing import ROUTINGS, dimension_order_routes, neighbour_routes, routed, widest_routes

_HOMES: dict[str, str] = {
    **dict.fromkeys(("DEFAULT_BANDWIDTH", "DEFAULT_LATENCY", "NIC_BANDWIDTH", "NIC_LATENCY", "NVLINK_BANDWIDTH",
                     "NVLINK_LATENCY", "TORUS_DIMENSIONS", "cluster", "dgx_h100", "fat_tree", "fully_connected",
                     "ring", "single_switch", "torus", "torus_dimension", "unidirectional_ring"), "builders"),
    "TopologyError": "errors",
    **dict.fromkeys(("FORMAT", "MAX_FILE_BYTES", "dumps", "from_dict", "load", "loads", "save", "to_dict"), "files"),
    **dict.fromkeys(("MAX_SPEC_RANKS", "SPEC_FORMS", "Form", "topology_forms", "from_spec", "parse_shape",
                     "register_topology", "spec_forms"), "forms"),
    **dict.fromkeys(("Link", "Node", "RouteLinks", "Topology"), "graph"),
    **dict.fromkeys(("ROUTINGS", "dimension_order_routes", "neighbour_routes", "routed", "widest_routes"), "routing"),
}

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
    "ROUTINGS",
    "SPEC_FORMS",
    "TORUS_DIMENSIONS",
    "Form",
    "Link",
    "Node",
    "RouteLinks",
    "Topology",
    "TopologyError",
    "cluster",
    "dgx_h100",
    "dimension_order_routes",
    "dumps",
    "fat_tree",
    "topology_forms",
    "from_dict",
    "from_spec",
    "fully_connected",
    "load",
    "loads",
    "neighbour_routes",
    "parse_shape",
    "register_topology",
    "ring",
    "routed",
    "save",
    "single_switch",
    "spec_forms",
    "to_dict",
    "torus",
    "torus_dimension",
    "unidirectional_ring",
    "widest_routes",
]


__getattr__ = lazy_exports(__name__, _HOMES)
