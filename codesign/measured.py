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

import csv
import gzip
import json
import math
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from codesign.errors import SpecError
from codesign.specs.gpu import MeasuredTables
from codesign.units import US

#: rows averaged by the GEMM and attention interpolators
K_NEAREST = 4
#: inverse-distance weight exponent
IDW_POWER = 2.0
#: log-space distance below which a query is an exact match of a row
_EXACT = 1e-9

DTYPE_ALIASES: dict[str, str] = {
    "fp32": "fp32", "float32": "fp32", "float": "fp32", "f32": "fp32",
    "tf32": "tf32",
    "bf16": "bf16", "bfloat16": "bf16",
    "fp16": "fp16", "float16": "fp16", "half": "fp16", "f16": "fp16",
    "fp8": "fp8", "e4m3": "fp8", "e5m2": "fp8", "float8_e4m3fn": "fp8", "float8_e5m2": "fp8",
    "fp4": "fp4",
}
COLLECTIVES: tuple[str, ...] = (
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "p2p",
)
TABLE_TIERS: tuple[str, ...] = ("scale_up", "scale_out", "fullflat")

# --- rows ------------------------------------------------------------------------------------


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


# --- CSV parsing -----------------------------------------------------------------------------


class _Row:
    """Cells of one CSV data row with parsers that name ``file:line`` and the column."""

    def __init__(self, path: Path, line: int, cells: Mapping[str, str]) -> None:
        self.path, self.line, self.cells = path, line, cells

    def error(self, column: str, msg: str) -> SpecError:
        return SpecError(f"{self.path}:{self.line}: column '{column}': {msg}")

    def text(self, column: str) -> str:
        return self.cells.get(column, "").strip()

    def number(self, column: str, positive: bool = True) -> float:
        raw = self.text(column)
        try:
            value = float(raw)
        except ValueError:
            raise self.error(column, f"expected a number, got {raw!r}") from None
        if not math.isfinite(value) or (value <= 0 if positive else value < 0):
            raise self.error(column, f"expected a {'positive' if positive else 'non-negative'}"
                             f" finite number, got {raw!r}")
        return value

    def integer(self, column: str) -> int:
        value = self.number(column)
        if value != int(value):
            raise self.error(column, f"expected a positive integer, got {self.text(column)!r}")
        return int(value)

    def choice(self, column: str, allowed: Mapping[str, str]) -> str:
        raw = self.text(column)
        hit = allowed.get(raw.lower())
        if hit is None:
            names = ", ".join(sorted(set(allowed)))
            raise self.error(column, f"expected one of {names}, got {raw!r}")
        return hit


_BOOL = {"true": "1", "1": "1", "yes": "1", "y": "1", "t": "1",
         "false": "", "0": "", "no": "", "n": "", "f": ""}
_DIRECTION = {"fwd": "fwd", "forward": "fwd", "bwd": "bwd", "backward": "bwd"}


