"""Mutation testing of MSCCL++ plan verification: break a correct plan, check ``verify_plan`` notices and names
the op.

A mutant changes one op of a plan (``mutants``):

- ``dropped_signal``: a ``signal``/``rlxsignal`` loses one of its channels (or goes, with its only one), or a
  ``pws``/``pwsf`` becomes a plain ``put``;
- ``wrong_peer``: a data op's remote buffer, or a signal's or wait's channel, names another GPU;
- ``wrong_offset``: one range of a data op moves one chunk up or down (within its buffer);
- ``missing_barrier``: a ``nop`` or ``barrier`` goes.

Each mutant says which ops a report must name for it (``blame``: the mutated op; for a dropped signal, the
waits of its partner; for a missing barrier, the ops its thread block ran between the fences around it,
and the barrier's other thread blocks). Whether a mutant *changes the outcome* is decided independently
of the verifier, by the adversarial executor ``sim.verify.plan_machine`` over several seeds; a mutant the
verifier misses counts against the kill rate only when it does (otherwise it is an equivalent mutant).
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from algorithms.errors import ScheduleError
from sim.verify.plan import verify_plan
from sim.verify.plan_machine import outcome_changed

__all__ = ["MUTATIONS", "PlanMutant", "MutantResult", "PlanMutationReport", "mutants", "mutation_test"]

MUTATIONS = ("dropped_signal", "wrong_peer", "wrong_offset", "missing_barrier")
_DATA = {"copy", "put", "pws", "pwsf", "get", "re", "res", "rre", "rres", "ppkt", "rppkt", "cpkt", "upkt", "repkt",
         "respkt", "recpkt", "recspkt", "glres", "gstore", "gstorepkt"}
_SIZE = {"i": "input_chunks", "o": "output_chunks", "s": "scratch_chunks"}


@dataclass(frozen=True)
class PlanMutant:
    kind: str
    op: str
    """The mutated op (its ``where`` in the original plan)."""
    description: str
    source: dict[str, Any] = field(repr=False)
    """The plan mutated (shared by every mutant of it, never changed)."""
    edit: Callable[[dict[str, Any]], None] = field(repr=False)
    """The mutation, applied in place to a copy of ``source``."""
    blame: frozenset[str]
    """Ops (``where`` in the mutant) of which a report must name one."""

    @cached_property
    def plan(self) -> dict[str, Any]:
        """The mutant: a copy of ``source`` with ``edit`` applied, made when first asked for (a plan of thousands
        of ops has thousands of mutants; sampling them copies only those it keeps)."""
        m = copy.deepcopy(self.source)
        self.edit(m)
        return m


def _where(g: int, t: int, k: int, j: int | None) -> str:
    return f"gpu {g} threadblock {t} op {k}" + (f" (pipeline op {j})" if j is not None else "")


def _ops(plan: dict[str, Any]) -> Iterator[tuple[int, int, int, int | None, dict[str, Any]]]:
    for g in plan["gpus"]:
        for tb in g["threadblocks"]:
            for k, op in enumerate(tb["ops"]):
                yield g["id"], tb["id"], k, None, op
                for j, inner in enumerate(op.get("ops", []) if op["name"] == "pipeline" else []):
                    yield g["id"], tb["id"], k, j, inner


def _peers(gpu: dict[str, Any], ctype: str) -> list[tuple[int, int]]:
    out, seen = [], {}  # type: ignore[var-annotated]
    for ch in gpu["channels"]:
        if ch["channel_type"] == ctype:
            for q in ch["connected_to"]:
                seen[q] = seen.get(q, 0) + 1
                out.append((q, seen[q] - 1))
    return out


def _tb_ids(tb: dict[str, Any], ctype: str) -> list[int]:
    return [c for ch in tb.get("channels", []) if ch["channel_type"] == ctype for c in ch["channel_ids"]]


def _locate(plan: dict[str, Any], g: int, t: int, k: int, j: int | None) -> tuple[list[Any], int]:
    ops = plan["gpus"][g]["threadblocks"][t]["ops"]
    return (ops[k]["ops"], j) if j is not None else (ops, k)


def _partner_waits(plan: dict[str, Any], g: int, t: int, op: dict[str, Any], cid: int) -> set[str]:
    ctype = op["channel_type"]
    gpu = plan["gpus"][g]
    peer, k = _peers(gpu, ctype)[_tb_ids(gpu["threadblocks"][t], ctype)[cid]]
    out = set()
    other = plan["gpus"][peer]
    for _, tt, kk, jj, o in _ops({"gpus": [other]}):
        if o["name"] in ("wait", "rlxwait") and o.get("channel_type") == ctype:
            tb = other["threadblocks"][tt]
            if any(_peers(other, ctype)[_tb_ids(tb, ctype)[c]] == (g, k) for c in o["channel_ids"]):
                out.add(_where(peer, tt, kk, jj))
    return out


def _segment(ops: list[dict[str, Any]], at: int, where: Any) -> set[str]:
    """The ops between the fences around position ``at`` of ``ops`` after the op there was removed (a pipeline's
    inner ops with it)."""
    lo = at
    while lo > 0 and ops[lo - 1]["name"] not in ("nop", "barrier"):
        lo -= 1
    hi = at
    while hi < len(ops) and ops[hi]["name"] not in ("nop", "barrier"):
        hi += 1
    out = set()
    for i in range(lo, min(hi + 1, len(ops))):
        out.add(where(i))
        if ops[i]["name"] == "pipeline":
            out |= {f"{where(i)} (pipeline op {j})" for j in range(len(ops[i].get("ops", [])))}
    return out


def _dropped_signal(plan: dict[str, Any]) -> Iterator[PlanMutant]:
    for g, t, k, j, op in _ops(plan):
        name = op["name"]
        if name in ("signal", "rlxsignal"):
            for ci, cid in enumerate(op["channel_ids"]):
                blame = _partner_waits(plan, g, t, op, cid)
                alone = len(op["channel_ids"]) == 1

                def drop(m: dict[str, Any], g: int = g, t: int = t, k: int = k, j: int | None = j, ci: int = ci,
                         alone: bool = alone) -> None:
                    ops, at = _locate(m, g, t, k, j)
                    if alone:
                        del ops[at]
                    else:
                        del ops[at]["channel_ids"][ci]

                what = f"{name} dropped" if alone else f"{name} loses channel {cid}"
                yield PlanMutant("dropped_signal", _where(g, t, k, j), what, plan, drop, frozenset(blame))
        elif name in ("pws", "pwsf") and op.get("channel_type") == "port":
            blame = set().union(*(_partner_waits(plan, g, t, op, c) for c in op["channel_ids"]))

            def as_put(m: dict[str, Any], g: int = g, t: int = t, k: int = k, j: int | None = j) -> None:
                ops, at = _locate(m, g, t, k, j)
                ops[at]["name"] = "put"

            yield PlanMutant("dropped_signal", _where(g, t, k, j), f"{name} read as put", plan, as_put,
                             frozenset(blame | {_where(g, t, k, j)}))


def _wrong_peer(plan: dict[str, Any], rng: random.Random) -> Iterator[PlanMutant]:
    for g, t, k, j, op in _ops(plan):
        gpu = plan["gpus"][g]
        tb = gpu["threadblocks"][t]
        here = _where(g, t, k, j)
        ctype = op.get("channel_type", "none")
        if op["name"] in _DATA and ctype in ("memory", "port"):
            refs = [i for ref in tb.get("remote_buffer_refs", []) if ref["access_channel_type"] == ctype
                    for i in ref["remote_buffer_ids"]]
            for side in ("src_buff", "dst_buff"):
                for bi, b in enumerate(op.get(side, [])):
                    if "buffer_id" not in b:
                        continue
                    rb = gpu["remote_buffers"][refs[b["buffer_id"]]]
                    others = [q for q in range(len(plan["gpus"])) if q not in (g, rb["rank"])]
                    if not others:
                        continue
                    q = rng.choice(others)

                    def elsewhere(m: dict[str, Any], g: int = g, t: int = t, k: int = k, j: int | None = j,
                                  side: str = side, bi: int = bi, q: int = q, kind: str = rb["type"],
                                  ctype: str = ctype, nrefs: int = len(refs)) -> None:
                        mg = m["gpus"][g]
                        mg["remote_buffers"].append({"rank": q, "type": kind, "access_channel_types": [ctype]})
                        mt = mg["threadblocks"][t]
                        mt.setdefault("remote_buffer_refs", []).append(
                            {"access_channel_type": ctype, "remote_buffer_ids": [len(mg["remote_buffers"]) - 1]})
                        ops, at = _locate(m, g, t, k, j)
                        ops[at][side][bi]["buffer_id"] = nrefs

                    yield PlanMutant("wrong_peer", here, f"{side}[{bi}] on gpu {q}, not gpu {rb['rank']}", plan,
                                     elsewhere, frozenset({here}))
        if op["name"] in ("signal", "rlxsignal", "wait", "rlxwait") and ctype in ("memory", "port"):
            peers = _peers(gpu, ctype)
            ids = _tb_ids(tb, ctype)
            for ci, cid in enumerate(op["channel_ids"]):
                peer = peers[ids[cid]][0]
                alt = [n for n, (q, _) in enumerate(peers) if q != peer]
                if not alt:
                    continue
                other = rng.choice(alt)

                def rewire(m: dict[str, Any], g: int = g, t: int = t, k: int = k, j: int | None = j, ci: int = ci,
                           ctype: str = ctype, other: int = other, nids: int = len(ids)) -> None:
                    mt = m["gpus"][g]["threadblocks"][t]
                    mt["channels"].append({"channel_type": ctype, "channel_ids": [other]})
                    ops, at = _locate(m, g, t, k, j)
                    ops[at]["channel_ids"][ci] = nids

                yield PlanMutant("wrong_peer", here, f"channel {cid} to another gpu than {peer}", plan, rewire,
                                 frozenset({here}))


def _size(plan: dict[str, Any], g: int, t: int, op: dict[str, Any], b: dict[str, Any]) -> int | None:
    gpu = plan["gpus"][g]
    if "type" in b and "buffer_id" not in b and "switch_channel_id" not in b:
        return int(gpu[_SIZE[b["type"]]])
    if "buffer_id" in b:
        ctype = op.get("channel_type")
        refs = [i for ref in gpu["threadblocks"][t].get("remote_buffer_refs", [])
                if ref["access_channel_type"] == ctype for i in ref["remote_buffer_ids"]]
        rb = gpu["remote_buffers"][refs[b["buffer_id"]]]
        return int(plan["gpus"][rb["rank"]][_SIZE[rb["type"]]])
    return None


def _wrong_offset(plan: dict[str, Any]) -> Iterator[PlanMutant]:
    for g, t, k, j, op in _ops(plan):
        if op["name"] not in _DATA:
            continue
        here = _where(g, t, k, j)
        for side in ("src_buff", "dst_buff"):
            for bi, b in enumerate(op.get(side, [])):
                size = _size(plan, g, t, op, b)
                for delta in (1, -1):
                    at = b["index"] + delta
                    if at < 0 or size is None or at + b["size"] > size:
                        continue

                    def move(m: dict[str, Any], g: int = g, t: int = t, k: int = k, j: int | None = j,
                             side: str = side, bi: int = bi, at: int = at) -> None:
                        ops, pos = _locate(m, g, t, k, j)
                        ops[pos][side][bi]["index"] = at

                    yield PlanMutant("wrong_offset", here, f"{side}[{bi}] index {b['index']} -> {at}", plan, move,
                                     frozenset({here}))


def _missing_barrier(plan: dict[str, Any]) -> Iterator[PlanMutant]:
    for g, t, k, j, op in _ops(plan):
        if op["name"] not in ("nop", "barrier"):
            continue

        def drop(m: dict[str, Any], g: int = g, t: int = t, k: int = k, j: int | None = j) -> None:
            ops, at = _locate(m, g, t, k, j)
            del ops[at]

        outer, at = _locate(plan, g, t, k, j)
        ops = outer[:at] + outer[at + 1:]  # the op list as the mutant has it
        blame = _segment(ops, at, lambda i, g=g, t=t, k=k, j=j: _where(g, t, i, None) if j is None
                         else _where(g, t, k, i))
        if op["name"] == "barrier":
            blame |= {_where(g, tt, kk, jj) for gg, tt, kk, jj, o in _ops(plan) if gg == g and tt != t
                      and o["name"] == "barrier" and o.get("barrier_id") == op.get("barrier_id")}
        yield PlanMutant("missing_barrier", _where(g, t, k, j), f"{op['name']} dropped", plan, drop, frozenset(blame))


def mutants(plan: dict[str, Any], kinds: tuple[str, ...] = MUTATIONS, seed: int = 0) -> Iterator[PlanMutant]:
    """Every mutant of ``plan`` (parsed JSON) of the given kinds, in plan order per kind."""
    rng = random.Random(seed)
    for kind in kinds:
        if kind == "dropped_signal":
            yield from _dropped_signal(plan)
        elif kind == "wrong_peer":
            yield from _wrong_peer(plan, rng)
        elif kind == "wrong_offset":
            yield from _wrong_offset(plan)
        elif kind == "missing_barrier":
            yield from _missing_barrier(plan)
        else:
            raise ValueError(f"unknown plan mutation {kind!r} ({', '.join(MUTATIONS)})")


@dataclass(frozen=True)
class MutantResult:
    mutant: PlanMutant
    caught: bool
    named: bool
    """The report (or the read error) names one of the mutant's blamed ops."""
    changed: str | None
    """Why the adversarial executor says the outcome changed (None: it saw no change); only asked when the
    verifier missed the mutant, or when ``check_caught`` is set."""
    message: str


