"""NCCL's tuning constants and cost-model rules by release, 2.18 to 2.31: what ``-a nccl --nccl-version`` runs.

Every figure is NCCL's own, from src/graph/tuning.cc of each release (src/tuning/*.cc in 2.31, where the cost
model was split by algorithm), read from the NVIDIA/nccl repository at the release tags v2.18.6-1 ...
v2.30.7-1 and the 2.31.0a7 development branch; the code here restates them, it copies none. ``NcclVersion``
holds one release's tables and rules; ``version(text)`` reads ``2.26``, ``2.26.2`` or nccl-tests' ``NCCL
version 2.26.2+cuda12.8``. A release is the one before it with the changes listed in ``_CHANGES`` (the newest
first, each with the file and what changed), so that the tables below are the latest ones and every older
release differs only where a change says so.

Rows of the per-channel tables: compute capability 70 (Volta), 80 (Ampere), 90 (Hopper), 100 (Blackwell);
columns: 1, 2, 3 or more nodes. ``llMaxBws``' rows for more than one node are by CPU vendor instead (row 0:
Intel and every CPU that is not AMD, Grace included; row 1: AMD).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = ["DEFAULT_VERSION", "KNOWN", "NcclVersion", "parse_version", "version"]

Row = tuple[float, float, float]
Protos = Mapping[str, float]  # LL, LL128, Simple


def _p(ll: float, ll128: float, simple: float) -> dict[str, float]:
    return {"LL": ll, "LL128": ll128, "Simple": simple}


@dataclass(frozen=True)
class NcclVersion:
    """One NCCL release's tuning: the constants of ``ncclTopoTuneModel`` and the rules that changed over time."""

    name: str
    # src/graph/tuning.cc, baseLat: microseconds per call, by algorithm and protocol.
    base_latency: Mapping[str, Protos]
    # hwLat[NVLINK], hwLat[PCI], hwLat[NET]: microseconds per step.
    hw_latency: Mapping[str, Mapping[str, Protos]]
    ll_max_bw: Mapping[int, Row]
    ll_max_bw_intel: Row
    per_ch_ring_ll128: Mapping[int, Row]
    per_ch_tree_ll128: Mapping[int, Row]
    per_ch_tree: Mapping[int, Row]
    per_ch_nvls_tree: Mapping[int, Row]
    nvls_efficiency: Mapping[int, float]
    # Rules (each named after what NCCL's code does; ``_CHANGES`` says since when).
    ring_ll_factor: tuple[float, float] = (0.5, 0.5)
    """Ring LL's share of the Simple busBw: (all-reduce, reduce and every multi-node call; the others)."""
    ring_ll128_one_ppn: float = 0.92
    """Ring LL128's share of Simple's with one GPU per node (0.7 until 2.22) ..."""
    ring_ll128: float = 0.92
    """... and otherwise."""
    inter_steps_2n: bool = False
    """A ring all-reduce counts 2 nNodes network steps (until 2.22) instead of 2 (nNodes - 1)."""
    ppn1_tree_net_latency: bool = True
    """With one GPU per node every algorithm takes the tree's network latency (2.23 to 2.30)."""
    pat: float = 0.75
    """PAT's share of busBw; 0: no PAT (before 2.23)."""
    nvls_model: str = "efficiency"
    """``efficiency``: nvlsEfficiency x (channels - 1) / channels, x2 for all-reduce (2.28 on); ``min``: the
    lesser of the graph's intra and inter rates, x 5/6 (2.19 to 2.27); ``2.18``: its own rules."""
    nvls_allgather: bool = True
    """NVLS runs all-gather and reduce-scatter (2.19 on)."""
    nvls_tree_correction_blackwell: bool = True
    """The tree's size correction applies to NVLSTree on Blackwell x86 hosts (2.29 on)."""
    blackwell_row: bool = True
    """Blackwell has its own rows (2.25 on); before, compute capability 100 takes Hopper's."""
    blackwell_ll128: bool = True
    """LL128 is enabled on Blackwell (2.25 on: ``case 100``); before, only on 70, 80 and 90."""
    tree_all_threads: bool = True
    """The tree runs every thread of its block whatever the size (2.22 on, src/enqueue.cc "Tree now uses all
    threads always"); before, its threads were cut at small sizes as the ring's are."""
    split_bw: bool = False
    """2.31: the ring's busBw takes the graph's inter-node rate whenever there is more than one node (not only
    from 3 nodes), the tree's the lesser of both; latencies of one node take the intra-node figures."""
    changes: tuple[str, ...] = field(default=(), compare=False)

    def row(self, table: Mapping[int, Row], cc: int) -> Row:
        """``table``'s row for compute capability ``cc`` (Blackwell on Hopper's before it had its own)."""
        return table[_cc_row(cc, self.blackwell_row)]

    def row_value(self, table: Mapping[int, float], cc: int) -> float:
        """``table``'s figure for compute capability ``cc`` (as ``row``)."""
        return table[_cc_row(cc, self.blackwell_row)]


