"""Direct: point-to-point sends and pairwise all-to-all (the only way either is costed)."""

from __future__ import annotations

from collections.abc import Sequence

from codesign.network.algorithms import register
from codesign.network.algorithms.base import CollectiveAlgorithm, Entity, trivial


def p2p(size: float, bw: float, alpha: float) -> float:
    """One point-to-point send of ``S`` bytes: ``S/bw + α``."""
    if size < 0:
        raise ValueError(f"message size must be >= 0 bytes, got {size}")
    if size == 0:
        return 0.0
    return size / bw + alpha


def all_to_all(
    size: float,
    n: int,
    per_domain: int,
    bw_up: float,
    alpha_up: float,
    bw_out: float,
    alpha_out: float,
    network_share: float | None = None,
) -> float:
    """Direct (pairwise) all-to-all over ``n`` ranks, ``k = per_domain`` of them per domain.

    ``max((k-1)/n · S/bw_up, (n-k)/n · S/bw_out) + α_up·[k>1] + α_out·[n>k]``: the intra- and
    inter-domain shares move on different links at the same time, and all sends are issued
    concurrently, so each tier used adds a single α. With ``k = n`` (one domain) this is
    ``(n-1)/n · S/bw_up + α_up``.

    With ``network_share`` (MoE token copies sent once per destination domain and forwarded
    inside it: DeepEP normal kernels, :mod:`codesign.network.token_routing`) that share of the
    ``(n-k)/n · S`` crosses the network, and every copy bound for another rank crosses the
    scale-up links once, ``(k-1)/k · S`` (the local ones directly, the remote ones forwarded
    from the rank that received them): ``max((k-1)/k · S/bw_up, share · (n-k)/n · S/bw_out)
    + α_up + α_out``, the two hops pipelined. Inside one domain it is the direct all-to-all.
    """
    if trivial(size, n):
        return 0.0
    k = max(1, min(per_domain, n))
    if network_share is not None and n > k:  # forwarded per destination domain
        t_up = (k - 1) / k * size / bw_up if k > 1 else 0.0
        t_out = network_share * (n - k) / n * size / bw_out
        return max(t_up, t_out) + (alpha_up if k > 1 else 0.0) + alpha_out
    t_up = (k - 1) / n * size / bw_up if k > 1 else 0.0
    t_out = (n - k) / n * size / bw_out if n > k else 0.0
    return max(t_up, t_out) + (alpha_up if k > 1 else 0.0) + (alpha_out if n > k else 0.0)


@register
class Direct(CollectiveAlgorithm):
    """p2p (a flow from the first member to the second) and all-to-all (every ordered pair:
    the intra-domain pairs and the inter-domain pairs as two entities). Not requested by a
    plan: the model uses it for these two kinds whatever the plan asks."""

    name = "direct"
    selectable = False

    def entities(self, kind: str, members: Sequence[int], domain_size: int) -> list[Entity]:
        if kind == "p2p":
            a, b = members[0], members[1]
            return [Entity("up" if a // domain_size == b // domain_size else "out", ((a, b),))]
        if kind != "all_to_all":  # the model never costs other kinds as direct
            return super().entities(kind, members, domain_size)
        ms = sorted(members)
        intra = tuple((a, b) for a in ms for b in ms if a != b
                      and a // domain_size == b // domain_size)
        inter = tuple((a, b) for a in ms for b in ms if a // domain_size != b // domain_size)
        return [e for e in (Entity("up", intra), Entity("out", inter)) if e.flows]
