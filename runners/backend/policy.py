"""Which algorithm serves a collective of a given size on a given world size.

A ``Policy`` is an ordered list of rules per collective kind; the first rule
whose byte and rank ranges contain the call wins. Rules come from three
places, later ones overriding earlier ones kind by kind:

1. built-in defaults (``DEFAULTS``): first the tuned table (``TUNED_TABLE``,
   ``collsched tune``'s output for gloo on the development machine, for the
   world sizes it was tuned for), then the hand-made bands
   (``HAND_DEFAULTS``): for each band of sizes (and, where it matters, of
   world sizes) a preference list of algorithm names, of which the first one
   registered and able to serve the world size is used, so the defaults
   follow whatever the algorithm library holds;
2. a JSON tuning file, named by ``COLLSCHED_TUNING`` or passed in
   (format ``collsched.tuning/1``, see ``docs/backend.md``);
3. the environment variable ``COLLSCHED_ALGORITHMS``, such as
   ``"allreduce=ring,allgather=bruck:chunks=2"``, which pins one algorithm
   per kind for every size.

Instead of an algorithm name, a rule may name a schedule file:
``allreduce=file:/path/ring8.xml`` (or any value ending in ``.json`` or
``.xml``), a collsched.schedule/1 JSON or an MSCCL-IR XML file such as
msccl-tools, TACCL or TE-CCL write. It serves its own collective kind on its
own world size (and root), and is loaded once per process.

The name ``p2p`` is always available: the backend's direct point-to-point
implementation (``runners.backend.direct``: every rank exchanges with its peers
directly, no schedule). It is not ``direct``, because the algorithm library
may register a schedule of that name.
It is also what a kind gets when no registered algorithm can serve it.

Names given by the user are checked against the registry when the policy is
made, so a typo is a ``PolicyError`` at ``init_process_group``, not a failure
at the first collective. Sizes follow nccl-tests (docs/design.md, "Sizes and
bandwidths"): the buffer for allreduce, broadcast and reduce; the output for
allgather and gather; the input for reducescatter, scatter and alltoall.

This module does not import torch.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from algorithms import formats as fileformat
from algorithms import registry
from algorithms.errors import CollschedError, RegistryError
from algorithms.ir import ROOTED_KINDS, Kind, Schedule

__all__ = [
    "DEFAULTS",
    "HAND_DEFAULTS",
    "TUNED_TABLE",
    "FILE_PREFIX",
    "P2P",
    "ENV_ALGORITHMS",
    "ENV_TUNING",
    "TUNING_FORMAT",
    "Choice",
    "Policy",
    "PolicyError",
    "Rule",
    "describe_choice",
    "schedule",
]

P2P = "p2p"
FILE_PREFIX = "file:"
ENV_ALGORITHMS = "COLLSCHED_ALGORITHMS"
ENV_TUNING = "COLLSCHED_TUNING"
TUNING_FORMAT = "collsched.tuning/1"
_MAX_TUNING_BYTES = 1 << 20
_KIB = 1024

class PolicyError(CollschedError, ValueError):
    """A tuning file, environment variable or algorithm choice is invalid; the message names it."""


@dataclass(frozen=True)
class Choice:
    """An algorithm name (or ``p2p``) and its parameters, as a hashable value."""

    algorithm: str
    params: tuple[tuple[str, int], ...] = ()

    def __str__(self) -> str:
        extra = "".join(f":{k}={v}" for k, v in self.params)
        return f"{self.algorithm}{extra}"


@dataclass(frozen=True)
class Rule:
    """Use one of ``candidates`` (the first that can serve) for calls within the ranges.

    ``max_bytes`` None means any size; ``min_ranks``/``max_ranks`` bound the
    world size. A user rule has one candidate; a default rule may have several.
    """

    candidates: tuple[Choice, ...]
    max_bytes: int | None = None
    min_ranks: int = 1
    max_ranks: int | None = None
    origin: str = "default"

    def covers(self, nbytes: int, ranks: int) -> bool:
        """True when a call of ``nbytes`` bytes on ``ranks`` ranks falls in this rule's ranges."""
        if self.max_bytes is not None and nbytes > self.max_bytes:
            return False
        return self.min_ranks <= ranks and (self.max_ranks is None or ranks <= self.max_ranks)


