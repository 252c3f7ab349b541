"""Loading a GPU's measured tables (:class:`~codesign.specs.gpu.MeasuredTables`) into one
bundle; files are read once per path, size and modification time."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from codesign.errors import SpecError
from codesign.measured.collectives import CollectiveTable
from codesign.measured.csv_tables import (
    read_attention_csv,
    read_collectives_csv,
    read_gemm_csv,
    read_memory_csv,
)
from codesign.measured.kernels import AttentionTable, GemmTable, MemoryTable
from codesign.measured.kineto import KinetoRows, read_kineto
from codesign.specs.gpu import MeasuredTables


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


__all__ = ["MeasuredKernels"]
