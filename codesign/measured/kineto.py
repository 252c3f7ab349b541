"""Rows from a PyTorch profiler (Kineto) chrome trace: GEMM rows from the CPU operators'
recorded shapes and their kernels' durations, collective rows from NCCL kernels' arguments
(see :mod:`codesign.measured`, "Kineto traces"). Durations are microseconds, as traced."""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codesign.errors import SpecError
from codesign.measured.rows import DTYPE_ALIASES, CollectiveRow, GemmRow

#: CPU operators whose kernels are GEMMs
GEMM_OPS: tuple[str, ...] = (
    "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
    "aten::_scaled_mm",
)
#: element bytes of the dtype names PyTorch writes into NCCL kernel args
_NCCL_DTYPE_BYTES: dict[str, float] = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2,
    "bfloat16": 2, "int": 4, "int32": 4, "long": 8, "int64": 8, "char": 1, "byte": 1,
    "int8": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
}


@dataclass(frozen=True)
class KinetoRows:
    """Table rows extracted from one Kineto trace."""

    gemm: tuple[GemmRow, ...]
    collectives: tuple[CollectiveRow, ...]


def _torch_dtype(name: object) -> str | None:
    """``c10::BFloat16`` -> bf16, ``c10::Half`` -> fp16, ``float`` -> fp32, fp8 types -> fp8."""
    if not isinstance(name, str):
        return None
    return DTYPE_ALIASES.get(name.strip().lower().removeprefix("c10::"))


def _dims(value: object) -> list[list[float]] | None:
    if not isinstance(value, list):
        return None
    out: list[list[float]] = []
    for d in value:
        if not isinstance(d, list) or not all(isinstance(x, (int, float)) for x in d):
            out.append([])
        else:
            out.append([float(x) for x in d])
    return out


def gemm_shape(op_name: str, input_dims: object) -> tuple[float, float, float] | None:
    """(m, n, k) of a GEMM CPU operator from its ``Input Dims`` (``None`` if not a GEMM)."""
    dims = _dims(input_dims)
    if not dims:
        return None
    try:
        if op_name in ("aten::mm", "aten::_scaled_mm"):
            (m, k), (_, n) = dims[0], dims[1]
            return m, n, k
        if op_name == "aten::addmm":  # bias, mat1 [m,k], mat2 [k,n]
            (m, k), (_, n) = dims[1], dims[2]
            return m, n, k
        if op_name in ("aten::bmm", "aten::baddbmm"):
            a, bm = (dims[0], dims[1]) if op_name == "aten::bmm" else (dims[1], dims[2])
            (b, m, k), (_, _, n) = a, bm
            return b * m, n, k
        if op_name == "aten::linear":  # input [..., k], weight [n, k]
            x, w = dims[0], dims[1]
            if len(x) < 1 or len(w) != 2:
                return None
            return math.prod(x[:-1]) if len(x) > 1 else 1.0, w[0], x[-1]
        if op_name == "aten::matmul":  # [..., m, k] @ [..., k, n]: batch folded into m
            x, w = dims[0], dims[1]
            if len(x) < 2 or len(w) < 2:
                return None
            return math.prod(x[:-1]), w[-1], x[-1]
    except (ValueError, IndexError, TypeError):
        return None
    return None


def _nccl_collective(*names: object) -> str | None:
    for name in names:
        if not isinstance(name, str):
            continue
        s = name.lower().replace("_", "")
        for key, kind in (("allreduce", "all_reduce"), ("allgather", "all_gather"),
                          ("reducescatter", "reduce_scatter"), ("alltoall", "all_to_all"),
                          ("broadcast", "broadcast"), ("sendrecv", "p2p"), ("send", "p2p"),
                          ("recv", "p2p")):
            if key in s:
                return kind
    return None


