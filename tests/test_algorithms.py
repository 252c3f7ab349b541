"""The collective-algorithm registry: built-in algorithms priced as before (a digest over a grid
and hand-computed alpha-beta values), the plan and the CLI take their names from it, and a new
algorithm is one class: the network model prices with it, the flow model and the per-rank
engine decompose it, the spec and the CLI accept its name."""

from __future__ import annotations

import argparse
import hashlib
import importlib
import inspect
import itertools
import math
import pkgutil
from collections.abc import Iterator, Sequence

import pytest
from conftest import ideal_gpu, tiny_model
from pydantic import ValidationError

import codesign.network.algorithms as algorithms_pkg
from codesign.api import build_models
from codesign.cli.plan_flags import add_plan_flags, flag_of
from codesign.engine.expanded import Perturbations
from codesign.engine.expanded import simulate_expanded as engine_expanded
from codesign.engine.training import simulate_step
from codesign.network import NetworkModel, layout_for
from codesign.network.algorithms import (
    CollectiveAlgorithm,
    algorithm,
    decomposition,
    flat_algorithms,
    register,
    selectable_names,
    unregister,
)
from codesign.network.algorithms.base import Entity, by_domain
from codesign.network.algorithms.tree import log2_steps
from codesign.network.faults import ScaledCosts, parse_failed
from codesign.network.flows import collective_entities
from codesign.specs.parallel import (
    BUILTIN_COLLECTIVE_ALGORITHMS,
    COLLECTIVE_ALGORITHMS,
    ParallelismSpec,
)
from codesign.specs.run import TrainingRun
from codesign.specs.topology import FullFlatTopology, ScaleOutSpec, ScaleUpSpec, TwoTierTopology

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "p2p")
GROUPS = ("tp", "cp", "ep", "dp", "dp_cp", "edp", "edp_cp", "pp", "tp_cp", "world")
UP_BW, UP_A = 450e9, 3e-6  # bytes/s, s
NIC_BW, OUT_A = 400e9 / 8, 6e-6 + 0.5e-6 * 3  # latency + hop latency × (2·2 - 1)
S = 1e9


def two_tier(domain: int = 8, *, nvls: bool = False, sharp: bool = False, eff: bool = False,
             oversub: float = 1.0, bisection: int | None = None) -> TwoTierTopology:
    """Inline two-tier network; ideal efficiency unless ``eff``."""
    curve_up = {"efficiency_max": 0.8, "efficiency_half_size_MB": 0.5} if eff else {}
    curve_out = {"efficiency_max": 0.9, "efficiency_half_size_MB": 2.0} if eff else {}
    return TwoTierTopology(
        name="t", scale_up=ScaleUpSpec(domain_size=domain, bandwidth_GBps=450.0, latency_us=3.0,
                                       in_network_reduction=nvls, **curve_up),
        scale_out=ScaleOutSpec(nic_bandwidth_Gbps=400.0, latency_us=6.0,
                               in_network_reduction=sharp, oversubscription=oversub,
                               full_bisection_gpus=bisection, **curve_out))


# --- behaviour unchanged ---------------------------------------------------------------------

#: the digest of :func:`price_digest` computed with the code before the registry (commit
#: 7a5a155, formulas in network/collectives.py and the choice rules in network/model.py),
#: recomputed once when tapered fabrics were priced by each group's share of its pod's
#: uplinks (network/taper.py) instead of the full taper; the prices on the untapered networks
#: were checked bit-identical across that change
DIGEST_BEFORE = "6eb4a669641f648d1cace872abcd14f55f7bf7f9790c39083622cc08669c1cb9"


