"""The table of topology SPEC forms (``sim.topology.forms``): dispatch, listing, and forms a user's module adds
through ``register_topology``, ``--import``, ``COLLSCHED_IMPORT`` and the ``collsched.topologies`` entry points.

The user's module is written to a temporary directory and imported as a user would (in-process: the
directory on ``sys.path``); the command line runs in-process through ``sim.cli.main``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from algorithms import registry
from sim.cli import main
from sim.topology import SPEC_FORMS, TopologyError, forms, from_spec, register_topology, spec_forms, topology_forms

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())  # the repository
BUILTIN = ["ring:P", "uring:P", "full:P", "switch:P", "torus:RxC[xD...][@DIM=BW[/LAT],...]", "fattree:K",
           "cluster:NxG", "dgx-h100:N", "hgx-h200:N", "dgx-a100:N", "dgx-b200:N", "gb200-nvl72:N"]

# A user's module: a ring at 1 GB/s and no latency ("myring:P"), and a mesh without wrap-around ("mesh:RxC").
USER_FORMS = '''
import networkx as nx
from sim.topology import Topology, parse_shape, register_topology


@register_topology("{prefix}ring", syntax="{prefix}ring:P", help="a ring at 1 GB/s, no latency",
                   constraints=("P >= 2",), ranks=lambda a: a[0], source="a user's module")
def my_ring(p):
    g = nx.DiGraph()
    g.add_nodes_from(range(p))
    for r in range(p):
        g.add_edge(r, (r + 1) % p, bandwidth=1e9, latency=0.0)
        g.add_edge((r + 1) % p, r, bandwidth=1e9, latency=0.0)
    return Topology(g, f"{prefix}ring:{{p}}")


@register_topology("{prefix}mesh", syntax="{prefix}mesh:RxC", help="2-D mesh, no wrap-around links",
                   parse=lambda text: dict(zip(("rows", "cols"), parse_shape(text, 2), strict=True)),
                   ranks=lambda a: a["rows"] * a["cols"])
def mesh(rows, cols):
    g = nx.DiGraph()
    g.add_nodes_from(range(rows * cols))
    for i in range(rows):
        for j in range(cols):
            r = i * cols + j
            for n in ([r + 1] if j + 1 < cols else []) + ([r + cols] if i + 1 < rows else []):
                g.add_edge(r, n, bandwidth=50e9, latency=1e-6)
                g.add_edge(n, r, bandwidth=50e9, latency=1e-6)
    return Topology(g, f"{prefix}mesh:{{rows}}x{{cols}}")
'''


@pytest.fixture
def table(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A copy of the table, and plugin loading not yet done, for the test; everything put back after."""
    monkeypatch.setattr(forms, "_FORMS", dict(forms._FORMS))
    monkeypatch.setattr(forms, "_plugins_loaded", False)
    monkeypatch.setattr(forms, "_plugin_error", None)
    monkeypatch.setattr(registry, "_plugins_loaded", False)
    monkeypatch.setattr(registry, "_plugin_error", None)
    monkeypatch.delenv(registry.ENV_IMPORT, raising=False)
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith("user_forms"):
            del sys.modules[name]


def _module(where: Path, name: str, prefix: str) -> str:
    (where / f"{name}.py").write_text(USER_FORMS.format(prefix=prefix))
    return name


# -- the table -------------------------------------------------------------------------------------


def test_the_builtin_forms_are_the_table_and_its_text() -> None:
    assert [f.syntax for f in topology_forms()][:len(BUILTIN)] == BUILTIN
    assert SPEC_FORMS == ", ".join(BUILTIN) + ", or a topology file"
    assert spec_forms().startswith(SPEC_FORMS[: -len(", or a topology file")])
    # Every built-in form builds through the table, under the name its SPEC gives.
    for spec in ("ring:3", "uring:3", "full:3", "switch:3", "torus:2x3", "torus:2x2x2", "fattree:2", "cluster:2x2",
                 "dgx-h100:1"):
        assert from_spec(spec).name == spec


