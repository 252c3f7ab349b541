"""Multi-token prediction in training (``ModelSpec.mtp_num_layers``): each depth adds its
norms, a ``2h -> h`` projection, one block and a pass of the shared LM head with its loss on
the last pipeline stage. FLOPs and parameters checked against closed forms; the DeepSeek-V3
module against its report (14B module, 11.5B of it unique)."""

from __future__ import annotations

import pytest
from conftest import tiny_model, tiny_run
from estimate_checks import estimates_agree

from codesign.api import build_models, build_run, simulate_run
from codesign.errors import SpecError
from codesign.search import SearchSpace
from codesign.specs import ModelSpec
from codesign.specs.catalog import load_model
from codesign.specs.hf import model_from_hf_config
from codesign.validation.prose import read_mtp
from codesign.workload import params as P
from codesign.workload.training import layer_assignment, model_flops_per_sequence_fwd

S, H, V, L = 128, 256, 1000, 4  # tiny_model: tokens per sequence, hidden, vocabulary, layers


def test_block_pattern_is_checked() -> None:
    with pytest.raises(ValueError, match="mtp_num_layers"):
        tiny_model(hybrid_override_pattern="*-*-", mtp_block_pattern="*-")
    with pytest.raises(ValueError, match="hybrid models"):
        tiny_model(mtp_num_layers=1, mtp_block_pattern="*-")
    with pytest.raises(ValueError, match="no mamba"):
        tiny_model(hybrid_override_pattern="*-*-", mtp_num_layers=1, mtp_block_pattern="M")
    assert tiny_model(mtp_num_layers=2).mtp_kinds == ("dense",)
    hybrid = tiny_model(hybrid_override_pattern="*-*-", mtp_num_layers=2,
                        mtp_block_pattern="*-")
    assert hybrid.mtp_kinds == ("attention", "mlp") and hybrid.mtp_blocks == 4


def test_deepseek_v3_module_matches_the_report() -> None:
    # DeepSeek-V3 README_WEIGHTS.md: the MTP module holds 11.5B unique parameters (14B with
    # the shared embedding and head); its block is an MoE layer
    m = load_model("deepseek-v3")
    assert m.mtp_num_layers == 1 and m.mtp_kinds == ("moe",)
    assert P.mtp_params(m) == pytest.approx(11.5e9, rel=0.015)
    # 14B = 685B - 671B, both rounded to 1B in the README: within 1B
    assert P.mtp_params(m) + P.embedding_params(m) + P.output_params(m) == pytest.approx(
        14e9, abs=1e9)
    # the main model's count is unchanged (published 671B excludes the module)
    assert P.param_counts(m).total == pytest.approx(671e9, rel=0.002)


def test_shared_weights_are_held_once() -> None:
    own = 3 * 2 * H + 2 * H * H  # three layernorms (weight + bias) and eh_proj
    one = P.kind_params(tiny_model(), "dense") + own
    assert P.mtp_params(tiny_model(mtp_num_layers=2)) == 2 * one
    assert P.mtp_params(tiny_model(mtp_num_layers=2, mtp_shared_weights=True)) == one


def test_model_flops_add_one_layer_a_projection_and_logits_per_depth() -> None:
    # Megatron-LM num_floating_point_operations: per depth one more layer, the eh projection
    # (2 x 2h x h per token) and one more logits GEMM (2 x h x V per token); forward FLOPs
    # of the uniform tiny model: L layers + logits (the embedding is a lookup)
    def fwd(model: ModelSpec) -> float:
        return model_flops_per_sequence_fwd(tiny_run(num_gpus=1, model=model,
                                                     global_batch_size=1))

    base = fwd(tiny_model())
    logits = 2 * S * H * V
    layer = (base - logits) / L
    for depth in (1, 2):
        expected = base + depth * (layer + 2 * S * 2 * H * H + logits)
        assert fwd(tiny_model(mtp_num_layers=depth)) == pytest.approx(expected, rel=1e-12)


def test_last_stage_gives_up_layers_to_the_mtp_blocks() -> None:
    # Megatron-Bridge's DeepSeek-V3 PP 16 layout: 15 stages of 4 decoder layers and a last
    # one of 1 layer + MTP + loss; balancing the MTP layer as a layer leaves the ends lighter
    out = layer_assignment(61, 16, tail=1)
    assert sum(len(x) for x in out) == 61 and sorted(x for s in out for x in s) == list(
        range(61))
    assert [len(x) for x in out] == [3] + [4] * 14 + [2]
    assert layer_assignment(61, 16) == layer_assignment(61, 16, tail=0)


