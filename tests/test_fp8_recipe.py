"""FP8 per-tensor current scaling ("FP8-CS"): Transformer Engine quantizes each activation
operand with an amax kernel (one more read of the BF16 tensor), a scale kernel and the cast,
per tensor and, in a grouped GEMM, per expert (``Float8CurrentScalingQuantizer``;
``multi_quantize_impl`` fuses experts only under delayed scaling)."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import pytest

from codesign.api import build_models, build_run, simulate_run
from codesign.errors import SpecError
from codesign.hardware.compute import ComputeModel
from codesign.ir import Op
from codesign.specs.catalog import load_gpu
from codesign.specs.parallel import ParallelismSpec
from codesign.validation.training_cases import map_row

H100_STREAM = 3.35e12 * 0.87  # achieved HBM bytes/s (hardware/h100-sxm.yaml)
OVERHEAD = 5.5e-6  # kernel_overhead_us


def _gemm(m: float, n: float, k: float, count: float, role: str = "fwd",
          precision: str = "fp8") -> Op:
    return Op(name="g", kind="gemm", category="forward", layer=0,
              flops=2 * m * n * k * count, bytes=0.0, mnk=(m, n, k), count=count,
              precision=precision, role=role)  # type: ignore[arg-type]


def test_grouped_fp8_gemm_pays_an_amax_pass_and_three_kernels_per_expert() -> None:
    cm = ComputeModel(load_gpu("h100"))
    # 16 experts of 4096 tokens × 2048 inputs: amax reads 16 × 4096 × 2048 × 2 B = 268 MB more;
    # 16 × 3 kernels replace the one fused multi-tensor cast: 47 more kernel overheads
    delayed = _gemm(4096, 1536, 2048, 16)
    current = replace(delayed, fp8_scaling="current")
    extra = 16 * 4096 * 2048 * 2 / H100_STREAM + 47 * OVERHEAD
    assert cm.time(current) - cm.time(delayed) == pytest.approx(extra, rel=1e-9)
    assert extra == pytest.approx(350.6e-6, rel=1e-3)
    # one GEMM: 8192 × 4096 BF16 operand read once more, amax + scale kernels
    one = _gemm(8192, 2048, 4096, 1)
    assert cm.time(replace(one, fp8_scaling="current")) - cm.time(one) == pytest.approx(
        8192 * 4096 * 2 / H100_STREAM + 2 * OVERHEAD, rel=1e-9)
    # the weight-gradient GEMM quantizes nothing; a BF16 GEMM has no cast at all
    for op in (_gemm(2048, 1536, 4096, 16, role="wgrad"),
               _gemm(4096, 1536, 2048, 16, precision="bf16")):
        assert cm.time(replace(op, fp8_scaling="current")) == cm.time(op)


def test_plan_recipe_reaches_the_fp8_gemms_and_slows_the_step() -> None:
    kw = dict(model="llama3-8b", gpu="h100", num_gpus=8, global_batch_size=8, dtype="fp8",
              tp=2, zero_stage=1)
    delayed, current = build_run(**kw), build_run(**kw, fp8_recipe="current")
    assert delayed.parallel.fp8_recipe == "delayed"
    ops = [o for c in build_models(current)[0].chunks for o in c.forward + c.backward]
    assert all(o.fp8_scaling == "current" for o in ops if o.kind == "gemm")
    assert not any(o.fp8_scaling == "current" for c in build_models(delayed)[0].chunks
                   for o in c.forward if o.kind == "gemm")
    t_delayed = simulate_run(delayed).step_time_s
    t_current = simulate_run(current).step_time_s
    assert t_delayed is not None and t_current is not None and t_current > t_delayed


def test_bad_recipe_names_the_field() -> None:
    with pytest.raises(SpecError, match="fp8_recipe"):
        ParallelismSpec.parse({"fp8_recipe": "sometimes"}, "plan")


def test_validation_rows_map_fp8_cs_to_current_scaling() -> None:
    path = Path(__file__).parent.parent / "experiments" / "validation" / "training_cases.csv"
    rows = {r["case_id"]: r for r in csv.DictReader(path.open())}
    cs = map_row(rows["T092"])  # "FP8-CS" (Megatron-Bridge)
    assert {run.parallel.fp8_recipe for grp in cs.candidates for run in grp} == {"current"}
    plain = map_row(rows["T081"])  # "FP8" (NeMo 2024): recipe not stated, delayed
    assert {run.parallel.fp8_recipe for grp in plain.candidates for run in grp} == {"delayed"}


_TITAN = {"case_id": "W1", "source": "pytorch/torchtitan docs/float8.md",
          "model": "Llama 3.1 8B", "gpu_type": "H100 SXM5 80GB", "num_gpus": "8",
          "gpus_per_node": "8", "tp": "1", "pp": "1", "zero_fsdp": "FSDP2 (fully_shard)",
          "activation_recompute": "selective", "global_batch_size": "16",
          "micro_batch_size": "2", "seq_len": "8192", "iteration_time_s": "2.0"}


@pytest.mark.parametrize(("precision", "recipe"), [
    ("FP8 (Float8; scaling recipe not stated)", "current"),  # torchao: dynamic
    ("FP8 (Float8 tensorwise)", "current"),
    ("FP8 (Float8 rowwise)", "rowwise"),
    ("FP8 (delayed scaling)", "delayed"),  # the cell's word wins
])
def test_torchtitan_fp8_rows_scale_dynamically(precision: str, recipe: str) -> None:
    case = map_row({**_TITAN, "precision": precision})
    assert case.framework == "torchtitan"
    assert {run.parallel.fp8_recipe for grp in case.candidates for run in grp} == {recipe}
    assert f"FP8 scaling recipe: {recipe}" in " ".join(case.assumptions)


def test_rowwise_recipe_casts_each_operand_twice_and_rescales_backward_outputs() -> None:
    """torchao row-wise scaling on H100, by hand: an activation operand is cast along both
    axes (read 2 B, write 1 B + a transposed 2 B copy; read 2 B, write 1 B: 8 B per element,
    two kernels) in place of the delayed recipe's 4 B cast-transpose (one kernel); each
    backward GEMM's output is rescaled by a kernel of its own (read + write BF16: 4 B per
    element); the forward GEMM runs the CUTLASS row-scaled kernel at 0.95 of the per-tensor
    cuBLAS speed."""
    gpu = load_gpu("h100")
    cm = ComputeModel(gpu)
    m, n, k = 8192.0, 2048.0, 4096.0
    fwd = _gemm(m, n, k, 1)
    flop_time = fwd.flops / (gpu.peak_flops("fp8") * cm.gemm_efficiency(m, n, k, "fp8"))
    assert cm.time(replace(fwd, fp8_scaling="rowwise")) - cm.time(fwd) == pytest.approx(
        flop_time * (1 / 0.95 - 1) + m * k * (8 - 4) / H100_STREAM + OVERHEAD, rel=1e-9)
    dgrad = _gemm(m, k, n, 1, role="dgrad")  # output m × k, quantized operand m × n
    assert cm.time(replace(dgrad, fp8_scaling="rowwise")) - cm.time(dgrad) == pytest.approx(
        m * n * (8 - 4) / H100_STREAM + OVERHEAD + m * k * 4 / H100_STREAM + OVERHEAD,
        rel=1e-9)
    wgrad = _gemm(k, n, m, 1, role="wgrad")  # output k × n, operands already cast
    assert cm.time(replace(wgrad, fp8_scaling="rowwise")) - cm.time(wgrad) == pytest.approx(
        k * n * 4 / H100_STREAM + OVERHEAD, rel=1e-9)
    # a BF16 GEMM ignores the recipe
    bf16 = _gemm(m, n, k, 1, precision="bf16")
    assert cm.time(replace(bf16, fp8_scaling="rowwise")) == cm.time(bf16)


def test_rowwise_plan_is_slower_than_tensorwise() -> None:
    kw = dict(model="llama3-8b", gpu="h100", num_gpus=8, global_batch_size=8, dtype="fp8",
              tp=2, zero_stage=1)
    t = {r: simulate_run(build_run(**kw, fp8_recipe=r)).step_time_s
         for r in ("current", "rowwise")}
    assert t["current"] is not None and t["rowwise"] is not None
    assert t["rowwise"] > t["current"]
