"""Algorithms whose switches compute: NVLink SHARP (NVLS), NVLS-tree, InfiniBand SHARP, and multicast.

NVLS all-reduce (NCCL 2.17+, ``src/device/all_reduce.h``, ``runRing``'s NVLS
counterpart ``runNvls``): each GPU owns 1/p of the buffer; for each piece of
it, ``multimem.ld_reduce`` has the NVSwitch combine that piece of every GPU's
buffer and return the sum to the owner, and ``multimem.st`` has it multicast
the sum to every GPU. Each GPU's link carries the message (p + 1)/p times each
way. The pieces are pipelined through two staging slots, so that the
reduction of one piece overlaps the multicast of the one before.

NVLS-tree (NCCL's ``NVLS_TREE``): NVLS inside every node, and between nodes
the owners of the same piece (one per node, all on one rail) all-reduce it
over NCCL's double binary tree of the nodes (src/graph/trees.cc,
``ncclGetDtree``), each tree carrying half of it. SHARP (NCCL's
``COLLNET_DIRECT`` with SHARP, Graham et al., "Scalable Hierarchical
Aggregation Protocol (SHArP)", COMHPC 2016): the same, with the network switch
reducing the owners' pieces in one operation. Multicast broadcast and
all-gather: the root's (every rank's) chunks go out through one multicasting
switch.

The switch ops name domains (``nvls``, ``sharp``, ``any``) that the topology
resolves (``sim.topology.switches``), so the algorithms hold for any topology
whose switches can do the operations.

Costs (``registry.Cost``, the α-β-γ model of a lockstep schedule with one port per rank): a switch
operation loads the links it crosses, so a step's β term counts, per rank, the chunks it sends up to a
switch (each source of a reduction, the source of a multicast) and the chunks it receives from one (each
target), as its transfers are counted; a switch's own combining costs no rank γ. The formulas are exact
where the group divides p (tests/algorithms/library/test_innetwork_costs.py measures the schedules).
"""

from __future__ import annotations

from collections.abc import Mapping

from algorithms.builder import ScheduleBuilder
from algorithms.ir import Buf, Collective, Kind, Schedule
from algorithms.library.allreduce import _dbt_parents, _tree_shape
from algorithms.registry import Cost, Parameter, register

_DEPTH = 2
TREE_STAGES = Parameter("chunks", 32, "pipeline stages per piece (each: a reduction in the node, the owners' "
                        "all-reduce across nodes, a multicast back)")
GPUS = Parameter("group", 8, "GPUs per node: the ranks one NVSwitch joins (8 on a DGX H100)")
"""Staging slots per rank: stage c + 2 reuses stage c's, so two stages are in flight (more only split the links
between more stages under max-min sharing, and each finishes later)."""
STAGES = Parameter("chunks", 64, "pipeline stages per piece: each reduces, then multicasts, 1/(p·chunks) of the "
                   "buffer (NCCL pipelines NVLS in 128 KiB chunks)")

__all__ = ["multicast_allgather", "multicast_broadcast", "nvls", "nvls_tree", "sharp"]


def _nvls_bytes(p: int, n: float, k: int) -> float:
    # Step 0 sends p chunks up (one per owner's reduction), the last receives p (one multicast per owner); the k - 1
    # steps between carry a reduction and a multicast each: p + 1 chunks each way. A chunk is n / (p k).
    return (2 * p + (k - 1) * (p + 1)) * n / (p * k)


@register(Kind.ALLREDUCE, "nvls", source="NCCL NVLS (multimem.ld_reduce + multimem.st through the NVSwitch)",
          parameters=(STAGES,), listed=False,
          cost=Cost("(k+1)α + (2p+(k-1)(p+1))·n/(pk)β, no rank reduces; each rank's link carries (p+1)n/p "
                    "up and down", steps=lambda p, n, params: params["chunks"] + 1,
                    bytes=lambda p, n, params: _nvls_bytes(p, n, params["chunks"]), reduced=lambda p, n, params: 0,
                    sent_per_rank=lambda p, n, params: (p + 1) * n / p))
def nvls(ranks: int, *, chunks: int = 64) -> Schedule:
    """NVLS all-reduce: per piece, an in-switch reduction to its owner, then the owner's multicast to all.

    Rank g owns pieces g·k .. g·k + k - 1 (k = ``chunks``); stage c reduces
    piece g·k + c into the owner's staging slot c mod 2 and, a step later,
    multicasts it from there to every rank (the owner too), so that step c
    holds stage c's reductions and stage c - 1's multicasts.
    """
    p, k = ranks, chunks
    depth = min(k, _DEPTH)
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, p, p * k), "nvls", scratch_chunks=depth)
    everyone = list(range(p))
    for c in range(k + 1):
        with b.step():
            if c < k:
                for g in range(p):
                    b.switch_reduce("nvls", everyone, [g], g * k + c, dst_index=c % depth, dst_buf=Buf.SCRATCH)
            if c > 0:
                for g in range(p):
                    b.multicast("nvls", g, everyone, (c - 1) % depth, buf=Buf.SCRATCH, dst_index=g * k + c - 1,
                                dst_buf=Buf.INPUT)
    return b.build()


