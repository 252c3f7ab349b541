"""Where an MoE token's routed copies land, for dispatchers that cross the network once per
destination domain (DeepEP's normal kernels; Megatron-Core's flex dispatcher with the DeepEP
or HybridEP backend).

NCCL's all-to-all (Megatron-Core's ``alltoall`` dispatcher) sends each of a token's ``k``
routed copies to its expert's rank: ``k·(D-1)/D`` copies per token leave the scale-up domain
when the EP group spans ``D`` domains. DeepEP sends a token once to each remote domain that
holds one of its experts and forwards it there over the scale-up links to the experts' ranks
(DeepSeek-V3 report, arXiv 2412.19437, Sec. 3.2.2: "each token ... transmitted via IB to the
GPUs with the same in-node index on its target nodes ... forwarded via NVLink"; DeepEP
README), so ``E[distinct domains]·(D-1)/D`` copies per token cross the network. Group-limited
routing (DeepSeek-V3: each token's experts come from 4 of 8 groups, "node-limited") caps the
distinct domains further.

``E[distinct domains]`` assumes uniform routing (balanced benchmarks force it): the ``k``
experts drawn without replacement from the candidate experts, which are all ``E`` experts, or
with group-limited routing the experts of the ``m`` chosen groups of ``G``. Experts are laid
out in order over the EP ranks, so a domain holds ``E/D`` consecutive experts and a group
``E/G``; when groups nest in domains (``D`` divides ``G``) every chosen group gets at least one
of the token's copies (DeepSeek-V3 picks groups by their best experts' scores), and the distinct
domains are those holding a chosen group.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb

from codesign.specs.model import MoESpec


@dataclass(frozen=True)
class TokenRouting:
    """A model's routing, as far as the network sees it: ``experts`` (E), ``top_k`` (k)
    copies per token, and the group limit (``groups`` G, ``group_topk`` m; 0 = none)."""

    experts: int
    top_k: int
    groups: int = 0
    group_topk: int = 0

    @classmethod
    def of(cls, moe: MoESpec) -> TokenRouting:
        return cls(moe.num_experts, moe.top_k, moe.router_num_groups or 0,
                   moe.router_group_topk or 0)

    def distinct_domains(self, domains: int) -> float:
        """Expected number of the ``domains`` (D) an EP group spans that hold at least one of
        a token's copies (module docstring); at most ``min(D, k)``."""
        e, k, d = self.experts, self.top_k, max(1, domains)
        if d == 1:
            return 1.0
        if e % d:  # experts not spread evenly over the domains: the most it can be
            return float(min(d, k))
        g, m = self.groups, self.group_topk
        if g and m and g % d == 0:  # groups nest in domains: domains holding a chosen group
            return d * (1 - comb(g - g // d, m) / comb(g, m))
        if g and m and d % g == 0:  # a group spans d/g domains: candidates are m·d/g of them
            d, e = m * (d // g), m * (e // g)
        return d * (1 - comb(e - e // d, k) / comb(e, k))

    def network_share(self, domains: int) -> float:
        """Copies per token that cross the network with per-domain forwarding, over those
        that cross it with one send per copy: ``E[distinct domains] / k``."""
        return min(1.0, self.distinct_domains(domains) / self.top_k)


__all__ = ["TokenRouting"]
