"""Paper-style figures of experiment results: line plots, grouped bars, stacked step-time
breakdowns and heatmaps, each written as a vector PDF and a PNG.

:func:`draw_plots` draws every entry of an experiment's ``plots`` list from its result rows
(one row per point, the columns of :mod:`codesign.experiments`' result table). It only reads
the table, so stored results can be redrawn without re-simulating (``codesign plot``).

Plot kinds (fields of a plot entry: ``kind, x, y, hue, facet, logx, logy, title, file`` and,
for heatmaps, ``value``):

``line``
    ``y`` against ``x``, one line per ``hue`` value, one panel per ``facet`` value. Rows of a
    hue group whose ``x`` is empty (e.g. a FullFlat network has no scale-up domain size) are
    drawn as a horizontal dashed reference line of their ``y``.
``bar``
    grouped bars: one group per ``x`` value, one bar per ``hue`` value, labelled with the value.
``breakdown``
    one stacked bar per ``x`` value (and ``hue`` value) whose parts are the step-time
    breakdown columns ``breakdown_s.<key>``; ``y`` = ``step_time_s`` (or ``breakdown_s``)
    stacks seconds, ``y`` = ``share`` stacks percent of the step time.
``heatmap``
    ``value`` (the metric) over ``x`` (columns) × ``y`` (rows), each cell annotated; cells of
    infeasible plans are hatched grey and marked (``OOM`` for out of memory, else ``n/a``);
    the best cell is outlined. Without ``value`` the metric is ``y`` and the rows are ``hue``.

Only rows with ``status == "ok"`` are plotted (heatmaps also mark the infeasible ones). When
sweep axes that the plot does not name vary among the rows, their values are added to the
series (hue) labels so that no two points are silently merged. A plot whose columns are missing
is skipped with a warning.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from codesign.experiments import serving_labels, style
from codesign.experiments.spec import HIGHER_IS_BETTER
from codesign.report.training import BREAKDOWN_KEYS

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: metrics stored as fractions and shown in percent
PERCENT_COLUMNS = frozenset({"mfu", "hfu"})
#: metrics for which smaller is better (heatmap "best" cell)
LOWER_IS_BETTER_SUFFIXES = ("_s", "_GiB", "_GB")

#: axis labels (with units) of known result columns and sweep axes
LABELS: dict[str, str] = {
    "mfu": "MFU (%)",
    "hfu": "HFU (%)",
    "tokens_per_s": "Throughput (tokens/s)",
    "step_time_s": "Step time (s)",
    "tflops_per_gpu": "Model TFLOP/s per GPU",
    "memory_GiB": "Memory per GPU (GiB)",
    "sim_wall_s": "Simulation wall time (s)",
    "num_gpus": "GPUs",
    "model": "Model",
    "gpu": "GPU",
    "topology": "Network",
    "gpu.peak_tflops.bf16": "Peak BF16 compute (TFLOP/s)",
    "gpu.peak_tflops.fp8": "Peak FP8 compute (TFLOP/s)",
    "gpu.hbm_bandwidth_TBps": "HBM bandwidth (TB/s)",
    "gpu.hbm_capacity_GB": "HBM capacity (GB)",
    "gpu.hbm_total_MiB": "HBM capacity (MiB)",
    "topology.scale_up.domain_size": "Scale-up domain (GPUs)",
    "topology.scale_up.bandwidth_GBps": "Scale-up bandwidth (GB/s per GPU)",
    "topology.scale_up.in_network_reduction": "Scale-up in-network reduction",
    "topology.scale_out.nic_bandwidth_Gbps": "Scale-out NIC (Gb/s per GPU)",
    "topology.scale_out.in_network_reduction": "Scale-out in-network reduction",
    "topology.scale_out.oversubscription": "Scale-out oversubscription",
    "topology.bandwidth_GBps": "FullFlat bandwidth (GB/s per GPU)",
    "topology.in_network_reduction": "In-network reduction",
    "plan.tp": "Tensor parallel (TP)",
    "plan.pp": "Pipeline parallel (PP)",
    "plan.dp": "Data parallel (DP)",
    "plan.cp": "Context parallel (CP)",
    "plan.ep": "Expert parallel (EP)",
    "plan.vpp": "Virtual pipeline stages",
    "plan.global_batch_size": "Global batch (sequences)",
    "plan.micro_batch_size": "Micro-batch (sequences)",
    "plan.seq_len": "Sequence length (tokens)",
    "plan.recompute": "Activation recompute",
    "plan.zero_stage": "ZeRO stage",
    "plan.overlap_grad_reduce": "DP gradient-reduce overlap",
    "plan.overlap_param_gather": "Parameter-gather overlap",
    "plan.tp_comm_overlap": "TP communication overlap",
    "plan.sequence_parallel": "Sequence parallelism",
    "plan.dtype": "Precision",
    "share": "Share of step time (%)",
    "breakdown_s": "Step time (s)",
}

#: short prefixes of sweep axes whose values are added to series labels
SHORT_LABELS: dict[str, str] = {
    "topology.scale_out.nic_bandwidth_Gbps": "NIC",
    "topology.scale_up.domain_size": "domain",
    "topology.scale_up.bandwidth_GBps": "scale-up",
    "topology.bandwidth_GBps": "FullFlat",
    "topology.scale_up.in_network_reduction": "scale-up reduction",
    "topology.scale_out.in_network_reduction": "scale-out reduction",
    "gpu.hbm_bandwidth_TBps": "HBM",
    "gpu.hbm_capacity_GB": "HBM",
    "gpu.peak_tflops.bf16": "BF16",
    "num_gpus": "GPUs",
    "plan.global_batch_size": "GBS",
    "plan.overlap_grad_reduce": "DP overlap",
    "plan.overlap_param_gather": "param-gather overlap",
    "plan.tp_comm_overlap": "TP overlap",
    "plan.sequence_parallel": "SP",
    "plan.recompute": "recompute",
}

#: display names of catalog entries (anything else is shown as stored)
NAMES: dict[str, str] = {
    "gpt3-175b": "GPT-3 175B",
    "gpt4-1.8t-moe": "GPT-4 1.8T MoE",
    "megatron-1t": "Megatron 1T",
    "llama3-405b": "Llama 3 405B",
    "llama3-70b": "Llama 3 70B",
    "deepseek-v3": "DeepSeek-V3",
    "mixtral-8x7b": "Mixtral 8x7B",
    "h100": "H100", "h100-sxm": "H100", "h200": "H200", "b200": "B200", "gb200": "GB200",
    "a100-80gb": "A100", "mi300x": "MI300X",
    "dgx-h100": "DGX H100",
    "dgx-h200": "DGX H200",
    "dgx-b200": "DGX B200",
    "dgx-a100": "DGX A100",
    "gb200-nvl72": "GB200 NVL72",
    "fullflat-h100": "FullFlat H100",
    "fullflat-gb200": "FullFlat GB200",
}

#: display names of the step-time breakdown components
BREAKDOWN_LABELS: dict[str, str] = {
    "forward": "Forward",
    "backward": "Backward",
    "recompute": "Recompute",
    "optimizer": "Optimizer",
    "pipeline_bubble": "Pipeline bubble",
    "tp_comm": "TP comm.",
    "cp_comm": "CP comm.",
    "ep_comm": "EP comm.",
    "dp_comm": "DP comm.",
    "pp_comm": "PP comm.",
    "other": "Other",
}

_UNIT_SUFFIXES: tuple[tuple[str, str], ...] = (
    ("_TBps", "TB/s"), ("_GBps", "GB/s"), ("_Gbps", "Gb/s"), ("_MBps", "MB/s"),
    ("_GiB", "GiB"), ("_MiB", "MiB"), ("_GB", "GB"), ("_MB", "MB"), ("_us", "µs"),
    ("_ms", "ms"), ("_s", "s"), ("_W", "W"), ("_per_s", "/s"),
)
_RESULT_COLUMNS = frozenset({
    "point_id", "index", "block", "status", "reason", "step_time_s", "mfu", "hfu",
    "tokens_per_s", "tflops_per_gpu", "memory_GiB", "sim_wall_s", "search.evaluated",
    "search.feasible"})
#: a component whose share of the step time stays below this everywhere joins "Other"
_MINOR_SHARE = 0.015


@dataclass(frozen=True)
class _Context:
    """What a plot needs from the experiment besides its own fields."""

    axis_paths: list[str] = field(default_factory=list)
    default_metric: str | None = None


class PlotSkipped(Exception):
    """A plot cannot be drawn from these rows (missing column, no data); the message says why."""


# ---------------------------------------------------------------------------------------------
# labels and value formatting


def axis_label(column: str) -> str:
    """Axis label with units of a result column or sweep axis path (``mfu`` -> ``MFU (%)``).

    Unknown columns are derived from the last path component and its unit suffix:
    ``topology.scale_up.latency_us`` -> ``Scale-up latency (µs)``."""
    if column in LABELS:
        return LABELS[column]
    if column in serving_labels.METRIC_LABELS:
        return serving_labels.METRIC_LABELS[column]
    if serving_labels.is_serving_path(column):
        return serving_labels.path_label(column)
    if column.startswith("breakdown_s."):
        return f"{BREAKDOWN_LABELS.get(column[12:], column[12:])} time (s)"
    parts = column.split(".")
    if parts[0] in ("plan", "gpu", "topology", "model") and len(parts) > 1:
        parts = parts[1:]
    last = parts[-1]
    unit = ""
    for suffix, name in _UNIT_SUFFIXES:
        if last.endswith(suffix) and len(last) > len(suffix):
            last, unit = last[: -len(suffix)], name
            break
    words = " ".join([*parts[:-1], last]).replace("_", " ").replace("scale up", "scale-up")
    words = words.replace("scale out", "scale-out")
    words = words[:1].upper() + words[1:]
    return f"{words} ({unit})" if unit else words


def _unit_of(column: str) -> str:
    label = axis_label(column)
    if label.endswith(")") and "(" in label:
        unit = label[label.rindex("(") + 1: -1]
        if column == "num_gpus" or unit.startswith("GPUs"):
            return "GPUs"
        return unit.replace(" per GPU", "")
    return ""


def compact_number(v: float) -> str:
    """Short text of a number for ticks and annotations: ``1.2M``, ``35.1``, ``0.42``,
    ``32K`` (powers-of-two multiples of 1,024 as K)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if float(v).is_integer():
        iv = int(v)
        if abs(iv) >= 1024 and iv % 1024 == 0 and (iv // 1024) & (iv // 1024 - 1) == 0:
            return f"{iv // 1024}K"
        if abs(iv) < 10_000:
            return str(iv)
    a = abs(v)
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e4, "k")):
        if a >= scale:
            scale = 1e3 if scale == 1e4 else scale
            x = v / scale
            return f"{x:.3g}{suffix}"
    if a >= 100:  # also 1,000-9,999: "1979" reads better than "1.98k"
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}".rstrip("0").rstrip(".")
    return f"{v:.2g}"


