"""Tree: NCCL's double binary tree (all-reduce only)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from codesign.network.algorithms import register
from codesign.network.algorithms.base import INF, CollectiveAlgorithm, trivial

if TYPE_CHECKING:
    from codesign.network.model import Tier


def log2_steps(n: int) -> int:
    """``ceil(log2 n)``: depth of a binary tree over ``n`` ranks (0 for n <= 1)."""
    return max(0, (n - 1).bit_length())


def tree_all_reduce(size: float, n: int, bw: float, alpha: float) -> float:
    """Double-binary-tree all-reduce: ``2(n-1)/n · S/bw + 2·ceil(log2 n)·α``.

    Bandwidth term as a ring (the two trees each carry half the data), latency logarithmic.
    NCCL has no tree all-gather / reduce-scatter / broadcast.
    """
    if trivial(size, n):
        return 0.0
    return 2.0 * (n - 1) / n * size / bw + 2.0 * log2_steps(n) * alpha


@register
class Tree(CollectiveAlgorithm):
    """Flat double binary tree, all_reduce only, on tiers where a logarithmic tree is possible
    (not inside an NVLink domain, where NCCL's tree is a chain). Its bandwidth term equals
    the ring's, so its flows are the ring's."""

    name = "tree"
    flat = True
    preference = 1
    flows_of = "ring"

    def time(self, kind: str, size: float, n: int, bw: float, alpha: float) -> float:
        return tree_all_reduce(size, n, bw, alpha) if kind == "all_reduce" else INF

    def available(self, tier: Tier) -> bool:
        return tier.log_tree
