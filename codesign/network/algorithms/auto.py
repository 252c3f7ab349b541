"""Auto: the fastest applicable algorithm, as NCCL's tuner picks (the plan default)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from codesign.network.algorithms import register
from codesign.network.algorithms.base import CollectiveAlgorithm

if TYPE_CHECKING:
    from codesign.network.model import CommCost


@register
class Auto(CollectiveAlgorithm):
    """Every flat algorithm available on the tier, and the two-level scheme where it applies;
    the fastest is costed (and reported under its own name, never ``auto``)."""

    name = "auto"
    flows_of = "ring"

    def flat_choices(self, offered: tuple[str, ...]) -> tuple[str, ...]:
        return offered

    def pick(self, flat: CommCost, two_level: CommCost) -> CommCost:
        return two_level if two_level.time_s <= flat.time_s else flat