#: display text of the values of some columns, where a number alone would not say it
VALUE_FORMATS: dict[str, Callable[[Any], str]] = {
    "variant": str,
    "topology.scale_out.oversubscription":
        lambda v: "non-blocking" if float(v) == 1 else f"{float(v):g}:1 oversubscribed",
}


def value_label(column: str, value: Any) -> str:
    """Display text of one value of a column (catalog names prettified, booleans on/off)."""
    if column in VALUE_FORMATS and not _is_missing(value):
        return VALUE_FORMATS[column](value)
    if isinstance(value, (bool,)) or type(value).__name__ == "bool_":
        return "on" if bool(value) else "off"
    if isinstance(value, str):
        return NAMES.get(value, value)
    if isinstance(value, (int, float)) or hasattr(value, "dtype"):
        try:
            f = float(value)
        except (TypeError, ValueError):
            return str(value)
        return compact_number(f)
    return str(value)


def _qualified_label(column: str, value: Any) -> str:
    """A value with enough context to stand alone in a legend (``NIC 800 Gb/s``)."""
    text = value_label(column, value)
    if column in ("model", "gpu", "topology") or column in VALUE_FORMATS:
        return text
    name = SHORT_LABELS.get(column)
    if name is None and serving_labels.is_serving_path(column):
        name = serving_labels.short_label(column)
    unit = _unit_of(column)
    if name is None:
        name = axis_label(column)
        if "(" in name:
            name = name[: name.index("(")].strip()
        name = name[:1].lower() + name[1:]
    return f"{name} {text} {unit}".strip() if unit and unit != "%" else f"{name} {text}"


