"""The package installs: a wheel built from the repository, installed into a fresh virtual environment and used
from a folder outside the repository, holds every module and every data file of the source tree and runs.

The wheel is built by pip (``--no-build-isolation --no-index``: the running environment's setuptools, no
network) from a copy of the packages and pyproject.toml, so that setuptools' build/ and egg-info folders are
not written into the checkout. The new environment has no pip and no packages of its own; it sees this
environment's installed packages (torch, numpy, ...) through a .pth file naming a folder of links to them,
collsched's own installed copy and the editable-install hooks left out, and the wheel goes in with
``--no-deps``. Every check runs in that environment's interpreter, from a folder outside the repository and
with no PYTHONPATH, and asserts that what it imported came from the environment, not from the source tree.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("algorithms", "sim", "runners")
# collsched's own entries in this environment's site-packages (an editable or a regular install): not shown to
# the new one.
OWN = ("collsched", "__editable__", *PACKAGES)

# Run in the installed environment: import every module below the packages, get every name of each __all__,
# and report where each came from and which data files the installed packages hold.
PROBE = f"PACKAGES = {PACKAGES!r}\n" + """
import importlib, json, pkgutil, sys
from pathlib import Path
out = {"modules": {}, "broken": [], "data": [], "sys_path": sys.path}
for top in PACKAGES:
    try:
        pkg = importlib.import_module(top)
    except Exception as e:
        out["broken"].append(f"{top}: {e!r}")
        continue
    for name in [top, *(m.name for m in pkgutil.walk_packages(pkg.__path__, top + "."))]:
        try:
            module = importlib.import_module(name)
            for attr in getattr(module, "__all__", ()):
                getattr(module, attr)
        except Exception as e:
            out["broken"].append(f"{name}: {e!r}")
            continue
        out["modules"][name] = module.__file__
    base = Path(pkg.__file__).parent
    out["data"] += [f"{top}/{p.relative_to(base).as_posix()}" for p in base.rglob("*")
                    if p.is_file() and p.suffix not in (".py", ".pyc")]
print(json.dumps(out))
"""


def source_modules() -> set[str]:
    """Module names of the source tree's packages (``pkg.sub`` for ``pkg/sub/__init__.py``)."""
    names = set()
    for top in PACKAGES:
        for path in (ROOT / top).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            names.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def source_data() -> set[str]:
    """The source tree's non-Python files inside the packages: the C++ sources, tuning tables, py.typed."""
    return {p.relative_to(ROOT).as_posix() for top in PACKAGES for p in (ROOT / top).rglob("*")
            if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts}


def _run(cmd: list[str | Path], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    shown = " ".join(str(c) for c in cmd[:3]) + (" ..." if len(cmd) > 3 else "")
    assert r.returncode == 0, f"{shown}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.mark.slow
@pytest.mark.multiprocess
def test_the_wheel_installs_and_runs_outside_the_repository(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    env["PIP_NO_INDEX"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"

    # Build the wheel from a copy of what setuptools reads.
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for top in PACKAGES:
        shutil.copytree(ROOT / top, src / top, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", dist,
          src], tmp_path, env)
    (wheel,) = dist.glob("collsched-*.whl")

    # A fresh environment that sees this one's dependencies but not collsched itself.
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], tmp_path, env)
    python = venv / "bin" / "python"
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path,
                     env).stdout.strip())
    deps = tmp_path / "deps"
    deps.mkdir()
    for where in dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib")):
        for entry in Path(where).iterdir():
            if entry.name.startswith(OWN) or entry.suffix == ".pth" or (deps / entry.name).exists():
                continue
            (deps / entry.name).symlink_to(entry)
    (site / "_collsched_test_deps.pth").write_text(f"{deps}\n")
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", wheel],
         tmp_path, env)

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    probe = json.loads(_run([python, "-c", PROBE], outside, env).stdout)
    assert probe["broken"] == []
    assert str(ROOT) not in probe["sys_path"] and str(src) not in probe["sys_path"]
    # Every module of the source tree is installed, and imported from the environment, not from the repository.
    assert set(probe["modules"]) == source_modules()
    for name, file in probe["modules"].items():
        assert Path(file).is_relative_to(site), (name, file)
    # The data files ship too: the C++ sources the native executor is built from, the tuned tables, py.typed.
    assert set(probe["data"]) == source_data()
    assert {"runners/csrc/executor.cpp", "runners/backend/tuning/gloo.json"} <= set(probe["data"])

    # The console script, and the algorithms an entry point registers (synth, from sim.bounds.synth).
    collsched = venv / "bin" / "collsched"
    assert "usage: collsched demo" in _run([collsched, "demo", "--help"], outside, env).stdout
    verified = _run([collsched, "verify", "-c", "allreduce", "-a", "ring", "-p", "4"], outside, env).stdout
    assert verified.startswith("ring (allreduce p=4") and verified.rstrip().endswith("OK"), verified
    assert "synth" in _run([collsched, "list"], outside, env).stdout
