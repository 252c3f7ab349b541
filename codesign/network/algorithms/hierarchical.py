"""Two-level hierarchical collectives: inside each scale-up domain, then across domains."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from codesign.network.algorithms import flat_time, register
from codesign.network.algorithms.base import (
    CollectiveAlgorithm,
    Entity,
    by_domain,
    ring_flows,
    trivial,
)

if TYPE_CHECKING:
    from codesign.network.model import CommCost

#: phases of each two-level collective of an ``S``-byte buffer over ``n = k × m`` ranks:
#: (kind, "intra" or "inter", fraction of S the phase moves). The ``k`` inter-domain
#: collectives run concurrently, one per rail (each GPU has its own NIC).
#:
#: * all-reduce: RS_intra(S; k) + AR_inter(S/k; m) + AG_intra(S; k); with rings
#:   ``2(k-1)/k·S/bw_up + 2(k-1)·α_up + 2(m-1)/m·(S/k)/bw_out + 2(m-1)·α_out``.
#: * all-gather of an S-byte output: AG_inter(S/k; m) + AG_intra(S; k): each rail gathers its
#:   ``m`` pieces of ``S/n`` first (``(m-1)·S/n`` bytes cross the scale-out tier per rank, the
#:   minimum), then each domain gathers the ``k`` blocks of ``S/k``.
#: * reduce-scatter of an S-byte input: RS_intra(S; k) + RS_inter(S/k; m), the mirror image.
HIERARCHICAL_PHASES: dict[str, tuple[tuple[str, str, float], ...]] = {
    "all_reduce": (("reduce_scatter", "intra", 1.0), ("all_reduce", "inter", -1.0),
                   ("all_gather", "intra", 1.0)),
    "all_gather": (("all_gather", "inter", -1.0), ("all_gather", "intra", 1.0)),
    "reduce_scatter": (("reduce_scatter", "intra", 1.0), ("reduce_scatter", "inter", -1.0)),
}


def hierarchical(kind: str, size: float, per_domain: int, num_domains: int, bw_up: float,
                 alpha_up: float, bw_out: float, alpha_out: float, intra: str = "ring",
                 inter: str = "ring") -> float:
    """Two-level ``kind`` over ``n = k × m`` ranks (``k = per_domain``, ``m = num_domains``):
    the phases of :data:`HIERARCHICAL_PHASES`, intra-domain ones with flat algorithm ``intra``
    (ring or in_network) on the scale-up tier, inter-domain ones with ``inter`` (ring, tree or
    in_network) on the scale-out tier (a fraction of -1 means ``S/k``). Seconds."""
    if trivial(size, per_domain * num_domains):
        return 0.0
    k, m = per_domain, num_domains
    total = 0.0
    for phase_kind, level, frac in HIERARCHICAL_PHASES[kind]:
        part = size / k if frac < 0 else size * frac
        if level == "intra":
            total += flat_time(phase_kind, intra, part, k, bw_up, alpha_up)
        else:
            total += flat_time(phase_kind, inter, part, m, bw_out, alpha_out)
    return total


@register
class Hierarchical(CollectiveAlgorithm):
    """The two-level scheme where a group spans domains with several ranks in each (best flat
    algorithm per phase); elsewhere as ``auto``. Flows: a ring inside each domain (tier up)
    and one ring per local index across the domains (tier out)."""

    name = "hierarchical"

    def flat_choices(self, offered: tuple[str, ...]) -> tuple[str, ...]:
        return offered

    def pick(self, flat: CommCost, two_level: CommCost) -> CommCost:
        return two_level

    def entities(self, kind: str, members: Sequence[int], domain_size: int) -> list[Entity]:
        doms = by_domain(sorted(members), domain_size)
        if len(doms) == 1:
            return super().entities(kind, members, domain_size)
        out = [Entity("up", ring_flows(v)) for v in doms.values() if len(v) > 1]
        width = max(len(v) for v in doms.values())
        for j in range(width):
            rail = [v[j] for v in doms.values() if j < len(v)]
            if len(rail) > 1:
                out.append(Entity("out", ring_flows(rail)))
        return out
