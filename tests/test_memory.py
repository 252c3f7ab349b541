"""Memory per GPU against Korthikanti et al. 2022 (activations) and mixed-precision Adam."""

from __future__ import annotations

import pytest

from codesign.api import build_run, simulate_run
from codesign.workload import params as P
from codesign.workload.memory import memory_per_gpu, stage_memory
from codesign.workload.training import build_training_graph

s, h, a, t = 2048, 12288, 96, 8


def _graph(**plan: object):  # type: ignore[no-untyped-def]
    base = dict(model="gpt3-175b", gpu="a100", num_gpus=64, tp=t, pp=8,
                global_batch_size=64, micro_batch_size=1, flash_attention=False)
    base.update(plan)
    return build_training_graph(build_run(**base))


def _per_layer(graph) -> float:  # type: ignore[no-untyped-def]
    middle = graph.chunks[1]  # no embedding, no LM head
    return middle.saved_bytes / len(middle.layers)


@pytest.mark.parametrize(("plan", "formula"), [
    ({}, s * h * (10 + 24 / t + 5 * a * s / (h * t))),
    ({"sequence_parallel": True}, s * h / t * (34 + 5 * a * s / h)),
    ({"sequence_parallel": True, "recompute": "selective"}, s * h / t * 34),
    ({"recompute": "selective"}, s * h * (10 + 24 / t)),
    ({"recompute": "full"}, 2 * s * h),
    ({"recompute": "full", "sequence_parallel": True}, 2 * s * h / t),
])
def test_activations_per_layer_match_korthikanti(plan: dict, formula: float) -> None:
    assert _per_layer(_graph(**plan)) == pytest.approx(formula, rel=1e-9)


def test_flash_attention_drops_the_score_matrix() -> None:
    flash = _per_layer(_graph(flash_attention=True))
    lse = a / t * s * 4  # fp32 log-sum-exp per head and query
    assert flash == pytest.approx(s * h * (10 + 24 / t) + lse, rel=1e-9)


def test_1f1b_first_stage_holds_pp_micro_batches() -> None:
    g = _graph(sequence_parallel=True, recompute="selective")
    m0 = stage_memory(g, 0, dense_n=1, expert_n=1)
    assert m0.activations == pytest.approx(8 * g.chunks[0].saved_bytes, rel=1e-12)
    m7 = stage_memory(g, 7, dense_n=1, expert_n=1)
    assert m7.activations == pytest.approx(g.chunks[7].saved_bytes, rel=1e-12)


def test_weights_gradients_optimizer_with_distributed_optimizer() -> None:
    run = build_run(model="gpt3-175b", gpu="h100", num_gpus=512, tp=8, pp=8,
                    global_batch_size=512, zero_stage=1)
    g = build_training_graph(run)
    m = run.model
    layer = P.attention_params_per_layer(m) + P.dense_mlp_params(m) + 2 * P.norm_params(m)
    stage0 = (12 * layer + P.embedding_params(m)) / 8  # 96 layers / 8 stages, embedding /tp
    mem = stage_memory(g, 0, dense_n=8, expert_n=8)
    assert mem.weights == pytest.approx(2 * stage0, rel=1e-9)
    assert mem.gradients == pytest.approx(4 * stage0, rel=1e-9)
    assert mem.optimizer == pytest.approx(12 * stage0 / 8, rel=1e-9)
    z3 = stage_memory(build_training_graph(run.model_copy(update={
        "parallel": run.parallel.model_copy(update={"zero_stage": 3})})), 0, 8, 8)
    assert z3.gradients == pytest.approx(4 * stage0 / 8, rel=1e-9)
    assert z3.weights == pytest.approx(2 * stage0 / 8 + 2 * 2 * layer / 8, rel=1e-9)


def test_plan_that_does_not_fit_is_infeasible_with_reason() -> None:
    r = simulate_run(build_run(model="gpt3-175b", gpu="h100", num_gpus=8, tp=8,
                               global_batch_size=8))
    assert not r.feasible
    assert "out of memory" in r.reason and "GiB" in r.reason
    assert r.memory_gib["total"] > 74


def test_most_loaded_stage_is_reported() -> None:
    g = _graph(sequence_parallel=True, recompute="selective")
    worst = memory_per_gpu(g, 1, 1)
    assert all(stage_memory(g, st, 1, 1).total <= worst.total for st in range(8))


def test_device_memory_is_the_reported_total() -> None:
    from codesign.specs.catalog import load_gpu

    h100 = load_gpu("h100")
    assert h100.memory_bytes == 81559 * 2**20  # "80 GB" HBM3 exposes ~79.6 GiB, not 74.5
    assert h100.hbm_capacity_GB == 80  # the datasheet figure stays as published
    r = simulate_run(build_run(model="gpt3-175b", gpu="h100", num_gpus=8, tp=8,
                               global_batch_size=8))
    assert r.memory_capacity_gib == pytest.approx(81559 / 1024)
    assert load_gpu("mi300x").memory_bytes == load_gpu("mi300x").hbm_capacity_GB * 1e9
