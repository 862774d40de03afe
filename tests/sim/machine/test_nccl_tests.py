"""nccl-tests logs copied from public issues (tests/sim/machine/data, the source at the top of each) parse into
the fields read by eye from them; the published tables (tests/data/published) read into the same structure; bad
lines are errors that name the file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.machine.nccl_tests import NcclTestsError, Timing, load, parse, parse_all, read, read_published

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
DATA = ROOT / "tests" / "sim" / "machine" / "data"
PUBLISHED = ROOT / "tests" / "data" / "published"


def test_a_modern_all_reduce_log_with_its_headers() -> None:
    # NVIDIA/dgx-spark-playbooks PR #103: two GB10 nodes, one rank each, nccl-library=23102.
    t = read(DATA / "all_reduce_perf_gb10_2nodes.log")
    assert (t.collective, t.ranks, t.nodes, t.gpus_per_node) == ("allreduce", 2, 2, 1)
    assert t.devices == ("NVIDIA GB10", "NVIDIA GB10") and t.nccl_version == "23102"
    assert t.params["nThread"] == "1" and t.params["nGpus"] == "1" and t.params["maxBytes"] == "8589934592"
    assert t.sizes() == [8192, 16384, 32768, 65536]
    last = t.rows[-1]
    assert (last.count, last.dtype, last.redop, last.root) == (16384, "float", "sum", -1)
    assert last.oop == Timing(67.93, 0.96, 0.96, 0) and last.ip == Timing(64.71, 1.01, 1.01, 0)
    assert last.oop.seconds == pytest.approx(67.93e-6)
    assert last.line == 17


def test_sendrecv_with_n_a_fields() -> None:
    # NVIDIA/nccl-tests #214: the in-place #wrong column reads N/A.
    t = read(DATA / "sendrecv_perf_a40_2nodes.log")
    assert (t.collective, t.ranks, t.nodes) == ("sendrecv", 2, 2)
    assert t.rows[2].size == 1024 and t.rows[2].oop.time_us == 34.24 and t.rows[2].ip is not None
    assert t.rows[2].ip.time_us == 31.11 and t.rows[2].ip.wrong is None and t.rows[2].oop.wrong == 0


def test_an_old_alltoall_log_with_a_blank_redop_and_the_trailer() -> None:
    # NVIDIA/nccl-tests #78: no root column, "error" for #wrong, redop left blank, Avg bus bandwidth 0.507636.
    t = read(DATA / "alltoall_perf_v100_8nodes.log")
    assert t.collective == "alltoall" and t.avg_busbw == pytest.approx(0.507636)
    assert t.ranks is None and t.nodes is None  # this excerpt prints no Rank lines
    r = t.rows[1]
    assert (r.size, r.count, r.dtype, r.redop, r.root) == (536870912, 2097152, "float", None, None)
    assert r.oop == Timing(1041974, 0.52, 0.51, 0.0) and r.ip == Timing(1041299, 0.52, 0.51, 1.0)


def test_an_old_broadcast_log_among_nccl_warnings() -> None:
    # NVIDIA/nccl-tests #82: no Group field, no redop column, NCCL 2.9.6, WARN lines in between.
    t = read(DATA / "broadcast_perf_v100_2nodes.log")
    assert (t.collective, t.ranks, t.nodes, t.nccl_version) == ("broadcast", 2, 2, "2.9.6+cuda11.2")
    assert t.devices == ("Tesla V100-PCIE-16GB",) * 2
    (r,) = t.rows
    assert (r.size, r.count, r.dtype, r.redop, r.root) == (8, 2, "float", None, 0)
    assert r.oop == Timing(45.82, 0.0, 0.0, None) and r.ip == Timing(38.17, 0.0, 0.0, None)


def test_mpirun_tags_are_stripped_and_the_command_line_names_the_collective() -> None:
    tagged = read(DATA / "all_reduce_perf_h100_mpi_tagged.log")  # aws/aws-k8s-tester PR #503
    assert tagged.sizes() == [8, 16, 32] and tagged.rows[2].oop.time_us == 22.25
    assert tagged.rows[2].ip is not None and tagged.rows[2].ip.time_us == 13.34
    tree = read(DATA / "all_reduce_perf_h100_2nodes_tree.log")  # NVIDIA/nccl-tests #232, NCCL_ALGO=Tree
    assert tree.collective == "allreduce" and len(tree.rows) == 5
    assert tree.rows[-1].oop == Timing(812.3, 41.31, 41.31, 0)


def test_the_collective_can_be_given_and_must_be_known() -> None:
    text = (DATA / "alltoall_perf_v100_8nodes.log").read_text()
    assert parse(text, collective="alltoall").collective == "alltoall"
    assert parse(text.replace("alltoall_perf", "x"), collective="sendrecv_perf").collective == "sendrecv"
    with pytest.raises(NcclTestsError, match="cannot tell which collective"):
        parse(text.replace("alltoall_perf", "x"), source="run.log")
    with pytest.raises(NcclTestsError, match="unknown collective 'allsum'"):
        parse(text, collective="allsum")


def test_a_malformed_row_names_the_file_line_and_field() -> None:
    text = (DATA / "all_reduce_perf_gb10_2nodes.log").read_text().splitlines()
    bad = list(text)
    bad[15] = bad[15].replace("39.56", "39.5x")
    with pytest.raises(NcclTestsError, match=r"^log:16: field time: '39.5x' is not a number or N/A$"):
        parse("\n".join(bad), source="log")
    short = list(text)
    short[14] = short[14].rsplit(None, 1)[0] + "  "  # a field fewer (and not the redop one)
    with pytest.raises(NcclTestsError, match=r"^log:15: a row needs 13 fields \(size count .*\), got 12$"):
        parse("\n".join(short), source="log")
    with pytest.raises(NcclTestsError, match="no result rows"):
        parse("# nThread 1 nGpus 1\n", source="log")
    with pytest.raises(NcclTestsError, match=r"^log:1: a row before any column header, with 3 fields"):
        parse("8 2 float\n", source="log")


def test_a_missing_file_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(NcclTestsError, match=r"nope\.log: cannot read"):
        read(tmp_path / "nope.log")


def test_a_published_table_reads_into_the_same_structure(tmp_path: Path) -> None:
    p = tmp_path / "t.tsv"
    p.write_text("# source: made up\n# collective: allgather\n# nodes_x_gpus: 2x8\n"
                 "size_bytes\ttime_us\talgbw_GBps\tbusbw_GBps\n1024\t10.5\t0.10\t0.09\n2048\t11\t0.19\t0.18\n")
    t = load(p)
    assert (t.collective, t.nodes, t.ranks, t.sizes()) == ("allgather", 2, 16, [1024, 2048])
    assert t.rows[0].oop == Timing(10.5, 0.10, 0.09) and t.rows[0].ip is None and t.params["source"] == "made up"
    p.write_text("# collective: allgather\nsize\ttime\n1\t2\n")
    with pytest.raises(NcclTestsError, match=r"t.tsv:2: header row must be size_bytes time_us"):
        read_published(p)
    p.write_text("# collective: allgather\nsize_bytes\ttime_us\talgbw_GBps\tbusbw_GBps\n1024\t10.5\t0.1\n")
    with pytest.raises(NcclTestsError, match=r"t.tsv:3: a row needs 4 tab-separated fields"):
        read_published(p)


def test_the_published_tables() -> None:
    ring = read_published(PUBLISHED / "h100_2x8_allreduce_nccltests309_ring.tsv")
    # Read by eye from the file: 2x8 H100, first row 1 MiB in 156.9 us, busbw 12.53.
    assert (ring.collective, ring.nodes, ring.ranks) == ("allreduce", 2, 16)
    assert ring.rows[0].size == 1048576 and ring.rows[0].oop == Timing(156.9, 6.68, 12.53)
    assert ring.params["preset"] == "dgx-h100:2"
    for f in sorted(PUBLISHED.glob("*.tsv")):
        t = load(f)
        assert t.rows and t.nodes in (1, 2) and t.ranks in (8, 16), f.name


def test_a_header_that_puts_in_place_first_is_honoured() -> None:
    # MSCCL++'s nccl-tests port (microsoft/mscclpp PR #117) prints the in-place side first.
    text = ("#   in-place     out-of-place\n"
            "#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
            "   1024  256 float sum -1  10.0 0.10 0.18 0  20.0 0.05 0.09 0\n")
    (r,) = parse(text, collective="all_reduce").rows
    assert r.oop.time_us == 20.0 and r.ip is not None and r.ip.time_us == 10.0


def test_a_log_of_several_runs_splits_at_each_collective_test() -> None:
    one = (DATA / "all_reduce_perf_gb10_2nodes.log").read_text()
    two = one + "# Collective test starting: all_gather_perf\n" + "\n".join(
        line for line in one.splitlines() if not line.startswith("# Collective test"))
    with pytest.raises(NcclTestsError, match=r"^log:18: a second test run starts here"):
        parse(two, source="log")
    first, second = parse_all(two, source="log")
    assert (first.collective, second.collective) == ("allreduce", "allgather")
    assert first.sizes() == second.sizes() == [8192, 16384, 32768, 65536]
    assert second.ranks == 2 and second.rows[0].line == 18 + 13  # numbered as in the whole file
    assert [t.collective for t in parse_all(one)] == ["allreduce"]
