"""Switch operations lowered to point-to-point transfers: ``point_to_point(schedule)``, a Schedule -> Schedule
transform with the same final state, for the executors that have only sends and receives (gloo, NCCL
point-to-point).

One rank of each operation acts as the switch (docs/design.md, "Lowering switch operations"):

- a multicast is the source rank sending its chunks to every target, in the operation's own step;
- an in-switch reduction picks a *hub*: the first target that is also a source, else the first source.
  In the operation's step the hub copies its own chunks into scratch (and every other source sends its
  chunks into scratch slots of the hub when the step also overwrites a source, so that the values of the
  step's start are kept); in a second step the other sources' chunks are reduced into the hub's copy;
  in a third the hub sends the sum to every target.

The extra steps follow the operation's step and hold nothing else, so every transfer of the original
step still reads the state at the step's start and every later step sees all of its writes. Scratch
grows by the most chunks one rank holds for the operations of one step.
"""

from __future__ import annotations

from algorithms.ir import Buf, Endpoint, Op, Schedule, Step, SwitchOp, SwitchOpKind, Transfer, switch_ops_by_step

__all__ = ["point_to_point"]


def _slots(rank: int, buf: Buf, index: int, count: int) -> set[tuple[int, Buf, int]]:
    return {(rank, buf, index + k) for k in range(count)}


def _hub(op: SwitchOp) -> int:
    sources = [e.rank for e in op.sources]
    return next((e.rank for e in op.targets if e.rank in sources), sources[0])


def _send(src: Endpoint, dst: Endpoint, count: int, op: Op = Op.COPY) -> Transfer:
    return Transfer(src.rank, dst.rank, src.buf, src.index, dst.buf, dst.index, count, op)


def _scratch(used: dict[int, int], base: int, rank: int, count: int) -> Endpoint:
    """``count`` fresh scratch chunks of ``rank`` for this step (``used``: how many it has taken so far)."""
    at = base + used.get(rank, 0)
    used[rank] = used.get(rank, 0) + count
    return Endpoint(rank, Buf.SCRATCH, at)


def point_to_point(schedule: Schedule) -> Schedule:
    """The schedule with every switch operation replaced by the transfers of one rank acting as the switch.

    A schedule without switch operations is returned as it is.

    >>> from algorithms import Collective, Kind, ScheduleBuilder
    >>> b = ScheduleBuilder(Collective(Kind.ALLREDUCE, 3, 1), "sharp")
    >>> with b.step():
    ...     b.switch_reduce("sw", [0, 1, 2], [0, 1, 2], 0)
    >>> s = point_to_point(b.build())
    >>> (s.num_steps, s.num_transfers, s.scratch_chunks, s.switch_ops)
    (3, 6, 1, ())
    """
    if not schedule.switch_ops:
        return schedule
    base = schedule.scratch_chunks
    extra = 0
    steps: list[Step] = []
    for step, ops in zip(schedule.steps, switch_ops_by_step(schedule), strict=True):
        if not ops:
            steps.append(step)
            continue
        first = list(step.transfers)
        # What the step writes at its end: a reduction's sources must be read before that, or staged.
        written = {s for t in step.transfers for s in _slots(t.dst, t.dst_buf, t.dst_index, t.count)}
        for op in ops:
            if op.op is SwitchOpKind.MULTICAST:
                written |= {s for e in op.targets for s in _slots(e.rank, e.buf, e.index, op.count)}
        gather: list[Transfer] = []
        send: list[Transfer] = []
        used: dict[int, int] = {}
        for op in ops:
            n = op.count
            if op.op is SwitchOpKind.MULTICAST:
                first.extend(_send(op.sources[0], t, n) for t in op.targets)
                continue
            hub = _hub(op)
            own = next(e for e in op.sources if e.rank == hub)
            acc = _scratch(used, base, hub, n)
            first.append(_send(own, acc, n))
            stage = any(s in written for e in op.sources for s in _slots(e.rank, e.buf, e.index, n))
            for e in op.sources:
                if e is own:
                    continue
                if stage:
                    held = _scratch(used, base, hub, n)
                    first.append(_send(e, held, n))
                    gather.append(_send(held, acc, n, Op.REDUCE))
                else:
                    gather.append(_send(e, acc, n, Op.REDUCE))
            send.extend(_send(acc, t, n) for t in op.targets)
        steps.append(Step(tuple(first)))
        if gather:
            steps.append(Step(tuple(gather)))
        if send:
            steps.append(Step(tuple(send)))
        extra = max(extra, *used.values(), 0)
    return Schedule(schedule.collective, schedule.name, steps, base + extra)
