"""PyTorch op-level selective activation checkpointing (``selective_recompute``
alternate_gemms, torchtitan's ``selective_ac_option = "op"``): every second GEMM of a layer and
its memory-bound operators re-run before the layer's backward; the other GEMMs' outputs, the
attention output and the layer input are kept. Checked by hand on the tiny model."""

from __future__ import annotations

import pytest
from conftest import tiny_run

from codesign.api import simulate_run
from codesign.validation.training_cases import map_row
from codesign.workload.dims import layer_structure
from codesign.workload.layers import layer_template
from codesign.workload.training import alternate_gemm_recompute, build_training_graph

# tiny model: s 128, h 256, 4 heads (MHA), FFN 4h = 1024, plain MLP, TP 1, micro-batch 1
S, H, F = 128, 256, 1024
OP_LEVEL = dict(recompute="selective", selective_recompute="alternate_gemms")


def _layer_saved(**plan: object) -> list[float]:
    graph = build_training_graph(tiny_run(1, global_batch_size=4, **plan))
    return [b for _, b in graph.chunks[0].layer_saved]


def test_every_second_gemm_and_the_memory_operators_are_recomputed() -> None:
    run = tiny_run(1, global_batch_size=4, **OP_LEVEL)
    temps = layer_template(layer_structure(run, "dense"))
    flags = dict(zip((t.name for t in temps), alternate_gemm_recompute(temps), strict=True))
    # GEMMs in layer order: qkv (1st, kept), out_proj (2nd, re-run), mlp_up (3rd, kept),
    # mlp_down (4th, re-run)
    assert [flags[n] for n in ("qkv_proj", "out_proj", "mlp_up", "mlp_down")] == \
        [False, True, False, True]
    assert flags["attention"] is False
    assert all(flags[t.name] for t in temps if t.kind == "memory")


def test_saved_bytes_are_the_input_and_the_kept_outputs() -> None:
    """Per layer (bf16): input s·h, QKV output s·3h, attention output s·h (out_proj's
    input), mlp_up output s·4h."""
    want = 2 * S * (H + 3 * H + H + F)
    assert _layer_saved(**OP_LEVEL) == [pytest.approx(want, rel=1e-12)] * 4


def test_recompute_flops_are_the_re_run_gemms() -> None:
    """The recompute adds out_proj (2·s·h·h) and mlp_down (2·s·F·h) per layer, per sequence,
    on top of the plan without recompute, plus nothing else that counts FLOPs."""
    none = build_training_graph(tiny_run(1, global_batch_size=4))
    op = build_training_graph(tiny_run(1, global_batch_size=4, **OP_LEVEL))
    extra = op.hardware_flops_per_step - none.hardware_flops_per_step
    per_layer = 2 * S * H * H + 2 * S * F * H
    assert extra == pytest.approx(4 * 4 * per_layer, rel=1e-9)  # 4 layers x 4 sequences
    # the memory-bound operators re-run too: recompute ops beyond the two GEMMs
    re_run = [o for o in op.chunks[0].backward if o.category == "recompute" and o.layer == 0]
    assert {o.kind for o in re_run} == {"gemm", "memory"}
    assert sorted(o.name for o in re_run if o.kind == "gemm") == ["mlp_down", "out_proj"]


def test_op_level_sits_between_no_recompute_and_full() -> None:
    """Memory: full < op-level < attention-core selective (which keeps every GEMM input);
    time: none < op-level < full."""
    saved = {k: sum(_layer_saved(**p)) for k, p in (
        ("full", {"recompute": "full"}), ("op", OP_LEVEL), ("attn", {"recompute": "selective"}))}
    assert saved["full"] < saved["op"] < saved["attn"]
    t = {k: simulate_run(tiny_run(1, global_batch_size=4, **p)).step_time_s
         for k, p in (("none", {}), ("op", OP_LEVEL), ("full", {"recompute": "full"}))}
    assert t["none"] < t["op"] < t["full"]


