"""The MSCCL++ plan corpus the tests read (tests/data/foreign/mscclpp: plans MSCCL++ itself wrote, SOURCES.md
says where each comes from), and plan rewrites the tests share."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

CORPUS = Path(__file__).resolve().parents[2] / "data" / "foreign" / "mscclpp"
PLANS = sorted(p.name for p in CORPUS.glob("*.json"))
COLLECTIVES = [n for n in PLANS if not n.startswith("unit_")]
UNITS = [n for n in PLANS if n.startswith("unit_")]


def load(name: str) -> dict[str, Any]:
    """The plan ``name`` of the corpus as parsed JSON (a fresh copy each call)."""
    return json.loads((CORPUS / name).read_text())


def out_of_place_allgather(plan: dict[str, Any]) -> dict[str, Any]:
    """An out-of-place copy of an in-place all-gather plan: every local read of the gpu's own slice of the
    output reads the input instead, and a first ``copy`` (then a ``nop``) of thread block 0 puts the input in
    that slice, which the in-place plan found there."""
    out = copy.deepcopy(plan)
    out["inplace"] = False
    for gpu in out["gpus"]:
        r, c = gpu["id"], gpu["input_chunks"]
        for tb in gpu["threadblocks"]:
            for op in tb["ops"]:
                for b in op.get("src_buff", []):
                    if b.get("type") == "o" and r * c <= b["index"] < (r + 1) * c:
                        b["type"], b["index"] = "i", b["index"] - r * c
        gpu["threadblocks"][0]["ops"][:0] = [
            {"name": "copy", "src_buff": [{"type": "i", "index": 0, "size": c}],
             "dst_buff": [{"type": "o", "index": r * c, "size": c}]}, {"name": "nop"}]
    return out
