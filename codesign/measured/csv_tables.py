"""CSV measured tables: parsing with errors that name ``file:line`` and the column.

Comma-separated, one header row naming the columns (any order, case-insensitive); blank lines
and lines starting with ``#`` are skipped; extra columns are ignored. Times are microseconds of
one kernel (or one collective call). See :mod:`codesign.measured` for the columns of each
table.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from codesign.errors import SpecError
from codesign.measured.rows import (
    COLLECTIVES,
    DTYPE_ALIASES,
    TABLE_TIERS,
    AttentionRow,
    CollectiveRow,
    GemmRow,
    MemoryRow,
)


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


__all__ = ["read_attention_csv", "read_collectives_csv", "read_gemm_csv", "read_memory_csv"]
