"""Axis ticks and scales: category labels that fit their slot, ticks at the swept values,
metric axes with readable steps, and two-level (bar / group) labels. Widths are inches."""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, Any

from codesign.experiments.plots.formatting import compact_number

if TYPE_CHECKING:
    from matplotlib.axes import Axes


def category_ticks(ax: Axes, labels: list[str]) -> None:
    """Category labels at 0, 1, ... wrapped onto lines that fit their slot (rotated when a
    single word does not fit)."""
    import textwrap

    fig = ax.figure
    slot_in = ax.get_position().width * fig.bbox.width / fig.dpi / max(1, len(labels))
    fit = max(4, int(slot_in * 0.95 / (7 * 0.58 / 72)))  # 7 pt characters per slot
    if any(len(w) > fit for t in labels for w in t.split()):
        ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right",
                      rotation_mode="anchor")
    else:
        ax.set_xticks(range(len(labels)), [textwrap.fill(t, fit) for t in labels])


def set_numeric_ticks(ax: Axes, axis: str, values: list[float], log: bool) -> None:
    """Ticks at the swept values (when few) with compact labels; log2 scale for powers of 2."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

    a = ax.xaxis if axis == "x" else ax.yaxis
    if log:
        pos = [v for v in values if v > 0]
        pow2 = bool(pos) and all(float(v).is_integer() and int(v) & (int(v) - 1) == 0
                                 for v in pos)
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log", base=2 if pow2 else 10)
    if 1 < len(values) <= 9:
        a.set_major_locator(FixedLocator(values))
        a.set_major_formatter(FuncFormatter(lambda v, _p: compact_number(v)))
        a.set_minor_locator(NullLocator())
        a.set_minor_formatter(NullFormatter())


def format_metric_axis(ax: Axes, log: bool) -> None:
    """Y axis of a metric: log (with 1-2-5 or evenly spaced ticks when the range is narrow) or
    linear with about six ticks; compact tick labels."""
    from matplotlib.ticker import (
        FixedLocator,
        FuncFormatter,
        LogLocator,
        MaxNLocator,
        NullFormatter,
    )

    if log:
        ax.set_yscale("log")
        ax.yaxis.set_minor_formatter(NullFormatter())
        lo, hi = ax.get_ylim()
        if lo > 0 and hi / lo < 10:  # under a decade: evenly spaced round values
            ticks = [t for t in MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10])
                     .tick_values(lo, hi) if lo <= t <= hi]
            ax.yaxis.set_major_locator(FixedLocator(ticks))
        elif lo > 0 and hi / lo < 100:  # under two decades: 1-2-5 steps, not decades
            ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_minor_locator(LogLocator(base=10, subs=tuple(range(1, 10))))
    else:  # enough ticks to read values off (the default often gives two or three)
        ax.yaxis.set_major_locator(MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10]))
    ax.yaxis.set_major_formatter(_CompactFormatter() if not log
                                 else FuncFormatter(lambda v, _p: compact_number(v)))


def distinct_labels(values: list[float]) -> list[str]:
    """Tick labels of ``values``: :func:`compact_number`, or, where that would print two
    ticks alike (a narrow range such as 57.40-57.65), fixed decimals down to the ticks'
    spacing."""
    labels = [compact_number(v) for v in values]
    if len(set(labels)) == len(labels) or len(values) < 2:
        return labels
    step = min(abs(b - a) for a, b in itertools.pairwise(values) if b != a)
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    if abs(step * 10 ** decimals - round(step * 10 ** decimals)) > 1e-6:  # e.g. a 0.025 step
        decimals += 1
    return [f"{v:.{decimals}f}" for v in values]


class _CompactFormatter:
    """matplotlib formatter of a linear metric axis (see :func:`distinct_labels`)."""

    def __new__(cls) -> Any:
        from matplotlib.ticker import Formatter

        class Compact(Formatter):
            def __call__(self, x: float, pos: int | None = None) -> str:
                return compact_number(x)

            def format_ticks(self, values: Any) -> list[str]:
                return distinct_labels([float(v) for v in values])

        return Compact()


#: average width of a character at the 6 pt tick-label size, inches
_CHAR_IN = 6 * 0.6 / 72


def two_level_ticks(ax: Axes, ticks: list[float], labels: list[str], groups: list[str],
                    xlabel: str, bar_width_in: float) -> float:
    """One label under every bar (wrapped, or rotated when a word does not fit) and the
    group labels of the x values in a second row below them; returns the depth of the
    per-bar labels, inches."""
    import textwrap

    fit = max(4, int(bar_width_in / _CHAR_IN))
    longest_word = max((len(w) for t in labels for w in t.split()), default=0)
    rotate = longest_word > fit
    if rotate:
        shown = labels
        depth_pt = 6 * 0.6 * max((len(t) for t in labels), default=0)
    else:
        shown = [textwrap.fill(t, fit) for t in labels]
        depth_pt = 7.2 * max((t.count("\n") + 1 for t in shown), default=1)
    ax.set_xticks(ticks, shown, rotation=90 if rotate else 0, fontsize=6)
    sec = ax.secondary_xaxis("bottom")
    sec.set_xticks(range(len(groups)), groups)
    sec.tick_params(axis="x", length=0, pad=depth_pt + 6)
    sec.spines["bottom"].set_visible(False)
    sec.set_xlabel(xlabel)
    return depth_pt / 72.0


__all__ = ["category_ticks", "format_metric_axis", "set_numeric_ticks", "two_level_ticks"]
