"""Figure layout: panels, legends (above the panels or inside a free spot of one panel) and the
plot title. Sizes are inches (the paper sizes of :mod:`codesign.experiments.style`)."""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, Any

from codesign.experiments import style

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def panels(n: int, width_in: float | None = None,
           height_in: float = style.PANEL_HEIGHT_IN,
           sharey: bool = False) -> tuple[Figure, list[Axes]]:
    """A constrained-layout figure of ``n`` panels, at most 4 per row; ``width_in`` defaults to
    one column for one panel, else the text width; ``height_in`` is per row of panels."""
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


def figure_legend(fig: Figure, handles: list[Any], labels: list[str],
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


def legend_inside(ax: Axes, handles: list[Any], labels: list[str],
                  title: str | None) -> bool:
    """Place the legend inside the panel where it covers no line, marker or reference line
    (matplotlib's least-covered spot first, then the corners and edges); False (and no
    legend) if every place covers data."""
    def place(locs: tuple[str, ...]) -> bool:
        for loc in locs:
            kw: dict[str, Any] = {"loc": loc, "title": title}
            legend = ax.legend(handles, labels, frameon=True, framealpha=0.9,
                               edgecolor="none", fancybox=False, **kw)
            if legend_is_free(ax, legend):
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


def legend_is_free(ax: Axes, legend: Any) -> bool:
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


def add_title(fig: Figure, title: str | None) -> None:
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


__all__ = ["add_title", "figure_legend", "legend_inside", "legend_is_free", "panels"]
