"""Compute cost model: roofline with measured-style efficiency curves.

An operator's time is::

    max(executed FLOPs / (peak[dtype] × efficiency(shape)),
        HBM bytes / (HBM bandwidth × memory_bound efficiency)) + kernel overhead

GEMM efficiency is ``gemm_max × Π_{x∈(m,n,k)} x / (x + gemm_half_dim)``: large GEMMs approach
the measured large-GEMM fraction of peak, thin ones lose it to tile under-use. Fused attention
uses its own measured forward/backward fractions. Causal flash attention executes about half
of the conventional FLOPs (masked tiles are skipped) and its backward executes 2.5× the
forward matmul FLOPs (it recomputes the scores), while convention counts 2× (FlashAttention-2,
Dao 2023, Sec. 4 benchmark methodology); efficiencies are relative to the executed FLOPs.
"""

from __future__ import annotations

from dataclasses import dataclass

from codesign.specs.gpu import GpuSpec
from codesign.units import US
from codesign.workload.ops import Op

#: executed / conventional FLOPs of a causal fused attention kernel (forward)
CAUSAL_FRACTION = 0.5
#: executed / conventional FLOPs of fused attention backward (2.5 × fwd vs 2 × fwd)
FLASH_BWD_RECOMPUTE = 1.25


@dataclass(frozen=True)
class ComputeModel:
    """Prices compute operators on one GPU (seconds)."""

    gpu: GpuSpec

    def gemm_efficiency(self, m: float, n: float, k: float) -> float:
        """Fraction of dense peak reached by an (m×k)·(k×n) GEMM."""
        eff = self.gpu.efficiency
        half = eff.gemm_half_dim
        factor = 1.0
        for x in (m, n, k):
            factor *= x / (x + half)
        return eff.gemm_max * factor

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

    def time(self, op: Op) -> float:
        """Seconds for one compute operator (0 for collectives: the network prices those)."""
        eff = self.gpu.efficiency
        overhead = eff.kernel_overhead_us * US
        mem_time = op.bytes / (self.gpu.hbm_bandwidth_TBps * 1e12 * eff.memory_bound)
        if op.kind == "memory":
            return mem_time + overhead
        if op.kind == "gemm":
            assert op.mnk is not None
            peak = self.gpu.peak_flops(op.precision)
            flop_time = op.flops / (peak * self.gemm_efficiency(*op.mnk))
            return max(flop_time, mem_time) + overhead
        if op.kind == "attention":
            peak = self.gpu.peak_flops("bf16")
            frac = eff.attention_bwd if op.backward else eff.attention_fwd
            flop_time = self.executed_flops(op) / (peak * frac)
            return max(flop_time, mem_time) + overhead
        return 0.0
