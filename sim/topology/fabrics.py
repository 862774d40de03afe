"""NIC fabrics of the GPU presets: NICs per node, their speed, and what the network adds per step and message.

A ``Fabric`` is what joins a preset's nodes (NVLink domains): ``nics_per_node`` NICs (None: one per GPU) of
``nic_Gbps`` line rate each, of which NCCL reaches ``efficiency``; ``latency_us``, the latency the network
plugin reports to NCCL (``ncclNetProperties_t.latency``, kept in the ring and tree graphs as ``latencyInter``
and added by NCCL's tuning to every inter-node step, twice for Simple: src/graph/search.cc and
src/graph/tuning.cc); and ``overhead_us``, the network proxy's cost to post one message (NCCL's
``NCCL_NET_OVERHEAD``, by default 1 us on Intel hosts and 2 us on AMD: src/graph/tuning.cc,
``getNetOverhead``), which bounds every step of a ring that crosses nodes.

Examples (``FABRICS``; ``dgx-a100:2@fabric=efa,nics=4`` picks one on a preset and overrides its figures):

- ``ib`` (NDR InfiniBand, ConnectX-7 400 Gb/s; DGX H100/H200/B200, and the default of those presets): NCCL's IB
  transport reports no latency (src/transport/net_ib/init.cc: ``props->latency = 0``);
- ``ib-hdr`` (HDR InfiniBand, ConnectX-6 200 Gb/s; DGX A100);
- ``roce`` (RoCE on ConnectX-7 400 Gb/s, as GCP A4's gIB plugin runs it): NCCL's IB verbs over Ethernet,
  the same figures as ``ib``;
- ``efa`` (AWS Elastic Fabric Adapter, 100 Gb/s per NIC: 4 per p4d/p4de node, 32 per p5): the aws-ofi-nccl
  plugin's own tuner assumes 20 us of network latency and 3 us per completion (aws-ofi-nccl
  include/nccl_ofi_tuner.h, ``TUNER_NET_LATENCY`` 20, ``TUNER_NET_COMP_OVERHEAD`` 3: "~2 us in the device
  and ~1 us to write that completion up to the host stack") and 12.5 GB/s per rail;
- ``tcpxo`` (GCP GPUDirect-TCPXO, 8 x 200 Gb/s Ethernet data NICs on a3-megagpu-8g, GCP's A3 Mega machine
  type): TCP offload, whose extra latency is not published; 0 here, to be fitted (``collsched fit``).

This module imports no networkx.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from sim.topology.errors import TopologyError

__all__ = ["FABRICS", "IB_EFFICIENCY", "Fabric", "fabric_from_dict", "parse_nic_speed", "with_options"]

IB_EFFICIENCY = 0.94
"""The fraction of an InfiniBand NIC's line rate NCCL reaches: "you should see 46-48GB/s per NIC" on NDR
400 Gb/s = 50 GB/s (NVIDIA/nccl-tests issue 290). 0.94 x 50 = 47 GB/s."""
INTEL_NET_OVERHEAD_US = 1.0
"""NCCL's network post overhead on an Intel x86 host (src/graph/tuning.cc ``getNetOverhead``: 1.0 us; AMD 2.0;
other CPUs, Grace included, 1.0)."""


@dataclass(frozen=True)
class Fabric:
    """One NIC fabric (module docstring); ``nics_per_node`` None: one NIC per GPU."""

    name: str
    nic_Gbps: float
    nics_per_node: int | None = None
    efficiency: float = IB_EFFICIENCY
    latency_us: float = 0.0
    overhead_us: float = INTEL_NET_OVERHEAD_US
    source: str = ""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.nic_Gbps) and self.nic_Gbps > 0):
            raise TopologyError(f"fabric {self.name}: nic speed must be a positive number of Gb/s, "
                                f"got {self.nic_Gbps!r}")
        if self.nics_per_node is not None and (isinstance(self.nics_per_node, bool) or self.nics_per_node < 1):
            raise TopologyError(f"fabric {self.name}: nics must be an integer >= 1, got {self.nics_per_node!r}")
        if not 0 < self.efficiency <= 1:
            raise TopologyError(f"fabric {self.name}: efficiency must lie in (0, 1], got {self.efficiency!r}")
        for key in ("latency_us", "overhead_us"):
            v = getattr(self, key)
            if not (math.isfinite(v) and v >= 0):
                raise TopologyError(f"fabric {self.name}: {key.removesuffix('_us')} must be >= 0 us, got {v!r}")

    def nics(self, gpus_per_node: int) -> int:
        """NICs per node of ``gpus_per_node`` GPUs."""
        return gpus_per_node if self.nics_per_node is None else self.nics_per_node

    @property
    def nic_bandwidth(self) -> float:
        """Bytes/s per direction per NIC that NCCL reaches."""
        return self.nic_Gbps / 8 * 1e9 * self.efficiency

    def to_dict(self) -> dict[str, Any]:
        """The fabric as a machine file's ``nodes.fabric`` object."""
        return {"name": self.name, "nic_Gbps": self.nic_Gbps, "nics_per_node": self.nics_per_node,
                "efficiency": self.efficiency, "latency_us": self.latency_us, "overhead_us": self.overhead_us}