def _graph(model: ModelSpec, pp: int = 1):  # type: ignore[no-untyped-def]
    run = tiny_run(num_gpus=pp, model=model, pp=pp, global_batch_size=4)
    return build_models(run)[0]


def test_only_the_last_stage_runs_the_mtp_depths() -> None:
    graph = _graph(tiny_model(mtp_num_layers=2), pp=2)
    first, last = graph.chunks
    names = [op.name for op in last.forward]
    assert names.count("mtp_eh_proj") == 2 and names.count("logits") == 3
    assert not any(op.name.startswith("mtp_") for op in first.forward)
    eh = next(op for op in last.forward if op.name == "mtp_eh_proj")
    assert eh.flops == 2 * S * 2 * H * H  # micro-batch 1 sequence, no TP
    # the last stage holds the MTP parameters beside the head
    base = _graph(tiny_model(), pp=2).chunks[1]
    moved = len(base.layers) - len(last.layers)  # layers the MTP blocks pushed off
    assert moved == 1
    assert last.dense_params - base.dense_params == pytest.approx(
        P.mtp_params(tiny_model(mtp_num_layers=2))
        - moved * P.kind_params(tiny_model(), "dense"))


def test_mtp_costs_time_and_its_flops_count_in_mfu() -> None:
    run = build_run(model="deepseek-v3", gpu="h100", num_gpus=1024, global_batch_size=1024,
                    seq_len=4096, tp=1, pp=16, ep=64, micro_batch_size=1, recompute="full")
    off = run.model_copy(update={"model": run.model.model_copy(update={"mtp_num_layers": 0})})
    with_mtp, without = simulate_run(run), simulate_run(off)
    assert with_mtp.feasible and without.feasible
    assert with_mtp.step_time_s > without.step_time_s
    # one more MoE layer (the FLOPs a 62nd decoder layer adds), the 2h -> h projection and
    # one more logits pass, per 4,096-token sequence
    h, vocab, seq = 7168, 129280, 4096
    deeper = off.model_copy(update={"model": off.model.model_copy(update={"num_layers": 62})})
    base = model_flops_per_sequence_fwd(off)
    layer = model_flops_per_sequence_fwd(deeper) - base
    expected = base + layer + 2 * seq * 2 * h * h + 2 * seq * h * vocab
    assert model_flops_per_sequence_fwd(run) == pytest.approx(expected, rel=1e-12)
    assert with_mtp.memory_gib["total"] > without.memory_gib["total"]


def test_estimate_agrees_with_the_engine_on_an_mtp_model() -> None:
    run = tiny_run(num_gpus=8, model=tiny_model(num_layers=8, mtp_num_layers=1),
                   global_batch_size=16)
    space = SearchSpace(tp=[1, 2], pp=[1, 2, 4], micro_batch_size=[1], recompute=["none"])
    assert estimates_agree(run, space, "forward", abs_s=1e-6) >= 4


def test_hf_config_reads_the_nextn_layers() -> None:
    cfg = {"model_type": "deepseek_v3", "num_hidden_layers": 4, "hidden_size": 256,
           "num_attention_heads": 4, "vocab_size": 1000, "intermediate_size": 512,
           "q_lora_rank": 64, "kv_lora_rank": 32, "qk_nope_head_dim": 32,
           "qk_rope_head_dim": 16, "v_head_dim": 32, "n_routed_experts": 8,
           "num_experts_per_tok": 2, "moe_intermediate_size": 128,
           "num_nextn_predict_layers": 1}
    assert model_from_hf_config(cfg, "ds").mtp_num_layers == 1
    cfg.pop("num_nextn_predict_layers")
    assert model_from_hf_config(cfg, "ds").mtp_num_layers == 0


@pytest.mark.parametrize(("text", "depths"), [
    ("MTP=2", 2), ("mtp_num_layers: 1", 1), ("MTP depth 1, FP8", 1),
    ("trained with multi-token prediction", 1), ("MoE: dropless; MTP (1 module)", 1),
    ("num_nextn_predict_layers 1", 1), ("no MTP", 0), ("mtp_num_layers=0", 0),
    ("MTP disabled", 0), ("without multi-token prediction", 0), ("Llama 3 70B, FP8", None),
])
def test_prose_states_mtp(text: str, depths: int | None) -> None:
    assert read_mtp(text) == depths


def test_serving_leaves_the_mtp_depths_out() -> None:
    from codesign.serving.speculative import mtp_module_model
    module = mtp_module_model(load_model("deepseek-v3"))
    assert module.num_layers == 1 and module.mtp_num_layers == 0


def test_bad_depth_is_a_spec_error() -> None:
    with pytest.raises((SpecError, ValueError), match="mtp_num_layers"):
        tiny_model(mtp_num_layers=-1)