def _read_csv(path: Path, required: Sequence[str]) -> Iterator[_Row]:
    """Data rows of a CSV file with the ``required`` columns (header names lower-cased)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecError(f"cannot read measured table {path}: {exc.strerror}") from None
    reader = csv.reader(text.splitlines())
    header: list[str] | None = None
    count = 0
    for cells in reader:
        line = reader.line_num
        if not cells or not "".join(cells).strip() or cells[0].lstrip().startswith("#"):
            continue
        if header is None:
            header = [c.strip().lower() for c in cells]
            missing = [c for c in required if c not in header]
            if missing:
                raise SpecError(f"{path}:{line}: missing column(s) {', '.join(missing)} "
                                f"(header: {', '.join(header)}; needs {', '.join(required)})")
            continue
        if len(cells) != len(header):
            raise SpecError(f"{path}:{line}: expected {len(header)} fields "
                            f"({', '.join(header)}), got {len(cells)}")
        count += 1
        yield _Row(path, line, dict(zip(header, cells, strict=True)))
    if header is None:
        raise SpecError(f"{path}: empty measured table (needs a header: {', '.join(required)})")
    if count == 0:
        raise SpecError(f"{path}: measured table has a header but no data rows")


def read_gemm_csv(path: str | Path) -> list[GemmRow]:
    """Rows of a GEMM table (``m,n,k,dtype,time_us``)."""
    return [GemmRow(r.number("m"), r.number("n"), r.number("k"),
                    r.choice("dtype", DTYPE_ALIASES), r.number("time_us"))
            for r in _read_csv(Path(path), ("m", "n", "k", "dtype", "time_us"))]


def read_attention_csv(path: str | Path) -> list[AttentionRow]:
    """Rows of an attention table (``batch,seq_len,heads,head_dim,causal,direction,time_us``)."""
    cols = ("batch", "seq_len", "heads", "head_dim", "causal", "direction", "time_us")
    return [AttentionRow(r.number("batch"), r.number("seq_len"), r.number("heads"),
                         r.number("head_dim"), bool(r.choice("causal", _BOOL)),
                         r.choice("direction", _DIRECTION) == "bwd", r.number("time_us"))
            for r in _read_csv(Path(path), cols)]


def read_memory_csv(path: str | Path) -> list[MemoryRow]:
    """Rows of a memory table (``bytes,time_us``)."""
    return [MemoryRow(r.number("bytes"), r.number("time_us"))
            for r in _read_csv(Path(path), ("bytes", "time_us"))]


def read_collectives_csv(path: str | Path) -> list[CollectiveRow]:
    """Rows of a collectives table (``collective,group_size,size_bytes,time_us[,tier]``)."""
    kinds = {k: k for k in COLLECTIVES}
    tiers = {t: t for t in TABLE_TIERS}
    out = []
    for r in _read_csv(Path(path), ("collective", "group_size", "size_bytes", "time_us")):
        tier = r.choice("tier", tiers) if r.text("tier") else None
        out.append(CollectiveRow(r.choice("collective", kinds), r.integer("group_size"),
                                 r.number("size_bytes"), r.number("time_us"), tier))
    return out


# --- Kineto traces ---------------------------------------------------------------------------

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


# --- interpolators ---------------------------------------------------------------------------


def _average(rows: Iterable[tuple[tuple[float, ...], float]]) -> list[tuple[tuple[float, ...],
                                                                            float]]:
    """Average the values of rows sharing a key, keeping first-seen order."""
    acc: dict[tuple[float, ...], list[float]] = {}
    for key, value in rows:
        acc.setdefault(key, []).append(value)
    return [(key, sum(v) / len(v)) for key, v in acc.items()]


class _ShapeTable:
    """Achieved throughput interpolated in log-shape space (GEMM and attention tables).

    ``points`` are (shape, time in seconds); ``work(shape)`` is the quantity whose rate is
    interpolated (FLOPs for a GEMM). A query outside the per-dimension [min, max] is uncovered.
    Rows forming a full grid are interpolated multilinearly, scattered rows by inverse-distance
    weighting of the :data:`K_NEAREST` nearest rows.
    """

    def __init__(self, points: Sequence[tuple[tuple[float, ...], float]],
                 work: Callable[[tuple[float, ...]], float]) -> None:
        self.work = work
        pts = _average(points)
        self.exact = dict(pts)
        self.shapes = [s for s, _ in pts]
        self.logs = [tuple(math.log(x) for x in s) for s in self.shapes]
        self.rates = [work(s) / t for s, t in pts]
        dims = len(self.shapes[0])
        self.axes = [sorted({s[i] for s in self.shapes}) for i in range(dims)]
        self.lo = tuple(a[0] for a in self.axes)
        self.hi = tuple(a[-1] for a in self.axes)
        self.grid = len(pts) == math.prod(len(a) for a in self.axes)
        self._rate = dict(zip(self.shapes, self.rates, strict=True))
        self._memo: dict[tuple[float, ...], float | None] = {}

    def covers(self, shape: tuple[float, ...]) -> bool:
        return all(lo <= x <= hi for x, lo, hi in zip(shape, self.lo, self.hi, strict=True))

    def lookup(self, shape: tuple[float, ...]) -> float | None:
        if shape in self._memo:
            return self._memo[shape]
        out = self._lookup(shape)
        if len(self._memo) < 1 << 16:
            self._memo[shape] = out
        return out

    def _lookup(self, shape: tuple[float, ...]) -> float | None:
        if not self.covers(shape):
            return None
        hit = self.exact.get(shape)
        if hit is not None:
            return hit
        rate = self._grid_rate(shape) if self.grid else self._idw_rate(shape)
        return self.work(shape) / rate

    def _grid_rate(self, shape: tuple[float, ...]) -> float:
        """Multilinear interpolation in log coordinates between the surrounding grid rows."""
        corners: list[tuple[tuple[float, ...], float]] = [((), 1.0)]
        for x, axis in zip(shape, self.axes, strict=True):
            i = bisect_left(axis, x)
            if axis[i] == x:
                corners = [((*c, x), w) for c, w in corners]
                continue
            x0, x1 = axis[i - 1], axis[i]
            t = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
            corners = [((*c, v), w * f) for c, w in corners
                       for v, f in ((x0, 1 - t), (x1, t))]
        return sum(w * self._rate[c] for c, w in corners)

    def _idw_rate(self, shape: tuple[float, ...]) -> float:
        """Inverse-distance-weighted rate of the nearest rows (Euclidean in log coordinates)."""
        q = tuple(math.log(x) for x in shape)
        dist = sorted((math.dist(q, p), i) for i, p in enumerate(self.logs))
        if dist[0][0] < _EXACT:
            return self.rates[dist[0][1]]
        near = dist[:K_NEAREST]
        weights = [d ** -IDW_POWER for d, _ in near]
        rate = sum(w * self.rates[i] for w, (_, i) in zip(weights, near, strict=True))
        return rate / sum(weights)


def _gemm_flops(s: tuple[float, ...]) -> float:
    return 2.0 * s[0] * s[1] * s[2]


def _attention_work(s: tuple[float, ...]) -> float:
    return s[0] * s[1] * s[1] * s[2]


class GemmTable:
    """Measured GEMM times per dtype; :meth:`lookup` interpolates (see module docstring)."""

    def __init__(self, rows: Iterable[GemmRow]) -> None:
        self.rows = tuple(rows)
        by_dtype: dict[str, list[tuple[tuple[float, ...], float]]] = {}
        for r in self.rows:
            by_dtype.setdefault(r.dtype, []).append(((r.m, r.n, r.k), r.time_us * US))
        self._tables = {d: _ShapeTable(pts, _gemm_flops) for d, pts in by_dtype.items()}

    @property
    def dtypes(self) -> tuple[str, ...]:
        return tuple(sorted(self._tables))

    def covers(self, m: float, n: float, k: float, dtype: str) -> bool:
        table = self._tables.get(dtype)
        return table is not None and table.covers((m, n, k))

    def lookup(self, m: float, n: float, k: float, dtype: str) -> float | None:
        """Seconds of an (m×k)·(k×n) GEMM in ``dtype``, or ``None`` outside the coverage."""
        table = self._tables.get(dtype)
        if table is None or min(m, n, k) <= 0:
            return None
        return table.lookup((float(m), float(n), float(k)))


class AttentionTable:
    """Measured fused-attention times per (causal, direction) over (batch·heads, seq, head_dim)."""

    def __init__(self, rows: Iterable[AttentionRow]) -> None:
        self.rows = tuple(rows)
        groups: dict[tuple[bool, bool], list[tuple[tuple[float, ...], float]]] = {}
        for r in self.rows:
            groups.setdefault((r.causal, r.backward), []).append(
                ((r.batch * r.heads, r.seq_len, r.head_dim), r.time_us * US))
        self._tables = {key: _ShapeTable(pts, _attention_work) for key, pts in groups.items()}

    def lookup(self, batch_heads: float, seq_len: float, head_dim: float, causal: bool,
               backward: bool) -> float | None:
        """Seconds of one fused attention kernel, or ``None`` outside the coverage."""
        table = self._tables.get((bool(causal), bool(backward)))
        if table is None or min(batch_heads, seq_len, head_dim) <= 0:
            return None
        return table.lookup((float(batch_heads), float(seq_len), float(head_dim)))


class _LogLinear:
    """Piecewise-linear interpolation of ``value`` in log(x), exact at the rows' x."""

    def __init__(self, points: Iterable[tuple[float, float]]) -> None:
        merged = sorted((key[0], v) for key, v in _average(((x,), v) for x, v in points))
        self.xs = [x for x, _ in merged]
        self.logs = [math.log(x) for x in self.xs]
        self.values = [v for _, v in merged]

    def __call__(self, x: float) -> tuple[float, bool] | None:
        """(value, exact) at ``x``, or ``None`` outside [min, max]."""
        if not self.xs or x <= 0 or x < self.xs[0] or x > self.xs[-1]:
            return None
        i = bisect_left(self.xs, x)
        if self.xs[i] == x:
            return self.values[i], True
        lx = math.log(x)
        x0, x1 = self.logs[i - 1], self.logs[i]
        t = (lx - x0) / (x1 - x0)
        return self.values[i - 1] + t * (self.values[i] - self.values[i - 1]), False


