"""Running a plan as MSCCL++'s executor runs it, on the happens-before its synchronisation gives: ``replay``.

Every thread block runs its ops in order (a ``pipeline``'s ops once, over their whole ranges: the executor
repeats them over consecutive slices, signal for signal). What orders one op after another:

- within a thread block, only a thread-block barrier: ``nop`` (``__syncthreads``) or ``barrier``. Data ops
  between two of them run together (their threads interleave), and a ``signal``, ``wait``, ``flush`` or
  semaphore op is done by a few threads while the others go on, so a signal publishes what came before the
  last barrier before it, and what a wait learns reaches the ops after the next barrier;
- ``signal``/``wait`` on a channel: the k-th wait on a channel meets the k-th signal of its partner (the
  k-th channel of the other GPU back to this one), and the waiter learns all the signaller had published.
  The relaxed forms (``rlxsignal``/``rlxwait``) count the same here: MSCCL++'s own NVLS plans end on them;
- a port channel's proxy carries out ``put``/``pws``/``pwsf``/``ppkt`` in issue order, after what the
  issuing block had published; a signal over that channel (``pws``'s own too) reaches the peer after them,
  and ``flush`` (and ``pwsf``) wait for them;
- ``barrier`` (barrier_id, num_threadblocks): the blocks of one GPU meet, num_threadblocks at a time;
- ``sem_release``/``sem_acquire``: a GPU's counting semaphores, started at their ``init_value``;
- a read of a packet slot waits for the packet written there (LL: the flag travels with the data).

The replay runs every block as far as it can. When none can go on and some are not done, the plan
deadlocks: the blocked ops are named, with the cycle of waits they form, or the signal, release, barrier
partner or packet nothing left can provide. It checks every read and write against the happens-before
(vector clocks over thread blocks and proxies): two accesses to one slot, one a write, not ordered, are a
race, named by both ops. A signal no wait meets, or a semaphore not back at its start value, is reported
too (the executor's next run would start out of step), and so is an access to a GPU's memory that nothing
orders before that GPU's run ends (but for a proxy's read of its own GPU's source: the proxy finishes the
puts it was handed), or a plain access from another GPU that nothing orders after the GPU started the run
(packets are exempt: their flag tells one run's from the next). Every data op gets a *level*: one more than the
levels of everything that happens before it, which is how the reader lays the plan out in steps.

Two packet ops of one thread block with no barrier between them are ordered where they touch one plain range
the same way (``LANE_OPS``, the same range and ``tbg_info``): the executor's packet handlers give packet k of a
range to thread k mod blockDim.x (``for (idx = threadIdx.x; idx < nPackets; idx += blockDim.x)``), so the one
thread that wrote an element reads it back, in program order. MSCCL++'s default multi-node reduce-scatter
unpacks a packet into its result and adds the remote partials to it that way, with no ``nop`` between.

A packet that no op reads is a *hint* (``dead_packet``), not a problem: the DSL's fused ``recspkt`` keeps a
packet copy its plan may never read, and a packet carries no state into the next run (its flag tells the runs
apart). In a ``test`` plan (the DSL's op-level probes) a packet read that no op of the plan writes reads a
packet its test harness put there, as it reads the plain buffers' contents.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from algorithms.errors import ScheduleError
from algorithms.formats.mscclpp.buffers import Layout, layout_of
from algorithms.formats.mscclpp.ops import DATA_OPS, PROXY_OPS, Effect, Ref, effect_of, packet_writes
from algorithms.formats.mscclpp.plan import ExecutionPlan, PlanOp
from algorithms.ir import Op

__all__ = ["Event", "HINTS", "LANE_OPS", "Problem", "Replay", "replay", "MAX_RACES"]

LANE_OPS = frozenset({"cpkt", "upkt", "repkt", "respkt", "recpkt", "recspkt", "ppkt"})
"""Ops whose threads take a range packet by packet (thread k: packet k mod blockDim.x; ``ppkt`` over a memory
channel only: over a port channel the proxy copies)."""
_PLAIN = ("i", "o", "s")

MAX_RACES = 20
HINTS = frozenset({"dead_packet"})
"""Problem kinds that are hints: the plan is right with them."""
"""Races reported at most (the first ones the replay meets); a plan with more has them all cut off here."""
Slot = tuple[int, Any, int]
VC = np.ndarray


@dataclass(frozen=True, slots=True)
class Event:
    """A data op as it ran: its effect and the level of its first phase (its phases take the levels after)."""

    op: PlanOp
    effect: Effect
    level: int


@dataclass(frozen=True, slots=True)
class Problem:
    """What is wrong with a plan's synchronisation: ``kind`` is ``deadlock``, ``race`` or ``unmatched``, or the
    hint ``dead_packet`` (``HINTS``: not wrong); ``ops`` are the ``where`` of the ops it names (first: the one to
    look at)."""

    kind: str
    message: str
    ops: tuple[str, ...]


@dataclass(slots=True)
class Replay:
    layout: Layout
    events: list[Event]
    problems: list[Problem]


def _what(op: PlanOp) -> str:
    return f"{op.where} ({op.name})"


class Know(NamedTuple):
    """What an op knows has happened: a vector clock (None: a relaxed signal, which publishes no data), the
    highest level among it, and the GPUs known to have started the run (a bit each)."""

    vc: VC | None
    lvl: int
    started: int

    def join(self, other: Know | None) -> Know:
        if other is None:
            return self
        a, b = self.vc, other.vc
        vc = a if b is None else b if a is None else np.maximum(a, b)
        return Know(vc, max(self.lvl, other.lvl), self.started | other.started)


@dataclass(slots=True)
class _Block:
    """One thread block during the replay: its code, where it is, what its ops after the last fence know
    (``fenced``), what its control thread knows (``ctl``: the fenced plus what waits brought since), and what
    the data ops since the last fence learnt from packets (``grp``) and the last level they reach."""

    gpu: int
    tb: int
    tid: int
    code: list[tuple[PlanOp, Effect | None]]
    fenced: Know
    ctl: Know
    pc: int = 0
    grp: Know | None = None
    grp_end: int = 0
    arrived: bool = False
    dirty: bool = False
    """A data op ran since the last fence (else a fence that learnt nothing since changes nothing)."""

    @property
    def done(self) -> bool:
        return self.pc >= len(self.code)

    def fence(self) -> None:
        if not self.dirty and self.ctl is self.fenced:  # nothing ran or came in since the last: skip the copy
            return
        self.dirty = False
        k = self.ctl.join(self.grp)
        assert k.vc is not None and self.fenced.vc is not None
        vc = k.vc.copy()
        vc[self.tid] = self.fenced.vc[self.tid] + 1
        self.fenced = self.ctl = Know(vc, max(k.lvl, self.grp_end), k.started)
        self.grp, self.grp_end = None, self.fenced.lvl

    def learn(self, k: Know) -> None:
        self.ctl = self.ctl.join(k)


class _Run:
    def __init__(self, plan: ExecutionPlan, layout: Layout) -> None:
        self.plan = plan
        self.layout = layout
        code_of = []
        for g in plan.gpus:
            for tb in g.threadblocks:
                code: list[tuple[PlanOp, Effect | None]] = []
                for op in tb.ops:
                    for o in (op.inner if op.name == "pipeline" else (op,)):
                        code.append((o, effect_of(o) if o.name in DATA_OPS else None))
                code_of.append((g.id, tb.id, code))
        # Vector-clock components: every thread block, then every port channel's proxy.
        self.proxy: dict[tuple[int, int, int], int] = {}
        for g in plan.gpus:
            for tb in g.threadblocks:
                for op in tb.ops:
                    for o in (op, *op.inner):
                        if o.channel_type == "port":
                            for peer, k in o.channels:
                                self.proxy.setdefault((g.id, peer, k), len(code_of) + len(self.proxy))
        zero = np.zeros(len(code_of) + len(self.proxy), dtype=np.int64)
        self.blocks = [_Block(gpu, tb, i, code, Know(zero, 0, 1 << gpu), Know(zero, 0, 1 << gpu))
                       for i, (gpu, tb, code) in enumerate(code_of)]
        self.pknow = {pid: Know(zero, 0, 1 << gpu) for (gpu, _, _), pid in self.proxy.items()}
        self.signals: dict[tuple[int, int, str, int], deque[tuple[Know, PlanOp]]] = {}
        self.senders: dict[tuple[int, int, str, int], dict[str, PlanOp]] = {}
        self.receivers: dict[tuple[int, int, str, int], dict[str, PlanOp]] = {}
        self.sems: dict[tuple[int, int], tuple[int, deque[tuple[Know | None, PlanOp | None]]]] = {
            (g.id, i): (v, deque([(None, None)] * v)) for g in plan.gpus for i, v in enumerate(g.semaphores)}
        self.barriers: dict[tuple[int, int], list[_Block]] = {}
        self.packets: dict[Slot, Know] = {}
        self.packet_writer: dict[Slot, PlanOp] = {}
        self.packet_read: set[Slot] = set()
        self.reading: set[Slot] = set()  # the packet slots the op being applied reads
        self.access: dict[Slot, list[Any]] = {}  # slot -> [writer tid, epoch, op, [(tid, epoch, op) reads]]
        self.waiting: dict[Any, set[int]] = {}
        self.ready: deque[int] = deque()
        self.queued: set[int] = set()
        self.events: list[Event] = []
        self.problems: list[Problem] = []
        self.raced: set[tuple[str, ...]] = set()
        self._slots: dict[Any, list[Slot]] = {}
        self.zero = zero
        self.harness: set[Slot] = self.provided() if layout.custom else set()

    def provided(self) -> set[Slot]:
        """The packet slots a ``test`` plan reads and none of its ops writes: its harness's (module docstring)."""
        read: set[Slot] = set()
        written: set[Slot] = set()
        for b in self.blocks:
            for op, e in b.code:
                if e is not None:
                    read.update(s for r in e.packet_reads for s in self.slots(r, op, "src_buff"))
                    written.update(s for r in packet_writes(e) for s in self.slots(r, op, "dst_buff"))
        return read - written

    # ---------------------------------------------------------------- helpers

    def slots(self, ref: Ref, op: PlanOp, side: str) -> list[Slot]:
        key: Any = ref if op.tbg is None else (ref, op.tbg)
        got = self._slots.get(key)
        if got is None:
            buf, start, n = self.layout.slots(ref.rank, ref.space, ref.index, ref.size, op.tbg, f"{op.where} {side}")
            got = self._slots[key] = [(ref.rank, buf, i) for i in range(start, start + n)]
        return got

    def enqueue(self, tid: int) -> None:
        if tid not in self.queued:
            self.ready.append(tid)
            self.queued.add(tid)

    def wake(self, key: Any) -> None:
        for i in self.waiting.pop(key, ()):
            self.enqueue(i)

    def block_on(self, b: _Block, key: Any) -> None:
        self.waiting.setdefault(key, set()).add(b.tid)

    @staticmethod
    def channel(b: _Block, op: PlanOp, peer: int, k: int, sending: bool) -> tuple[int, int, str, int]:
        return (b.gpu, peer, op.channel_type, k) if sending else (peer, b.gpu, op.channel_type, k)

    def post(self, key: tuple[int, int, str, int], know: Know, op: PlanOp) -> None:
        queue = self.signals.get(key)
        if queue is None:
            queue = self.signals[key] = deque()
            self.senders[key] = {}
        queue.append((know, op))
        self.senders[key][op.where] = op
        if self.waiting:
            self.wake(("sig", key))

    def send(self, b: _Block, op: PlanOp, relaxed: bool) -> None:
        for peer, k in op.channels:
            know = b.ctl
            if op.channel_type == "port":  # the signal goes through the proxy, after its puts
                know = know.join(self.pknow[self.proxy[(b.gpu, peer, k)]])
            self.post(self.channel(b, op, peer, k, True), know, op)

    # ---------------------------------------------------------------- races

    def report(self, key: tuple[str, ...], message: str, names: tuple[str, ...]) -> None:
        if key in self.raced or len(self.raced) >= MAX_RACES:
            return
        self.raced.add(key)
        self.problems.append(Problem("race", message, names))

    def race(self, kind: str, slot: Slot, first: PlanOp, second: PlanOp) -> None:
        where = self.layout.describe(*slot)
        verbs = {"write-write": ("writes", "writes"), "read-write": ("reads", "writes"),
                 "write-read": ("writes", "reads")}[kind]
        self.report((first.where, second.where), f"race: {_what(first)} {verbs[0]} {where} and {_what(second)} "
                    f"{verbs[1]} it, and nothing orders the two", (second.where, first.where))

    def touch(self, slots: list[Slot], write: bool, tid: int, epoch: int, k: VC, op: PlanOp) -> None:
        access = self.access
        for s in slots:
            a = access.get(s)
            if a is None:
                access[s] = [tid, epoch, op, []] if write else [-1, 0, None, [(tid, epoch, op)]]
                continue
            wt, we, wop, reads = a
            if wop is not None and wop is not op and k[wt] < we and not (
                    wt == tid and we == epoch and self.same_lanes(wop, op, s)):
                self.race("write-write" if write else "write-read", s, wop, op)
            if write:
                for rt, re_, rop in reads:
                    if rop is not op and k[rt] < re_ and not (rt == tid and re_ == epoch
                                                              and self.same_lanes(rop, op, s)):
                        self.race("read-write", s, rop, op)
                a[0], a[1], a[2], a[3] = tid, epoch, op, []
            else:
                reads.append((tid, epoch, op))

    def same_lanes(self, first: PlanOp, then: PlanOp, slot: Slot) -> bool:
        """Whether two ops of one thread block, with no barrier between them, touch ``slot`` by the same thread
        (module docstring): both packet ops run by the block, over one plain range holding it, one tbg part."""
        if first.name not in LANE_OPS or then.name not in LANE_OPS or first.tbg != then.tbg:
            return False
        if "port" in (first.channel_type, then.channel_type):
            return False

        def ranges(op: PlanOp) -> set[Ref]:
            e = effect_of(op)
            return {r for r in (*e.reads(), *e.writes()) if r.space in _PLAIN and r.rank == op.gpu
                    and slot in self.slots(r, op, "src_buff")}

        return bool(ranges(first) & ranges(then))

    def early(self, op: PlanOp, refs: list[Ref], started: int, verb: str) -> None:
        """A plain access to another GPU's memory must come after that GPU is known to have started the run
        (else its previous run, or its caller, may still be using the memory). Packets are exempt: their flag
        tells one run's from another's."""
        for r in refs:
            if r.rank != op.gpu and r.space in ("i", "o", "s") and not started >> r.rank & 1:
                self.report((op.where, "early"), f"race: {_what(op)} {verb} {r.text()} before anything tells it "
                            f"gpu {r.rank} has started the run (a signal from it, then a nop after the wait, would)",
                            (op.where,))
                return

    # ---------------------------------------------------------------- data

    def data(self, b: _Block, op: PlanOp, effect: Effect) -> bool:
        """Run a data op (False: it waits for a packet, and ``b`` is registered as waiting)."""
        pslots = [s for r in effect.packet_reads for s in self.slots(r, op, "src_buff")]
        for s in pslots:
            if s not in self.packets:
                if s in self.harness:  # a test plan's packet its harness provides (module docstring)
                    self.packets[s] = Know(self.zero, 0, 0)
                    continue
                self.block_on(b, ("pkt", s))
                return False
        if op.name in PROXY_OPS and op.channel_type == "port":
            # The proxy of each move's channel carries it out (move i goes over channel_ids[i]).
            if len(op.channels) < len(effect.moves):
                raise ScheduleError(f"{op.where}: {op.name} over port channels names {len(op.channels)} channels "
                                    f"(channel_ids) for {len(effect.moves)} destinations")
            self.reading = set()
            for i, m in enumerate(effect.moves):
                peer, k = op.channels[i]
                pid = self.proxy[(b.gpu, peer, k)]
                know = self.pknow[pid].join(b.fenced)
                assert know.vc is not None
                after = self.apply(op, Effect((m,), (), (), 1), pid, int(know.vc[pid]) + 1, know)
                self.pknow[pid] = after
                if op.name in ("pws", "pwsf"):
                    self.post((b.gpu, peer, "port", k), b.ctl.join(after), op)
                if op.name == "pwsf":
                    b.learn(after)
            return True
        know = b.fenced
        self.packet_read.update(pslots)
        self.reading = set(pslots)
        for s in pslots:
            know = know.join(self.packets[s])
        assert b.fenced.vc is not None
        after = self.apply(op, effect, b.tid, int(b.fenced.vc[b.tid]) + 1, know)
        b.dirty = True
        b.grp_end = max(b.grp_end, after.lvl)
        if pslots:
            b.grp = know if b.grp is None else b.grp.join(know)
        return True

    def apply(self, op: PlanOp, effect: Effect, tid: int, epoch: int, know: Know) -> Know:
        """Record ``effect`` done by vector-clock component ``tid`` at ``epoch`` knowing ``know``: its accesses,
        its event (from the level after ``know``'s), the packets it writes; what is known after it."""
        assert know.vc is not None
        start = know.lvl + 1
        end = start + effect.phases - 1
        reads, writes = effect.reads(), effect.writes()
        self.early(op, reads, know.started, "reads")
        self.early(op, writes, know.started, "writes")
        for r in reads:
            slots = self.slots(r, op, "src_buff")
            if r.space[0] == "p":  # a packet read (a proxy's copy of packets too)
                self.packet_read.update(slots)
            self.touch(slots, False, tid, epoch, know.vc, op)
        for r in writes:
            self.touch(self.slots(r, op, "dst_buff"), True, tid, epoch, know.vc, op)
        seen: dict[int, set[Slot]] = {}  # a phase's copies and stores: one slot twice is two writes racing
        copies = [(m.phase, m.dst) for m in effect.moves if m.op is Op.COPY] + [
            (sm.phase, t) for sm in effect.switch for t in sm.targets]
        for phase, r in copies if len(copies) > 1 else ():
            slots = self.slots(r, op, "dst_buff")
            twice = seen.setdefault(phase, set()).intersection(slots)
            if twice:
                where = self.layout.describe(*min(twice))
                self.report((op.where, "twice"), f"race: {_what(op)} writes {where} twice (two of its destinations "
                            "overlap)", (op.where,))
            seen[phase].update(slots)
        self.events.append(Event(op, effect, start))
        vc = know.vc.copy()
        vc[tid] = epoch
        after = Know(vc, end, know.started)
        for r in packet_writes(effect):
            for s in self.slots(r, op, "dst_buff"):
                first = self.packet_writer.get(s)
                if first is not None and first is not op and s not in self.reading:  # (a store of what it read: same)
                    self.report((first.where, op.where, "packet"), f"race: {_what(first)} and {_what(op)} both "
                                f"write a packet in {self.layout.describe(*s)}: a reader may take either",
                                (op.where, first.where))
                self.packets[s] = after
                self.packet_writer[s] = op
                self.wake(("pkt", s))
        return after

    # ---------------------------------------------------------------- the loop

    def step(self, b: _Block) -> bool:
        """Run ``b``'s next op; False when it must wait (and is registered as waiting)."""
        op, effect = b.code[b.pc]
        name = op.name
        if effect is not None:
            if not self.data(b, op, effect):
                return False
        elif name == "nop":
            b.fence()
        elif name in ("signal", "rlxsignal"):
            self.send(b, op, name == "rlxsignal")
        elif name in ("wait", "rlxwait"):
            keys = [self.channel(b, op, peer, k, False) for peer, k in op.channels]
            single = len(set(keys)) == len(keys)
            for key in keys:
                if len(self.signals.get(key, ())) < (1 if single else keys.count(key)):
                    self.block_on(b, ("sig", key))
                    return False
            for key in keys:
                b.learn(self.signals[key].popleft()[0])
                self.receivers.setdefault(key, {})[op.where] = op
        elif name == "flush":
            for peer, k in op.channels:
                if op.channel_type == "port":
                    b.learn(self.pknow[self.proxy[(b.gpu, peer, k)]])
        elif name == "sem_release":
            for sid in op.semaphores:
                self.sems[(b.gpu, sid)][1].append((b.ctl, op))
                self.wake(("sem", b.gpu, sid))
        elif name == "sem_acquire":
            for sid in op.semaphores:
                if len(self.sems[(b.gpu, sid)][1]) < op.semaphores.count(sid):
                    self.block_on(b, ("sem", b.gpu, sid))
                    return False
            for sid in op.semaphores:
                b.learn(self.sems[(b.gpu, sid)][1].popleft()[0])  # type: ignore[arg-type]
        elif name == "barrier":
            assert op.barrier is not None
            if b.arrived:
                return False
            b.fence()
            b.arrived = True
            group = self.barriers.setdefault((b.gpu, op.barrier[0]), [])
            group.append(b)
            if len(group) < op.barrier[1]:
                return False
            del self.barriers[(b.gpu, op.barrier[0])]
            know = group[0].fenced
            for m in group[1:]:
                know = know.join(m.fenced)
            for m in group:
                m.fenced = m.ctl = know
                m.grp_end, m.arrived = know.lvl, False
                if m is not b:
                    m.pc += 1
                    self.enqueue(m.tid)
        b.pc += 1
        return True

    def run(self) -> None:
        for b in self.blocks:
            self.enqueue(b.tid)
        while self.ready:
            i = self.ready.popleft()
            self.queued.discard(i)
            b = self.blocks[i]
            while not b.done and self.step(b):
                pass
        stuck = [b for b in self.blocks if not b.done]
        if stuck:
            self.problems.insert(0, self.deadlock(stuck))
            return
        self.ends()
        for key, queue in self.signals.items():
            if queue:
                op = queue[0][1]
                _, dst, ctype, k = key
                self.problems.append(Problem(
                    "unmatched", f"unmatched: {_what(op)} signals gpu {dst} over {ctype} channel {k}, and no wait "
                                 f"of gpu {dst} meets it ({len(queue)} signal{'s' if len(queue) > 1 else ''} left: "
                                 "the next run's wait returns early)", (op.where,)))
        for s, op in self.packet_writer.items():
            if s not in self.packet_read:
                self.problems.append(Problem("dead_packet", f"{_what(op)} writes a packet in "
                                             f"{self.layout.describe(*s)}, which no op reads", (op.where,)))
                break
        for (gpu, sid), (init, sq) in self.sems.items():
            if len(sq) != init:
                last = next((e[1] for e in reversed(sq) if e[1] is not None), None)
                self.problems.append(Problem(
                    "unmatched", f"unmatched: gpu {gpu} semaphore {sid} ends at {len(sq)}, not at its init_value "
                                 f"{init}" + (f" ({_what(last)} releases it)" if last else ""),
                    (last.where,) if last else ()))

    def ends(self) -> None:
        """Every access to a GPU's memory must happen before that GPU's run ends (its thread blocks' last ops):
        else the GPU returns with a write still in flight, or lets its caller reuse memory a peer still reads."""
        end: dict[int, VC] = {}
        for b in self.blocks:
            b.fence()
            vc = b.fenced.vc
            assert vc is not None
            end[b.gpu] = vc if b.gpu not in end else np.maximum(end[b.gpu], vc)
        n = len(self.blocks) + len(self.proxy)
        for (rank, buf, i), (wt, we, wop, reads) in self.access.items():
            e = end.get(rank, np.zeros(n, dtype=np.int64))
            where = self.layout.describe(rank, buf, i)
            if wop is not None and e[wt] < we:
                self.report((wop.where, "end"), f"race: {_what(wop)} writes {where}, and nothing orders the write "
                            f"before gpu {rank}'s run ends (gpu {rank} may return before the data lands)", (wop.where,))
            for rt, re_, rop in reads:
                if e[rt] < re_ and not (rt >= len(self.blocks) and rop.gpu == rank):
                    self.report((rop.where, "end"), f"race: {_what(rop)} reads {where}, and nothing orders the read "
                                f"before gpu {rank}'s run ends (its caller may change the data under the read)",
                                (rop.where,))

    # ---------------------------------------------------------------- deadlock

    def _needs(self, b: _Block) -> tuple[str, list[_Block]]:
        """What the blocked ``b`` waits for, and the blocked thread blocks that could still provide it."""
        op, effect = b.code[b.pc]
        rest = [m for m in self.blocks if not m.done and m is not b]

        def later(m: _Block, pred: Any) -> bool:
            return any(pred(o, e) for o, e in m.code[m.pc:])

        if op.name in ("wait", "rlxwait"):
            keys = [self.channel(b, op, peer, k, False) for peer, k in op.channels]
            missing = [(peer, k) for (peer, k), key in zip(op.channels, keys, strict=True)
                       if len(self.signals.get(key, ())) < keys.count(key)]
            peer, k = missing[0]
            what = f"a signal from gpu {peer} over {op.channel_type} channel {k}"
            sends = ("signal", "rlxsignal") + (("pws", "pwsf") if op.channel_type == "port" else ())
            return what, [m for m in rest if m.gpu == peer and later(
                m, lambda o, e: o.name in sends and o.channel_type == op.channel_type and (b.gpu, k) in o.channels)]
        if op.name == "sem_acquire":
            sid = next(s for s in op.semaphores if len(self.sems[(b.gpu, s)][1]) < op.semaphores.count(s))
            return f"a release of gpu {b.gpu} semaphore {sid}", [m for m in rest if m.gpu == b.gpu and later(
                m, lambda o, e: o.name == "sem_release" and sid in o.semaphores)]
        if op.name == "barrier":
            assert op.barrier is not None
            bid, n = op.barrier
            came = len(self.barriers.get((b.gpu, bid), []))
            return (f"barrier {bid} of gpu {b.gpu} ({came} of the {n} thread blocks it needs are there)",
                    [m for m in rest if m.gpu == b.gpu and not m.arrived and later(
                        m, lambda o, e: o.name == "barrier" and o.barrier is not None and o.barrier[0] == bid)])
        assert effect is not None
        slots = [s for r in effect.packet_reads for s in self.slots(r, op, "src_buff")]
        slot = next(s for s in slots if s not in self.packets)

        def writes_it(o: PlanOp, e: Effect | None) -> bool:
            return e is not None and any(slot in self.slots(r, o, "dst_buff") for r in packet_writes(e))

        return (f"a packet in {self.layout.describe(*slot)}", [m for m in rest if later(m, writes_it)])

    def deadlock(self, stuck: list[_Block]) -> Problem:
        needs = {b.tid: self._needs(b) for b in stuck}
        starving = [b for b in stuck if not needs[b.tid][1]]
        lines: list[str] = []
        names: list[str] = []
        for b in starving:
            op = b.code[b.pc][0]
            names.append(op.where)
            took = []
            if op.name in ("wait", "rlxwait"):  # the waits that met the signals there: one may be astray
                for peer, k in op.channels:
                    took += [o for o in self.receivers.get(self.channel(b, op, peer, k, False), {}).values()
                             if o.where not in names and o not in took]
            names.extend(o.where for o in took[:4])
            also = f" (the ones sent there met {', '.join(_what(o) for o in took[:4])})" if took else ""
            lines.append(f"{_what(op)} waits for {needs[b.tid][0]}, which no op left provides{also}")
        cycle = _cycle([b.tid for b in stuck], {t: [m.tid for m in v[1]] for t, v in needs.items()})
        if cycle:
            ops = [self.blocks[t].code[self.blocks[t].pc][0] for t in cycle]
            names.extend(o.where for o in ops if o.where not in names)
            chain = ", which ".join(f"{_what(o)} waits for {needs[t][0]}" for o, t in zip(ops, cycle, strict=True))
            lines.append(f"a cycle: {chain}, which comes after the first")
        for key, queue in self.signals.items():  # a signal sent where nothing left waits: sent astray?
            if queue and not any(m.gpu == key[1] and any(
                    o.name in ("wait", "rlxwait") and o.channel_type == key[2] and (key[0], key[3]) in o.channels
                    for o, _ in m.code[m.pc:]) for m in stuck):
                ops = list(self.senders[key].values())[:4]  # all that signalled there: one of them went astray
                names.extend(o.where for o in ops if o.where not in names)
                lines.append(f"{' and '.join(_what(o) for o in ops)} signal gpu {key[1]} over {key[2]} channel "
                             f"{key[3]} {len(queue)} more time{'s' if len(queue) > 1 else ''} than any op waits")
        awaited = {s for m in stuck for o, e in m.code[m.pc:] if e is not None
                   for r in e.packet_reads for s in self.slots(r, o, "src_buff")}
        for s, op in self.packet_writer.items():  # a packet nothing read or will read: written astray?
            if s not in self.packet_read and s not in awaited and op.where not in names:
                names.append(op.where)
                lines.append(f"{_what(op)} writes a packet in {self.layout.describe(*s)}, which no op reads")
        if not lines:
            op = stuck[0].code[stuck[0].pc][0]
            names.append(op.where)
            lines.append(f"{_what(op)} waits for {needs[stuck[0].tid][0]}")
        return Problem("deadlock", "deadlock: " + "; ".join(lines), tuple(names))


def _cycle(nodes: list[int], edges: dict[int, list[int]]) -> list[int]:
    """A cycle of the graph (as the nodes in order), or [] when there is none."""
    color: dict[int, int] = {}
    for root in nodes:
        if root in color:
            continue
        stack = [(root, iter(edges.get(root, ())))]
        path = [root]
        color[root] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                path.pop()
                color[node] = 2
            elif color.get(nxt) == 1:
                return path[path.index(nxt):]
            elif nxt not in color:
                color[nxt] = 1
                stack.append((nxt, iter(edges.get(nxt, ()))))
                path.append(nxt)
    return []


def replay(plan: ExecutionPlan) -> Replay:
    """Replay ``plan`` (module docstring): its data ops with their levels, and its synchronisation problems.
    ``ScheduleError`` for an op whose ranges do not fit it (naming the op and field)."""
    layout = layout_of(plan)
    run = _Run(plan, layout)
    run.run()
    return Replay(layout, run.events, run.problems)


def moves_of(event: Event) -> list[tuple[int, Ref, Ref, Op]]:
    """The (level, src, dst, op) of an event's moves."""
    return [(event.level + m.phase, m.src, m.dst, m.op) for m in event.effect.moves]
