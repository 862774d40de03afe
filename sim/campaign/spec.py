"""A campaign file (``collsched.campaign/1``: TOML, JSON or YAML), its axes, and their expansion.

The axes are collectives, algorithms (each with a grid of parameters), topologies, sizes, modes and
runtimes; every combination is one ``Config``. ``Campaign.count()`` is the product of the axis lengths,
computed without building the list, so that ``check_cap`` refuses a campaign too large before anything is
expanded. A configuration's ``key`` hashes its canonical JSON with collsched's version and
``CAMPAIGN_FORMAT``: the store's primary key, so a re-run finds what is already computed.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from algorithms import registry
from algorithms.errors import CollschedError, UsageError
from algorithms.ir import ROOTED_KINDS, Kind

__all__ = ["CAMPAIGN_FORMAT", "FILE_FORMAT", "MAX_CONFIGS", "Campaign", "CampaignError", "Config", "Topology",
           "Variant", "check_cap", "collsched_version", "load_campaign", "parse_campaign"]

FILE_FORMAT = "collsched.campaign/1"
CAMPAIGN_FORMAT = 1
"""Goes into every key with the package version: raise it when what a stored row means changes."""
MAX_CONFIGS = 250_000
"""Default cap on a campaign's configurations (``--max-configs``): the list of a quarter million
configurations and their keys take a few hundred MiB."""
MODES = ("dataflow", "lockstep")
RUNTIMES = ("nccl", "msccl", "collsched", "plain")
BOUNDS = ("auto", "yes", "no")
NETWORK_KEYS = ("overhead", "reduce_bw", "launch", "message_cpu", "step_cost", "protocol", "engine")
"""The campaign-wide ``[network]`` options: ``collsched simulate``'s flags of the same names."""
TOPOLOGY_KEYS = ("spec", "label", "bandwidth", "latency", "routing", "placement")
TOP_KEYS = ("format", "name", "collectives", "algorithms", "topologies", "sizes", "modes", "runtimes", "root",
            "bound", "matrix", "imports", "network", "store", "comment")


class CampaignError(UsageError):
    """A campaign file that cannot be read or does not fit together; the message names the key."""


def collsched_version() -> str:
    """The installed collsched's version (``importlib.metadata``), else pyproject's, else ``0+unknown``."""
    from importlib import metadata

    try:
        return metadata.version("collsched")
    except metadata.PackageNotFoundError:
        pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
        try:
            return str(tomllib.loads(pyproject.read_text())["project"]["version"])
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "0+unknown"


@dataclass(frozen=True)
class Topology:
    """One entry of the topologies axis: a SPEC (``collsched list --topologies``) and its link options."""

    spec: str
    label: str
    options: tuple[tuple[str, str], ...] = ()
    """bandwidth, latency, routing, placement: as simulate's flags, only those given."""

    def canonical(self) -> dict[str, Any]:
        return {"spec": self.spec, **dict(self.options)}


@dataclass(frozen=True)
class Variant:
    """An algorithm with one point of its parameter grid."""

    algorithm: str
    params: tuple[tuple[str, int | str], ...] = ()

    @property
    def label(self) -> str:
        """``ring`` or ``ring chunks=4``: the report's name for it."""
        return " ".join([self.algorithm, *(f"{k}={v}" for k, v in self.params)])


@dataclass(frozen=True)
class Config:
    """One configuration: one simulation."""

    collective: str
    variant: Variant
    topology: Topology
    size: int
    mode: str
    runtime: str | None
    campaign: Campaign = field(repr=False, compare=False)

    def canonical(self) -> dict[str, Any]:
        """What the simulation depends on, as plain JSON values (the key hashes it; workers receive it)."""
        c = self.campaign
        root = (0 if c.root is None else c.root) if Kind(self.collective) in ROOTED_KINDS else None
        return {"collective": self.collective, "algorithm": self.variant.algorithm,
                "params": dict(self.variant.params), "topology": self.topology.canonical(), "size": self.size,
                "mode": self.mode, "runtime": self.runtime, "root": root, "bound": c.bound,
                "matrix": c.matrix if self.collective == Kind.ALLTOALLV.value else None,
                "network": dict(c.network)}

    @property
    def key(self) -> str:
        return config_key(self.canonical(), self.campaign.version)


