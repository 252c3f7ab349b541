"""Paper-style figures of experiment results: line plots, grouped bars, stacked step-time
breakdowns and heatmaps, each written as a vector PDF and a PNG.

:func:`draw_plots` draws every entry of an experiment's ``plots`` list from its result rows
(one row per point, the columns of :mod:`codesign.experiments`' result table). It only reads
the table, so stored results can be redrawn without re-simulating (``codesign plot``).

A plot entry is a :class:`~codesign.experiments.spec.PlotSpec` (fields ``kind, x, y, hue,
facet, value, logx, logy, title, file``). Plot kinds (:data:`PLOT_KINDS`, one module each):

``line`` (:mod:`.line`)
    ``y`` against ``x``, one line per ``hue`` value, one panel per ``facet`` value. Rows of a
    hue group whose ``x`` is empty (e.g. a FullFlat network has no scale-up domain size) are
    drawn as a horizontal dashed reference line of their ``y``.
``bar`` (:mod:`.bar`)
    grouped bars: one group per ``x`` value, one bar per ``hue`` value, labelled with the value.
``breakdown`` (:mod:`.breakdown`)
    one stacked bar per ``x`` value (and ``hue`` value) whose parts are the step-time
    breakdown columns ``breakdown_s.<key>``; ``y`` = ``step_time_s`` (or ``breakdown_s``)
    stacks seconds, ``y`` = ``share`` stacks percent of the step time.
``heatmap`` (:mod:`.heatmap`)
    ``value`` (the metric) over ``x`` (columns) × ``y`` (rows), each cell annotated; cells of
    infeasible plans are hatched grey and marked (``OOM`` for out of memory, else ``n/a``);
    the best cell is outlined. Without ``value`` the metric is the study's first metric.

Only rows with ``status == "ok"`` are plotted (heatmaps also mark the infeasible ones). When
sweep axes that the plot does not name vary among the rows, their values are added to the
series (hue) labels so that no two points are silently merged. A plot whose columns are missing
is skipped with a warning.

Modules: :mod:`.labels` (axis labels, display names), :mod:`.formatting` (number text),
:mod:`.data` (rows, series, panels, plotted values), :mod:`.layout` (panels, legends, title),
:mod:`.ticks` (axis ticks and scales), one module per kind, :mod:`.registry` (kind -> drawer),
:mod:`.context` (what a drawer receives), :mod:`.draw` (entry points, files).
"""

from __future__ import annotations

from codesign.experiments.plots.context import Drawer, PlotContext, PlotDict, PlotSkipped
from codesign.experiments.plots.data import (
    LOWER_IS_BETTER_SUFFIXES,
    PERCENT_COLUMNS,
    pd_concat,
)
from codesign.experiments.plots.draw import as_plot_spec, draw_plot, draw_plots, make_figure
from codesign.experiments.plots.formatting import compact_number
from codesign.experiments.plots.labels import (
    BREAKDOWN_LABELS,
    LABELS,
    NAMES,
    SHORT_LABELS,
    VALUE_FORMATS,
    axis_label,
    value_label,
)
from codesign.experiments.plots.registry import PLOT_KINDS, PlotKind, plot_kind
from codesign.experiments.spec import PlotSpec

__all__ = ["BREAKDOWN_LABELS", "LABELS", "LOWER_IS_BETTER_SUFFIXES", "NAMES", "PERCENT_COLUMNS",
           "PLOT_KINDS", "SHORT_LABELS", "VALUE_FORMATS", "Drawer", "PlotContext", "PlotDict",
           "PlotKind", "PlotSkipped", "PlotSpec", "as_plot_spec", "axis_label", "compact_number",
           "draw_plot", "draw_plots", "make_figure", "pd_concat", "plot_kind", "value_label"]
