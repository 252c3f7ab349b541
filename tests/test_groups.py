"""The one table of communication groups (codesign.groups): its facts are those the four
former tables stated, its size rules agree with its dims on every placement, and the ir, the
placement, the workload and the Chakra exporter read it."""

from __future__ import annotations

import itertools

import pytest
from conftest import ideal_gpu, tiny_model

from codesign import groups
from codesign.groups import GROUP_NAMES, GROUPS, Degrees, group, group_dims, stream_of
from codesign.ir import Op
from codesign.network.placement import layout_for
from codesign.specs import FullFlatTopology, ParallelismSpec, TrainingRun
from codesign.workload.training import group_sizes


def test_the_table_states_what_the_four_former_tables_stated() -> None:
    # ir.GROUP_STREAM (tp_cp, absent there, fell back to dp; no operator runs on it)
    assert {g: stream_of(g) for g in GROUP_NAMES if g != "tp_cp"} == {
        "tp": "tp", "cp": "cp", "ep": "ep", "dp": "dp", "dp_cp": "dp", "edp": "dp",
        "edp_cp": "dp", "pp": "pp", "world": "dp"}
    assert stream_of(None) == stream_of("bogus") == "dp"
    # network.placement.GROUP_DIMS
    assert dict(groups.GROUP_DIMS) == {
        "tp": ("tp",), "cp": ("cp",), "ep": ("ep",), "dp": ("ep", "dp"),
        "dp_cp": ("cp", "ep", "dp"), "edp": ("dp",), "edp_cp": ("cp", "dp"), "pp": ("pp",),
        "tp_cp": ("tp", "cp"), "world": ("tp", "cp", "ep", "dp", "pp")}
    # the Chakra exporter's group-id order
    assert GROUP_NAMES == ("tp", "cp", "ep", "tp_cp", "dp", "dp_cp", "edp", "edp_cp", "pp",
                           "world")


@pytest.mark.parametrize(("tp", "cp", "ep", "dp", "pp"), [(8, 1, 1, 16, 4), (4, 2, 4, 8, 2),
                                                          (2, 4, 8, 8, 3), (1, 1, 1, 1, 1)])
def test_size_rules_agree_with_the_dims_on_every_placement(tp: int, cp: int, ep: int, dp: int,
                                                           pp: int) -> None:
    degrees = Degrees(tp=tp, cp=cp, ep=ep, dp=dp, pp=pp, world=tp * cp * dp * pp)
    for order in itertools.permutations(("tp", "cp", "ep", "dp", "pp")):
        layout = layout_for(tp, cp, ep, dp, pp, order=order)
        for g in GROUPS:
            assert g.size(degrees) == layout.group_size(g.name), (g.name, order)


def test_workload_group_sizes_follow_the_table() -> None:
    flat = FullFlatTopology(name="f", bandwidth_GBps=100.0, latency_us=1.0)
    run = TrainingRun(model=tiny_model(), gpu=ideal_gpu(), topology=flat, num_gpus=64,
                      parallel=ParallelismSpec(tp=2, cp=2, pp=2))
    assert group_sizes(run) == {"tp": 2, "cp": 2, "ep": 1, "tp_cp": 4, "dp": 8, "dp_cp": 16,
                                "edp": 8, "edp_cp": 16, "pp": 2, "world": 64}
    # ep not dividing dp: MoE parallel folding, the expert grid etp × ep × edp tiles the
    # tp × cp × dp ranks of a stage: edp = tp·cp·dp / (ep·etp)
    d = Degrees(tp=4, cp=2, ep=4, dp=2, pp=1, world=16, etp=1)
    assert group("edp").size(d) == 4 * 2 // 4 and group("edp_cp").size(d) == 4 * 2 * 2 // 4


def test_consumers_read_the_table() -> None:
    from codesign import ir
    from codesign.network import placement
    from codesign.trace import chakra_ranks

    assert ir.GROUP_STREAM is groups.GROUP_STREAM
    assert placement.GROUP_DIMS is groups.GROUP_DIMS and placement.group_dims is group_dims
    assert chakra_ranks.GROUP_ORDER is GROUP_NAMES
    for g in GROUPS:
        assert Op(name="x", kind="comm", category="forward", layer=0, group=g.name).stream \
            == g.stream
    assert Op(name="x", kind="gemm", category="forward", layer=0).stream == "compute"
    with pytest.raises(ValueError, match="unknown communication group 'tensor'; allowed: tp, "):
        group_dims("tensor")
