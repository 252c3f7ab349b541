"""Accelerators added for published runs beyond the calibration set: datasheet peaks as cited,
efficiencies by the sibling rule (codesign.specs.catalog.derive_efficiency), and each one
simulates on its usual system."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from codesign.api import simulate
from codesign.errors import SpecError
from codesign.specs.catalog import derive_efficiency, load_gpu, load_topology

#: part -> (sibling, BF16 dense TFLOP/s, FP8 or None, HBM GB, HBM TB/s, citation)
PARTS = {
    "a100-40gb": ("a100-80gb", 312.0, None, 40, 1.555, "NVIDIA A100 datasheet"),
    "h800": ("h100-sxm", 989.4, 1978.9, 80, 3.35, "NVIDIA H800 SXM5 product brief"),
    "h20": ("h100-sxm", 148.0, 296.0, 96, 4.0, "NVIDIA HGX H20 specification"),
    "b300": ("b200", 2250.0, 4500.0, 288, 8.0, "NVIDIA HGX/DGX B300 specifications"),
    "gb300": ("gb200", 2500.0, 5000.0, 288, 8.0, "NVIDIA GB300 NVL72 specification"),
    "mi325x": ("mi300x", 1307.4, 2614.9, 256, 6.0, "AMD Instinct MI325X datasheet"),
    "mi355x": ("mi300x", 2516.6, 5033.2, 288, 8.0, "AMD Instinct MI355X datasheet"),
    "mi250x": ("mi300x", 191.5, None, 64, 1.6384, "AMD Instinct MI250X datasheet, per GCD"),
    "gaudi3": ("h100-sxm", 1835.0, 1835.0, 128, 3.7, "Intel Gaudi 3 white paper"),
    "tpu-v4": ("a100-80gb", 275.0, None, 34.4, 1.2, "Google Cloud TPU v4 docs (32 GiB)"),
    "tpu-v5p": ("a100-80gb", 459.0, None, 102.0, 2.765, "Google Cloud TPU v5p docs (95 GiB)"),
    "tpu-v5e": ("a100-80gb", 197.0, None, 17.2, 0.819, "Google Cloud TPU v5e docs (16 GiB)"),
    "tpu-v6e": ("h100-sxm", 918.0, None, 34.4, 1.64, "Google Cloud TPU v6e docs (32 GiB)"),
}


@pytest.mark.parametrize("name", sorted(PARTS))
def test_datasheet_figures(name: str) -> None:
    _, bf16, fp8, cap, bw, _ = PARTS[name]
    gpu = load_gpu(name)
    assert gpu.peak_tflops["bf16"] == pytest.approx(bf16)
    assert gpu.peak_tflops.get("fp8") == (pytest.approx(fp8) if fp8 else None)
    assert gpu.hbm_capacity_GB == cap and gpu.hbm_bandwidth_TBps == pytest.approx(bw)
    assert load_topology(gpu.default_topology).name == gpu.default_topology


@pytest.mark.parametrize("name", sorted(PARTS))
def test_sibling_rule(name: str) -> None:
    gpu, sibling = load_gpu(name), load_gpu(PARTS[name][0])
    assert gpu.efficiency_from == PARTS[name][0]
    # parts state measured fields of their own, the rest is the sibling's: TPUs XLA's bf16
    # 8192^3 matmul on a v5e, 181.8 of 197 TFLOP/s (JAX Pallas TPU matmul guide); the
    # MI325X AMD's Max-Achievable FLOPs at 1,000 W, 843 BF16 / 1,519 FP8 TFLOP/s (ROCm blog
    # "Measuring Max-Achievable FLOPs - Part 2", Table 1) of its 1,307.4 / 2,614.9 peaks
    own = ({"gemm_max": 181.823 / 197.0} if name.startswith("tpu-") else
           {"gemm_max": 843 / 1307.4, "gemm_max_fp8": 1519 / 2614.9} if name == "mi325x"
           else {})
    for field, value in own.items():
        assert getattr(gpu.efficiency, field) == pytest.approx(value, abs=5e-4)
    same = {field: getattr(sibling.efficiency, field) for field in own}
    assert gpu.efficiency.model_copy(update=same) == sibling.efficiency
    assert "ASSUMPTION" in gpu.sources["efficiency"]


def test_an_entry_overrides_single_sibling_fields(tmp_path: Path) -> None:
    data = yaml.safe_load(Path(__file__).parents[1].joinpath("hardware/h800.yaml").read_text())
    data["efficiency"] = {"gemm_max": 0.5}
    out = derive_efficiency(data, "test")
    h100 = load_gpu("h100-sxm").efficiency
    assert out["efficiency"]["gemm_max"] == 0.5
    assert out["efficiency"]["memory_bound"] == h100.memory_bound
    with pytest.raises(SpecError, match="unknown gpu"):
        derive_efficiency({**data, "efficiency_from": "no-such-gpu"}, "test")


@pytest.mark.parametrize("name", sorted(PARTS))
def test_each_part_simulates_on_two_nodes(name: str) -> None:
    r = simulate(model="llama3-8b", gpu=name, num_gpus=16, tp=4, pp=1, zero_stage=3,
                 recompute="full", global_batch_size=64, micro_batch_size=1)
    assert r.feasible, r.reason
    assert r.mfu is not None and 0.05 < r.mfu < 0.8
