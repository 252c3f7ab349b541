"""Results of a sweep on disk: a manifest, a journal and a Parquet dataset.

Layout of a results directory ``OUT``::

    OUT/manifest.json               spec, spec_hash, codesign_version, created, points_total
    OUT/results/part-*.parquet      finished rows, one file per flush (written tmp + rename)
    OUT/results/journal.jsonl       rows finished since the last flush, one JSON line each
    OUT/figures/                    plots

Every row is appended to the journal (and flushed to the OS) the moment its point finishes,
then moved into a Parquet part every few seconds and at the end. A run killed at any moment
(even ``SIGKILL``) therefore loses no finished point: the next open turns the journal's
complete lines into a part (a torn last line is ignored), and re-running the same sweep skips
every point whose row is stored. A part appears only by an atomic rename, so a reader never
sees half a file.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import os
import time
from importlib import metadata
from pathlib import Path
from typing import IO, Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from codesign.errors import SpecError
from codesign.experiments.spec import ExperimentSpec

MANIFEST = "manifest.json"
LOCK = ".lock"
RESULTS = "results"
JOURNAL = "journal.jsonl"
FIGURES = "figures"


def codesign_version() -> str:
    """The installed codesign version ("unknown" when not installed)."""
    try:
        return metadata.version("codesign")
    except metadata.PackageNotFoundError:
        return "unknown"


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    return str(obj)


def _write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=_json_default) + "\n")
    os.replace(tmp, path)


def _table(rows: list[dict[str, Any]]) -> pa.Table:
    """Rows -> Arrow table (column order of the first row); a column whose values Arrow cannot
    type together (e.g. numbers and strings) is stored as strings."""
    columns: dict[str, None] = {}
    for r in rows:
        columns.update(dict.fromkeys(r))
    arrays = {}
    for c in columns:
        values = [r.get(c) for r in rows]
        try:
            arrays[c] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            arrays[c] = pa.array([None if v is None else str(v) for v in values])
    return pa.table(arrays)


def _normalize(df: pd.DataFrame) -> pd.DataFrame:
    """Object columns holding only numbers (and missing values) become numeric: parts where an
    axis is absent store nulls, which would otherwise make the column untyped."""
    for c in df.columns:
        if df[c].dtype != object:
            continue
        vals = df[c].dropna()
        if len(vals) and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                             for v in vals):
            df[c] = pd.to_numeric(df[c])
    return df


def _read_journal(path: Path) -> list[dict[str, Any]]:
    """Complete rows of a journal (a torn or corrupt line, as a kill can leave, is skipped)."""
    rows: list[dict[str, Any]] = []
    try:
        text = path.read_text()
    except FileNotFoundError:
        return rows
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and "point_id" in row:
            rows.append(row)
    return rows


def _part_files(out_dir: Path) -> list[Path]:
    return sorted((Path(out_dir) / RESULTS).glob("part-*.parquet"))


def load_manifest(out_dir: str | Path) -> dict[str, Any]:
    """The manifest of a results directory: spec (dict), spec_hash, codesign_version,
    created, points_total. Raises :class:`SpecError` when there is none."""
    path = Path(out_dir) / MANIFEST
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise SpecError(f"{out_dir}: not a results directory (no {MANIFEST}); run a sweep "
                        "into it first") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise SpecError(f"{path}: cannot read the manifest: {exc}") from None
    if not isinstance(data, dict) or "spec" not in data or "spec_hash" not in data:
        raise SpecError(f"{path}: not a codesign results manifest")
    return data


def load_results(out_dir: str | Path) -> pd.DataFrame:
    """Every stored row of a results directory (parts and journal), one per point, in
    expansion order. Missing values are NaN/None; an empty frame when nothing finished."""
    out_dir = Path(out_dir)
    frames = [pq.read_table(p).to_pandas() for p in _part_files(out_dir)]
    journal = _read_journal(out_dir / RESULTS / JOURNAL)
    if journal:
        frames.append(_table(journal).to_pandas())
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame(columns=["point_id", "index", "block", "status", "reason"])
    df = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    df = df.drop_duplicates("point_id", keep="last")  # a retried point: its latest row
    df = _normalize(df)
    return df.sort_values("index", kind="stable").reset_index(drop=True)


def finished_points(out_dir: str | Path) -> dict[str, str]:
    """point_id -> status of every stored row."""
    out: dict[str, str] = {}
    for p in _part_files(Path(out_dir)):
        t = pq.read_table(p, columns=["point_id", "status"]).to_pydict()
        out.update(zip(t["point_id"], t["status"], strict=True))
    for row in _read_journal(Path(out_dir) / RESULTS / JOURNAL):
        out[str(row["point_id"])] = str(row.get("status"))
    return out


class ResultStore:
    """Writes the rows of one run of ``spec`` into ``out_dir`` (see the module docstring).

    Opening checks the manifest: the same study (same :meth:`ExperimentSpec.results_hash`)
    resumes, a different one is refused unless ``overwrite`` (which deletes the stored rows).
    """

    def __init__(self, out_dir: str | Path, spec: ExperimentSpec, points_total: int, *,
                 overwrite: bool = False, flush_interval_s: float = 2.0) -> None:
        self.out_dir = Path(out_dir)
        self.results_dir = self.out_dir / RESULTS
        self.spec = spec
        self.flush_interval_s = flush_interval_s
        self._buffer: list[dict[str, Any]] = []
        self._last_flush = time.monotonic()
        self._journal: IO[str] | None = None
        self._open(points_total, overwrite)

    # ---- opening ----------------------------------------------------------------------------

    def _open(self, points_total: int, overwrite: bool) -> None:
        if self.out_dir.exists() and not self.out_dir.is_dir():
            raise SpecError(f"{self.out_dir}: exists and is not a directory; choose another "
                            "--out")
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._lock()
        try:
            self._open_locked(points_total, overwrite)
        except BaseException:
            self._unlock()
            raise

    def _lock(self) -> None:
        """Refuse a directory another live run is writing (a killed run's lock is taken)."""
        path = self.out_dir / LOCK
        for _ in range(2):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                try:
                    pid = int(path.read_text().strip() or 0)
                except (OSError, ValueError):
                    pid = 0
                if pid and pid != os.getpid() and _alive(pid):
                    raise SpecError(f"{self.out_dir} is being written by another run (process "
                                    f"{pid}); wait for it or choose another --out") from None
                path.unlink(missing_ok=True)  # a killed run's lock
                continue
            with os.fdopen(fd, "w") as f:
                f.write(str(os.getpid()))
            return

    def _unlock(self) -> None:
        path = self.out_dir / LOCK
        with contextlib.suppress(OSError, ValueError):
            if int(path.read_text().strip()) == os.getpid():
                path.unlink()

    def _open_locked(self, points_total: int, overwrite: bool) -> None:
        manifest_path = self.out_dir / MANIFEST
        new_hash = self.spec.results_hash()
        created = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        if manifest_path.exists():
            if overwrite:
                self.clear()
            else:
                old = load_manifest(self.out_dir)
                if old["spec_hash"] != new_hash:
                    old_name = old["spec"].get("name", "?") if isinstance(old["spec"], dict) \
                        else "?"
                    raise SpecError(
                        f"{self.out_dir} holds results of a different spec ('{old_name}', "
                        f"hash {old['spec_hash']}; this one is '{self.spec.name}', hash "
                        f"{new_hash}); choose another --out or pass --overwrite")
                created = str(old.get("created", created))
        elif overwrite:
            self.clear()
        self.results_dir.mkdir(parents=True, exist_ok=True)
        _write_json_atomic(manifest_path, {
            "spec": self.spec.model_dump(mode="json"), "spec_hash": new_hash,
            "codesign_version": codesign_version(), "created": created,
            "points_total": points_total})
        self._recover_journal()
        for tmp in self.results_dir.glob(".part-*.tmp"):  # a part a kill left half-written
            tmp.unlink(missing_ok=True)

    def clear(self) -> None:
        """Delete the stored rows and the manifest (only files this store writes)."""
        with contextlib.suppress(FileNotFoundError):
            (self.out_dir / MANIFEST).unlink()
        if self.results_dir.is_dir():
            for p in [*self.results_dir.glob("part-*.parquet"), *self.results_dir.glob(".part-*"),
                      self.results_dir / JOURNAL]:
                p.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                self.results_dir.rmdir()
        figures = self.out_dir / FIGURES
        if figures.is_dir():
            for p in [*figures.glob("*.pdf"), *figures.glob("*.png")]:
                p.unlink(missing_ok=True)

    def _recover_journal(self) -> None:
        """Move the rows of a journal a killed run left behind into a part."""
        path = self.results_dir / JOURNAL
        rows = _read_journal(path)
        if rows:
            stored: set[str] = set()
            for p in _part_files(self.out_dir):
                stored.update(pq.read_table(p, columns=["point_id"]).column(0).to_pylist())
            fresh = {r["point_id"]: r for r in rows if r["point_id"] not in stored}
            if fresh:
                self._write_part(list(fresh.values()))
        path.unlink(missing_ok=True)

    # ---- writing ----------------------------------------------------------------------------

    def finished(self) -> dict[str, str]:
        """point_id -> status of every stored row."""
        return finished_points(self.out_dir)

    def add(self, row: dict[str, Any]) -> None:
        """Store one finished row: journal now, Parquet at the next flush."""
        if self._journal is None:
            self._journal = (self.results_dir / JOURNAL).open("a")
        self._journal.write(json.dumps(row, default=_json_default) + "\n")
        self._journal.flush()
        self._buffer.append(row)
        if time.monotonic() - self._last_flush >= self.flush_interval_s:
            self.flush()

    def flush(self) -> None:
        """Write the buffered rows as one Parquet part and empty the journal."""
        self._last_flush = time.monotonic()
        if not self._buffer:
            return
        self._write_part(self._buffer)
        self._buffer = []
        if self._journal is not None:
            self._journal.close()
            self._journal = None
        (self.results_dir / JOURNAL).unlink(missing_ok=True)

    def _write_part(self, rows: list[dict[str, Any]]) -> Path:
        stem = f"part-{time.time_ns():020d}-{os.getpid()}"
        final = self.results_dir / f"{stem}.parquet"
        tmp = self.results_dir / f".{stem}.tmp"
        pq.write_table(_table(rows), tmp)
        os.replace(tmp, final)
        return final

    def close(self) -> None:
        """Flush what is buffered, close the journal and release the directory."""
        try:
            self.flush()
        finally:
            if self._journal is not None:
                self._journal.close()
                self._journal = None
            self._unlock()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def is_missing(value: Any) -> bool:
    """True for None and NaN (how a row marks a value it does not have)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


__all__ = ["FIGURES", "JOURNAL", "MANIFEST", "RESULTS", "ResultStore", "codesign_version",
           "finished_points", "is_missing", "load_manifest", "load_results"]
