"""Network cost model: placement, alpha-beta formulas, tier/algorithm selection."""

from __future__ import annotations

import itertools
import math
import random
import time

import pytest

from codesign.network import (
    GROUP_DIMS,
    CommCost,
    Layout,
    NetworkModel,
    all_to_all,
    group_dims,
    hierarchical,
    in_network_all_gather,
    in_network_all_reduce,
    in_network_reduce_scatter,
    layout_for,
    p2p,
    place_group,
    ring_all_gather,
    ring_all_reduce,
    ring_broadcast,
    ring_reduce_scatter,
    tree_all_reduce,
)
from codesign.network.collectives import flat_collective
from codesign.specs.parallel import ParallelismSpec
from codesign.specs.topology import FullFlatTopology, ScaleOutSpec, ScaleUpSpec, TwoTierTopology

GBYTE = 1e9
UP_BW = 450e9  # bytes/s
UP_A = 3e-6  # s
NIC_BW = 400e9 / 8  # 50e9 bytes/s
OUT_A = 6e-6 + 0.5e-6 * 3  # latency + hop_latency × (2·2 - 1)
KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "p2p")


def two_tier(
    domain: int = 8,
    up_bw: float = 450.0,
    nic_gbps: float = 400.0,
    nvls: bool = False,
    sharp: bool = False,
    oversub: float = 1.0,
    bisection: int | None = None,
    eff_max: float = 1.0,
    half_mb: float = 0.0,
) -> TwoTierTopology:
    """An inline two-tier topology; ideal efficiency unless told otherwise."""
    return TwoTierTopology(
        name="test",
        scale_up=ScaleUpSpec(
            domain_size=domain,
            bandwidth_GBps=up_bw,
            latency_us=3.0,
            in_network_reduction=nvls,
            efficiency_max=eff_max,
            efficiency_half_size_MB=half_mb,
        ),
        scale_out=ScaleOutSpec(
            nic_bandwidth_Gbps=nic_gbps,
            latency_us=6.0,
            switch_tiers=2,
            hop_latency_us=0.5,
            oversubscription=oversub,
            full_bisection_gpus=bisection,
            in_network_reduction=sharp,
            efficiency_max=eff_max,
            efficiency_half_size_MB=half_mb,
        ),
    )


def fullflat(bw: float = 800.0, lat_us: float = 2.0, sharp: bool = False) -> FullFlatTopology:
    return FullFlatTopology(
        name="ff",
        bandwidth_GBps=bw,
        latency_us=lat_us,
        in_network_reduction=sharp,
        efficiency_max=1.0,
        efficiency_half_size_MB=0.0,
    )


def model(topo: TwoTierTopology | FullFlatTopology, algorithm: str = "auto", **deg: int):
    sizes = {"tp": 1, "cp": 1, "ep": 1, "dp": 1, "pp": 1}
    order = deg.pop("order", None)
    sizes.update(deg)
    kwargs = {"order": order} if order else {}
    return NetworkModel(topo, layout_for(**sizes, **kwargs), algorithm)


# --- placement -------------------------------------------------------------------------------


def brute_force(layout: Layout, group: str, domain: int) -> tuple[int, int]:
    """(members of rank 0's group below `domain`, span) by enumeration."""
    dims = group_dims(group)
    ranges = [range(layout.size(d)) for d in dims]
    ids = [
        sum(i * layout.stride(d) for i, d in zip(idx, dims, strict=True))
        for idx in itertools.product(*ranges)
    ]
    return sum(1 for r in ids if r < domain), max(ids) - min(ids) + 1