def _nccl_row(kernel: Mapping[str, Any], op_args: Mapping[str, Any]) -> CollectiveRow | None:
    """A collective row from an NCCL kernel's args (or its CPU op's); ``None`` if sizeless."""
    args = {**op_args, **(kernel.get("args") or {})}
    kind = _nccl_collective(args.get("Collective name"), kernel.get("name"))
    if kind is None:
        return None
    elem = _NCCL_DTYPE_BYTES.get(str(args.get("dtype", "")).lower().removeprefix("c10::"))
    nelems = args.get("Out msg nelems" if kind == "all_gather" else "In msg nelems")
    group = args.get("Group size")
    if elem is None or not isinstance(nelems, (int, float)) or nelems <= 0:
        return None
    if kind == "p2p":
        group = 2
    if not isinstance(group, int) or group < 2:
        return None
    dur = kernel.get("dur")
    if not isinstance(dur, (int, float)) or dur <= 0:
        return None
    return CollectiveRow(kind, group, float(nelems) * elem, float(dur))


def read_kineto(path: str | Path) -> KinetoRows:
    """GEMM and NCCL collective rows of a Kineto trace (see the module docstring)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        if path.suffix == ".gz":
            raw = gzip.decompress(raw)
        data = json.loads(raw)
    except OSError as exc:
        raise SpecError(f"cannot read Kineto trace {path}: {exc.strerror}") from None
    except (ValueError, EOFError) as exc:
        raise SpecError(f"{path}: not a valid Kineto JSON trace: {exc}") from None
    events = data.get("traceEvents") if isinstance(data, dict) else None
    if not isinstance(events, list):
        raise SpecError(f"{path}: Kineto trace has no 'traceEvents' list")

    cpu_ops: dict[int, dict[str, Any]] = {}  # External id -> CPU op event
    runtime_ext: dict[int, int] = {}  # correlation -> External id
    kernels: list[dict[str, Any]] = []
    for ev in events:
        if not isinstance(ev, dict) or ev.get("ph") not in (None, "X"):
            continue
        args = ev.get("args") or {}
        if not isinstance(args, dict):
            continue
        cat = str(ev.get("cat", "")).lower()
        ext = args.get("External id")
        if cat == "kernel":
            kernels.append(ev)
        elif cat in ("cpu_op", "user_annotation", "operator") and isinstance(ext, int):
            cpu_ops.setdefault(ext, ev)
        elif cat in ("cuda_runtime", "cuda_driver", "runtime") and isinstance(ext, int):
            corr = args.get("correlation")
            if isinstance(corr, int):
                runtime_ext[corr] = ext

    gemm_time: dict[int, float] = {}  # External id of a GEMM op -> summed kernel us
    gemm_order: list[int] = []
    collectives: list[CollectiveRow] = []
    for kernel in kernels:
        args = kernel.get("args") or {}
        ext = args.get("External id")
        if not isinstance(ext, int) or ext not in cpu_ops:
            corr = args.get("correlation")
            ext = runtime_ext.get(corr) if isinstance(corr, int) else None
        op = cpu_ops.get(ext) if isinstance(ext, int) else None
        op_args = (op.get("args") or {}) if op is not None else {}
        if "nccl" in str(kernel.get("name", "")).lower():
            row = _nccl_row(kernel, op_args)
            if row is not None:
                collectives.append(row)
            continue
        if op is None or ext is None or op.get("name") not in GEMM_OPS:
            continue
        dur = kernel.get("dur")
        if not isinstance(dur, (int, float)) or dur < 0:
            continue
        if ext not in gemm_time:
            gemm_order.append(ext)
            gemm_time[ext] = 0.0
        gemm_time[ext] += float(dur)

    gemm: list[GemmRow] = []
    for ext in gemm_order:
        op = cpu_ops[ext]
        args = op.get("args") or {}
        shape = gemm_shape(str(op.get("name")), args.get("Input Dims"))
        types = args.get("Input type")
        a_index = 1 if op.get("name") in ("aten::addmm", "aten::baddbmm") else 0  # after bias
        first = types[a_index] if isinstance(types, list) and len(types) > a_index else None
        dtype = _torch_dtype(first)
        if shape is None or dtype is None or min(shape) <= 0 or gemm_time[ext] <= 0:
            continue
        gemm.append(GemmRow(*shape, dtype=dtype, time_us=gemm_time[ext]))
    return KinetoRows(tuple(gemm), tuple(collectives))


__all__ = ["GEMM_OPS", "KinetoRows", "gemm_shape", "read_kineto"]
