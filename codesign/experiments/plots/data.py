"""Shaping result rows for a figure: which rows, which series, which panels, which values.

Rows are the result table of a study (one row per point, see
:mod:`codesign.experiments.store`). Metric values are in the columns' own units, except the
fractions in :data:`PERCENT_COLUMNS`, which are plotted in percent.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from codesign.experiments.plots.context import PlotSkipped
from codesign.experiments.plots.formatting import is_missing
from codesign.experiments.plots.labels import qualified_label, value_label
from codesign.experiments.spec import HIGHER_IS_BETTER

if TYPE_CHECKING:
    import pandas as pd

    from codesign.experiments.spec import ExperimentSpec

#: metrics stored as fractions and shown in percent
PERCENT_COLUMNS = frozenset({"mfu", "hfu"})
#: metrics for which smaller is better (heatmap "best" cell)
LOWER_IS_BETTER_SUFFIXES = ("_s", "_GiB", "_GB")
#: standard result columns (never sweep axes)
_RESULT_COLUMNS = frozenset({
    "point_id", "index", "block", "status", "reason", "step_time_s", "mfu", "hfu",
    "tokens_per_s", "tflops_per_gpu", "memory_GiB", "sim_wall_s", "search.evaluated",
    "search.feasible"})


def axis_paths_of(spec: ExperimentSpec | None, df: pd.DataFrame) -> list[str]:
    """Sweep-axis columns of the experiment (in spec order) that ``df`` has.

    Without a spec, every column that is not a standard result column counts as an axis."""
    if spec is not None:
        paths = spec.axis_paths
    else:
        paths = [c for c in df.columns if c not in _RESULT_COLUMNS
                 and c not in ("model", "gpu", "topology", "num_gpus")
                 and not c.startswith(("breakdown_s.", "plan.", "memory_GiB.", "search."))]
    return [p for p in paths if p in df.columns]


def ordered_values(df: pd.DataFrame, column: str) -> list[Any]:
    """Distinct non-missing values: numbers ascending, others in expansion order."""
    vals = [v for v in df[column].tolist() if not is_missing(v)]
    seen: list[Any] = []
    for v in vals:
        if v not in seen:
            seen.append(v)
    if seen and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in seen):
        return sorted(seen)
    return seen


def is_numeric(values: Sequence[Any]) -> bool:
    """Whether every value is a number (not a boolean) and there is at least one."""
    return bool(values) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def metric_values(df: pd.DataFrame, column: str) -> pd.Series:
    """The plotted values of a metric column (fractions -> percent)."""
    s = df[column].astype(float)
    return s * 100.0 if column in PERCENT_COLUMNS else s


def series_columns(df: pd.DataFrame, keyed: list[str], axis_paths: list[str],
                   hue: str | None) -> list[str]:
    """Columns naming a series: ``hue`` plus every sweep axis that the plot does not name and
    that varies among rows which would otherwise land on the same point (same ``keyed`` and
    ``hue`` values); axes that only vary together with the named ones are left out."""
    cols = [hue] if hue else []
    keys = [c for c in [*keyed, *cols] if c]
    extras = []
    for p in axis_paths:
        if p in keys or df.empty or df[p].nunique(dropna=False) < 2:
            continue
        if not keys:
            extras.append(p)
            continue
        filled = df[[*keys, p]].astype(object).where(df[[*keys, p]].notna(), "\0nan")
        if (filled.groupby(keys, dropna=False)[p].nunique() > 1).any():
            extras.append(p)
    return cols + extras


def series_label(row: Any, cols: list[str], qualify: bool = False) -> str:
    """Legend text of one series: the hue value alone when it is the only column (the legend
    title names it) unless ``qualify``, else every value with its context (``NIC 800 Gb/s``)."""
    parts = []
    for c in cols:
        v = row[c]
        if is_missing(v):
            continue
        plain = (len(cols) == 1 and not qualify) or c in ("model", "gpu", "topology")
        parts.append(value_label(c, v) if plain else qualified_label(c, v))
    # "FullFlat GB200, FullFlat 900 GB/s" -> "FullFlat 900 GB/s": a later part that starts
    # with the first word of an earlier one makes the earlier one redundant
    keep = [p for i, p in enumerate(parts)
            if not any(q.split(" ")[0] == p.split(" ")[0] for q in parts[i + 1:])]
    return ", ".join(keep)


def label_column(df: pd.DataFrame, cols: list[str], qualify: bool = False) -> pd.Series:
    """The series label (:func:`series_label`) of every row ("" without series columns)."""
    if not cols or df.empty:
        return df.index.to_series().map(lambda _: "")
    return df.apply(lambda r: series_label(r, cols, qualify), axis=1)


def ok_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Rows with status ``ok``, in point order."""
    if "status" in df.columns:
        df = df[df["status"] == "ok"]
    if "index" in df.columns:
        df = df.sort_values("index", kind="stable")
    return df


def require(df: pd.DataFrame, columns: Iterable[str | None], what: str) -> None:
    """Raise :class:`PlotSkipped` naming the ``columns`` (``None``: not used) ``df`` lacks."""
    missing = [c for c in columns if c and c not in df.columns]
    if missing:
        raise PlotSkipped(f"{what}: column(s) {', '.join(missing)} not in the results")


def facet_groups(df: pd.DataFrame, facet: str | None) -> list[tuple[str, pd.DataFrame]]:
    """(panel title, rows) per value of the ``facet`` column; one untitled panel without."""
    if not facet:
        return [("", df)]
    out = []
    for v in ordered_values(df, facet):
        title = qualified_label(facet, v)
        out.append((title[:1].upper() + title[1:], df[df[facet] == v]))
    return out


def has_value(df: pd.DataFrame, column: str) -> pd.Series:
    """Whether each row has a value in ``column``."""
    return df[column].map(lambda v: not is_missing(v)).astype(bool)


def pd_concat(*frames: pd.DataFrame) -> pd.DataFrame:
    """Rows of several frames (the non-empty ones) in one frame."""
    import pandas as pd

    keep = [f for f in frames if not f.empty]
    return pd.concat(keep) if len(keep) > 1 else (keep[0] if keep else frames[0])


def lower_is_better(column: str) -> bool:
    """Whether smaller values of a metric are better (times, memory)."""
    if column in HIGHER_IS_BETTER:
        return False
    return column.endswith(LOWER_IS_BETTER_SUFFIXES)


__all__ = ["LOWER_IS_BETTER_SUFFIXES", "PERCENT_COLUMNS", "axis_paths_of", "facet_groups",
           "has_value", "is_numeric", "label_column", "lower_is_better", "metric_values",
           "ok_rows", "ordered_values", "pd_concat", "require", "series_columns", "series_label"]
