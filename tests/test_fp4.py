"""FP4 (NVFP4) training GEMMs: closed-form GEMM and cast times, which layers stay in high
precision, the FP4 share of a step's GEMM FLOPs, memory, and the refusal on parts without FP4.

Every expected value below is computed by hand from the formulas in the comments (catalog
figures read from ``hardware/b200.yaml``), not by the code under test.
"""

from __future__ import annotations

import pytest
from conftest import fast_network, ideal_gpu, tiny_model

from codesign.api import build_run, simulate_run
from codesign.cli import main
from codesign.errors import InfeasiblePlan
from codesign.hardware.compute import ComputeModel
from codesign.ir import Op
from codesign.specs import ParallelismSpec, TrainingRun
from codesign.specs.catalog import load_gpu
from codesign.workload.dims import plan_problems
from codesign.workload.memory import memory_per_gpu
from codesign.workload.training import build_training_graph

#: the ideal GPU of conftest plus an FP4 peak of 400 TFLOP/s (efficiency 1, 1 TB/s, no overhead)
PEAKS = {"bf16": 100.0, "fp8": 200.0, "fp4": 400.0}


def _gemm(m: float, n: float, k: float, precision: str, role: str) -> Op:
    """A GEMM whose HBM bytes are negligible next to its FLOPs."""
    return Op(name="g", kind="gemm", category="forward", layer=0, flops=2.0 * m * n * k,
              bytes=1.0, mnk=(m, n, k), precision=precision, role=role)


def _run(num_layers: int = 12, gpu_peaks: dict[str, float] | None = None,
         **plan: object) -> TrainingRun:
    return TrainingRun(model=tiny_model(num_layers=num_layers),
                       gpu=ideal_gpu(peak_tflops=gpu_peaks or PEAKS), topology=fast_network(),
                       parallel=ParallelismSpec.model_validate(plan), num_gpus=1)


def test_fp4_gemm_time_on_ideal_gpu() -> None:
    """4096³ weight-gradient GEMM (no cast): 2·4096³ / 400e12 s = 3.4359738368e-4 s."""
    cm = ComputeModel(ideal_gpu(peak_tflops=PEAKS))
    assert cm.time(_gemm(4096, 4096, 4096, "fp4", "wgrad")) == pytest.approx(3.4359738368e-4,
                                                                              rel=1e-12)


def test_fp4_cast_bytes_of_an_activation() -> None:
    """The forward GEMM also quantizes its 8192×8192 bf16 input: amax read 2 B + cast read 2 B
    + rowwise and columnwise NVFP4 copies 2 × (0.5 + 1/16) B = 5.125 B per element, i.e.
    8192² × 5.125 = 343,932,928 B at 1 TB/s."""
    cm = ComputeModel(ideal_gpu(peak_tflops=PEAKS))
    m = k = 8192
    fwd = cm.time(_gemm(m, 4096, k, "fp4", "fwd"))
    wgrad = cm.time(_gemm(m, 4096, k, "fp4", "wgrad"))
    assert fwd - wgrad == pytest.approx(343_932_928 / 1e12, rel=1e-12)


def test_fp4_vs_fp8_gemm_time_on_b200() -> None:
    """A large compute-bound GEMM on the B200: FP8 at 4500 TFLOP/s × gemm_max_fp8 0.76, FP4 at
    9000 TFLOP/s × gemm_max 0.78 (hardware/b200.yaml; the shape factor and sustained fraction
    cancel), so t_fp4 / t_fp8 = 4500·0.76 / (9000·0.78) = 3420 / 7020."""
    cm = ComputeModel(load_gpu("b200"))
    overhead = cm.gpu.efficiency.kernel_overhead_us * 1e-6
    t4 = cm.time(_gemm(16384, 16384, 16384, "fp4", "wgrad")) - overhead
    t8 = cm.time(_gemm(16384, 16384, 16384, "fp8", "wgrad")) - overhead
    assert t4 / t8 == pytest.approx(3420.0 / 7020.0, rel=1e-9)


