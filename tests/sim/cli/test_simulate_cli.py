"""``collsched simulate`` and ``collsched sweep``: output contracts, units, files, error exits."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from algorithms import formats as fileformat
from algorithms import registry
from runners.commands.cli import main
from sim import topology as T
from sim.units import parse_bandwidth, parse_duration, parse_size, parse_sizes

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())  # the repository


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- units -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "value"), [("256MiB", 256 * 2**20), ("1KiB", 1024), ("4096", 4096),
                                             ("2GiB", 2 * 2**30), ("1.5KiB", 1536), ("8B", 8), ("1M", 2**20)])
def test_sizes(text: str, value: float) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize(("text", "value"), [("50GB/s", 50e9), ("400MB/s", 400e6), ("3KB/s", 3e3),
                                             ("7B/s", 7.0), ("1e9", 1e9), ("12.5GB/s", 12.5e9)])
def test_bandwidths_are_decimal(text: str, value: float) -> None:
    assert parse_bandwidth(text) == value


@pytest.mark.parametrize(("text", "value"), [("1us", 1e-6), ("2.5ms", 2.5e-3), ("3ns", 3e-9), ("2s", 2.0),
                                             ("1e-6", 1e-6), ("0", 0.0)])
def test_durations(text: str, value: float) -> None:
    assert parse_duration(text) == pytest.approx(value, rel=1e-15)


def test_size_ranges() -> None:
    assert parse_sizes("1KiB:8KiB") == [1024, 2048, 4096, 8192]
    assert parse_sizes("1KiB:1MiB:32") == [1024, 32768, 1048576]
    assert parse_sizes("1,2KiB") == [1, 2048]
    assert len(parse_sizes("1KiB:1GiB")) == 21


# -- simulate --------------------------------------------------------------------------------------


def test_simulate_json_contract_and_closed_form(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "simulate", "--collective", "allreduce", "--algorithm", "ring", "--topology",
                         "uring:8", "--size", "256MiB", "--bandwidth", "50GB/s", "--latency", "1us", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert set(doc) == {"ok", "time_s", "algbw_GBps", "busbw_GBps", "transfers", "events", "wall_s",
                        "peak_rss_MiB", "engine", "stretched_pairs", "bound_s", "efficiency", "lockstep_s",
                        "modes_differ"}
    assert doc["lockstep_s"] == pytest.approx(doc["time_s"], rel=1e-9) and doc["modes_differ"] is False
    assert doc["engine"] == "fast" and doc["peak_rss_MiB"] > 0  # auto: the fast engine is exact for this run
    assert doc["stretched_pairs"] == []  # a ring on a ring: every neighbour one link away
    n, p = 256 * 2**20, 8
    want = 2 * (p - 1) * (1e-6 + n / (p * 50e9))
    assert doc["ok"] is True
    assert doc["time_s"] == pytest.approx(want, rel=1e-9)
    assert doc["algbw_GBps"] == pytest.approx(n / want / 1e9, rel=1e-9)
    assert doc["busbw_GBps"] == pytest.approx(2 * (p - 1) / p * n / want / 1e9, rel=1e-9)
    assert doc["transfers"] == 2 * (p - 1) * p
    assert doc["events"] > 0 and doc["wall_s"] >= 0


def test_simulate_text_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "simulate", "-c", "broadcast", "-a", "binomial", "-t", "switch:8", "--size", "1MiB",
                       "--root", "3", "--mode", "lockstep")
    assert code == 0
    assert "postcondition OK" in out and "busbw" in out and "closed form" in out


def test_closed_form_uses_reduce_bw_overhead_and_launch(capsys: pytest.CaptureFixture[str]) -> None:
    # Ring all-reduce on ring:8 is contention-free: 14 steps of one 1 MiB chunk (8 MiB / 8) to the next rank,
    # each paying overhead + latency + chunk/bandwidth, the 7 reduce-scatter steps also chunk/reduce-bw; launch once.
    argv = ["simulate", "-c", "allreduce", "-a", "ring", "-t", "ring:8", "--size", "8MiB", "--bandwidth", "50GB/s",
            "--latency", "1us", "--reduce-bw", "10GB/s", "--overhead", "2us", "--launch", "10us"]
    chunk = 2**20
    want = 10e-6 + 14 * (1e-6 + 2e-6 + chunk / 50e9) + 7 * chunk / 10e9  # 1.07960448 ms
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    assert json.loads(out)["time_s"] == pytest.approx(want, rel=1e-9)
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    line = next(line for line in out.splitlines() if "closed form" in line)
    assert line.startswith("  closed form 1.08 ms (")
    assert "γ=1/1e+10 B/s" in line and "overhead 2e-06 s" in line and "launch 1e-05 s" in line
    assert line.endswith("simulated / closed form 1.0000")
    # Without --reduce-bw (free reductions) γ is 0 and says so.
    code, out, err = run(capsys, *argv[:-6], "--overhead", "2us", "--launch", "10us")
    line = next(line for line in out.splitlines() if "closed form" in line)
    assert code == 0 and "γ=0" in line and line.endswith("simulated / closed form 1.0000")


def test_simulate_modes_differ_where_the_model_says(capsys: pytest.CaptureFixture[str]) -> None:
    times = {}
    for mode in ("lockstep", "dataflow"):
        code, out, _ = run(capsys, "simulate", "-c", "broadcast", "-a", "binomial", "-t", "full:8", "--size",
                           "1MiB", "--mode", mode, "--json", "--latency", "0", "--bandwidth", "1GB/s")
        assert code == 0
        times[mode] = json.loads(out)["time_s"]
    assert times["lockstep"] == pytest.approx(3 * 2**20 / 1e9, rel=1e-9)
    assert times["dataflow"] == pytest.approx(3 * 2**20 / 1e9, rel=1e-9)  # popcount(7) = 3 hops for rank 7


def test_trace_and_plot_files(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    trace, plot = tmp_path / "t.json", tmp_path / "t.png"
    code, _, err = run(capsys, "simulate", "-c", "allreduce", "-a", "ring", "-t", "switch:4", "--size", "1MiB",
                       "--trace", str(trace), "--plot", str(plot))
    assert code == 0, err
    doc = json.loads(trace.read_text())
    events = doc["traceEvents"]
    names = {(e["pid"], e["args"]["name"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {(0, f"rank {r}") for r in range(4)} <= names
    links = {n for pid, n in names if pid == 1}
    assert links == {f"{r}->switch" for r in range(4)} | {f"switch->{r}" for r in range(4)}
    slices = [e for e in events if e["ph"] == "X"]
    assert len([e for e in slices if e["pid"] == 0]) == registry.build("allreduce", "ring", 4).num_transfers
    assert all(e["dur"] >= 0 for e in slices)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_simulate_a_schedule_file_and_a_topology_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    sched, topo = tmp_path / "s.json", tmp_path / "t.graphml"
    fileformat.save(registry.build("allgather", "ring", 5), sched)
    T.save(T.unidirectional_ring(5, bandwidth=1e9, latency=0.0), topo)
    code, out, err = run(capsys, "simulate", "--file", str(sched), "-t", str(topo), "--size", "5000", "--json")
    assert code == 0, err
    assert json.loads(out)["time_s"] == pytest.approx(4 * 1000 / 1e9, rel=1e-9)


def test_faults_from_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["simulate", "-c", "allreduce", "-a", "ring", "-t", "uring:4", "--size", "4MiB", "--latency", "0",
            "--bandwidth", "1GB/s", "--json", "--mode", "lockstep"]
    code, out, _ = run(capsys, *base, "--straggler", "2=10us")
    assert code == 0
    assert json.loads(out)["time_s"] == pytest.approx(6 * (2**20 / 1e9 + 10e-6), rel=1e-9)
    code, out, _ = run(capsys, *base, "--degrade", "0-1=0.5")
    assert code == 0
    assert json.loads(out)["time_s"] == pytest.approx(6 * 2 * 2**20 / 1e9, rel=1e-9)
    code, out, err = run(capsys, *base, "--link-down", "0-1")  # --json: the error is the JSON answer
    doc = json.loads(out)
    assert code == 2 and err == "" and doc["ok"] is False and "rank 1 is unreachable" in doc["error"]


def test_a_broken_schedule_file_exits_1(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    s = registry.build("allreduce", "ring", 3)
    doc = fileformat.to_dict(s)
    doc["steps"] = doc["steps"][:-1]
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(doc))
    code, out, _ = run(capsys, "simulate", "--file", str(path), "-t", "ring:3", "--size", "3KiB")
    assert code == 1 and "postcondition BROKEN" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--size", "12 parsecs"], "--size: cannot read"),
        (["--size", "1MiB", "--bandwidth", "5Gbit"], "--bandwidth: cannot read"),
        (["--size", "1MiB", "--bandwidth", "0GB/s"], "--bandwidth: must be positive"),
        (["--size", "1MiB", "--latency", "3 fortnights"], "--latency: cannot read"),
        (["--size", "1MiB", "--topology", "mesh:4"], "unknown topology 'mesh:4'"),
        (["--size", "1MiB", "--algorithm", "nope"], "unknown algorithm 'nope'"),
        (["--size", "1MiB", "--straggler", "x"], "--straggler: expected RANK=DELAY"),
        (["--size", "1MiB", "--straggler", "9=1us"], "straggler rank 9 out of range"),
        (["--size", "1MiB", "--degrade", "0-1=-2"], "--degrade: expected U-V=FACTOR"),
        (["--size", "1MiB", "--link-down", "0-2"], "no such link"),
        (["--size", "1MiB", "--chunks", "0"], "chunks must be an integer >= 1"),
    ],
)
def test_bad_input_is_one_line_exit_2(capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    # Later options win in argparse, so the defaults can simply come first.
    argv = ["simulate", "--collective", "allreduce", "--algorithm", "ring", "--topology", "ring:4", *args]
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err and err.startswith("collsched simulate: error:")


def test_file_rank_mismatch(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # A file of fewer ranks runs on the topology's first ranks (no placement file needed); more ranks cannot run.
    path = tmp_path / "s.json"
    fileformat.save(registry.build("allreduce", "ring", 3), path)
    code, out, err = run(capsys, "simulate", "--file", str(path), "-t", "ring:4", "--size", "1KiB")
    assert code == 0, err
    assert out.startswith("ring allreduce p=3 C=3 on ring:4 ranks 0-2: 3 ranks")
    code, _, err = run(capsys, "simulate", "--file", str(path), "-t", "ring:2", "--size", "1KiB")
    assert code == 2 and f"{path}: the schedule has 3 ranks, but ring:2 has only 2; name a topology" in err
    assert "-p" not in err


# -- sweep ------------------------------------------------------------------------------------------


def test_sweep_table_marks_the_best(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    plot = tmp_path / "s.png"
    code, out, err = run(capsys, "sweep", "-c", "allreduce", "-t", "ring:4", "--sizes", "1KiB:1MiB:32",
                         "--plot", str(plot))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("allreduce on ring:4")
    assert len(lines) == 2 + 3  # title, header, three sizes
    assert all("*" in line for line in lines[2:])
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_sweep_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "sweep", "-c", "allreduce", "-t", "uring:4", "--sizes", "1KiB,4KiB", "--json",
                       "--latency", "1us", "--bandwidth", "1GB/s")
    assert code == 0
    doc = json.loads(out)
    names = [a.name for a in registry.algorithms("allreduce") if a.unsupported(4) is None]
    assert doc["algorithms"] == names and doc["ok"] is True
    assert len(doc["results"]) == 2 * len(names)
    ring = {r["size"]: r["time_s"] for r in doc["results"] if r["algorithm"] == "ring"}
    assert ring[1024] == pytest.approx(6 * (1e-6 + 256 / 1e9), rel=1e-9)
    for b in doc["best"]:
        fastest = min((r for r in doc["results"] if r["size"] == b["size"]), key=lambda r: r["time_s"])
        assert b["algorithm"] == fastest["algorithm"]


@pytest.mark.parametrize(("args", "message"), [
    (["--sizes", "1MiB:1KiB"], "--sizes: need 0 < A <= B"),
    (["--sizes", "1KiB:1MiB:1"], "the factor must be a number > 1"),
    (["--sizes", "big"], "--sizes: cannot read 'big'"),
    (["--sizes", "1:2:3:4"], "--sizes: expected A:B"),
    (["--sizes", "1KiB", "--algorithms", "nope"], "unknown algorithm 'nope'"),
])
def test_sweep_errors(capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    code, out, err = run(capsys, "sweep", "-c", "allreduce", "-t", "ring:4", *args)
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err


@pytest.mark.multiprocess
def test_list_imports_nothing_heavy() -> None:
    # numpy is not on the list: the IR keeps a schedule's transfers in numpy columns (algorithms/ir.py).
    code = ("import sys, runners.commands.cli as c; c.build_parser(); "
            "print(sorted(m for m in ('simpy', 'matplotlib', 'networkx', 'tqdm', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.multiprocess
@pytest.mark.parametrize("argv", [
    ["list"],
    ["verify", "-c", "allreduce", "-a", "ring", "-p", "4"],
    ["simulate", "-c", "allreduce", "-a", "ring", "-t", "ring:4", "--size", "1MiB"],
    ["sweep", "-c", "allreduce", "-t", "ring:4", "--sizes", "1KiB"],
])
def test_torch_free_commands_import_no_torch(argv: list[str]) -> None:
    code = ("import sys; from runners.commands.cli import main; code = main(sys.argv[1:]); "
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH', file=sys.stderr); sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", code, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "NO-TORCH"


@pytest.mark.parametrize("argv", [
    # 2(p-1)p = 20,200 transfers on 101 ranks: above the engine's 20,000-transfer threshold for a bar.
    ["simulate", "-c", "allreduce", "-a", "ring", "-t", "ring:101", "--size", "64MiB", "--json"],
    ["sweep", "-c", "allreduce", "-t", "ring:4", "--sizes", "1KiB:1MiB", "--json"],
])
def test_json_into_a_pipe_draws_no_progress_bar(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                                argv: list[str]) -> None:
    import tqdm

    made: list[object] = []

    class Recorder(tqdm.tqdm):  # type: ignore[misc]
        def __init__(self, *args: object, **kwargs: object) -> None:
            made.append(kwargs)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(tqdm, "tqdm", Recorder)  # stderr is captured here: not a terminal
    code, out, err = run(capsys, *argv)
    assert code == 0 and json.loads(out)["ok"] is True
    assert made == [] and "\r" not in err


def test_progress_bars_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from sim import progress

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert not progress.wanted()
    with progress.bar(10, unit="run") as b:  # a silent stand-in: writes nothing
        b.update(10)
    assert sys.stderr.getvalue() == ""
    monkeypatch.setattr(sys, "stderr", Tty())
    assert progress.wanted() and not progress.wanted(False)
    assert type(progress.bar(10, unit="run", enabled=False)).__name__ == "_Silent"
    assert type(progress.bar(10, unit="run")).__name__ == "tqdm"


# -- placement ----------------------------------------------------------------------------------------


def _ring_time(p: int, n: float, alpha: float, bw: float) -> float:
    """Ring all-reduce with every neighbour one link away: 2(p-1) steps of alpha + n/(p bw)."""
    return 2 * (p - 1) * (alpha + n / (p * bw))


def test_snake_placement_puts_the_ring_on_one_hop_links(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["simulate", "-c", "allreduce", "-a", "ring", "-t", "torus:4x4", "--size", "64MiB", "--bandwidth",
            "50GB/s", "--latency", "1us", "--json"]
    code, out, _ = run(capsys, *base)
    row_major = json.loads(out)
    # Row-major on a 4x4 torus: the ring's step from the end of a row to the start of the next takes two links.
    assert code == 0 and row_major["stretched_pairs"] == [[3, 4, 2], [7, 8, 2], [11, 12, 2], [15, 0, 2]]
    code, out, _ = run(capsys, *base, "--placement", "snake")
    snake = json.loads(out)
    assert code == 0 and snake["ok"] is True and snake["stretched_pairs"] == []
    assert snake["time_s"] == pytest.approx(_ring_time(16, 64 * 2**20, 1e-6, 50e9), rel=1e-9)
    assert row_major["time_s"] > 1.5 * snake["time_s"]


def test_simulate_text_says_when_neighbours_are_stretched(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "simulate", "-c", "allreduce", "-a", "ring", "-t", "torus:4x4", "--size", "1MiB")
    assert code == 0
    assert ("stretched  4 pair(s) of ranks that exchange data are more than one hop apart: 3->4 (2 hops), "
            "7->8 (2 hops), 11->12 (2 hops), 15->0 (2 hops) (try --placement snake)") in out
    code, out, _ = run(capsys, "simulate", "-c", "allreduce", "-a", "ring", "-t", "torus:4x4", "--size", "1MiB",
                       "--placement", "snake")
    assert code == 0 and "every pair of ranks that exchanges data is one hop apart" in out and "stretched" not in out


def test_a_placement_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "reversed.json"
    path.write_text(json.dumps([0, 3, 2, 1]))  # rank r on node -r mod 4
    code, out, _ = run(capsys, "simulate", "-c", "allreduce", "-a", "ring", "-t", "uring:4", "--size", "4KiB",
                       "--placement", str(path), "--json")
    # On a one-way ring 0->1->2->3->0, node 0 reaches node 3 (rank 0 -> rank 1) in three links, and so on.
    assert code == 0 and json.loads(out)["stretched_pairs"] == [[0, 1, 3], [1, 2, 3], [2, 3, 3], [3, 0, 3]]


def test_sweep_with_a_placement(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "sweep", "-c", "allreduce", "-t", "torus:4x4", "--sizes", "64MiB", "--algorithms",
                       "ring", "--placement", "snake", "--bandwidth", "50GB/s", "--latency", "1us", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["topology"] == "torus:4x4 placed snake"
    assert doc["results"][0]["time_s"] == pytest.approx(_ring_time(16, 64 * 2**20, 1e-6, 50e9), rel=1e-9)


@pytest.mark.parametrize(("placement", "topology", "message"), [
    ("snake", "ring:4", "snake"),
    ("/nonexistent/p.json", "ring:4", "/nonexistent/p.json"),
])
def test_placement_errors(capsys: pytest.CaptureFixture[str], placement: str, topology: str, message: str) -> None:
    code, out, err = run(capsys, "simulate", "-c", "allreduce", "-a", "ring", "-t", topology, "--size", "1KiB",
                         "--placement", placement)
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err


# -- a schedule on part of a topology (-p with a placement file) ---------------------------------------------


PART = ["simulate", "-c", "allreduce", "-a", "ring", "-t", "torus:4x4", "--size", "8MiB", "--bandwidth", "50GB/s",
        "--latency", "1us"]


def test_a_schedule_on_part_of_a_torus(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # Rows 0 and 1 of the 4x4 torus as one 8-cycle: 0 1 2 3, down to 7, back 6 5 4, up to 0; every hop one link.
    cycle = tmp_path / "cycle.json"
    cycle.write_text(json.dumps({"format": "collsched.placement/1", "ranks": [0, 1, 2, 3, 7, 6, 5, 4]}))
    code, out, err = run(capsys, *PART, "-p", "8", "--placement", str(cycle), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["ok"] is True and doc["stretched_pairs"] == []
    assert doc["time_s"] == pytest.approx(_ring_time(8, 8 * 2**20, 1e-6, 50e9), rel=1e-9)
    assert doc["transfers"] == 2 * 7 * 8
    # Rows 0 and 2: ranks 3 -> 4 (node 3 -> 11) and 7 -> 0 (node 8 -> 0) cross an idle node's row, two links each.
    apart = tmp_path / "apart.json"
    apart.write_text(json.dumps([0, 1, 2, 3, 11, 10, 9, 8]))
    code, out, err = run(capsys, *PART, "-p", "8", "--placement", str(apart), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["ok"] is True and doc["stretched_pairs"] == [[3, 4, 2], [7, 0, 2]]
    # In send order (the default) every rank's next step waits for its previous message to land, so each of the
    # 14 steps waits for the slow hop's 1 us more latency (the bandwidth is still one link's), as in lockstep.
    assert doc["time_s"] == pytest.approx(_ring_time(8, 8 * 2**20, 1e-6, 50e9) + 14 * 1e-6, rel=1e-9)
    assert doc["lockstep_s"] == pytest.approx(doc["time_s"], rel=1e-9) and doc["modes_differ"] is False
    # Without it each piece goes its own way: the slowest piece crosses the two-link hops twice, 1 us each.
    code, out, err = run(capsys, *PART, "-p", "8", "--placement", str(apart), "--json", "--in-flight", "all")
    doc = json.loads(out)
    assert doc["time_s"] == pytest.approx(_ring_time(8, 8 * 2**20, 1e-6, 50e9) + 2 * 2 * 1e-6, rel=1e-9)
    code, out, err = run(capsys, *PART, "-p", "8", "--placement", str(apart))
    assert code == 0 and "on torus:4x4 placed apart.json" in out and "postcondition OK" in out
    assert "more than one hop apart: 3->4 (2 hops), 7->0 (2 hops)\n" in out  # no snake hint: it is not the torus
    # A schedule file of 8 ranks takes its world size from the file.
    path = tmp_path / "ring8.json"
    fileformat.save(registry.build("allreduce", "ring", 8), path)
    code, out, err = run(capsys, PART[0], *PART[5:], "--file", str(path), "--placement", str(cycle), "--json")
    assert code == 0, err
    assert json.loads(out)["time_s"] == pytest.approx(_ring_time(8, 8 * 2**20, 1e-6, 50e9), rel=1e-9)


def test_ranks_must_match_the_topology_or_come_with_a_placement(capsys: pytest.CaptureFixture[str],
                                                                 tmp_path: Path) -> None:
    code, out, err = run(capsys, *PART, "-p", "16", "--json")
    assert code == 0 and json.loads(out)["ok"] is True  # -p equal to the topology's ranks: as without it
    code, out, err = run(capsys, *PART, "-p", "8")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert ("-p 8: torus:4x4 has 16 ranks; a schedule of 8 ranks runs on part of it with --placement FILE, a "
            "collsched.placement/1 file listing the 8 nodes it runs on") in err
    code, out, err = run(capsys, *PART, "-p", "32")
    assert code == 2 and "-p 32: torus:4x4 has only 16 ranks" in err
    code, out, err = run(capsys, *PART, "-p", "8", "--placement", "snake")
    assert code == 2 and "--placement FILE" in err and err.count("\n") == 1
    whole = tmp_path / "whole.json"
    whole.write_text(json.dumps(list(range(16))))
    code, out, err = run(capsys, *PART, "-p", "8", "--placement", str(whole))
    assert code == 2 and "16 entries for a schedule of 8 ranks" in err


def test_simulate_computes_the_bound_only_where_asked(capsys: pytest.CaptureFixture[str]) -> None:
    common = ("simulate", "-c", "allreduce", "-a", "ring", "-t", "ring:8", "--size", "1MiB", "--json")
    code, out, _err = run(capsys, *common, "--bound", "no")
    assert code == 0 and "bound_s" not in json.loads(out)
    code, out, _err = run(capsys, *common)  # auto: 8 ranks are few enough
    assert code == 0 and json.loads(out)["bound_s"] > 0
    code, out, _err = run(capsys, "simulate", "-c", "allreduce", "-a", "ring", "-t", "ring:130", "--size", "1MiB")
    assert code == 0 and "bound      not computed above 128 ranks" in out


def test_engine_option(capsys: pytest.CaptureFixture[str]) -> None:
    common = ("simulate", "-c", "allreduce", "-a", "ring", "-t", "ring:8", "--size", "1MiB", "--json")
    times = {}
    for engine in ("simpy", "fast"):
        code, out, _err = run(capsys, *common, "--engine", engine)
        doc = json.loads(out)
        assert code == 0 and doc["engine"] == engine
        times[engine] = doc["time_s"]
    assert times["simpy"] == pytest.approx(times["fast"], rel=1e-9)
    # message_cpu is simpy's alone: auto takes simpy, fast refuses with a usage error.
    code, out, _err = run(capsys, *common, "--message-cpu", "1us")
    assert code == 0 and json.loads(out)["engine"] == "simpy"
    code, out, _err = run(capsys, *common, "--message-cpu", "1us", "--engine", "fast")
    assert code == 2 and "engine fast does not model message_cpu" in json.loads(out)["error"]


def test_an_alltoall_simulation_reports_its_lp_bound_and_efficiency(capsys: pytest.CaptureFixture[str]) -> None:
    # By hand: on a bidirectional ring of 8 ranks at B = 25 GB/s a link each way, a uniform all-to-all of
    # M bytes per rank sends m = M/8 to each peer, at distances 1,1,2,2,3,3,4 (sum 16): 8·16·m bytes of
    # link traffic over 16 directed links, m·8 = M bytes each at best, so the LP's throughput term is M/B.
    size = 64 * 2**20
    code, out, _ = run(capsys, "simulate", "-c", "alltoall", "-a", "bruck", "-t", "ring:8", "--bandwidth", "25GB/s",
                       "-s", "64MiB", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["lp_bound_s"] == pytest.approx(size / 25e9, rel=1e-6)
    assert doc["lp_efficiency"] == pytest.approx(doc["lp_bound_s"] / doc["time_s"], rel=1e-9)
    assert doc["lp_bound_s"] > doc["bound_s"]  # the cut bound is looser here
    code, out, _ = run(capsys, "simulate", "-c", "alltoall", "-a", "bruck", "-t", "ring:8", "--bandwidth", "25GB/s",
                       "-s", "64MiB")
    assert f"efficiency {100 * doc['lp_efficiency']:.1f}%" in next(x for x in out.splitlines() if "LP bound" in x)
    code, out, _ = run(capsys, "simulate", "-c", "allgather", "-a", "ring", "-t", "ring:8", "-s", "64MiB", "--json")
    assert "lp_bound_s" not in json.loads(out)


def test_sweep_adds_the_in_network_algorithms_where_the_switches_serve_them(capsys: pytest.CaptureFixture[str]) -> None:
    # dgx-h100:1's NVSwitch reduces and multicasts: NVLS joins the sweep; a plain ring has no such switch.
    code, out, _ = run(capsys, "sweep", "-c", "allreduce", "-t", "dgx-h100:1", "--sizes", "1MiB", "--json")
    assert code == 0 and "nvls" in json.loads(out)["algorithms"]
    code, out, _ = run(capsys, "sweep", "-c", "allgather", "-t", "dgx-h100:1", "--sizes", "1MiB", "--json")
    assert code == 0 and "multicast" in json.loads(out)["algorithms"]
    code, out, _ = run(capsys, "sweep", "-c", "allreduce", "-t", "ring:8", "--sizes", "1MiB", "--json")
    assert code == 0 and not {"nvls", "nvls_tree", "sharp"} & set(json.loads(out)["algorithms"])
    # two nodes: one node's NVLS cannot span them (no switch links all 16 GPUs), NVLS-tree can
    code, out, _ = run(capsys, "sweep", "-c", "allreduce", "-t", "dgx-h100:2", "--sizes", "1MiB", "--json")
    names = json.loads(out)["algorithms"]
    assert code == 0 and "nvls_tree" in names and "nvls" not in names
    code, out, _ = run(capsys, "sweep", "-c", "allreduce", "-t", "dgx-h100:1", "--algorithms", "ring",
                       "--sizes", "1MiB", "--json")
    assert json.loads(out)["algorithms"] == ["nccl", "ring"]