def _cc_row(cc: int, blackwell: bool = True) -> int:
    return 100 if cc >= 100 and blackwell else 90 if cc >= 90 else 80 if cc >= 80 else 70


_NEWEST = NcclVersion(
    name="2.31",
    base_latency={
        # src/tuning/cost_model.cc (2.31) = src/graph/tuning.cc ncclTunerConstantsDefaults.baseLatencies (2.28-2.30)
        "tree": _p(6.8, 14.0, 8.4), "ring": _p(6.6, 14.0, 8.4), "collnet_direct": _p(0, 0, 0),
        "collnet_chain": _p(0, 0, 0), "nvls": _p(0, 0, 0), "nvls_tree": _p(0, 0, 0), "pat": _p(8.0, 8.0, 8.0)},
    hw_latency={
        # hwLatencies[NCCL_HW_NVLINK], [NCCL_HW_PCI], [NCCL_HW_NET] (same files)
        "nvlink": {"tree": _p(0.6, 1.25, 4.0), "ring": _p(0.6, 1.9, 3.4), "collnet_direct": _p(0, 0, 3.7),
                   "collnet_chain": _p(0, 0, 2.8), "nvls": _p(0, 0, 25.0), "nvls_tree": _p(0, 0, 25.0),
                   "pat": _p(0, 0, 4.0)},
        "pci": {"tree": _p(1.0, 1.9, 4.0), "ring": _p(1.0, 2.5, 5.7), "collnet_direct": _p(0, 0, 3.7),
                "collnet_chain": _p(0, 0, 2.8), "nvls": _p(0, 0, 0), "nvls_tree": _p(0, 0, 0), "pat": _p(0, 0, 4.0)},
        "net": {"tree": _p(5.0, 8.5, 14.0), "ring": _p(2.7, 4.0, 14.0), "collnet_direct": _p(0, 0, 31.0),
                "collnet_chain": _p(0, 0, 30.0), "nvls": _p(0, 0, 18.0), "nvls_tree": _p(0, 0, 20.9),
                "pat": _p(0, 0, 14.0)}},
    # llMaxBws: single node by GPU, (GB/s, N1/N2/N4); multi-node rows by CPU.
    ll_max_bw={70: (39.0, 39.0, 20.4), 80: (87.7, 22.5, 19.0), 90: (141.0, 45.0, 35.0), 100: (282.0, 90.0, 70.0)},
    ll_max_bw_intel=(39.0, 39.0, 20.4),
    per_ch_ring_ll128={70: (20.0,) * 3, 80: (20.0,) * 3, 90: (36.7,) * 3, 100: (40.0,) * 3},
    per_ch_tree_ll128={70: (20.0,) * 3, 80: (20.0,) * 3, 90: (36.7, 36.7, 29.0), 100: (55.6, 31.67, 20.0)},
    per_ch_tree={70: (26.5, 18.5, 10.0), 80: (24.0, 23.6, 17.8), 90: (38.7, 41.4, 36.0), 100: (70.0, 42.8, 24.0)},
    per_ch_nvls_tree={70: (26.5, 18.5, 10.0), 80: (24.0, 23.6, 17.8), 90: (0.0, 57.7, 45.5),
                      100: (0.0, 96.0, 80.0)},
    nvls_efficiency={70: 0.0, 80: 0.0, 90: 0.85, 100: 0.74},  # src/tuning/nvls.cc, nvlsEfficiency
    split_bw=True,
    ppn1_tree_net_latency=False,
)


def _hw(v: NcclVersion, medium: str, algo: str, proto: str, value: float) -> dict[str, Any]:
    table = {m: {a: dict(p) for a, p in algos.items()} for m, algos in v.hw_latency.items()}
    table[medium][algo][proto] = value
    return {"hw_latency": table}


def _base(v: NcclVersion, algo: str, proto: str, value: float) -> dict[str, Any]:
    table = {a: dict(p) for a, p in v.base_latency.items()}
    table[algo][proto] = value
    return {"base_latency": table}


def _row(v: NcclVersion, name: str, cc: int, row: Row) -> dict[str, Any]:
    table = dict(getattr(v, name))
    table[cc] = row
    return {name: table}