def _gemms(run: TrainingRun) -> list[Op]:
    graph = build_training_graph(run)
    return [o for c in graph.chunks for o in (*c.forward, *c.backward) if o.kind == "gemm"]


def test_high_precision_layers_and_head() -> None:
    """12 layers, first 2 and last 3 kept in BF16: layers 0, 1, 9, 10, 11 run BF16 GEMMs, the
    others FP4; the LM head (layer -1) stays BF16."""
    ops = _gemms(_run(dtype="fp4", fp4_high_precision_first=2, fp4_high_precision_last=3))
    by_layer: dict[int, set[str]] = {}
    for o in ops:
        by_layer.setdefault(o.layer, set()).add(o.precision)
    assert by_layer[-1] == {"bf16"}
    assert {i for i, p in by_layer.items() if p == {"bf16"} and i >= 0} == {0, 1, 9, 10, 11}
    assert {i for i, p in by_layer.items() if p == {"fp4"}} == set(range(2, 9))


def test_fallback_dtype_fp8_prices_operands_at_one_byte() -> None:
    """With fp4_high_precision_dtype fp8 the kept layers run FP8 GEMMs whose forward reads
    its T×h input at 1 B: qkv of layer 0, T = 128 tokens, h = 256: (128·256 + 256·768)·1 B +
    128·768·2 B (bf16 output) = 425,984 B."""
    run = _run(dtype="fp4", fp4_high_precision_first=1, fp4_high_precision_last=0,
               fp4_high_precision_dtype="fp8")
    ops = [o for o in _gemms(run) if o.layer == 0 and o.role == "fwd"]
    assert {o.precision for o in ops} == {"fp8"}
    qkv = next(o for o in ops if o.mnk == (128, 768, 256))
    assert qkv.bytes == pytest.approx(425_984.0)


def test_fp4_share_of_step_gemm_flops() -> None:
    """Tiny model: h = 256, f = 1024 (plain MLP), vocab 1000. A layer's GEMMs take
    2(3h² + h² + 2hf) = 1,572,864 FLOP per token, the LM head 2hV = 512,000. With 7 of 12
    layers in FP4 (first 2, last 3 kept), the FP4 share of the step's GEMM FLOPs (forward and
    both backward GEMMs scale alike) is 7·1572864 / (12·1572864 + 512000)."""
    ops = _gemms(_run(dtype="fp4", fp4_high_precision_first=2, fp4_high_precision_last=3))
    fp4 = sum(o.flops for o in ops if o.precision == "fp4")
    total = sum(o.flops for o in ops)
    assert fp4 / total == pytest.approx(7 * 1572864 / (12 * 1572864 + 512000), rel=1e-12)


def test_fp4_keeps_bf16_weights_and_fp32_states() -> None:
    """FP4 training keeps BF16 working weights (2 B), FP32 main gradients (4 B) and FP32
    master weights + Adam moments (12 B) per parameter: the same bytes as BF16 training."""
    mems = {}
    for dtype in ("bf16", "fp4"):
        graph = build_training_graph(_run(dtype=dtype))
        mems[dtype] = memory_per_gpu(graph, 1, 1)
    params = sum(c.dense_params for c in build_training_graph(_run()).chunks)
    assert mems["fp4"].weights == pytest.approx(2.0 * params)
    assert mems["fp4"].gradients == pytest.approx(4.0 * params)
    assert mems["fp4"].optimizer == pytest.approx(12.0 * params)
    assert mems["fp4"].weights == mems["bf16"].weights


def test_fp4_refused_on_h100() -> None:
    run = build_run(model="llama3-8b", gpu="h100", num_gpus=8, tp=8, global_batch_size=8,
                    dtype="fp4")
    assert plan_problems(run) == [
        "dtype fp4 is not supported by h100-sxm (has bf16, fp16, fp32, fp8, tf32)"]
    with pytest.raises(InfeasiblePlan, match="dtype fp4 is not supported by h100-sxm"):
        build_training_graph(run)


