"""Algorithms whose switches compute: NVLink SHARP (NVLS), NVLS-tree, InfiniBand SHARP, and multicast.

NVLS all-reduce (NCCL 2.17+, ``src/device/all_reduce.h``, ``runRing``'s NVLS
counterpart ``runNvls``): each GPU owns 1/p of the buffer; for each piece of
it, ``multimem.ld_reduce`` has the NVSwitch combine that piece of every GPU's
buffer and return the sum to the owner, and ``multimem.st`` has it multicast
the sum to every GPU. Each GPU's link carries the message (p + 1)/p times each
way. The pieces are pipelined through two staging slots, so that the
reduction of one piece overlaps the multicast of the one before.

NVLS-tree (NCCL's ``NVLS_TREE``): NVLS inside every node, and between nodes
the owners of the same piece (one per node) all-reduce it, here by a ring
(NCCL uses a tree; the ring's pieces keep every NIC busy). SHARP (NCCL's
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
                    "up and down", steps=lambda p, n, q: q["chunks"] + 1,
                    bytes=lambda p, n, q: _nvls_bytes(p, n, q["chunks"]), reduced=lambda p, n, q: 0,
                    sent_per_rank=lambda p, n, q: (p + 1) * n / p))
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


def _two_level(ranks: int, chunks: int, group: int, name: str) -> Schedule:
    """Per stage: NVLS reduction in every node, the owners' all-reduce across nodes, NVLS multicast back.

    The buffer is g pieces (g = ``group``) of k stages (``chunks``) of q chunks
    (q nodes); in a node of m ranks, local rank i owns the pieces j with
    j mod m = i. Stage c of piece j is reduced into its owner's staging slot,
    all-reduced there across the q owners (a ring over its q chunks for
    ``nvls_tree``, one SHARP aggregation for ``sharp``), then multicast to the
    node's ranks. Phase i of stage c runs in step c + i, and a staging slot is
    reused only after its stage has left it, so stages pipeline in lockstep
    and in dataflow alike.
    """
    nodes = _nodes(ranks, group)
    g, q, k = len(nodes[0]), len(nodes), chunks
    ring = q > 1 and name == "nvls_tree"
    middle = 2 * (q - 1) if ring else (1 if q > 1 else 0)
    depth = min(k, middle + 2)
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, ranks, g * k * q), name, scratch_chunks=depth * g * q)
    sc = Buf.SCRATCH

    def owners(j: int) -> list[int]:
        return [node[j % len(node)] for node in nodes]

    def phase(i: int, c: int) -> None:
        for j in range(g):
            at, slot = (j * k + c) * q, (c % depth * g + j) * q  # a partial node's ranks own several pieces
            if i == 0:
                for node, o in zip(nodes, owners(j), strict=True):
                    b.switch_reduce("nvls", node, [o], at, q, dst_index=slot, dst_buf=sc)
            elif i == middle + 1:
                for node, o in zip(nodes, owners(j), strict=True):
                    b.multicast("nvls", o, node, slot, q, buf=sc, dst_index=at, dst_buf=Buf.INPUT)
            elif not ring:
                b.switch_reduce("sharp", owners(j), owners(j), slot, q, buf=sc)
            else:
                t = i - 1
                down = t < q - 1  # reduce-scatter first, then all-gather
                os_ = owners(j)
                for n in range(q):
                    sub = (n - t) % q if down else (n + 1 - (t - q + 1)) % q
                    (b.reduce if down else b.copy)(os_[n], os_[(n + 1) % q], slot + sub, buf=sc)

    for s in range(k + middle + 1):
        with b.step():
            for i in range(middle + 2):
                if 0 <= s - i < k:
                    phase(i, s - i)
    return b.build()


def _two_level_shape(p: int, group: int, name: str) -> tuple[int, int, int, int]:
    """(g, q, M, m): ranks per node, nodes, the middle phases, the chunks each owner sends in one of them."""
    g = max(1, min(group, p))
    q = -(-p // g)
    if name == "nvls_tree":
        return g, q, 2 * (q - 1), 1
    return g, q, (1 if q > 1 else 0), q


def _two_level_cost(name: str) -> Cost:
    def steps(p: int, n: float, prm: Mapping[str, int]) -> float:
        _, _, mid, _ = _two_level_shape(p, prm["group"], name)
        return prm["chunks"] + mid + 1

    def moved(p: int, n: float, prm: Mapping[str, int]) -> float:
        # Per stage a rank sends g·q chunks up for its node's reductions and receives g·q from its owners'
        # multicasts; the owner receives q of the reduction and sends q of the multicast, and sends and
        # receives m in each middle phase. Phase i of stage c runs in step c + i, so the reduction (phase 0,
        # steps 0..k-1) and the multicast (phase L = M + 1, steps L..L+k-1) share max(0, k - L) steps.
        g, q, mid, m = _two_level_shape(p, prm["group"], name)
        k = prm["chunks"]
        last = mid + 1
        chunks = m * k * mid + q * (g * (k + min(k, last)) + max(0, k - last))
        return chunks * n / (g * k * q)

    def reduced(p: int, n: float, prm: Mapping[str, int]) -> float:
        g, q, _, _ = _two_level_shape(p, prm["group"], name)
        return (q - 1) * n / (g * q) if name == "nvls_tree" else 0  # the ring's q - 1 reduce steps per stage

    def sent(p: int, n: float, prm: Mapping[str, int]) -> float:
        g, q, mid, m = _two_level_shape(p, prm["group"], name)
        return (g * q + q + m * mid) * n / (g * q)

    middle = "2(q-1) ring steps of n/(gkq)" if name == "nvls_tree" else "one SHARP reduction of q·n/(gkq)"
    return Cost(f"(k+M+1)α + β over the node's reduction, {middle} and the multicast, pipelined; g ranks per "
                "node, q nodes, k stages (exact when g divides p)", steps=steps, bytes=moved, reduced=reduced,
                sent_per_rank=sent)


@register(Kind.ALLREDUCE, "nvls_tree", source="NCCL NVLS_TREE (NVLS in a node, the owners' ring across nodes)",
          parameters=(TREE_STAGES, GPUS), constraints=("group = GPUs per node; the last node may hold fewer",),
          listed=False, cost=_two_level_cost("nvls_tree"))
def nvls_tree(ranks: int, *, chunks: int = 32, group: int = 8) -> Schedule:
    """NVLS inside every node of ``group`` ranks, a ring all-reduce of each piece's owners across nodes."""
    return _two_level(ranks, chunks, group, "nvls_tree")


