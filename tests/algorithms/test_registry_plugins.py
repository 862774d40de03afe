"""User algorithms from outside the project: ``--import``, ``COLLSCHED_IMPORT`` and installed entry points.

Everything runs as a user would: the module ``my_algos.py`` sits in a temporary
directory, the working directory is that directory, and ``collsched`` is the
installed command run with ``PYTHONPATH`` set to it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())  # the repository

# A user's ring all-reduce under a name the library does not have (the README's example, renamed).
MY_ALGOS = '''
import os
from algorithms import Collective, Kind, ScheduleBuilder
from algorithms.registry import register

open(f"imported-by-{os.getpid()}", "w").close()   # lets the test count the processes that imported it

@register(Kind.ALLREDUCE, "user-ring", source="a user's module")
def user_ring(ranks: int, *, chunks: int = 1):
    p = ranks
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, p, p), "user-ring")
    for s in range(p - 1):                      # reduce-scatter
        with b.step():
            for r in range(p):
                b.reduce(r, (r + 1) % p, (r - s) % p)
    for s in range(p - 1):                      # all-gather
        with b.step():
            for r in range(p):
                b.copy(r, (r + 1) % p, (r + 1 - s) % p)
    return b.build()
'''


def _collsched() -> list[str]:
    script = Path(sys.executable).parent / "collsched"
    return [str(script)] if script.exists() else [sys.executable, "-m", "runners.commands.cli"]


def _run(cwd: Path, *argv: str, env: dict[str, str] | None = None,
         pythonpath: str | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("COLLSCHED_IMPORT", "PYTHONPATH")}
    environ["PYTHONPATH"] = os.pathsep.join([pythonpath or str(cwd), str(ROOT)])
    environ.update(env or {})
    return subprocess.run([*_collsched(), *argv], cwd=cwd, env=environ, capture_output=True, text=True, timeout=300)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "my_algos.py").write_text(MY_ALGOS)
    return tmp_path


@pytest.mark.multiprocess
def test_verify_export_simulate_and_sweep_a_user_algorithm(home: Path) -> None:
    # Without the module the name is unknown, and the error says how to bring it in.
    bare = _run(home, "verify", "-c", "allreduce", "-a", "user-ring", "-p", "5")
    assert bare.returncode == 2 and "unknown algorithm 'user-ring'" in bare.stderr and "--import" in bare.stderr
    missing = _run(home, "verify", "-c", "allreduce", "-a", "ring", "-p", "5", "--import", "no_such_algos")
    assert missing.returncode == 2 and "cannot import module 'no_such_algos'" in missing.stderr

    done = _run(home, "verify", "-c", "allreduce", "-a", "user-ring", "-p", "5", "--import", "my_algos", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["ok"] is True
    # The environment variable does the same.
    done = _run(home, "verify", "-c", "allreduce", "-a", "user-ring", "-p", "5", env={"COLLSCHED_IMPORT": "my_algos"})
    assert done.returncode == 0 and "OK" in done.stdout, done.stderr

    done = _run(home, "export", "-c", "allreduce", "-a", "user-ring", "-p", "4", "-o", "mine.json",
                "--import", "my_algos")
    assert done.returncode == 0, done.stderr
    assert json.loads((home / "mine.json").read_text())["name"] == "user-ring"

    # uring:4, 1 MiB at 1 GB/s and 1 us: 2(p-1) steps of alpha + n/(p bw), worked by hand.
    done = _run(home, "simulate", "-c", "allreduce", "-a", "user-ring", "-t", "uring:4", "--size", "1MiB",
                "--bandwidth", "1GB/s", "--latency", "1us", "--import", "my_algos", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["time_s"] == pytest.approx(6 * (1e-6 + 2**20 / 4 / 1e9), rel=1e-9)

    done = _run(home, "sweep", "-c", "allreduce", "-t", "uring:4", "--sizes", "1KiB,1MiB", "--bandwidth", "1GB/s",
                "--latency", "1us", "--file", "mine.json", "--plot", "sweep.png", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert "user-ring [mine.json]" in doc["algorithms"] and "ring" in doc["algorithms"]
    mine = {r["size"]: r["time_s"] for r in doc["results"] if r["algorithm"] == "user-ring [mine.json]"}
    assert mine[2**20] == pytest.approx(6 * (1e-6 + 2**20 / 4 / 1e9), rel=1e-9)
    assert (home / "sweep.png").read_bytes()[:4] == b"\x89PNG"

    text = _run(home, "sweep", "-c", "allreduce", "-t", "uring:4", "--sizes", "1KiB", "--file", "mine.json",
                "--algorithms", "user-ring,ring", "--import", "my_algos")
    assert text.returncode == 0, text.stderr
    header = text.stdout.splitlines()[1]
    assert "user-ring" in header and "user-ring [mine.json]" in header

    # A file of another kind or world size is refused, naming the file.
    done = _run(home, "sweep", "-c", "allgather", "-t", "uring:4", "--sizes", "1KiB", "--file", "mine.json")
    assert done.returncode == 2 and "--file mine.json: the schedule is allreduce, the sweep is allgather" in done.stderr
    done = _run(home, "sweep", "-c", "allreduce", "-t", "uring:5", "--sizes", "1KiB", "--file", "mine.json")
    assert done.returncode == 2 and "the schedule has 4 ranks, the topology 5" in done.stderr


@pytest.mark.multiprocess
def test_bench_a_user_algorithm_on_two_ranks(home: Path) -> None:
    done = _run(home, "bench", "--nproc", "2", "-c", "allreduce", "-a", "user-ring", "--import", "my_algos",
                "--sizes", "1KiB", "--iters", "1", "--warmup", "0", "--dtype", "int32", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["ok"] is True and doc["rows"][0]["algorithm"] == "user-ring" and doc["rows"][0]["wrong"] == 0
    # The parent and both ranks imported the module.
    assert len(list(home.glob("imported-by-*"))) == 3


def _dist_info(site: Path, value: str) -> None:
    info = site / "user_algos-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: user-algos\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[collsched.algorithms]\nuser = {value}\n")


@pytest.mark.multiprocess
def test_an_installed_entry_point_registers_without_import(home: Path,
                                                          tmp_path_factory: pytest.TempPathFactory) -> None:
    site = tmp_path_factory.mktemp("site")
    (site / "my_algos.py").write_text(MY_ALGOS)
    _dist_info(site, "my_algos")
    done = _run(home, "list", "--json", pythonpath=str(site))
    assert done.returncode == 0, done.stderr
    assert {"collective": "allreduce", "algorithm": "user-ring"}.items() <= next(
        r for r in json.loads(done.stdout)["algorithms"] if r["algorithm"] == "user-ring").items()
    done = _run(home, "verify", "-c", "allreduce", "-a", "user-ring", "-p", "3", pythonpath=str(site))
    assert done.returncode == 0, done.stderr


@pytest.mark.multiprocess
def test_an_entry_point_calling_a_function(home: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    site = tmp_path_factory.mktemp("site")
    (site / "lazy_algos.py").write_text("def load():\n    import my_algos  # noqa: F401\n")
    (site / "my_algos.py").write_text(MY_ALGOS)
    _dist_info(site, "lazy_algos:load")
    done = _run(home, "verify", "-c", "allreduce", "-a", "user-ring", "-p", "3", pythonpath=str(site))
    assert done.returncode == 0, done.stderr


@pytest.mark.multiprocess
def test_a_broken_entry_point_is_named(home: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    site = tmp_path_factory.mktemp("site")
    _dist_info(site, "gone_algos")
    done = _run(home, "list", pythonpath=str(site))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "entry point user = gone_algos (group collsched.algorithms)" in done.stderr
    assert "No module named 'gone_algos'" in done.stderr


TRAIN = '''
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from runners.backend.group import collsched_group

dist.init_process_group("collsched")   # CPU tensors: schedules run over gloo
torch.manual_seed(dist.get_rank())     # different models and data per rank: DDP must make them agree
model = DDP(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    opt.zero_grad()
    model(torch.randn(16, 8)).pow(2).mean().backward()
    opt.step()
params = [round(x, 6) for p in model.parameters() for x in p.detach().flatten().tolist()]
# One write of one line: print() writes its pieces separately, and two ranks share this pipe.
ran = collsched_group().executed['allreduce/user-ring']
os.write(1, f"RESULT {dist.get_rank()} {ran} {params}\\n".encode())
del model, opt
dist.destroy_process_group()
'''


@pytest.mark.multiprocess
@pytest.mark.slow
def test_the_backend_runs_a_user_algorithm_under_ddp(home: Path) -> None:
    (home / "train.py").write_text(TRAIN)
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    environ.update(PYTHONPATH=os.pathsep.join([str(home), str(ROOT)]), COLLSCHED_IMPORT="my_algos",
                   COLLSCHED_ALGORITHMS="allreduce=user-ring")
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           "train.py"], cwd=home, env=environ, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = [line.split(" ", 3) for line in done.stdout.splitlines() if line.startswith("RESULT")]
    assert sorted(r[1] for r in results) == ["0", "1"]
    assert all(int(r[2]) >= 3 for r in results)  # one gradient all-reduce per step at least, on user-ring
    assert results[0][3] == results[1][3]  # DDP's invariant: every rank ends with the same parameters


# -- in process: a module given as a file path, and the hint when a name is not found ------------------------------


@pytest.fixture
def fresh_registry(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``home`` as the working directory, not on sys.path (as under the installed ``collsched``), and the
    registry, the imported modules and the plugin state put back afterwards."""
    from algorithms import registry

    monkeypatch.chdir(home)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(home))])
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(registry, "_plugins_loaded", True)
    monkeypatch.setattr(registry, "_plugin_error", None)
    monkeypatch.delenv("COLLSCHED_IMPORT", raising=False)
    before = set(sys.modules)
    yield home
    for name in set(sys.modules) - before:
        del sys.modules[name]


