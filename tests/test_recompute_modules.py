"""Megatron-Core's selective recompute modules (``selective_recompute`` modules,
``recompute_modules``): the named submodules re-run before the layer's backward and free what
they held. Checked by hand on the tiny model (s 128, h 256, MHA, plain MLP F = 4h, TP 1,
micro-batch 1), whose per-layer saved bytes without recompute are, in units of one bf16
s×h tensor: norms 1 each, QKV input 1, RoPE's Q/K/V 3, softmax statistics 1/32, out_proj
input 1, residuals 1/2 each, mlp_up input 1, activation input 4, mlp_down input 4."""

from __future__ import annotations

import pytest
from conftest import tiny_model, tiny_run
from pydantic import ValidationError

from codesign.specs.parallel import ParallelismSpec
from codesign.validation import prose
from codesign.validation.training_cases import map_row
from codesign.workload.training import build_training_graph

S, H, F = 128, 256, 1024
UNIT = 2 * S * H  # one bf16 s×h tensor, bytes
NONE_SAVED = (1 + 1 + 3 + 1 / 32 + 1 + 0.5 + 1 + 1 + 4 + 4 + 0.5) * UNIT


def _modules(*names: str) -> dict[str, object]:
    return dict(recompute="selective", selective_recompute="modules", recompute_modules=names)


def _layer_saved(**plan: object) -> list[float]:
    graph = build_training_graph(tiny_run(1, global_batch_size=4, **plan))
    return [b for _, b in graph.chunks[0].layer_saved]


def _re_run(**plan: object) -> list[str]:
    graph = build_training_graph(tiny_run(1, global_batch_size=4, **plan))
    return sorted(o.name for o in graph.chunks[0].backward
                  if o.category == "recompute" and o.layer == 0)


def test_no_recompute_saves_the_hand_count() -> None:
    assert _layer_saved() == [pytest.approx(NONE_SAVED, rel=1e-12)] * 4


def test_layernorm_re_runs_the_norms_and_frees_their_outputs() -> None:
    """Output-discarding: the QKV and mlp_up inputs (the norms' outputs) are freed, 2 units;
    no FLOPs are added (norms are memory-bound)."""
    plan = _modules("layernorm")
    assert _re_run(**plan) == ["attn_norm", "mlp_norm"]
    assert _layer_saved(**plan) == [pytest.approx(NONE_SAVED - 2 * UNIT, rel=1e-12)] * 4
    none = build_training_graph(tiny_run(1, global_batch_size=4))
    mods = build_training_graph(tiny_run(1, global_batch_size=4, **plan))
    assert mods.hardware_flops_per_step == pytest.approx(none.hardware_flops_per_step)


def test_mlp_is_checkpointed_whole() -> None:
    """The dense MLP keeps its input (mlp_up's, 1 unit) and frees the activation's and
    mlp_down's inputs (4 + 4 units); its two GEMMs re-run: 2·(2·s·h·F) per layer and
    sequence."""
    plan = _modules("mlp")
    assert _re_run(**plan) == ["mlp_act", "mlp_down", "mlp_up"]
    assert _layer_saved(**plan) == [pytest.approx(NONE_SAVED - 8 * UNIT, rel=1e-12)] * 4
    none = build_training_graph(tiny_run(1, global_batch_size=4))
    mods = build_training_graph(tiny_run(1, global_batch_size=4, **plan))
    extra = mods.hardware_flops_per_step - none.hardware_flops_per_step
    assert extra == pytest.approx(4 * 4 * 2 * (2 * S * H * F), rel=1e-9)  # 4 layers x 4 seqs


def test_core_attn_matches_plain_selective_recompute() -> None:
    """``core_attn`` alone is Megatron's default selective recompute (the attention core)."""
    assert _layer_saved(**_modules("core_attn")) == _layer_saved(recompute="selective")
    assert _re_run(**_modules("core_attn")) == ["attention"]


def test_mla_modules_do_nothing_on_a_plain_attention_layer() -> None:
    assert _re_run(**_modules("mla_up_proj")) == []
    assert _layer_saved(**_modules("mla_up_proj")) == _layer_saved()


def test_modules_policy_needs_modules() -> None:
    with pytest.raises(ValidationError, match="recompute_modules"):
        ParallelismSpec(recompute="selective", selective_recompute="modules")


@pytest.mark.parametrize(("text", "modules"), [
    ("recompute_modules: [layernorm, moe_act]", ("moe_act", "layernorm")),
    ("--recompute-modules layernorm moe_act mla_up_proj", ("mla_up_proj", "moe_act",
                                                          "layernorm")),
    ("Recomputation of RMSNorm and MLA Up-Projection", ("mla_up_proj", "layernorm")),
    ("selective recompute of the MoE activation", ("moe_act",)),
])
def test_a_megatron_row_runs_the_modules_it_names(text: str, modules: tuple[str, ...]) -> None:
    assert prose.read_recompute_modules(text) == modules
    row = {"case_id": "R1", "source": "NVIDIA Megatron-Bridge performance summary",
           "model": "Qwen3-30B-A3B", "gpu_type": "H100-SXM5-80GB", "num_gpus": "16",
           "tp": "1", "pp": "1", "ep": "8", "notes": text, "global_batch_size": "64",
           "micro_batch_size": "1", "seq_len": "4096", "tokens_per_s_per_gpu": "5000",
           "precision": "bf16"}
    case = map_row(row)
    runs = [r for g in case.candidates for r in g]
    assert {(r.parallel.recompute, r.parallel.selective_recompute) for r in runs} == \
        {("selective", "modules")}
    assert {r.parallel.recompute_modules for r in runs} == {modules}


def test_mla_up_proj_re_runs_the_up_projections_and_frees_q_k_v() -> None:
    """MLA (4 heads, q latent 64, kv latent 32, head dims nope 48 + rope 16, value 64):
    ``mla_up_proj`` re-runs q_up, kv_up and RoPE, and frees the Q, K, V attention reads,
    2·s·a·(d_qk + d_qk + d_v) bytes per layer; the up-projections' own outputs are
    intermediates no operator keeps. Extra FLOPs per layer and sequence: the two
    up-projections, 2·s·64·(4·64) + 2·s·32·(4·(48 + 64))."""
    mla = {"q_lora_rank": 64, "kv_lora_rank": 32, "qk_nope_head_dim": 48,
           "qk_rope_head_dim": 16, "v_head_dim": 64}
    model = tiny_model(mla=mla)
    plan = _modules("mla_up_proj")

    def graph(**p: object):  # type: ignore[no-untyped-def]
        return build_training_graph(tiny_run(1, model=model, global_batch_size=4, **p))

    none, mods = graph(), graph(**plan)
    assert sorted(o.name for o in mods.chunks[0].backward
                  if o.category == "recompute" and o.layer == 0) == ["kv_up", "q_up", "rope"]
    freed = 2 * S * 4 * (64 + 64 + 64)
    assert [b for _, b in mods.chunks[0].layer_saved] == [
        pytest.approx(b - freed, rel=1e-12) for _, b in none.chunks[0].layer_saved]
    extra = mods.hardware_flops_per_step - none.hardware_flops_per_step
    per_layer = 2 * S * 64 * (4 * 64) + 2 * S * 32 * (4 * (48 + 64))
    assert extra == pytest.approx(4 * 4 * per_layer, rel=1e-9)
