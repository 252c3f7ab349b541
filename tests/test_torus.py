"""Torus scale-up domains (TPU ICI) and rail-optimized fat trees: hand-computed costs.

Every expected time below is written out from the formulas of the module docstring of
:mod:`codesign.network.torus` with the numbers of the case (ideal message efficiency unless
stated), not read back from the model.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from pydantic import ValidationError

from codesign.network import NetworkModel, layout_for
from codesign.network.torus import geometry, members, slice_shape
from codesign.specs.catalog import load_topology
from codesign.specs.parallel import ParallelismSpec
from codesign.specs.topology import ScaleOutSpec, ScaleUpSpec, TorusSpec, TwoTierTopology

ALPHA = 2e-6  # s per hop


def torus_topo(dims: tuple[int, ...], bw_gbps: float = 600.0, wrap_from: int = 4,
               eff_max: float = 1.0, half_mb: float = 0.0) -> TwoTierTopology:
    """A torus domain of ``dims`` chips, ``bw_gbps`` per chip per direction (ideal links),
    joined to other domains by a 400 Gb/s fat tree."""
    return TwoTierTopology(
        name="torus-test",
        scale_up=ScaleUpSpec(domain_size=math.prod(dims), bandwidth_GBps=bw_gbps,
                             latency_us=ALPHA * 1e6, efficiency_max=eff_max,
                             efficiency_half_size_MB=half_mb,
                             torus=TorusSpec(dims=dims, wrap_from=wrap_from)),
        scale_out=ScaleOutSpec(nic_bandwidth_Gbps=400, latency_us=4.0, efficiency_max=1.0))


def net(topo: TwoTierTopology, algorithm: str = "auto", **deg: int) -> NetworkModel:
    sizes = {"tp": 1, "cp": 1, "ep": 1, "dp": 1, "pp": 1}
    sizes.update(deg)
    return NetworkModel(topo, layout_for(**sizes), algorithm)


# --- slices and geometry -----------------------------------------------------------------------


@pytest.mark.parametrize(("n", "shape"), [
    (4, (1, 2, 2)), (8, (2, 2, 2)), (64, (4, 4, 4)), (128, (4, 4, 8)), (256, (4, 8, 8)),
    (512, (8, 8, 8)), (2048, (8, 16, 16)), (4096, (16, 16, 16)), (99999, (16, 16, 16)),
])
def test_slice_shapes_follow_the_tpu_slice_table(n: int, shape: tuple[int, ...]) -> None:
    # Google Cloud TPU v4/v5p slice shapes: 2x2x2, 4x4x4, 4x4x8, 4x8x8, 8x8x8, 8x16x16, ...
    assert sorted(slice_shape((16, 16, 16), n)) == sorted(shape)
    assert math.prod(slice_shape((16, 16, 16), min(n, 4096))) == min(n, 4096)


def test_a_count_that_is_no_product_of_doublings_stretches_the_last_dimension() -> None:
    shape = slice_shape((16, 16, 16), 3072)  # PaLM's 3,072-chip slices
    assert math.prod(shape) >= 3072 and math.prod(shape[:-1]) * (shape[-1] - 1) < 3072


def test_members_of_strided_generators() -> None:
    assert members(((4, 1), (2, 8)), 100) == [0, 1, 2, 3, 8, 9, 10, 11]
    assert members(((8, 64),), 256) == [0, 64, 128, 192]  # only those inside the slice


def test_geometry_of_a_closed_line_a_mesh_line_and_a_plane() -> None:
    shape = (8, 8, 8)
    tp = geometry(list(range(8)), shape, wrap_from=4)  # a whole x line: a closed ring
    assert (tp.extents, tp.spacing, tp.closed, tp.grid) == ((8,), (1,), (True,), True)
    part = geometry([0, 1, 2, 3], shape, wrap_from=4)  # half a line: no wrap-around
    assert (part.extents, part.closed) == ((4,), (False,))
    plane = geometry(members(((8, 8), (8, 64)), 512), shape, wrap_from=4)  # the y-z plane
    assert (plane.extents, plane.spacing, plane.closed) == ((8, 8), (1, 1), (True, True))
    even = geometry([0, 2, 4, 6], shape, wrap_from=4)  # every second chip of a closed line
    assert (even.extents, even.spacing, even.closed) == ((4,), (2,), (True,))
    short = geometry(list(range(8)), shape, wrap_from=16)  # a slice edge too short to wrap
    assert short.closed == (False,)


# --- costs -------------------------------------------------------------------------------------


def test_tp_all_reduce_on_one_closed_torus_dimension() -> None:
    # v5p-like: 600 GB/s per chip over 6 links = 100 GB/s per link per direction; a closed
    # ring of 8 runs two counter-rotating rings: 200 GB/s. AR = 2 x RS.
    m = net(torus_topo((8, 8, 8)), tp=8, dp=64)
    s = 64e6
    rs = 7 / 8 * s / 200e9 + 7 * ALPHA
    cost = m.collective("all_reduce", "tp", s)
    assert cost.time_s == pytest.approx(2 * rs, rel=1e-12)
    assert cost.tier == "scale_up"


def test_a_group_on_half_a_line_gets_one_link() -> None:
    m = net(torus_topo((8, 8, 8)), tp=4, dp=128)
    s = 64e6
    assert m.collective("reduce_scatter", "tp", s).time_s == pytest.approx(
        3 / 4 * s / 100e9 + 3 * ALPHA, rel=1e-12)


def test_dimension_ordered_and_multi_ring_on_a_plane() -> None:
    # dp = 64 ranks 8 apart: the y-z plane of an 8x8x8 slice, both dimensions closed (200 GB/s)
    s = 512e6
    ring = net(torus_topo((8, 8, 8)), "ring", tp=8, dp=64)
    per_dim = [7 / 8 * s, 7 / 8 * s / 8]  # dimension-ordered: y on S, then z on S/8
    rs_ring = sum(t / 200e9 for t in per_dim) + 14 * ALPHA
    c = ring.collective("reduce_scatter", "dp", s)
    assert (c.time_s, c.algorithm) == (pytest.approx(rs_ring, rel=1e-12), "torus_ring")
    # multi-ring: half the payload starts on each dimension; each dimension carries
    # 7/8·S/2 + 7/64·S/2 at once
    auto = net(torus_topo((8, 8, 8)), tp=8, dp=64)
    load = 7 / 8 * s / 2 + 7 / 64 * s / 2
    c = auto.collective("all_gather", "dp", s)
    assert c.algorithm == "torus_multiring"
    assert c.time_s == pytest.approx(load / 200e9 + 14 * ALPHA, rel=1e-12)
    assert c.time_s < rs_ring


def test_whole_slice_multi_ring_matches_the_aggregate_chip_bandwidth() -> None:
    # a full 16x16 closed 2D torus (v5e-like: 200 GB/s per chip, 50 per link): the multi-ring
    # drives all four links, so a large reduce-scatter takes about S / 200 GB/s
    m = net(torus_topo((16, 16), bw_gbps=200, wrap_from=16), dp=256)
    s = 1e9
    load = (15 / 16 + 15 / 256) * s / 2
    assert m.collective("reduce_scatter", "dp", s).time_s == pytest.approx(
        load / 100e9 + 30 * ALPHA, rel=1e-12)
    assert load / 100e9 == pytest.approx(s / 200e9, rel=0.01)


def test_all_to_all_and_p2p_on_the_torus() -> None:
    s = 80e6
    m = net(torus_topo((8, 8, 8)), ep=8, dp=512)  # ep innermost: a closed x ring
    assert m.collective("all_to_all", "ep", s).time_s == pytest.approx(
        s * 8 / (8 * 100e9) + 7 * ALPHA, rel=1e-12)
    line = net(torus_topo((8, 8, 8)), ep=4, dp=512)  # half a line: bisection of one link
    assert line.collective("all_to_all", "ep", s).time_s == pytest.approx(
        s * 4 / (4 * 100e9) + 3 * ALPHA, rel=1e-12)
    pp = net(torus_topo((8, 8, 8)), tp=64, pp=8)  # neighbours one z hop apart
    assert pp.collective("p2p", "pp", s).time_s == pytest.approx(s / 100e9 + ALPHA, rel=1e-12)


def test_message_size_efficiency_applies_to_the_links() -> None:
    m = net(torus_topo((8, 8, 8), eff_max=0.8, half_mb=10.0), tp=8, dp=64)
    s = 10e6  # half size: efficiency 0.4
    assert m.collective("reduce_scatter", "tp", s).time_s == pytest.approx(
        7 / 8 * s / (200e9 * 0.4) + 7 * ALPHA, rel=1e-12)


def test_groups_across_slices_see_the_torus_as_their_in_slice_bandwidth() -> None:
    # two 8x8x8 slices: a dp group of 64 per slice (y-z plane) plus one more across slices
    m = net(torus_topo((8, 8, 8)), tp=8, dp=128)
    assert m.placement("dp").ranks_per_domain == 64
    tier = m._torus_tier("dp")
    # the multi-ring moves a reduce-scatter of S in (7/8 + 7/64)/2 · S / 200 GB/s; the ring
    # over 64 ranks that does the same runs at 63/64 · S / t
    t = (7 / 8 + 7 / 64) / 2 / 200e9
    assert tier.bandwidth == pytest.approx(63 / 64 / t, rel=1e-12)
    two_level = m.collective("all_reduce", "dp", 256e6)
    assert two_level.tier == "mixed"
    in_slice = net(torus_topo((8, 8, 8)), tp=8, dp=64).collective("all_reduce", "dp", 256e6)
    assert two_level.time_s > in_slice.time_s


def test_a_torus_must_fill_its_domain() -> None:
    with pytest.raises(ValidationError, match="torus dims"):
        ScaleUpSpec(domain_size=100, bandwidth_GBps=100, latency_us=1,
                    torus=TorusSpec(dims=(4, 4, 4)))


def test_catalog_tpu_tori() -> None:
    """The torus variants of the TPU pods (the default pods keep the aggregate-bandwidth
    approximation: see their sources)."""
    assert load_topology("tpu-v4-pod").scale_up.torus is None  # type: ignore[union-attr]
    for name, dims in (("tpu-v4-torus", (16, 16, 16)), ("tpu-v5p-torus", (16, 16, 24)),
                       ("tpu-v5e-torus", (16, 16)), ("tpu-v6e-torus", (16, 16)),
                       ("torus-gb200", (16, 16, 32))):
        topo = load_topology(name)
        assert isinstance(topo, TwoTierTopology) and topo.scale_up.torus is not None
        assert topo.scale_up.torus.dims == dims


def test_tensor_parallelism_costs_more_on_a_torus_than_on_a_switch_of_equal_bandwidth() -> None:
    # the same 600 GB/s per chip behind a switch: a TP-8 ring runs at the full 600 GB/s; on
    # the torus it has one dimension's two links (200 GB/s)
    plan = ParallelismSpec(tp=8, pp=1, dp=64)
    torus_net = NetworkModel.from_parallelism(torus_topo((8, 8, 8)), plan)
    switch = TwoTierTopology(
        name="switch", scale_up=ScaleUpSpec(domain_size=512, bandwidth_GBps=600,
                                            latency_us=ALPHA * 1e6),
        scale_out=ScaleOutSpec(nic_bandwidth_Gbps=400, latency_us=4.0))
    switch_net = NetworkModel.from_parallelism(switch, plan)
    s = 256e6
    assert torus_net.collective("all_reduce", "tp", s).time_s == pytest.approx(
        2 * (7 / 8 * s / 200e9 + 7 * ALPHA), rel=1e-12)
    assert switch_net.collective("all_reduce", "tp", s).time_s == pytest.approx(
        2 * (7 / 8 * s / 600e9 + 7 * ALPHA), rel=1e-12)


# --- rail-optimized fat trees ------------------------------------------------------------------


def rail_topo(rail: bool, block: int | None = None) -> TwoTierTopology:
    return TwoTierTopology(
        name="rails",
        scale_up=ScaleUpSpec(domain_size=8, bandwidth_GBps=450, latency_us=3.0),
        scale_out=ScaleOutSpec(nic_bandwidth_Gbps=400, latency_us=6.0, switch_tiers=2,
                               hop_latency_us=0.5, oversubscription=2.0,
                               full_bisection_gpus=64, rail_optimized=rail,
                               rail_block_gpus=block))


def test_same_rail_groups_cross_one_leaf_switch_untapered() -> None:
    plan = {"tp": 8, "dp": 32}  # dp members 8 apart: all on the rail of their local rank
    rails = net(rail_topo(True), **plan)
    tier = rails._scale_out("dp", rails.placement("dp"))
    assert tier.alpha == pytest.approx(6e-6 + 0.5e-6 * 1)
    assert tier.bandwidth == pytest.approx(50e9)  # no taper although the span is 256 > 64
    assert rails._scale_out("dp", rails.placement("dp"), "all_to_all").bandwidth \
        == pytest.approx(50e9)
    plain = net(rail_topo(False), **plan)
    # without rails the group climbs the tapered layer: an all-to-all sends 1 - 8/32 of its
    # data out of each 64-GPU pod, 2 x 0.75 = 1.5 times what the uplinks carry at full speed
    tier = plain._scale_out("dp", plain.placement("dp"), "all_to_all")
    assert tier.alpha == pytest.approx(6e-6 + 0.5e-6 * 3)
    assert tier.bandwidth == pytest.approx(50e9 / 1.5)
    # a ring has one flow per group leaving a pod: 8 members per pod > 2:1, untapered
    assert plain._scale_out("dp", plain.placement("dp")).bandwidth == pytest.approx(50e9)


def test_cross_rail_groups_and_groups_beyond_a_rail_block_use_the_spine() -> None:
    cross = net(rail_topo(True), tp=4, dp=64)  # dp stride 4: local ranks 0 and 4 alternate
    tier = cross._scale_out("dp", cross.placement("dp"))
    assert tier.alpha == pytest.approx(6e-6 + 0.5e-6 * 3)
    beyond = net(rail_topo(True, block=128), tp=8, dp=32)  # span 249 > 128 GPUs
    tier = beyond._scale_out("dp", beyond.placement("dp"))
    assert tier.alpha == pytest.approx(6e-6 + 0.5e-6 * 3)


def test_torus_study_smoke_ranks_the_networks(tmp_path: Path) -> None:
    """The torus-vs-twotier-vs-fullflat study at smoke size: at equal per-GPU bandwidth the
    torus, whose TP and EP groups each get a few links, trails the NVL72 two-tier network,
    which trails (or ties) FullFlat."""
    from codesign.experiments.runner import run_experiment
    from codesign.experiments.spec import load_experiment
    from codesign.experiments.store import load_results

    spec = load_experiment("torus-vs-twotier-vs-fullflat")
    run_experiment(spec, tmp_path, jobs=1, smoke=True, progress=False, plots=False)
    mfu = load_results(tmp_path).set_index("topology")["mfu"]
    assert mfu["torus-gb200"] < mfu["gb200-nvl72"] <= mfu["fullflat-gb200"] * 1.001
