"""Tapered fabrics: a group that leaves its pod gets its share of the pod's uplinks
(network/taper.py), checked against the same network with the NIC bandwidth divided by the
hand-computed slowdown, and the Llama 3 placement keeping PP inside the pod."""

from __future__ import annotations

import itertools

import pytest

from codesign.network import NetworkModel, layout_for
from codesign.network.placement import members_below
from codesign.network.taper import slowdown
from codesign.specs.topology import ScaleOutSpec, ScaleUpSpec, TwoTierTopology


def fabric(nic_gbps: float = 400.0, oversub: float = 1.0,
           pod: int | None = None) -> TwoTierTopology:
    """Ideal-efficiency two-tier network, 8-GPU domains."""
    return TwoTierTopology(
        name="t", scale_up=ScaleUpSpec(domain_size=8, bandwidth_GBps=450.0, latency_us=3.0),
        scale_out=ScaleOutSpec(nic_bandwidth_Gbps=nic_gbps, latency_us=6.0,
                               oversubscription=oversub, full_bisection_gpus=pod))


def brute_below(gens: list[tuple[int, int]], limit: int) -> int:
    return sum(1 for digits in itertools.product(*[range(n) for n, _ in gens])
               if sum(i * s for i, (_, s) in zip(digits, gens, strict=True)) < limit)


@pytest.mark.parametrize("gens,limit", [
    ([(128, 128)], 3072), ([(16, 1024)], 3072), ([(8, 1), (4, 64)], 100),
    ([(2, 1), (3, 4), (5, 24)], 77), ([(4, 2)], 0), ([(4, 2)], 10_000)])
def test_members_below_counts_the_group_of_rank_zero(gens: list[tuple[int, int]],
                                                    limit: int) -> None:
    assert members_below(gens, limit) == brute_below(gens, limit)


def test_slowdown_rules() -> None:
    # ring: one flow per group leaves the pod; P/m groups share P·B/o -> B·m/o each
    assert slowdown("all_reduce", 128, 24, 7.0) == 1.0
    assert slowdown("p2p", 16, 3, 7.0) == pytest.approx(7 / 3)
    assert slowdown("all_gather", 16, 1, 7.0) == 7.0
    # all-to-all: a rank sends 1 - m/n of its data out of the pod
    assert slowdown("all_to_all", 64, 16, 4.0) == pytest.approx(3.0)


def test_ring_across_pods_runs_at_its_crossing_edges_share() -> None:
    # dp = 64 ranks, 8 per domain, pods of 16, 1:32 above: 16 members per pod,
    # slowdown 32 / 16 = 2 -> the flat ring costs as on a NIC of half the bandwidth
    layout = layout_for(tp=1, cp=1, ep=1, dp=64, pp=1)
    tapered = NetworkModel(fabric(oversub=32.0, pod=16), layout, "ring")
    half = NetworkModel(fabric(nic_gbps=200.0), layout, "ring")
    for kind in ("all_reduce", "all_gather", "reduce_scatter"):
        assert tapered.collective(kind, "dp", 1e8).time_s == pytest.approx(
            half.collective(kind, "dp", 1e8).time_s, rel=1e-12)
    # the same ring with pods holding 1/4 of the uplink loss is not slowed at all
    mild = NetworkModel(fabric(oversub=4.0, pod=16), layout, "ring")
    full = NetworkModel(fabric(), layout, "ring")
    assert mild.collective("all_reduce", "dp", 1e8).time_s == full.collective(
        "all_reduce", "dp", 1e8).time_s


def test_all_to_all_sends_the_out_of_pod_fraction_over_the_uplinks() -> None:
    layout = layout_for(tp=1, cp=1, ep=1, dp=64, pp=1)
    tapered = NetworkModel(fabric(oversub=4.0, pod=16), layout)
    third = NetworkModel(fabric(nic_gbps=400.0 / 3.0), layout)
    assert tapered.collective("all_to_all", "dp", 1e8).time_s == pytest.approx(
        third.collective("all_to_all", "dp", 1e8).time_s, rel=1e-12)


def test_pipeline_hops_cross_pods_by_placement() -> None:
    # Llama 3 cluster shape: pods of 3072 GPUs, 1:7 above; tp 8, pp 16, dp 128
    topo = fabric(oversub=7.0, pod=3072)
    outer = layout_for(tp=8, cp=1, ep=1, dp=128, pp=16)  # pp outermost: stages 1024 apart
    inner = layout_for(tp=8, cp=1, ep=1, dp=128, pp=16, order=("tp", "cp", "ep", "pp", "dp"))
    nic = 400e9 / 8
    alpha = (6.0 + 0.5 * 3) * 1e-6  # latency + hop latency × (2 · 2 tiers - 1)
    size = 33.5e6
    # stages 1024 apart: 3 in a pod, slowdown 7/3
    assert NetworkModel(topo, outer).collective("p2p", "pp", size).time_s == pytest.approx(
        alpha + size / (nic * 3 / 7), rel=1e-12)
    # stages 8 apart: the pipeline (span 121) stays in its pod, untapered
    assert NetworkModel(topo, inner).collective("p2p", "pp", size).time_s == pytest.approx(
        alpha + size / nic, rel=1e-12)
    # DP (24 members per pod, 7 < 24) crosses pods at full NIC speed as a ring
    untapered = NetworkModel(fabric(), inner, "ring")
    assert NetworkModel(topo, inner, "ring").collective("reduce_scatter", "dp", 1e9).time_s \
        == untapered.collective("reduce_scatter", "dp", 1e9).time_s
