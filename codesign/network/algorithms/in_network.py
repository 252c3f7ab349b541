"""In-network reduction: the switch reduces (InfiniBand SHARP, NVLink SHARP / NVLS)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from codesign.network.algorithms import register
from codesign.network.algorithms.base import (
    INF,
    SWITCH,
    CollectiveAlgorithm,
    Entity,
    Formula,
    by_domain,
    trivial,
)

if TYPE_CHECKING:
    from codesign.network.model import CommCost, Tier


def in_network_all_reduce(size: float, n: int, bw: float, alpha: float) -> float:
    """Switch-side all-reduce: each rank sends ``S`` up and receives ``S`` back: ``S/bw + 2α``."""
    if trivial(size, n):
        return 0.0
    return size / bw + 2.0 * alpha


def in_network_all_gather(size: float, n: int, bw: float, alpha: float) -> float:
    """Switch multicast all-gather: ``(n-1)/n · S/bw + 2α``."""
    if trivial(size, n):
        return 0.0
    return (n - 1) / n * size / bw + 2.0 * alpha


def in_network_reduce_scatter(size: float, n: int, bw: float, alpha: float) -> float:
    """Switch-side reduce-scatter: ``(n-1)/n · S/bw + 2α``."""
    if trivial(size, n):
        return 0.0
    return (n - 1) / n * size / bw + 2.0 * alpha


@register
class InNetwork(CollectiveAlgorithm):
    """Flat switch reduction on tiers with ``in_network_reduction``: all_reduce, all_gather,
    reduce_scatter. Requested across domains with several ranks per domain it is the
    inter-domain phase of the two-level scheme (as NCCL CollNet) or flat, whichever is
    faster. Flows: each member into the switch and back."""

    name = "in_network"
    flat = True
    preference = 2
    FORMULAS: ClassVar[dict[str, Formula]] = {
        "all_reduce": in_network_all_reduce, "all_gather": in_network_all_gather,
        "reduce_scatter": in_network_reduce_scatter}

    def time(self, kind: str, size: float, n: int, bw: float, alpha: float) -> float:
        fn = self.FORMULAS.get(kind)
        return INF if fn is None else fn(size, n, bw, alpha)

    def available(self, tier: Tier) -> bool:
        return tier.in_network

    def outer_choices(self, offered: tuple[str, ...]) -> tuple[str, ...]:
        return (self.name,) if self.name in offered else offered

    def pick(self, flat: CommCost, two_level: CommCost) -> CommCost:
        return two_level if two_level.time_s <= flat.time_s else flat

    def entities(self, kind: str, members: Sequence[int], domain_size: int) -> list[Entity]:
        ms = sorted(members)
        tier = "up" if len(by_domain(ms, domain_size)) == 1 else "out"
        return [Entity(tier, tuple((m, SWITCH) for m in ms))]
