"""What a drawer receives and may raise: the plot entry's type, the study context and
:class:`PlotSkipped`.

A plot entry is a :class:`~codesign.experiments.spec.PlotSpec` (what a study file's ``plots``
list validates into); a plain mapping with the same keys (:class:`PlotDict`) is accepted by
the entry points and validated into one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypedDict

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from codesign.experiments.spec import PlotSpec


class PlotDict(TypedDict, total=False):
    """A plot entry as a mapping (the fields of :class:`~codesign.experiments.spec.PlotSpec`);
    ``file`` defaults to ``<kind>-<y>-vs-<x>``."""

    kind: str
    x: str
    y: str
    hue: str | None
    facet: str | None
    value: str | None
    logx: bool
    logy: bool
    title: str | None
    file: str


class PlotSkipped(Exception):
    """A plot cannot be drawn from these rows (missing column, no data); the message says why."""


@dataclass(frozen=True)
class PlotContext:
    """What a plot needs from the experiment besides its own fields."""

    #: sweep-axis columns of the study that the rows have, in spec order
    axis_paths: list[str] = field(default_factory=list)
    #: the study's first metric (a heatmap's value when the plot names none)
    default_metric: str | None = None


class Drawer(Protocol):
    """Draws one plot kind: a new figure from the rows (the caller owns and closes it), in the
    paper style that the caller has entered; raises :class:`PlotSkipped` when it cannot."""

    def __call__(self, df: pd.DataFrame, plot: PlotSpec, ctx: PlotContext, /) -> Figure: ...


__all__ = ["Drawer", "PlotContext", "PlotDict", "PlotSkipped"]
