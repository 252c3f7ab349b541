"""MoE routing beyond perfect balance (issue 12 item 4): a capacity factor (tokens beyond
capacity dropped, buffers padded to it: Switch Transformer, Fedus et al. 2022, Sec. 2.1) and a
dropless load imbalance (the busiest expert rank's share). Both scale the busiest rank's
expert GEMMs and its dispatch/combine bytes; model FLOPs never change; hardware FLOPs grow
with capacity padding only (an imbalance moves tokens, it does not add them)."""

from __future__ import annotations

import pytest

from codesign.api import build_models, build_run, simulate_run
from codesign.specs.catalog import load_model
from codesign.specs.model import ModelSpec
from codesign.validation.prose import read_capacity_factor


def _mixtral(**routing: float) -> ModelSpec:
    m = load_model("mixtral-8x7b")
    assert m.moe is not None
    return m.model_copy(update={"moe": m.moe.model_copy(update=routing)})


def _ops(model: ModelSpec) -> dict[str, tuple[float, float]]:
    run = build_run(model=model, gpu="h100", num_gpus=64, tp=2, pp=2, ep=8,
                    global_batch_size=64, sequence_parallel=True)
    graph, _, _ = build_models(run)
    ch = graph.chunks[1]
    return {op.name: (op.flops, op.size) for op in ch.forward}


@pytest.mark.parametrize(("routing", "factor"), [
    ({}, 1.0), ({"load_imbalance": 1.5}, 1.5), ({"capacity_factor": 1.25}, 1.25),
    ({"capacity_factor": 1.25, "load_imbalance": 2.0}, 1.25),  # dropped down to capacity
    ({"capacity_factor": 2.0, "load_imbalance": 1.1}, 2.0),  # padded up to capacity
])
def test_busiest_rank_work_scales_by_the_load_factor(routing: dict[str, float],
                                                     factor: float) -> None:
    base, routed = _ops(_mixtral()), _ops(_mixtral(**routing))
    for name in ("expert_up", "expert_down"):
        assert routed[name][0] == pytest.approx(base[name][0] * factor)
    for name in ("dispatch", "combine"):
        assert routed[name][1] == pytest.approx(base[name][1] * factor)
    assert routed["qkv_proj"] == base["qkv_proj"]  # attention untouched


def test_model_flops_fixed_hardware_flops_grow_with_padding_only() -> None:
    def report(**routing: float):  # type: ignore[no-untyped-def]
        return simulate_run(build_run(model=_mixtral(**routing), gpu="h100", num_gpus=64,
                                      tp=2, pp=2, ep=8, global_batch_size=64,
                                      sequence_parallel=True))

    base, skew, padded = report(), report(load_imbalance=1.5), report(capacity_factor=1.25)
    assert skew.model_flops_per_step == base.model_flops_per_step == padded.model_flops_per_step
    assert skew.hardware_flops_per_step == pytest.approx(base.hardware_flops_per_step)
    assert padded.hardware_flops_per_step > base.hardware_flops_per_step
    assert base.step_time_s < padded.step_time_s < skew.step_time_s  # type: ignore[operator]


def test_rows_state_capacity_factors_in_prose() -> None:
    assert read_capacity_factor("capacity factor 1.25") == 1.25
    assert read_capacity_factor("Megatron --moe-expert-capacity-factor CF=2") == 2.0
    assert read_capacity_factor("expert capacity factor of 1.5 (train)") == 1.5
    assert read_capacity_factor("MoE: token distribution force-balanced, dropless") is None
    assert read_capacity_factor("") is None
    # token dropping named without a factor: Megatron-Core's token-drop recipes (CF 1.0)
    for text in ("MoE: token distribution force-balanced, tokendrop", "Qwen3_30B_a3B (tokendrop)",
                 "token dropping (capacity-based)", "drop tokens beyond capacity", "token-drop"):
        assert read_capacity_factor(text) == 1.0, text
    assert read_capacity_factor("tokendrop, CF=2") == 2.0  # a stated factor wins
    for text in ("token-dropless", "no token drop", "without token dropping",
                 "no token dropping"):
        assert read_capacity_factor(text) is None, text


def test_a_load_imbalance_below_one_is_refused() -> None:
    from pydantic import ValidationError

    from codesign.specs.model import MoESpec

    with pytest.raises(ValidationError, match="load_imbalance"):
        MoESpec(num_experts=8, top_k=2, expert_ffn_hidden_size=1024, load_imbalance=0.9)


def test_a_tokendrop_row_runs_with_buffers_padded_to_capacity() -> None:
    from codesign.validation.training_cases import map_row

    row = {"case_id": "C1", "source": "test", "model": "Qwen3-30B-A3B", "gpu_type": "H100",
           "num_gpus": "16", "tp": "1", "pp": "2", "ep": "8", "global_batch_size": "512",
           "micro_batch_size": "2", "tokens_per_s_per_gpu": "10000",
           "notes": "MoE: token distribution force-balanced, tokendrop"}
    case = map_row(row)
    runs = [r for g in case.candidates for r in g]
    assert runs and all(r.model.moe is not None and r.model.moe.capacity_factor == 1.0
                        for r in runs)
    assert any("token dropping without a factor" in n for n in case.assumptions)
    dropless = map_row({**row, "notes": "MoE: token distribution force-balanced, dropless"})
    assert all(r.model.moe is not None and r.model.moe.capacity_factor is None
               for g in dropless.candidates for r in g)
