"""The ``breakdown`` plot kind: one stacked bar per ``x`` value (and ``hue`` value) whose
parts are the step-time breakdown columns ``breakdown_s.<key>`` (seconds); ``y`` =
``step_time_s`` (or ``breakdown_s``) stacks seconds, ``y`` = ``share`` stacks percent of the
step time."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from codesign.experiments import style
from codesign.experiments.plots.context import PlotContext, PlotSkipped
from codesign.experiments.plots.data import (
    facet_groups,
    has_value,
    label_column,
    ordered_values,
    require,
    series_columns,
)
from codesign.experiments.plots.labels import (
    BREAKDOWN_LABELS,
    LABELS,
    axis_label,
    qualified_label,
    value_label,
)
from codesign.experiments.plots.layout import figure_legend, panels
from codesign.experiments.plots.ticks import category_ticks, two_level_ticks
from codesign.report.training import BREAKDOWN_KEYS

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from codesign.experiments.spec import PlotSpec

#: a component whose share of the step time stays below this everywhere joins "Other"
MINOR_SHARE = 0.015


def breakdown_components(df: pd.DataFrame) -> list[str]:
    """The ``breakdown_s.<key>`` columns of ``df``: known keys in report order, then others."""
    cols = [f"breakdown_s.{k}" for k in BREAKDOWN_KEYS if f"breakdown_s.{k}" in df.columns]
    extra = sorted(c for c in df.columns
                   if c.startswith("breakdown_s.") and c not in cols)
    return cols + extra


def stacked_parts(df: pd.DataFrame, y: str) -> tuple[pd.DataFrame, dict[str, pd.Series], bool]:
    """The rows with a positive step time, the stacked parts of each (component key ->
    seconds, or percent of the step time when ``y`` asks for a share; components under
    :data:`MINOR_SHARE` everywhere summed as ``other``) and whether they are shares."""
    comps = breakdown_components(df)
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
    keep = [c for c in comps if frac[c].max() >= MINOR_SHARE]
    minor = [c for c in comps if c not in keep and data[c].max() > 0]
    parts = {c[len("breakdown_s."):]: data[c] for c in keep}
    if minor:
        parts["other"] = data[minor].sum(axis=1)
    values = {k: (v / total * 100.0 if share else v) for k, v in parts.items()}
    return df, values, share


def draw_breakdown(df: pd.DataFrame, plot: PlotSpec, ctx: PlotContext) -> Figure:
    """One stacked bar of step-time components per ``x`` value (and series), one panel per
    ``facet`` value; seconds, or percent of the step time for ``y`` = ``share``."""
    x, y, hue, facet = plot.x, plot.y, plot.hue, plot.facet
    require(df, [x, hue, facet], "breakdown plot")
    df = df[has_value(df, x)]
    df, values, share = stacked_parts(df, y)
    series_cols = series_columns(df, [c for c in (x, facet) if c], ctx.axis_paths, hue)
    df = df.assign(_series=label_column(df, series_cols).values)
    series = list(dict.fromkeys(df["_series"].tolist()))
    xvals = ordered_values(df, x)
    facets = facet_groups(df, facet)
    nser = max(1, len(series))
    # per-bar labels say what the hue is ("DP overlap on"), the x groups sit below them
    bar_labels = {}
    if hue and series_cols == [hue] and hue not in ("model", "gpu", "topology"):
        for v in ordered_values(df, hue):
            bar_labels[value_label(hue, v)] = qualified_label(hue, v)
    fig, axes = panels(len(facets), sharey=share,
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
            depth_in = max(depth_in, two_level_ticks(
                ax, ticks, ticklabels, [value_label(x, v) for v in xvals], axis_label(x),
                bar_width_in=panel_in * width / (len(xvals) + 0.2)))
        else:
            category_ticks(ax, [value_label(x, v) for v in xvals])
            ax.set_xlabel(axis_label(x))
        ax.set_xlim(-0.6, len(xvals) - 0.4)
        ax.grid(axis="x", visible=False)
        if ftitle:
            ax.set_title(ftitle)
        ax.set_ylabel(LABELS["share"] if share else "Step time (s)")
        if share:
            ax.set_ylim(0, 100)
    figure_legend(fig, list(handles.values()), list(handles))
    if depth_in > 0.2:  # tall per-bar labels: keep the bars their height
        w, h = fig.get_size_inches()
        fig.set_size_inches(w, h + depth_in - 0.1)
    return fig


__all__ = ["MINOR_SHARE", "breakdown_components", "draw_breakdown", "stacked_parts"]
