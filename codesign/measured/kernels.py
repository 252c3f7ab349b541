"""Measured compute kernels: GEMM, fused attention and memory-bound tables, each looked up in
seconds (``None`` outside the table's coverage, where the roofline prices the kernel)."""

from __future__ import annotations

from collections.abc import Iterable

from codesign.measured.interpolate import LogLinear, ShapeTable, average
from codesign.measured.rows import AttentionRow, GemmRow, MemoryRow
from codesign.units import US


def _gemm_flops(s: tuple[float, ...]) -> float:
    """FLOPs of an (m, n, k) GEMM."""
    return 2.0 * s[0] * s[1] * s[2]


def _attention_work(s: tuple[float, ...]) -> float:
    """Work of a (batch·heads, seq_len, head_dim) attention kernel, up to a constant."""
    return s[0] * s[1] * s[1] * s[2]


class GemmTable:
    """Measured GEMM times per dtype; :meth:`lookup` interpolates (see module docstring)."""

    def __init__(self, rows: Iterable[GemmRow]) -> None:
        self.rows = tuple(rows)
        by_dtype: dict[str, list[tuple[tuple[float, ...], float]]] = {}
        for r in self.rows:
            by_dtype.setdefault(r.dtype, []).append(((r.m, r.n, r.k), r.time_us * US))
        self._tables = {d: ShapeTable(pts, _gemm_flops) for d, pts in by_dtype.items()}

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
        self._tables = {key: ShapeTable(pts, _attention_work) for key, pts in groups.items()}

    def lookup(self, batch_heads: float, seq_len: float, head_dim: float, causal: bool,
               backward: bool) -> float | None:
        """Seconds of one fused attention kernel, or ``None`` outside the coverage."""
        table = self._tables.get((bool(causal), bool(backward)))
        if table is None or min(batch_heads, seq_len, head_dim) <= 0:
            return None
        return table.lookup((float(batch_heads), float(seq_len), float(head_dim)))


class MemoryTable:
    """Measured memory-bound kernels: achieved bandwidth piecewise linear in log(bytes)."""

    def __init__(self, rows: Iterable[MemoryRow]) -> None:
        self.rows = tuple(rows)
        times = average(((r.nbytes,), r.time_us * US) for r in self.rows)
        self._time = {key[0]: t for key, t in times}
        self._bandwidth = LogLinear((key[0], key[0] / t) for key, t in times)

    def lookup(self, nbytes: float) -> float | None:
        """Seconds of a memory-bound kernel moving ``nbytes``, or ``None`` outside coverage."""
        hit = self._bandwidth(float(nbytes))
        if hit is None:
            return None
        bandwidth, exact = hit
        return self._time[float(nbytes)] if exact else nbytes / bandwidth


__all__ = ["AttentionTable", "GemmTable", "MemoryTable"]