class MemoryTable:
    """Measured memory-bound kernels: achieved bandwidth piecewise linear in log(bytes)."""

    def __init__(self, rows: Iterable[MemoryRow]) -> None:
        self.rows = tuple(rows)
        times = _average(((r.nbytes,), r.time_us * US) for r in self.rows)
        self._time = {key[0]: t for key, t in times}
        self._bandwidth = _LogLinear((key[0], key[0] / t) for key, t in times)

    def lookup(self, nbytes: float) -> float | None:
        """Seconds of a memory-bound kernel moving ``nbytes``, or ``None`` outside coverage."""
        hit = self._bandwidth(float(nbytes))
        if hit is None:
            return None
        bandwidth, exact = hit
        return self._time[float(nbytes)] if exact else nbytes / bandwidth


class CollectiveTable:
    """Measured collectives per (collective, group size, tier): time piecewise linear in
    log(size)."""

    def __init__(self, rows: Iterable[CollectiveRow]) -> None:
        self.rows = tuple(rows)
        groups: dict[tuple[str, int, str | None], list[tuple[float, float]]] = {}
        for r in self.rows:
            groups.setdefault((r.collective, r.group_size, r.tier), []).append(
                (r.size_bytes, r.time_us * US))
        self._curves = {key: _LogLinear(pts) for key, pts in groups.items()}

    def lookup(self, collective: str, group_size: int, size_bytes: float,
               tier: str | None = None) -> float | None:
        """Seconds of one ``collective`` of ``size_bytes`` on ``group_size`` ranks.

        Rows of ``tier`` are used first, then rows without a tier; ``tier`` ``"mixed"`` (a
        group spanning scale-up domains) matches ``scale_out`` rows. ``None``: not covered.
        """
        tiers: list[str | None] = []
        if tier == "mixed":
            tiers.append("scale_out")
        elif tier is not None:
            tiers.append(tier)
        tiers.append(None)
        sizes = [group_size] + ([2] if collective == "p2p" and group_size != 2 else [])
        for n in sizes:
            for t in tiers:
                curve = self._curves.get((collective, n, t))
                if curve is None:
                    continue
                hit = curve(float(size_bytes))
                if hit is not None:
                    return hit[0]
        return None