def domain_splits(layout: Layout, group: str, domain: int) -> set[tuple[int, ...]]:
    """The distinct sorted per-domain member counts over every group of kind `group`."""
    dims = set(group_dims(group))
    counts: dict[tuple[int, ...], dict[int, int]] = {}
    for r in range(layout.world):
        key, rest = [], r
        for d, n in layout.sizes:
            if d not in dims:
                key.append(rest % n)
            rest //= n
        per = counts.setdefault(tuple(key), {})
        per[r // domain] = per.get(r // domain, 0) + 1
    return {tuple(sorted(c.values())) for c in counts.values()}


def test_layout_strides_and_world():
    lay = layout_for(tp=8, cp=2, ep=4, dp=8, pp=4)
    assert lay.size("ep") == 4 and lay.size("dp") == 2
    assert [lay.stride(d) for d in ("tp", "cp", "ep", "dp", "pp")] == [1, 8, 16, 64, 128]
    assert lay.world == 8 * 2 * 8 * 4
    assert lay.group_size("dp") == 8 and lay.group_size("edp") == 2
    assert lay.group_size("dp_cp") == 16 and lay.group_size("world") == lay.world
    hash(lay)  # frozen and hashable


def test_layout_for_rejects_ep_not_dividing_dp():
    with pytest.raises(ValueError, match="ep"):
        layout_for(tp=1, cp=1, ep=3, dp=8, pp=1)


def test_tp8_on_8gpu_domains():
    lay = layout_for(tp=8, cp=1, ep=1, dp=16, pp=1)
    tp = place_group(lay, "tp", 8)
    assert (tp.size, tp.ranks_per_domain, tp.num_domains, tp.span) == (8, 8, 1, 8)
    assert not tp.crosses_domains
    dp = place_group(lay, "dp", 8)
    assert (dp.size, dp.ranks_per_domain, dp.num_domains, dp.span) == (16, 1, 16, 121)
    assert dp.crosses_domains and dp.aligned


def test_tp4_cp2_share_a_domain():
    lay = layout_for(tp=4, cp=2, ep=1, dp=4, pp=1)
    cp = place_group(lay, "cp", 8)
    assert (cp.size, cp.ranks_per_domain, cp.num_domains, cp.span) == (2, 2, 1, 5)
    tp_cp = place_group(lay, "tp_cp", 8)
    assert (tp_cp.size, tp_cp.ranks_per_domain, tp_cp.num_domains) == (8, 8, 1)
    dp_cp = place_group(lay, "dp_cp", 8)
    assert (dp_cp.size, dp_cp.ranks_per_domain, dp_cp.num_domains) == (8, 2, 4)


def test_nvl72_dp_members_per_domain():
    lay = layout_for(tp=8, cp=1, ep=1, dp=18, pp=2)
    dp = place_group(lay, "dp", 72)
    assert (dp.size, dp.ranks_per_domain, dp.num_domains) == (18, 9, 2)
    assert dp.aligned  # 72 = 8 × 9 never splits a group unevenly with dp = 18
    lay16 = layout_for(tp=8, cp=1, ep=1, dp=16, pp=4)
    dp16 = place_group(lay16, "dp", 72)
    assert (dp16.ranks_per_domain, dp16.num_domains) == (9, 2)
    assert not dp16.aligned  # later groups split 2 + 9 + 5 over domains


def test_fullflat_is_one_domain():
    lay = layout_for(tp=8, cp=1, ep=1, dp=64, pp=8)
    for g in GROUP_DIMS:
        p = place_group(lay, g, lay.world)
        assert p.ranks_per_domain == p.size and p.num_domains == 1 and not p.crosses_domains


def test_placement_matches_enumeration():
    rng = random.Random(0)
    dims = ("tp", "cp", "ep", "dp", "pp")
    for _ in range(400):
        tp, cp, pp = rng.choice([1, 2, 4, 8]), rng.choice([1, 2, 3]), rng.choice([1, 2, 4])
        ep = rng.choice([1, 2, 4])
        dp = ep * rng.choice([1, 2, 3, 5])
        order = tuple(rng.sample(dims, 5))
        lay = layout_for(tp, cp, ep, dp, pp, order)
        domain = rng.choice([1, 2, 4, 8, 16, 36, 72, 5])
        for g in GROUP_DIMS:
            p = place_group(lay, g, domain)
            below, span = brute_force(lay, g, domain)
            assert p.ranks_per_domain == max(1, below), (lay, g, domain)
            assert p.span == span
            assert p.size == lay.group_size(g)
            assert p.num_domains == -(-p.size // p.ranks_per_domain)
            if p.aligned:
                assert len(domain_splits(lay, g, domain)) == 1, (lay, g, domain)


def test_placement_is_closed_form_for_huge_groups():
    lay = layout_for(tp=8, cp=1, ep=1, dp=2**20, pp=16)
    t0 = time.perf_counter()
    p = place_group(lay, "dp", 72)
    assert time.perf_counter() - t0 < 0.01
    assert p.ranks_per_domain == 9 and p.size == 2**20


def test_invalid_group_name_lists_allowed():
    with pytest.raises(ValueError, match="allowed: tp, cp, ep, tp_cp, dp, dp_cp, edp"):
        group_dims("tensor")
    m = model(two_tier(), tp=8)
    with pytest.raises(ValueError, match="allowed"):
        m.collective("all_reduce", "bogus", 1e6)
    with pytest.raises(ValueError, match="allowed"):
        m.group_size("bogus")


# --- formulas --------------------------------------------------------------------------------


def test_flat_formulas():
    s, n, bw, a = 1e9, 8, 450e9, 3e-6
    assert ring_all_reduce(s, n, bw, a) == pytest.approx(2 * 7 / 8 * s / bw + 14 * a)
    assert ring_all_gather(s, n, bw, a) == pytest.approx(7 / 8 * s / bw + 7 * a)
    assert ring_reduce_scatter(s, n, bw, a) == pytest.approx(7 / 8 * s / bw + 7 * a)
    assert ring_broadcast(s, n, bw, a) == pytest.approx(s / bw + 7 * a)
    assert tree_all_reduce(s, n, bw, a) == pytest.approx(2 * 7 / 8 * s / bw + 2 * 3 * a)
    assert tree_all_reduce(s, 9, bw, a) == pytest.approx(2 * 8 / 9 * s / bw + 2 * 4 * a)
    assert in_network_all_reduce(s, n, bw, a) == pytest.approx(s / bw + 2 * a)
    assert in_network_all_gather(s, n, bw, a) == pytest.approx(7 / 8 * s / bw + 2 * a)
    assert in_network_reduce_scatter(s, n, bw, a) == pytest.approx(7 / 8 * s / bw + 2 * a)
    assert p2p(s, bw, a) == pytest.approx(s / bw + a)
    assert math.isinf(flat_collective("all_gather", "tree", s, n, bw, a))
    assert math.isinf(flat_collective("broadcast", "in_network", s, n, bw, a))
    for fn in (ring_all_reduce, tree_all_reduce, in_network_all_reduce, ring_all_gather):
        assert fn(s, 1, bw, a) == 0.0 and fn(0.0, 8, bw, a) == 0.0


def test_all_to_all_formula():
    s = 1e9
    t = all_to_all(s, 16, 8, UP_BW, UP_A, NIC_BW, OUT_A)
    assert t == pytest.approx(max(7 / 16 * s / UP_BW, 8 / 16 * s / NIC_BW) + UP_A + OUT_A)
    assert all_to_all(s, 8, 8, UP_BW, UP_A, NIC_BW, OUT_A) == pytest.approx(
        7 / 8 * s / UP_BW + UP_A
    )
    assert all_to_all(s, 4, 1, UP_BW, UP_A, NIC_BW, OUT_A) == pytest.approx(
        3 / 4 * s / NIC_BW + OUT_A
    )


def test_hierarchical_formulas():
    s, k, m = 1e9, 8, 4
    ar = hierarchical("all_reduce", s, k, m, UP_BW, UP_A, NIC_BW, OUT_A)
    exp = 2 * (7 / 8 * s / UP_BW + 7 * UP_A) + 2 * 3 / 4 * (s / 8) / NIC_BW + 6 * OUT_A
    assert ar == pytest.approx(exp)
    ag = hierarchical("all_gather", s, k, m, UP_BW, UP_A, NIC_BW, OUT_A)
    exp_ag = 3 / 4 * (s / 8) / NIC_BW + 3 * OUT_A + 7 / 8 * s / UP_BW + 7 * UP_A
    assert ag == pytest.approx(exp_ag)
    rs = hierarchical("reduce_scatter", s, k, m, UP_BW, UP_A, NIC_BW, OUT_A)
    assert rs == pytest.approx(exp_ag)
    # bytes crossing scale-out per rank are (m-1)·S/n: as little as a flat ring's share / k
    assert 3 / 4 * (s / 8) == pytest.approx((m - 1) * s / (k * m))


# --- model: tiers and algorithms -------------------------------------------------------------


def test_tp8_all_reduce_on_nvlink():
    m = model(two_tier(), tp=8, dp=4)
    c = m.collective("all_reduce", "tp", GBYTE)
    assert c.time_s == pytest.approx(2 * 7 / 8 * GBYTE / 450e9 + 14 * 3e-6)
    assert (c.algorithm, c.tier) == ("ring", "scale_up")
    assert m.group_size("tp") == 8


def test_in_domain_other_kinds():
    m = model(two_tier(), tp=8, dp=4)
    s = GBYTE
    assert m.collective("all_gather", "tp", s).time_s == pytest.approx(7 / 8 * s / UP_BW + 7 * UP_A)
    assert m.collective("reduce_scatter", "tp", s).time_s == pytest.approx(
        7 / 8 * s / UP_BW + 7 * UP_A
    )
    assert m.collective("broadcast", "tp", s).time_s == pytest.approx(s / UP_BW + 7 * UP_A)
    a2a = m.collective("all_to_all", "tp", s)
    assert a2a.time_s == pytest.approx(7 / 8 * s / UP_BW + UP_A)
    assert (a2a.algorithm, a2a.tier) == ("direct", "scale_up")
    # tree is a chain inside an NVLink domain: explicit tree falls back to ring
    assert model(two_tier(), "tree", tp=8).collective("all_reduce", "tp", s).algorithm == "ring"


def test_hierarchical_all_reduce_four_nodes_of_eight():
    m = model(two_tier(), dp=32)  # tp=1: the dp group has 8 ranks per node, 4 nodes
    p = m.placement("dp")
    assert (p.ranks_per_domain, p.num_domains) == (8, 4)
    s = GBYTE
    c = m.collective("all_reduce", "dp", s)
    intra = 2 * (7 / 8 * s / UP_BW + 7 * UP_A)
    inter_tree = 2 * 3 / 4 * (s / 8) / NIC_BW + 2 * 2 * OUT_A  # tree beats ring (4α < 6α)
    assert c.time_s == pytest.approx(intra + inter_tree)
    assert (c.algorithm, c.tier) == ("hierarchical", "mixed")
    assert model(two_tier(), "hierarchical", dp=32).collective(
        "all_reduce", "dp", s
    ).time_s == pytest.approx(intra + inter_tree)
    ring = model(two_tier(), "ring", dp=32).collective("all_reduce", "dp", s)
    assert ring.time_s == pytest.approx(2 * 31 / 32 * s / NIC_BW + 62 * OUT_A)
    assert (ring.algorithm, ring.tier) == ("ring", "scale_out")
    assert ring.time_s > c.time_s


def test_hierarchical_all_gather_and_reduce_scatter():
    m = model(two_tier(), dp=32)
    s = GBYTE
    exp = 3 / 4 * (s / 8) / NIC_BW + 3 * OUT_A + 7 / 8 * s / UP_BW + 7 * UP_A
    for kind in ("all_gather", "reduce_scatter"):
        c = m.collective(kind, "dp", s)
        assert c.time_s == pytest.approx(exp)
        assert (c.algorithm, c.tier) == ("hierarchical", "mixed")


def test_one_rank_per_domain_uses_flat_scale_out():
    m = model(two_tier(), tp=8, dp=4)
    s = GBYTE
    c = m.collective("all_reduce", "dp", s)
    assert c.time_s == pytest.approx(2 * 3 / 4 * s / NIC_BW + 2 * 2 * OUT_A)
    assert (c.algorithm, c.tier) == ("tree", "scale_out")
    ag = m.collective("all_gather", "dp", s)
    assert ag.time_s == pytest.approx(3 / 4 * s / NIC_BW + 3 * OUT_A)
    assert (ag.algorithm, ag.tier) == ("ring", "scale_out")
    bc = m.collective("broadcast", "dp", s)
    assert bc.time_s == pytest.approx(s / NIC_BW + 3 * OUT_A)


def test_all_to_all_across_domains():
    s = GBYTE
    m = model(two_tier(), ep=16, dp=16)  # ep group: 16 ranks, 8 per node
    c = m.collective("all_to_all", "ep", s)
    assert c.time_s == pytest.approx(max(7 / 16 * s / UP_BW, 8 / 16 * s / NIC_BW) + UP_A + OUT_A)
    assert (c.algorithm, c.tier) == ("direct", "mixed")
    m1 = model(two_tier(), tp=8, ep=4, dp=4)  # ep stride 8: one rank per node
    c1 = m1.collective("all_to_all", "ep", s)
    assert c1.time_s == pytest.approx(3 / 4 * s / NIC_BW + OUT_A)
    assert c1.tier == "scale_out"


def test_p2p_intra_vs_inter_node():
    s = 64e6
    intra = model(two_tier(), tp=4, pp=2, order=("pp", "tp", "cp", "ep", "dp"))
    c = intra.collective("p2p", "pp", s)
    assert c.time_s == pytest.approx(s / UP_BW + UP_A)
    assert (c.algorithm, c.tier) == ("direct", "scale_up")
    inter = model(two_tier(), tp=8, pp=2)
    c2 = inter.collective("p2p", "pp", s)
    assert c2.time_s == pytest.approx(s / NIC_BW + OUT_A)
    assert c2.tier == "scale_out"
    # a 16-stage chain on 8-GPU nodes crosses a node boundary: the slowest hop sets the pace
    long = model(two_tier(), pp=16, order=("pp", "tp", "cp", "ep", "dp"))
    assert long.collective("p2p", "pp", s).tier == "scale_out"


def test_oversubscription_beyond_full_bisection():
    s = GBYTE
    kw = {"tp": 8, "dp": 4}  # dp span = 25 ranks, 2 members per 16-rank pod
    base = model(two_tier(), "ring", **kw).collective("all_reduce", "dp", s).time_s
    lat = 6 * OUT_A
    # one ring edge per group leaves a pod: 8 groups share 16·B/o, B·2/o each; at 4:1 the
    # ring runs at half speed, at 2:1 its crossing edges still get a full NIC
    tapered = model(two_tier(oversub=4.0, bisection=16), "ring", **kw)
    t = tapered.collective("all_reduce", "dp", s).time_s
    assert t - lat == pytest.approx(2.0 * (base - lat))
    mild = model(two_tier(oversub=2.0, bisection=16), "ring", **kw)
    assert mild.collective("all_reduce", "dp", s).time_s == pytest.approx(base)
    inside = model(two_tier(oversub=2.0, bisection=32), "ring", **kw)
    assert inside.collective("all_reduce", "dp", s).time_s == pytest.approx(base)
    no_pod = model(two_tier(oversub=2.0, bisection=None), "ring", **kw)
    assert no_pod.collective("all_reduce", "dp", s).time_s == pytest.approx(base)


def test_auto_picks_the_minimum():
    topos = [two_tier(), two_tier(nvls=True, sharp=True), two_tier(eff_max=0.8, half_mb=4.0)]
    layouts = [{"tp": 8, "dp": 8}, {"dp": 32}, {"tp": 4, "cp": 2, "dp": 8}, {"tp": 2, "dp": 64}]
    for topo, deg in itertools.product(topos, layouts):
        auto = model(topo, **deg)
        explicit = [model(topo, alg, **deg) for alg in ("ring", "tree", "hierarchical")]
        explicit.append(model(topo, "in_network", **deg))
        for kind in ("all_reduce", "all_gather", "reduce_scatter"):
            for group in ("tp", "dp", "dp_cp", "world"):
                for s in (1e3, 1e6, 1e9):
                    t = auto.collective(kind, group, s).time_s
                    assert t == pytest.approx(
                        min(e.collective(kind, group, s).time_s for e in explicit)
                    )


def test_in_network_beats_ring_for_large_groups():
    s = 256e6
    m = model(two_tier(sharp=True), tp=8, dp=64)
    c = m.collective("all_reduce", "dp", s)
    assert (c.algorithm, c.tier) == ("in_network", "scale_out")
    assert c.time_s == pytest.approx(s / NIC_BW + 2 * OUT_A)
    ring = model(two_tier(sharp=True), "ring", tp=8, dp=64).collective("all_reduce", "dp", s)
    assert c.time_s < ring.time_s
    nvls = model(two_tier(nvls=True), tp=8).collective("all_reduce", "tp", s)
    assert (nvls.algorithm, nvls.tier) == ("in_network", "scale_up")
    assert nvls.time_s == pytest.approx(s / UP_BW + 2 * UP_A)
    # explicitly asking for in_network without switch support falls back to ring
    fb = model(two_tier(), "in_network", tp=8).collective("all_reduce", "tp", s)
    assert fb.algorithm == "ring"


def test_in_network_hierarchical_collnet():
    s = GBYTE
    m = model(two_tier(sharp=True), "in_network", dp=32)
    c = m.collective("all_reduce", "dp", s)
    exp = 2 * (7 / 8 * s / UP_BW + 7 * UP_A) + (s / 8) / NIC_BW + 2 * OUT_A
    assert c.time_s == pytest.approx(exp)
    assert (c.algorithm, c.tier) == ("hierarchical", "mixed")


def test_fullflat_single_tier():
    s = GBYTE
    bw, a = 800e9, 2e-6
    m = model(fullflat(), tp=8, dp=64)
    c = m.collective("all_reduce", "dp", s)
    assert c.time_s == pytest.approx(2 * 63 / 64 * s / bw + 2 * 6 * a)
    assert (c.algorithm, c.tier) == ("tree", "fullflat")
    assert m.collective("p2p", "dp", s).time_s == pytest.approx(s / bw + a)
    a2a = m.collective("all_to_all", "world", s)
    assert a2a.time_s == pytest.approx(511 / 512 * s / bw + a)
    assert a2a.tier == "fullflat"
    assert m.placement("world").num_domains == 1
    sharp = model(fullflat(sharp=True), tp=8, dp=64).collective("all_reduce", "dp", s)
    assert sharp.algorithm == "in_network"


def test_nvl72_hierarchical_uses_nine_per_domain():
    s = GBYTE
    m = model(two_tier(domain=72, up_bw=900.0), "hierarchical", tp=8, dp=18)
    c = m.collective("all_reduce", "dp", s)
    up = 900e9
    intra = 2 * (8 / 9 * s / up + 8 * UP_A)
    inter = min(ring_all_reduce(s / 9, 2, NIC_BW, OUT_A), tree_all_reduce(s / 9, 2, NIC_BW, OUT_A))
    assert c.time_s == pytest.approx(intra + inter)
    assert m.collective("all_reduce", "tp", s).tier == "scale_up"


def test_trivial_groups_and_sizes_cost_nothing():
    m = model(two_tier(), tp=8, dp=4)
    for kind in KINDS:
        c = m.collective(kind, "cp", GBYTE)  # cp = 1
        assert c == CommCost(0.0, "none", "local")
        assert m.collective(kind, "dp", 0.0).time_s == 0.0


def test_invalid_kind_and_algorithm():
    m = model(two_tier(), tp=8)
    with pytest.raises(ValueError, match="all_reduce"):
        m.collective("allreduce", "tp", 1e6)
    with pytest.raises(ValueError, match="auto"):
        model(two_tier(), "butterfly", tp=8)
    with pytest.raises(ValueError):
        m.collective("all_reduce", "tp", -1.0)


def test_message_size_efficiency():
    s = 4e6  # equal to the half size: half of efficiency_max
    m = model(two_tier(eff_max=0.8, half_mb=4.0), tp=8)
    c = m.collective("all_reduce", "tp", s)
    assert c.time_s == pytest.approx(2 * 7 / 8 * s / (UP_BW * 0.4) + 14 * UP_A)


# --- monotonicity ----------------------------------------------------------------------------

MONO_LAYOUTS = [{"tp": 8, "dp": 8}, {"dp": 32}, {"tp": 4, "cp": 2, "ep": 4, "dp": 8, "pp": 2}]
MONO_GROUPS = ("tp", "cp", "ep", "dp", "dp_cp", "edp", "pp", "world")


@pytest.mark.parametrize("deg", MONO_LAYOUTS)
@pytest.mark.parametrize("algorithm", ["auto", "ring", "tree", "hierarchical", "in_network"])
def test_bigger_messages_are_never_faster(deg, algorithm):
    m = model(two_tier(eff_max=0.8, half_mb=4.0, nvls=True, sharp=True), algorithm, **deg)
    sizes = [0.0, 1.0, 1e3, 1e5, 1e6, 4e6, 1e7, 1e8, 1e9, 1e10]
    for kind in KINDS:
        for group in MONO_GROUPS:
            times = [m.collective(kind, group, s).time_s for s in sizes]
            assert times == sorted(times), (kind, group, times)


@pytest.mark.parametrize("deg", MONO_LAYOUTS)
def test_more_bandwidth_is_never_slower(deg):
    variants = [
        (two_tier(up_bw=450.0, nic_gbps=400.0), two_tier(up_bw=900.0, nic_gbps=400.0)),
        (two_tier(up_bw=450.0, nic_gbps=400.0), two_tier(up_bw=450.0, nic_gbps=800.0)),
        (two_tier(oversub=3.0, bisection=16), two_tier(oversub=1.0, bisection=16)),
    ]
    for slow_topo, fast_topo in variants:
        slow, fast = model(slow_topo, **deg), model(fast_topo, **deg)
        for kind, group, s in itertools.product(KINDS, MONO_GROUPS, (1e4, 1e7, 1e9)):
            assert fast.collective(kind, group, s).time_s <= slow.collective(
                kind, group, s
            ).time_s * (1 + 1e-12)


# --- integration -----------------------------------------------------------------------------


def test_from_parallelism():
    par = ParallelismSpec(tp=8, pp=4, ep=4, dp=16, collective_algorithm="ring")
    m = NetworkModel.from_parallelism(two_tier(), par)
    assert m.algorithm == "ring"
    assert m.layout.world == 8 * 4 * 16
    assert m.group_size("ep") == 4 and m.group_size("edp") == 4 and m.group_size("dp") == 16
    with pytest.raises(ValueError, match="dp"):
        NetworkModel.from_parallelism(two_tier(), ParallelismSpec(tp=8))
    assert NetworkModel.from_parallelism(two_tier(), ParallelismSpec(tp=8), dp=2).layout.world == 16


def test_many_calls_are_fast():
    m = model(two_tier(eff_max=0.8, half_mb=4.0), tp=4, cp=2, ep=8, dp=64, pp=8)
    t0 = time.perf_counter()
    for i in range(5000):
        for group in ("tp", "dp", "ep", "dp_cp"):
            m.collective("all_reduce", group, 1e6 + i)
    assert time.perf_counter() - t0 < 2.0
