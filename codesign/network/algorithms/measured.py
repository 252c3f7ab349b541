"""Measured: a collective timed from a measured collectives table
(:class:`codesign.measured.CollectiveTable`), consulted by the model before the alpha-beta
formulas. Its traffic is taken to be a ring's for the flow model."""

from __future__ import annotations

from codesign.network.algorithms import register
from codesign.network.algorithms.base import CollectiveAlgorithm


@register
class Measured(CollectiveAlgorithm):
    """The label of a table-priced collective; not requested by a plan (a table is given
    with the GPU's measured data)."""

    name = "measured"
    selectable = False
    flows_of = "ring"
