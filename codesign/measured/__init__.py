"""Measured kernel data: loaders and interpolators for the compute and network models.

A GPU spec may name measured tables (:class:`codesign.specs.gpu.MeasuredTables`). Where a table
covers an operator, the interpolated measurement replaces the roofline; outside its coverage a
lookup returns ``None`` and the caller falls back to the model. Every lookup returns seconds.

CSV files
---------
Comma-separated, one header row naming the columns (any order, case-insensitive); blank lines
and lines starting with ``#`` are skipped (use them for provenance); extra columns are ignored.
Times are microseconds of one kernel (or one collective call), as measured. A bad row raises
:class:`codesign.errors.SpecError` naming ``file:line`` and the column.

=============  ==========================================================================
gemm           ``m,n,k,dtype,time_us`` — C[m,n] = A[m,k]·B[k,n]; dtype ``fp32 tf32 bf16 fp16
               fp8 fp4`` (aliases ``float32 float bfloat16 float16 half e4m3 e5m2``)
attention      ``batch,seq_len,heads,head_dim,causal,direction,time_us`` — fused attention,
               query length = key length = ``seq_len``; ``causal`` true/false (1/0, yes/no);
               ``direction`` ``fwd`` or ``bwd``
memory         ``bytes,time_us`` — a memory-bound kernel moving ``bytes`` of HBM traffic
collectives    ``collective,group_size,size_bytes,time_us[,tier]`` — ``collective`` one of
               ``all_reduce all_gather reduce_scatter all_to_all broadcast p2p``;
               ``size_bytes`` follows :mod:`codesign.network.collectives` (all_gather: output
               size, reduce_scatter: input size — nccl-tests' "size" column); optional
               ``tier`` ``scale_up``, ``scale_out`` or ``fullflat`` (empty: any tier)
=============  ==========================================================================

Rows repeating a key (same shape / size) are averaged.

Kineto traces
-------------
A PyTorch profiler chrome trace (``.json`` or ``.json.gz``). GPU kernels (``cat == "kernel"``)
are linked to the CPU operator that launched them by ``args["External id"]`` (or through the
runtime event with the same ``args["correlation"]``). Each call of ``aten::mm``, ``aten::addmm``,
``aten::bmm``, ``aten::matmul``, ``aten::linear`` or ``aten::_scaled_mm`` whose ``Input Dims``
are recorded (``record_shapes=True``) gives one GEMM row: shape from the dims (a batched GEMM of
``b`` products folds ``b`` into ``m``), dtype from the first ``Input type`` (``c10::BFloat16``
bf16, ``c10::Half`` fp16, ``float`` fp32, ``c10::Float8_e4m3fn``/``e5m2`` fp8), time the sum of
its kernels' ``dur``. NCCL kernels (name containing ``nccl``) give collective rows when their
``args`` (or their launching CPU operator's) carry ``Group size`` and ``In msg nelems`` /
``Out msg nelems`` with ``dtype`` (as PyTorch's ``record_param_comms`` writes them); other NCCL
kernels are skipped. p2p rows are recorded with group size 2.

Interpolation
-------------
* GEMM (per dtype): covered when each of m, n, k lies within the table's [min, max] of that
  dimension. An exact shape returns its measured time; otherwise ``time = 2mnk / FLOP/s`` with
  the achieved FLOP/s interpolated in (log m, log n, log k): multilinearly between the
  surrounding rows when the rows form a full grid (every combination of their m, n and k
  values), else as the inverse-square-distance weighted mean over the :data:`K_NEAREST`
  nearest rows. Either way the rate is a convex combination of measured rates.
* Attention (per direction and causality): the same over (batch·heads, seq_len, head_dim)
  with work ``batch·heads·seq_len²·head_dim`` in place of FLOPs.
* Memory: achieved bandwidth is piecewise linear in log(bytes); covered within [min, max].
* Collectives (per collective and exact group size, and tier where given): time is piecewise
  linear in log(size_bytes); covered within [min, max]. A p2p of a group without rows of its
  own size uses the rows of group size 2 (a transfer between two neighbours).
"""

from __future__ import annotations

from codesign.measured.collectives import CollectiveTable
from codesign.measured.csv_tables import (
    read_attention_csv,
    read_collectives_csv,
    read_gemm_csv,
    read_memory_csv,
)
from codesign.measured.interpolate import IDW_POWER, K_NEAREST
from codesign.measured.kernels import AttentionTable, GemmTable, MemoryTable
from codesign.measured.kineto import GEMM_OPS, KinetoRows, gemm_shape, read_kineto
from codesign.measured.loading import MeasuredKernels
from codesign.measured.rows import (
    COLLECTIVES,
    DTYPE_ALIASES,
    TABLE_TIERS,
    AttentionRow,
    CollectiveRow,
    GemmRow,
    MemoryRow,
)

__all__ = ["COLLECTIVES", "DTYPE_ALIASES", "GEMM_OPS", "IDW_POWER", "K_NEAREST", "TABLE_TIERS",
           "AttentionRow", "AttentionTable", "CollectiveRow", "CollectiveTable", "GemmRow",
           "GemmTable", "KinetoRows", "MeasuredKernels", "MemoryRow", "MemoryTable",
           "gemm_shape", "read_attention_csv", "read_collectives_csv", "read_gemm_csv",
           "read_kineto", "read_memory_csv"]
