"""The ``line`` plot kind: ``y`` against ``x``, one line per ``hue`` value, one panel per
``facet`` value. Rows of a hue group whose ``x`` is empty (e.g. a FullFlat network has no
scale-up domain size) are drawn as a horizontal dashed reference line of their ``y``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from codesign.experiments import style
from codesign.experiments.plots.context import PlotContext, PlotSkipped
from codesign.experiments.plots.data import (
    PERCENT_COLUMNS,
    facet_groups,
    has_value,
    is_numeric,
    label_column,
    metric_values,
    ordered_values,
    pd_concat,
    require,
    series_columns,
)
from codesign.experiments.plots.labels import axis_label, legend_title, value_label
from codesign.experiments.plots.layout import figure_legend, legend_inside, panels
from codesign.experiments.plots.ticks import (
    category_ticks,
    format_metric_axis,
    set_numeric_ticks,
)

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from codesign.experiments.spec import PlotSpec


def draw_line(df: pd.DataFrame, plot: PlotSpec, ctx: PlotContext) -> Figure:
    """``y`` against ``x``, one line per series, one panel per ``facet`` value; hue groups
    without ``x`` are dashed horizontal reference lines (see the package docstring)."""
    x, y, hue, facet = plot.x, plot.y, plot.hue, plot.facet
    logx, logy = bool(plot.logx), bool(plot.logy)
    require(df, [x, y, hue, facet], "line plot")
    df = df[df[y].notna()]
    has_x = has_value(df, x)
    pts, ref = df[has_x], df[~has_x]
    if pts.empty:
        raise PlotSkipped(f"line plot: no feasible point has values of {x} and {y}")
    # rows without x are reference lines when they form hue groups of their own (e.g. a
    # FullFlat network in a plot over scale-up domain sizes); else they belong to other
    # sweep blocks and are left out
    ref = ref[~ref[hue].isin(set(pts[hue].dropna()))] if hue else ref.iloc[0:0]
    keyed = [c for c in (x, facet) if c]
    series_cols = series_columns(pts, keyed, ctx.axis_paths, hue)
    ref_cols = series_columns(ref, [c for c in keyed if c != x], ctx.axis_paths, hue)
    # with reference lines in the legend every entry says what it is (no legend title)
    pts = pts.assign(_series=label_column(pts, series_cols, qualify=not ref.empty).values)
    ref = ref.assign(_series=label_column(ref, ref_cols, qualify=True).values)
    series = list(dict.fromkeys(pts["_series"].tolist()))
    refs = [r for r in dict.fromkeys(ref["_series"].tolist()) if r not in series]
    xvals = ordered_values(pts, x)
    numeric_x = is_numeric(xvals)
    facets = facet_groups(pd_concat(pts, ref), facet)
    fig, axes = panels(len(facets), sharey=y in PERCENT_COLUMNS)
    handles: dict[str, Any] = {}
    for ax, (ftitle, fdf) in zip(axes, facets, strict=True):
        for i, name in enumerate(series):
            sdf = fdf[fdf["_series"] == name]
            sdf = sdf[has_value(sdf, x)]
            if sdf.empty:
                continue
            if numeric_x:
                sdf = sdf.sort_values(x)
                xs = sdf[x].astype(float).tolist()
            else:
                xs = [xvals.index(v) for v in sdf[x]]
            label = name or axis_label(y)
            (h,) = ax.plot(xs, metric_values(sdf, y).tolist(), marker=style.marker(i),
                           linestyle=style.linestyle(i), color=style.color(i), label=label,
                           # every other series hollow: coinciding points stay visible
                           markerfacecolor="white" if i % 2 else style.color(i),
                           markeredgewidth=1.0, zorder=2 + i * 0.01)
            handles.setdefault(label, h)
        for k, name in enumerate(refs):
            i = len(series) + k
            sdf = fdf[(fdf["_series"] == name) & ~has_value(fdf, x)]
            if sdf.empty:
                continue
            level = float(metric_values(sdf, y).max())
            h = ax.axhline(level, linestyle=(0, (4, 1.5)), linewidth=1.0,
                           color=style.color(i), label=name)
            handles.setdefault(name, h)
        if numeric_x:
            set_numeric_ticks(ax, "x", [float(v) for v in xvals], logx)
        else:
            category_ticks(ax, [value_label(x, v) for v in xvals])
        format_metric_axis(ax, logy)
        ax.set_xlabel(axis_label(x))
        if ftitle:
            ax.set_title(ftitle)
        ax.set_ylabel(axis_label(y))
    if y in PERCENT_COLUMNS:
        for ax in axes[1:]:
            ax.set_ylabel("")
    names = list(handles)
    if len(names) > 1 or (names and names[0] != axis_label(y)):
        title = None if refs else legend_title(series_cols)
        hs = [handles[n] for n in names]
        if len(axes) > 1 or not legend_inside(axes[0], hs, names, title):
            figure_legend(fig, hs, names, title=title)
    return fig


__all__ = ["draw_line"]