def test_fp4_refused_on_h100_cli(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", "--model", "llama3-8b", "--gpu", "h100", "--gpus", "8", "--tp",
                 "8", "--global-batch", "8", "--dtype", "fp4", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.count("\n") == 0 and "dtype fp4 is not supported by h100-sxm" in err


def test_fallback_dtype_needs_its_peak() -> None:
    run = _run(gpu_peaks={"bf16": 100.0, "fp4": 400.0}, dtype="fp4",
               fp4_high_precision_dtype="fp8")
    assert plan_problems(run) == [
        "fp4_high_precision_dtype fp8 is not supported by ideal (has bf16, fp4)"]
    # no layer kept out of FP4: the fallback dtype is never used, the plan runs
    assert plan_problems(run.model_copy(update={"parallel": run.parallel.model_copy(
        update={"fp4_high_precision_first": 0, "fp4_high_precision_last": 0})})) == []


def test_bad_fp4_field_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", "--gpu", "b200", "--fp4-high-precision-last", "-1", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "fp4_high_precision_last" in err


def test_fp4_run_on_b200_is_faster_than_fp8_without_kept_layers() -> None:
    """Every linear layer in FP4 (none kept): the GEMMs run at twice the FP8 peak, so the
    step is shorter than FP8's but longer than half of it (attention, norms, communication
    and the casts do not speed up). TP 1: GPU-bound (at TP 8 the 8B model's kernels are so
    small that the host issuing them binds both runs alike)."""
    plan = dict(tp=1, global_batch_size=16)
    t8 = simulate_run(build_run(model="llama3-8b", gpu="b200", num_gpus=8, dtype="fp8",
                                **plan)).step_time_s
    t4 = simulate_run(build_run(model="llama3-8b", gpu="b200", num_gpus=8, dtype="fp4",
                                fp4_high_precision_first=0, fp4_high_precision_last=0,
                                **plan)).step_time_s
    assert t8 is not None and t4 is not None
    assert t8 / 2 < t4 < t8


def test_search_estimate_samples_an_fp4_layer() -> None:
    """The search prices each layer kind from one sample layer: under FP4 with the first 2
    layers kept, layer 2 (the first FP4 one); otherwise layer 0, as before."""
    from codesign.search.costs import _sample_layer

    kinds = (False,) * 12
    assert _sample_layer(_run(dtype="fp4"), kinds, False) == 2
    assert _sample_layer(_run(dtype="fp8"), kinds, False) == 0
    # every layer kept (2 + 10 of 12): the first layer of the kind
    assert _sample_layer(_run(dtype="fp4", fp4_high_precision_last=10), kinds, False) == 0


def test_router_stays_bf16_in_an_fp8_kept_layer_of_an_fp4_plan() -> None:
    """MoE layers of an FP4 plan: the router GEMM is BF16 in FP4 layers and in the layers kept
    in FP8; the experts run FP4 and FP8 respectively."""
    from codesign.specs import MoESpec

    model = tiny_model(num_layers=4, moe=MoESpec(num_experts=4, top_k=2,
                                                 expert_ffn_hidden_size=512))
    run = TrainingRun(model=model, gpu=ideal_gpu(peak_tflops=PEAKS), topology=fast_network(),
                      parallel=ParallelismSpec(dtype="fp4", fp4_high_precision_first=1,
                                               fp4_high_precision_last=0,
                                               fp4_high_precision_dtype="fp8"),
                      num_gpus=1)
    ops = _gemms(run)
    assert {o.precision for o in ops if o.name.startswith("router")} == {"bf16"}
    assert {o.precision for o in ops if o.name.startswith("expert_up") and o.layer == 0} == \
        {"fp8"}
    assert {o.precision for o in ops if o.name.startswith("expert_up") and o.layer == 1} == \
        {"fp4"}
