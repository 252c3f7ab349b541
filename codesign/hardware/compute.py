"""Compute cost model: roofline with measured-style efficiency curves.

An operator's time is::

    max(executed FLOPs / (peak[dtype] × efficiency(shape)),
        HBM bytes / (HBM bandwidth × memory_bound efficiency)) + kernel overhead

GEMM efficiency is ``gemm_max × Π_{x∈(m,n,k)} x / (x + gemm_half_dim)`` (``gemm_max_fp8`` for
FP8; FP4 takes ``gemm_max``, see below): large GEMMs approach the measured large-GEMM fraction
of peak, thin ones lose it to tile under-use. A grouped GEMM of ``count`` kernels pays
``count`` kernel overheads. An FP8 or FP4 forward or input-gradient GEMM also pays the
Transformer Engine quantization of its activation operand (``FP8_CAST_BYTES`` /
``FP4_CAST_BYTES`` per element, one extra kernel overhead), which also writes the transposed
copy the weight-gradient GEMM reads; under per-tensor current scaling (``fp8_recipe``
"current") each quantized tensor (each expert's split of a grouped GEMM) also pays an amax pass
and a scale kernel (``CURRENT_SCALING_*``); under torchao's row-wise recipe each quantized
tensor is cast along both axes (``ROWWISE_CAST_*``), the forward GEMM runs the CUTLASS
row-scaled kernel (``ROWWISE_GEMM_FRACTION``) and each backward GEMM's output is rescaled by a
kernel of its own (``ROWWISE_RESCALE_BYTES``). FP4 GEMMs run at the FP4 peak times ``gemm_max``
(ASSUMPTION: no FP4 max-achievable-matmul measurement per part; Azure's ND GB200 v6 cuBLASLt
FP4 16384³ run reached 0.76 of peak, ``hardware/gb200.yaml``, beside ``gemm_max`` 0.73). GEMM
and attention efficiencies are multiplied by the GPU's ``sustained_fraction``: microbenchmarks
run short bursts at boost clock, training runs for hours at the power limit (fitted by
``codesign calibrate``). Fused attention uses its own measured forward/backward fractions,
those of the part's fastest kernel unless the plan names an older one
(:func:`attention_fractions`: FlashAttention-2, the 2022-23 Triton FlashAttention, v1).
Causal flash attention executes about half of the conventional FLOPs (masked tiles are skipped)
and its backward executes 2.5× the forward matmul FLOPs (it recomputes the scores), while
convention counts 2× (FlashAttention-2, Dao 2023, Sec. 4 benchmark methodology); efficiencies
are relative to the executed FLOPs.

XLA execution (``GpuSpec.execution == "xla"``, TPUs). XLA compiles the whole training step
into one program (``jax.jit``: "under a jax.jit, they compile into a single program", JAX docs
new_docs/301/vjp-objects.md) that the chip's scalar core sequences itself, issuing the
HBM->VMEM DMAs and the MXU/VPU instructions (scaling book, jax-ml.github.io/scaling-book/tpus,
Appendix C "TPU internals"): no operator pays a host enqueue, so each costs the kernel
overhead less :data:`HOST_LAUNCH_US` (:func:`graph_kernel_overhead_us`, as a replayed CUDA
graph node). XLA fuses pointwise work into the neighbouring matmul: "A dot or fusion op is a
set of operations containing at most 1 matrix multiplication and possibly a bunch of related
pointwise VPU-ops" (scaling book, /profiling, "Op Name"), and the fused op's intermediates
stay in VMEM ("Fusion is XLA's single most important optimization ... does not write out the
intermediate values", TensorFlow XLA overview, tensorflow.org/xla). A memory operator that carries
``fused_bytes`` (:attr:`codesign.ir.Op.fused_bytes`, set by the layer templates) is then
priced on those bytes alone and pays no overhead (it is no kernel of its own). ASSUMPTION
(conservative): those bytes are added to the matmul's time rather than hidden under it when
the matmul is compute-bound.

Measured tables. With ``tables`` (:class:`~codesign.measured.MeasuredKernels`, loaded
by :meth:`ComputeModel.from_gpu` from the GPU's ``measured`` files) an operator the tables cover
takes the interpolated measured time (the whole kernel time: no overhead is added) and
:meth:`ComputeModel.source` reports ``"measured"``; every other operator is priced by the
roofline above, exactly as without tables. GEMMs are looked up by (m, n, k, dtype) (times the
operator's ``count`` of identical kernels, for grouped GEMMs), memory
kernels by bytes, and fused attention by (batch·heads, seq_len, head_dim, causal, direction)
when the operator carries that shape (``Op.attn_shape``; not under context parallelism, where
queries and keys differ in length, so those are priced by the roofline).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from codesign.ir import Op
from codesign.measured import MeasuredKernels
from codesign.specs.gpu import ComputeEfficiency, GpuSpec
from codesign.specs.inference import DTYPE_BYTES
from codesign.specs.parallel import AttentionKernel, Fp8Recipe
from codesign.units import US

#: executed / conventional FLOPs of a causal fused attention kernel (forward)
CAUSAL_FRACTION = 0.5
#: executed / conventional FLOPs of fused attention backward (2.5 × fwd vs 2 × fwd)
FLASH_BWD_RECOMPUTE = 1.25
#: FlashAttention-2's speed over the 2022-23 Triton FlashAttention (``flash_attn_triton``,
#: MosaicML llm-foundry ``attn_impl: triton``), (forward, backward), A100: "around 1.3-1.5×
#: faster than FlashAttention in Triton in the forward pass and around 2× faster in the
#: backward pass" (Dao 2023, arXiv 2307.08691, Sec. 4.1; 1.4 = mid-range). Used where the
#: part has no measured Triton fractions (``attention_triton_fwd`` / ``_bwd``): on Hopper
#: FlashAttention-2 lacks the new tensor-core instructions and Triton is not slower.
TRITON_FA_SLOWDOWN = (1.4, 2.0)
#: FlashAttention-2's speed over FlashAttention v1, (forward, backward): "around 2× faster
#: than FlashAttention" (same section; 1.7-3.0× over its benchmark grid). ASSUMPTION: these
#: A100 ratios hold on every part (no other published comparison of the old kernels).
FA1_SLOWDOWN = (2.0, 2.0)
#: attention kernel families a plan can name (``ParallelismSpec.attention_kernel``)
ATTENTION_KERNELS: tuple[str, ...] = get_args(AttentionKernel)
#: HBM bytes per element of the cast(-transpose) kernel that feeds an FP8 GEMM operand
#: (Transformer Engine): read bf16 (2 B), write FP8 (1 B) and its transpose (1 B)
FP8_CAST_BYTES = 4.0
#: HBM bytes per element of the quantization that feeds an NVFP4 GEMM operand (Transformer
#: Engine NVFP4 recipe, docs "NVFP4"): an amax kernel reads the bf16 tensor (2 B) for the FP32
#: per-tensor scale, which NVFP4 computes from the tensor itself (global_amax / (448 × 6));
#: the cast kernel reads it again (2 B) and writes a rowwise and a columnwise (transposed)
#: NVFP4 copy (2 × 0.5625 B: 4-bit E2M1 values plus one E4M3 scale per 16,
#: ``DTYPE_BYTES["fp4"]``). NVFP4 GEMMs take only the TN layout, so the wgrad GEMM needs the
#: columnwise copy, quantized after the 16×16 random Hadamard transform. ASSUMPTION: the
#: amax of the rotated and of the plain tensor come from one read, and the Hadamard transform
#: runs inside the cast kernel without making it compute-bound (TE fuses both).
FP4_CAST_BYTES = 2.0 + 2.0 + 2.0 * DTYPE_BYTES["fp4"]
#: cast bytes per element of a quantized GEMM operand, by GEMM precision
CAST_BYTES: dict[str, float] = {"fp8": FP8_CAST_BYTES, "fp4": FP4_CAST_BYTES}
#: FP8 per-tensor current scaling ("FP8-CS"): Transformer Engine's
#: ``Float8CurrentScalingQuantizer::quantize_impl`` (transformer_engine/pytorch/csrc/
#: quantizer.cpp) runs ``nvte_compute_amax`` (one more read of the BF16 operand: 2 B per
#: element), ``nvte_compute_scale_from_amax`` ("compute scale cannot be fused with quantize
#: kernel") and the cast: three kernels per tensor. A grouped GEMM quantizes every expert's
#: split by itself: ``multi_quantize_impl`` (pytorch/csrc/extensions/cast.cpp) has a fused
#: multi-tensor kernel only for delayed scaling ("Quantize kernels individually" otherwise).
CURRENT_SCALING_AMAX_BYTES = 2.0
CURRENT_SCALING_KERNELS = 3
#: torchao's "rowwise" recipe (``Float8LinearRecipeName.ROWWISE``: "dynamic rowwise scaling
#: with the CUTLASS rowwise kernel"). Each GEMM scales its operands along the reduced axis,
#: so an activation (input or output gradient) is cast twice, once per axis: kernel 1 reads
#: the BF16 tensor (2 B), writes its FP8 copy scaled by row (1 B) and a transposed BF16 copy
#: (2 B); kernel 2 reads that copy (2 B) and writes the FP8 copy scaled along the other axis
#: (1 B); the row amaxes are reductions inside the kernels (torchao
#: ``torchao/float8/roofline_utils.py``, ``get_tensor_memory_traffic_ovhd_s``, "rowwise":
#: "assume that we can't fuse 1 and 2 because that would require loading the entire tensor
#: to shared memory")
ROWWISE_CAST_BYTES = 2.0 + 1.0 + 2.0 + 2.0 + 1.0
ROWWISE_CAST_KERNELS = 2
#: the backward GEMMs of the rowwise recipe accumulate in FP32 (no fast accumulation), where
#: "the rowwise CUTLASS-based kernel is so slow without fast-accum" that torchao runs the
#: cuBLAS per-tensor GEMM and applies the row scales to its output afterwards (pytorch/ao PR
#: #1325, ``addmm_float8_unwrapped``), "at least one extra triton kernel per GEMM ... just for
#: the rescaling" (pytorch/ao issue #2184): that kernel reads and writes the BF16 output
#: (2 + 2 B per output element)
ROWWISE_RESCALE_BYTES = 4.0
#: speed of the forward CUTLASS row-scaled FP8 GEMM (fast accumulation) relative to the cuBLAS
#: per-tensor one on H100: "Most shapes are within 90-100% of tensor-wise efficiency, but
#: there's a long tail going down to 50%" (pytorch/pytorch issue #147971, after PR #134781's
#: tile heuristics). ASSUMPTION: the middle of the stated bulk, 0.95, on every part (no
#: per-shape table is published as text)
ROWWISE_GEMM_FRACTION = 0.95

#: Host enqueue cost of one kernel launch (``cudaLaunchKernel``), us: what a kernel launched
#: from a stream pays on top of the GPU-side cost when the GPU runs faster than the host
#: issues, and what a CUDA graph replay removes. Measured async enqueue 2.62-2.81 us per
#: launch (no-op kernels, CUDA 13.3; ahrefs/ocannl issue #488, 'Measured: what graph replay
#: is actually worth'); ASSUMPTION: the same host path on the H100/A100 hosts of the catalog
#: (the enqueue is host-CPU and driver work, not GPU work).
HOST_LAUNCH_US = 2.7
#: GPU-side floor per node of a replayed CUDA graph, us: ~0.58 us per no-op kernel node
#: (same measurement; NVIDIA's "Getting Started with CUDA Graphs" blog, 2019, gives 3.4 us
#: per 2.9 us kernel with a graph, i.e. ~0.5 us between nodes on a V100)
GRAPH_NODE_US = 0.6

#: Host time to issue one eagerly launched kernel, us (``ComputeEfficiency.host_issue_us``
#: overrides it per GPU): the PyTorch / Transformer Engine dispatch of the operator plus the
#: driver enqueue (:data:`HOST_LAUNCH_US` of it), for each kernel codesign counts
#: (:func:`kernels`). A pass on the compute stream cannot run ahead of the host that issues it
#: (:func:`codesign.engine.chunk.op_tasks`), and a host synchronization (dropless MoE split
#: sizes) drains the queue the host had built, so many small kernels make a pass host-bound.
#: FITTED (golden section on |log error|, as ``codesign calibrate`` fits
#: ``sustained_fraction``) on the one visible training row whose step it binds: T089,
#: Qwen3-30B-A3B on 16 H100 with FP8 current scaling (Megatron-Bridge 25.11; 16 experts per
#: rank, each expert's operands quantized by three kernels of its own). It is a lumped figure
#: per *counted* kernel: codesign counts one kernel per operator where the framework runs
#: several small ones (router scores, auxiliary losses, permutation indices, hooks), so it is
#: larger than the bare launch. Out-of-sample check, not fitted: the same software on B200
#: (DGX B200 Xeon host) and the FP8 delayed-scaling twin of T089; see docs/validation.md.
#: ASSUMPTION: one value for every catalog host CPU (x86 DGX hosts and Grace).
HOST_ISSUE_US = 79.0

Source = Literal["measured", "model"]


def graph_kernel_overhead_us(gpu: GpuSpec) -> float:
    """Fixed cost (us) of a kernel replayed from a captured CUDA graph: the GPU's own
    ``graph_kernel_overhead_us`` when it states one, else its ``kernel_overhead_us`` (the
    fixed cost of back-to-back stream launches, host enqueue included) less the host enqueue
    :data:`HOST_LAUNCH_US`, never below the graph node floor :data:`GRAPH_NODE_US` (nor
    above ``kernel_overhead_us``)."""
    eff = gpu.efficiency
    if eff.graph_kernel_overhead_us is not None:
        return eff.graph_kernel_overhead_us
    return min(eff.kernel_overhead_us, max(eff.kernel_overhead_us - HOST_LAUNCH_US,
                                           GRAPH_NODE_US))


def host_issue_us(gpu: GpuSpec) -> float:
    """Host time (us) to issue one kernel of a training pass: 0 under XLA execution (the chip
    sequences its compiled program), else the GPU's ``host_issue_us`` or
    :data:`HOST_ISSUE_US`."""
    if gpu.execution == "xla":
        return 0.0
    own = gpu.efficiency.host_issue_us
    return HOST_ISSUE_US if own is None else own


def attention_fractions(eff: ComputeEfficiency,
                        kernel: AttentionKernel | str = "auto") -> tuple[float, float]:
    """(forward, backward) fraction of bf16 peak reached by fused attention kernel ``kernel``
    (before ``sustained_fraction``): ``auto`` = the part's fastest kernel (``attention_fwd`` /
    ``attention_bwd``); ``fa2`` = FlashAttention-2 (``attention_fa2_*``, which default to
    the fastest where FlashAttention-2 is it); ``triton`` = the part's measured Triton
    FlashAttention (``attention_triton_*``), else FlashAttention-2 divided by
    :data:`TRITON_FA_SLOWDOWN`; ``fa1`` = FlashAttention-2 divided by :data:`FA1_SLOWDOWN`."""
    if kernel == "auto":
        return eff.attention_fwd, eff.attention_bwd
    fwd = eff.attention_fa2_fwd if eff.attention_fa2_fwd is not None else eff.attention_fwd
    bwd = eff.attention_fa2_bwd if eff.attention_fa2_bwd is not None else eff.attention_bwd
    if kernel == "fa2":
        return fwd, bwd
    if kernel not in ATTENTION_KERNELS:
        raise ValueError(f"unknown attention kernel {kernel!r}; allowed: "
                         f"{', '.join(ATTENTION_KERNELS)}")
    if kernel == "triton":
        return (eff.attention_triton_fwd or fwd / TRITON_FA_SLOWDOWN[0],
                eff.attention_triton_bwd or bwd / TRITON_FA_SLOWDOWN[1])
    return fwd / FA1_SLOWDOWN[0], bwd / FA1_SLOWDOWN[1]


#: backward / forward tensor-core FLOPs per query-key pair of fused attention (5 matmuls of
#: 2d against 2; FlashAttention-2, Dao 2023, Sec. 3.1.2), each pair recomputing one exponential
ATTENTION_BWD_MMA_RATIO = 2.5


def attention_head_dim_factor(gpu: GpuSpec, measured: float, head_dim: float | None,
                              backward: bool) -> float:
    """Fused-attention efficiency at ``head_dim`` relative to ``measured``, the kernel's
    fraction of peak at the head dim it was measured at (``gpu.efficiency.attention_head_dim``).

    Each query-key pair costs ``4·d`` tensor-core FLOPs forward (``2.5×`` that backward) and
    one exponential on the special-function units, which run beside the tensor cores but do
    not overlap them fully. Serialized: a pair takes ``4d/(P·η) + 1/X`` (``P`` the tensor
    peak, ``η`` the kernel's matmul efficiency, ``X`` the exponential rate), an efficiency
    ``1 / (1/η + c/d)`` with ``c`` = ``gpu.attention_exp_head_dim`` = ``P / 4X`` (``c / 2.5``
    backward). ``1/η`` follows from the measured fraction ``m``: ``1/m − c/d_ref``, at least 1
    (a kernel that beats the serialized bound, such as FlashAttention-4 overlapping
    exponentials with matmuls, is taken at ``η = 1``). Derived, not fitted: ``c`` = tensor
    FLOPs per SM per clock / (4 × 16 MUFU.EX2 per SM per clock): 64 on Hopper
    (FlashAttention-3, Shah et al. 2024, Sec. 3: 989 TFLOPS of matmul against 3.9 TFLOPS of
    special functions), 128 on Blackwell, whose tensor cores doubled and exponential units did
    not (FlashAttention-4, arXiv 2603.05451). Checked against measurements it was not fitted
    to: FlashAttention-3 on H100 head dim 64 / 128 forward 497 / 648 TFLOP/s = 0.77 (model
    0.78 from the catalog's 0.55), 256 / 128 756 / 648 = 1.17 (model 1.16); FlashAttention-4
    on B200 causal seq 4096 708 / 1062 TFLOP/s = 0.667 (model 0.667; Dao-AILab/
    flash-attention PR #2605). 1.0 when the part has no ``c`` or the operator no head dim."""
    c = gpu.attention_exp_head_dim
    if c is None or not head_dim:
        return 1.0
    if backward:
        c /= ATTENTION_BWD_MMA_RATIO
    ref = gpu.efficiency.attention_head_dim
    inv_eta = max(1.0 / measured - c / ref, 1.0)
    return (inv_eta + c / ref) / (inv_eta + c / head_dim)


def _scaling(op: Op) -> Fp8Recipe:
    """The FP8 scaling recipe that prices ``op``'s quantization ("delayed" unless FP8)."""
    return op.fp8_scaling if op.precision == "fp8" else "delayed"


def cast_kernels(op: Op) -> float:
    """Quantization kernels an FP8/FP4 GEMM launches for its activation operand (forward and
    input-gradient GEMMs; 0 otherwise): one cast(-transpose) kernel, or per quantized tensor
    (each expert's split by itself) three under FP8 current scaling (amax, scale, cast) and
    two under row-wise scaling (one cast per axis)."""
    if op.kind != "gemm" or op.precision not in CAST_BYTES or op.role not in ("fwd", "dgrad"):
        return 0.0
    scaling = _scaling(op)
    if scaling == "current":
        return CURRENT_SCALING_KERNELS * op.count
    if scaling == "rowwise":
        return ROWWISE_CAST_KERNELS * op.count
    return 1.0


def cast_bytes(op: Op) -> float:
    """HBM bytes per element of the operand :func:`cast_kernels` quantize: the cast(-transpose)
    (:data:`CAST_BYTES`), plus the amax read under FP8 current scaling, or the two per-axis
    casts of the row-wise recipe (:data:`ROWWISE_CAST_BYTES`)."""
    scaling = _scaling(op)
    if scaling == "rowwise":
        return ROWWISE_CAST_BYTES
    extra = CURRENT_SCALING_AMAX_BYTES if scaling == "current" else 0.0
    return CAST_BYTES[op.precision] + extra


def rescale_kernels(op: Op) -> float:
    """Kernels that apply row scales to a backward FP8 GEMM's output (row-wise recipe:
    :data:`ROWWISE_RESCALE_BYTES`), one per GEMM; 0 otherwise."""
    if op.kind != "gemm" or op.role not in ("dgrad", "wgrad") or _scaling(op) != "rowwise":
        return 0.0
    return op.count


def kernels(op: Op) -> float:
    """Compute kernels the host launches for ``op``: a GEMM's ``count`` plus its quantization
    (:func:`cast_kernels`) and output rescaling (:func:`rescale_kernels`); one for a memory
    or attention operator; none for a collective, which keeps its overlap rule's timing
    (:func:`codesign.engine.chunk.op_tasks`)."""
    if op.kind == "gemm":
        return op.count + cast_kernels(op) + rescale_kernels(op)
    return 0.0 if op.kind == "comm" else 1.0


def op_overhead_us(gpu: GpuSpec) -> float:
    """Fixed cost (us) of one operator run eagerly: ``kernel_overhead_us`` (a host-launched
    kernel) under CUDA execution; under XLA execution the same less the host enqueue
    (:func:`graph_kernel_overhead_us`: the chip sequences its one compiled program itself)."""
    if gpu.execution == "xla":
        return graph_kernel_overhead_us(gpu)
    return gpu.efficiency.kernel_overhead_us


@dataclass(frozen=True)
class ComputeModel:
    """Prices compute operators on one GPU (seconds).

    ``tables``: measured kernel tables consulted before the roofline (see module docstring).
    ``attention_kernel``: the fused attention kernel family (:func:`attention_fractions`);
    measured attention tables price only ``auto`` (the part's own kernel).
    """

    gpu: GpuSpec
    tables: MeasuredKernels | None = field(default=None, kw_only=True)
    attention_kernel: AttentionKernel = field(default="auto", kw_only=True)

    @classmethod
    def from_gpu(cls, gpu: GpuSpec, base_dir: str | Path | None = None, *,
                 attention_kernel: AttentionKernel = "auto") -> ComputeModel:
        """Model of ``gpu`` with its measured tables loaded, if it names any.

        Relative table paths resolve against ``base_dir``: the directory of the YAML file that
        defines the GPU (:func:`codesign.specs.catalog.gpu_base_dir`); the working directory
        when ``None``.
        """
        tables = (None if gpu.measured is None
                  else MeasuredKernels.from_spec(gpu.measured, base_dir))
        return cls(gpu, tables=tables, attention_kernel=attention_kernel)

    def gemm_efficiency(self, m: float, n: float, k: float, dtype: str = "bf16") -> float:
        """Fraction of dense peak (of ``dtype``) reached by an (m×k)·(k×n) GEMM."""
        eff = self.gpu.efficiency
        half = eff.gemm_half_dim
        factor = 1.0
        for x in (m, n, k):
            factor *= x / (x + half)
        top = eff.gemm_max_fp8 if dtype == "fp8" and eff.gemm_max_fp8 else eff.gemm_max
        return top * eff.sustained_fraction * factor

    def executed_flops(self, op: Op) -> float:
        """FLOPs the kernel actually runs (see module docstring)."""
        if op.kind != "attention":
            return op.flops
        flops = op.flops
        if op.causal:
            flops *= CAUSAL_FRACTION
            if op.backward:
                flops *= FLASH_BWD_RECOMPUTE
        return flops

    def measured_time(self, op: Op) -> float | None:
        """Seconds of ``op`` from the measured tables, or ``None`` where they do not cover it."""
        tables = self.tables
        if tables is None:
            return None
        if op.kind == "gemm" and tables.gemm is not None and op.mnk is not None:
            one = tables.gemm.lookup(*op.mnk, op.precision)
            # a grouped GEMM runs ``count`` kernels of shape ``mnk``
            return None if one is None else one * op.count
        if op.kind == "memory" and tables.memory is not None:
            return tables.memory.lookup(op.bytes)
        if (op.kind == "attention" and tables.attention is not None
                and self.attention_kernel == "auto"):
            shape = op.attn_shape
            if shape is not None:
                bh, seq, head_dim = shape
                return tables.attention.lookup(bh, seq, head_dim, op.causal, op.backward)
        return None

    def time_and_source(self, op: Op) -> tuple[float, Source]:
        """Seconds for ``op`` and where they came from: ``"measured"`` or ``"model"``."""
        measured = self.measured_time(op)
        if measured is not None:
            return measured, "measured"
        return self.model_time(op), "model"

    def source(self, op: Op) -> Source:
        """``"measured"`` when the tables price ``op``, else ``"model"`` (the roofline)."""
        return "measured" if self.measured_time(op) is not None else "model"

    def time(self, op: Op) -> float:
        """Seconds for one compute operator (0 for collectives: the network prices those)."""
        if self.tables is not None:
            measured = self.measured_time(op)
            if measured is not None:
                return measured
        return self.model_time(op)

    def host_time(self, op: Op) -> float:
        """Seconds the host spends issuing ``op`` (:func:`host_issue_us` per kernel)."""
        return host_issue_us(self.gpu) * kernels(op) * US

    def model_time(self, op: Op) -> float:
        """Roofline seconds for one compute operator, ignoring measured tables."""
        eff = self.gpu.efficiency
        xla = self.gpu.execution == "xla"
        overhead = op_overhead_us(self.gpu) * US
        stream = self.gpu.hbm_bytes_per_s * eff.memory_bound  # achieved HBM bytes/s
        mem_time = op.bytes / stream
        if op.kind == "memory":
            if xla and op.fused_bytes is not None:  # fused into a matmul: no kernel of its own
                return op.fused_bytes / stream
            return mem_time + overhead
        if op.kind == "gemm":
            assert op.mnk is not None
            peak = self.gpu.peak_flops(op.precision)
            eff_gemm = self.gemm_efficiency(*op.mnk, op.precision)
            if op.role == "fwd" and _scaling(op) == "rowwise":
                eff_gemm *= ROWWISE_GEMM_FRACTION
            flop_time = op.flops / (peak * eff_gemm)
            t = max(flop_time, mem_time) + op.count * overhead
            m, n, k = op.mnk
            casts = cast_kernels(op)
            if casts:
                # the activation / output-gradient operand is quantized by its own kernel(s)
                # (weights are cast once per step and their transposes cached)
                t += op.count * m * k * cast_bytes(op) / stream + casts * overhead
            rescales = rescale_kernels(op)
            if rescales:
                t += op.count * m * n * ROWWISE_RESCALE_BYTES / stream + rescales * overhead
            return t
        if op.kind == "attention":
            peak = self.gpu.peak_flops("bf16")
            fwd, bwd = attention_fractions(eff, self.attention_kernel)
            measured = bwd if op.backward else fwd
            frac = (measured * eff.sustained_fraction
                    * attention_head_dim_factor(self.gpu, measured, op.head_dim, op.backward))
            flop_time = self.executed_flops(op) / (peak * frac)
            return max(flop_time, mem_time) + overhead
        return 0.0