def price_digest() -> str:
    """SHA-256 over the exact price (float hex), algorithm and tier of every collective kind ×
    group × size × algorithm on four networks (NVLS/SHARP, an oversubscribed fabric, message
    efficiency curves, FullFlat) and three layouts, the faulted (scaled) cost of each, and the
    flow decomposition of every kind × costed algorithm on three member sets."""
    h = hashlib.sha256()
    flat = FullFlatTopology(name="f", bandwidth_GBps=200.0, latency_us=2.0,
                            efficiency_max=0.85, efficiency_half_size_MB=1.0)
    topos = [two_tier(8, eff=True), two_tier(8, nvls=True, sharp=True, eff=True, oversub=2.0,
                                             bisection=64),
             two_tier(72, nvls=True, sharp=True, eff=True, oversub=2.0, bisection=64), flat]
    layouts = [layout_for(tp=8, cp=1, ep=1, dp=16, pp=4),
               layout_for(tp=4, cp=2, ep=4, dp=8, pp=2, order=("pp", "dp", "ep", "cp", "tp")),
               layout_for(tp=2, cp=1, ep=1, dp=64, pp=1)]
    for topo, layout in itertools.product(topos, layouts):
        for alg in ("auto", "ring", "tree", "hierarchical", "in_network"):
            net = NetworkModel(topo, layout, alg)
            scaled = ScaledCosts(net)
            for kind, group, size in itertools.product(KINDS, GROUPS, (0.0, 4096.0, 3.3e7, S)):
                c = net.collective(kind, group, size)
                h.update(f"{c.time_s.hex()} {c.algorithm} {c.tier};".encode())
                if size == 3.3e7:
                    h.update(scaled.cost(kind, group, size, 0.5, 0.25).hex().encode())
    for kind, alg in itertools.product(KINDS, ("ring", "tree", "in_network", "hierarchical",
                                               "measured", "none")):
        for members in ([0, 1], [0, 2, 4, 6], [3, 1, 9, 11, 17, 19]):
            for e in collective_entities(kind, alg, members, 4):
                h.update(f"{e.tier}{e.flows};".encode())
    return h.hexdigest()


def test_prices_and_flows_are_bit_identical_to_before_the_registry() -> None:
    assert price_digest() == DIGEST_BEFORE


def _cost(topo: TwoTierTopology, alg: str, kind: str, group: str, size: float = S,
          **degrees: int) -> tuple[float, str, str]:
    d = {"tp": 1, "cp": 1, "ep": 1, "dp": 1, "pp": 1, **degrees}
    c = NetworkModel(topo, layout_for(**d), alg).collective(kind, group, size)
    return c.time_s, c.algorithm, c.tier


def test_hand_computed_alpha_beta_prices() -> None:
    ring_tp8 = 2 * 7 / 8 * S / UP_BW + 2 * 7 * UP_A
    assert _cost(two_tier(), "auto", "all_reduce", "tp", tp=8) == (ring_tp8, "ring", "scale_up")
    # NVLS inside the domain: S/bw + 2α, faster than the ring; asked for the ring, the ring
    nvls = S / UP_BW + 2 * UP_A
    assert _cost(two_tier(nvls=True), "auto", "all_reduce", "tp", tp=8) == (
        nvls, "in_network", "scale_up")
    assert _cost(two_tier(nvls=True), "ring", "all_reduce", "tp", tp=8)[:2] == (ring_tp8, "ring")
    # one rank per domain, 4 domains: the double binary tree's log latency beats the ring
    tree = 2 * 3 / 4 * S / NIC_BW + 2 * 2 * OUT_A
    ring = 2 * 3 / 4 * S / NIC_BW + 2 * 3 * OUT_A
    assert _cost(two_tier(), "auto", "all_reduce", "dp", tp=8, dp=4) == (tree, "tree",
                                                                          "scale_out")
    assert _cost(two_tier(), "ring", "all_reduce", "dp", tp=8, dp=4) == (ring, "ring",
                                                                          "scale_out")
    # tree does not all-gather: asked for, the ring is used
    assert _cost(two_tier(), "tree", "all_gather", "dp", tp=8, dp=4)[:2] == (
        3 / 4 * S / NIC_BW + 3 * OUT_A, "ring")
    # 8 ranks per domain, 2 domains: RS_intra(S; 8) + AR_inter(S/8; 2) + AG_intra(S; 8)
    # (summed phase by phase, in that order, as the model does: the floats are exact)
    rs = 7 / 8 * S / UP_BW + 7 * UP_A
    hier = rs + (2 * 1 / 2 * (S / 8) / NIC_BW + 2 * OUT_A) + rs
    assert _cost(two_tier(), "auto", "all_reduce", "dp", dp=16) == (hier, "hierarchical",
                                                                     "mixed")
    # all-gather: AG_inter(S/8; 2) + AG_intra(S; 8)
    ag = (1 / 2 * (S / 8) / NIC_BW + OUT_A) + (7 / 8 * S / UP_BW + 7 * UP_A)
    assert _cost(two_tier(), "hierarchical", "all_gather", "dp", dp=16)[:2] == (ag,
                                                                                 "hierarchical")
    # in_network across domains, k > 1: switch reduction on the inter-domain phase
    sharp = rs + ((S / 8) / NIC_BW + 2 * OUT_A) + rs
    assert _cost(two_tier(sharp=True), "in_network", "all_reduce", "dp", dp=16)[:2] == (
        sharp, "hierarchical")
    # pipeline send across domains; all-to-all over 16 ranks, 8 per domain
    assert _cost(two_tier(), "auto", "p2p", "pp", tp=8, pp=2) == (S / NIC_BW + OUT_A, "direct",
                                                                   "scale_out")
    a2a = max(7 / 16 * S / UP_BW, 8 / 16 * S / NIC_BW) + UP_A + OUT_A
    assert _cost(two_tier(), "auto", "all_to_all", "ep", ep=16, dp=16) == (a2a, "direct",
                                                                            "mixed")


