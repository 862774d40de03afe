"""Small hand-built schedules for the runner tests: every kind, plus the awkward patterns.

The registry holds the real algorithms; these cover kinds that may have none
yet and patterns the runner must handle whatever the library holds: a
pairwise exchange in one step (receive into staging, then apply), a local
swap in one step (snapshot, then write), scratch buffers, multi-chunk
transfers and local copies. Each one passes ``sim.verify.verifier.verify``.
"""

from __future__ import annotations

import itertools

from algorithms.builder import ScheduleBuilder
from algorithms.ir import Buf, Collective, Kind, Schedule

__all__ = ["extra_schedules"]


def direct_reduce(p: int, root: int, k: int) -> Schedule:
    """Every rank reduces its whole buffer into the root, one transfer of k chunks each."""
    b = ScheduleBuilder(Collective(Kind.REDUCE, p, k, root), "test-direct")
    with b.step():
        for r in range(p):
            if r != root:
                b.reduce(r, root, 0, k)
    return b.build()


def chain_reduce(p: int, root: int, k: int) -> Schedule:
    """A chain through scratch: rank root+1+i passes its partial sum on, chunk by chunk."""
    b = ScheduleBuilder(Collective(Kind.REDUCE, p, k, root), "test-chain", scratch_chunks=k)
    order = [(root + 1 + i) % p for i in range(p - 1)] + [root]
    for a, nxt in itertools.pairwise(order):
        with b.step():
            for c in range(k):
                b.reduce(a, nxt, c)
    return b.build()


def direct_scatter(p: int, root: int, k: int) -> Schedule:
    """The root sends segment r to rank r; its own segment is a local copy."""
    b = ScheduleBuilder(Collective(Kind.SCATTER, p, k, root), "test-direct")
    with b.step():
        for r in range(p):
            b.copy(root, r, r * k, k, dst_index=0, dst_buf=Buf.OUTPUT)
    return b.build()


def relay_scatter(p: int, root: int, k: int) -> Schedule:
    """Through scratch: the root copies segment r to rank r's scratch, which copies it to its output."""
    b = ScheduleBuilder(Collective(Kind.SCATTER, p, k, root), "test-relay", scratch_chunks=k)
    with b.step():
        for r in range(p):
            for c in range(k):
                b.copy(root, r, r * k + c, dst_index=c, dst_buf=Buf.SCRATCH)
    with b.step():
        for r in range(p):
            b.copy(r, r, 0, k, buf=Buf.SCRATCH, dst_buf=Buf.OUTPUT)
    return b.build()


def direct_gather(p: int, root: int, k: int) -> Schedule:
    """Every rank sends its buffer to the root's segment."""
    b = ScheduleBuilder(Collective(Kind.GATHER, p, k, root), "test-direct")
    with b.step():
        for r in range(p):
            b.copy(r, root, 0, k, dst_index=r * k, dst_buf=Buf.OUTPUT)
    return b.build()


def pairwise_alltoall(p: int, k: int) -> Schedule:
    """Rank r sends segment d to rank d, all in one step, chunk by chunk."""
    b = ScheduleBuilder(Collective(Kind.ALLTOALL, p, k), "test-pairwise")
    with b.step():
        for r in range(p):
            for d in range(p):
                for c in range(k):
                    b.copy(r, d, d * k + c, dst_index=r * k + c, dst_buf=Buf.OUTPUT)
    return b.build()


def swap_allgather(p: int, k: int) -> Schedule:
    """Ring all-gather, then twice a local swap of output segments 0 and 1 in one step.

    In a swap both transfers read the slot the other writes in the same step,
    so the runner must snapshot a source before the other write lands.
    """
    b = ScheduleBuilder(Collective(Kind.ALLGATHER, p, k), "test-swap")
    with b.step():
        for r in range(p):
            b.copy(r, r, 0, k, dst_index=r * k, dst_buf=Buf.OUTPUT)
    for s in range(p - 1):
        with b.step():
            for r in range(p):
                origin = (r - s) % p
                for c in range(k):
                    b.copy(r, (r + 1) % p, origin * k + c, buf=Buf.OUTPUT)
    for _ in range(2 if p >= 2 else 0):
        with b.step():
            for r in range(p):
                b.copy(r, r, 0, k, buf=Buf.OUTPUT, dst_index=k)
                b.copy(r, r, k, k, buf=Buf.OUTPUT, dst_index=0)
    return b.build()


def rotate_allgather(p: int, k: int) -> Schedule:
    """All-gather by rotating one scratch buffer around the ring: in each rotation step every rank
    sends its scratch to the next rank's scratch, the very slots it is overwritten in by the previous
    rank, so every receive must land in staging until the same-step send has read the slot."""
    b = ScheduleBuilder(Collective(Kind.ALLGATHER, p, k), "test-rotate", scratch_chunks=k)
    with b.step():
        for r in range(p):
            b.copy(r, r, 0, k, dst_buf=Buf.SCRATCH)
            b.copy(r, r, 0, k, dst_index=r * k, dst_buf=Buf.OUTPUT)
    for s in range(1, p):
        with b.step():
            for r in range(p):
                b.copy(r, (r + 1) % p, 0, k, buf=Buf.SCRATCH)
        with b.step():
            for r in range(p):
                b.copy(r, r, 0, k, buf=Buf.SCRATCH, dst_index=((r - s) % p) * k, dst_buf=Buf.OUTPUT)
    return b.build()


def swap_allreduce(p: int, k: int) -> Schedule:
    """Naive all-reduce: everyone reduces into rank 0, then rank 0 sends back; then a pairwise
    exchange of identical data between ranks 0 and 1 in one step (both read and write the same slots)."""
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, p, k), "test-swap")
    for r in range(1, p):
        with b.step():
            b.reduce(r, 0, 0, k)
    with b.step():
        for r in range(1, p):
            b.copy(0, r, 0, k)
    if p >= 2:
        with b.step():
            b.copy(0, 1, 0, k)
            b.copy(1, 0, 0, k)
    return b.build()


def extra_schedules(p: int, k: int = 2) -> list[Schedule]:
    """Hand-built schedules of every kind for ``p`` ranks, ``k`` chunks per segment."""
    root = p - 1
    return [
        direct_reduce(p, root, k), chain_reduce(p, 0, k), direct_scatter(p, root, k), relay_scatter(p, 0, k),
        direct_gather(p, root, k), pairwise_alltoall(p, k), swap_allgather(p, k), rotate_allgather(p, k),
        swap_allreduce(p, k),
    ]
