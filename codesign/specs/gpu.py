"""GPU (accelerator) spec: peak compute, memory, scale-up bandwidth and efficiency data."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from codesign.specs.base import Spec
from codesign.specs.tiers import HostTierSpec
from codesign.units import GB, TFLOPS, MiB, tBps_to_bytes_per_s

Dtype = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "fp4"]


class ComputeEfficiency(Spec):
    """Efficiency data of the compute model (fractions of datasheet peaks, dimensionless).

    GEMM time uses ``gemm_max × Π_d d/(d + gemm_half_dim)`` over the three GEMM dimensions,
    so large GEMMs approach ``gemm_max`` and thin ones lose efficiency (tile under-use).
    """

    gemm_max: float = Field(gt=0, le=1, description="fraction of dense peak of large GEMMs")
    gemm_max_fp8: float | None = Field(
        default=None, gt=0, le=1, description="the same for FP8 GEMMs; None = gemm_max")
    gemm_half_dim: float = Field(
        ge=0, description="GEMM dimension (elements) at which that dimension's factor is 1/2"
    )
    attention_fwd: float = Field(gt=0, le=1, description="fused attention forward, of peak")
    attention_bwd: float = Field(gt=0, le=1, description="fused attention backward, of peak")
    attention_fa2_fwd: float | None = Field(
        default=None, gt=0, le=1,
        description="FlashAttention-2 forward, of peak, on parts where a faster kernel sets "
                    "attention_fwd (FlashAttention-3/cuDNN on Hopper, FlashAttention-4 on "
                    "Blackwell); None = attention_fwd (FlashAttention-2 is the part's best)")
    attention_fa2_bwd: float | None = Field(
        default=None, gt=0, le=1,
        description="FlashAttention-2 backward, of peak; None = attention_bwd")
    attention_triton_fwd: float | None = Field(
        default=None, gt=0, le=1,
        description="Triton FlashAttention forward, of peak, where measured on this part; "
                    "None = FlashAttention-2 forward / TRITON_FA_SLOWDOWN (the A100 ratio)")
    attention_triton_bwd: float | None = Field(
        default=None, gt=0, le=1,
        description="Triton FlashAttention backward, of peak; None = FlashAttention-2 "
                    "backward / TRITON_FA_SLOWDOWN")
    attention_head_dim: float = Field(
        default=128, gt=0,
        description="head dimension at which the attention_* fractions were measured")
    memory_bound: float = Field(gt=0, le=1, description="fraction of HBM bandwidth streamed")
    kernel_overhead_us: float = Field(ge=0, description="launch and tail cost per kernel, us")
    graph_kernel_overhead_us: float | None = Field(
        default=None, ge=0,
        description="cost per kernel replayed from a captured CUDA graph (no host enqueue), "
                    "us; None = kernel_overhead_us less the host enqueue cost "
                    "(codesign.hardware.compute.graph_kernel_overhead_us)")
    host_issue_us: float | None = Field(
        default=None, ge=0,
        description="host time (framework dispatch and driver enqueue) to issue one eagerly "
                    "launched kernel, us: a training pass runs no faster than its host issues "
                    "it; None = codesign.hardware.compute.HOST_ISSUE_US")
    sustained_fraction: float = Field(
        default=1.0, gt=0, le=1.5,
        description="fraction of the microbenchmark GEMM/attention efficiencies sustained in "
                    "end-to-end training (clocks under the power limit, back-to-back kernels); "
                    "fitted by `codesign calibrate`")


class MeasuredTables(Spec):
    """Measured kernel data of a GPU: files the compute and network models interpolate.

    Each reference is a path relative to the directory of the YAML file that holds the GPU
    (catalog entries: the ``hardware/`` folder) or an absolute path. File formats are documented
    in :mod:`codesign.measured`. Where a table covers an operator its interpolated
    measurement replaces the roofline estimate; elsewhere the roofline is used.
    """

    gemm_csv: str | None = Field(default=None, description="m,n,k,dtype,time_us")
    attention_csv: str | None = Field(
        default=None, description="batch,seq_len,heads,head_dim,causal,direction,time_us"
    )
    memory_csv: str | None = Field(default=None, description="bytes,time_us")
    collectives_csv: str | None = Field(
        default=None, description="collective,group_size,size_bytes,time_us[,tier]"
    )
    kineto_trace: str | None = Field(
        default=None, description="PyTorch profiler (Kineto) chrome trace: GEMM and NCCL kernels"
    )
    source: str = Field(min_length=1, description="citation or command that produced the data")

    @model_validator(mode="after")
    def _check_any(self) -> MeasuredTables:
        if not any(self.files().values()):
            raise ValueError("name at least one of gemm_csv, attention_csv, memory_csv, "
                             "collectives_csv, kineto_trace")
        return self

    def files(self) -> dict[str, str | None]:
        """Field name -> file reference (``None`` where not given)."""
        return {"gemm_csv": self.gemm_csv, "attention_csv": self.attention_csv,
                "memory_csv": self.memory_csv, "collectives_csv": self.collectives_csv,
                "kineto_trace": self.kineto_trace}


class GpuSpec(Spec):
    """One device (GPU, CPU socket or other accelerator). Peaks are dense (no structured
    sparsity), per device; "HBM" fields hold the device's main memory (DDR for a CPU)."""

    kind: Literal["gpu", "cpu", "accelerator"] = Field(
        default="gpu", description="device class; every kind is priced by the same roofline")
    name: str
    aliases: tuple[str, ...] = ()
    vendor: str
    peak_tflops: dict[Dtype, float] = Field(description="dense peak TFLOP/s per dtype")
    hbm_capacity_GB: float = Field(gt=0, description="HBM capacity, decimal GB")
    hbm_bandwidth_TBps: float = Field(gt=0, description="HBM bandwidth, TB/s")
    hbm_total_MiB: float | None = Field(
        default=None, gt=0,
        description="memory.total the device reports (nvidia-smi), MiB; None = capacity_GB")
    scale_up_bandwidth_GBps: float = Field(
        gt=0, description="scale-up (NVLink/xGMI) bandwidth per GPU, per direction, GB/s"
    )
    default_topology: str = Field(description="catalog topology of this GPU's usual system")
    tdp_W: float | None = Field(default=None, gt=0, description="board power, W")
    price_usd_per_hour: float | None = Field(
        default=None, gt=0, description="cloud rental price per GPU, USD/hour (cite it)")
    price_usd: float | None = Field(
        default=None, gt=0,
        description="purchase price of one accelerator, USD (an estimate: cite it and its date)")
    efficiency: ComputeEfficiency
    attention_exp_head_dim: float | None = Field(
        default=None, gt=0,
        description="head dimension at which one softmax exponential (special-function unit) "
                    "costs as long as the forward's 4·d tensor-core FLOPs of its query-key "
                    "pair: dense BF16 tensor FLOPs per SM per clock / (4 × exponentials per "
                    "SM per clock); None = attention efficiency independent of head dim "
                    "(codesign.hardware.compute.attention_head_dim_factor)")
    execution: Literal["cuda", "xla"] = Field(
        default="cuda",
        description="how the step's kernels run: 'cuda' = one kernel per operator launched "
                    "from the host (each pays kernel_overhead_us), 'xla' = one compiled "
                    "program per step (TPUs: no host launch, so each op pays the graph "
                    "overhead; pointwise ops fused into their matmuls move only their "
                    "fused bytes, codesign.hardware.compute)")
    efficiency_from: str | None = Field(
        default=None,
        description="catalog GPU whose measured efficiency fractions this part takes (the "
                    "sibling rule, codesign.specs.catalog.derive_efficiency); None = measured "
                    "for this part")
    sources: dict[str, str] = Field(default_factory=dict, description="field -> citation")
    measured: MeasuredTables | None = Field(
        default=None, description="measured kernel tables interpolated before the roofline"
    )
    host_tier: HostTierSpec | None = Field(
        default=None,
        description="memory tier a training plan offloads to (host DRAM over PCIe, Grace "
                    "LPDDR5X over NVLink-C2C, a CXL pool), per GPU; None = no offload")

    @model_validator(mode="after")
    def _check_peaks(self) -> GpuSpec:
        if "bf16" not in self.peak_tflops and "fp16" not in self.peak_tflops:
            raise ValueError("peak_tflops needs at least 'bf16' or 'fp16'")
        for dtype, value in self.peak_tflops.items():
            if value <= 0:
                raise ValueError(f"peak_tflops.{dtype} must be > 0")
        return self

    @property
    def memory_bytes(self) -> float:
        """Device memory a framework can allocate, bytes (datasheet "80 GB" parts expose
        80 GiB: the reported total when known, else the datasheet capacity)."""
        if self.hbm_total_MiB is not None:
            return self.hbm_total_MiB * MiB
        return self.hbm_capacity_GB * GB

    @property
    def hbm_bytes_per_s(self) -> float:
        """HBM bandwidth in bytes/s."""
        return tBps_to_bytes_per_s(self.hbm_bandwidth_TBps)

    def peak_flops(self, dtype: str) -> float:
        """Dense peak in FLOP/s for ``dtype``; fp16 and bf16 stand in for each other."""
        table = self.peak_tflops
        if dtype in table:
            return table[dtype] * TFLOPS
        fallback = {"bf16": "fp16", "fp16": "bf16"}.get(dtype)
        if fallback and fallback in table:
            return table[fallback] * TFLOPS
        allowed = ", ".join(sorted(table))
        raise KeyError(f"GPU '{self.name}' has no {dtype} peak (has: {allowed})")
