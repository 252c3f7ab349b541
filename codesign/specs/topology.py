"""Network topology specs: two-tier (scale-up domain + scale-out fat-tree) and FullFlat."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from codesign.specs.base import Spec


class CollectiveEfficiency(Spec):
    """Achieved fraction of link bandwidth as a function of message size.

    ``efficiency(S) = efficiency_max × S / (S + efficiency_half_size_MB)``: small messages are
    latency- and protocol-bound, large ones reach ``efficiency_max`` of the wire rate.
    """

    efficiency_max: float = Field(default=1.0, gt=0, le=1)
    efficiency_half_size_MB: float = Field(default=0.0, ge=0)


class ScaleUpSpec(CollectiveEfficiency):
    """A scale-up domain (NVLink/NVSwitch, xGMI): every GPU reaches every other at full rate."""

    domain_size: int = Field(ge=1, description="GPUs per scale-up domain")
    bandwidth_GBps: float = Field(gt=0, description="per GPU, per direction, GB/s")
    latency_us: float = Field(ge=0, description="per-message latency (alpha), us")
    in_network_reduction: bool = Field(
        default=False, description="switch-side reduction (e.g. NVLink SHARP / NVLS)"
    )


class ScaleOutSpec(CollectiveEfficiency):
    """Scale-out fat-tree between scale-up domains; each GPU has its own NIC (rail)."""

    nic_bandwidth_Gbps: float = Field(gt=0, description="NIC rate per GPU, per direction, Gb/s")
    latency_us: float = Field(ge=0, description="NIC + software latency per message, us")
    switch_tiers: int = Field(default=2, ge=1, le=4, description="fat-tree levels")
    hop_latency_us: float = Field(default=0.5, ge=0, description="per switch hop, us")
    oversubscription: float = Field(
        default=1.0, ge=1, description="taper above the full-bisection block (1 = none)"
    )
    full_bisection_gpus: int | None = Field(
        default=None, ge=1, description="GPUs connected without oversubscription (pod size)"
    )
    in_network_reduction: bool = Field(
        default=False, description="switch-side reduction (e.g. InfiniBand SHARP)"
    )


class TwoTierTopology(Spec):
    """Scale-up domains of ``scale_up.domain_size`` GPUs joined by a scale-out fat-tree."""

    kind: Literal["two_tier"] = "two_tier"
    name: str
    aliases: tuple[str, ...] = ()
    description: str = ""
    scale_up: ScaleUpSpec
    scale_out: ScaleOutSpec
    sources: dict[str, str] = Field(default_factory=dict)


class FullFlatTopology(CollectiveEfficiency):
    """One optical tier: every GPU has the same bandwidth and latency to every other GPU."""

    kind: Literal["fullflat"] = "fullflat"
    name: str
    aliases: tuple[str, ...] = ()
    description: str = ""
    bandwidth_GBps: float = Field(gt=0, description="per GPU, per direction, GB/s")
    latency_us: float = Field(ge=0, description="per-message latency (alpha), us")
    in_network_reduction: bool = False
    sources: dict[str, str] = Field(default_factory=dict)


TopologySpec = Annotated[TwoTierTopology | FullFlatTopology, Field(discriminator="kind")]