FABRICS: Mapping[str, Fabric] = {
    "ib": Fabric("ib", 400.0, source="ConnectX-7 NDR 400 Gb/s (DGX H100/B200 datasheets); NCCL's IB transport "
                                     "reports latency 0 (src/transport/net_ib/init.cc)"),
    "ib-hdr": Fabric("ib-hdr", 200.0, source="ConnectX-6 HDR 200 Gb/s (DGX A100 datasheet)"),
    "roce": Fabric("roce", 400.0, source="ConnectX-7 400 Gb/s RoCE (GCP A4 a4-highgpu-8g: 8 x 400 Gb/s, gIB "
                                         "plugin on NCCL's IB verbs transport)"),
    "efa": Fabric("efa", 100.0, latency_us=20.0, overhead_us=3.0,
                  source="AWS EFA 100 Gb/s per NIC (p4d/p4de: 4 per node; p5: 32); aws-ofi-nccl "
                         "include/nccl_ofi_tuner.h: TUNER_NET_LATENCY 20 us, TUNER_NET_COMP_OVERHEAD 3 us"),
    "tcpxo": Fabric("tcpxo", 200.0, source="GCP a3-megagpu-8g: GPUDirect-TCPXO over 8 x 200 Gb/s data NICs (GCP "
                                           "A3 Mega); its TCP offload latency is not published (0 here: fit it)"),
}
"""The fabrics a preset option may name (``fabric=NAME``)."""

_GBIT = re.compile(r"\s*([0-9.]+(?:[eE][-+]?\d+)?)\s*(?:Gb/s|Gbps|Gbit/s|G|Gb)\s*")


def parse_nic_speed(text: str) -> float:
    """Gb/s in ``400Gb/s``, ``400Gbps``, ``400G`` (bits) or ``50GB/s`` (bytes, as ``sim.units`` reads them)."""
    m = _GBIT.fullmatch(text)
    if m:
        value = float(m.group(1))
    else:
        from sim.units import parse_bandwidth

        try:
            value = parse_bandwidth(text, "nic") * 8 / 1e9
        except Exception:
            raise TopologyError(f"nic={text!r}: expected a speed such as 400Gb/s, 400G or 50GB/s") from None
    if not (math.isfinite(value) and value > 0):
        raise TopologyError(f"nic={text!r}: must be positive")
    return value


def _duration_us(key: str, text: str) -> float:
    from sim.units import parse_duration

    try:
        value = parse_duration(text, key) * 1e6
    except Exception:
        raise TopologyError(f"{key}={text!r}: expected a duration such as 20us or 2e-6") from None
    if not (math.isfinite(value) and value >= 0):
        raise TopologyError(f"{key}={text!r}: must be >= 0")
    return value


def with_options(base: Fabric, options: Mapping[str, str]) -> Fabric:
    """``base`` (or ``fabric=NAME``'s) with ``nics``, ``nic``, ``latency``, ``overhead`` and ``efficiency``
    from a preset's options; ``TopologyError`` naming the option otherwise."""
    fabric = base
    if "fabric" in options:
        name = options["fabric"].strip().lower()
        if name not in FABRICS:
            raise TopologyError(f"fabric={options['fabric']!r}: expected one of {', '.join(FABRICS)}")
        fabric = FABRICS[name]
    changes: dict[str, Any] = {}
    if "nics" in options:
        text = options["nics"].strip()
        if not text.isdigit() or int(text) < 1:
            raise TopologyError(f"nics={text!r}: expected an integer >= 1 (NICs per node)")
        changes["nics_per_node"] = int(text)
    if "nic" in options:
        changes["nic_Gbps"] = parse_nic_speed(options["nic"])
    for key in ("latency", "overhead"):
        if key in options:
            changes[f"{key}_us"] = _duration_us(key, options[key])
    if "efficiency" in options:
        try:
            changes["efficiency"] = float(options["efficiency"])
        except ValueError:
            raise TopologyError(f"efficiency={options['efficiency']!r}: expected a number in (0, 1]") from None
    return replace(fabric, **changes) if changes else fabric


def fabric_from_dict(doc: object, where: str) -> Fabric:
    """A fabric from a machine file's ``nodes.fabric`` object; ``TopologyError`` naming ``where`` and the field."""
    if not isinstance(doc, dict):
        raise TopologyError(f"{where}: must be an object")
    keys = ("name", "nic_Gbps", "nics_per_node", "efficiency", "latency_us", "overhead_us")
    extra = sorted(set(doc) - set(keys))
    if extra:
        raise TopologyError(f"{where}: unknown field {extra[0]!r}")
    for key in ("nic_Gbps", "efficiency", "latency_us", "overhead_us"):
        v = doc.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
            raise TopologyError(f"{where}.{key}: must be a number, got {v!r}")
    n = doc.get("nics_per_node")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int)):
        raise TopologyError(f"{where}.nics_per_node: must be an integer or null, got {n!r}")
    try:
        return Fabric(str(doc.get("name", "custom")), float(doc.get("nic_Gbps", 400.0)), n,
                      float(doc.get("efficiency", IB_EFFICIENCY)), float(doc.get("latency_us", 0.0)),
                      float(doc.get("overhead_us", INTEL_NET_OVERHEAD_US)))
    except TopologyError as e:
        raise TopologyError(f"{where}: {e}") from None