@pytest.mark.multiprocess
def test_building_the_parser_imports_no_networkx() -> None:
    code = ("import sys; import sim.topology.forms, sim.topology.routing; from sim.cli.app import build_parser; "
            "build_parser(); print(sorted(m for m in ('networkx', 'simpy', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_help_text_comes_from_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "torus:RxC[xD...][@DIM=BW[/LAT],...]" in text and "collsched list --topologies" in text


@pytest.mark.parametrize("spec", ["mesh:4", "nosuch:4", "torus4x4"])
def test_an_unknown_form_lists_the_known_ones(spec: str) -> None:
    with pytest.raises(TopologyError, match=f"unknown topology '{spec}'") as e:
        from_spec(spec)
    assert SPEC_FORMS in str(e.value)
    if ":" in spec:
        assert f"no form '{spec.split(':')[0]}'" in str(e.value) and "--import MODULE" in str(e.value)


def test_registering_checks_the_name_and_refuses_twice(table: None) -> None:
    with pytest.raises(TopologyError, match="registered twice"):
        register_topology("ring", syntax="ring:P", help="again")(lambda p: None)
    with pytest.raises(TopologyError, match="topology form name 'Bad_Name'"):
        register_topology("Bad_Name", syntax="Bad_Name:P", help="")
    with pytest.raises(TopologyError, match="its syntax must start with 'odd:'"):
        register_topology("odd", syntax="even:P", help="")


def test_a_parse_that_fails_or_returns_nonsense_is_named(table: None) -> None:
    def boom(text: str) -> dict[str, int]:
        return {"n": int(text)}

    register_topology("boom", syntax="boom:N", help="", parse=boom)(lambda n: from_spec(f"ring:{n}"))
    assert from_spec("boom:3").ranks == 3
    with pytest.raises(TopologyError, match=r"topology 'boom:x': invalid literal for int\(\)"):
        from_spec("boom:x")
    register_topology("junk", syntax="junk:N", help="", parse=lambda text: [1])(lambda n: None)
    with pytest.raises(TopologyError, match="parse returned list, not a dict of keyword arguments"):
        from_spec("junk:1")


# -- user modules ----------------------------------------------------------------------------------


def test_a_users_module_adds_forms(table: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TopologyError, match="unknown topology 'mymesh:2x3'"):
        from_spec("mymesh:2x3")
    __import__(_module(tmp_path, "user_forms_a", "my"))
    t = from_spec("mymesh:2x3")
    assert (t.name, t.ranks, len(t.links)) == ("mymesh:2x3", 6, 2 * (2 * 2 + 3 * 1))  # 4 row, 3 column cables
    assert [f.syntax for f in topology_forms()][-2:] == ["myring:P", "mymesh:RxC"]
    assert "myring:P, mymesh:RxC, or a topology file" in spec_forms()
    # ranks is checked before the builder runs; bad text names the SPEC.
    with pytest.raises(TopologyError, match="'mymesh:300x300': 90000 ranks is more than the 65536"):
        from_spec("mymesh:300x300")
    with pytest.raises(TopologyError, match=r"topology 'mymesh:2': expected NxN after the colon, got '2'"):
        from_spec("mymesh:2")
    # --bandwidth/--latency set every link of a user's form too.
    assert {a["bandwidth"] for *_, a in from_spec("myring:3", bandwidth=5.0).graph.edges(data=True)} == {5.0}


def test_collsched_import_brings_a_form_in_before_the_lookup(table: None, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(registry.ENV_IMPORT, _module(tmp_path, "user_forms_b", "env"))
    assert "user_forms_b" not in sys.modules
    assert from_spec("envring:5").ranks == 5  # the unknown form made the table load COLLSCHED_IMPORT


def _entry_point(site: Path, value: str) -> None:
    info = site / "user_topologies-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: user-topologies\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{forms.ENTRY_POINT_GROUP}]\nuser = {value}\n")


def test_an_installed_entry_point_registers_forms(table: None, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    _module(tmp_path, "user_forms_c", "ep")
    (tmp_path / "user_forms_c_load.py").write_text("def load():\n    import user_forms_c  # noqa: F401\n")
    _entry_point(tmp_path, "user_forms_c_load:load")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert from_spec("epmesh:2x2").ranks == 4


def test_a_broken_entry_point_is_named(table: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _entry_point(tmp_path, "user_forms_missing")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert from_spec("ring:3").ranks == 3  # a known form needs no plugin
    message = (r"entry point user = user_forms_missing \(group collsched.topologies\): cannot load: "
               "ModuleNotFoundError")
    for _ in range(2):  # and every later lookup says so again
        with pytest.raises(TopologyError, match=message):
            from_spec("nosuch:3")


# -- the command line -------------------------------------------------------------------------------


def test_list_topologies(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--topologies", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True and [r["form"] for r in doc["topologies"]][:len(BUILTIN)] == BUILTIN
    torus = next(r for r in doc["topologies"] if r["name"] == "torus")
    assert torus["constraints"] == ["at least 2 dimensions, each >= 1", "at most 65536 ranks"]
    assert "x=100GB/s" in torus["help"] and torus["source"] == "sim.topology.builders"
    assert main(["list", "--topologies"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["form", "constraints", "help"] and lines[1].startswith("ring:P ")
    assert lines[-1].startswith("or a topology file")
    assert main(["list", "--json"]) == 0  # plain list: the algorithms, as before
    assert "algorithms" in json.loads(capsys.readouterr().out)


def test_the_command_line_uses_a_users_form(table: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    name = _module(tmp_path, "user_forms_d", "cli")
    assert main(["list", "--topologies", "--json", "--import", name]) == 0
    rows = json.loads(capsys.readouterr().out)["topologies"]
    assert {"form": "cliring:P", "help": "a ring at 1 GB/s, no latency", "constraints": ["P >= 2"],
            "source": "a user's module"}.items() <= rows[-2].items()
    # Ring all-reduce of 1 MiB on the user's 1 GB/s ring of 4, no latency: 2(p-1)/p·N/B.
    assert main(["simulate", "-c", "allreduce", "-a", "ring", "-t", "cliring:4", "--size", "1MiB", "--json",
                 "--no-progress", "--bound", "no", "--import", name]) == 0
    assert json.loads(capsys.readouterr().out)["time_s"] == pytest.approx(2 * 3 / 4 * 2**20 / 1e9, rel=1e-9)


def test_the_command_line_names_an_unknown_form(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bound", "-c", "allgather", "-t", "hypercube:4", "--size", "1MiB"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown topology 'hypercube:4': no form 'hypercube'" in err
    assert "torus:RxC[xD...]" in err and "--import MODULE" in err
    assert main(["simulate", "-c", "allreduce", "-a", "ring", "-t", "torus:4x4@q=1GB/s", "--size", "1MiB",
                 "--json"]) == 2
    assert "no dimension 'q' in 2 dimensions" in json.loads(capsys.readouterr().out)["error"]