def test_a_torchtitan_row_runs_op_level_selective_recompute() -> None:
    row = {"case_id": "W1", "source": "pytorch/torchtitan benchmarks, 2025",
           "model": "Llama 3 8B", "gpu_type": "H100-SXM5-80GB", "num_gpus": "8", "tp": "1",
           "pp": "1", "zero_fsdp": "FSDP2", "activation_recompute": "selective",
           "global_batch_size": "16", "micro_batch_size": "2", "seq_len": "8192",
           "tokens_per_s_per_gpu": "6000", "precision": "bf16"}
    case = map_row(row)
    (run,) = case.candidates[0]
    assert (run.parallel.recompute, run.parallel.selective_recompute) == \
        ("selective", "alternate_gemms")
    assert any("op-level" in a for a in case.assumptions)
    mega = map_row({**row, "source": "NVIDIA Megatron-LM README, 2024"})
    assert {r.parallel.selective_recompute for g in mega.candidates for r in g} == {"attention"}


@pytest.mark.parametrize(("policy", "gemms"), [
    ("gemm_outputs", []), ("mlp_input", ["mlp_up"]), ("mlp", ["mlp_down", "mlp_up"])])
def test_dot_saving_policies_re_run_all_but_the_saved_gemms(policy: str,
                                                           gemms: list[str]) -> None:
    """JAX / MaxText dot-saving remat (``minimal``, ``save_dot_except_mlpwi``,
    ``save_dot_except_mlp``): the attention core and the memory-bound operators re-run, and
    only the GEMMs the policy does not save; recompute FLOPs are those GEMMs' forward FLOPs
    (tiny plain MLP: mlp_up and mlp_down 2·s·h·F each) plus the attention core's."""
    plan = dict(recompute="selective", selective_recompute=policy)
    op = build_training_graph(tiny_run(1, global_batch_size=4, **plan))
    re_run = [o for o in op.chunks[0].backward if o.category == "recompute" and o.layer == 0]
    assert sorted(o.name for o in re_run if o.kind == "gemm") == gemms
    assert [o.name for o in re_run if o.kind == "attention"] == ["attention"]
    none = build_training_graph(tiny_run(1, global_batch_size=4))
    attn = next(o for o in none.chunks[0].forward if o.kind == "attention" and o.layer == 0)
    extra = op.hardware_flops_per_step - none.hardware_flops_per_step
    per_layer = 2 * S * H * F * len(gemms) + attn.flops
    assert extra == pytest.approx(4 * 4 * per_layer, rel=1e-9)  # 4 layers x 4 sequences


def test_dot_saving_keeps_the_input_and_the_saved_gemm_outputs() -> None:
    """``minimal``: input s·h and every GEMM's output (QKV s·3h, out_proj s·h, mlp_up s·F,
    mlp_down s·h) in bf16; the attention output is re-run, not kept. ``save_dot_except_mlp``
    keeps neither MLP output."""
    minimal = 2 * S * (H + 3 * H + H + F + H)
    assert _layer_saved(recompute="selective", selective_recompute="gemm_outputs") == \
        [pytest.approx(minimal, rel=1e-12)] * 4
    assert _layer_saved(recompute="selective", selective_recompute="mlp") == \
        [pytest.approx(minimal - 2 * S * (F + H), rel=1e-12)] * 4


@pytest.mark.parametrize(("remat", "recompute", "policy"), [
    ("remat_policy=minimal", "selective", "gemm_outputs"),
    ("remat_policy=save_dot_except_mlpwi", "selective", "mlp_input"),
    ("remat_policy: save_dot_except_mlp", "selective", "mlp"),
    ("remat_policy=save_qkv_proj", "full", None),
    ("remat_policy=qkv_proj_offloaded", "full", None),
    ("remat_policy=full", "full", None),
])
def test_a_maxtext_row_runs_the_remat_policy_it_names(remat: str, recompute: str,
                                                      policy: str | None) -> None:
    row = {"case_id": "M1", "source": "AI-Hypercomputer/maxtext README",
           "model": "Llama2-70B", "gpu_type": "TPU v5p", "num_gpus": "64", "tp": "1",
           "pp": "1", "zero_fsdp": "FSDP(64)", "activation_recompute": remat,
           "global_batch_size": "256", "micro_batch_size": "4", "seq_len": "4096",
           "iteration_time_s": "10", "precision": "bf16"}
    runs = [r for g in map_row(row).candidates for r in g]
    assert {r.parallel.recompute for r in runs} == {recompute}
    if policy is not None:
        assert {r.parallel.selective_recompute for r in runs} == {policy}