def config_key(canonical: Mapping[str, Any], version: str) -> str:
    """sha256 of the canonical JSON, collsched's version and ``CAMPAIGN_FORMAT`` (32 hex digits)."""
    text = json.dumps({"campaign_format": CAMPAIGN_FORMAT, "version": version, "config": canonical},
                      sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Campaign:
    """The axes of a campaign file, checked; ``configs()`` expands them."""

    name: str
    variants: Mapping[str, tuple[Variant, ...]]
    """Per collective (in the file's order), its algorithm variants."""
    topologies: tuple[Topology, ...]
    sizes: tuple[int, ...]
    modes: tuple[str, ...] = ("dataflow",)
    runtimes: tuple[str | None, ...] = (None,)
    root: int | None = None
    bound: str = "auto"
    matrix: str | None = None
    imports: tuple[str, ...] = ()
    network: tuple[tuple[str, str], ...] = ()
    store: str | None = None
    version: str = field(default_factory=collsched_version)

    @property
    def collectives(self) -> tuple[str, ...]:
        return tuple(self.variants)

    def count(self) -> int:
        """How many configurations ``configs()`` yields: the product of the axis lengths, nothing built."""
        per = len(self.topologies) * len(self.sizes) * len(self.modes) * len(self.runtimes)
        return sum(len(v) for v in self.variants.values()) * per

    def configs(self) -> Iterator[Config]:
        """Every configuration, collective by collective, then topology, mode, runtime, algorithm and size:
        neighbours share a topology and a schedule, which each worker keeps while they last."""
        for coll, variants in self.variants.items():
            for topo, mode, rt, var, size in itertools.product(self.topologies, self.modes, self.runtimes, variants,
                                                               self.sizes):
                yield Config(coll, var, topo, size, mode, rt, self)


def check_cap(campaign: Campaign, cap: int = MAX_CONFIGS) -> int:
    """The configuration count; a ``CampaignError`` giving the product when it exceeds ``cap``."""
    n = campaign.count()
    if n > cap:
        per = {c: len(v) for c, v in campaign.variants.items()}
        raise CampaignError(
            f"the campaign expands to {n:,} configurations, more than the cap of {cap:,} (--max-configs): "
            f"algorithm variants {per} x {len(campaign.topologies)} topologies x {len(campaign.sizes)} sizes x "
            f"{len(campaign.modes)} modes x {len(campaign.runtimes)} runtimes")
    return n


def load_campaign(path: str | Path) -> Campaign:
    """Read a campaign file: ``.toml``, ``.json``, or ``.yaml``/``.yml`` (pyyaml, which dask brings)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise CampaignError(f"{p}: cannot read the campaign file: {e.strerror or e}") from None
    suffix = p.suffix.lower()
    try:
        if suffix == ".toml":
            data: Any = tomllib.loads(text)
        elif suffix == ".json":
            data = json.loads(text)
        elif suffix in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError:
                raise CampaignError(f"{p}: YAML needs pyyaml (pip install pyyaml), or write TOML or JSON") from None
            data = yaml.safe_load(text)
        else:
            raise CampaignError(f"{p}: expected a .toml, .json, .yaml or .yml campaign file")
    except CampaignError:
        raise
    except Exception as e:  # each parser has its own error type; all mean the same here
        raise CampaignError(f"{p}: not valid {suffix[1:].upper()}: {e}") from None
    campaign = parse_campaign(data, where=str(p))
    if campaign.store is not None and not Path(campaign.store).is_absolute():
        campaign = _replace_store(campaign, str(p.parent / campaign.store))
    return campaign


def _replace_store(c: Campaign, store: str) -> Campaign:
    from dataclasses import replace

    return replace(c, store=store)


def _list(value: Any, where: str) -> list[Any]:
    out = value if isinstance(value, list) else [value]
    if not out:
        raise CampaignError(f"{where}: must not be empty")
    return out


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise CampaignError(f"{where}: expected a non-empty text, got {value!r}")
    return value.strip()


def _sizes(value: Any, where: str) -> tuple[int, ...]:
    from sim.units import parse_size, parse_sizes

    out: list[int] = []
    for i, item in enumerate(_list(value, where)):
        if isinstance(item, bool):
            raise CampaignError(f"{where}[{i}]: expected a size, got {item!r}")
        if isinstance(item, int | float):
            sizes = [float(item)]
        else:
            text = _text(item, f"{where}[{i}]")
            try:
                sizes = parse_sizes(text) if ":" in text else [parse_size(text, f"{where}[{i}]")]
            except UsageError as e:
                raise CampaignError(f"{where}[{i}]: {e}") from None
        for s in sizes:
            if s < 0 or s != int(s):
                raise CampaignError(f"{where}[{i}]: a size is a whole number of bytes >= 0, got {s}")
            if int(s) not in out:
                out.append(int(s))
    return tuple(out)


def _topologies(value: Any, where: str) -> tuple[Topology, ...]:
    out: list[Topology] = []
    for i, item in enumerate(_list(value, where)):
        w = f"{where}[{i}]"
        if isinstance(item, str):
            out.append(Topology(_text(item, w), item.strip()))
            continue
        if not isinstance(item, dict):
            raise CampaignError(f"{w}: expected a SPEC or a table with 'spec', got {item!r}")
        unknown = sorted(set(item) - set(TOPOLOGY_KEYS))
        if unknown:
            raise CampaignError(f"{w}: unknown key {unknown[0]!r} (known: {', '.join(TOPOLOGY_KEYS)})")
        spec = _text(item.get("spec"), f"{w}.spec")
        opts = tuple((k, _text(item[k], f"{w}.{k}")) for k in TOPOLOGY_KEYS[2:] if item.get(k) is not None)
        label = _text(item["label"], f"{w}.label") if item.get("label") is not None else \
            " ".join([spec, *(f"{k}={v}" for k, v in opts)])
        out.append(Topology(spec, label, opts))
    labels = [t.label for t in out]
    dup = next((x for x in labels if labels.count(x) > 1), None)
    if dup is not None:
        raise CampaignError(f"{where}: {dup!r} is listed twice (give each a distinct 'label')")
    return tuple(out)


def _grid(params: Any, where: str) -> list[tuple[tuple[str, int | str], ...]]:
    """Every point of ``{name: value or [values]}``, names sorted."""
    if params is None:
        return [()]
    if not isinstance(params, dict):
        raise CampaignError(f"{where}: expected a table of NAME = value or [values], got {params!r}")
    axes: list[list[tuple[str, int | str]]] = []
    for name in sorted(params):
        values = _list(params[name], f"{where}.{name}")
        for v in values:
            if isinstance(v, bool) or not isinstance(v, int | str):
                raise CampaignError(f"{where}.{name}: a parameter is an integer or a text, got {v!r}")
        axes.append([(name, v) for v in values])
    return [tuple(point) for point in itertools.product(*axes)]


def _variants(kind: str, entries: Any, where: str) -> tuple[Variant, ...]:
    out: list[Variant] = []
    for i, entry in enumerate(_list(entries, where)):
        w = f"{where}[{i}]"
        if isinstance(entry, str):
            name, params = entry.strip(), None
        elif isinstance(entry, dict):
            unknown = sorted(set(entry) - {"name", "params"})
            if unknown:
                raise CampaignError(f"{w}: unknown key {unknown[0]!r} (known: name, params)")
            name, params = _text(entry.get("name"), f"{w}.name"), entry.get("params")
        else:
            raise CampaignError(f"{w}: expected an algorithm name or a table with 'name' and 'params'")
        names = [a.name for a in registry.algorithms(kind)] if name == "*" else [name]
        for n in names:
            try:
                alg = registry.get(kind, n)
            except CollschedError as e:
                raise CampaignError(f"{w}: {e}") from None
            known = {q.name for q in alg.parameters}
            for point in _grid(params, f"{w}.params"):
                if name == "*":  # the grid applies where the parameter exists
                    point = tuple(kv for kv in point if kv[0] in known)
                try:
                    alg.resolve(dict(point))
                except CollschedError as e:
                    raise CampaignError(f"{w}: {e}") from None
                v = Variant(n, point)
                if v not in out:
                    out.append(v)
    return tuple(out)


def _choice(value: Any, allowed: Sequence[str | None], where: str) -> tuple[Any, ...]:
    out = []
    for i, v in enumerate(_list(value, where)):
        if v not in allowed:
            raise CampaignError(f"{where}[{i}]: {v!r} is not one of {', '.join(str(a) for a in allowed)}")
        if v not in out:
            out.append(v)
    return tuple(out)


def parse_campaign(data: Any, *, where: str = "campaign") -> Campaign:
    """A ``Campaign`` from a parsed campaign document (docs/usage.md, "Campaigns"); ``CampaignError`` naming
    the key for anything that does not fit."""
    if not isinstance(data, dict):
        raise CampaignError(f"{where}: must be a table (object), got {type(data).__name__}")
    unknown = sorted(set(data) - set(TOP_KEYS))
    if unknown:
        raise CampaignError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(TOP_KEYS)})")
    if data.get("format", FILE_FORMAT) != FILE_FORMAT:
        raise CampaignError(f"{where}.format: must be {FILE_FORMAT!r}, got {data.get('format')!r}")
    for key in ("algorithms", "topologies", "sizes"):
        if key not in data:
            raise CampaignError(f"{where}: missing key {key!r}")
    kinds = [k.value for k in Kind]
    algs = data["algorithms"]
    if isinstance(algs, dict):
        collectives = [str(c) for c in _list(data.get("collectives", list(algs)), f"{where}.collectives")]
        missing = [c for c in collectives if c not in algs]
        if missing:
            raise CampaignError(f"{where}.algorithms: no entry for {missing[0]!r}")
        extra = [c for c in algs if c not in collectives]
        if extra:
            raise CampaignError(f"{where}.algorithms: {extra[0]!r} is not among the collectives")
    else:
        if "collectives" not in data:
            raise CampaignError(f"{where}: missing key 'collectives' (or make 'algorithms' a table by collective)")
        collectives = [str(c) for c in _list(data["collectives"], f"{where}.collectives")]
        algs = dict.fromkeys(collectives, algs)
    for c in collectives:
        if c not in kinds:
            raise CampaignError(f"{where}.collectives: unknown collective {c!r} (one of {', '.join(kinds)})")
    if len(set(collectives)) != len(collectives):
        raise CampaignError(f"{where}.collectives: a collective is listed twice")
    for m in [str(x) for x in data.get("imports", [])]:
        registry.import_modules([m], where=f"{where}.imports")
    variants = {c: _variants(c, algs[c], f"{where}.algorithms.{c}") for c in collectives}
    network = data.get("network", {})
    if not isinstance(network, dict):
        raise CampaignError(f"{where}.network: must be a table")
    bad = sorted(set(network) - set(NETWORK_KEYS))
    if bad:
        raise CampaignError(f"{where}.network: unknown key {bad[0]!r} (known: {', '.join(NETWORK_KEYS)})")
    root = data.get("root")
    if root is not None and (isinstance(root, bool) or not isinstance(root, int) or root < 0):
        raise CampaignError(f"{where}.root: must be an integer >= 0, got {root!r}")
    return Campaign(
        name=str(data.get("name", Path(where).stem)),
        variants=variants,
        topologies=_topologies(data["topologies"], f"{where}.topologies"),
        sizes=_sizes(data["sizes"], f"{where}.sizes"),
        modes=_choice(data.get("modes", ["dataflow"]), MODES, f"{where}.modes"),
        runtimes=_choice([None if r == "default" else r for r in _list(data.get("runtimes", [None]), where)],
                         (None, *RUNTIMES), f"{where}.runtimes"),
        root=root,
        bound=str(_choice(data.get("bound", "auto"), BOUNDS, f"{where}.bound")[0]),
        matrix=_text(data["matrix"], f"{where}.matrix") if data.get("matrix") is not None else None,
        imports=tuple(str(x) for x in data.get("imports", [])),
        network=tuple(sorted((k, _text(str(v), f"{where}.network.{k}")) for k, v in network.items())),
        store=_text(data["store"], f"{where}.store") if data.get("store") is not None else None,
    )
