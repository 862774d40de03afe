"""Quantities on the command line (sizes, bandwidths, durations, size sweeps) and nccl-tests' size rules.

Sizes (``SIZE_FORMS``) take binary units, ``256MiB``, ``1KiB``, ``1TiB``, and
K, M, G, T alone, binary as in nccl-tests (``-b 1M`` is 2^20 bytes); decimal
units as users write them, ``64MB`` = 64·10^6, ``1KB`` = 1000 (KB, MB, GB,
TB are powers of 10^3, as in bandwidths); or plain bytes. Units are
case-insensitive; a size is never negative. Bandwidths take decimal units as nccl-tests reports them
(``50GB/s``; a plain number is bytes/s); durations ``1us``, ``2.5ms`` (a
plain number is seconds). Errors are ``UsageError`` naming the option.

nccl-tests' size rules, shared by the simulator, ``collsched bench`` and the
backend's policy: a collective's size is the bytes of its buffer for
allreduce, broadcast and reduce, of its output for allgather and gather, and
of its input for reducescatter, scatter and alltoall (``sized_buffer``);
busbw = algbw x ``busbw_factor``. This module imports no torch, numpy or simpy.
"""

from __future__ import annotations

import math
import re

from algorithms.errors import UsageError
from algorithms.ir import Kind

__all__ = ["MAX_SIZES", "SIZE_FORMS", "busbw_factor", "count_per_rank", "parse_bandwidth", "parse_duration",
           "parse_size", "parse_sizes", "sized_buffer"]

_NUMBER = r"([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)"
_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20,
               "g": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tib": 1 << 40,
               "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
SIZE_FORMS = ("accepted: bytes >= 0 as a plain number or with a unit: B; KiB, MiB, GiB, TiB or K, M, G, T "
              "(binary, 2^10 steps, as in nccl-tests); KB, MB, GB, TB (decimal, 10^3 steps)")
"""What ``parse_size`` accepts, quoted in its errors."""
_BW_UNITS = {"": 1.0, "b/s": 1.0, "kb/s": 1e3, "mb/s": 1e6, "gb/s": 1e9, "tb/s": 1e12}
_TIME_UNITS = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def _quantity(text: str, units: dict[str, float], what: str, hint: str) -> float:
    m = re.fullmatch(_NUMBER + r"\s*([a-zA-Zµ/]*)", text.strip())
    if not m or m.group(2).lower() not in units:
        raise UsageError(f"{what}: cannot read {text!r} ({hint})")
    value = float(m.group(1)) * units[m.group(2).lower()]
    if not math.isfinite(value):
        raise UsageError(f"{what}: {text!r} is not finite")
    return value


def parse_size(text: str, what: str = "--size") -> float:
    """Bytes in ``256MiB``, ``1KiB``, ``1M`` (binary), ``64MB`` (decimal), ``4096`` (``SIZE_FORMS``);
    a negative size is a ``UsageError`` that says so."""
    units = {k: float(v) for k, v in _SIZE_UNITS.items()}
    if text.strip().startswith("-"):
        try:
            _quantity(text.strip()[1:], units, what, SIZE_FORMS)
        except UsageError:  # not a number at all: say that instead
            raise UsageError(f"{what}: cannot read {text!r} ({SIZE_FORMS})") from None
        raise UsageError(f"{what}: a size cannot be negative, got {text.strip()!r} ({SIZE_FORMS})")
    return _quantity(text, units, what, SIZE_FORMS)


def parse_bandwidth(text: str, what: str = "--bandwidth") -> float:
    """Bytes/s in ``50GB/s``, ``400MB/s``, ``1e9`` (decimal units, as nccl-tests reports)."""
    value = _quantity(text, _BW_UNITS, what, "expected a number with B/s, KB/s, MB/s or GB/s")
    if value <= 0:
        raise UsageError(f"{what}: must be positive, got {text!r}")
    return value


def parse_duration(text: str, what: str = "--latency") -> float:
    """Seconds in ``1us``, ``2.5ms``, ``1e-6``."""
    return _quantity(text, _TIME_UNITS, what, "expected a number with s, ms, us or ns")


MAX_SIZES = 200


def parse_sizes(text: str) -> list[float]:
    """``A:B`` (doubling from A to B), ``A:B:F`` (multiplying by F), a comma list ``A,B,C`` or one size; at most
    ``MAX_SIZES`` of them, counted before any list is built (a factor of 1.0000001 would make millions)."""
    if "," in text or ":" not in text:
        if text.count(",") >= MAX_SIZES:
            raise UsageError(f"--sizes: {text.count(',') + 1} sizes is too many (at most {MAX_SIZES})")
        sizes = [parse_size(s, "--sizes") for s in text.split(",") if s.strip()]
    else:
        parts = text.split(":")
        if len(parts) not in (2, 3):
            raise UsageError(f"--sizes: expected A:B, A:B:F or A,B,C, got {text!r}")
        lo, hi = parse_size(parts[0], "--sizes"), parse_size(parts[1], "--sizes")
        factor = 2.0
        if len(parts) == 3:
            try:
                factor = float(parts[2])
            except ValueError:
                factor = 0.0
            if not factor > 1:
                raise UsageError(f"--sizes: the factor must be a number > 1, got {parts[2]!r}")
        if lo <= 0 or hi < lo:
            raise UsageError(f"--sizes: need 0 < A <= B, got {text!r}")
        count = math.floor(math.log(hi * (1 + 1e-12) / lo) / math.log(factor)) + 1
        if count > MAX_SIZES:
            raise UsageError(f"--sizes: {text!r} makes {count} sizes, too many (at most {MAX_SIZES}); "
                             "use a larger factor")
        sizes = []
        s = lo
        while s <= hi * (1 + 1e-12):
            sizes.append(s)
            s *= factor
    if not sizes:
        raise UsageError(f"--sizes: expected A:B, A:B:F or A,B,C, got {text!r}")
    if len(sizes) > MAX_SIZES:
        raise UsageError(f"--sizes: {len(sizes)} sizes is too many (at most {MAX_SIZES})")
    return sizes


def sized_buffer(kind: Kind) -> str:
    """Which buffer a size measures (nccl-tests): "buffer" (in place), "output" or "input"."""
    if kind in (Kind.ALLREDUCE, Kind.BROADCAST, Kind.REDUCE, Kind.BARRIER):
        return "buffer"
    if kind in (Kind.ALLGATHER, Kind.GATHER):
        return "output"
    return "input"


def count_per_rank(kind: Kind, size: int, p: int, element_size: int) -> int:
    """Elements of one rank's piece for a ``size``-byte collective: the whole buffer for allreduce,
    broadcast and reduce, a 1/p share of the sized output or input for the others."""
    n = size // element_size
    return n if sized_buffer(kind) == "buffer" else n // p


def busbw_factor(kind: Kind, p: int) -> float:
    """nccl-tests' bus-bandwidth factor: allreduce 2(p-1)/p; allgather, reducescatter, alltoall,
    alltoallv, scatter, gather (p-1)/p; broadcast, reduce (and barrier) 1."""
    if kind is Kind.ALLREDUCE:
        return 2 * (p - 1) / p
    if kind in (Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLTOALL, Kind.ALLTOALLV, Kind.SCATTER, Kind.GATHER):
        return (p - 1) / p
    return 1.0