# --- bundle ----------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class MeasuredKernels:
    """The loaded measured tables of one GPU (any may be ``None``)."""

    gemm: GemmTable | None = None
    attention: AttentionTable | None = None
    memory: MemoryTable | None = None
    collectives: CollectiveTable | None = None
    source: str = ""
    files: tuple[Path, ...] = ()

    @classmethod
    def from_spec(cls, spec: MeasuredTables, base_dir: str | Path | None = None
                  ) -> MeasuredKernels:
        """Load the files ``spec`` names; relative paths resolve against ``base_dir`` (the
        directory of the YAML that holds the GPU; the working directory when ``None``)."""
        base = Path(base_dir) if base_dir is not None else Path.cwd()

        def resolve(ref: str | None) -> Path | None:
            if ref is None:
                return None
            p = Path(ref).expanduser()
            return p if p.is_absolute() else base / p

        paths = {name: resolve(ref) for name, ref in spec.files().items()}
        gemm = list(_cached(read_gemm_csv, paths["gemm_csv"]) or ())
        collectives = list(_cached(read_collectives_csv, paths["collectives_csv"]) or ())
        trace = paths["kineto_trace"]
        if trace is not None:
            rows = _cached(read_kineto, trace)
            assert isinstance(rows, KinetoRows)
            gemm += rows.gemm
            collectives += rows.collectives
        attention = _cached(read_attention_csv, paths["attention_csv"])
        memory = _cached(read_memory_csv, paths["memory_csv"])
        return cls(
            gemm=GemmTable(gemm) if gemm else None,
            attention=AttentionTable(attention) if attention else None,
            memory=MemoryTable(memory) if memory else None,
            collectives=CollectiveTable(collectives) if collectives else None,
            source=spec.source,
            files=tuple(p for p in paths.values() if p is not None),
        )


def _cached(reader: Callable[[Path], Any], path: Path | None) -> Any:
    """``reader(path)`` memoized on the file's path, size and modification time."""
    if path is None:
        return None
    try:
        st = path.stat()
    except OSError as exc:
        raise SpecError(f"cannot read measured data {path}: {exc.strerror}") from None
    return _read_cached(reader, str(path.resolve()), st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=64)
def _read_cached(reader: Callable[[Path], Any], path: str, mtime_ns: int, size: int) -> Any:
    out = reader(Path(path))
    return tuple(out) if isinstance(out, list) else out
