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
    # parts of published runs the catalog gained later (A100 PCIe, MI210, Trainium, Ironwood)
    "a100-80gb-pcie": ("a100-80gb", 312.0, None, 80, 1.935,
                       "NVIDIA A100 datasheet, A100 80GB PCIe column"),
    "mi210": ("mi250x", 181.0, None, 64, 1.6384, "AMD MI210 specifications (AnandTech table)"),
    "trainium": ("a100-80gb", 190.0, 190.0, 32 * 2**30 / 1e9, 0.82,
                 "AWS Neuron 'Trainium Architecture' (32 GiB, 820 GB/s)"),
    "trainium2": ("h100-sxm", 667.0, 1299.0, 96 * 2**30 / 1e9, 2.9,
                  "AWS Neuron 'Trainium2 Architecture' (96 GiB, 2.9 TB/s)"),
    "tpu-v7": ("tpu-v6e", 2307.0, 4614.0, 192 * 2**30 / 1e9, 7.38,
               "Google Cloud TPU7x docs (192 GiB, 7,380 GB/s)"),
}

#: measured fractions an entry states itself (the rest is its sibling's): TPUs XLA's bf16
#: 8192^3 matmul on a v5e, 181.8 of 197 TFLOP/s (JAX Pallas TPU matmul guide); the MI325X AMD's
#: Max-Achievable FLOPs at 1,000 W, 843 BF16 / 1,519 FP8 TFLOP/s (ROCm blog "Measuring
#: Max-Achievable FLOPs - Part 2", Table 1) of its 1,307.4 / 2,614.9 peaks; the A100 80GB PCIe
#: its BF16 MAMF, 252.9 of 312 TFLOP/s (stas00/ml-engineering MAMF table)
OWN = {"mi325x": {"gemm_max": 843 / 1307.4, "gemm_max_fp8": 1519 / 2614.9},
       "a100-80gb-pcie": {"gemm_max": 252.9 / 312}}


@pytest.mark.parametrize("name", sorted(PARTS))
def test_datasheet_figures(name: str) -> None:
    _, bf16, fp8, cap, bw, _ = PARTS[name]
    gpu = load_gpu(name)
    assert gpu.peak_tflops["bf16"] == pytest.approx(bf16)
    assert gpu.peak_tflops.get("fp8") == (pytest.approx(fp8) if fp8 else None)
    assert gpu.hbm_capacity_GB == pytest.approx(cap, abs=0.005)
    assert gpu.hbm_bandwidth_TBps == pytest.approx(bw)
    assert load_topology(gpu.default_topology).name == gpu.default_topology


@pytest.mark.parametrize("name", sorted(PARTS))
def test_sibling_rule(name: str) -> None:
    gpu, sibling = load_gpu(name), load_gpu(PARTS[name][0])
    assert gpu.efficiency_from == PARTS[name][0]
    # parts state measured fields of their own (OWN), the rest is the sibling's
    own = {"gemm_max": 181.823 / 197.0} if name.startswith("tpu-") else OWN.get(name, {})
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


#: part -> (its usual system, chips per scale-up domain, scale-up GB/s per direction, scale-out
#: Gb/s per chip, torus dims or None): NVIDIA A100 datasheet (NVLink bridge 600 GB/s for 2 GPUs;
#: one 200 Gb/s NIC per pair assumed); MI210 3 Infinity Fabric links x 50 GB/s per direction in
#: 4-card bridge hives; AWS Neuron trn1-arch / trn2-arch (16 chips on a 4x4 2D torus,
#: NeuronLink 384 / 1,024 GB/s per device read as bidirectional, EFA 800 / 3,200 Gb/s per
#: instance); Cloud TPU7x docs (9,216-chip pod, ICI 1,200 GB/s bidirectional, DCN 100 Gb/s)
SYSTEMS = {
    "a100-80gb-pcie": ("pcie-a100-nvlink-bridge", 2, 600 / 2, 200 / 2, None),
    "mi210": ("mi210-if-bridge", 4, 3 * 50, 200 / 2, None),
    "trainium": ("aws-trn1", 16, 384 / 2, 800 / 16, (4, 4)),
    "trainium2": ("aws-trn2", 16, 1024 / 2, 3200 / 16, (4, 4)),
    "tpu-v7": ("tpu-v7-pod", 9216, 1200 / 2, 100, None),
}
#: the instances beside a part's usual one: trn1n.32xlarge (NeuronLink 768 GB/s per device,
#: 1,600 Gb/s EFA) and the Trn2 UltraServer (four trn2u.48xlarge: 64 chips, 1,024 + 256 GB/s
#: NeuronLink per device, a ring across the four 4x4 tori)
OTHER_SYSTEMS = {
    "aws-trn1n": (16, 768 / 2, 1600 / 16, (4, 4)),
    "aws-trn2-ultraserver": (64, (1024 + 256) / 2, 3200 / 16, (4, 4, 4)),
}


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_new_parts_run_on_their_documented_systems(name: str) -> None:
    topo_name, domain, up, out, dims = SYSTEMS[name]
    topo = load_topology(load_gpu(name).default_topology)
    assert topo.name == topo_name
    assert topo.scale_up.domain_size == domain  # type: ignore[union-attr]
    assert topo.scale_up.bandwidth_GBps == pytest.approx(up)  # type: ignore[union-attr]
    assert topo.scale_out.nic_bandwidth_Gbps == pytest.approx(out)  # type: ignore[union-attr]
    torus = topo.scale_up.torus  # type: ignore[union-attr]
    assert (tuple(torus.dims) if torus else None) == dims


@pytest.mark.parametrize("name", sorted(OTHER_SYSTEMS))
def test_other_trainium_instances(name: str) -> None:
    domain, up, out, dims = OTHER_SYSTEMS[name]
    topo = load_topology(name)
    assert topo.scale_up.domain_size == domain  # type: ignore[union-attr]
    assert topo.scale_up.bandwidth_GBps == pytest.approx(up)  # type: ignore[union-attr]
    assert topo.scale_out.nic_bandwidth_Gbps == pytest.approx(out)  # type: ignore[union-attr]
    assert tuple(topo.scale_up.torus.dims) == dims  # type: ignore[union-attr]


def test_compiled_graph_parts_run_as_xla() -> None:
    """Trainium runs neuronx-cc-compiled XLA graphs, TPUs XLA programs; the PCIe GPUs CUDA/ROCm
    kernels launched one by one."""
    for name in ("trainium", "trainium2", "tpu-v7"):
        assert load_gpu(name).execution == "xla", name
    for name in ("a100-80gb-pcie", "mi210"):
        assert load_gpu(name).execution == "cuda", name


def test_the_pcie_a100_is_slower_than_the_sxm_module() -> None:
    """Same die and peaks: the card's lower HBM bandwidth (1,935 vs 2,039 GB/s) and measured
    matmul fraction (MAMF 81.1% vs 86.9%) cost time on one GPU, where the network plays no part."""
    plan = dict(model="llama3.2-1b", num_gpus=1, tp=1, pp=1, zero_stage=0, recompute="full",
                global_batch_size=1, micro_batch_size=1)
    pcie = simulate(gpu="a100-80gb-pcie", **plan)  # type: ignore[arg-type]
    sxm = simulate(gpu="a100-80gb", **plan)  # type: ignore[arg-type]
    assert pcie.feasible and sxm.feasible
    assert pcie.step_time_s is not None and sxm.step_time_s is not None
    assert pcie.step_time_s > sxm.step_time_s
