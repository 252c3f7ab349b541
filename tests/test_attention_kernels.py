"""Fused attention kernel families: the catalog's FlashAttention-2 and (Hopper) Triton fractions,
the FlashAttention-2 paper's A100 ratios for the Triton kernel and FlashAttention v1 elsewhere, the
engine under each, and the framework defaults a validation row takes (llm-foundry's Triton
attention, torchtitan's SDPA)."""

from __future__ import annotations

import pytest

from codesign.api import build_run, simulate_run
from codesign.hardware.compute import (
    CAUSAL_FRACTION,
    FA1_SLOWDOWN,
    FLASH_BWD_RECOMPUTE,
    TRITON_FA_SLOWDOWN,
    ComputeModel,
    attention_fractions,
)
from codesign.ir import Op
from codesign.specs.catalog import load_gpu
from codesign.units import US
from codesign.validation.training_cases import map_row


def test_fractions_per_kernel_family_h100() -> None:
    eff = load_gpu("h100").efficiency
    assert attention_fractions(eff) == (0.55, 0.45)  # FlashAttention-3 (catalog)
    assert attention_fractions(eff, "fa2") == (0.32, 0.26)  # FA3 paper's FA2 bars
    # FA3 paper's Triton bars (forward 356 of 989.4 TFLOP/s); backward taken as FA2's
    assert attention_fractions(eff, "triton") == (0.36, 0.26)
    assert attention_fractions(eff, "fa1") == pytest.approx((0.32 / 2.0, 0.26 / 2.0))
    # Hopper siblings inherit the FlashAttention-2 and Triton values with the rest of the block
    assert attention_fractions(load_gpu("h800").efficiency, "fa2") == (0.32, 0.26)
    assert attention_fractions(load_gpu("h800").efficiency, "triton") == (0.36, 0.26)


def test_fa2_is_the_fastest_kernel_on_ampere() -> None:
    eff = load_gpu("a100").efficiency
    assert eff.attention_fa2_fwd is None
    assert attention_fractions(eff, "fa2") == attention_fractions(eff) == (0.60, 0.50)
    assert attention_fractions(eff, "triton") == pytest.approx(
        (0.60 / TRITON_FA_SLOWDOWN[0], 0.50 / TRITON_FA_SLOWDOWN[1]))


def test_an_unknown_kernel_is_refused() -> None:
    with pytest.raises(ValueError, match="allowed: auto, fa2, triton, fa1"):
        attention_fractions(load_gpu("h100").efficiency, "fa5")


def test_attention_operator_time_by_hand() -> None:
    """A causal forward and backward attention kernel of 16 heads x 8192^2 x hd128 on an
    H100: executed FLOPs / (peak x fraction x sustained) + one kernel overhead (compute-bound:
    the 1 MB of operands take microseconds)."""
    gpu = load_gpu("h100")
    eff = gpu.efficiency
    flops = 4 * 8192 * 8192 * 16 * 128
    fwd = Op(name="attention", kind="attention", category="forward", layer=0, flops=flops,
             bytes=1e6, causal=True)
    bwd = Op(**{**fwd.__dict__, "backward": True, "flops": 2 * flops})
    peak = gpu.peak_flops("bf16")
    for kernel, (f, b) in (("auto", (0.55, 0.45)), ("fa2", (0.32, 0.26)),
                           ("triton", (0.36, 0.26)),
                           ("fa1", (0.32 / FA1_SLOWDOWN[0], 0.26 / FA1_SLOWDOWN[1]))):
        model = ComputeModel(gpu, attention_kernel=kernel)
        want_f = flops * CAUSAL_FRACTION / (peak * f * eff.sustained_fraction)
        want_b = (2 * flops * CAUSAL_FRACTION * FLASH_BWD_RECOMPUTE
                  / (peak * b * eff.sustained_fraction))
        overhead = eff.kernel_overhead_us * US
        assert model.time(fwd) == pytest.approx(want_f + overhead, rel=1e-12)
        assert model.time(bwd) == pytest.approx(want_b + overhead, rel=1e-12)


def _step(gpu: str, kernel: str, seq: int = 8192) -> float:
    run = build_run("llama3-8b", gpu, num_gpus=8, tp=2, global_batch_size=16,
                    micro_batch_size=1, seq_len=seq, recompute="selective",
                    zero_stage=1, attention_kernel=kernel)
    report = simulate_run(run)
    assert report.feasible and report.step_time_s is not None
    return report.step_time_s


def test_older_kernels_slow_the_step() -> None:
    """Llama 3 8B at 8k on 8 H100: FA3 < Triton (forward 10% faster than FA2, same backward)
    < FA2 < FlashAttention v1 (2x FA2); on the A100 FA2 is the catalog's kernel (same step)
    and Triton is the FA2 paper's 1.4x / 2x slower."""
    t = {k: _step("h100", k) for k in ("auto", "fa2", "triton", "fa1")}
    assert t["auto"] < t["triton"] < t["fa2"] < t["fa1"]
    assert _step("a100", "fa2") == _step("a100", "auto") < _step("a100", "triton")
    # at a short sequence attention is a small share: the kernel matters much less
    short = {k: _step("h100", k, seq=1024) for k in ("auto", "fa2")}
    assert short["fa2"] / short["auto"] - 1 < (t["fa2"] / t["auto"] - 1) / 3


def _foundry_row(**kw: str) -> dict[str, str]:
    row = {"case_id": "F1", "source": "mosaicml/llm-foundry scripts/train/benchmarking/README.md",
           "model": "MPT-1B", "precision": "BF16 (amp_bf16)", "num_layers": "24",
           "hidden_size": "2048", "num_heads": "16", "num_kv_heads": "16", "ffn_size": "8192",
           "vocab_size": "50368", "seq_len": "8192", "gpu_type": "H100-80GB",
           "num_gpus": "8", "tp": "1", "pp": "1", "zero_fsdp": "FSDP FULL_SHARD",
           "activation_recompute": "none", "global_batch_size": "96", "micro_batch_size": "3",
           "tokens_per_s_per_gpu": "29157"}
    row.update(kw)
    return row


def _kernels(row: dict[str, str]) -> set[tuple[bool, str]]:
    case = map_row(row)
    return {(r.parallel.flash_attention, r.parallel.attention_kernel)
            for group in case.candidates for r in group}


def test_rows_take_their_frameworks_attention_kernel() -> None:
    assert _kernels(_foundry_row()) == {(True, "triton")}
    # FP8 stays in Transformer Engine's Linear layers: attention is still the Triton kernel
    assert _kernels(_foundry_row(precision="FP8 (amp_fp8)")) == {(True, "triton")}
    assert _kernels(_foundry_row(notes="attn_impl: flash, flash-attn==2.4.2")) == {(True, "fa2")}
    titan = _foundry_row(source="pytorch/torchtitan benchmarks", model="Llama 3 8B",
                         num_layers="", hidden_size="", num_heads="", ffn_size="",
                         vocab_size="", num_kv_heads="")
    assert _kernels(titan) == {(True, "fa2")}
    nemo = _foundry_row(source="NVIDIA NeMo performance summary", model="Llama-3-8B",
                        num_layers="", hidden_size="", num_heads="", ffn_size="",
                        vocab_size="", num_kv_heads="", zero_fsdp="")
    assert _kernels(nemo) == {(True, "auto")}
    assert _kernels(_foundry_row(notes="standard attention")) == {(False, "auto")}
