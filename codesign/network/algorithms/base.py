"""What a collective algorithm is: its alpha-beta cost and its flow decomposition, together.

A :class:`CollectiveAlgorithm` is registered by name (:func:`codesign.network.algorithms.register`)
and then serves every consumer:

* the alpha-beta model (:class:`~codesign.network.model.NetworkModel`) prices with it: a *flat*
  algorithm has a formula per collective kind on one tier (:meth:`~CollectiveAlgorithm.time`,
  ``math.inf`` where it does not apply) and a condition on the tier (:meth:`available`), and
  ``auto`` considers it on every tier; when a plan *requests* it, :meth:`flat_choices`,
  :meth:`outer_choices` and :meth:`pick` say how it narrows the model's choice;
* the flow model (:func:`~codesign.network.flows.collective_entities`, the link-fault factors
  of the per-rank engine) decomposes a collective the model costed with it into flows
  (:meth:`entities`; algorithms with the same flows share a :attr:`decomposition`);
* a plan may name it (``ParallelismSpec.collective_algorithm``, ``--collective-algorithm``)
  when it is :attr:`selectable`.

Conventions of the formulas (as in :mod:`codesign.network.collectives`): ``size`` is bytes per
rank (all_gather: the gathered output; reduce_scatter: the input); ``n`` ranks; ``bw`` bytes/s
per GPU per direction after the message-size efficiency; ``alpha`` seconds per step.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from codesign.network.model import CommCost, Tier

INF = math.inf

Formula = Callable[[float, int, float, float], float]
"""A flat formula: ``(size, n, bw, alpha) -> seconds``."""

SWITCH = -1
"""Destination of a flow into the switch itself (in-network reduction): the flow crosses the
sender's port up and back down."""


def trivial(size: float, n: int) -> bool:
    """True when a collective of ``size`` bytes on ``n`` ranks moves nothing (ValueError for a
    negative size or an empty group)."""
    if n < 1:
        raise ValueError(f"group size must be >= 1, got {n}")
    if size < 0:
        raise ValueError(f"message size must be >= 0 bytes, got {size}")
    return n == 1 or size == 0


@dataclass(frozen=True)
class Entity:
    """Flows of one collective that advance together, and the tier whose bandwidth term
    of the alpha-beta cost they set (``"up"``: scale-up or FullFlat; ``"out"``: scale-out)."""

    tier: str
    flows: tuple[tuple[int, int], ...]


def ring_flows(members: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """A ring over ``members`` in the given order: each sends to the next."""
    n = len(members)
    return tuple((members[i], members[(i + 1) % n]) for i in range(n)) if n > 1 else ()


def by_domain(members: Sequence[int], domain_size: int) -> dict[int, list[int]]:
    """``members`` grouped by scale-up domain (``rank // domain_size``), order kept."""
    out: dict[int, list[int]] = defaultdict(list)
    for m in members:
        out[m // domain_size].append(m)
    return out


class CollectiveAlgorithm:
    """One collective algorithm. Subclass, set :attr:`name`, override what differs, and
    decorate with :func:`~codesign.network.algorithms.register`."""

    #: the name plans, the CLI, :class:`~codesign.network.model.CommCost` and flows use
    name: ClassVar[str] = ""
    #: a single-tier algorithm with formulas of its own, which ``auto`` may choose on a tier
    flat: ClassVar[bool] = False
    #: a plan may request it (``collective_algorithm``); False for labels the model reports
    #: without being asked (``direct``, ``measured``)
    selectable: ClassVar[bool] = True
    #: among flat algorithms of equal time, the lower preference is reported
    preference: ClassVar[int] = 100
    #: the algorithm whose flows this one's traffic follows (its own name by default)
    flows_of: ClassVar[str] = ""

    # --- alpha-beta cost (flat algorithms) -----------------------------------------------

    def time(self, kind: str, size: float, n: int, bw: float, alpha: float) -> float:
        """Seconds for one ``kind`` collective on one tier; ``math.inf`` when not applicable."""
        return INF

    def available(self, tier: Tier) -> bool:
        """True when the tier supports the algorithm (e.g. switch reduction for in_network)."""
        return True

    # --- when a plan requests it ---------------------------------------------------------

    def flat_choices(self, offered: tuple[str, ...]) -> tuple[str, ...]:
        """Which of the flat algorithms ``offered`` on a tier (for one kind) to price: itself,
        else the ring, else all of them."""
        if self.name in offered:
            return (self.name,)
        return ("ring",) if "ring" in offered else offered

    def outer_choices(self, offered: tuple[str, ...]) -> tuple[str, ...]:
        """Flat algorithms to try on the inter-domain phase of the two-level scheme."""
        return offered

    def pick(self, flat: CommCost, two_level: CommCost) -> CommCost:
        """For a group spanning domains with several members in each: the flat cost on the
        scale-out tier or the two-level (hierarchical) one."""
        return flat

    # --- flows ---------------------------------------------------------------------------

    @property
    def decomposition(self) -> str:
        """Name of the algorithm whose :meth:`entities` stand for this one's traffic."""
        return self.flows_of or self.name

    def entities(self, kind: str, members: Sequence[int], domain_size: int) -> list[Entity]:
        """The collective on ``members`` (rank ids, two or more) as entities: by default a
        ring over the members in rank order, on the scale-out tier when they span domains."""
        ms = sorted(members)
        tier = "up" if len(by_domain(ms, domain_size)) == 1 else "out"
        return [Entity(tier, ring_flows(ms))]