def _merge(*parts: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for p in parts:
        for k, val in p.items():
            out[k] = val
    return out


def _to_2_30(v: NcclVersion) -> dict[str, Any]:
    # 2.31 (src/tuning/ring.cc, tree.cc) split the model per algorithm and changed its inputs: the ring's busBw
    # from 2 nodes on is the graph's inter-node rate (2.30: the intra-node one up to 2 nodes), the tree's the
    # lesser of both; one node's inter latency is the intra one (2.30: the tree's network latency at ppn 1).
    return {"split_bw": False, "ppn1_tree_net_latency": True}


def _to_2_29(v: NcclVersion) -> dict[str, Any]:
    # 2.30: perChMaxNVLSTreeBws[Blackwell][N4] 80 (2.28-2.29: 43.8).
    return _row(v, "per_ch_nvls_tree", 100, (0.0, 96.0, 43.8))


def _to_2_28(v: NcclVersion) -> dict[str, Any]:
    # 2.29: perChMaxRingLL128Bws[Blackwell] {40, 40, 40} (2.28: {2 x 36.7, 34.6, 2 x 36.7}); the tree correction
    # factor also applies to NVLSTree all-reduce on Blackwell x86 hosts (ncclTopoGetAlgoTime).
    return _merge(_row(v, "per_ch_ring_ll128", 100, (73.4, 34.6, 73.4)), {"nvls_tree_correction_blackwell": False})


def _to_2_27(v: NcclVersion) -> dict[str, Any]:
    # 2.28: NVLS and NVLSTree busBw from nvlsEfficiency and perChMaxNVLSTreeBws (2.27: the lesser of the graph's
    # rates, times 5/6); Blackwell's tree rows {70, 42.8, 24} and {55.6, 31.67, 20} (2.25-2.27: twice Hopper's);
    # hwLat[NET][NVLSTree][Simple] 20.9 (2.19-2.27: 14).
    return _merge({"nvls_model": "min"}, _row(v, "per_ch_tree", 100, (77.4, 82.8, 72.0)),
                  _row(v, "per_ch_tree_ll128", 100, (73.4, 73.4, 58.0)),
                  _row(v, "per_ch_ring_ll128", 100, (73.4, 73.4, 73.4)), _hw(v, "net", "nvls_tree", "Simple", 14.0))


def _to_2_24(v: NcclVersion) -> dict[str, Any]:
    # 2.25: Blackwell rows (2 x Hopper's) and LL128 enabled on compute capability 100 (2.24: LL128 only on 70, 80,
    # 90; Blackwell took Hopper's rows, minCompCap >= 90).
    return {"blackwell_row": False, "blackwell_ll128": False}


def _to_2_23(v: NcclVersion) -> dict[str, Any]:
    # 2.24: PAT's busBw x 0.75 (2.23: x 0.85).
    return {"pat": 0.85}


def _to_2_22(v: NcclVersion) -> dict[str, Any]:
    # 2.23: PAT (all-gather, reduce-scatter, one GPU per node; 2.22: none); baseLat[Tree][Simple] 8.4 (2.22: 0);
    # hwLat[*][Tree][Simple] 4.0 / 4.0 / 14 (2.19-2.22: 28 on NVLink, PCI and network); ring all-reduce's network
    # steps 2 (nNodes - 1) (2.22: 2 nNodes); ring LL128's 0.7 share at ppn < 2 dropped; at ppn 1 the tree's
    # network latency for every algorithm (2.22: each its own).
    out = _merge({"pat": 0.0, "inter_steps_2n": True, "ring_ll128_one_ppn": 0.7, "ppn1_tree_net_latency": False},
                 _base(v, "tree", "Simple", 0.0))
    hw = {m: {a: dict(p) for a, p in algos.items()} for m, algos in v.hw_latency.items()}
    for m in ("nvlink", "pci", "net"):
        hw[m]["tree"]["Simple"] = 28.0
    out["hw_latency"] = hw
    return out


def _to_2_21(v: NcclVersion) -> dict[str, Any]:
    # 2.22: the tree keeps all NCCL_MAX_NTHREADS threads at every size (src/enqueue.cc; 2.21 halved them below the
    # thread threshold as for the ring).
    return {"tree_all_threads": False}


def _to_2_20(v: NcclVersion) -> dict[str, Any]:
    # 2.21: Hopper's llMaxBws {141, 45, 35} (2.20: Ampere's {87.7, 22.5, 19}); hwLat[NVLINK][NVLS/NVLSTree] 25
    # (2.19-2.20: 23); ring LL's busBw x 0.5 (2.20: x 1/4 for all-reduce, reduce and multi-node, else x 1/3).
    out = _merge(_row(v, "ll_max_bw", 90, (87.7, 22.5, 19.0)), {"ring_ll_factor": (0.25, 1 / 3)},
                 _hw(v, "nvlink", "nvls", "Simple", 23.0))
    out["hw_latency"]["nvlink"]["nvls_tree"]["Simple"] = 23.0
    return out


def _to_2_18(v: NcclVersion) -> dict[str, Any]:
    # 2.19: NVLS for all-gather and reduce-scatter (2.18: all-reduce only); NVLS latency = hwLat[NVLINK][NVLS]
    # (+ the network's across nodes) with baseLat 0 (2.18: baseLat 23 and no NVLink part); hwLat[NVLINK][NVLS] 23
    # (2.18: 0); hwLat[*][Tree][Simple] 28 (2.18: 4 / 6 / 14); hwLat[NET][NVLSTree] 14 (2.18: 19).
    out = _merge({"nvls_model": "2.18", "nvls_allgather": False}, _base(v, "nvls", "Simple", 23.0))
    out["base_latency"]["nvls_tree"]["Simple"] = 23.0
    hw = {m: {a: dict(p) for a, p in algos.items()} for m, algos in v.hw_latency.items()}
    hw["nvlink"]["nvls"]["Simple"] = hw["nvlink"]["nvls_tree"]["Simple"] = 0.0
    hw["nvlink"]["tree"]["Simple"], hw["pci"]["tree"]["Simple"], hw["net"]["tree"]["Simple"] = 4.0, 6.0, 14.0
    hw["net"]["nvls_tree"]["Simple"] = 19.0
    out["hw_latency"] = hw
    return out


_CHANGES = (("2.30", _to_2_30), ("2.29", _to_2_29), ("2.28", _to_2_28), ("2.27", _to_2_27), ("2.26", None),
            ("2.25", None), ("2.24", _to_2_24), ("2.23", _to_2_23), ("2.22", _to_2_22), ("2.21", _to_2_21),
            ("2.20", _to_2_20), ("2.19", None), ("2.18", _to_2_18))
"""Each older release and the step from the one after it to it (None: nothing of the cost model changed)."""


def _build() -> dict[str, NcclVersion]:
    out = {_NEWEST.name: _NEWEST}
    v = _NEWEST
    for name, step in _CHANGES:
        v = replace(v, name=name, **(step(v) if step is not None else {}))
        out[name] = v
    return out


KNOWN: Mapping[str, NcclVersion] = _build()
"""Every modelled release by ``MAJOR.MINOR``, newest first."""
DEFAULT_VERSION = "2.30"
"""The newest release modelled: 2.30 (v2.30.7-1, the newest tag). 2.31 is NVIDIA/nccl's development branch
(2.31.0a7, src/tuning/), modelled too and taken only when asked for."""


def parse_version(text: str) -> str | None:
    """``MAJOR.MINOR`` of a version as nccl-tests or a table prints it (``2.26.2+cuda12.8``, ``NCCL version
    2.25.1``, ``22702``), or None when the text holds none."""
    # The first MAJOR.MINOR with a one-digit major (NCCL is 2.x): a container tag such as pytorch:24.04 is not one.
    m = re.search(r"(?<![\d.])(\d)\.(\d+)(?:\.\d+)?", text)
    if m:
        return f"{int(m.group(1))}.{int(m.group(2))}"
    m = re.fullmatch(r"\s*(\d)(\d{2})(\d{2})\s*", text)  # nccl-tests' nccl-library=22702 (NCCL_VERSION_CODE)
    return f"{int(m.group(1))}.{int(m.group(2))}" if m else None


def version(text: str | None = None) -> NcclVersion:
    """The release ``text`` names (``parse_version``; None: ``DEFAULT_VERSION``); ``ValueError`` naming the known
    ones otherwise. A release older than 2.18 is refused; one newer than the newest takes the newest's model."""
    if text is None:
        return KNOWN[DEFAULT_VERSION]
    name = parse_version(text)
    if name is None:
        raise ValueError(f"NCCL version {text!r}: expected MAJOR.MINOR such as 2.26 ({', '.join(KNOWN)})")
    if name in KNOWN:
        return KNOWN[name]
    major, minor = (int(x) for x in name.split("."))
    if (major, minor) > (2, 31):
        return replace(KNOWN["2.31"], name=name)
    raise ValueError(f"NCCL version {text!r}: the model knows {', '.join(reversed(list(KNOWN)))}")
