"""The plot-kind registry: every kind a study file may name has a drawer and back, and a plot
entry given as a mapping draws the same figure as its PlotSpec."""

from __future__ import annotations

import typing
from typing import Any

import pandas as pd
import pytest

from codesign.experiments import plots
from codesign.experiments.spec import PlotSpec


def test_registry_and_spec_name_the_same_kinds() -> None:
    allowed = typing.get_args(PlotSpec.model_fields["kind"].annotation)
    assert list(plots.PLOT_KINDS) == list(allowed)


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