def _main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    from sim.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


VERIFY_USER_RING = ("verify", "-c", "allreduce", "-a", "user-ring", "-p", "5")


@pytest.mark.parametrize("how", ["./my_algos.py", "my_algos.py", "absolute"])
def test_import_a_module_by_its_file_path(fresh_registry: Path, capsys: pytest.CaptureFixture[str],
                                          how: str) -> None:
    path = str(fresh_registry / "my_algos.py") if how == "absolute" else how
    code, out, err = _main(capsys, *VERIFY_USER_RING, "--import", path, "--json")
    assert code == 0, err
    assert json.loads(out)["ok"] is True


def test_the_same_file_twice_registers_once(fresh_registry: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from algorithms import registry

    registry.import_modules(["./my_algos.py", str(fresh_registry / "my_algos.py"), "my_algos.py"])
    assert registry.get("allreduce", "user-ring").name == "user-ring"
    assert len(list(fresh_registry.glob("imported-by-*"))) == 1  # the module ran once


def test_collsched_import_takes_a_path(fresh_registry: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    from algorithms import registry

    monkeypatch.setenv("COLLSCHED_IMPORT", "./my_algos.py")
    monkeypatch.setattr(registry, "_plugins_loaded", False)
    code, out, err = _main(capsys, *VERIFY_USER_RING, "--json")
    assert code == 0, err
    assert json.loads(out)["ok"] is True


def test_a_module_name_not_found_says_the_directory_is_not_searched(fresh_registry: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _main(capsys, *VERIFY_USER_RING, "--import", "my_algos")
    assert code == 2
    assert err == ("collsched verify: error: --import: cannot import module 'my_algos': ModuleNotFoundError: "
                   "No module named 'my_algos' (the current directory is not searched unless PYTHONPATH says so: "
                   "./my_algos.py is here, so run with PYTHONPATH=. or pass the file, --import ./my_algos.py)\n")
    code, _, err = _main(capsys, *VERIFY_USER_RING, "--import", "nowhere_algos")
    assert code == 2
    assert err.endswith("No module named 'nowhere_algos' (the current directory is not searched unless PYTHONPATH "
                        "says so: run with PYTHONPATH=DIR, or pass the file, --import path/to/nowhere_algos.py)\n")


def test_a_missing_file_is_named(fresh_registry: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _main(capsys, *VERIFY_USER_RING, "--import", "./nope.py")
    assert code == 2 and err == "collsched verify: error: --import: cannot import './nope.py': no such file\n"


# -- a user's Cost: a wrong signature is refused at register, one that raises is reported -------------------------

_USER_RING_BODY = '''
def {fn}(ranks: int, *, chunks: int = 1):
    p = ranks
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, p, p), "{name}")
    for s in range(p - 1):
        with b.step():
            for r in range(p):
                b.reduce(r, (r + 1) % p, (r - s) % p)
    for s in range(p - 1):
        with b.step():
            for r in range(p):
                b.copy(r, (r + 1) % p, (r + 1 - s) % p)
    return b.build()
'''

# The README's old spelling, with the third argument left out: two arguments where Cost passes three.
BAD_COST_ALGOS = '''
from algorithms import Collective, Kind, ScheduleBuilder
from algorithms.registry import Cost, register

@register(Kind.ALLREDUCE, "bad-cost-ring", source="a user's module",
          cost=Cost("2(p-1)α + 2(p-1)/p·nβ", steps=lambda p, n: 2 * (p - 1), bytes=lambda p, n: 2 * (p - 1) * n / p,
                    reduced=lambda p, n: (p - 1) * n / p))
''' + _USER_RING_BODY.format(fn="bad_cost_ring", name="bad-cost-ring")

# A Cost of the right shape whose bytes raise when evaluated (the parameters have no "k").
RAISING_COST_ALGOS = '''
from algorithms import Collective, Kind, ScheduleBuilder
from algorithms.registry import Cost, register

@register(Kind.ALLREDUCE, "raising-cost-ring", source="a user's module",
          cost=Cost("2(p-1)α + 2(p-1)/p·nβ", steps=lambda p, n, params: 2 * (p - 1),
                    bytes=lambda p, n, params: 2 * (p - 1) * n / (p * params["k"]),
                    reduced=lambda p, n, params: (p - 1) * n / p))
''' + _USER_RING_BODY.format(fn="raising_cost_ring", name="raising-cost-ring")


def _bad_cost_error(err: str, module: str) -> None:
    assert "Traceback" not in err
    assert f"module {module}" in err and "allreduce/bad-cost-ring" in err
    assert "Cost.steps" in err and "(p, n, params)" in err


def test_a_bad_cost_in_an_imported_module_is_exit_2_naming_module_and_algorithm(
        fresh_registry: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (fresh_registry / "bad_cost_algos.py").write_text(BAD_COST_ALGOS)
    code, out, err = _main(capsys, "verify", "-c", "allreduce", "-a", "ring", "-p", "4", "--import",
                           "./bad_cost_algos.py")
    assert code == 2 and out == ""
    _bad_cost_error(err, "bad_cost_algos")
    assert err.startswith("collsched verify: error: --import: ")
    code, out, _ = _main(capsys, "verify", "-c", "allreduce", "-a", "ring", "-p", "4", "--import",
                         "./bad_cost_algos.py", "--json")
    assert code == 2 and "module bad_cost_algos" in json.loads(out)["error"]


def test_a_bad_cost_through_collsched_import_is_exit_2_naming_it(fresh_registry: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    from algorithms import registry

    (fresh_registry / "bad_cost_algos.py").write_text(BAD_COST_ALGOS)
    monkeypatch.setenv("COLLSCHED_IMPORT", "./bad_cost_algos.py")
    monkeypatch.setattr(registry, "_plugins_loaded", False)
    code, _, err = _main(capsys, "list")
    assert code == 2
    _bad_cost_error(err, "bad_cost_algos")
    assert "COLLSCHED_IMPORT" in err


def test_a_bad_cost_through_an_entry_point_is_exit_2_naming_it(fresh_registry: Path, monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path_factory: pytest.TempPathFactory,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from algorithms import registry

    site = tmp_path_factory.mktemp("site")
    (site / "bad_cost_algos.py").write_text(BAD_COST_ALGOS)
    _dist_info(site, "bad_cost_algos")
    monkeypatch.setattr(sys, "path", [str(site), *sys.path])
    monkeypatch.setattr(registry, "_plugins_loaded", False)
    code, _, err = _main(capsys, "list")
    assert code == 2
    _bad_cost_error(err, "bad_cost_algos")
    assert "entry point user = bad_cost_algos (group collsched.algorithms)" in err


def test_a_cost_that_raises_is_reported_by_simulate_and_sweep(fresh_registry: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    (fresh_registry / "raising_cost_algos.py").write_text(RAISING_COST_ALGOS)
    imp = ("--import", "./raising_cost_algos.py")
    code, out, err = _main(capsys, "simulate", "-c", "allreduce", "-a", "raising-cost-ring", "-t", "uring:4",
                           "-s", "1MiB", "--no-progress", "--bound", "no", *imp)
    assert "Traceback" not in err and code == 0, err
    line = next(x for x in out.splitlines() if x.lstrip().startswith("closed form"))
    assert "allreduce/raising-cost-ring" in line and "module raising_cost_algos" in line
    assert "Cost.bytes raises KeyError: 'k'" in line
    assert "postcondition OK" in out  # the simulation itself stands

    code, out, err = _main(capsys, "sweep", "-c", "allreduce", "-t", "uring:4", "--sizes", "1KiB",
                           "--algorithms", "raising-cost-ring,ring", "--bound", "no", "--no-progress", *imp)
    assert code == 0, err
    assert "raising-cost-ring" in out.splitlines()[1]  # simulated, not skipped
    assert "allreduce/raising-cost-ring" in err and "module raising_cost_algos" in err
    assert "Cost.bytes raises KeyError: 'k'" in err
    code, out, err = _main(capsys, "sweep", "-c", "allreduce", "-t", "uring:4", "--sizes", "1KiB", "--bound", "no",
                           "--no-progress", "--json", *imp)
    doc = json.loads(out)
    assert code == 0 and "raising-cost-ring" in doc["algorithms"]
    assert any("allreduce/raising-cost-ring" in w and "KeyError" in w for w in doc["warnings"])
