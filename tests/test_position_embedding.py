"""Only a rotary model runs a RoPE kernel: learned, ALiBi and absent position embeddings add
no rotation pass to the training step, while the Q, K, V attention saves for backward stay
in the activation memory. Bytes and times hand-computed as in ``test_eager_kernels``."""

from __future__ import annotations

import pytest
from conftest import tiny_model, tiny_run

from codesign.api import build_models, simulate_run
from codesign.ir import Op
from codesign.specs import ModelSpec, TrainingRun
from codesign.workload.training import ChunkBinder

# tiny gated RMSNorm model with grouped K/V heads: T = 128 tokens, h = 256, a = 4 query
# heads, g = 2 KV heads, d = 64; bf16 activations (e = 2)
T, A, G, D = 128, 4, 2, 64
#: RoPE reads and writes Q and the K/V heads once in bf16 (fused kernel)
ROPE_BYTES = 2 * 2 * T * (A + 2 * G) * D


def _model(position: str) -> ModelSpec:
    return tiny_model(mlp="gated", norm="rmsnorm", num_kv_heads=G,
                      position_embedding=position)


def _run(position: str) -> TrainingRun:
    return tiny_run(num_gpus=1, model=_model(position), global_batch_size=1)


@pytest.mark.parametrize("position", ["learned", "alibi", "none"])
def test_no_rotation_kernel_without_rotary_embeddings(position: str) -> None:
    binder = ChunkBinder(_run(position))
    fwd, _, saved = binder.layer_ops("dense")
    nbytes = {op.name: op.bytes for op in fwd}
    assert nbytes["rope"] == 0
    _, _, rotary_saved = ChunkBinder(_run("rope")).layer_ops("dense")
    assert saved == rotary_saved  # Q, K, V are still saved for the attention backward
    graph_ops = {op.name for ch in _chunk_ops(position) for op in ch}
    assert "rope" not in graph_ops and "rope.bwd" not in graph_ops


def _chunk_ops(position: str) -> list[list[Op]]:
    """Forward and backward operators of every chunk of the bound step."""
    graph, _, _ = build_models(_run(position))
    return [list(ch.forward) + list(ch.backward) for ch in graph.chunks]


def test_rotary_model_keeps_its_rope_pass() -> None:
    fwd, _, _ = ChunkBinder(_run("rope")).layer_ops("dense")
    assert {op.name: op.bytes for op in fwd}["rope"] == ROPE_BYTES
    names = {op.name for ch in _chunk_ops("rope") for op in ch}
    assert {"rope", "rope.bwd"} <= names


def test_step_time_drops_three_rope_passes_per_layer() -> None:
    """One rank, one micro-batch: the step is the sum of its kernels, so a model without
    position embeddings (no learned table either) saves the RoPE forward and its backward
    (2x the bytes) in every layer, each at the GPU's achieved HBM bandwidth plus one
    kernel's fixed cost per pass."""
    rotary, plain = simulate_run(_run("rope")), simulate_run(_run("none"))
    gpu = _run("rope").gpu
    stream = gpu.hbm_bytes_per_s * gpu.efficiency.memory_bound
    per_layer = 3 * ROPE_BYTES / stream + 2 * gpu.efficiency.kernel_overhead_us * 1e-6
    layers = _model("rope").num_layers
    assert rotary.step_time_s - plain.step_time_s == pytest.approx(layers * per_layer,
                                                                     rel=1e-6)
