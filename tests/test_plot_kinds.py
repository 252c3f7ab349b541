"""The plot-kind registry: every kind a study file may name has a drawer and back, and a plot
entry given as a mapping draws the same figure as its PlotSpec."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from codesign.experiments import plots
from codesign.experiments.spec import PlotSpec


def test_the_spec_accepts_exactly_the_registered_kinds() -> None:
    base = {"x": "plan.tp", "y": "mfu", "file": "f"}
    for kind in plots.PLOT_KINDS:
        assert PlotSpec.model_validate({**base, "kind": kind}).kind == kind
    with pytest.raises(ValueError, match="unknown plot kind 'pie'; allowed: line, bar"):
        PlotSpec.model_validate({**base, "kind": "pie"})


def test_a_new_plot_kind_is_one_registration() -> None:
    """A drawer registered under a new name is accepted by study files and drawn."""
    from codesign.experiments.plots.registry import PlotKind

    drawn: list[str] = []

    def draw_dots(df: pd.DataFrame, plot: PlotSpec, ctx: Any) -> Any:
        drawn.append(plot.kind)
        return plots.PLOT_KINDS["line"].draw(df, plot, ctx)

    import matplotlib.pyplot as plt

    plots.PLOT_KINDS["dots"] = PlotKind(draw_dots)
    try:
        spec = PlotSpec.model_validate({"kind": "dots", "x": "plan.tp", "y": "mfu",
                                        "file": "f"})
        fig = plots.make_figure(_rows(), spec)
        plt.close(fig)
        assert drawn == ["dots"]
    finally:
        del plots.PLOT_KINDS["dots"]


def _rows() -> pd.DataFrame:
    return pd.DataFrame([{"index": i, "status": "ok", "plan.tp": tp, "mfu": 0.3 + tp / 100}
                         for i, tp in enumerate((1, 2, 4, 8))])


def _line_data(fig: Any) -> list[tuple[list[float], list[float]]]:
    return [(list(ln.get_xdata()), list(ln.get_ydata())) for ln in fig.axes[0].get_lines()]


def test_a_mapping_entry_draws_like_its_plot_spec() -> None:
    import matplotlib.pyplot as plt

    entry: plots.PlotDict = {"kind": "line", "x": "plan.tp", "y": "mfu"}
    spec = plots.as_plot_spec(entry)
    assert spec.file == "line-mfu-vs-plan.tp" and spec.hue is None
    a = plots.make_figure(_rows(), entry)
    b = plots.make_figure(_rows(), spec)
    try:
        assert _line_data(a) == _line_data(b) == [([1.0, 2.0, 4.0, 8.0],
                                                   pytest.approx([31.0, 32.0, 34.0, 38.0]))]
    finally:
        plt.close(a)
        plt.close(b)


def test_unknown_kind_is_skipped_naming_the_allowed_ones() -> None:
    with pytest.raises(plots.PlotSkipped, match=r"unknown plot kind 'pie' \(allowed: line, bar"):
        plots.make_figure(_rows(), {"kind": "pie", "x": "plan.tp", "y": "mfu"})