@register(Kind.ALLREDUCE, "sharp", source="Graham et al., SHArP, COMHPC 2016; NCCL CollNet with SHARP",
          parameters=(TREE_STAGES, GPUS), constraints=("group = GPUs per node; the last node may hold fewer",),
          listed=False, cost=_two_level_cost("sharp"))
def sharp(ranks: int, *, chunks: int = 32, group: int = 8) -> Schedule:
    """NVLS inside every node of ``group`` ranks, one InfiniBand SHARP reduction of each piece's owners."""
    return _two_level(ranks, chunks, group, "sharp")


@register(Kind.BROADCAST, "multicast", source="switch multicast (NVLS multimem.st, InfiniBand multicast)",
          listed=False, cost=Cost("α + nβ: the root's k chunks go up once, every other rank takes them down",
                                  steps=lambda p, n, q: 1 if p > 1 else 0, bytes=lambda p, n, q: n if p > 1 else 0,
                                  reduced=lambda p, n, q: 0, sent_per_rank=lambda p, n, q: n if p > 1 else 0))
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
                                  steps=lambda p, n, q: 1, bytes=lambda p, n, q: n, reduced=lambda p, n, q: 0,
                                  sent_per_rank=lambda p, n, q: n / p))
def multicast_allgather(ranks: int, *, chunks: int = 1) -> Schedule:
    """All-gather: every rank multicasts each input chunk to its slot of every rank's output (its own too)."""
    p, k = ranks, chunks
    b = ScheduleBuilder(Collective(Kind.ALLGATHER, p, k), "multicast")
    with b.step():
        for r in range(p):
            for c in range(k):
                b.multicast("any", r, list(range(p)), c, dst_index=r * k + c, dst_buf=Buf.OUTPUT)
    return b.build()
