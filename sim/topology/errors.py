"""``TopologyError``, in a module of its own that imports no networkx, so that the SPEC table
(``sim.topology.forms``) and the routing choices can raise it while the command line's parser is built."""

from __future__ import annotations

from algorithms.errors import CollschedError

__all__ = ["TopologyError"]


class TopologyError(CollschedError, ValueError):
    """A topology, topology file, SPEC or route is invalid; the message names the node, link, field or form."""