# ---------------------------------------------------------------------------------------------
# spec access (duck-typed so that any object with the contract's fields works)


def _plots_of(spec: Any) -> list[Any]:
    plots = getattr(spec, "plots", None)
    if plots is None and isinstance(spec, dict):
        plots = spec.get("plots")
    return list(plots or [])


def _field(plot: Any, name: str, default: Any = None) -> Any:
    if isinstance(plot, dict):
        return plot.get(name, default)
    return getattr(plot, name, default)


def _axis_paths(spec: Any, df: pd.DataFrame) -> list[str]:
    """Sweep-axis columns of the experiment (in spec order) that ``df`` has.

    Without a spec, every column that is not a standard result column counts as an axis."""
    paths: list[str] = []
    if spec is not None:
        blocks = _field(spec, "sweep") or []
        for block in blocks if isinstance(blocks, (list, tuple)) else [blocks]:
            for key in _field(block, "axes") or {}:
                if str(key) not in paths:
                    paths.append(str(key))
    else:
        paths = [c for c in df.columns if c not in _RESULT_COLUMNS
                 and c not in ("model", "gpu", "topology", "num_gpus")
                 and not c.startswith(("breakdown_s.", "plan.", "memory_GiB.", "search."))]
    return [p for p in paths if p in df.columns]


# ---------------------------------------------------------------------------------------------
# data helpers


def _is_missing(v: Any) -> bool:
    if v is None:
        return True
    try:
        return bool(isinstance(v, float) and math.isnan(v))
    except TypeError:
        return False


def _ordered_values(df: pd.DataFrame, column: str) -> list[Any]:
    """Distinct non-missing values: numbers ascending, others in expansion order."""
    vals = [v for v in df[column].tolist() if not _is_missing(v)]
    seen: list[Any] = []
    for v in vals:
        if v not in seen:
            seen.append(v)
    if seen and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in seen):
        return sorted(seen)
    return seen


def _is_numeric(values: Sequence[Any]) -> bool:
    return bool(values) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def _metric(df: pd.DataFrame, column: str) -> pd.Series:
    """The plotted values of a metric column (fractions -> percent)."""
    s = df[column].astype(float)
    return s * 100.0 if column in PERCENT_COLUMNS else s


def _series_columns(df: pd.DataFrame, keyed: list[str], axis_paths: list[str],
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


def _series_label(row: Any, cols: list[str], qualify: bool = False) -> str:
    """Legend text of one series: the hue value alone when it is the only column (the legend
    title names it) unless ``qualify``, else every value with its context (``NIC 800 Gb/s``)."""
    parts = []
    for c in cols:
        v = row[c]
        if _is_missing(v):
            continue
        plain = (len(cols) == 1 and not qualify) or c in ("model", "gpu", "topology")
        parts.append(value_label(c, v) if plain else _qualified_label(c, v))
    # "FullFlat GB200, FullFlat 900 GB/s" -> "FullFlat 900 GB/s": a later part that starts
    # with the first word of an earlier one makes the earlier one redundant
    keep = [p for i, p in enumerate(parts)
            if not any(q.split(" ")[0] == p.split(" ")[0] for q in parts[i + 1:])]
    return ", ".join(keep)


def _label_column(df: pd.DataFrame, cols: list[str], qualify: bool = False) -> pd.Series:
    if not cols or df.empty:
        return df.index.to_series().map(lambda _: "")
    return df.apply(lambda r: _series_label(r, cols, qualify), axis=1)


def _ok_rows(df: pd.DataFrame) -> pd.DataFrame:
    if "status" in df.columns:
        df = df[df["status"] == "ok"]
    if "index" in df.columns:
        df = df.sort_values("index", kind="stable")
    return df


def _require(df: pd.DataFrame, columns: Iterable[str | None], what: str) -> None:
    missing = [c for c in columns if c and c not in df.columns]
    if missing:
        raise PlotSkipped(f"{what}: column(s) {', '.join(missing)} not in the results")


def _panels(n: int, width_in: float | None = None,
            height_in: float = style.PANEL_HEIGHT_IN,
            sharey: bool = False) -> tuple[Figure, list[Axes]]:
    import matplotlib.pyplot as plt

    ncols = min(n, 4)
    nrows = math.ceil(n / ncols)
    if width_in is None:
        width_in = style.COLUMN_WIDTH_IN if n == 1 else style.TEXT_WIDTH_IN
    fig, axes = plt.subplots(nrows, ncols, figsize=(width_in, height_in * nrows),
                             squeeze=False, sharey=sharey, layout="constrained")
    flat = list(axes.ravel())
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _facets(df: pd.DataFrame, facet: str | None) -> list[tuple[str, pd.DataFrame]]:
    if not facet:
        return [("", df)]
    out = []
    for v in _ordered_values(df, facet):
        title = _qualified_label(facet, v)
        out.append((title[:1].upper() + title[1:], df[df[facet] == v]))
    return out


def _figure_legend(fig: Figure, handles: list[Any], labels: list[str],
                   title: str | None = None) -> None:
    """Legend above the panels (never over data), in as many columns as fit the figure
    width (measured), preferring full rows."""
    if not handles:
        return
    width_px = fig.get_size_inches()[0] * fig.dpi
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    n = len(labels)
    ncol = n
    while True:
        legend = fig.legend(handles, labels, loc="outside upper center", ncol=ncol,
                            title=title, frameon=False)
        if ncol == 1 or legend.get_window_extent(renderer).width <= width_px:
            break
        legend.remove()
        ncol -= 1
    rows = math.ceil(n / ncol)
    even = next((c for c in range(ncol, 0, -1) if math.ceil(n / c) == rows and n % c == 0),
                None)
    if even is not None and even != ncol:  # same number of rows, no ragged last row
        legend.remove()
        fig.legend(handles, labels, loc="outside upper center", ncol=even, title=title,
                   frameon=False)


def _category_ticks(ax: Axes, labels: list[str]) -> None:
    """Category labels at 0, 1, ... wrapped onto lines that fit their slot (rotated when a
    single word does not fit)."""
    import textwrap

    fig = ax.figure
    slot_in = ax.get_position().width * fig.bbox.width / fig.dpi / max(1, len(labels))
    fit = max(4, int(slot_in * 0.95 / (7 * 0.58 / 72)))  # 7 pt characters per slot
    if any(len(w) > fit for t in labels for w in t.split()):
        ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right",
                      rotation_mode="anchor")
    else:
        ax.set_xticks(range(len(labels)), [textwrap.fill(t, fit) for t in labels])


