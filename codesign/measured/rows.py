"""Measured rows (one kernel or collective call each) and the vocabulary of the tables:
dtype names, collective names, network tiers. Times are microseconds, as measured."""

from __future__ import annotations

from dataclasses import dataclass

#: dtype names accepted in tables and traces -> the canonical dtype
DTYPE_ALIASES: dict[str, str] = {
    "fp32": "fp32", "float32": "fp32", "float": "fp32", "f32": "fp32",
    "tf32": "tf32",
    "bf16": "bf16", "bfloat16": "bf16",
    "fp16": "fp16", "float16": "fp16", "half": "fp16", "f16": "fp16",
    "fp8": "fp8", "e4m3": "fp8", "e5m2": "fp8", "float8_e4m3fn": "fp8", "float8_e5m2": "fp8",
    "fp4": "fp4",
}
#: collectives a table may hold (names of :mod:`codesign.network.collectives`)
COLLECTIVES: tuple[str, ...] = (
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "p2p",
)
#: network tiers a collective row may be restricted to
TABLE_TIERS: tuple[str, ...] = ("scale_up", "scale_out", "fullflat")


@dataclass(frozen=True)
class GemmRow:
    """One measured GEMM: C[m,n] = A[m,k]·B[k,n] in ``dtype`` took ``time_us``."""

    m: float
    n: float
    k: float
    dtype: str
    time_us: float


@dataclass(frozen=True)
class AttentionRow:
    """One measured fused-attention kernel (query length = key length = ``seq_len``)."""

    batch: float
    seq_len: float
    heads: float
    head_dim: float
    causal: bool
    backward: bool
    time_us: float


@dataclass(frozen=True)
class MemoryRow:
    """One measured memory-bound kernel moving ``nbytes`` of HBM traffic."""

    nbytes: float
    time_us: float


@dataclass(frozen=True)
class CollectiveRow:
    """One measured collective call; ``tier`` ``None`` applies to any tier."""

    collective: str
    group_size: int
    size_bytes: float
    time_us: float
    tier: str | None = None


__all__ = ["COLLECTIVES", "DTYPE_ALIASES", "TABLE_TIERS", "AttentionRow", "CollectiveRow",
           "GemmRow", "MemoryRow"]
