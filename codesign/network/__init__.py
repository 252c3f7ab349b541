"""Network cost model: rank placement, alpha-beta collective formulas, per-group costs.

Collective algorithms are registered in :mod:`codesign.network.algorithms` (one module each:
cost formulas and flow decomposition together); communication groups are the table of
:mod:`codesign.groups`.
"""

from codesign.network.collectives import (
    all_to_all,
    flat_collective,
    hierarchical,
    in_network_all_gather,
    in_network_all_reduce,
    in_network_reduce_scatter,
    p2p,
    ring_all_gather,
    ring_all_reduce,
    ring_broadcast,
    ring_reduce_scatter,
    tree_all_reduce,
)
from codesign.network.model import (
    ALGORITHMS,
    COLLECTIVE_KINDS,
    TIERS,
    CommCost,
    NetworkModel,
    Tier,
)
from codesign.network.placement import (
    GROUP_DIMS,
    PLACEMENT_DIMS,
    GroupPlacement,
    Layout,
    group_dims,
    layout_for,
    place_group,
)

__all__ = [
    "ALGORITHMS",
    "COLLECTIVE_KINDS",
    "GROUP_DIMS",
    "PLACEMENT_DIMS",
    "TIERS",
    "CommCost",
    "GroupPlacement",
    "Layout",
    "NetworkModel",
    "Tier",
    "all_to_all",
    "flat_collective",
    "group_dims",
    "hierarchical",
    "in_network_all_gather",
    "in_network_all_reduce",
    "in_network_reduce_scatter",
    "layout_for",
    "p2p",
    "place_group",
    "ring_all_gather",
    "ring_all_reduce",
    "ring_broadcast",
    "ring_reduce_scatter",
    "tree_all_reduce",
]
