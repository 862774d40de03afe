"""All-to-allv algorithms: rank i's block for j (``T[i][j]`` chunks, any size, zero included) goes to rank j.

Each builder takes the traffic matrix (``matrix``, p rows of p chunk counts;
None: the uniform matrix of ``chunks`` a pair) and, with ``chunks`` > 1 and a
matrix, splits every one of its units into ``chunks`` chunks. Block (i, j)
starts at ``send_offset(i, j)`` of i's input and lands at ``recv_offset(j, i)``
of j's output (docs/design.md, "Collectives and buffers").

Direct and pairwise: Thakur, Rabenseifner & Gropp, "Optimization of
collective communication operations in MPICH", IJHPCA 19(1), 2005, §4.7
(MPI_Alltoallv by isend/irecv, and the pairwise exchange of p-1 steps).

Bruck: Bruck et al., IEEE TPDS 8(11), 1997, for blocks of any size, as
Fan et al. ("Optimizing the Bruck algorithm for non-uniform all-to-all
communication", HPDC 2022) do: position i of rank r is its block for rank
r+i; in round t every rank packs the positions with bit t set into one
message (a local copy into scratch) and sends it to r + 2^t, where the
blocks keep their position; ⌈log2 p⌉ messages per rank, for small messages.

Hierarchical (node-aware, ``group`` GPUs a node, the last node may be
partial): a block from GPU (a, l) to GPU (b, m) on another node goes
(a, l) -> (a, r) over NVLink, (a, r) -> (b, r) on rail r between nodes,
then (b, r) -> (b, m) over NVLink, and every rail GPU sends one message per
destination node. ``via`` picks the rail: ``dest`` (r = m, NCCL's PXN: the
data is gathered onto the destination's rail, the scatter is empty),
``source`` (r = l, DeepEP's internode dispatch: the own rail, then a
scatter in the destination node) or ``node`` (r = (a + b) mod g: all of
node a's traffic for node b in one message, for small messages). Blocks
within a node go direct.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import numpy as np

from algorithms.builder import ScheduleBuilder
from algorithms.errors import RegistryError
from algorithms.ir import Buf, Collective, Kind, Matrix, Schedule, check_matrix
from algorithms.library.fold import log2ceil, popcount_sum
from algorithms.registry import CHUNKS, Cost, Parameter, register

__all__ = ["bruck", "collective_for", "direct", "hierarchical", "pairwise"]


def collective_for(ranks: int, matrix: object, chunks: int) -> Collective:
    """The all-to-allv collective of ``matrix`` (None: ``chunks`` a pair), each unit cut into ``chunks`` chunks."""
    if matrix is None:
        return Collective(Kind.ALLTOALLV, ranks, matrix=((chunks,) * ranks,) * ranks)
    t: Matrix = check_matrix(matrix, ranks)
    if chunks != 1:
        t = tuple(tuple(v * chunks for v in row) for row in t)
    return Collective(Kind.ALLTOALLV, ranks, matrix=t)


def _uniform(p: int, n: float, params: Mapping[str, int]) -> float:
    return (p - 1) * n / p


@register(
    Kind.ALLTOALLV,
    "direct",
    source="Thakur, Rabenseifner & Gropp 2005",
    cost=Cost("α + (p-1)/p·nβ (uniform matrix; else the busiest rank's sent or received bytes)",
              steps=lambda p, n, params: 1 if p > 1 else 0, bytes=_uniform, reduced=lambda p, n, params: 0,
              sent_per_rank=_uniform),
)
def direct(ranks: int, *, chunks: int = 1, matrix: object = None) -> Schedule:
    """Direct all-to-allv: every non-empty block straight to its destination in one step (Thakur et al. 2005)."""
    coll = collective_for(ranks, matrix, chunks)
    t = coll.traffic()
    b = ScheduleBuilder(coll, "direct")
    with b.step():
        src, dst = np.nonzero(t)
        if len(src):
            send = (np.cumsum(t, axis=1) - t)[src, dst]
            recv = (np.cumsum(t, axis=0) - t)[src, dst]
            b.add_many(src, dst, send, t[src, dst], dst_index=recv, dst_buf=Buf.OUTPUT)
    return b.build()


@register(
    Kind.ALLTOALLV,
    "pairwise",
    source="Thakur, Rabenseifner & Gropp 2005",
    cost=Cost("(p-1)α + (p-1)/p·nβ (uniform matrix)", steps=lambda p, n, params: p - 1, bytes=_uniform,
              reduced=lambda p, n, params: 0, sent_per_rank=_uniform),
)
def pairwise(ranks: int, *, chunks: int = 1, matrix: object = None) -> Schedule:
    """Pairwise-exchange all-to-allv: at step s rank r sends its block for r+s+1 (Thakur et al. 2005).

    The own block is copied locally alongside the first exchange; empty blocks send nothing.
    """
    coll = collective_for(ranks, matrix, chunks)
    p = ranks
    b = ScheduleBuilder(coll, "pairwise")
    for s in range(max(p - 1, 1)):
        with b.step():
            for r in range(p):
                if s == 0 and coll.block(r, r):
                    b.copy(r, r, coll.send_offset(r, r), coll.block(r, r), dst_buf=Buf.OUTPUT,
                           dst_index=coll.recv_offset(r, r))
                if p > 1:
                    d = (r + s + 1) % p
                    if coll.block(r, d):
                        b.copy(r, d, coll.send_offset(r, d), coll.block(r, d), dst_buf=Buf.OUTPUT,
                               dst_index=coll.recv_offset(d, r))
    return b.build()


@register(
    Kind.ALLTOALLV,
    "bruck",
    source="Bruck et al. 1997; Fan et al. 2022",
    cost=Cost("⌈log2 p⌉α + Σ_{i<p} popcount(i)·n/pβ (uniform matrix)",
              steps=lambda p, n, params: log2ceil(p), bytes=lambda p, n, params: popcount_sum(p) * n / p,
              reduced=lambda p, n, params: 0, sent_per_rank=lambda p, n, params: popcount_sum(p) * n / p),
)
def bruck(ranks: int, *, chunks: int = 1, matrix: object = None) -> Schedule:
    """Bruck's all-to-allv: ⌈log2 p⌉ rounds of one packed message per rank (Bruck et al. 1997; Fan et al. 2022).

    Round t: step 2t packs (local copies into scratch) the positions with bit t set, and lands the
    positions that arrived final in round t-1 in the output; step 2t+1 sends the packed message to
    r + 2^t, into a receive region of its scratch. Every round has its own send and receive regions.
    """
    coll = collective_for(ranks, matrix, chunks)
    p = ranks
    rounds = log2ceil(p)
    # where[q][i]: (buffer, offset, chunks) of the block at position i of rank q (from q - moved bits, for q + i).
    where = [[(Buf.INPUT, coll.send_offset(q, (q + i) % p), coll.block(q, (q + i) % p)) for i in range(p)]
             for q in range(p)]
    top = [0] * p  # scratch used so far, per rank
    # Per round: packs (rank, buffer, offset, count, scratch offset), sends (src, dst, offset, count, offset at
    # dst) and lands (rank, scratch offset, count, output offset).
    packs_all: list[list[tuple[int, Buf, int, int, int]]] = []
    sends_all: list[list[tuple[int, int, int, int, int]]] = []
    lands_all: list[list[tuple[int, int, int, int]]] = []
    for t in range(rounds):
        bit = 1 << t
        packs: list[tuple[int, Buf, int, int, int]] = []
        sends: list[tuple[int, int, int, int, int]] = []
        lands: list[tuple[int, int, int, int]] = []
        moving = [i for i in range(bit, p) if i & bit]
        sizes = [sum(where[q][i][2] for i in moving) for q in range(p)]
        send_base = list(top)
        for q in range(p):
            top[q] += sizes[q]
        recv_base = [0] * p
        for q in range(p):
            d = (q + bit) % p
            recv_base[d] = top[d]
            top[d] += sizes[q]
        new_where = [row[:] for row in where]
        for q in range(p):
            d = (q + bit) % p
            off = 0
            for i in moving:
                buf, at, n = where[q][i]
                if n:
                    packs.append((q, buf, at, n, send_base[q] + off))
                new_where[d][i] = (Buf.SCRATCH, recv_base[d] + off, n)
                if n and i < 2 * bit:  # t is i's highest bit: the block is home at d, from d - i
                    o = (d - i) % p
                    lands.append((d, recv_base[d] + off, n, coll.recv_offset(d, o)))
                off += n
            if sizes[q]:
                sends.append((q, d, send_base[q], sizes[q], recv_base[d]))
        where = new_where
        packs_all.append(packs)
        sends_all.append(sends)
        lands_all.append(lands)
    b = ScheduleBuilder(coll, "bruck", scratch_chunks=max(top, default=0))
    for t in range(max(rounds, 1)):
        with b.step():
            if t == 0:  # position 0, the own block, stays: into the output locally
                for r in range(p):
                    if coll.block(r, r):
                        b.copy(r, r, coll.send_offset(r, r), coll.block(r, r), dst_buf=Buf.OUTPUT,
                               dst_index=coll.recv_offset(r, r))
            if t:
                for d, at, n, out in lands_all[t - 1]:
                    b.copy(d, d, at, n, buf=Buf.SCRATCH, dst_buf=Buf.OUTPUT, dst_index=out)
            for q, buf, at, n, to in packs_all[t] if rounds else ():
                b.copy(q, q, at, n, buf=buf, dst_buf=Buf.SCRATCH, dst_index=to)
        with b.step():
            for q, d, at, n, to in sends_all[t] if rounds else ():
                b.copy(q, d, at, n, buf=Buf.SCRATCH, dst_index=to)
    with b.step():
        for d, at, n, out in lands_all[-1] if rounds else ():
            b.copy(d, d, at, n, buf=Buf.SCRATCH, dst_buf=Buf.OUTPUT, dst_index=out)
    return b.build()


GROUP = Parameter("group", 8, "GPUs per node (the last node may hold fewer)")
VIAS = ("dest", "source")
VIA = Parameter("via", "dest", "the rail a block crosses between nodes: dest (PXN) or source (DeepEP)",
                choices=VIAS)


def _check_via(p: int, params: Mapping[str, int | str]) -> str | None:
    via = params.get("via", "dest")
    return None if via in VIAS else f"via must be one of {', '.join(VIAS)}, got {via!r}"


@register(
    Kind.ALLTOALLV,
    "hierarchical",
    source="NCCL PXN (src/transport/net.cc, PXN); DeepEP internode dispatch",
    parameters=(CHUNKS, GROUP, VIA),
    constraints=("g = min(group, p); the last node holds p mod g GPUs when g does not divide p",
                 "via: dest or source"),
    check=_check_via,
    cost=Cost("dest: 2α + ((g-1)q + (q-1)g)·n/pβ; source: 3α + ((g-1) + (q-1)g + (q-1)(g-1))·n/pβ "
              "(uniform matrix, q = p/g nodes; a partial last node: per rank, see _hier_loads)",
              steps=lambda p, n, params: _hier_cost(p, n, params)[0],
              bytes=lambda p, n, params: _hier_cost(p, n, params)[1],
              reduced=lambda p, n, params: 0, sent_per_rank=lambda p, n, params: _hier_cost(p, n, params)[2]),
)
def hierarchical(ranks: int, *, chunks: int = 1, matrix: object = None, group: int = 8, via: str = "dest") -> Schedule:
    """Node-aware all-to-allv: gather onto the rail GPU in the node, one message per rail and node, scatter.

    NCCL's PXN (``via="dest"``: the rail of the destination GPU, so the scatter is empty) and DeepEP's
    internode dispatch (``via="source"``: the source GPU's own rail, so the gather is empty). Step 1:
    blocks within a node go direct, the others to the rail GPU's scratch, laid out per destination
    node (by destination GPU, then source GPU); step 2: each rail GPU sends each destination node's
    region in one message, straight into the output when it is all for that GPU; step 3: the rail
    GPU hands each GPU of its node its part. A block whose rail GPU is missing on a partial last node
    goes direct in step 1.
    """
    if via not in VIAS:
        raise RegistryError(f"alltoallv/hierarchical: via must be one of {', '.join(VIAS)}, got {via!r}")
    coll = collective_for(ranks, matrix, chunks)
    p = ranks
    g = max(1, min(group, p))

    def gpu(node: int, local: int) -> int | None:
        r = node * g + local
        return r if r < p else None

    # Regions: at rail GPU (a, r), for destination node b, the blocks (m, l) with that rail, m-major then l.
    region: dict[tuple[int, int, int], list[tuple[int, int]]] = {}
    direct_blocks: list[tuple[int, int]] = []
    for i in range(p):
        a, l_ = divmod(i, g)
        for j in range(p):
            if not coll.block(i, j):
                continue
            b_, m = divmod(j, g)
            r = m if via == "dest" else l_
            if a == b_ or gpu(a, r) is None or gpu(b_, r) is None:
                direct_blocks.append((i, j))
            else:
                region.setdefault((a, r, b_), []).append((m, l_))
    top = [0] * p
    gather: list[tuple[int, int, int, int, int]] = []  # (src, hub, src offset, count, hub scratch offset)
    exchange: list[tuple[int, int, int, int, Buf, int]] = []
    scatter: list[tuple[int, int, int, int, int]] = []
    for (a, r, b_), blocks in sorted(region.items()):
        blocks.sort()
        hub, far = gpu(a, r), gpu(b_, r)
        assert hub is not None and far is not None
        base = top[hub]
        pieces: list[tuple[int, int, int]] = []  # (m, l, offset in region)
        off = 0
        for m, l_ in blocks:
            i, j = a * g + l_, b_ * g + m
            n = coll.block(i, j)
            gather.append((i, hub, coll.send_offset(i, j), n, base + off))
            pieces.append((m, l_, off))
            off += n
        top[hub] += off
        if all(m == r for m, _ in blocks) and _consecutive([l_ for _, l_ in blocks]):
            j = b_ * g + r
            exchange.append((hub, far, base, off, Buf.OUTPUT, coll.recv_offset(j, a * g + blocks[0][1])))
            continue
        landing = top[far]
        top[far] += off
        exchange.append((hub, far, base, off, Buf.SCRATCH, landing))
        for m, l_, at in pieces:
            j, i = b_ * g + m, a * g + l_
            scatter.append((far, j, landing + at, coll.block(i, j), coll.recv_offset(j, i)))
    b = ScheduleBuilder(coll, "hierarchical", scratch_chunks=max(top, default=0))
    with b.step():
        for i, j in direct_blocks:
            b.copy(i, j, coll.send_offset(i, j), coll.block(i, j), dst_buf=Buf.OUTPUT,
                   dst_index=coll.recv_offset(j, i))
        for i, hub, at, n, to in gather:
            b.copy(i, hub, at, n, dst_buf=Buf.SCRATCH, dst_index=to)
    with b.step():
        for hub, far, at, n, buf, to in exchange:
            b.copy(hub, far, at, n, buf=Buf.SCRATCH, dst_buf=buf, dst_index=to)
    with b.step():
        for far, j, at, n, out in _merged(scatter):
            b.copy(far, j, at, n, buf=Buf.SCRATCH, dst_buf=Buf.OUTPUT, dst_index=out)
    return b.build()


def _consecutive(xs: list[int]) -> bool:
    return all(y == x + 1 for x, y in itertools.pairwise(xs))


def _merged(pieces: list[tuple[int, int, int, int, int]]) -> list[tuple[int, int, int, int, int]]:
    """Scatter pieces with both ends contiguous (consecutive sources of one region) as one transfer each."""
    out: list[tuple[int, int, int, int, int]] = []
    for far, j, at, n, to in pieces:
        if out and out[-1][:2] == (far, j) and out[-1][2] + out[-1][3] == at and out[-1][4] + out[-1][3] == to:
            out[-1] = (far, j, out[-1][2], out[-1][3] + n, out[-1][4])
        else:
            out.append((far, j, at, n, to))
    return out


def _hier_loads(p: int, group: int, via: str) -> list[tuple[list[int], list[int]]]:
    """Per step, the blocks each rank sends and receives over the network, for the uniform matrix (closed form).

    Rank (a, l) is GPU l of node a; q = p // g full nodes of g GPUs and one of e = p mod g; ``cnt(a, m)``
    is the number of other nodes that have a GPU m. ``dest``: step 1 sends s_a - 1 blocks in the node,
    one for each other node with a GPU m to each rail GPU m != l, and the blocks for GPUs m >= s_a of
    other nodes direct; step 2 sends each other node that has GPU r the s_a blocks of node a.
    ``source``: step 1 is the blocks in the node and those for nodes without GPU l; step 2 sends each
    other node with a GPU l its s_b blocks; step 3 hands each of them to the node's s_b - 1 other GPUs.
    """
    g = max(1, min(group, p))
    q, e = divmod(p, g)
    sizes = [g] * q + ([e] if e else [])
    nodes = range(len(sizes))

    def cnt(a: int, m: int) -> int:
        return sum(1 for b in nodes if b != a and sizes[b] > m)

    ranks = [(a, l_) for a in nodes for l_ in range(sizes[a])]
    if via == "dest":
        s1 = [sizes[a] - 1 + sum(cnt(a, m) for m in range(sizes[a]) if m != l_)
              + sum(max(0, sizes[b] - sizes[a]) for b in nodes if b != a) for a, l_ in ranks]
        r1 = [sizes[b] - 1 + (sizes[b] - 1) * cnt(b, m) + sum(sizes[a] for a in nodes if a != b and sizes[a] <= m)
              for b, m in ranks]
        s2 = [cnt(a, r) * sizes[a] for a, r in ranks]
        r2 = [sum(sizes[a] for a in nodes if a != b and sizes[a] > r) for b, r in ranks]
        return [(s1, r1), (s2, r2)]
    s1 = [sizes[a] - 1 + sum(sizes[b] for b in nodes if b != a and sizes[b] <= l_) for a, l_ in ranks]
    r1 = [sizes[b] - 1 + sum(max(0, sizes[a] - sizes[b]) for a in nodes if a != b) for b, _m in ranks]
    s2 = [sum(sizes[b] for b in nodes if b != a and sizes[b] > l_) for a, l_ in ranks]
    r2 = [cnt(b, l_) * sizes[b] for b, l_ in ranks]
    s3 = [cnt(b, l_) * (sizes[b] - 1) for b, l_ in ranks]
    r3 = [sum(cnt(b, l_) for l_ in range(sizes[b]) if l_ != m) for b, m in ranks]
    return [(s1, r1), (s2, r2), (s3, r3)]


def _hier_cost(p: int, n: float, k: Mapping[str, int | str]) -> tuple[int, float, float]:
    """Network steps, Σ over steps of the busiest rank's bytes, and the most bytes a rank sends (uniform matrix)."""
    loads = _hier_loads(p, int(k.get("group", 8)), str(k.get("via", "dest")))
    block = n / p
    steps = sum(1 for sent, _ in loads if any(sent))
    busiest = sum(max(max(sent), max(recv)) for sent, recv in loads) * block
    total = max(sum(col) for col in zip(*(sent for sent, _ in loads), strict=True)) * block
    return steps, busiest, total
