"""Plot kinds: the name a study's ``plots`` entry gives in ``kind`` -> how it is drawn.

A new kind is a module with a :class:`~codesign.experiments.plots.context.Drawer` and one entry
in :data:`PLOT_KINDS` (and its name in the ``kind`` field of
:class:`~codesign.experiments.spec.PlotSpec`, which validates study files).
"""

from __future__ import annotations

from dataclasses import dataclass

from codesign.experiments.plots.bar import draw_bar
from codesign.experiments.plots.breakdown import draw_breakdown
from codesign.experiments.plots.context import Drawer, PlotSkipped
from codesign.experiments.plots.heatmap import draw_heatmap
from codesign.experiments.plots.line import draw_line


@dataclass(frozen=True)
class PlotKind:
    """How one plot kind is drawn."""

    #: draws the figure from the rows
    draw: Drawer
    #: the drawer gets every row (it marks the infeasible ones), not only those with status ok
    all_rows: bool = False


#: every plot kind, in the order an error message lists them
PLOT_KINDS: dict[str, PlotKind] = {
    "line": PlotKind(draw_line),
    "bar": PlotKind(draw_bar),
    "breakdown": PlotKind(draw_breakdown),
    "heatmap": PlotKind(draw_heatmap, all_rows=True),
}


def plot_kind(kind: str) -> PlotKind:
    """The registered kind named ``kind``; :class:`PlotSkipped` naming the allowed ones."""
    if kind not in PLOT_KINDS:
        raise PlotSkipped(f"unknown plot kind {kind!r} (allowed: {', '.join(PLOT_KINDS)})")
    return PLOT_KINDS[kind]


__all__ = ["PLOT_KINDS", "PlotKind", "plot_kind"]