def _nodes(p: int, group: int) -> list[list[int]]:
    g = max(1, min(group, p))
    return [list(range(lo, min(lo + g, p))) for lo in range(0, p, g)]


def _node_trees(q: int) -> list[tuple[list[int], list[int], list[int]]]:
    """NCCL's double binary tree over q nodes (``ncclGetDtree``): per tree (parent, height, depth) by node."""
    if q < 2:
        return []
    out = []
    for parent in _dbt_parents(q):
        _, height, depth = _tree_shape(parent)
        out.append((parent, height, depth))
    return out


def _two_level_shape(p: int, group: int, name: str) -> tuple[int, int, int, int, int]:
    """(g, q, w, M, H): ranks per node, nodes, chunks per piece and stage, middle phases, the trees' height."""
    g = max(1, min(group, p))
    q = -(-p // g)
    if name == "nvls_tree":
        height = max((max(h) for _, h, _ in _node_trees(q)), default=0)
        return g, q, (2 if q > 1 else 1), 2 * height, height
    return g, q, q, (1 if q > 1 else 0), 0


def _two_level(ranks: int, chunks: int, group: int, name: str) -> Schedule:
    """Per stage: NVLS reduction in every node, the owners' all-reduce across nodes, NVLS multicast back.

    The buffer is g pieces (g = ``group``) of k stages (``chunks``) of w chunks;
    in a node of m ranks, local rank i owns the pieces j with j mod m = i. Stage
    c of piece j is reduced into its owner's staging slot, all-reduced there
    across the q owners, then multicast to the node's ranks. Across nodes,
    ``nvls_tree`` runs NCCL's double binary tree over the nodes (w = 2: each tree
    carries one of the two chunks, reduced up level by level, a node of height h
    sending to its parent in phase 1 + h, then broadcast down, a parent at depth d
    sending in phase 1 + H + d), and ``sharp`` one SHARP aggregation of the
    owners' w = q chunks. Phase i of stage c runs in step c + i, and a staging
    slot is reused only after its stage has left it, so stages pipeline in
    lockstep and in dataflow alike.
    """
    nodes = _nodes(ranks, group)
    g, q, k = len(nodes[0]), len(nodes), chunks
    _, _, w, middle, height = _two_level_shape(ranks, group, name)
    trees = _node_trees(q) if name == "nvls_tree" else []
    depth = min(k, middle + 2)
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, ranks, g * k * w), name, scratch_chunks=depth * g * w)
    sc = Buf.SCRATCH

    def owners(j: int) -> list[int]:
        return [node[j % len(node)] for node in nodes]

    def phase(i: int, c: int) -> None:
        for j in range(g):
            at, slot = (j * k + c) * w, (c % depth * g + j) * w  # a partial node's ranks own several pieces
            os_ = owners(j)
            if i == 0:
                for node, o in zip(nodes, os_, strict=True):
                    b.switch_reduce("nvls", node, [o], at, w, dst_index=slot, dst_buf=sc)
            elif i == middle + 1:
                for node, o in zip(nodes, os_, strict=True):
                    b.multicast("nvls", o, node, slot, w, buf=sc, dst_index=at, dst_buf=Buf.INPUT)
            elif not trees:
                b.switch_reduce("sharp", os_, os_, slot, w, buf=sc)
            elif i <= height:  # up: a node of height i - 1 adds its chunk of tree t into its parent's
                for t, (parent, hgt, _) in enumerate(trees):
                    for v in range(q):
                        if parent[v] >= 0 and hgt[v] == i - 1:
                            b.reduce(os_[v], os_[parent[v]], slot + t, buf=sc)
            else:  # down: a parent at depth i - 1 - H passes the sum on to its children
                for t, (parent, _, dep) in enumerate(trees):
                    for v in range(q):
                        if parent[v] >= 0 and dep[parent[v]] == i - 1 - height:
                            b.copy(os_[parent[v]], os_[v], slot + t, buf=sc)

    for s in range(k + middle + 1):
        with b.step():
            for i in range(middle + 2):
                if 0 <= s - i < k:
                    phase(i, s - i)
    return b.build()


