"""LoRA fine-tuning (``lora_rank``): operators, memory, model FLOPs and DP bytes against hand
counts for Llama 2 7B (h 4096, 32 heads of 128 = MHA, FFN 11008, vocab 32000, 32 layers)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from codesign.api import build_run, simulate_run
from codesign.errors import SpecError
from codesign.search.search import search
from codesign.specs.parallel import ParallelismSpec
from codesign.workload.memory import memory_per_gpu
from codesign.workload.step_program import GRAD_REDUCE_BYTES
from codesign.workload.training import OPT_BYTES_PER_PARAM, build_training_graph

H, FFN, V, L, S, R, TP = 4096, 11008, 32000, 32, 1024, 16, 2
#: adapter parameters per layer per rank at TP 2: qkv_proj A h×r (replicated), B r×3h/tp;
#: out_proj A (h/tp)×r, B r×h (replicated)
ADAPTERS = R * (H + 3 * H / TP) + R * (H / TP + H)


def _run(**plan: object):  # type: ignore[no-untyped-def]
    base = dict(model="llama2-7b", gpu="h100", num_gpus=TP, tp=TP, global_batch_size=4,
                micro_batch_size=1, seq_len=S, sequence_parallel=True)
    base.update(plan)
    return build_run(**base)


def test_backward_has_no_frozen_weight_gradients_and_has_the_adapters() -> None:
    g = build_training_graph(_run(lora_rank=R))
    (chunk,) = g.chunks
    fwd = [o for o in chunk.forward if o.layer == 3]
    bwd = [o for o in chunk.backward if o.layer == 3]
    # each adapted linear: X·A (T×r×k) then (XA)·B (T×n×r), local shapes under TP 2
    shapes = {o.name: o.mnk for o in fwd if ".lora_" in o.name}
    assert shapes == {"qkv_proj.lora_a": (S, R, H), "qkv_proj.lora_b": (S, 3 * H / TP, R),
                      "out_proj.lora_a": (S, R, H / TP), "out_proj.lora_b": (S, H, R)}
    wgrads = sorted(o.name for o in bwd if o.role == "wgrad")
    assert wgrads == sorted(f"{n}.wgrad" for n in shapes)  # only the adapters' wgrads
    assert not any(o.role == "wgrad" for o in chunk.backward if ".lora_" not in o.name)
    base_gemms = {o.name for o in fwd if o.kind == "gemm" and ".lora_" not in o.name}
    assert base_gemms >= {"qkv_proj", "out_proj"}
    assert {o.name for o in bwd if o.role == "dgrad"} == \
        {f"{n}.dgrad" for n in base_gemms | set(shapes)}  # every dgrad kept
    full = build_training_graph(_run()).chunks[0]
    full_bwd = [o for o in full.backward if o.layer == 3]
    assert len([o for o in full_bwd if o.role == "wgrad"]) == len(base_gemms)


def test_adapter_flops_are_under_one_percent_of_the_layer() -> None:
    g = build_training_graph(_run(lora_rank=R, model="llama2-70b", num_gpus=8, tp=8))
    fwd = [o for o in g.chunks[0].forward if o.layer == 5]
    adapters = sum(o.flops for o in fwd if ".lora_" in o.name)
    assert 0 < adapters < 0.01 * sum(o.flops for o in fwd if ".lora_" not in o.name)


def test_memory_frozen_weights_and_adapter_states() -> None:
    run = _run(lora_rank=R, zero_stage=0)
    g = build_training_graph(run)
    (chunk,) = g.chunks
    # every base parameter per rank: a layer's (its two norms included, as codesign counts
    # them) and the embedding and LM head split over TP, the final norm whole
    per_layer = (4 * H * H + 3 * H * FFN + 2 * H) / TP
    frozen = L * per_layer + 2 * V * H / TP + H
    assert chunk.frozen_params == pytest.approx(frozen, rel=1e-12)
    assert chunk.dense_params == pytest.approx(L * ADAPTERS, rel=1e-12)
    mem = memory_per_gpu(g, 1, 1)
    assert mem.weights == pytest.approx(2 * (frozen + L * ADAPTERS), rel=1e-12)
    assert mem.gradients == pytest.approx(4 * L * ADAPTERS, rel=1e-12)
    assert mem.optimizer == pytest.approx(12 * L * ADAPTERS, rel=1e-12)
    assert OPT_BYTES_PER_PARAM == 12
    full = memory_per_gpu(build_training_graph(_run(zero_stage=0)), 1, 1)
    assert full.activations < mem.activations < full.activations * 1.01  # + the m×r parts


def test_dp_reduces_adapter_gradients_only() -> None:
    g = build_training_graph(_run(lora_rank=R, num_gpus=2 * TP, global_batch_size=8))
    (chunk,) = g.chunks
    buckets = chunk.layer_params  # the gradient buckets the DP reduction sends
    assert [layer for layer, _, _ in buckets] == list(range(L))  # no embedding / LM head
    assert sum(d for _, d, _ in buckets) * GRAD_REDUCE_BYTES == \
        pytest.approx(L * ADAPTERS * 4, rel=1e-12)
    # unoverlapped, the reduction of the adapters' gradients is far shorter than that of
    # every weight's
    lora = simulate_run(_run(lora_rank=R, num_gpus=2 * TP, global_batch_size=8,
                             overlap_grad_reduce=False)).breakdown_s["dp_comm"]
    full = simulate_run(_run(num_gpus=2 * TP, global_batch_size=8,
                             overlap_grad_reduce=False)).breakdown_s["dp_comm"]
    assert 0 < lora < 0.1 * full


def test_model_flops_drop_the_frozen_weight_gradients() -> None:
    full = build_training_graph(_run()).model_flops_per_step
    lora = build_training_graph(_run(lora_rank=R)).model_flops_per_step
    tokens = 4 * S
    weight_gemms = L * (4 * H * H + 3 * H * FFN) + V * H  # LM head included
    assert full - lora == pytest.approx(2 * weight_gemms * tokens, rel=1e-9)


def test_step_time_between_forward_only_and_full_training() -> None:
    # 8 sequences per micro-batch: GPU-bound. At one 1,024-token sequence the host binds
    # (codesign.hardware.compute.HOST_ISSUE_US per kernel) and the adapters' extra small
    # kernels cost more host time than the frozen weight gradients save.
    full = simulate_run(_run(micro_batch_size=8, global_batch_size=16))
    lora = simulate_run(_run(lora_rank=R, micro_batch_size=8, global_batch_size=16))
    assert full.breakdown_s["host_issue"] == lora.breakdown_s["host_issue"] == 0.0
    assert full.breakdown_s["forward"] < lora.step_time_s < full.step_time_s  # type: ignore
    assert lora.breakdown_s["forward"] > full.breakdown_s["forward"]  # the adapter GEMMs


def test_unset_field_reproduces_full_training() -> None:
    assert build_training_graph(_run(lora_rank=None)).chunks == \
        build_training_graph(_run()).chunks


@pytest.mark.parametrize(("plan", "needle"), [
    ({"lora_rank": 0}, "lora_rank"),
    ({"lora_rank": -4}, "lora_rank"),
    ({"lora_rank": 16, "zero_stage": 3}, "lora_rank"),
    ({"lora_rank": 16, "fsdp": True}, "lora_rank"),
])
def test_bad_values_name_the_field(plan: dict, needle: str) -> None:
    with pytest.raises(SpecError, match=needle):
        ParallelismSpec.parse(plan, "plan")


def test_cli_rejects_a_bad_rank_with_exit_code_2() -> None:
    out = subprocess.run([sys.executable, "-m", "codesign.cli", "simulate", "--model",
                          "llama2-7b", "--gpu", "h100", "--gpus", "2", "--tp", "2",
                          "--lora-rank", "0"], capture_output=True, text=True, check=False)
    assert out.returncode == 2
    assert "lora_rank" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_search_refuses_lora() -> None:
    with pytest.raises(SpecError, match="lora_rank"):
        search(_run(lora_rank=R))
