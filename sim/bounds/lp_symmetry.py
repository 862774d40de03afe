"""The all-to-all(v) LP reduced by a symmetry group of the topology: one commodity instead of p.

When a group G of automorphisms of the (routed) topology acts regularly on the ranks (for every rank s exactly
one π_s in G with π_s(0) = s: the translations of a torus, the rotations of a ring or a switch) and the traffic
matrix is invariant under it (T[π(u)][π(v)] = T[u][v], as the uniform all-to-all is), the max-concurrent-flow LP
of ``sim.bounds.lp`` has an optimal solution in which source s's flow is the image under π_s of source 0's
flow g. Proof: from any optimal solution f, set g = (1/p) Σ_s π_s⁻¹(f_s) (each source's flow carried back to
source 0, where it routes T[0][·] by invariance) and f'_s = π_s(g). The load f' puts on a link e is
(1/p) Σ_s Σ_s' f_s'(π_s' π_s⁻¹ e); writing h = π_s' π_s⁻¹ (for fixed s, s' ↦ h is a bijection onto G since
h(s) = s'), it is (1/p) Σ_h Σ_s f_h(s)(h e) = (1/p) Σ_h load_f(h e) <= (1/p) Σ_h bandwidth(h e)·t =
bandwidth(e)·t: f' is feasible at the same t.

So the reduced LP has |links| + 1 variables: min t subject to source 0's conservation rows for g, and for
each link orbit O one capacity row Σ_{e in O} (p/|O|)·g[e] <= bandwidth(O)·t (the load of any e in O under
f'). Its optimum equals the full LP's, exactly (not a relaxation: every f' is a full solution, and every full
optimum symmetrises into one). The duals split evenly over each orbit are a dual solution of the full LP with
Σ y·bandwidth = 1, from which the bottleneck links are reported as before.

The candidate maps are the builder family's translations (``sim.bounds.packing._automorphisms``: rotations of
rings, translations of 2-d tori), used only after checking here that they are automorphisms of the routed part
(link for link, with their bandwidths), form a group (closed under composition) and leave the matrix invariant;
a file that borrows a name without the structure gets the full LP. A switch goes where its ranks go (the one
switch joined to exactly their images; where two switches are joined to the same ranks, or one to none, the full
LP). The maps that ``sim.bounds.symmetry`` finds from the graph alone are not searched for here: they need not
form a group (on torus:4x4 they do not), and the search costs more than the LP saves below 160 nodes.

This module does not import torch.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import coo_matrix, csr_matrix

from sim.topology import Node, Topology

__all__ = ["link_orbits", "regular_group", "symmetric_rows"]


def _node_index(topology: Topology) -> dict[Node, int]:
    """Ranks by number, then switches in the graph's order (the LP's numbering, ``sim.bounds.lp``)."""
    p = topology.ranks
    index: dict[Node, int] = {r: r for r in range(p)}
    index.update({w: p + k for k, w in enumerate(x for x in topology.graph.nodes if not isinstance(x, int))})
    return index


def regular_group(topology: Topology, matrix: np.ndarray) -> np.ndarray | None:
    """An array whose row s maps every node (``_node_index`` order: ranks, then switches) by an automorphism π_s
    of ``topology`` (a routed part) with π_s(0) = s, the rows forming a group that leaves ``matrix`` invariant;
    None when there is none found. A switch goes where its ranks go: it must be the only switch joined to
    exactly those ranks (out and in), else None."""
    p = topology.ranks
    g = topology.graph
    if p < 2:
        return None
    from sim.bounds.packing import _automorphisms

    roots = list(range(p))
    named = _automorphisms(topology, roots)
    if named is None:
        return None
    perms = np.stack([named[r] for r in roots])
    if not (perms[:, 0] == np.arange(p)).all():
        return None
    # A group: π_a ∘ π_b is the member taking 0 to π_a(b).
    for a in range(p):
        if not np.array_equal(perms[a][perms], perms[perms[a]]):
            return None
    index = _node_index(topology)
    switches = [w for w in g.nodes if not isinstance(w, int)]

    def joined(w: Node, pm: np.ndarray) -> tuple[frozenset[int], frozenset[int]]:
        return (frozenset(int(pm[x]) for x in g.successors(w) if isinstance(x, int)),
                frozenset(int(pm[x]) for x in g.predecessors(w) if isinstance(x, int)))

    ident = np.arange(p)
    by_ranks = {joined(w, ident): w for w in switches}
    if len(by_ranks) < len(switches) or any(not (a or b) for a, b in by_ranks):
        return None
    maps = np.empty((p, len(index)), dtype=np.int64)
    links = list(g.edges(data=True))
    for s, pm in enumerate(perms):
        maps[s, :p] = pm
        for w in switches:
            image = by_ranks.get(joined(w, pm))
            if image is None:
                return None
            maps[s, index[w]] = index[image]
        node = {i: x for x, i in index.items()}
        for u, v, attrs in links:
            other = g.get_edge_data(node[int(maps[s, index[u]])], node[int(maps[s, index[v]])])
            if other is None or other["bandwidth"] != attrs["bandwidth"]:
                return None
        if not np.array_equal(matrix[np.ix_(pm, pm)], matrix):
            return None
    return maps


def link_orbits(topology: Topology, maps: np.ndarray) -> np.ndarray:
    """For every link (``topology.links`` order) the index of its orbit under ``maps`` (``regular_group``'s rows),
    orbits numbered from 0 in order of their first link."""
    index = _node_index(topology)
    node = {i: x for x, i in index.items()}
    links = topology.links
    position = {link: k for k, link in enumerate(links)}
    orbit = np.full(len(links), -1, dtype=np.int64)
    count = 0
    for k, (u, v) in enumerate(links):
        if orbit[k] >= 0:
            continue
        images = {position[(node[int(a)], node[int(b)])] for a, b in zip(maps[:, index[u]], maps[:, index[v]],
                                                                           strict=True)}
        orbit[list(images)] = count
        count += 1
    return orbit


def symmetric_rows(orbit: np.ndarray, ranks: int) -> csr_matrix:
    """The reduced capacity rows: orbit O's row puts ranks/|O| on each of its links (module docstring)."""
    sizes = np.bincount(orbit)
    ne = len(orbit)
    return coo_matrix((ranks / sizes[orbit], (orbit, np.arange(ne))), shape=(len(sizes), ne)).tocsr()
