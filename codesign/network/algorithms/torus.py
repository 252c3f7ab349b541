"""Torus algorithms (TPU ICI): dimension-ordered rings and their all-links variant.

The formulas need the group's geometry in the slice, so they live in
:mod:`codesign.network.torus` and the network model calls them for groups on a torus
scale-up domain; these entries give the labels the model reports a name in the registry and
their flows (a ring over the members, as the flow model draws any ring).
"""

from __future__ import annotations

from codesign.network.algorithms import register
from codesign.network.algorithms.base import CollectiveAlgorithm


@register
class TorusRing(CollectiveAlgorithm):
    """Dimension-ordered rings on a torus (a plan's ``ring`` on a torus domain)."""

    name = "torus_ring"
    selectable = False
    flows_of = "ring"


@register
class TorusMultiRing(CollectiveAlgorithm):
    """The payload split over one dimension-ordered schedule per spanned dimension, so all
    spanned dimensions' links work at once (``auto`` on a torus domain)."""

    name = "torus_multiring"
    selectable = False
    flows_of = "ring"
