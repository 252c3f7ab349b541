"""The ``bar`` plot kind: grouped bars, one group per ``x`` value and one bar per ``hue``
value, labelled with the value."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from codesign.experiments import style
from codesign.experiments.plots.context import PlotContext, PlotSkipped
from codesign.experiments.plots.data import (
    PERCENT_COLUMNS,
    facet_groups,
    has_value,
    label_column,
    metric_values,
    ordered_values,
    require,
    series_columns,
)
from codesign.experiments.plots.formatting import compact_number
from codesign.experiments.plots.labels import axis_label, legend_title, value_label
from codesign.experiments.plots.layout import figure_legend, panels
from codesign.experiments.plots.ticks import category_ticks, format_metric_axis

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from codesign.experiments.spec import PlotSpec


def draw_bar(df: pd.DataFrame, plot: PlotSpec, ctx: PlotContext) -> Figure:
    """Grouped bars: one group per ``x`` value, one bar per series (the largest ``y`` of the
    cell), value labels when at most 16 bars; one panel per ``facet`` value."""
    x, y, hue, facet = plot.x, plot.y, plot.hue, plot.facet
    logy = bool(plot.logy)
    require(df, [x, y, hue, facet], "bar plot")
    df = df[df[y].notna() & has_value(df, x)]
    if df.empty:
        raise PlotSkipped(f"bar plot: no feasible point has a value of {y}")
    series_cols = series_columns(df, [c for c in (x, facet) if c], ctx.axis_paths, hue)
    df = df.assign(_series=label_column(df, series_cols).values)
    series = list(dict.fromkeys(df["_series"].tolist()))
    xvals = ordered_values(df, x)
    facets = facet_groups(df, facet)
    fig, axes = panels(len(facets), sharey=y in PERCENT_COLUMNS)
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
                vals.append(float(metric_values(cell, y).max()))
            if not pos:
                continue
            bars = ax.bar(pos, vals, width=width * 0.92, color=style.color(j),
                          hatch=style.hatch(j), edgecolor="white" if not style.hatch(j)
                          else "#333333", linewidth=0.4, label=name or axis_label(y))
            handles.setdefault(name or axis_label(y), bars)
            if annotate:
                ax.bar_label(bars, labels=[compact_number(v) for v in vals], fontsize=6,
                             padding=1.5)
        category_ticks(ax, [value_label(x, v) for v in xvals])
        ax.set_xlim(-0.6, len(xvals) - 0.4)
        ax.grid(axis="x", visible=False)
        format_metric_axis(ax, logy)
        if annotate and not logy:
            lo, hi = ax.get_ylim()
            ax.set_ylim(lo, hi * 1.08)
        ax.set_xlabel(axis_label(x))
        if ftitle:
            ax.set_title(ftitle)
        ax.set_ylabel(axis_label(y))
    names = list(handles)
    if len(names) > 1 or (names and names[0] != axis_label(y)):
        figure_legend(fig, [handles[k] for k in names], names,
                       title=legend_title(series_cols))
    return fig


__all__ = ["draw_bar"]