# --- the registry, the spec and the CLI ------------------------------------------------------


def _registered_classes() -> Iterator[type[CollectiveAlgorithm]]:
    for info in pkgutil.iter_modules(algorithms_pkg.__path__):
        module = importlib.import_module(f"codesign.network.algorithms.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, CollectiveAlgorithm) and cls.__module__ == module.__name__ \
                    and cls is not CollectiveAlgorithm:
                yield cls


def test_every_module_registers_its_algorithm_and_the_plan_names_are_the_registry_s() -> None:
    classes = list(_registered_classes())
    assert {c.name for c in classes} == {"auto", "ring", "tree", "in_network", "hierarchical",
                                         "direct", "measured", "torus_ring", "torus_multiring"}
    for cls in classes:
        assert type(algorithm(cls.name)) is cls
    # the names a plan may request (the built-in ones stated at the spec layer, which may not
    # import the registry) are exactly the selectable ones
    assert sorted(BUILTIN_COLLECTIVE_ALGORITHMS) == sorted(c.name for c in classes
                                                          if c.selectable)
    assert sorted(COLLECTIVE_ALGORITHMS) == sorted(selectable_names())
    assert flag_of("collective_algorithm").kwargs["choices"] is COLLECTIVE_ALGORITHMS
    assert [a.name for a in flat_algorithms()] == ["ring", "tree", "in_network"]
    assert {n: decomposition(n) for n in ("ring", "tree", "in_network", "hierarchical", "auto",
                                          "measured", "direct", "none")} == {
        "ring": "ring", "tree": "ring", "in_network": "in_network",
        "hierarchical": "hierarchical", "auto": "ring", "measured": "ring", "direct": "direct",
        "none": "ring"}


def test_unknown_algorithm_names_the_allowed_ones() -> None:
    with pytest.raises(ValidationError, match="allowed: auto, ring, tree, hierarchical"):
        ParallelismSpec(collective_algorithm="nccl")
    with pytest.raises(ValueError, match="allowed: auto, ring"):
        NetworkModel(two_tier(), layout_for(1, 1, 1, 8, 1), "nccl")
    with pytest.raises(ValueError, match="registered: "):
        algorithm("nccl")


# --- a new algorithm is one class ------------------------------------------------------------


class HalvingDoubling(CollectiveAlgorithm):
    """Recursive halving-doubling all-reduce (Thakur et al. 2005): ring bandwidth term,
    ``2·ceil(log2 n)`` latency steps, on every tier; flows: the butterfly's pairs."""

    name = "halving_doubling"
    flat = True

    def time(self, kind: str, size: float, n: int, bw: float, alpha: float) -> float:
        if kind != "all_reduce":
            return math.inf
        if n == 1 or size == 0:
            return 0.0
        return 2 * (n - 1) / n * size / bw + 2 * log2_steps(n) * alpha

    def entities(self, kind: str, members: Sequence[int], domain_size: int) -> list[Entity]:
        ms = sorted(members)
        n = len(ms)
        flows = tuple((ms[i], ms[i ^ (1 << r)]) for r in range(log2_steps(n)) for i in range(n)
                      if i ^ (1 << r) < n)
        return [Entity("up" if len(by_domain(ms, domain_size)) == 1 else "out", flows)]


@pytest.fixture
def toy() -> Iterator[str]:
    register(HalvingDoubling)
    try:
        yield HalvingDoubling.name
    finally:
        unregister(HalvingDoubling.name)
    assert HalvingDoubling.name not in COLLECTIVE_ALGORITHMS


def _hd(size: float, n: int, bw: float, alpha: float) -> float:
    return 2 * (n - 1) / n * size / bw + 2 * log2_steps(n) * alpha


def test_a_registered_algorithm_is_accepted_by_the_spec_and_the_cli(toy: str) -> None:
    assert ParallelismSpec(collective_algorithm=toy).collective_algorithm == toy
    ap = argparse.ArgumentParser()
    add_plan_flags(ap)
    assert ap.parse_args(["--collective-algorithm", toy]).collective_algorithm == toy


def test_the_spec_refuses_it_once_unregistered() -> None:
    with pytest.raises(ValidationError, match="unknown collective algorithm"):
        ParallelismSpec(collective_algorithm=HalvingDoubling.name)


def test_the_network_model_prices_with_a_registered_algorithm(toy: str) -> None:
    topo = two_tier()
    par = ParallelismSpec(tp=8, collective_algorithm=toy)
    net = NetworkModel.from_parallelism(topo, par, dp=4)
    # requested: inside the domain (where NCCL's tree is not offered) and across domains
    c = net.collective("all_reduce", "tp", S)
    assert (c.time_s, c.algorithm, c.tier) == (_hd(S, 8, UP_BW, UP_A), toy, "scale_up")
    c = net.collective("all_reduce", "dp", S)
    assert (c.time_s, c.algorithm) == (_hd(S, 4, NIC_BW, OUT_A), toy)
    # a kind it has no formula for falls back to the ring
    assert net.collective("all_gather", "tp", S).algorithm == "ring"
    # auto considers it: 2·3 latency steps beat the ring's 2·7 inside the domain
    auto = NetworkModel(topo, layout_for(8, 1, 1, 4, 1), "auto").collective("all_reduce", "tp", S)
    assert (auto.time_s, auto.algorithm) == (_hd(S, 8, UP_BW, UP_A), toy)
    # a faulted group keeps it, with the tier's bandwidth scaled
    assert ScaledCosts(net).cost("all_reduce", "tp", S, 0.5, 1.0) == _hd(S, 8, UP_BW / 2, UP_A)


def test_the_flow_model_decomposes_a_registered_algorithm(toy: str) -> None:
    assert decomposition(toy) == toy
    (e,) = collective_entities("all_reduce", toy, [6, 0, 2, 4], 2)
    assert e.tier == "out"
    assert set(e.flows) == {(0, 2), (2, 0), (4, 6), (6, 4), (0, 4), (4, 0), (2, 6), (6, 2)}


def test_the_per_rank_engine_prices_a_failed_nic_with_a_registered_algorithm(toy: str) -> None:
    # tp = 2 in each 2-GPU domain, dp = 2 across: dp groups {0, 2} and {1, 3}; rank 0's NIC
    # down, both dp exchanges share rank 1's NIC at half its rate
    topo = TwoTierTopology(
        name="tt", scale_up=ScaleUpSpec(domain_size=2, bandwidth_GBps=400.0, latency_us=1.0),
        scale_out=ScaleOutSpec(nic_bandwidth_Gbps=100.0, latency_us=2.0))
    run = TrainingRun(model=tiny_model(), gpu=ideal_gpu(), topology=topo, num_gpus=4,
                      parallel=ParallelismSpec(tp=2, dp=2, global_batch_size=4, zero_stage=0,
                                               overlap_grad_reduce=False,
                                               collective_algorithm=toy))
    graph, compute, network = build_models(run)
    assert network.collective("all_reduce", "dp", 1e6).algorithm == toy
    sym = simulate_step(graph, compute, network, exact=True).step_time_s
    (chunk,) = graph.chunks
    sizes = [4.0 * (dense + expert) for _, dense, expert in chunk.layer_params]
    nic, alpha = 100e9 / 8, 2e-6 + 0.5e-6 * 3
    extra = sum(_hd(s, 2, nic / 2, alpha) - _hd(s, 2, nic, alpha) for s in sizes)
    failed = engine_expanded(graph, [compute], network,
                             Perturbations(link_faults=(parse_failed("nic:0"),)))
    assert ("dp", 0, "scale_out", 0.5) in failed.slowed
    assert failed.step_time_s == pytest.approx(sym + extra, rel=1e-12)
