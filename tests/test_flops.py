"""FLOP accounting against closed forms computed independently of the graph."""

from __future__ import annotations

import pytest

from codesign.api import build_run, simulate_run
from codesign.workload import params as P
from codesign.workload.training import build_training_graph

B, S = 64, 2048  # sequences per step, sequence length


def _gpt3(**plan: object):  # type: ignore[no-untyped-def]
    base = dict(model="gpt3-175b", gpu="a100", num_gpus=64, tp=8, pp=8, vpp=3,
                global_batch_size=B, micro_batch_size=1)
    base.update(plan)
    return build_run(**base)


def test_gpt3_model_flops_equal_6n_plus_attention() -> None:
    run = _gpt3()
    n_layers, h = 96, 12288
    n = P.param_counts(run.model).total
    closed = (6 * n + 12 * n_layers * S * h) * B * S  # PaLM/Narayanan: 6N + 12·l·s·h per token
    graph = build_training_graph(run)
    assert graph.model_flops_per_step == pytest.approx(closed, rel=0.005)


def test_gpt3_full_recompute_hardware_flops_equal_megatron_formula() -> None:
    run = _gpt3(recompute="full")
    n_layers, h, v = 96, 12288, 50257
    megatron = 96 * B * S * n_layers * h**2 * (1 + S / (6 * h) + v / (16 * n_layers * h))
    graph = build_training_graph(run)
    assert graph.hardware_flops_per_step == pytest.approx(megatron, rel=0.005)


def test_no_recompute_hardware_flops_equal_model_flops() -> None:
    graph = build_training_graph(_gpt3())
    assert graph.hardware_flops_per_step == pytest.approx(graph.model_flops_per_step, rel=1e-9)


def test_selective_recompute_adds_one_attention_forward() -> None:
    n_layers, h = 96, 12288
    base = build_training_graph(_gpt3()).hardware_flops_per_step
    sel = build_training_graph(_gpt3(recompute="selective")).hardware_flops_per_step
    attention_fwd = 4 * S * S * h * n_layers * B  # QK^T and AV, full matrix, every layer
    assert sel - base == pytest.approx(attention_fwd, rel=1e-9)


@pytest.mark.parametrize("name", ["llama3-70b", "mixtral-8x7b"])
def test_gqa_and_moe_model_flops_per_token(name: str) -> None:
    run = build_run(model=name, gpu="h100", num_gpus=8, tp=8, global_batch_size=8,
                    seq_len=4096)
    m = run.model
    c = P.param_counts(m)
    # matmul parameters touched per token: active minus the embedding lookup and the norms
    matmul = c.active - P.embedding_params(m) - c.norms
    attn = 4 * 4096 * m.num_heads * m.dim_per_head * m.num_layers  # per token, forward
    closed = (6 * matmul + 3 * attn) * 8 * 4096
    graph = build_training_graph(run)
    assert graph.model_flops_per_step == pytest.approx(closed, rel=0.005)


def test_flops_do_not_depend_on_the_parallel_plan() -> None:
    a = build_training_graph(_gpt3(tp=4, pp=4, vpp=1, num_gpus=64)).model_flops_per_step
    b = build_training_graph(_gpt3(tp=8, pp=2, vpp=1, num_gpus=64, cp=2)).model_flops_per_step
    assert a == pytest.approx(b, rel=1e-12)
    ha = build_training_graph(_gpt3(tp=4, pp=4, vpp=1, num_gpus=64)).hardware_flops_per_step
    hb = build_training_graph(_gpt3(tp=8, pp=2, vpp=1, num_gpus=64,
                                    cp=2)).hardware_flops_per_step
    assert ha == pytest.approx(hb, rel=1e-12)


def test_mfu_definition() -> None:
    r = simulate_run(_gpt3(sequence_parallel=True, recompute="selective", num_gpus=512,
                           global_batch_size=512))
    assert r.feasible, r.reason
    assert r.step_time_s and r.mfu and r.tokens_per_s and r.tflops_per_gpu
    assert r.mfu == pytest.approx(r.model_flops_per_step / (r.step_time_s * 312e12 * 512))
    assert r.tflops_per_gpu == pytest.approx(r.mfu * 312.0)
    assert r.tokens_per_s == pytest.approx(512 * S / r.step_time_s)
    assert 0 < r.mfu <= r.hfu <= 1  # type: ignore[operator]


@pytest.mark.parametrize(("plan", "fwd", "bwd"), [
    # Megatron TP without SP: g (all-reduce) after attention and MLP in forward; f's
    # all-reduces in backward; full recompute repeats the forward's two
    ({}, {"all_reduce": 2}, {"all_reduce": 2}),
    ({"recompute": "full"}, {"all_reduce": 2}, {"all_reduce": 4}),
    # SP: all-gather before and reduce-scatter after each block, conjugates in backward
    ({"sequence_parallel": True}, {"all_gather": 2, "reduce_scatter": 2},
     {"all_gather": 2, "reduce_scatter": 2}),
])
def test_tensor_parallel_collectives_per_layer(plan: dict, fwd: dict, bwd: dict) -> None:
    graph = build_training_graph(_gpt3(**plan))
    chunk = graph.chunks[1]
    layer = chunk.layers[0]

    def count(ops) -> dict[str, int]:  # type: ignore[no-untyped-def]
        out: dict[str, int] = {}
        for o in ops:
            if o.kind == "comm" and o.group == "tp" and o.layer == layer:
                assert o.comm is not None
                out[o.comm] = out.get(o.comm, 0) + 1
        return out

    assert count(chunk.forward) == fwd
    assert count(chunk.backward) == bwd
