"""Paper style for experiment figures: two-column sizes, fonts, a colorblind-safe palette.

Figures are sized for an IEEE/ACM two-column paper: one column is :data:`COLUMN_WIDTH_IN`
(3.4 in) wide, a full-width figure :data:`TEXT_WIDTH_IN` (7.0 in). Fonts are 7-8 pt so that
the printed text matches the paper's captions. Colors are the Okabe-Ito palette (safe for
the common color-vision deficiencies and in grayscale together with the markers / hatches
that every series also gets), PDFs embed TrueType fonts (``pdf.fonttype 42``) so that they
stay editable and pass the font checks of paper submission systems.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: width of one column of a two-column paper, inches
COLUMN_WIDTH_IN = 3.4
#: width of the full text block (both columns), inches
TEXT_WIDTH_IN = 7.0
#: default height of a one-panel figure, inches
PANEL_HEIGHT_IN = 2.3
#: raster resolution of the PNG copies, dots per inch
PNG_DPI = 300

#: Okabe-Ito colorblind-safe palette (Okabe & Ito 2008), without black (kept for text) and
#: with the yellow last (weak on white)
PALETTE: tuple[str, ...] = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7",
                            "#56B4E9", "#000000", "#F0E442")
#: one marker per series, in palette order (distinct in grayscale print)
MARKERS: tuple[str, ...] = ("o", "s", "^", "D", "v", "P", "X", "*")
#: one line style per series, in palette order
LINESTYLES: tuple[Any, ...] = ("-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1)),
                               "-", "--")
#: one hatch per stacked component / bar group (visible without color)
HATCHES: tuple[str, ...] = ("", "///", "...", "\\\\\\", "xx", "++", "oo", "--", "||", "**")
#: fixed color and hatch of every step-time component, the same in every figure: compute in
#: cool colors without hatch, idle time grey and dotted, communication in warm colors with
#: hatches (Paul Tol's "muted" colorblind-safe scheme)
BREAKDOWN_STYLE: dict[str, tuple[str, str]] = {
    "forward": ("#332288", ""),
    "backward": ("#88CCEE", ""),
    "recompute": ("#44AA99", ""),
    "optimizer": ("#117733", ""),
    "pipeline_bubble": ("#DDDDDD", "...."),
    "host_issue": ("#BBBBBB", "--"),
    "tp_comm": ("#CC6677", "////"),
    "cp_comm": ("#999933", "\\\\"),
    "ep_comm": ("#DDCC77", "xxxx"),
    "dp_comm": ("#882255", "\\\\"),
    "pp_comm": ("#AA4499", "++"),
    "other": ("#777777", ""),
}
#: sequential colormap of heatmaps (perceptually uniform, colorblind-safe)
HEATMAP_CMAP = "viridis"
#: fill of heatmap cells that hold an infeasible plan
INFEASIBLE_COLOR = "#D9D9D9"

RC_PARAMS: dict[str, Any] = {
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans", "Arial", "Helvetica", "Liberation Sans"],
    "font.size": 7.5,
    "axes.titlesize": 8,
    "axes.labelsize": 7.5,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "legend.fontsize": 7,
    "legend.title_fontsize": 7,
    "figure.titlesize": 8,
    "axes.linewidth": 0.6,
    "axes.grid": True,
    "axes.axisbelow": True,
    "grid.color": "#E3E3E3",
    "grid.linewidth": 0.5,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.prop_cycle": None,  # set below from PALETTE
    "lines.linewidth": 1.2,
    "lines.markersize": 4,
    "patch.linewidth": 0.5,
    "hatch.linewidth": 0.5,
    "xtick.major.width": 0.6,
    "ytick.major.width": 0.6,
    "xtick.major.size": 2.5,
    "ytick.major.size": 2.5,
    "xtick.minor.size": 1.5,
    "ytick.minor.size": 1.5,
    "legend.frameon": False,
    "legend.handlelength": 2.0,
    "legend.borderaxespad": 0.3,
    "legend.columnspacing": 1.0,
    "figure.dpi": 100,
    "savefig.dpi": PNG_DPI,
    "savefig.bbox": "tight",
    "savefig.pad_inches": 0.02,
    "pdf.fonttype": 42,
    "ps.fonttype": 42,
    "svg.fonttype": "none",
}


def rc_params() -> dict[str, Any]:
    """The paper rcParams (a fresh dict; the color cycle is the Okabe-Ito palette)."""
    from cycler import cycler

    params = dict(RC_PARAMS)
    params["axes.prop_cycle"] = cycler(color=list(PALETTE))
    return params


@contextmanager
def paper_style() -> Iterator[None]:
    """Context in which matplotlib draws in the paper style (restored on exit)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    params: Any = rc_params()
    with plt.rc_context(params):
        yield


def color(i: int) -> str:
    """Color of series ``i`` (cycles through :data:`PALETTE`)."""
    return PALETTE[i % len(PALETTE)]


def marker(i: int) -> str:
    """Marker of series ``i``."""
    return MARKERS[i % len(MARKERS)]


def linestyle(i: int) -> Any:
    """Line style of series ``i`` (a name or a dash tuple)."""
    return LINESTYLES[i % len(LINESTYLES)]


def hatch(i: int) -> str:
    """Hatch pattern of bar group / stacked component ``i``."""
    return HATCHES[i % len(HATCHES)]
