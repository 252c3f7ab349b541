"""MoE parallel folding (Liu et al. 2025, arXiv 2504.14960; Megatron-Core parallel_state): the
expert grid expert-TP × EP × expert-DP tiles the TP×CP×DP ranks of a pipeline stage, so EP may
exceed DP."""

from __future__ import annotations

import pytest

from codesign.api import build_models, build_run, simulate
from codesign.network.model import NetworkModel
from codesign.network.placement import place_strided
from codesign.workload.dims import plan_problems


def _run(**plan: object):  # type: ignore[no-untyped-def]
    base = dict(model="qwen3-30b-a3b", gpu="h100", num_gpus=32, pp=2, etp=1,
                global_batch_size=256, micro_batch_size=1, sequence_parallel=True)
    return build_run(**{**base, **plan})


def test_ep_larger_than_dp_is_valid_when_the_expert_grid_tiles_the_stage() -> None:
    assert plan_problems(_run(tp=2, ep=16)) == []  # dp 8; ep·etp 16 divides tp·dp 16
    problems = plan_problems(_run(tp=2, ep=32))  # 32 does not divide 16
    assert any("MoE parallel folding" in p for p in problems)


def test_strided_placement_closed_form() -> None:
    # 16 consecutive ranks on 8-GPU domains: 8 per domain, 2 domains, span 16
    p = place_strided(16, 1, 8)
    assert (p.size, p.ranks_per_domain, p.num_domains, p.span, p.aligned) == (16, 8, 2, 16, True)
    # 4 ranks 8 apart: one per domain
    q = place_strided(4, 8, 8)
    assert (q.ranks_per_domain, q.num_domains, q.span) == (1, 4, 25)


def test_folded_groups_and_dispatch_cost() -> None:
    folded = _run(tp=2, ep=16)
    _, _, net = build_models(folded)
    assert net.folded
    assert net.group_size("ep") == 16
    assert net.group_size("edp") == 1  # tp·cp·dp / (ep·etp) = 16 / 16
    assert net.group_size("tp") == 2 and net.group_size("dp") == 8  # dense groups unchanged
    # the same 16 consecutive ranks form the EP group of an unfolded tp=1, dp=16, ep=16 plan:
    # the dispatch all-to-all costs the same
    plain = _run(tp=1, ep=16)
    plain_net = NetworkModel.from_parallelism(plain.topology, plain.parallel, dp=plain.dp)
    assert not plain_net.folded
    for size in (1e6, 64e6):
        assert net.collective("all_to_all", "ep", size).time_s == pytest.approx(
            plain_net.collective("all_to_all", "ep", size).time_s, rel=1e-12)


def test_folded_plan_simulates_and_holds_1_over_ep_of_the_experts() -> None:
    r = simulate(_run(tp=2, ep=16))
    assert r.feasible, r.reason
    g16, _, _ = build_models(_run(tp=2, ep=16))
    g8, _, _ = build_models(_run(tp=2, ep=8))
    # expert weights per GPU halve from ep 8 to ep 16 (etp 1: whole experts per rank)
    w16 = sum(e for c in g16.stage_chunks(0) for _, _, e in c.layer_params)
    w8 = sum(e for c in g8.stage_chunks(0) for _, _, e in c.layer_params)
    assert w16 == pytest.approx(w8 / 2, rel=1e-9)


def test_consumers_that_walk_the_layout_refuse_folding() -> None:
    from codesign.api import simulate_expanded
    from codesign.errors import SpecError

    with pytest.raises(SpecError, match="folding"):
        simulate_expanded(_run(tp=2, ep=16))