def _can_serve(kind: Kind, choice: Choice, ranks: int) -> str | None:
    """Why ``choice`` cannot serve ``kind`` on ``ranks`` ranks, or None when it can."""
    if choice.algorithm == P2P:
        return None
    if choice.algorithm.startswith(FILE_PREFIX):
        try:
            s = _schedule_file(choice.algorithm[len(FILE_PREFIX):])
        except CollschedError as err:
            return str(err)
        if s.collective.kind is not kind:
            return f"the file holds a {s.collective.kind} schedule"
        if s.ranks != ranks:
            return f"the file's schedule is for {s.ranks} ranks"
        return None
    try:
        algorithm = registry.get(kind, choice.algorithm)
        return algorithm.unsupported(ranks, dict(choice.params))
    except RegistryError as err:
        return str(err)


@dataclass(frozen=True)
class Policy:
    """Rules per collective kind; ``choose`` picks the algorithm for one call."""

    rules: Mapping[Kind, tuple[Rule, ...]]

    @classmethod
    def defaults(cls) -> Policy:
        """The built-in rules, with preference lists (see ``DEFAULTS``)."""
        return cls(dict(DEFAULTS))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, tuning: str | Path | None = None) -> Policy:
        """Defaults, then the tuning file (``tuning`` or ``COLLSCHED_TUNING``), then ``COLLSCHED_ALGORITHMS``."""
        env = os.environ if environ is None else environ
        policy = cls.defaults()
        path = tuning if tuning is not None else env.get(ENV_TUNING) or None
        if path is not None:
            policy = policy.override(load_tuning(path))
        spec = env.get(ENV_ALGORITHMS, "").strip()
        if spec:
            policy = policy.override(parse_algorithms(spec))
        return policy

    def override(self, rules: Mapping[Kind, tuple[Rule, ...]]) -> Policy:
        """This policy with the kinds in ``rules`` replaced; defaults stay behind as a last resort."""
        merged = dict(self.rules)
        for kind, kind_rules in rules.items():
            merged[kind] = tuple(kind_rules) + tuple(r for r in self.rules.get(kind, ()) if r.origin == "default")
        return Policy(merged)

    def validate(self, ranks: int) -> None:
        """Raise PolicyError if a user rule that applies to ``ranks`` names an algorithm that cannot serve it."""
        for kind, kind_rules in self.rules.items():
            for rule in kind_rules:
                if rule.origin == "default" or not rule.covers(0, ranks):
                    continue
                for choice in rule.candidates:
                    reason = _can_serve(kind, choice, ranks)
                    if reason is not None:
                        raise PolicyError(f"{rule.origin}: {kind}={choice} cannot serve {ranks} ranks: {reason}")

    def choose(self, kind: Kind | str, nbytes: int, ranks: int) -> Choice:
        """The algorithm for one call: the first covering rule's first candidate that can serve ``ranks``."""
        kind = Kind(kind)
        for rule in self.rules.get(kind, ()):
            if not rule.covers(nbytes, ranks):
                continue
            for choice in rule.candidates:
                if _can_serve(kind, choice, ranks) is None:
                    return choice
        return Choice(P2P)

    def describe(self, ranks: int, sizes: tuple[int, ...] = (1024, 1 << 20, 64 << 20)) -> dict[str, dict[int, str]]:
        """The choice per kind and size for ``ranks`` ranks, for logs and the docs."""
        return {str(k): {n: str(self.choose(k, n, ranks)) for n in sizes} for k in Kind}


def _default_choice(spec: str) -> Choice:
    """``"ring:chunks=4"`` as a Choice, unchecked: a default the library cannot serve is skipped when chosen."""
    name, *items = spec.split(":")
    return Choice(name, tuple(sorted((k, int(v)) for k, v in (item.split("=") for item in items))))


def _band(max_bytes: int | None, *names: str, max_ranks: int | None = None) -> Rule:
    """A default rule: calls up to ``max_bytes`` (None: any size) on at most ``max_ranks`` ranks (None: any)
    use the first of ``names`` ("name" or "name:param=value") that is registered and can serve."""
    return Rule(tuple(_default_choice(n) for n in names), max_bytes=max_bytes, max_ranks=max_ranks)


