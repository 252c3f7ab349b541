"""The ``heatmap`` plot kind: ``value`` (the metric; the study's first metric when the plot
names none) over ``x`` (columns) × ``y`` (rows), one panel per ``facet`` value, each cell
annotated. Cells of infeasible plans are hatched grey and marked (``OOM`` for out of memory,
else ``n/a``); the best cell of each panel is outlined. Where several rows fall on one cell the
best value is shown."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from codesign.experiments import style
from codesign.experiments.plots.context import PlotContext, PlotSkipped
from codesign.experiments.plots.data import (
    PERCENT_COLUMNS,
    facet_groups,
    has_value,
    lower_is_better,
    metric_values,
    ordered_values,
    require,
)
from codesign.experiments.plots.formatting import compact_number, is_missing
from codesign.experiments.plots.labels import axis_label, value_label
from codesign.experiments.plots.layout import panels

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.image import AxesImage

    from codesign.experiments.spec import PlotSpec

#: width of one heatmap cell, inches
CELL_WIDTH_IN = 0.42


def infeasible_mark(reason: Any) -> str:
    """Text of an infeasible cell: ``OOM`` when the reason is out of memory, else ``n/a``."""
    text = str(reason or "").lower()
    if "out of memory" in text:
        return "OOM"
    return "n/a"


def cell_grid(fdf: pd.DataFrame, x: str, rows_col: str, metric: str, rows: list[Any],
              cols: list[Any], lower: bool) -> tuple[np.ndarray, dict[tuple[int, int], str]]:
    """The plotted value of every (row, column) cell (NaN where no feasible row; the best of
    several rows; fractions in percent) and the marks of cells with only infeasible rows."""
    import numpy as np

    grid = np.full((len(rows), len(cols)), np.nan)
    marks: dict[tuple[int, int], str] = {}
    for _, r in fdf.iterrows():
        if is_missing(r[x]) or is_missing(r[rows_col]):
            continue
        i, j = rows.index(r[rows_col]), cols.index(r[x])
        is_ok = (r["status"] == "ok") if "status" in fdf.columns else not is_missing(
            r[metric])
        if is_ok and not is_missing(r[metric]):
            v = float(r[metric]) * (100.0 if metric in PERCENT_COLUMNS else 1.0)
            cur = grid[i, j]
            if math.isnan(cur) or (v < cur if lower else v > cur):
                grid[i, j] = v
            marks.pop((i, j), None)
        elif math.isnan(grid[i, j]):
            marks[(i, j)] = infeasible_mark(r.get("reason", ""))
    return grid, marks


def _draw_cells(ax: Axes, grid: np.ndarray, marks: dict[tuple[int, int], str], cmap: Any,
                vmin: float, vmax: float, lower: bool) -> AxesImage:
    """The colored cells, the infeasible marks, the value of every cell and the outline of the
    best one; returns the image (for the colorbar)."""
    import numpy as np
    from matplotlib.patches import Rectangle

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
    nrows, ncols = grid.shape
    for i in range(nrows):
        for j in range(ncols):
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
    return image


def _label_panel(ax: Axes, x: str, rows_col: str, cols: list[Any], rows: list[Any],
                 title: str) -> None:
    """Ticks at the cells with their values, axis labels, a closed frame and the title."""
    ax.set_xticks(range(len(cols)), [value_label(x, v) for v in cols])
    ax.set_yticks(range(len(rows)), [value_label(rows_col, v) for v in rows])
    ax.set_xlabel(axis_label(x))
    ax.set_ylabel(axis_label(rows_col))
    ax.grid(False)
    for side in ("top", "right"):
        ax.spines[side].set_visible(True)
    ax.tick_params(length=0)
    if title:
        ax.set_title(title)


def draw_heatmap(df_all: pd.DataFrame, plot: PlotSpec, ctx: PlotContext) -> Figure:
    """The heatmap of all rows (infeasible ones are marked, not dropped); sized at
    :data:`CELL_WIDTH_IN` per column, at most the text width."""
    from matplotlib.ticker import FuncFormatter

    x, rows_col, facet = plot.x, plot.y, plot.facet
    metric = plot.value or ctx.default_metric
    if not metric:
        raise PlotSkipped("heatmap: no value column (set value: or list a metric)")
    require(df_all, [x, rows_col, metric, facet], "heatmap")
    if "index" in df_all.columns:
        df_all = df_all.sort_values("index", kind="stable")
    df_all = df_all[has_value(df_all, x) & has_value(df_all, rows_col)]
    ok = df_all["status"] == "ok" if "status" in df_all.columns else df_all[metric].notna()
    ok = ok & df_all[metric].notna()
    if not ok.any():
        raise PlotSkipped("heatmap: no feasible point with values of "
                          f"{x}, {rows_col} and {metric}")
    cols = ordered_values(df_all, x)
    rows = ordered_values(df_all, rows_col)
    facets = facet_groups(df_all, facet)
    lower = lower_is_better(metric)
    okv = metric_values(df_all[ok], metric)
    vmin, vmax = float(okv.min()), float(okv.max())
    if vmin == vmax:
        vmin, vmax = vmin - 1.0, vmax + 1.0
    panel_w = max(1.6, CELL_WIDTH_IN * len(cols) + 0.7)
    width = min(style.TEXT_WIDTH_IN, panel_w * len(facets) + 0.7)
    if len(facets) == 1:
        width = max(width, style.COLUMN_WIDTH_IN)
    height = max(1.6, 0.3 * len(rows) + 0.9)
    fig, axes = panels(len(facets), width_in=width, height_in=height)
    cmap = _cmap()
    image = None
    for ax, (ftitle, fdf) in zip(axes, facets, strict=True):
        grid, marks = cell_grid(fdf, x, rows_col, metric, rows, cols, lower)
        image = _draw_cells(ax, grid, marks, cmap, vmin, vmax, lower)
        _label_panel(ax, x, rows_col, cols, rows, ftitle)
    if image is not None:
        cbar = fig.colorbar(image, ax=axes, shrink=0.9, pad=0.02, aspect=25)
        cbar.set_label(axis_label(metric))
        cbar.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: compact_number(v)))
        cbar.outline.set_linewidth(0.4)
    return fig


def _cmap() -> Any:
    import matplotlib

    return matplotlib.colormaps[style.HEATMAP_CMAP]


__all__ = ["CELL_WIDTH_IN", "cell_grid", "draw_heatmap", "infeasible_mark"]
