"""Rank sets as text (``sim.verify.semantics._ranges``/``describe``) against a brute-force reading of the bits."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.verify.semantics import _ranges, describe, describe_text


def _parse(text: str) -> set[int]:
    """The set of ranks a printed rank list such as ``0-2,4-7`` names."""
    out: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def _bits(mask: int) -> set[int]:
    return {i for i in range(mask.bit_length()) if mask >> i & 1}


def test_worked_examples() -> None:
    assert _ranges(0b11110111) == "0-2,4-7"
    assert describe((5, 0b101111)) == [{"chunk": 5, "ranks": "0-3,5"}]
    assert _ranges(0b1) == "0" and _ranges(0b1010) == "1,3" and _ranges(0b110110) == "1-2,4-5"
    assert describe_text((2, 0b100)) == "chunk 2 from rank 2"
    assert describe_text((2, 0b1101)) == "chunk 2 from ranks 0,2-3"


@settings(max_examples=500, deadline=None)
@given(st.integers(1, 2**70))
def test_printed_ranges_name_exactly_the_bits_of_the_mask(mask: int) -> None:
    text = _ranges(mask)
    assert _parse(text) == _bits(mask)
    # Canonical: maximal runs, rising, a single rank without a dash.
    parts = [p.partition("-") for p in text.split(",")]
    spans = [(int(a), int(b or a)) for a, _, b in parts]
    assert all(a < b or not dash for (a, b), (_, dash, _) in zip(spans, parts, strict=True))
    assert all(b1 + 1 < a2 for (_, b1), (a2, _) in itertools.pairwise(spans))
