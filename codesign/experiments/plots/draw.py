"""Entry points: one plot entry to a figure (:func:`make_figure`), to files
(:func:`draw_plot`), and every plot of a study (:func:`draw_plots`). Files are a vector PDF and
a PNG (at :data:`codesign.experiments.style.PNG_DPI`) named after the entry's ``file``."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from codesign.experiments import style
from codesign.experiments.plots.context import PlotContext, PlotDict, PlotSkipped
from codesign.experiments.plots.data import axis_paths_of, ok_rows
from codesign.experiments.plots.layout import add_title
from codesign.experiments.plots.registry import plot_kind
from codesign.experiments.spec import PlotSpec

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from codesign.experiments.spec import ExperimentSpec


def as_plot_spec(plot: PlotSpec | PlotDict | Mapping[str, object]) -> PlotSpec:
    """The :class:`PlotSpec` of a plot entry; a mapping is validated into one (``kind``
    defaults to ``line``, ``file`` to ``<kind>-<y>-vs-<x>``). Raises :class:`PlotSkipped` for
    an unknown kind or an invalid entry."""
    if isinstance(plot, PlotSpec):
        return plot
    from pydantic import ValidationError

    data = dict(plot)
    kind = str(data.get("kind", "line"))
    plot_kind(kind)
    data["kind"] = kind
    if not data.get("file"):
        data["file"] = f"{kind}-{data.get('y')}-vs-{data.get('x')}"
    try:
        return PlotSpec.model_validate(data)
    except ValidationError as exc:
        raise PlotSkipped(f"invalid plot entry: {exc}") from None


def make_figure(results: pd.DataFrame, plot: PlotSpec | PlotDict,
                spec: ExperimentSpec | None = None) -> Figure:
    """The matplotlib figure of one plot entry of ``spec`` (``None``: every column that is not
    a standard result column counts as a sweep axis), drawn in the paper style from the rows
    of ``results`` with status ``ok`` (heatmaps also mark the infeasible ones).
    The caller owns (and closes) the figure. Raises :class:`PlotSkipped` when the rows cannot
    give this plot (a missing column, nothing feasible, an unknown kind)."""
    entry = as_plot_spec(plot)
    kind = plot_kind(entry.kind)
    metrics = list(spec.metrics) if spec is not None else []
    ctx = PlotContext(axis_paths=axis_paths_of(spec, results),
                      default_metric=metrics[0] if metrics else None)
    import matplotlib.pyplot as plt

    with style.paper_style():
        rows = results if kind.all_rows else ok_rows(results)
        if rows.empty:
            raise PlotSkipped(f"{entry.kind} plot: no feasible point")
        fig = kind.draw(rows, entry, ctx)
        try:
            add_title(fig, entry.title)
        except Exception:
            plt.close(fig)
            raise
    return fig


def draw_plot(results: pd.DataFrame, plot: PlotSpec | PlotDict, out_dir: Path,
              spec: ExperimentSpec | None = None) -> list[Path]:
    """Draw one plot entry of ``spec`` into ``out_dir`` as ``<file>.pdf`` and ``<file>.png``;
    returns both paths. Raises :class:`PlotSkipped` like :func:`make_figure`."""
    import matplotlib.pyplot as plt

    entry = as_plot_spec(plot)
    fig = make_figure(results, entry, spec)
    try:
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        paths = [out_dir / f"{entry.file}.pdf", out_dir / f"{entry.file}.png"]
        with style.paper_style():
            for p in paths:
                fig.savefig(p)
    finally:
        plt.close(fig)
    return paths


def draw_plots(results: pd.DataFrame, spec: ExperimentSpec, out_dir: Path) -> list[Path]:
    """Draw every entry of ``spec.plots`` from ``results`` (one row per point) into
    ``out_dir`` as ``<file>.pdf`` and ``<file>.png``; returns the written paths.

    A plot that cannot be drawn (a column it names is missing, no feasible point) is skipped
    with a :class:`UserWarning` naming it and the reason; the others are still drawn."""
    written: list[Path] = []
    for plot in spec.plots:
        try:
            written += draw_plot(results, plot, out_dir, spec=spec)
        except PlotSkipped as exc:
            warnings.warn(f"plot {plot.file!r} skipped: {exc}", UserWarning, stacklevel=2)
    return written


__all__ = ["as_plot_spec", "draw_plot", "draw_plots", "make_figure"]
