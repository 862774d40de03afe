"""MSCCL-IR interop (algorithms/formats/msccl/): import, export, the executability check, the file-format dispatch.

References, none of them the code under test: the collective's postcondition
(sim.verify.verifier), the foreign corpus and what its SOURCES.md says of each file,
hand-written programs whose data effect is worked out in the comments, and the
original schedule for round trips.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from algorithms import Buf, Kind, ScheduleError, build, registry
from algorithms import formats as fileformat
from algorithms.formats.msccl import (
    MAX_CNT,
    Program,
    check_msccl,
    dumps_msccl,
    load_msccl,
    loads_msccl,
    parse_msccl,
    save_msccl,
)
from sim.engine.reference import simulate
from sim.topology import fully_connected
from sim.verify.verifier import WRONG_SLOT, execute, verify

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())  # the repository
CORPUS = ROOT / "tests" / "data" / "foreign" / "msccl"

MSCCL_KINDS = ("allreduce", "allgather", "reducescatter", "alltoall")

# --------------------------------------------------------------------------------------------- corpus

# Every file of the corpus and what SOURCES.md says of it: "ok" (meets its postcondition), "bad" (the
# KNOWN-BAD negative case), "custom" (no postcondition; runs to completion). "2msg": needs >= 2 buffered
# messages per connection (SOURCES.md's notes; its preamble: four files deadlock at 1, none at 2).
CORPUS_TABLE: dict[str, tuple[str, bool]] = {
    "azure_ncv4_allgather_hier_4_LL.xml": ("ok", False),
    "azure_ncv4_allreduce_hier_12_Simple.xml": ("ok", False),
    "azure_ncv4_allreduce_tree_12_LL.xml": ("ok", False),
    "azure_ndv4_allreduce_allpairs_ap2ll.xml": ("ok", False),
    "azure_ndv4_allreduce_ring_r48ll128.xml": ("ok", False),
    "azure_ndv4_alltoall_a2a2ll.xml": ("ok", False),
    "azure_ndv5_allgather_ag-1k-512k.xml": ("ok", False),
    "azure_ndv5_allgather_ag-32m-1g.xml": ("ok", True),
    "azure_ndv5_allreduce_ar-1k-512k.xml": ("ok", False),
    "azure_ndv5_allreduce_ar-4m.xml": ("ok", False),
    "lyd_allreduce_4nomial_tree_hier_gpu64.xml": ("ok", False),
    "lyd_allreduce_binary_tree_gpu16.xml": ("ok", False),
    "lyd_allreduce_binary_tree_gpu2.xml": ("ok", True),
    "lyd_allreduce_binary_tree_gpu4.xml": ("ok", False),
    "lyd_allreduce_binomial_hier_16x4.xml": ("ok", False),
    "lyd_allreduce_binomial_tree_gpu64.xml": ("ok", False),
    "lyd_allreduce_rec_doub_halv_gpu16.xml": ("ok", False),
    "lyd_allreduce_rec_doub_halv_gpu64.xml": ("ok", False),
    "lyd_allreduce_ring_ch24_scratch_gpu4.xml": ("ok", False),
    "lyd_allreduce_ring_gpu16_ch1.xml": ("ok", True),
    "lyd_allreduce_trinomial_tree_LL_gpu16.xml": ("ok", False),
    "msccl_allreduce_small_ar_ll.xml": ("ok", False),
    "mscclang_allreduce_allpairs_ap_1.xml": ("ok", False),
    "mscclang_allreduce_ndv2_ar_1.xml": ("bad", False),
    "mscclang_allreduce_ring_8_1.xml": ("ok", False),
    "mscclang_custom_alltonext_2in.xml": ("custom", False),
    "rccl_allgather_allpairs_16n.xml": ("ok", False),
    "rccl_allreduce_1step_4n_ll.xml": ("ok", False),
    "rccl_allreduce_allpairs_8n_1pass_outofplace.xml": ("ok", False),
    "rccl_alltoall_2d_hier_simple_n2g32.xml": ("ok", False),
    "rccl_alltoall_8n_4mb-16mb.xml": ("ok", False),
    "rccl_unittest_allreduce_ring_simple_16n.xml": ("ok", True),
    "teccl_allgather_amd_32.xml": ("ok", False),
}


def test_the_table_accounts_for_every_corpus_file() -> None:
    assert sorted(p.name for p in CORPUS.glob("*.xml")) == sorted(CORPUS_TABLE)
    assert len(CORPUS_TABLE) == 33
    # SOURCES.md names the negative case; the table must agree with it.
    sources = (CORPUS / "SOURCES.md").read_text()
    bad = {line.split("|")[1].strip() for line in sources.splitlines() if "KNOWN-BAD" in line and "|" in line}
    assert bad == {name for name, (verdict, _) in CORPUS_TABLE.items() if verdict == "bad"}


@pytest.mark.parametrize("name", sorted(CORPUS_TABLE))
def test_corpus_verdicts_agree_with_sources(name: str) -> None:
    verdict, _ = CORPUS_TABLE[name]
    path = CORPUS / name
    if verdict == "custom":
        with pytest.raises(ScheduleError, match=r"custom.*no postcondition"):
            load_msccl(path)
        s = load_msccl(path, allow_custom=True)
        assert s.name.startswith("custom:") and s.num_transfers > 0
        assert [f for f in check_msccl(path) if f.severity == "error"] == []  # it runs to completion
        return
    s = load_msccl(path)
    report = verify(s)
    findings = [f for f in check_msccl(path) if f.severity == "error"]
    if verdict == "ok":
        assert report.ok, str(report)[:2000]
        assert findings == []
        return
    # The known-bad file: the verifier names wrong slots, the check names the shared connection.
    wrong = [v for v in report.violations if v.kind == WRONG_SLOT]
    assert wrong and all(v.rank is not None and v.buf == "input" and v.index is not None for v in wrong)
    assert len(wrong) == 32  # SOURCES.md: "an independent check finds 32/64 outputs wrong"
    assert {f.kind for f in findings} == {"shared_connection"}
    assert any("thread blocks 4, 5 all send to gpu 2 on channel 0" in f.message for f in findings)


def test_four_corpus_files_deadlock_with_one_buffered_message_and_none_with_two() -> None:
    one = set()
    for name in CORPUS_TABLE:
        if any(f.kind == "deadlock" for f in check_msccl(CORPUS / name, capacity=1)):
            one.add(name)
        assert not any(f.kind == "deadlock" for f in check_msccl(CORPUS / name, capacity=2)), name
    assert one == {name for name, (_, two) in CORPUS_TABLE.items() if two}


def test_the_largest_corpus_file_imports_whole() -> None:
    s = load_msccl(CORPUS / "rccl_unittest_allreduce_ring_simple_16n.xml")
    # 16 ranks, 384 chunks; 11904 steps of which 5376 rrs, 5376 rcs, 384 rrcs, 384 s, 384 r: every
    # message (5376 + 5376 + 384 + 384 = 11520) is one transfer, and every rrs adds a local copy (5376).
    assert s.collective.describe() == "allreduce p=16 C=384"
    assert s.num_transfers == 11520 + 5376
    assert verify(s).ok


# --------------------------------------------------------------------------------------------- round trips


def _library(kinds: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(a.kind.value, a.name) for a in registry.algorithms() if a.kind.value in kinds]


def _cases() -> list[tuple[str, str, int, int]]:
    out = []
    for kind, name in _library(MSCCL_KINDS):
        alg = registry.get(kind, name)
        for p in (2, 3, 4, 8, 16):
            for chunks in (1, 2):
                if alg.unsupported(p, {"chunks": chunks}) is None:
                    out.append((kind, name, p, chunks))
    return out


def _final(schedule: object) -> dict[tuple[int, str, int], object]:
    state, _bad, layout = execute(schedule)  # type: ignore[arg-type]
    out = {}
    for slot, content in enumerate(state):
        r, buf, i = layout.where(slot)
        if buf is not Buf.SCRATCH:
            out[(r, buf.value, i)] = content
    return out


# Schedules in which a transfer waits a step with neither of its ranks busy in the step before: MSCCL
# has no cross-GPU barrier to hold it back, so the XML runs it (and an import places it) earlier.
IDLE_RANKS = {("allreduce", "binomial", 3), ("allreduce", "rabenseifner", 3), ("allreduce", "swing", 3),
              ("allreduce", "swing_torus", 3), ("allreduce", "rabenseifner_torus", 3),
              ("reducescatter", "recursive_halving", 3),
              ("reducescatter", "pat", 3)}
@pytest.mark.parametrize(("kind", "name", "p", "chunks"), _cases())
def test_round_trip(kind: str, name: str, p: int, chunks: int) -> None:
    s = build(kind, name, p, chunks=chunks)
    text = dumps_msccl(s)
    assert check_msccl(text) == []  # race-checked too: the torus halvings send one transfer a run of blocks
    s2 = loads_msccl(text)
    assert s2.collective == s.collective
    assert verify(s2).ok
    assert _final(s2) == _final(s)
    if (kind, name, p) in IDLE_RANKS:
        assert len(s2.steps) <= len(s.steps)
        return
    assert [sorted(x.transfers) for x in s2.steps] == [sorted(x.transfers) for x in s.steps]
    topo = fully_connected(p)
    for size in (1 << 10, 1 << 22):
        a = simulate(s, topo, size, mode="lockstep").time
        b = simulate(s2, topo, size, mode="lockstep").time
        assert b == pytest.approx(a, rel=1e-9, abs=1e-15)


def test_the_idle_rank_exceptions_are_real() -> None:
    for kind, name, p in sorted(IDLE_RANKS):
        s = build(kind, name, p)
        s2 = loads_msccl(dumps_msccl(s))
        assert [sorted(x.transfers) for x in s2.steps] != [sorted(x.transfers) for x in s.steps]


@pytest.mark.parametrize(("kind", "name"), _library(("broadcast", "reduce", "scatter", "gather", "barrier")))
def test_kinds_msccl_cannot_express_fail_clearly(kind: str, name: str) -> None:
    alg = registry.get(kind, name)
    p = next(p for p in (4, 8, 3, 2) if alg.unsupported(p, {}) is None)
    roots = (0, p - 1) if kind != "barrier" else (None,)
    for root in roots:
        s = build(kind, name, p, root=root) if root is not None else build(kind, name, p)
        with pytest.raises(ScheduleError, match=rf"cannot write {kind} as MSCCL-IR"):
            dumps_msccl(s)


def test_ring_at_64_ranks_fits_the_executor_limits() -> None:
    s = build("allreduce", "ring", 64, chunks=4)
    text = dumps_msccl(s)
    program = parse_msccl(text)
    assert max(len(t.steps) for g in program.gpus.values() for t in g.tbs) <= 64
    findings = check_msccl(program)
    assert [(f.severity, f.kind) for f in findings] == [("warning", "race")]  # too big for the race check
    assert "race check skipped" in findings[0].message
    algo = re.search(r"<algo [^>]*>", text)
    assert algo is not None
    for attr in ("name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace", "outofplace",
                 "minBytes", "maxBytes"):
        assert f" {attr}=" in algo.group(0)


@pytest.mark.parametrize(("kind", "name"), _library(MSCCL_KINDS))
def test_staged_reductions_keep_the_result(kind: str, name: str) -> None:
    from algorithms.formats.msccl import stage_reductions

    alg = registry.get(kind, name)
    for p in (3, 4, 8):
        if alg.unsupported(p, {"chunks": 2}) is not None:
            continue
        s = build(kind, name, p, chunks=2)
        staged = stage_reductions(s)
        assert verify(staged).ok and _final(staged) == _final(s)
        text = dumps_msccl(s, staged=True)
        assert check_msccl(text) == []
        assert _final(loads_msccl(text)) == _final(s)
        # Same messages between ranks, in the same order of steps (staged steps add only local work).
        remote = [sorted((t.src, t.dst, t.count) for t in x.transfers if t.src != t.dst) for x in s.steps]
        remote2 = [sorted((t.src, t.dst, t.count) for t in x.transfers if t.src != t.dst) for x in staged.steps]
        assert [r for r in remote2 if r] == [r for r in remote if r]


def test_staging_takes_direct_allreduce_off_the_rrc_chain() -> None:
    s = build("allreduce", "direct", 4)
    plain = parse_msccl(dumps_msccl(s))
    staged = parse_msccl(dumps_msccl(s, staged=True))
    def types(pr: Program) -> list[str]:
        return sorted(st.type for g in pr.gpus.values() for t in g.tbs for st in t.steps)
    # Direct reduce-scatter: each rank receives p-1 = 3 contributions into its own piece, then all-gather.
    assert types(plain).count("rrc") == 4 * 3 and "re" not in types(plain)
    assert "rrc" not in types(staged) and types(staged).count("re") == 4 * 3


def test_large_counts_are_split_below_the_executor_limit() -> None:
    from algorithms import Collective, ScheduleBuilder

    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, 2, MAX_CNT + 30), "exchange")
    with b.step():
        b.reduce(0, 1, 0, MAX_CNT + 30)
        b.reduce(1, 0, 0, MAX_CNT + 30)
    s = b.build()
    program = parse_msccl(dumps_msccl(s))
    cnts = [st.cnt for g in program.gpus.values() for t in g.tbs for st in t.steps]
    assert max(cnts) == MAX_CNT and MAX_CNT + 30 - MAX_CNT in cnts
    assert verify(loads_msccl(dumps_msccl(s))).ok


def test_export_options(tmp_path: Path) -> None:
    s = build("allgather", "ring", 4)
    text = dumps_msccl(s, proto="LL", nchannels=3, min_bytes=1024, max_bytes=1 << 20, name="ag")
    head = text.splitlines()[0]
    assert 'proto="LL"' in head and 'minBytes="1024"' in head and 'maxBytes="1048576"' in head
    assert 'name="ag"' in head and 'coll="allgather"' in head and 'inplace="0" outofplace="1"' in head
    assert verify(loads_msccl(text)).ok
    with pytest.raises(ScheduleError, match="proto"):
        dumps_msccl(s, proto="LL256")
    with pytest.raises(ScheduleError, match="nchannels"):
        dumps_msccl(s, nchannels=0)
    save_msccl(s, tmp_path / "ag.xml")
    assert verify(load_msccl(tmp_path / "ag.xml")).ok


def test_fileformat_reads_and_writes_xml(tmp_path: Path) -> None:
    s = build("reducescatter", "ring", 4, chunks=2)
    fileformat.save(s, tmp_path / "rs.XML")
    assert (tmp_path / "rs.XML").read_text().startswith("<algo ")
    s2 = fileformat.load(tmp_path / "rs.XML")
    assert [sorted(x.transfers) for x in s2.steps] == [sorted(x.transfers) for x in s.steps]
    (tmp_path / "rs.sched").write_text((tmp_path / "rs.XML").read_text())  # sniffed, whatever the name
    assert fileformat.load(tmp_path / "rs.sched").collective == s.collective
    assert fileformat.loads(dumps_msccl(s)).collective == s.collective


def test_a_swap_inside_one_step_cannot_be_exported() -> None:
    from algorithms import Collective, Op, Schedule, Step, Transfer

    # Rank 0 swaps scratch slots 0 and 1 in one step: lockstep reads both first; MSCCL cannot.
    s = Schedule(Collective(Kind.ALLREDUCE, 2, 1), "swap", (
        Step((Transfer(0, 0, Buf.INPUT, 0, Buf.SCRATCH, 0, 1, Op.COPY),
              Transfer(0, 0, Buf.INPUT, 0, Buf.SCRATCH, 1, 1, Op.COPY))),
        Step((Transfer(0, 0, Buf.SCRATCH, 0, Buf.SCRATCH, 1, 1, Op.COPY),
              Transfer(0, 0, Buf.SCRATCH, 1, Buf.SCRATCH, 0, 1, Op.COPY))),
    ), scratch_chunks=2)
    with pytest.raises(ScheduleError, match=r"step 1: on rank 0.*swap"):
        dumps_msccl(s)


# --------------------------------------------------------------------------------------------- hand-written

HEAD = '<algo name="t" proto="Simple" nchannels="1" nchunksperloop="{c}" ngpus="{n}" coll="{coll}" ' \
       'inplace="{ip}" outofplace="{oop}" minBytes="0" maxBytes="0">'


def _xml(n: int, c: int, gpus: dict[int, list[tuple[int, int, list[str]]]], *, coll: str = "allreduce",
         ip: int = 1, oop: int = 0, sizes: tuple[int, int, int] | None = None) -> str:
    """gpus: rank -> [(send, recv, steps as 'type src dst cnt [depid deps] [hasdep]')]; bufs as i3, o0, s1."""
    out = [HEAD.format(c=c, n=n, coll=coll, ip=ip, oop=oop)]
    for r, tbs in gpus.items():
        i_c, o_c, s_c = sizes or (c, c, 4)
        out.append(f'<gpu id="{r}" i_chunks="{i_c}" o_chunks="{o_c}" s_chunks="{s_c}">')
        for tid, (send, recv, steps) in enumerate(tbs):
            out.append(f'<tb id="{tid}" send="{send}" recv="{recv}" chan="0">')
            for k, line in enumerate(steps):
                f = line.split()
                kind, src, dst, cnt = f[0], f[1], f[2], f[3]
                depid, deps = (f[4], f[5]) if len(f) > 5 else ("-1", "-1")
                hasdep = f[6] if len(f) > 6 else "1"
                out.append(f'<step s="{k}" type="{kind}" srcbuf="{src[0]}" srcoff="{src[1:]}" dstbuf="{dst[0]}" '
                           f'dstoff="{dst[1:]}" cnt="{cnt}" depid="{depid}" deps="{deps}" hasdep="{hasdep}"/>')
            out.append("</tb>")
        out.append("</gpu>")
    out.append("</algo>")
    return "\n".join(out)


def test_s_rrs_rrcs_rcs_r_chain() -> None:
    # Allreduce of one chunk on 3 GPUs along 0 -> 1 -> 2 -> 0 -> 1:
    # 0 sends x0; 1 forwards x0+x1 without storing (rrs); 2 stores and forwards x0+x1+x2 (rrcs);
    # 0 stores and forwards it (rcs); 1 stores it (r). Every rank ends with the full sum.
    xml = _xml(3, 1, {
        0: [(1, 2, ["s i0 i0 1", "rcs i0 i0 1"])],
        1: [(2, 0, ["rrs i0 i0 1", "r i0 i0 1"])],
        2: [(0, 1, ["rrcs i0 i0 1"])],
    })
    s = loads_msccl(xml)
    assert verify(s).ok
    # The rrs goes through a scratch temporary: copy x1 there, reduce x0 into it, send it on.
    kinds = sorted((t.src, t.dst, t.src_buf.value, t.dst_buf.value, t.op.value) for x in s.steps for t in x.transfers)
    assert (1, 1, "input", "scratch", "copy") in kinds and (0, 1, "input", "scratch", "reduce") in kinds
    assert (1, 2, "scratch", "input", "reduce") in kinds


def test_rrs_does_not_write_locally() -> None:
    # Same chain, but 1's final r is dropped and 2 sends nothing back: 1's own chunk must stay x1.
    xml = _xml(3, 1, {
        0: [(1, -1, ["s i0 i0 1"])],
        1: [(2, 0, ["rrs i0 i0 1"])],
        2: [(-1, 1, ["rrc i0 i0 1"])],
    })
    state, _, layout = execute(loads_msccl(xml))
    assert state[layout.slot(1, Buf.INPUT, 0)] == (0, 0b010)  # rank 1 only
    assert state[layout.slot(2, Buf.INPUT, 0)] == (0, 0b111)


def test_rrc_reads_the_local_source_and_writes_the_destination() -> None:
    # Out-of-place allreduce on 2 GPUs, 2 chunks (RCCL's ring style: read i, write o).
    # gpu r keeps chunk r: o[r] := recv(peer's i[r]) + i[r]; sends o[r]; receives o[peer].
    xml = _xml(2, 2, {
        0: [(1, 1, ["s i1 i1 1", "rrc i0 o0 1", "s o0 o0 1", "r o1 o1 1"])],
        1: [(0, 0, ["s i0 i0 1", "rrc i1 o1 1", "s o1 o1 1", "r o0 o0 1"])],
    }, ip=0, oop=1)
    s = loads_msccl(xml)
    assert verify(s).ok
    # The input is left alone out of place: rank 0's i[0] still holds only its own chunk before the final copy.
    assert any(t.op.value == "copy" and t.src == t.dst == 0 and t.src_buf is Buf.INPUT for x in s.steps
               for t in x.transfers)
    # Read as in-place (i is o) the same program is still correct.
    assert verify(loads_msccl(xml, inplace=True)).ok


def test_cpy_re_scratch_and_nop_dependencies() -> None:
    # Allreduce, 2 GPUs, 1 chunk, through scratch: tb0 sends i0; tb1 receives into s0; tb2 copies i0 to s1
    # and then (a nop waiting for tb1, a re waiting for tb0's send) reduces s0 into... i0 := i0 + s0.
    xml = _xml(2, 1, {
        r: [(1 - r, -1, ["s i0 i0 1 -1 -1 1"]),
            (-1, 1 - r, ["r i0 s0 1 -1 -1 1"]),
            (-1, -1, ["cpy i0 s1 1", "nop i0 i0 0 1 0 0", "re s0 i0 1 0 0 1"])]
        for r in (0, 1)
    })
    s = loads_msccl(xml)
    assert verify(s).ok
    assert check_msccl(xml) == []


def test_re_steps_in_a_row_fuse_to_the_same_sum() -> None:
    # 3 GPUs all send i0 to gpu 0's scratch; gpu 0 adds both with two consecutive re, then broadcasts.
    xml = _xml(3, 1, {
        0: [(-1, 1, ["r i0 s0 1"]), (-1, 2, ["r i0 s1 1"]),
            (-1, -1, ["nop i0 i0 0 0 0 0", "re s0 i0 1 1 0 1", "re s1 i0 1 -1 -1 1"]),
            (1, -1, ["s i0 i0 1 2 2 0"]), (2, -1, ["s i0 i0 1 2 2 0"])],
        1: [(0, -1, ["s i0 i0 1"]), (-1, 0, ["r i0 i0 1"])],
        2: [(0, -1, ["s i0 i0 1"]), (-1, 0, ["r i0 i0 1"])],
    })
    assert verify(loads_msccl(xml)).ok


@pytest.mark.parametrize("coll", ["reducescatter", "reduce_scatter"])
def test_reducescatter_out_of_place_and_in_place(coll: str) -> None:
    # 2 GPUs, C = 2 (P = 1 chunk each). Out of place: o[0] := recv(peer's i[r]) + i[r].
    oop = _xml(2, 2, {
        0: [(1, 1, ["s i1 i1 1", "rrc i0 o0 1"])],
        1: [(0, 0, ["s i0 i0 1", "rrc i1 o0 1"])],
    }, coll=coll, ip=0, oop=1, sizes=(2, 1, 0))
    s = loads_msccl(oop)
    assert s.collective.kind is Kind.REDUCESCATTER and s.collective.chunks == 1
    assert verify(s).ok
    # In place, o[j] is i[r*P + j]: reduce straight into i[r].
    inp = _xml(2, 2, {
        0: [(1, 1, ["s i1 i1 1", "rrc i0 i0 1"])],
        1: [(0, 0, ["s i0 i0 1", "rrc i1 i1 1"])],
    }, coll=coll, ip=1, oop=0, sizes=(2, 0, 0))
    assert verify(loads_msccl(inp)).ok
    # The in-place program read out of place leaves the output empty: the verifier says so.
    assert not verify(loads_msccl(inp, inplace=False)).ok


def test_allgather_in_place_uses_the_aliased_block() -> None:
    # 2 GPUs, C = 2: in place, i[0] is o[r]; each sends o[r] and receives o[peer].
    xml = _xml(2, 2, {
        0: [(1, 1, ["s o0 o0 1", "r o1 o1 1"])],
        1: [(0, 0, ["s o1 o1 1", "r o0 o0 1"])],
    }, coll="allgather", ip=1, oop=0, sizes=(0, 2, 0))
    assert verify(loads_msccl(xml)).ok
    assert not verify(loads_msccl(xml, inplace=False)).ok  # out of place, o[r] is never written


def test_alltoall_in_place() -> None:
    # 2 GPUs, C = 2: i is o. Each keeps block r and swaps block peer: send i[peer], receive into o[peer].
    xml = _xml(2, 2, {
        0: [(1, 1, ["s i1 i1 1", "r o1 o1 1"])],
        1: [(0, 0, ["s i0 i0 1", "r o0 o0 1"])],
    }, coll="alltoall", ip=1, oop=0)
    assert verify(loads_msccl(xml)).ok


def test_a_buffered_send_keeps_the_value_it_read() -> None:
    # gpu 0 sends i0 to gpu 1, then overwrites i0 with what gpu 1 sends. gpu 1 takes gpu 0's message only
    # after two local copies (tb 1 waits for tb 2), so the overwrite comes first; the runtime buffered the
    # send, so gpu 1 still gets gpu 0's original chunk. The import stages it through scratch.
    xml = _xml(2, 1, {
        0: [(1, 1, ["s i0 i0 1", "r i0 i0 1"])],
        1: [(0, -1, ["s i0 i0 1"]), (-1, 0, ["r i0 s0 1 2 1 1"]), (-1, -1, ["cpy i0 s1 1", "cpy s1 s2 1"])],
    })
    state, _, layout = execute(loads_msccl(xml))
    assert state[layout.slot(1, Buf.SCRATCH, 0)] == (0, 0b01)  # gpu 0's own chunk
    assert state[layout.slot(0, Buf.INPUT, 0)] == (0, 0b10)  # overwritten by gpu 1's


# --------------------------------------------------------------------------------------------- malformed

GOOD = _xml(2, 1, {0: [(1, 1, ["s i0 i0 1", "rrc i0 i0 1"])], 1: [(0, 0, ["s i0 i0 1", "rrc i0 i0 1"])]})


def test_the_good_document_is_good() -> None:
    assert verify(loads_msccl(GOOD)).ok and check_msccl(GOOD) == []


@pytest.mark.parametrize(("text", "match"), [
    ("not xml", "not well-formed|no <algo>"),
    ("<algo", "not well-formed"),
    ("", "not well-formed|no <algo>"),
    ('<?xml version="1.0"?><!DOCTYPE algo [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;">]><algo name="&b;"/>',
     "DOCTYPE"),
    ('<!DOCTYPE algo SYSTEM "file:///etc/passwd"><algo/>', "DOCTYPE"),
    ('<algo name="&ext;"/>', "undefined entity|not well-formed"),
    ("<gpu/>", "root element is <gpu>"),
    (GOOD.replace(' ngpus="2"', ""), "missing attribute 'ngpus'"),
    (GOOD.replace('ngpus="2"', 'ngpus="two"'), "ngpus='two' is not an integer"),
    (GOOD.replace('ngpus="2"', 'ngpus="99999999999"'), "not an integer|out of range"),
    (GOOD.replace('type="rrc"', 'type="rrx"', 1), "gpu 0 tb 0 step 1: unknown step type 'rrx'"),
    (GOOD.replace('<step s="1"', '<step s="7"', 1), r"gpu 0 tb 0 step 1: s=7"),
    (GOOD.replace('<tb id="0"', '<tb id="2"', 1), "gpu 0 tb 2: tb ids must run"),
    (GOOD.replace('send="1" recv="1"', 'send="0" recv="1"', 1), "gpu 0 tb 0: send peer is the gpu itself"),
    (GOOD.replace('send="1" recv="1"', 'send="-1" recv="1"', 1), "gpu 0 tb 0 step 0: a 's' step sends"),
    (GOOD.replace('send="1" recv="1"', 'send="1" recv="-1"', 1), "gpu 0 tb 0 step 1: a 'rrc' step receives"),
    (GOOD.replace('<gpu id="1"', '<gpu id="0"', 1), "gpu 0: appears twice"),
    (GOOD.replace('<gpu id="1"', '<gpu id="5"', 1), "gpu 5: id out of range"),
    (GOOD.replace('srcoff="0"', 'srcoff="-3"', 1), "srcoff=-3 must be >= 0"),
    (GOOD.replace('srcoff="0"', 'srcoff="1"', 1), r"gpu 0 tb 0 step 0 \(s, line \d+\): src i\[1:2\] is out of bounds"),
    (GOOD.replace('cnt="1"', 'cnt="2"', 1).replace('nchunksperloop="1"', 'nchunksperloop="2"')
     .replace('_chunks="1"', '_chunks="2"'), "sends cnt=2 but the receive it meets.*has cnt=1"),
    (GOOD.replace('hasdep="1"/>\n</tb>\n</gpu>\n<gpu id="1"', 'hasdep="1"/>\n<step s="2" type="s" srcbuf="i" '
                  'srcoff="0" dstbuf="i" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>\n</tb>\n</gpu>\n'
                  '<gpu id="1"'), "gpu 0 tb 0 step 2.*unmatched send"),
    (GOOD.replace('<step s="0" type="s"', '<step s="0" type="r"'), "deadlock: 2 thread block"),
    (GOOD.replace('cnt="1" depid="-1" deps="-1" hasdep="1"/>\n<step s="1"',
                  'cnt="1" depid="0" deps="1" hasdep="1"/>\n<step s="1"', 1),
     "gpu 0 tb 0 step 0.*waits on its own thread block's step 1"),
    (GOOD.replace('depid="-1" deps="-1" hasdep="1"/>\n</tb>', 'depid="3" deps="0" hasdep="1"/>\n</tb>', 1),
     "depid=3 names no thread block"),
    (GOOD.replace('coll="allreduce"', 'coll="broadcast"'), "coll='broadcast' has no counterpart"),
    (GOOD.replace('coll="allreduce"', 'coll="allsort"'), "unknown coll 'allsort'"),
    (GOOD.replace('coll="allreduce"', 'coll="custom"'), "custom.*no postcondition"),
    (GOOD.replace('coll="allreduce"', 'coll="allgather"').replace('nchunksperloop="1"', 'nchunksperloop="3"'),
     "nchunksperloop=3 is not a multiple of ngpus=2"),
    (GOOD.replace('inplace="1" outofplace="0"', 'inplace="0" outofplace="0"'), "declares neither"),
    ("<algo>" * 3000, "not well-formed|nested|missing attribute"),
])
def test_malformed_documents_raise_schedule_errors(text: str, match: str) -> None:
    with pytest.raises(ScheduleError, match=match):
        loads_msccl(text)


def test_a_wait_that_is_never_released() -> None:
    # gpu 0's rrc waits for tb 0 of gpu 0... of a second tb whose only step has hasdep=0.
    xml = _xml(2, 1, {
        0: [(1, -1, ["s i0 i0 1 -1 -1 0"]), (-1, 1, ["rrc i0 i0 1 0 0 0"])],
        1: [(0, 0, ["s i0 i0 1", "rrc i0 i0 1"])],
    })
    with pytest.raises(ScheduleError, match=r"gpu 0 tb 1 step 0 \(rrc.*never released"):
        loads_msccl(xml)
    assert [f.kind for f in check_msccl(xml)] == ["hang"]


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ScheduleError, match="cannot read"):
        load_msccl(tmp_path / "missing.xml")
    bad = tmp_path / "bad.xml"
    bad.write_text(GOOD.replace('type="rrc"', 'type="zz"', 1))
    with pytest.raises(ScheduleError, match=rf"{re.escape(str(bad))}: .*gpu 0 tb 0 step 1"):
        load_msccl(bad)
    with pytest.raises(ScheduleError, match=re.escape(str(bad))):
        fileformat.load(bad)


def test_check_finds_unordered_steps_of_one_gpu() -> None:
    # gpu 0 forwards what it receives into s0 to gpu 2 (allreduce of 3, through scratch). Without a wait
    # the send may read s0 before the receive wrote it: a race the runtime would show as wrong results.
    def prog(wait: str) -> str:
        return _xml(3, 1, {
            0: [(-1, 1, ["r i0 s0 1"]), (2, -1, [f"s s0 s0 1{wait}"])],
            1: [(0, -1, ["s i0 i0 1"])],
            2: [(-1, 0, ["r i0 s1 1"])],
        })
    findings = check_msccl(prog(""))
    assert [f.kind for f in findings] == ["race"]
    assert "gpu 0 tb 0 step 0 (r" in findings[0].message and "gpu 0 tb 1 step 0 (s" in findings[0].message
    assert "s[0] of gpu 0" in findings[0].message
    assert check_msccl(prog(" 0 0 0")) == []  # the send waits for tb 0's receive: ordered


def test_check_flags_what_the_executor_rejects() -> None:
    mscclang = GOOD.replace(' outofplace="0" minBytes="0" maxBytes="0"', "")
    findings = check_msccl(mscclang)
    assert [(f.severity, f.kind) for f in findings] == [("warning", "missing_attribute")]
    assert "outofplace, minBytes, maxBytes" in findings[0].message
    assert verify(loads_msccl(mscclang)).ok  # still imports: the old runtime and RCCL default them
    wide = GOOD.replace('nchannels="1"', 'nchannels="4"')
    assert [f.kind for f in check_msccl(wide)] == ["bad_attribute"]
    big = GOOD.replace('cnt="1"', 'cnt="80"').replace('nchunksperloop="1"', 'nchunksperloop="80"').replace(
        '_chunks="1"', '_chunks="80"')
    assert {f.kind for f in check_msccl(big)} == {"limit"}


# --------------------------------------------------------------------------------------------- fuzz

_TAGS = st.sampled_from(["algo", "gpu", "tb", "step", "copy", "x"])
_ATTRS = st.sampled_from(["name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace", "outofplace",
                          "id", "i_chunks", "o_chunks", "s_chunks", "send", "recv", "chan", "s", "type", "srcbuf",
                          "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps", "hasdep", "i_off", "o_off"])
_VALUES = st.one_of(st.integers(-3, 9).map(str), st.sampled_from(
    ["allreduce", "allgather", "reducescatter", "alltoall", "custom", "s", "r", "rcs", "rrs", "rrc", "rrcs", "cpy",
     "re", "nop", "i", "o", "Simple", "LL", ""]), st.text(max_size=4))


@st.composite
def _documents(draw: st.DrawFn, depth: int = 0) -> str:
    tag = "algo" if depth == 0 else draw(_TAGS)
    attrs = draw(st.dictionaries(_ATTRS, _VALUES, max_size=10))
    body = "".join(draw(st.lists(_documents(depth + 1), max_size=3))) if depth < 3 else ""
    from xml.sax.saxutils import quoteattr

    return f"<{tag} " + " ".join(f"{k}={quoteattr(v)}" for k, v in attrs.items()) + f">{body}</{tag}>"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_documents())
def test_fuzz_random_documents_raise_only_schedule_errors(text: str) -> None:
    try:
        loads_msccl(text, allow_custom=True)
    except ScheduleError:
        pass
    try:
        check_msccl(text)
    except ScheduleError:
        pass


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=400))
def test_fuzz_random_bytes_raise_only_schedule_errors(data: bytes) -> None:
    with pytest.raises(ScheduleError):
        loads_msccl(b"<" + data)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzz_mutated_good_files_raise_only_schedule_errors(data: st.DataObject) -> None:
    text = dumps_msccl(build("allreduce", "recursive_doubling", 4, chunks=2))
    values = list(re.finditer(r'="([^"]*)"', text))
    for _ in range(data.draw(st.integers(1, 3))):
        m = data.draw(st.sampled_from(values))
        new = data.draw(_VALUES)
        text = text[:m.start(1)] + new.replace('"', "") + text[m.end(1):]
        values = list(re.finditer(r'="([^"]*)"', text))
    try:
        s = loads_msccl(text)
    except ScheduleError:
        return
    verify(s)  # whatever imports is a valid schedule the verifier can judge


# --------------------------------------------------------------------------------------------- cli


def test_cli_verify_export_convert(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from sim.cli import main

    xml = tmp_path / "ring.xml"
    assert main(["export", "-c", "allreduce", "-a", "ring", "-p", "4", "-o", str(xml), "--proto", "LL128",
                 "--min-bytes", "1KiB", "--max-bytes", "4MiB"]) == 0
    head = xml.read_text().splitlines()[0]
    assert 'proto="LL128"' in head and 'minBytes="1024"' in head and 'maxBytes="4194304"' in head
    assert main(["verify", "--file", str(xml)]) == 0
    assert "OK" in capsys.readouterr().out
    assert main(["export", "-c", "allreduce", "-a", "direct", "-p", "4", "-o", str(tmp_path / "d.xml"),
                 "--staged"]) == 0
    assert 'type="re"' in (tmp_path / "d.xml").read_text()
    assert main(["convert", str(xml), str(tmp_path / "ring.json")]) == 0
    assert json.loads((tmp_path / "ring.json").read_text())["format"] == "collsched.schedule/1"
    assert main(["convert", str(tmp_path / "ring.json"), str(tmp_path / "ring.sched"), "--format", "msccl"]) == 0
    assert (tmp_path / "ring.sched").read_text().startswith("<algo ")
    capsys.readouterr()
    assert main(["export", "-c", "allreduce", "-a", "ring", "-p", "4", "-o", str(tmp_path / "r.json"),
                 "--proto", "LL"]) == 2
    assert "--proto is for MSCCL-IR output" in capsys.readouterr().err
    assert main(["export", "-c", "broadcast", "-a", "binomial", "-p", "4", "-o", str(tmp_path / "b.xml")]) == 2
    assert "cannot write broadcast as MSCCL-IR" in capsys.readouterr().err


def test_cli_verify_reports_check_findings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from sim.cli import main

    hang = tmp_path / "hang.xml"
    hang.write_text(GOOD.replace('<step s="0" type="s"', '<step s="0" type="r"'))  # both receive first
    assert main(["verify", "--file", str(hang)]) == 1
    out = capsys.readouterr().out
    assert "cannot run" in out and "MSCCL error: deadlock" in out
    assert main(["verify", "--file", str(hang), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False and doc["msccl_findings"][0]["kind"] == "deadlock"
    old = tmp_path / "old.xml"
    old.write_text(GOOD.replace(' outofplace="0" minBytes="0" maxBytes="0"', ""))
    assert main(["verify", "--file", str(old)]) == 0  # a warning does not fail the verdict
    assert "MSCCL warning: algo: no outofplace" in capsys.readouterr().out
    bad = tmp_path / "bad.xml"
    bad.write_text("<algo")
    assert main(["verify", "--file", str(bad)]) == 2


def test_cli_on_the_corpus(capsys: pytest.CaptureFixture[str]) -> None:
    from sim.cli import main

    assert main(["verify", "--file", str(CORPUS / "mscclang_allreduce_ndv2_ar_1.xml")]) == 1
    out = capsys.readouterr().out
    assert "rank 0 input[" in out and "MSCCL error: gpu 6: thread blocks 4, 5 all send to gpu 2" in out
    custom = str(CORPUS / "mscclang_custom_alltonext_2in.xml")
    assert main(["verify", "--file", custom]) == 2
    assert main(["simulate", "--file", custom, "--topology", "full:24", "--size", "1MiB"]) == 0
    assert "postcondition none" in capsys.readouterr().out
    assert main(["simulate", "--file", str(CORPUS / "azure_ndv4_allreduce_ring_r48ll128.xml"), "--topology",
                 "full:8", "--size", "64MiB"]) == 0


# --------------------------------------------------------------------------------------------- backend


def _backend_runs_files(rank: int, world: int, files: dict[str, str]) -> None:
    import torch
    import torch.distributed as dist

    from runners.backend.policy import Policy

    policy = Policy.from_env()
    assert str(policy.choose("allreduce", 1 << 10, world)).startswith("file:")
    assert str(policy.choose("allgather", 1 << 10, world)).startswith("file:")
    x = torch.arange(12, dtype=torch.float64) * (rank + 1)
    dist.all_reduce(x)
    assert torch.equal(x, torch.arange(12, dtype=torch.float64) * sum(range(1, world + 1)))
    mine = torch.full((6,), float(rank))
    out = torch.empty(6 * world)
    dist.all_gather_into_tensor(out, mine)
    assert torch.equal(out, torch.arange(world, dtype=torch.float32).repeat_interleave(6))


@pytest.mark.multiprocess
def test_the_backend_runs_msccl_files(tmp_path: Path) -> None:
    from tests.runners import backend_cases as cases

    ag = tmp_path / "ag.xml"
    save_msccl(build("allgather", "ring", 2), ag)
    # A foreign file (msccl-tools' binary tree, 2 GPUs) for all-reduce, an exported one for all-gather.
    spec = f"allreduce={CORPUS / 'lyd_allreduce_binary_tree_gpu2.xml'},allgather=file:{ag}"
    cases.spawn(_backend_runs_files, 2, {}, env={"COLLSCHED_ALGORITHMS": spec})


def test_a_long_run_of_nops_reaches_the_step_limit_check() -> None:
    # 30,000 nops ahead of a thread block's sends (3.6 MB). Each nop's gate is judged by the first real step after
    # it, now found once per thread block: a scan from every nop was quadratic (185 s before this limit was named).
    text = dumps_msccl(build("allreduce", "ring", 4))
    head, sep, rest = text.partition('<tb id="0" send="1" recv="-1" chan="0">\n')
    assert sep, "the ring's first thread block has changed its header"
    nops = "".join(f'      <step s="{k}" type="nop" srcbuf="i" srcoff="-1" dstbuf="o" dstoff="-1" cnt="0" depid="-1" '
                   f'deps="-1" hasdep="0"/>\n' for k in range(30_000))
    renumbered = re.sub(r'<step s="(\d+)"', lambda m: f'<step s="{int(m.group(1)) + 30_000}"', rest, count=6)
    findings = check_msccl(head + sep + nops + renumbered)
    assert any("gpu 0 tb 0: 30006 steps, over the runtime limit of 256" in f.message for f in findings), findings[:3]