# Latency-bound algorithms for small messages, bandwidth-optimal ones for large.
# All-reduce on up to 8 ranks, measured on gloo with
# `benchmarks/bench_runner_cpu.py --nproc P --mib ... --algorithms ...` (ratio to
# torch's all_reduce, two or three launches each, 3 to 8 ranks):
# - up to 1 MiB recursive doubling (log2 p steps of the whole buffer) is the
#   fastest: 1.3-3.4x torch up to 256 KiB and 0.7-2.0x at 1 MiB, against
#   0.3-1.4x for direct and the ring; at 2 MiB it is level with direct;
# - up to 32 MiB direct reduce-scatter + all-gather (2 steps with every peer at
#   once: the alpha-beta cost of the ring with 2 alpha instead of 2(p-1)) is
#   ahead of the ring or level at every size: at 4 MiB 0.81-1.05x torch
#   against the ring's 0.63-0.88 on 4 ranks, 0.91-1.15x against 0.58-0.69 on 8.
#   It stages up to (p-1)/p of the buffer, hence the bounds.
# Broadcast above 64 KiB on up to 4 ranks: the root sending the whole buffer to
# every peer at once (`linear`) beats scatter + ring all-gather, which moves
# each byte through every rank's host once more: through the C++ backend on 4
# gloo ranks (`benchmarks/bench_native.py`-style timing, 3 launches of 7
# iterations, 2026-12-02) linear 0.98 / 0.99x torch at 4 / 64 MiB against
# scatter_allgather's 0.78 / 0.77 (binomial 0.78 / 0.94); an earlier session
# measured 0.86 / 0.95 against 0.55 / 0.77. The calibrated model ranks it first
# too, by 7-10%. Larger worlds keep scatter_allgather: the root's p-1 copies grow.
# Larger worlds keep the previous bands (not measured here: 2 cores). From
# 32 MiB the ring pipelines 4 chunks per piece (at 64 MiB on 4 ranks within
# noise of 1 or 2 chunks and of direct: 0.82-0.93x torch for all of them).
HAND_DEFAULTS: Mapping[Kind, tuple[Rule, ...]] = {
    Kind.ALLREDUCE: (
        _band(64 * _KIB, "recursive_doubling", "rabenseifner", "ring"),
        _band(_KIB * _KIB, "recursive_doubling", "rabenseifner", "ring", max_ranks=8),
        _band(32 * _KIB * _KIB, "direct", "ring", max_ranks=8),
        _band(32 * _KIB * _KIB, "ring"),
        _band(None, "ring:chunks=4", "ring"),
    ),
    Kind.ALLGATHER: (_band(64 * _KIB, "recursive_doubling", "bruck", "ring"), _band(None, "ring")),
    Kind.REDUCESCATTER: (_band(64 * _KIB, "recursive_halving", "ring"), _band(None, "ring")),
    Kind.BROADCAST: (_band(64 * _KIB, "binomial"), _band(None, "linear", "binomial", max_ranks=4),
                     _band(None, "scatter_allgather", "binomial")),
    Kind.REDUCE: (_band(64 * _KIB, "binomial"), _band(None, "reducescatter_gather", "binomial")),
    Kind.SCATTER: (_band(None, "binomial", "linear"),),
    Kind.GATHER: (_band(None, "binomial", "linear"),),
    Kind.ALLTOALL: (_band(None, "pairwise", "linear", "bruck"),),
    Kind.ALLTOALLV: (_band(None, "direct", "pairwise"),),  # one step: fewer Python messages (see Performance)
    Kind.BARRIER: (_band(None, "dissemination"),),
}
"""The hand-made bands: what ``collsched tune`` keeps where its prediction is not clearly better, and the
built-in rules for world sizes the tuned table (``TUNED_TABLE``) does not cover."""


def _kind(name: str, where: str) -> Kind:
    try:
        return Kind(name.strip())
    except ValueError:
        names = ", ".join(k.value for k in Kind)
        raise PolicyError(f"{where}: unknown collective {name.strip()!r} (one of {names})") from None


def _choice(kind: Kind, name: str, params: Mapping[str, Any], where: str) -> Choice:
    """A user's choice, checked: the algorithm exists for the kind and its parameters are known and valid."""
    if not isinstance(name, str) or not name:
        raise PolicyError(f"{where}: algorithm must be a non-empty string, got {name!r}")
    if _is_file(name):
        if params:
            raise PolicyError(f"{where}: a schedule file takes no parameters, got {', '.join(params)}")
        path = name[len(FILE_PREFIX):] if name.startswith(FILE_PREFIX) else name
        full = str(Path(path).expanduser().resolve())
        try:
            s = _schedule_file(full)
        except CollschedError as err:
            raise PolicyError(f"{where}: {err}") from None
        if s.collective.kind is not kind:
            raise PolicyError(f"{where}: {path} holds a {s.collective.kind} schedule, not {kind}")
        return Choice(FILE_PREFIX + full)
    if name == P2P:
        if params:
            raise PolicyError(f"{where}: {P2P} takes no parameters, got {', '.join(params)}")
        return Choice(P2P)
    try:
        algorithm = registry.get(kind, name)
        resolved = algorithm.resolve(dict(params))
    except RegistryError as err:
        raise PolicyError(f"{where}: {err}") from None
    return Choice(name, tuple(sorted((k, v) for k, v in resolved.items() if k in params)))


