"""The algorithm registry: which builders exist, what they serve, what they cost.

Each entry names its collective kind and algorithm, the constraints it places
on the world size, its parameters (``chunks`` always, others such as a group
size), and its closed-form α-β-γ cost. Builders take ``(ranks, *, chunks,
root, **params)`` and return a validated ``Schedule``.

User algorithms live in the user's own modules, registered with
``@register`` when the module is imported. The registry imports them itself,
once, the first time it is queried (``get``, ``algorithms``, ``kinds``):

- every entry point of the group ``collsched.algorithms`` of every installed
  distribution (its value a module, or ``module:function`` to call);
- every module named in the environment variable ``COLLSCHED_IMPORT``
  (``mod1,mod2``), which spawned ranks and the torch backend inherit.

``import_modules`` is what the command line's ``--import`` calls. Each entry
is a dotted module name, found on ``sys.path`` (``PYTHONPATH``; the installed
``collsched`` does not search the current directory), or the path of a
``.py`` file, relative or absolute (``./my_algos.py``), imported as the
module named by its stem, once however it is spelled. A module that cannot
be imported is a ``RegistryError`` naming it.
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from algorithms.errors import CollschedError, RegistryError
from algorithms.ir import ROOTED_KINDS, Kind, Schedule

if TYPE_CHECKING:
    from algorithms.symmetric import SymmetricForm

__all__ = ["Algorithm", "Cost", "Parameter", "register", "get", "algorithms", "build", "kinds", "import_modules",
           "load_entry_points", "load_plugins", "ENTRY_POINT_GROUP", "ENV_IMPORT"]

ENTRY_POINT_GROUP = "collsched.algorithms"
ENV_IMPORT = "COLLSCHED_IMPORT"
Builder = Callable[..., Schedule]


@dataclass(frozen=True)
class Cost:
    """Closed-form α-β-γ cost: time = steps·α + bytes·β + reduced·γ on the critical path.

    Each function takes ``(p, n, params)``, positionally: world size, message size in bytes
    (nccl-tests convention, docs/design.md, "Sizes and bandwidths") and the algorithm's parameters, a
    dictionary with every declared parameter filled in (``params["chunks"]`` and any others), e.g.
    ``bytes=lambda p, n, params: 2 * (p - 1) * n / p``; ``register`` refuses a function that cannot be
    called so. In the lockstep model of a schedule, with
    one send and one receive port per rank:

    - ``steps``: the steps that move data between ranks (α each; a step of
      only local copies costs none);
    - ``bytes``: summed over steps, the most bytes one rank sends or receives
      in that step;
    - ``reduced``: summed over steps, the most bytes one rank reduces in it;
    - ``sent_per_rank``: the most bytes one rank sends over the network in all.

    tests/algorithms/library/test_library_costs.py measures all four from the schedule's transfers and
    checks them against these functions exactly for p = 1..64 (where the
    formula text says ≤, as an upper bound); ``sim.engine.closed_form.check_cost`` (``collsched verify
    --cost``) does the same for any registered algorithm, yours included, and times the schedule on a
    switch against the closed form.
    """

    formula: str
    steps: Callable[[int, float, Mapping[str, int]], float]
    bytes: Callable[[int, float, Mapping[str, int]], float]
    reduced: Callable[[int, float, Mapping[str, int]], float]
    sent_per_rank: Callable[[int, float, Mapping[str, int]], float] | None = None

    def time(self, p: int, n: float, params: Mapping[str, int], *, alpha: float, beta: float,
             gamma: float = 0.0) -> float:
        """Predicted seconds for p ranks and n bytes with latency α, inverse bandwidth β, reduction γ."""
        return (self.steps(p, n, params) * alpha + self.bytes(p, n, params) * beta
                + self.reduced(p, n, params) * gamma)


@dataclass(frozen=True)
class Parameter:
    """A parameter of an algorithm: an integer (at least ``minimum``), or, when ``default`` is a
    string, a text such as a topology SPEC (the synthesizer's ``topology``). A text that takes one of a
    few values declares them as ``choices`` (the default among them): ``resolve`` refuses any other, and
    ``sim.verify.strategies.schedules`` draws among them."""

    name: str
    default: int | str
    help: str
    minimum: int = 1
    choices: tuple[str, ...] = ()


CHUNKS = Parameter("chunks", 1, "split each logical piece into this many chunks (pipelining)")


@dataclass(frozen=True)
class Algorithm:
    """One registered (kind, algorithm) pair."""

    kind: Kind
    name: str
    builder: Builder = field(repr=False)
    source: str
    constraints: tuple[str, ...] = ()
    parameters: tuple[Parameter, ...] = (CHUNKS,)
    cost: Cost | None = None
    check: Callable[[int, Mapping[str, int]], str | None] | None = field(default=None, repr=False)
    listed: bool = True
    """False for algorithms that ``get`` serves by name but ``algorithms()`` does not list (the
    topology-aware synthesizer: it has no closed-form cost, and building it costs a packing)."""
    symmetric: Callable[..., SymmetricForm | None] | None = field(default=None, repr=False)
    """Called as the builder is, ``(ranks, **params)``: the schedule's symmetric form
    (``algorithms.symmetric``), or None where it has none; None here: the algorithm gives none."""

    @property
    def module(self) -> str:
        """The module that registered it (the builder's ``__module__``): where to look when it misbehaves."""
        return str(getattr(self.builder, "__module__", None) or "?")

    def unsupported(self, ranks: int, params: Mapping[str, int | str] | None = None) -> str | None:
        """Why this algorithm cannot serve ``ranks`` with ``params``, or None when it can."""
        if self.check is None:
            return None
        return self.check(ranks, self.resolve(params or {}))

    def refusal(self, ranks: int, params: Mapping[str, int | str] | None = None) -> str | None:
        """Why ``ranks`` with ``params`` cannot be built, as one sentence that blames the right thing, or None.

        When the check refuses but the default parameters would serve ``ranks``, the parameters given are
        to blame: the sentence names those that, set back alone, make it serve (else every one given), their
        values, what they mean and the constraints. Otherwise the world size is: "cannot serve p ranks".
        """
        resolved = self.resolve(params or {})
        reason = self.check(ranks, resolved) if self.check is not None else None
        if reason is None or self.check is None:
            return None
        defaults = {p.name: p.default for p in self.parameters}
        given = {k: v for k, v in resolved.items() if k in (params or {}) and v != defaults[k]}
        if given and self.check(ranks, self.resolve({})) is None:
            blamed = [k for k in given
                      if self.check(ranks, self.resolve({n: v for n, v in given.items() if n != k})) is None]
            blamed = blamed or list(given)
            helps = "; ".join(f"{p.name}: {p.help}" for p in self.parameters if p.name in blamed)
            allowed = f"; allowed: {'; '.join(self.constraints)}" if self.constraints else ""
            names = ", ".join(f"{k}={given[k]}" for k in blamed)
            return (f"{self.kind}/{self.name}: parameter{'s' if len(blamed) > 1 else ''} {names} does not fit "
                    f"{ranks} ranks: {reason} ({helps}{allowed})")
        return f"{self.kind}/{self.name} cannot serve {ranks} ranks: {reason}"

    def resolve(self, params: Mapping[str, int | str]) -> dict[str, Any]:
        """Parameters with defaults filled in, each checked; unknown names are an error."""
        known = {p.name: p for p in self.parameters}
        for name in params:
            if name not in known:
                raise RegistryError(
                    f"{self.kind}/{self.name}: unknown parameter {name!r} "
                    f"(known: {', '.join(known) or 'none'})"
                )
        out: dict[str, Any] = {}
        for p in self.parameters:
            value = params.get(p.name, p.default)
            if isinstance(p.default, str):
                if not isinstance(value, str):
                    raise RegistryError(f"{self.kind}/{self.name}: {p.name} must be a text, got {value!r}")
                if p.choices and value not in p.choices:
                    raise RegistryError(f"{self.kind}/{self.name}: {p.name} must be one of "
                                        f"{', '.join(p.choices)}, got {value!r}")
                out[p.name] = value
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < p.minimum:
                raise RegistryError(
                    f"{self.kind}/{self.name}: {p.name} must be an integer >= {p.minimum}, got {value!r}"
                )
            out[p.name] = value
        return out

    def _admitted(self, ranks: int, params: Mapping[str, Any]) -> dict[str, Any]:
        """``params`` resolved (``resolve``) once ``ranks`` is a world size and the algorithm serves it with them
        (``refusal``); a ``RegistryError`` saying why not otherwise."""
        if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
            raise RegistryError(f"ranks must be an integer >= 1, got {ranks!r}")
        resolved = self.resolve(params)
        refusal = self.refusal(ranks, params)
        if refusal is not None:
            raise RegistryError(refusal)
        return resolved

    def build(self, ranks: int, *, root: int | None = None, matrix: Any = None, **params: int | str) -> Schedule:
        """Build the schedule for ``ranks`` ranks; rooted kinds default to root 0.

        ``matrix`` (all-to-allv only) is the traffic matrix, p rows of p chunk counts; without it an
        all-to-allv builder serves the uniform matrix of ``chunks`` a pair.
        """
        resolved = self._admitted(ranks, params)
        extra: dict[str, Any] = {}
        if self.kind is Kind.ALLTOALLV:
            if root is not None:
                raise RegistryError(f"{self.kind} has no root, got root={root}")
            extra["matrix"] = matrix
        elif matrix is not None:
            raise RegistryError(f"{self.kind} takes no traffic matrix (alltoallv does)")
        elif self.kind in ROOTED_KINDS:
            root = 0 if root is None else root
            if isinstance(root, bool) or not isinstance(root, int) or not 0 <= root < ranks:
                raise RegistryError(f"root {root!r} out of range for {ranks} ranks")
            extra["root"] = root
        elif root is not None:
            raise RegistryError(f"{self.kind} has no root, got root={root}")
        try:
            with no_gc():
                schedule = self.builder(ranks, **extra, **resolved)
        except CollschedError:
            raise
        except Exception as e:  # a builder's own bug: name it, its module and what it was asked for
            raise RegistryError(f"{self._called(ranks, extra, resolved)} raised {type(e).__name__}: {e}") from None
        return self._checked(schedule, ranks, extra, resolved)

    def symmetric_form(self, ranks: int, **params: int | str) -> SymmetricForm | None:
        """The symmetric form of the schedule ``build(ranks, **params)`` would return (``algorithms.symmetric``),
        or None where the algorithm gives none for these parameters. Nothing is built."""
        if self.symmetric is None:
            return None
        resolved = self._admitted(ranks, params)
        try:
            return self.symmetric(ranks, **resolved)
        except CollschedError:
            raise
        except Exception as e:  # as build: the module's own bug, named
            raise RegistryError(f"{self._called(ranks, {}, resolved)} (symmetric form) raised "
                                f"{type(e).__name__}: {e}") from None

    def _called(self, ranks: int, extra: Mapping[str, Any], resolved: Mapping[str, Any]) -> str:
        """The builder call in words: its module and function, the algorithm, p and the parameters."""
        args = ", ".join(f"{k}={v!r}" for k, v in {**({"root": extra["root"]} if "root" in extra else {}),
                                                   **resolved}.items())
        where = f"{getattr(self.builder, '__module__', '?')}.{getattr(self.builder, '__qualname__', '?')}"
        return f"{self.kind}/{self.name} (builder {where}) for p={ranks}{f', {args}' if args else ''}"

    def _checked(self, schedule: object, ranks: int, extra: Mapping[str, Any], resolved: Mapping[str, Any]
                 ) -> Schedule:
        """``schedule`` when it is what the builder was asked for: a Schedule of this kind, p ranks and root."""
        if not isinstance(schedule, Schedule):
            problem = f"returned a {type(schedule).__name__}, not a Schedule"
        elif schedule.collective.kind is not self.kind:
            problem = f"returned a {schedule.collective.kind} schedule"
        elif schedule.collective.ranks != ranks:
            problem = f"returned a schedule for {schedule.collective.ranks} ranks"
        elif "root" in extra and schedule.collective.root != extra["root"]:
            problem = f"returned a schedule rooted at {schedule.collective.root}"
        else:
            return schedule
        raise RegistryError(f"{self._called(ranks, extra, resolved)} {problem}")


@contextmanager
def no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector: building millions of acyclic tuples otherwise
    triggers full collections that scan them all again and again (40% of build time at p = 1024)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


_REGISTRY: dict[tuple[Kind, str], Algorithm] = {}


def register(
    kind: Kind,
    name: str,
    *,
    source: str,
    constraints: tuple[str, ...] = (),
    parameters: tuple[Parameter, ...] = (CHUNKS,),
    cost: Cost | None = None,
    check: Callable[[int, Mapping[str, int]], str | None] | None = None,
    listed: bool = True,
    symmetric: Callable[..., SymmetricForm | None] | None = None,
) -> Callable[[Builder], Builder]:
    """Decorator: register a builder as ``kind``/``name`` (``listed=False``: by name only; ``symmetric``: its
    symmetric form, ``Algorithm.symmetric``)."""

    def wrap(builder: Builder) -> Builder:
        key = (Kind(kind), name)
        if key in _REGISTRY:
            raise RegistryError(f"{kind}/{name} is registered twice")
        if cost is not None:
            _check_cost(f"{Kind(kind)}/{name}", str(getattr(builder, "__module__", None) or "?"), cost)
        _REGISTRY[key] = Algorithm(Kind(kind), name, builder, source, constraints, parameters, cost, check, listed,
                                   symmetric)
        return builder

    return wrap


COST_FIELDS = ("steps", "bytes", "reduced", "sent_per_rank")
"""The functions of a ``Cost``, each called as ``f(p, n, params)``."""


def _check_cost(algorithm: str, module: str, cost: Any) -> None:
    """``RegistryError`` naming the algorithm and its module unless every function of ``cost`` can be called
    with the three positional arguments ``(p, n, params)`` (``sent_per_rank`` may be None)."""
    where = f"{algorithm} (registered in module {module})"
    if not isinstance(cost, Cost):
        raise RegistryError(f"{where}: cost must be an algorithms.registry.Cost, got {type(cost).__name__}")
    for field_name in COST_FIELDS:
        fn = getattr(cost, field_name)
        if fn is None and field_name == "sent_per_rank":
            continue
        if not callable(fn):
            raise RegistryError(f"{where}: Cost.{field_name} must be a function of (p, n, params), got {fn!r}")
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError):
            continue  # a builtin without a signature: nothing to check
        try:
            signature.bind(2, 1.0, {})
        except TypeError:
            raise RegistryError(
                f"{where}: Cost.{field_name} takes {signature} but is called with three positional arguments "
                "(p, n, params): the world size, the message size in bytes and the parameter dictionary "
                '(params["chunks"], ...), e.g. lambda p, n, params: 2 * (p - 1)') from None


def import_modules(names: Iterable[str], *, where: str = "--import") -> None:
    """Import each module (so that its ``@register`` decorators run); ``RegistryError`` naming one that fails.

    An entry that ends in ``.py`` or holds a path separator is a file (module docstring), else a module name.
    """
    for name in names:
        name = name.strip()
        if not name:
            continue
        if name.endswith(".py") or "/" in name or os.sep in name:
            _import_file(name, where)
            continue
        try:
            importlib.import_module(name)
        except CollschedError as e:
            raise _in_module(e, where, name, name) from None
        except ModuleNotFoundError as e:
            hint = _not_found_hint(name, where) if e.name == name.split(".")[0] else ""
            raise RegistryError(f"{where}: cannot import module {name!r}: {type(e).__name__}: {e}{hint}") from None
        except (Exception, SystemExit) as e:  # an ImportError, or whatever the module raised while running
            raise RegistryError(f"{where}: cannot import module {name!r}: {_raised(e)}") from None


def _in_module(error: CollschedError, where: str, what: str, module: str) -> CollschedError:
    """``error``, raised while importing ``module``, with what imported it (``--import``, ``COLLSCHED_IMPORT``)
    and the module in front, so that the command line's one-line error says where to look."""
    text = str(error)
    named = "" if f"module {module}" in text else f"module {what}: "
    try:
        return type(error)(f"{where}: {named}{text}")
    except TypeError:  # an error class that takes other arguments
        return RegistryError(f"{where}: {named}{text}")


def _not_found_hint(name: str, where: str) -> str:
    """Where Python looked, and the two ways to point it at the user's file."""
    top = name.split(".")[0]
    if any(os.path.abspath(p or ".") == os.getcwd() for p in sys.path):
        return ""  # the directory was searched (python -m, PYTHONPATH=.): the module is just not there
    flag = f"{ENV_IMPORT}=" if where == ENV_IMPORT else "--import "
    here = f"./{top}.py" if os.path.isfile(f"{top}.py") else ""
    if here and top == name:
        how = f"{here} is here, so run with PYTHONPATH=. or pass the file, {flag}{here}"
    else:
        how = f"run with PYTHONPATH=DIR, or pass the file, {flag}path/to/{name.replace('.', '/')}.py"
    return f" (the current directory is not searched unless PYTHONPATH says so: {how})"


def _import_file(path: str, where: str) -> None:
    """Import the ``.py`` file at ``path`` as the module named by its stem, unless that file is imported already."""
    full = os.path.realpath(path)
    if not os.path.isfile(full):
        raise RegistryError(f"{where}: cannot import {path!r}: no such file")
    stem = os.path.splitext(os.path.basename(full))[0]
    loaded = sys.modules.get(stem)
    if loaded is not None:
        if getattr(loaded, "__file__", None) and os.path.realpath(str(loaded.__file__)) == full:
            return
        raise RegistryError(f"{where}: cannot import {path!r}: a module named {stem!r} is already imported "
                            f"(from {getattr(loaded, '__file__', None) or 'built in'}); rename the file")
    spec = importlib.util.spec_from_file_location(stem, full)
    if spec is None or spec.loader is None:
        raise RegistryError(f"{where}: cannot import {path!r}: not a Python source file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[stem] = module  # as import does: once, and by name for whatever imports it next
    try:
        spec.loader.exec_module(module)
    except CollschedError as e:
        del sys.modules[stem]
        raise _in_module(e, where, repr(path), stem) from None
    except (Exception, SystemExit) as e:
        del sys.modules[stem]
        raise RegistryError(f"{where}: cannot import {path!r}: {_raised(e)}") from None


def _raised(error: BaseException) -> str:
    """What a module raised while being imported, in words: a ``SystemExit`` (``sys.exit`` or ``exit()`` at
    import) would otherwise end the command with its code and no output."""
    if isinstance(error, SystemExit):
        return f"the module called sys.exit({error.code!r}) while being imported"
    return f"{type(error).__name__}: {error}"


def env_modules() -> list[str]:
    """The module names and ``.py`` paths in ``COLLSCHED_IMPORT`` (comma-separated; blanks ignored)."""
    return [m.strip() for m in os.environ.get(ENV_IMPORT, "").split(",") if m.strip()]


def load_entry_points(group: str, error: type[CollschedError]) -> None:
    """Load every entry point of ``group``: a module (imported) or ``module:function`` (called). A failure is
    ``error`` naming the entry point (``collsched.algorithms`` here, ``collsched.topologies`` for topologies)."""
    from importlib.metadata import entry_points

    for ep in entry_points(group=group):
        where = f"entry point {ep.name} = {ep.value} (group {group})"
        try:
            loaded = ep.load()
            if ep.attr is not None:
                loaded()
        except CollschedError as e:
            raise error(f"{where}: {e}") from None
        except (Exception, SystemExit) as e:
            raise error(f"{where}: cannot load: {_raised(e)}") from None


_plugins_loaded = False
_plugin_error: RegistryError | None = None


def load_plugins() -> None:
    """Import the ``collsched.algorithms`` entry points and ``COLLSCHED_IMPORT`` modules, once.

    Called by every query; a failure is raised again by every later query.
    """
    global _plugins_loaded, _plugin_error
    if _plugin_error is not None:
        raise _plugin_error
    if _plugins_loaded:
        return
    _plugins_loaded = True  # first: a plugin that queries the registry while importing must not recurse

    try:
        load_entry_points(ENTRY_POINT_GROUP, RegistryError)
        import_modules(env_modules(), where=ENV_IMPORT)
    except RegistryError as e:
        _plugin_error = e
        raise


def _kind(kind: Kind | str) -> Kind:
    try:
        return Kind(kind)
    except ValueError:
        raise RegistryError(f"unknown collective {kind!r} (one of {', '.join(k.value for k in Kind)})") from None


def get(kind: Kind | str, name: str) -> Algorithm:
    """The registered algorithm, or a RegistryError listing the ones that exist for that kind."""
    load_plugins()
    k = _kind(kind)
    try:
        return _REGISTRY[(k, name)]
    except KeyError:
        names = sorted(n for (kk, n) in _REGISTRY if kk is k)
        raise RegistryError(
            f"unknown algorithm {name!r} for {k} (known: {', '.join(names) or 'none'}; "
            f"an algorithm of your own: --import MODULE or {ENV_IMPORT}=MODULE)"
        ) from None


def _in_order(kind: Kind | str | None, listed: bool) -> Iterator[Algorithm]:
    load_plugins()
    order = {k: i for i, k in enumerate(Kind)}
    k = None if kind is None else _kind(kind)
    for key in sorted(_REGISTRY, key=lambda kn: (order[kn[0]], kn[1])):
        if (k is None or key[0] is k) and _REGISTRY[key].listed == listed:
            yield _REGISTRY[key]


def algorithms(kind: Kind | str | None = None) -> Iterator[Algorithm]:
    """Every registered algorithm, optionally of one kind, sorted by kind order then name."""
    return _in_order(kind, True)


def by_name_only(kind: Kind | str | None = None) -> Iterator[Algorithm]:
    """The algorithms registered with ``listed=False`` (reached by name: ``get``, ``-a NAME``), in
    ``algorithms``' order: those that need a switch that reduces or multicasts, and the synthesizer's."""
    return _in_order(kind, False)


def kinds() -> list[Kind]:
    """The kinds that have at least one algorithm."""
    load_plugins()
    return sorted({k for k, _ in _REGISTRY}, key=list(Kind).index)


def build(kind: Kind | str, name: str, ranks: int, *, root: int | None = None, **params: Any) -> Schedule:
    """Look up and build in one call: ``build("allreduce", "ring", 8, chunks=2)``."""
    return get(kind, name).build(ranks, root=root, **params)