@dataclass
class PlanMutationReport:
    results: list[MutantResult] = field(default_factory=list)

    @property
    def caught(self) -> int:
        return sum(r.caught for r in self.results)

    @property
    def survivors(self) -> list[MutantResult]:
        """Mutants the verifier missed although the outcome changed."""
        return [r for r in self.results if not r.caught and r.changed]

    @property
    def equivalent(self) -> int:
        return sum(1 for r in self.results if not r.caught and not r.changed)

    @property
    def unnamed(self) -> list[MutantResult]:
        return [r for r in self.results if r.caught and not r.named]

    @property
    def kill_rate(self) -> float:
        """Caught / (caught + survivors): 1.0 when every outcome-changing mutant is caught."""
        killable = self.caught + len(self.survivors)
        return self.caught / killable if killable else 1.0

    def by_kind(self) -> dict[str, tuple[int, int, int]]:
        """kind -> (mutants, caught, survivors)."""
        out: dict[str, tuple[int, int, int]] = {}
        for r in self.results:
            n, c, s = out.get(r.mutant.kind, (0, 0, 0))
            out[r.mutant.kind] = (n + 1, c + r.caught, s + (not r.caught and r.changed is not None))
        return out


def judge(m: PlanMutant, *, seeds: int = 8, check_caught: bool = False) -> MutantResult:
    """Verify one mutant, and ask the executor whether its outcome changed when the verifier missed it."""
    try:
        report = verify_plan(m.plan)
    except ScheduleError as e:
        text = str(e)
        return MutantResult(m, True, any(w + ":" in text or w + " " in text for w in m.blame),
                            outcome_changed(m.plan, seeds) if check_caught else None, text)
    caught = not report.ok
    named = bool(report.ops & m.blame)
    changed = outcome_changed(m.plan, seeds) if (not caught or check_caught) else None
    first = report.findings[0].message if report.findings else ""
    return MutantResult(m, caught, named, changed, first)


def mutation_test(plan: dict[str, Any], *, kinds: tuple[str, ...] = MUTATIONS, sample: int | None = None,
                  seed: int = 0, seeds: int = 8, check_caught: bool = False) -> PlanMutationReport:
    """Every mutant of ``plan`` (at most ``sample`` of each kind, chosen with ``seed``) judged (``judge``)."""
    rng = random.Random(seed)
    report = PlanMutationReport()
    for kind in kinds:
        every = list(mutants(plan, (kind,), seed))
        if sample is not None and len(every) > sample:
            every = rng.sample(every, sample)
        report.results.extend(judge(m, seeds=seeds, check_caught=check_caught) for m in every)
    return report