def parse_algorithms(spec: str, *, where: str = ENV_ALGORITHMS) -> dict[Kind, tuple[Rule, ...]]:
    """Rules from ``"allreduce=ring,allgather=bruck:chunks=2"``: one algorithm per kind, every size.

    A value of digits is an integer, anything else text (``allgather=synth:topology=cluster:2x8``: a
    piece without "=" continues the previous text value); the registry checks each against the
    algorithm's parameters."""
    rules: dict[Kind, tuple[Rule, ...]] = {}
    for item in spec.split(","):
        if not item.strip():
            continue
        kind_name, sep, rest = item.partition("=")
        if not sep or not rest.strip():
            raise PolicyError(f"{where}: expected KIND=ALGORITHM[:PARAM=VALUE...], got {item.strip()!r}")
        kind = _kind(kind_name, where)
        if kind in rules:
            raise PolicyError(f"{where}: {kind} is given twice")
        if _is_file(rest.strip()):
            rules[kind] = (Rule((_choice(kind, rest.strip(), {}, f"{where}: {kind}"),), origin=where),)
            continue
        name, *param_items = rest.strip().split(":")
        params: dict[str, int | str] = {}
        key = ""
        for p in param_items:
            pkey, psep, value = p.partition("=")
            if not psep:
                # A piece without "=" continues the previous value, which may hold colons
                # (``allgather=synth:topology=cluster:2x8``).
                if not key or not isinstance(params[key], str):
                    raise PolicyError(f"{where}: {kind}: parameter must be NAME=VALUE, got {p!r}")
                params[key] = f"{params[key]}:{p}"
                continue
            key = pkey.strip()
            if not key or not value.strip():
                raise PolicyError(f"{where}: {kind}: parameter must be NAME=VALUE, got {p!r}")
            value = value.strip()
            params[key] = int(value) if value.lstrip("-").isdigit() else value
        rules[kind] = (Rule((_choice(kind, name.strip(), params, f"{where}: {kind}"),), origin=where),)
    return rules


_RULE_KEYS = frozenset({"algorithm", "params", "max_bytes", "min_ranks", "max_ranks", "predicted_s"})
"""``predicted_s`` (what ``collsched tune`` predicted, seconds by size in bytes) is informational: checked, unused."""


def _int_field(entry: Mapping[str, Any], key: str, where: str, low: int) -> int | None:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise PolicyError(f"{where}.{key}: must be an integer >= {low}, got {value!r}")
    return value


def _rule(kind: Kind, entry: Any, where: str) -> Rule:
    if not isinstance(entry, dict):
        raise PolicyError(f"{where}: a rule must be an object, got {type(entry).__name__}")
    unknown = sorted(set(entry) - _RULE_KEYS)
    if unknown:
        raise PolicyError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(_RULE_KEYS))})")
    if "algorithm" not in entry:
        raise PolicyError(f"{where}: missing key 'algorithm'")
    predicted = entry.get("predicted_s", {})
    if not isinstance(predicted, dict) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 for v in predicted.values()):
        raise PolicyError(f"{where}.predicted_s: must be an object of size -> seconds >= 0")
    params = entry.get("params", {})
    if not isinstance(params, dict):
        raise PolicyError(f"{where}.params: must be an object, got {type(params).__name__}")
    choice = _choice(kind, entry["algorithm"], params, where)
    return Rule(
        (choice,),
        max_bytes=_int_field(entry, "max_bytes", where, 0),
        min_ranks=_int_field(entry, "min_ranks", where, 1) or 1,
        max_ranks=_int_field(entry, "max_ranks", where, 1),
        origin=where,
    )