def _add_title(fig: Figure, title: str | None) -> None:
    """The plot title: above the legend when the figure has one (a suptitle would collide
    with a legend placed above the panels), else as the figure title."""
    if not title:
        return
    if fig.legends:
        leg = fig.legends[0]
        sub = leg.get_title().get_text()
        leg.set_title(f"{title}\n{sub}" if sub else title)
        leg.get_title().set_fontsize(8)
    else:
        fig.suptitle(title)


def _set_numeric_ticks(ax: Axes, axis: str, values: list[float], log: bool) -> None:
    """Ticks at the swept values (when few) with compact labels; log2 scale for powers of 2."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

    a = ax.xaxis if axis == "x" else ax.yaxis
    if log:
        pos = [v for v in values if v > 0]
        pow2 = bool(pos) and all(float(v).is_integer() and int(v) & (int(v) - 1) == 0
                                 for v in pos)
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log", base=2 if pow2 else 10)
    if 1 < len(values) <= 9:
        a.set_major_locator(FixedLocator(values))
        a.set_major_formatter(FuncFormatter(lambda v, _p: compact_number(v)))
        a.set_minor_locator(NullLocator())
        a.set_minor_formatter(NullFormatter())


def _format_metric_axis(ax: Axes, log: bool) -> None:
    from matplotlib.ticker import (
        FixedLocator,
        FuncFormatter,
        LogLocator,
        MaxNLocator,
        NullFormatter,
    )

    if log:
        ax.set_yscale("log")
        ax.yaxis.set_minor_formatter(NullFormatter())
        lo, hi = ax.get_ylim()
        if lo > 0 and hi / lo < 10:  # under a decade: evenly spaced round values
            ticks = [t for t in MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10])
                     .tick_values(lo, hi) if lo <= t <= hi]
            ax.yaxis.set_major_locator(FixedLocator(ticks))
        elif lo > 0 and hi / lo < 100:  # under two decades: 1-2-5 steps, not decades
            ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_minor_locator(LogLocator(base=10, subs=tuple(range(1, 10))))
    else:  # enough ticks to read values off (the default often gives two or three)
        ax.yaxis.set_major_locator(MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10]))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: compact_number(v)))


# ---------------------------------------------------------------------------------------------
# plot kinds


def _has_value(df: pd.DataFrame, column: str) -> pd.Series:
    return df[column].map(lambda v: not _is_missing(v)).astype(bool)


def _draw_line(df: pd.DataFrame, plot: Any, ctx: _Context) -> Figure:
    x, y = _field(plot, "x"), _field(plot, "y")
    hue, facet = _field(plot, "hue"), _field(plot, "facet")
    logx, logy = bool(_field(plot, "logx", False)), bool(_field(plot, "logy", False))
    _require(df, [x, y, hue, facet], "line plot")
    df = df[df[y].notna()]
    has_x = _has_value(df, x)
    pts, ref = df[has_x], df[~has_x]
    if pts.empty:
        raise PlotSkipped(f"line plot: no feasible point has values of {x} and {y}")
    # rows without x are reference lines when they form hue groups of their own (e.g. a
    # FullFlat network in a plot over scale-up domain sizes); else they belong to other
    # sweep blocks and are left out
    ref = ref[~ref[hue].isin(set(pts[hue].dropna()))] if hue else ref.iloc[0:0]
    keyed = [c for c in (x, facet) if c]
    series_cols = _series_columns(pts, keyed, ctx.axis_paths, hue)
    ref_cols = _series_columns(ref, [c for c in keyed if c != x], ctx.axis_paths, hue)
    # with reference lines in the legend every entry says what it is (no legend title)
    pts = pts.assign(_series=_label_column(pts, series_cols, qualify=not ref.empty).values)
    ref = ref.assign(_series=_label_column(ref, ref_cols, qualify=True).values)
    series = list(dict.fromkeys(pts["_series"].tolist()))
    refs = [r for r in dict.fromkeys(ref["_series"].tolist()) if r not in series]
    xvals = _ordered_values(pts, x)
    numeric_x = _is_numeric(xvals)
    facets = _facets(pd_concat(pts, ref), facet)
    fig, axes = _panels(len(facets), sharey=y in PERCENT_COLUMNS)
    handles: dict[str, Any] = {}
    for ax, (ftitle, fdf) in zip(axes, facets, strict=True):
        for i, name in enumerate(series):
            sdf = fdf[fdf["_series"] == name]
            sdf = sdf[_has_value(sdf, x)]
            if sdf.empty:
                continue
            if numeric_x:
                sdf = sdf.sort_values(x)
                xs = sdf[x].astype(float).tolist()
            else:
                xs = [xvals.index(v) for v in sdf[x]]
            label = name or axis_label(y)
            (h,) = ax.plot(xs, _metric(sdf, y).tolist(), marker=style.marker(i),
                           linestyle=style.linestyle(i), color=style.color(i), label=label,
                           # every other series hollow: coinciding points stay visible
                           markerfacecolor="white" if i % 2 else style.color(i),
                           markeredgewidth=1.0, zorder=2 + i * 0.01)
            handles.setdefault(label, h)
        for k, name in enumerate(refs):
            i = len(series) + k
            sdf = fdf[(fdf["_series"] == name) & ~_has_value(fdf, x)]
            if sdf.empty:
                continue
            level = float(_metric(sdf, y).max())
            h = ax.axhline(level, linestyle=(0, (4, 1.5)), linewidth=1.0,
                           color=style.color(i), label=name)
            handles.setdefault(name, h)
        if numeric_x:
            _set_numeric_ticks(ax, "x", [float(v) for v in xvals], logx)
        else:
            _category_ticks(ax, [value_label(x, v) for v in xvals])
        _format_metric_axis(ax, logy)
        ax.set_xlabel(axis_label(x))
        if ftitle:
            ax.set_title(ftitle)
        ax.set_ylabel(axis_label(y))
    if y in PERCENT_COLUMNS:
        for ax in axes[1:]:
            ax.set_ylabel("")
    names = list(handles)
    if len(names) > 1 or (names and names[0] != axis_label(y)):
        title = None if refs else _legend_title(series_cols)
        hs = [handles[n] for n in names]
        if len(axes) > 1 or not _legend_inside(axes[0], hs, names, title):
            _figure_legend(fig, hs, names, title=title)
    return fig


def _legend_inside(ax: Axes, handles: list[Any], labels: list[str],
                   title: str | None) -> bool:
    """Place the legend inside the panel where it covers no line, marker or reference line
    (matplotlib's least-covered spot first, then the corners and edges); False (and no
    legend) if every place covers data."""
    def place(locs: tuple[str, ...]) -> bool:
        for loc in locs:
            kw: dict[str, Any] = {"loc": loc, "title": title}
            legend = ax.legend(handles, labels, frameon=True, framealpha=0.9,
                               edgecolor="none", fancybox=False, **kw)
            if _legend_is_free(ax, legend):
                return True
            legend.remove()
        return False

    if place(("best", "lower left", "upper left", "lower right", "upper right",
              "center left", "center right", "lower center", "upper center")):
        return True
    # make room: widen the y range below (or above) the data by up to 60 % and retry there
    lo, hi = ax.get_ylim()
    log = ax.get_yscale() == "log"
    for grow in (0.25, 0.4, 0.6):
        for side, locs in (("below", ("lower left", "lower right", "lower center")),
                           ("above", ("upper left", "upper right", "upper center"))):
            if log:
                span = math.log10(hi / lo) * grow
                new = (lo / 10 ** span, hi) if side == "below" else (lo, hi * 10 ** span)
            else:
                span = (hi - lo) * grow
                new = (lo - span, hi) if side == "below" else (lo, hi + span)
                if side == "below" and lo >= 0 > new[0]:
                    continue  # a metric that cannot be negative keeps its zero
            ax.set_ylim(*new)
            if place(locs):
                return True
    ax.set_ylim(lo, hi)
    return False


def _legend_is_free(ax: Axes, legend: Any) -> bool:
    """Whether ``legend`` (inside ``ax``) covers no data point, marker or line segment."""
    import numpy as np

    fig = ax.figure
    fig.canvas.draw()
    ms_pt = max((float(line.get_markersize()) for line in ax.get_lines()
                 if line.get_marker() not in (None, "", "None", " ")), default=0.0)
    box = legend.get_window_extent().padded((ms_pt / 2 + 4) * fig.dpi / 72.0)
    for line in ax.get_lines():
        xy = np.asarray(line.get_xydata(), dtype=float).reshape(-1, 2)
        if xy.size == 0:
            continue
        # display coordinates (an axhline's x runs in axes coordinates: its own transform)
        pts = line.get_transform().transform(xy)
        dense = [pts[:1]]
        for a, b in itertools.pairwise(pts):  # sample along every segment
            t = np.linspace(0.0, 1.0, 24)[:, None]
            dense.append(a + (b - a) * t)
        allpts = np.concatenate(dense)
        inside = ((allpts[:, 0] >= box.x0) & (allpts[:, 0] <= box.x1)
                  & (allpts[:, 1] >= box.y0) & (allpts[:, 1] <= box.y1))
        if inside.any():
            return False
    return True


def pd_concat(*frames: pd.DataFrame) -> pd.DataFrame:
    """Rows of several frames (the non-empty ones) in one frame."""
    import pandas as pd

    keep = [f for f in frames if not f.empty]
    return pd.concat(keep) if len(keep) > 1 else (keep[0] if keep else frames[0])


def _legend_title(cols: list[str]) -> str | None:
    if len(cols) == 1 and cols[0] not in ("model", "gpu", "topology"):
        label = axis_label(cols[0])
        return label
    return None


def _draw_bar(df: pd.DataFrame, plot: Any, ctx: _Context) -> Figure:
    x, y = _field(plot, "x"), _field(plot, "y")
    hue, facet = _field(plot, "hue"), _field(plot, "facet")
    logy = bool(_field(plot, "logy", False))
    _require(df, [x, y, hue, facet], "bar plot")
    df = df[df[y].notna() & _has_value(df, x)]
    if df.empty:
        raise PlotSkipped(f"bar plot: no feasible point has a value of {y}")
    series_cols = _series_columns(df, [c for c in (x, facet) if c], ctx.axis_paths, hue)
    df = df.assign(_series=_label_column(df, series_cols).values)
    series = list(dict.fromkeys(df["_series"].tolist()))
    xvals = _ordered_values(df, x)
    facets = _facets(df, facet)
    fig, axes = _panels(len(facets), sharey=y in PERCENT_COLUMNS)
    n = max(1, len(series))
    width = 0.8 / n
    handles: dict[str, Any] = {}
    annotate = len(xvals) * n <= 16
    for ax, (ftitle, fdf) in zip(axes, facets, strict=True):
        for j, name in enumerate(series):
            sdf = fdf[fdf["_series"] == name]
            pos, vals = [], []
            for k, xv in enumerate(xvals):
                cell = sdf[sdf[x] == xv]
                if cell.empty:
                    continue
                pos.append(k - 0.4 + width * (j + 0.5))
                vals.append(float(_metric(cell, y).max()))
            if not pos:
                continue
            bars = ax.bar(pos, vals, width=width * 0.92, color=style.color(j),
                          hatch=style.hatch(j), edgecolor="white" if not style.hatch(j)
                          else "#333333", linewidth=0.4, label=name or axis_label(y))
            handles.setdefault(name or axis_label(y), bars)
            if annotate:
                ax.bar_label(bars, labels=[compact_number(v) for v in vals], fontsize=6,
                             padding=1.5)
        _category_ticks(ax, [value_label(x, v) for v in xvals])
        ax.set_xlim(-0.6, len(xvals) - 0.4)
        ax.grid(axis="x", visible=False)
        _format_metric_axis(ax, logy)
        if annotate and not logy:
            lo, hi = ax.get_ylim()
            ax.set_ylim(lo, hi * 1.08)
        ax.set_xlabel(axis_label(x))
        if ftitle:
            ax.set_title(ftitle)
        ax.set_ylabel(axis_label(y))
    names = list(handles)
    if len(names) > 1 or (names and names[0] != axis_label(y)):
        _figure_legend(fig, [handles[k] for k in names], names,
                       title=_legend_title(series_cols))
    return fig


def _breakdown_components(df: pd.DataFrame) -> list[str]:
    cols = [f"breakdown_s.{k}" for k in BREAKDOWN_KEYS if f"breakdown_s.{k}" in df.columns]
    extra = sorted(c for c in df.columns
                   if c.startswith("breakdown_s.") and c not in cols)
    return cols + extra


def _draw_breakdown(df: pd.DataFrame, plot: Any, ctx: _Context) -> Figure:
    x, y = _field(plot, "x"), _field(plot, "y")
    hue, facet = _field(plot, "hue"), _field(plot, "facet")
    _require(df, [x, hue, facet], "breakdown plot")
    df = df[_has_value(df, x)]
    comps = _breakdown_components(df)
    if not comps:
        raise PlotSkipped("breakdown plot: no breakdown_s.* columns in the results")
    share = y in ("share", "breakdown_share", "step_share")
    data = df[comps].astype(float).fillna(0.0)
    total = data.sum(axis=1)
    df = df[total > 0]
    if df.empty:
        raise PlotSkipped("breakdown plot: no feasible point")
    data = data.loc[df.index]
    total = total.loc[df.index]
    frac = data.div(total, axis=0)
    keep = [c for c in comps if frac[c].max() >= _MINOR_SHARE]
    minor = [c for c in comps if c not in keep and data[c].max() > 0]
    parts = {c[len("breakdown_s."):]: data[c] for c in keep}
    if minor:
        parts["other"] = data[minor].sum(axis=1)
    values = {k: (v / total * 100.0 if share else v) for k, v in parts.items()}

    series_cols = _series_columns(df, [c for c in (x, facet) if c], ctx.axis_paths, hue)
    df = df.assign(_series=_label_column(df, series_cols).values)
    series = list(dict.fromkeys(df["_series"].tolist()))
    xvals = _ordered_values(df, x)
    facets = _facets(df, facet)
    nser = max(1, len(series))
    # per-bar labels say what the hue is ("DP overlap on"), the x groups sit below them
    bar_labels = {}
    if hue and series_cols == [hue] and hue not in ("model", "gpu", "topology"):
        for v in _ordered_values(df, hue):
            bar_labels[value_label(hue, v)] = _qualified_label(hue, v)
    fig, axes = _panels(len(facets), sharey=share,
                        height_in=style.PANEL_HEIGHT_IN + (0.25 if nser > 1 else 0.0))
    handles: dict[str, Any] = {}
    width = 0.8 / nser
    panel_in = fig.get_size_inches()[0] / min(len(facets), 4) - 0.45
    depth_in = 0.0
    for ax, (ftitle, fdf) in zip(axes, facets, strict=True):
        ticks: list[float] = []
        ticklabels: list[str] = []
        for j, name in enumerate(series):
            sdf = fdf[fdf["_series"] == name]
            for k, xv in enumerate(xvals):
                cell = sdf[sdf[x] == xv]
                if cell.empty:
                    continue
                row = cell.index[0]
                pos = k - 0.4 + width * (j + 0.5)
                bottom = 0.0
                for c, (key, vals) in enumerate(values.items()):
                    h = float(vals.loc[row])
                    fill, pattern = style.BREAKDOWN_STYLE.get(
                        key, (style.color(c), style.hatch(c)))
                    bar = ax.bar(pos, h, bottom=bottom, width=width * 0.9, color=fill,
                                 hatch=pattern, edgecolor="white", linewidth=0.3)
                    handles.setdefault(BREAKDOWN_LABELS.get(key, key), bar)
                    bottom += h
                if nser > 1:
                    ticks.append(pos)
                    ticklabels.append(bar_labels.get(name, name))
        if nser > 1:
            depth_in = max(depth_in, _two_level_ticks(
                ax, ticks, ticklabels, [value_label(x, v) for v in xvals], axis_label(x),
                bar_width_in=panel_in * width / (len(xvals) + 0.2)))
        else:
            _category_ticks(ax, [value_label(x, v) for v in xvals])
            ax.set_xlabel(axis_label(x))
        ax.set_xlim(-0.6, len(xvals) - 0.4)
        ax.grid(axis="x", visible=False)
        if ftitle:
            ax.set_title(ftitle)
        ax.set_ylabel(LABELS["share"] if share else "Step time (s)")
        if share:
            ax.set_ylim(0, 100)
    _figure_legend(fig, list(handles.values()), list(handles))
    if depth_in > 0.2:  # tall per-bar labels: keep the bars their height
        w, h = fig.get_size_inches()
        fig.set_size_inches(w, h + depth_in - 0.1)
    return fig


#: average width of a character at the 6 pt tick-label size, inches
_CHAR_IN = 6 * 0.6 / 72


def _two_level_ticks(ax: Axes, ticks: list[float], labels: list[str], groups: list[str],
                     xlabel: str, bar_width_in: float) -> float:
    """One label under every bar (wrapped, or rotated when a word does not fit) and the
    group labels of the x values in a second row below them; returns the depth of the
    per-bar labels, inches."""
    import textwrap

    fit = max(4, int(bar_width_in / _CHAR_IN))
    longest_word = max((len(w) for t in labels for w in t.split()), default=0)
    rotate = longest_word > fit
    if rotate:
        shown = labels
        depth_pt = 6 * 0.6 * max((len(t) for t in labels), default=0)
    else:
        shown = [textwrap.fill(t, fit) for t in labels]
        depth_pt = 7.2 * max((t.count("\n") + 1 for t in shown), default=1)
    ax.set_xticks(ticks, shown, rotation=90 if rotate else 0, fontsize=6)
    sec = ax.secondary_xaxis("bottom")
    sec.set_xticks(range(len(groups)), groups)
    sec.tick_params(axis="x", length=0, pad=depth_pt + 6)
    sec.spines["bottom"].set_visible(False)
    sec.set_xlabel(xlabel)
    return depth_pt / 72.0


def _lower_is_better(column: str) -> bool:
    if column in HIGHER_IS_BETTER:
        return False
    return column.endswith(LOWER_IS_BETTER_SUFFIXES)


def _infeasible_mark(reason: Any) -> str:
    text = str(reason or "").lower()
    if "out of memory" in text:
        return "OOM"
    return "n/a"


def _draw_heatmap(df_all: pd.DataFrame, plot: Any, ctx: _Context) -> Figure:
    import numpy as np
    from matplotlib.patches import Rectangle
    from matplotlib.ticker import FuncFormatter

    x, rows_col, facet = _field(plot, "x"), _field(plot, "y"), _field(plot, "facet")
    metric = _field(plot, "value") or ctx.default_metric
    if not metric:
        raise PlotSkipped("heatmap: no value column (set value: or list a metric)")
    _require(df_all, [x, rows_col, metric, facet], "heatmap")
    if "index" in df_all.columns:
        df_all = df_all.sort_values("index", kind="stable")
    df_all = df_all[_has_value(df_all, x) & _has_value(df_all, rows_col)]
    ok = df_all["status"] == "ok" if "status" in df_all.columns else df_all[metric].notna()
    ok = ok & df_all[metric].notna()
    if not ok.any():
        raise PlotSkipped("heatmap: no feasible point with values of "
                          f"{x}, {rows_col} and {metric}")
    cols = _ordered_values(df_all, x)
    rows = _ordered_values(df_all, rows_col)
    facets = _facets(df_all, facet)
    lower = _lower_is_better(metric)
    okv = _metric(df_all[ok], metric)
    vmin, vmax = float(okv.min()), float(okv.max())
    if vmin == vmax:
        vmin, vmax = vmin - 1.0, vmax + 1.0
    cell_in = 0.42
    panel_w = max(1.6, cell_in * len(cols) + 0.7)
    width = min(style.TEXT_WIDTH_IN, panel_w * len(facets) + 0.7)
    if len(facets) == 1:
        width = max(width, style.COLUMN_WIDTH_IN)
    height = max(1.6, 0.3 * len(rows) + 0.9)
    fig, axes = _panels(len(facets), width_in=width, height_in=height)
    cmap = _cmap()
    image = None
    for ax, (ftitle, fdf) in zip(axes, facets, strict=True):
        grid = np.full((len(rows), len(cols)), np.nan)
        marks: dict[tuple[int, int], str] = {}
        for _, r in fdf.iterrows():
            if _is_missing(r[x]) or _is_missing(r[rows_col]):
                continue
            i, j = rows.index(r[rows_col]), cols.index(r[x])
            is_ok = (r["status"] == "ok") if "status" in fdf.columns else not _is_missing(
                r[metric])
            if is_ok and not _is_missing(r[metric]):
                v = float(r[metric]) * (100.0 if metric in PERCENT_COLUMNS else 1.0)
                cur = grid[i, j]
                if math.isnan(cur) or (v < cur if lower else v > cur):
                    grid[i, j] = v
                marks.pop((i, j), None)
            elif math.isnan(grid[i, j]):
                marks[(i, j)] = _infeasible_mark(r.get("reason", ""))
        image = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=vmin, vmax=vmax,
                          aspect="auto", origin="lower")
        for (i, j), text in marks.items():
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor=style.INFEASIBLE_COLOR,
                                   hatch="////", edgecolor="white", linewidth=0.0))
            ax.text(j, i, text, ha="center", va="center", fontsize=6, color="#404040")
        best = None
        if np.isfinite(grid).any():
            flat = np.nanargmin(grid) if lower else np.nanargmax(grid)
            best = np.unravel_index(flat, grid.shape)
        for i in range(len(rows)):
            for j in range(len(cols)):
                v = grid[i, j]
                if math.isnan(v):
                    continue
                rgba = cmap((v - vmin) / (vmax - vmin))
                lum = 0.2126 * rgba[0] + 0.7152 * rgba[1] + 0.0722 * rgba[2]
                bold = best is not None and (i, j) == tuple(best)
                ax.text(j, i, compact_number(v), ha="center", va="center", fontsize=6.5,
                        color="black" if lum > 0.5 else "white",
                        fontweight="bold" if bold else "normal")
        if best is not None:
            bi, bj = int(best[0]), int(best[1])
            ax.add_patch(Rectangle((bj - 0.5, bi - 0.5), 1, 1, fill=False,
                                   edgecolor="black", linewidth=1.4))
        ax.set_xticks(range(len(cols)), [value_label(x, v) for v in cols])
        ax.set_yticks(range(len(rows)), [value_label(rows_col, v) for v in rows])
        ax.set_xlabel(axis_label(x))
        ax.set_ylabel(axis_label(rows_col))
        ax.grid(False)
        for side in ("top", "right"):
            ax.spines[side].set_visible(True)
        ax.tick_params(length=0)
        if ftitle:
            ax.set_title(ftitle)
    if image is not None:
        cbar = fig.colorbar(image, ax=axes, shrink=0.9, pad=0.02, aspect=25)
        cbar.set_label(axis_label(metric))
        cbar.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: compact_number(v)))
        cbar.outline.set_linewidth(0.4)
    return fig


def _cmap() -> Any:
    import matplotlib

    return matplotlib.colormaps[style.HEATMAP_CMAP]


_KINDS = {"line": _draw_line, "bar": _draw_bar, "breakdown": _draw_breakdown,
          "heatmap": _draw_heatmap}


# ---------------------------------------------------------------------------------------------
# entry points


def make_figure(results: pd.DataFrame, plot: Any, spec: Any = None) -> Figure:
    """The matplotlib figure of one plot entry of ``spec`` (an
    :class:`~codesign.experiments.spec.ExperimentSpec` or ``None``), drawn in the paper style
    from the rows of ``results`` with status ``ok`` (heatmaps also mark the infeasible ones).
    The caller owns (and closes) the figure. Raises :class:`PlotSkipped` when the rows cannot
    give this plot (a missing column, nothing feasible, an unknown kind)."""
    kind = str(_field(plot, "kind", "line"))
    if kind not in _KINDS:
        raise PlotSkipped(f"unknown plot kind {kind!r} (allowed: {', '.join(_KINDS)})")
    metrics = list(_field(spec, "metrics") or []) if spec is not None else []
    ctx = _Context(axis_paths=_axis_paths(spec, results),
                   default_metric=metrics[0] if metrics else None)
    import matplotlib.pyplot as plt

    with style.paper_style():
        rows = results if kind == "heatmap" else _ok_rows(results)
        if rows.empty:
            raise PlotSkipped(f"{kind} plot: no feasible point")
        fig = _KINDS[kind](rows, plot, ctx)
        try:
            _add_title(fig, _field(plot, "title"))
        except Exception:
            plt.close(fig)
            raise
    return fig


def draw_plot(results: pd.DataFrame, plot: Any, out_dir: Path,
              spec: Any = None) -> list[Path]:
    """Draw one plot entry of ``spec`` into ``out_dir`` as ``<file>.pdf`` and ``<file>.png``;
    returns both paths. Raises :class:`PlotSkipped` like :func:`make_figure`."""
    import matplotlib.pyplot as plt

    kind = str(_field(plot, "kind", "line"))
    stem = str(_field(plot, "file") or f"{kind}-{_field(plot, 'y')}-vs-{_field(plot, 'x')}")
    fig = make_figure(results, plot, spec)
    try:
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        paths = [out_dir / f"{stem}.pdf", out_dir / f"{stem}.png"]
        with style.paper_style():
            for p in paths:
                fig.savefig(p)
    finally:
        plt.close(fig)
    return paths


def draw_plots(results: pd.DataFrame, spec: Any, out_dir: Path) -> list[Path]:
    """Draw every entry of ``spec.plots`` from ``results`` (one row per point) into
    ``out_dir`` as ``<file>.pdf`` and ``<file>.png``; returns the written paths.

    A plot that cannot be drawn (a column it names is missing, no feasible point) is skipped
    with a :class:`UserWarning` naming it and the reason; the others are still drawn."""
    written: list[Path] = []
    for plot in _plots_of(spec):
        try:
            written += draw_plot(results, plot, out_dir, spec=spec)
        except PlotSkipped as exc:
            name = _field(plot, "file") or _field(plot, "kind")
            warnings.warn(f"plot {name!r} skipped: {exc}", UserWarning, stacklevel=2)
    return written