def _two_level_cost(name: str) -> Cost:
    # Per stage a rank sends g·w chunks up for its node's reductions and receives g·w from its owners'
    # multicasts; the owner receives w of the reduction and sends w of the multicast. Phase i of stage c runs in
    # step c + i, so the reduction (phase 0, steps 0..k-1) and the multicast (phase L = M + 1, steps L..L+k-1)
    # share max(0, k - L) steps. In each middle phase an owner sends and receives m chunks: SHARP's aggregation
    # m = q; the trees on two nodes m = 1 (each tree's one edge, up then down); on more, at most 2 up (a node's
    # chunk of each tree) and 4 down or in (two children in each tree): a bound.
    exact = name == "sharp"

    def _m(q: int) -> int:
        return q if name == "sharp" else 1 if q <= 2 else 4

    def steps(p: int, n: float, params: Mapping[str, int]) -> float:
        return params["chunks"] + _two_level_shape(p, params["group"], name)[3] + 1

    def moved(p: int, n: float, params: Mapping[str, int]) -> float:
        g, q, w, mid, _ = _two_level_shape(p, params["group"], name)
        k, last = params["chunks"], mid + 1
        return (_m(q) * k * mid + w * (g * (k + min(k, last)) + max(0, k - last))) * n / (g * k * w)

    def reduced(p: int, n: float, params: Mapping[str, int]) -> float:
        g, q, w, _, hgt = _two_level_shape(p, params["group"], name)
        return 0 if exact else (1 if q <= 2 else 4) * hgt * n / (g * w)

    def sent(p: int, n: float, params: Mapping[str, int]) -> float:
        g, q, w, mid, _ = _two_level_shape(p, params["group"], name)
        middle = q * mid if exact else mid if q <= 2 else 6
        return (g * w + w + middle) * n / (g * w)

    across = ("one SHARP aggregation of the owners' q chunks" if exact else
              "NCCL's double binary tree over the q nodes, M = 2H phases of height H")
    return Cost(f"(k+M+1)α + β over the node's reduction, {across}, and the multicast, pipelined in k stages; "
                f"g ranks per node (exact when g divides p{'' if exact else ' and q <= 2; ≤ beyond'})",
                steps=steps, bytes=moved, reduced=reduced, sent_per_rank=sent)


@register(Kind.ALLREDUCE, "nvls_tree", source="NCCL NVLS_TREE (NVLS in a node, a double binary tree across nodes)",
          parameters=(TREE_STAGES, GPUS), constraints=("group = GPUs per node; the last node may hold fewer",),
          listed=False, cost=_two_level_cost("nvls_tree"))
def nvls_tree(ranks: int, *, chunks: int = 32, group: int = 8) -> Schedule:
    """NVLS inside every node of ``group`` ranks, each piece's owners all-reduce it over NCCL's double binary tree."""
    return _two_level(ranks, chunks, group, "nvls_tree")


@register(Kind.ALLREDUCE, "sharp", source="Graham et al., SHArP, COMHPC 2016; NCCL CollNet with SHARP",
          parameters=(TREE_STAGES, GPUS), constraints=("group = GPUs per node; the last node may hold fewer",),
          listed=False, cost=_two_level_cost("sharp"))
def sharp(ranks: int, *, chunks: int = 32, group: int = 8) -> Schedule:
    """NVLS inside every node of ``group`` ranks, one InfiniBand SHARP reduction of each piece's owners."""
    return _two_level(ranks, chunks, group, "sharp")


@register(Kind.BROADCAST, "multicast", source="switch multicast (NVLS multimem.st, InfiniBand multicast)",
          listed=False, cost=Cost("α + nβ: the root's k chunks go up once, every other rank takes them down",
                                  steps=lambda p, n, params: 1 if p > 1 else 0,
                                  bytes=lambda p, n, params: n if p > 1 else 0,
                                  reduced=lambda p, n, params: 0, sent_per_rank=lambda p, n, params: n if p > 1 else 0))
def multicast_broadcast(ranks: int, *, chunks: int = 1, root: int | None = 0) -> Schedule:
    """Broadcast: every chunk of the root goes out through one multicasting switch to every other rank."""
    r = 0 if root is None else root
    b = ScheduleBuilder(Collective(Kind.BROADCAST, ranks, chunks, root=r), "multicast")
    if ranks > 1:
        with b.step():
            for c in range(chunks):
                b.multicast("any", r, [d for d in range(ranks) if d != r], c)
    return b.build()


@register(Kind.ALLGATHER, "multicast", source="switch multicast (NVLS multimem.st, InfiniBand multicast)",
          listed=False, cost=Cost("α + nβ: each rank sends n/p up once and takes all n down",
                                  steps=lambda p, n, params: 1, bytes=lambda p, n, params: n,
                                  reduced=lambda p, n, params: 0,
                                  sent_per_rank=lambda p, n, params: n / p))
def multicast_allgather(ranks: int, *, chunks: int = 1) -> Schedule:
    """All-gather: every rank multicasts each input chunk to its slot of every rank's output (its own too)."""
    p, k = ranks, chunks
    b = ScheduleBuilder(Collective(Kind.ALLGATHER, p, k), "multicast")
    with b.step():
        for r in range(p):
            for c in range(k):
                b.multicast("any", r, list(range(p)), c, dst_index=r * k + c, dst_buf=Buf.OUTPUT)
    return b.build()