def parse_tuning(data: Any, *, where: str = "tuning") -> dict[Kind, tuple[Rule, ...]]:
    """Rules from a parsed tuning document: ``{"format": "collsched.tuning/1", "rules": {kind: [rule, ...]}}``."""
    if not isinstance(data, dict):
        raise PolicyError(f"{where}: must be a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - {"format", "rules", "comment"})
    if unknown:
        raise PolicyError(f"{where}: unknown key {unknown[0]!r} (known: comment, format, rules)")
    if data.get("format") != TUNING_FORMAT:
        raise PolicyError(f"{where}.format: must be {TUNING_FORMAT!r}, got {data.get('format')!r}")
    rules_in = data.get("rules", {})
    if not isinstance(rules_in, dict):
        raise PolicyError(f"{where}.rules: must be an object of kind -> list of rules")
    rules: dict[Kind, tuple[Rule, ...]] = {}
    for kind_name, entries in rules_in.items():
        kind = _kind(kind_name, f"{where}.rules")
        if not isinstance(entries, list):
            raise PolicyError(f"{where}.rules.{kind}: must be a list of rules")
        rules[kind] = tuple(_rule(kind, e, f"{where}.rules.{kind}[{i}]") for i, e in enumerate(entries))
    return rules


def load_tuning(path: str | Path) -> dict[Kind, tuple[Rule, ...]]:
    """Rules from a JSON tuning file; a missing, oversized or malformed file is a PolicyError naming it."""
    p = Path(path)
    try:
        if p.stat().st_size > _MAX_TUNING_BYTES:
            raise PolicyError(f"{p}: tuning file larger than {_MAX_TUNING_BYTES} bytes")
        data = json.loads(p.read_text())
    except OSError as err:
        raise PolicyError(f"{p}: cannot read tuning file: {err.strerror}") from None
    except json.JSONDecodeError as err:
        raise PolicyError(f"{p}: not valid JSON: {err}") from None
    return parse_tuning(data, where=str(p))


def _is_file(name: str) -> bool:
    """True when a rule's algorithm names a schedule file (``file:PATH``, or a ``.json``/``.xml`` name)."""
    return name.startswith(FILE_PREFIX) or name.lower().endswith((".json", ".xml"))


@functools.lru_cache(maxsize=32)
def _schedule_file(path: str) -> Schedule:
    """A schedule file (JSON or MSCCL-IR XML), loaded once per process."""
    return fileformat.load(path)


@functools.lru_cache(maxsize=512)
def schedule(kind: Kind, choice: Choice, ranks: int, root: int | None = None) -> Schedule:
    """The built schedule for ``choice``, verified; built once per (kind, algorithm, params, ranks, root) and
    cached.

    A ``file:`` choice is its file's schedule, which must be for ``kind`` on ``ranks`` ranks (and ``root``).
    A schedule the verifier rejects raises ``runners.execution.verified.UnverifiedSchedule`` naming the
    choice (``describe_choice``) and its first violations (``COLLSCHED_VERIFY=0``: not verified).
    """
    from runners.execution import verified  # lazily: the policy itself needs no torch

    if choice.algorithm.startswith(FILE_PREFIX):
        s = _schedule_file(choice.algorithm[len(FILE_PREFIX):])
        reason = _can_serve(kind, choice, ranks)
        if reason is None and kind in ROOTED_KINDS and s.collective.root != root:
            reason = f"the file's schedule has root {s.collective.root}, the call root {root}"
        if reason is not None:
            raise PolicyError(f"{choice}: cannot serve {kind} on {ranks} ranks: {reason}")
    else:
        algorithm = registry.get(kind, choice.algorithm)
        s = algorithm.build(ranks, root=root if kind in ROOTED_KINDS else None, **dict(choice.params))
    verified.require(s, describe_choice(kind, choice, ranks, root))
    return s


def describe_choice(kind: Kind, choice: Choice, ranks: int, root: int | None = None) -> str:
    """What an error says a choice is: ``allgather=mine at p=4 (algorithm 'mine', parameters: none)``, or
    ``allreduce=file:/x/ar.json at p=8 (schedule file /x/ar.json)``."""
    at = f"{kind}={choice} at p={ranks}" + (f", root {root}" if kind in ROOTED_KINDS and root is not None else "")
    if choice.algorithm.startswith(FILE_PREFIX):
        return f"{at} (schedule file {choice.algorithm[len(FILE_PREFIX):]})"
    params = ", ".join(f"{k}={v}" for k, v in choice.params) or "none"
    return f"{at} (algorithm {choice.algorithm!r}, parameters: {params})"


TUNED_TABLE = Path(__file__).with_name("tuning") / "gloo.json"
"""``collsched tune``'s table for gloo over loopback on the development machine (2 and 4 ranks, each rule
with its predicted seconds), from the machine files next to it; regenerate with the command in its
``comment`` (docs/backend.md, "Choosing algorithms: the policy")."""


def _tuned_defaults() -> dict[Kind, tuple[Rule, ...]]:
    rules = load_tuning(TUNED_TABLE)
    return {kind: tuple(replace(rule, origin="default") for rule in kind_rules) for kind, kind_rules in rules.items()}


_TUNED = _tuned_defaults()
DEFAULTS: dict[Kind, tuple[Rule, ...]] = {kind: _TUNED.get(kind, ()) + HAND_DEFAULTS.get(kind, ()) for kind in Kind}
"""The built-in rules: the tuned table's (for the world sizes it was tuned for), then the hand-made bands."""
