"""Attention variants of the model and the kernel: sliding windows, parallel attention + MLP
blocks, and fused attention's efficiency by head dimension. Expected values are counted
by hand (query-key pairs, collectives per layer) or come from the published kernel
benchmarks named beside them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ideal_gpu, tiny_model, tiny_run

from codesign.api import simulate_run
from codesign.errors import SpecError
from codesign.hardware.compute import ComputeModel, attention_head_dim_factor
from codesign.ir import Op
from codesign.specs.catalog import load_gpu, load_model
from codesign.specs.hf import model_from_hf_config
from codesign.workload.training import ChunkBinder

ROOT = Path(__file__).resolve().parents[1]


def _pairs(seq: int, window: int | None) -> int:
    """Query-key pairs a causal kernel computes: query ``i`` sees ``min(i + 1, W)`` keys."""
    return sum(min(i + 1, window or seq) for i in range(seq))


# --- sliding windows ------------------------------------------------------------------------


@pytest.mark.parametrize("seq,window", [(4096, 128), (8192, 4096), (2048, 512)])
def test_window_fraction_is_the_counted_pairs(seq: int, window: int) -> None:
    m = tiny_model(sliding_window=window)
    exact = _pairs(seq, window) / _pairs(seq, None)
    # the closed form drops the O(1/S) diagonal terms of both counts
    assert m.attention_window_fraction(seq) == pytest.approx(exact, rel=2e-3)


def test_window_longer_than_the_sequence_changes_nothing() -> None:
    assert tiny_model(sliding_window=4096).attention_window_fraction(4096) == 1.0
    assert tiny_model().attention_window_fraction(4096) == 1.0


def test_full_layers_every_kth_average_in() -> None:
    # 4 layers, every 2nd full: 2 full (fraction 1), 2 windowed
    m = tiny_model(sliding_window=128, full_attention_interval=2)
    assert m.windowed_attention_layers == 2
    windowed = 2 * 128 / 1024 - (128 / 1024) ** 2
    assert m.attention_window_fraction(1024) == pytest.approx((2 + 2 * windowed) / 4)


def test_interval_without_a_window_is_refused() -> None:
    with pytest.raises(ValueError, match="full_attention_interval needs a sliding_window"):
        tiny_model(full_attention_interval=2)


def test_training_attention_flops_scale_by_the_window_and_nothing_else() -> None:
    full = tiny_model(seq_len=1024)
    windowed = tiny_model(seq_len=1024, sliding_window=256)
    ops = {}
    for name, m in (("full", full), ("win", windowed)):
        fwd, _, _ = ChunkBinder(tiny_run(num_gpus=1, model=m, global_batch_size=1)
                                ).layer_ops("dense")
        ops[name] = {op.name: op for op in fwd}
    frac = 2 * 256 / 1024 - (256 / 1024) ** 2
    for name, op in ops["full"].items():
        other = ops["win"][name]
        if op.kind == "attention":
            assert other.flops == pytest.approx(op.flops * frac)
            assert other.attn_shape is None  # full-attention tables do not apply
        else:
            assert (other.flops, other.bytes, other.size) == (op.flops, op.bytes, op.size)


# --- packed documents (fine-tuning sequence packing) ---------------------------------------


def _packed_pairs(seq: int, doc: int, window: int | None) -> int:
    """Query-key pairs over ``seq // doc`` documents of ``doc`` tokens that attend only to
    themselves (block-diagonal causal mask, as cu_seqlens gives the kernel)."""
    return (seq // doc) * _pairs(doc, window)


@pytest.mark.parametrize("seq,doc,window", [(4096, 512, None), (4096, 256, None),
                                            (8192, 1024, 128), (2048, 256, 512)])
def test_packed_fraction_is_the_counted_pairs(seq: int, doc: int, window: int | None) -> None:
    m = tiny_model(sliding_window=window)
    exact = _packed_pairs(seq, doc, window) / _pairs(seq, None)
    # the closed forms drop the O(1/l) diagonal terms of both counts
    assert m.attention_window_fraction(seq, doc) == pytest.approx(exact, rel=5e-3)


def test_one_document_per_sequence_changes_nothing() -> None:
    m = tiny_model(sliding_window=128, full_attention_interval=2)
    assert m.attention_window_fraction(1024, 1024) == m.attention_window_fraction(1024)
    assert m.attention_window_fraction(1024, 5000) == m.attention_window_fraction(1024)
    assert tiny_model().attention_window_fraction(4096, 4096) == 1.0


def test_packed_documents_scale_attention_flops_and_nothing_else() -> None:
    ops = {}
    for name, doc in (("one", None), ("packed", 128)):
        run = tiny_run(num_gpus=1, model=tiny_model(seq_len=1024), global_batch_size=1,
                       document_tokens=doc)
        fwd, _, _ = ChunkBinder(run).layer_ops("dense")
        ops[name] = {op.name: op for op in fwd}
    for name, op in ops["one"].items():
        other = ops["packed"][name]
        if op.kind == "attention":
            assert other.flops == pytest.approx(op.flops * 128 / 1024)
        else:
            assert (other.flops, other.bytes, other.size) == (op.flops, op.bytes, op.size)


def test_packed_documents_shorten_the_step_by_the_attention_saved() -> None:
    base = dict(num_gpus=1, model=tiny_model(seq_len=2048), global_batch_size=2)
    one = simulate_run(tiny_run(**base))  # type: ignore[arg-type]
    packed = simulate_run(tiny_run(**base, document_tokens=256))  # type: ignore[arg-type]
    assert packed.step_time_s < one.step_time_s
    saved = (one.breakdown_s["forward"] + one.breakdown_s["backward"]
             - packed.breakdown_s["forward"] - packed.breakdown_s["backward"])
    assert saved == pytest.approx(one.step_time_s - packed.step_time_s, rel=1e-6)


def test_catalog_windows() -> None:
    oss = load_model("gpt-oss-120b")
    assert (oss.sliding_window, oss.full_attention_interval) == (128, 2)
    assert oss.windowed_attention_layers == 18
    mistral = load_model("mistral-7b")
    assert mistral.sliding_window == 4096 and mistral.windowed_attention_layers == 32


def _gpt_oss_config() -> dict[str, object]:
    data = json.loads((ROOT / "workloads" / "hf" / "gpt-oss-120b.json").read_text())
    assert isinstance(data, dict)
    return data


def test_hf_config_windows() -> None:
    config = _gpt_oss_config()
    m = model_from_hf_config(config, "oss")
    assert (m.sliding_window, m.full_attention_interval) == (128, 2)
    config["layer_types"] = ["sliding_attention"] * 5 + ["full_attention"]
    config["num_hidden_layers"] = 6
    assert model_from_hf_config(config, "oss").full_attention_interval == 6
    config["layer_types"] = ["full_attention"] * 6
    assert model_from_hf_config(config, "oss").sliding_window is None


def test_hf_config_irregular_layer_types_name_the_key() -> None:
    config = _gpt_oss_config()
    config["num_hidden_layers"] = 4
    config["layer_types"] = ["full_attention", "sliding_attention", "sliding_attention",
                             "full_attention"]
    with pytest.raises(SpecError, match="layer_types"):
        model_from_hf_config(config, "oss")


# --- parallel attention + MLP blocks --------------------------------------------------------


def _layer(model_over: dict[str, object], **plan: object) -> list[Op]:
    run = tiny_run(num_gpus=2, model=tiny_model(**model_over), global_batch_size=2, **plan)
    fwd, _, _ = ChunkBinder(run).layer_ops("dense")
    return fwd


@pytest.mark.parametrize("sp", [False, True])
def test_parallel_block_enters_and_leaves_the_tp_region_once(sp: bool) -> None:
    seq = _layer({}, tp=2, sequence_parallel=sp)
    par = _layer({"parallel_block": True}, tp=2, sequence_parallel=sp)

    def tp_collectives(ops: list[Op]) -> list[str]:
        return [op.name for op in ops if op.kind == "comm" and op.group == "tp"]

    assert tp_collectives(seq) == ["attn_tp_in", "attn_tp_out", "mlp_tp_in", "mlp_tp_out"]
    assert tp_collectives(par) == ["attn_tp_in", "mlp_tp_out"]


def test_parallel_block_norms() -> None:
    def norms(ops: list[Op]) -> list[str]:
        return [op.name for op in ops if op.name.endswith("_norm")]

    assert norms(_layer({"parallel_block": True})) == ["attn_norm"]
    assert norms(_layer({"parallel_block": True, "parallel_block_norms": 2})) == [
        "attn_norm", "mlp_norm"]


def test_parallel_block_saves_one_tp_all_reduce_per_layer_each_way() -> None:
    """Ideal GPU, TP 2 on a 1 TB/s, latency-free network: the parallel block's step is
    shorter by the two all-reduces per layer (forward g, backward f) it no longer runs, and
    by the MLP norm it shares (forward + backward bytes at 1 TB/s)."""
    model = tiny_model(seq_len=128)
    seq = simulate_run(tiny_run(num_gpus=2, model=model, global_batch_size=1, tp=2))
    par = simulate_run(tiny_run(num_gpus=2, model=model.model_copy(
        update={"parallel_block": True}), global_batch_size=1, tp=2))
    tokens, hidden, layers = 128, 256, 4
    message = tokens * hidden * 2  # bytes of one layer's hidden states in bf16
    ring = 2 * (2 - 1) / 2 * message / 1e21  # ring all-reduce over 2 ranks at 1e21 B/s
    norm = 3 * 4 * tokens * hidden / 1e12  # LayerNorm: read + write, backward twice
    assert seq.step_time_s - par.step_time_s == pytest.approx(
        layers * (2 * ring + norm), rel=1e-6)


def test_catalog_parallel_blocks() -> None:
    assert load_model("gpt-j-6b").parallel_block
    falcon = load_model("falcon-180b")
    assert falcon.parallel_block and falcon.parallel_block_norms == 2


# --- attention efficiency by head dimension -------------------------------------------------


def test_head_dim_factor_hand_computed() -> None:
    h100 = load_gpu("h100")
    assert h100.attention_exp_head_dim == 64
    # measured 0.55 at d 128: 1/eta = 1/0.55 - 64/128; factor = (1/eta + 0.5) / (1/eta + 1)
    inv_eta = 1 / 0.55 - 0.5
    assert attention_head_dim_factor(h100, 0.55, 64, False) == pytest.approx(
        (inv_eta + 0.5) / (inv_eta + 1.0))
    assert attention_head_dim_factor(h100, 0.55, 128, False) == pytest.approx(1.0)
    # backward: c / 2.5 = 25.6
    inv_b = 1 / 0.45 - 25.6 / 128
    assert attention_head_dim_factor(h100, 0.45, 64, True) == pytest.approx(
        (inv_b + 0.2) / (inv_b + 0.4))


def test_head_dim_factor_against_published_kernels() -> None:
    """Measurements the model was not fitted to: FlashAttention-3 on H100 (Shah et al. 2024,
    Fig. 5, non-causal seq 16k forward: head dim 64 497, 128 648, 256 756 TFLOP/s) and
    FlashAttention-4 on B200 (Dao-AILab/flash-attention PR #2605, causal seq 4096 forward:
    head dim 64 708, 128 1062 TFLOP/s)."""
    h100, b200 = load_gpu("h100"), load_gpu("b200")
    fwd = h100.efficiency.attention_fwd
    assert attention_head_dim_factor(h100, fwd, 64, False) == pytest.approx(497 / 648, rel=0.03)
    assert attention_head_dim_factor(h100, fwd, 256, False) == pytest.approx(756 / 648, rel=0.03)
    fwd_b = b200.efficiency.attention_fwd
    assert attention_head_dim_factor(b200, fwd_b, 64, False) == pytest.approx(708 / 1062,
                                                                             rel=0.01)


def test_blackwell_ultra_doubles_the_exponential_rate() -> None:
    assert load_gpu("b300").attention_exp_head_dim == load_gpu("b200").attention_exp_head_dim / 2


def test_parts_without_a_stated_rate_keep_one_efficiency() -> None:
    for name in ("mi300x", "tpu-v5p", "gaudi3", "h20"):
        gpu = load_gpu(name)
        assert gpu.attention_exp_head_dim is None
        assert attention_head_dim_factor(gpu, 0.5, 64, False) == 1.0


def test_attention_time_follows_the_factor() -> None:
    gpu = ideal_gpu(attention_exp_head_dim=64.0)
    model = ComputeModel(gpu)

    def seconds(head_dim: float) -> float:
        return model.time(Op(name="attention", kind="attention", category="forward", layer=0,
                             flops=1e12, head_dim=head_dim))

    # ideal kernel (measured 1.0 at d 128): 1/eta = max(1 - 0.5, 1) = 1
    assert seconds(64) / seconds(128) == pytest.approx((1 + 1.0) / (1 + 0.5))
