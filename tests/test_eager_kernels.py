"""Eager pointwise kernels (``ParallelismSpec.pointwise_kernels``): each op of PyTorch's eager
decomposition is an HBM pass. Bytes and step-time differences hand-computed from the
decompositions in :mod:`codesign.workload.layers` (torchtitan's RMSNorm and RoPE, SwiGLU)."""

from __future__ import annotations

import pytest
from conftest import tiny_model, tiny_run

from codesign.api import simulate_run
from codesign.specs import ModelSpec
from codesign.workload.training import ChunkBinder

# tiny gated RMSNorm model with grouped K/V heads: T = 128 tokens, h = 256, f = 1024,
# a = 4 query heads, g = 2 KV heads, d = 64; bf16 activations (e = 2), fp32 temporaries (4)
T, H, F, A, G, D = 128, 256, 1024, 4, 2, 64


def _model(**over: object) -> ModelSpec:
    return tiny_model(**{"mlp": "gated", "norm": "rmsnorm", "num_kv_heads": G, **over})


def _ops(kernels: str, **over: object) -> dict[str, float]:
    run = tiny_run(num_gpus=1, model=_model(**over), global_batch_size=1,
                   pointwise_kernels=kernels)
    fwd, _, _ = ChunkBinder(run).layer_ops("dense")
    return {op.name: op.bytes for op in fwd}


def test_eager_decompositions_move_the_hand_counted_bytes() -> None:
    fused, eager = _ops("fused"), _ops("eager")
    # RMSNorm: upcast 2+4, square 8, mean 4, scale 8, downcast 4+2, weight 4 = 36 B/element
    assert fused["attn_norm"] == 4 * T * H and eager["attn_norm"] == 36 * T * H
    assert eager["mlp_norm"] == 36 * T * H
    # SwiGLU: silu 2+2, product 4+2 = 10 B per inner element (fused: read 2 inputs, write 1)
    assert fused["mlp_act"] == 6 * T * F and eager["mlp_act"] == 10 * T * F
    # RoPE on Q and K: upcast 2+4, complex product 4+4, downcast 4+2 = 20 B per element;
    # fused: read and write Q, K and V once
    assert eager["rope"] == 20 * T * (A + G) * D
    assert fused["rope"] == 2 * 2 * T * (A + 2 * G) * D
    # one-kernel ops move the same bytes either way
    assert eager["attn_residual"] == fused["attn_residual"]
    assert eager["qkv_proj"] == fused["qkv_proj"]


def test_layernorm_and_a_plain_activation_are_one_kernel_either_way() -> None:
    fused, eager = _ops("fused", norm="layernorm", mlp="plain"), _ops(
        "eager", norm="layernorm", mlp="plain")
    assert eager["attn_norm"] == fused["attn_norm"] == 4 * T * H
    assert eager["mlp_act"] == fused["mlp_act"] == 4 * T * F


def test_eager_step_time_adds_three_passes_of_the_extra_bytes() -> None:
    """Ideal GPU (1 TB/s, no overheads), one rank, one micro-batch: the step is the sum of its
    kernels, so eager adds forward + backward (2x) extra bytes at 1 TB/s."""
    per_layer = (2 * (36 - 4) * T * H + (10 - 6) * T * F
                 + (20 * T * (A + G) * D - 4 * T * (A + 2 * G) * D))
    final_norm = (36 - 4) * T * H
    layers = _model().num_layers
    extra_s = 3 * (layers * per_layer + final_norm) / 1e12
    fused = simulate_run(tiny_run(num_gpus=1, model=_model(), global_batch_size=1))
    eager = simulate_run(tiny_run(num_gpus=1, model=_model(), global_batch_size=1,
                                  pointwise_kernels="eager"))
    assert eager.step_time_s - fused.step_time_s == pytest.approx(extra_s, rel=1e-9)
