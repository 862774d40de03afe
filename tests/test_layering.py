"""The house rules of the import graph: algorithms < sim < runners, no module imports its own package's
``__init__``, and no import circles at all (lazy imports inside functions count too).

The graph is read from the source with ``ast``, so it sees every import statement, not only those run
at import time. ``test_checker_finds_*`` prove the checks can fail.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {"algorithms": 0, "sim": 1, "runners": 2}
# Inside sim, the order the subpackages build on each other (a lower one never imports a higher one).
SIM_LAYERS = {"units": 0, "progress": 0, "lazy": 0, "topology": 1, "verify": 1, "engine": 2, "machine": 3, "bounds": 4,
              "guards": 4, "cli": 5, "campaign": 6}
# Inside runners, likewise: one schedule's execution, the backend built on it, the commands on both.
RUNNERS_LAYERS = {"errors": 0, "execution": 1, "backend": 2, "commands": 3}
SUB_LAYERS = {"sim": SIM_LAYERS, "runners": RUNNERS_LAYERS}
MAX_LINES = 800


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the three packages: dotted name -> file (a package is its ``__init__``)."""
    out = {}
    for pkg in LAYERS:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``name`` (at ``path``) imports anywhere in its source.

    ``from P import x`` is an import of ``P.x`` when that is a module, else of ``P``."""
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for a in node.names:
                if f"{target}.{a.name}" in known:
                    out.add(f"{target}.{a.name}")
                elif target in known:
                    out.add(target)
    out.discard(name)
    return out


def graph(root: Path = ROOT) -> nx.DiGraph:
    mods = modules(root)
    g = nx.DiGraph()
    g.add_nodes_from(mods)
    for name, path in mods.items():
        g.add_edges_from((name, dep) for dep in imports(name, path, set(mods)))
    return g


def upward(g: nx.DiGraph) -> list[tuple[str, str]]:
    """Imports against the layer order: across packages, and between the subpackages of sim and of runners."""
    bad = []
    for a, b in g.edges:
        pa, pb = a.split(".")[0], b.split(".")[0]
        if LAYERS[pa] < LAYERS[pb]:
            bad.append((a, b))
        elif pa == pb and pa in SUB_LAYERS and len(a.split(".")) > 1 and len(b.split(".")) > 1:
            order = SUB_LAYERS[pa]
            if order[a.split(".")[1]] < order[b.split(".")[1]]:
                bad.append((a, b))
    return bad


def into_own_package(g: nx.DiGraph) -> list[tuple[str, str]]:
    """A module importing a package that contains it (its ``__init__`` imports the module: a circle)."""
    return [(a, b) for a, b in g.edges if a.startswith(b + ".")]


def circles(g: nx.DiGraph) -> list[list[str]]:
    """Import circles, ignoring a package's imports of its own submodules (how it exports them)."""
    h = g.copy()
    h.remove_edges_from([(a, b) for a, b in g.edges if b.startswith(a + ".")])
    return [sorted(c) for c in nx.strongly_connected_components(h) if len(c) > 1]


def test_no_upward_arrow():
    assert upward(graph()) == []


def test_no_module_imports_its_own_package():
    assert into_own_package(graph()) == []


def test_no_import_circles():
    assert circles(graph()) == []


def test_algorithms_and_sim_never_import_torch():
    g = graph()
    for name, path in modules().items():
        if name.split(".")[0] in ("algorithms", "sim"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
            roots |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
            assert "torch" not in roots, name
    assert g.number_of_nodes() > 50


# Modules still being split (each entry goes when its split lands; the test fails if one grows or a new one
# crosses the line).
NOT_YET_SPLIT: dict[str, int] = {}


def test_every_module_is_under_800_lines():
    long = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) >= MAX_LINES}
    assert all(name in NOT_YET_SPLIT and n <= NOT_YET_SPLIT[name] for name, n in long.items()), long


def cpp_files(root: Path = ROOT) -> list[Path]:
    """The C++ sources and headers of the native executor and backend."""
    return sorted(p for p in (root / "runners" / "csrc").rglob("*") if p.suffix in {".h", ".cpp"})


def long_files(paths: list[Path]) -> dict[str, int]:
    return {p.name: n for p in paths if (n := len(p.read_text().splitlines())) >= MAX_LINES}


def test_every_cpp_file_is_under_800_lines():
    assert len(cpp_files()) >= 3
    assert long_files(cpp_files()) == {}


def test_runners_is_subpackages_each_saying_what_it_owns():
    """runners/ holds subpackages (and the one shared errors module), each ``__init__`` with a docstring that
    names every module of its package."""
    top = ROOT / "runners"
    flat = sorted(p.stem for p in top.glob("*.py") if p.stem not in ("__init__", *RUNNERS_LAYERS))
    assert flat == []
    packages = sorted(p.parent for p in top.glob("*/__init__.py"))
    assert [p.name for p in packages] == sorted(n for n in RUNNERS_LAYERS if (top / n).is_dir())
    for pkg in packages:
        doc = ast.get_docstring(ast.parse((pkg / "__init__.py").read_text())) or ""
        missing = [m.stem for m in pkg.glob("*.py") if m.stem != "__init__" and f"``{m.stem}``" not in doc]
        assert doc and missing == [], (pkg.name, missing)


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    for pkg in LAYERS:
        (tmp_path / pkg).mkdir(exist_ok=True)
        (tmp_path / pkg / "__init__.py").touch()
    return tmp_path


def test_checker_finds_a_circle_through_a_lazy_import(tmp_path):
    root = _tree(tmp_path, {"sim/a.py": "import sim.b\n", "sim/b.py": "def f():\n    from sim import a\n"})
    assert circles(graph(root)) == [["sim.a", "sim.b"]]


def test_checker_finds_an_upward_arrow(tmp_path):
    root = _tree(tmp_path, {"algorithms/x.py": "def f():\n    from sim.y import z\n", "sim/y.py": "z = 1\n",
                            "sim/engine/__init__.py": "", "sim/engine/e.py": "from sim.cli.c import q\n",
                            "sim/cli/__init__.py": "", "sim/cli/c.py": "q = 1\n"})
    assert sorted(upward(graph(root))) == [("algorithms.x", "sim.y"), ("sim.engine.e", "sim.cli.c")]


def test_checker_finds_an_upward_arrow_inside_runners(tmp_path):
    root = _tree(tmp_path, {"runners/execution/__init__.py": "",
                            "runners/execution/r.py": "import runners.backend.g\n", "runners/backend/__init__.py": "",
                            "runners/backend/g.py": "from runners.execution import r\n"})
    assert upward(graph(root)) == [("runners.execution.r", "runners.backend.g")]


def test_checker_finds_a_long_cpp_file(tmp_path):
    (tmp_path / "runners" / "csrc" / "x").mkdir(parents=True)
    (tmp_path / "runners" / "csrc" / "x" / "big.h").write_text("//\n" * MAX_LINES)
    (tmp_path / "runners" / "csrc" / "small.cpp").write_text("//\n")
    assert long_files(cpp_files(tmp_path)) == {"big.h": MAX_LINES}


def test_checker_finds_an_import_of_the_own_package(tmp_path):
    root = _tree(tmp_path, {"sim/topology/__init__.py": "from sim.topology.g import G\n",
                            "sim/topology/g.py": "G = 1\n", "sim/topology/p.py": "from sim.topology import G\n"})
    assert into_own_package(graph(root)) == [("sim.topology.p", "sim.topology")]
