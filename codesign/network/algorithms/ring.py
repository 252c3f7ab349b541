"""Ring: reduce-scatter and all-gather around a ring of ``n`` ranks (NCCL's ring)."""

from __future__ import annotations

from typing import ClassVar

from codesign.network.algorithms import register
from codesign.network.algorithms.base import INF, CollectiveAlgorithm, Formula, trivial


def ring_all_reduce(size: float, n: int, bw: float, alpha: float) -> float:
    """Ring all-reduce (reduce-scatter + all-gather): ``2(n-1)/n · S/bw + 2(n-1)·α``."""
    if trivial(size, n):
        return 0.0
    return 2.0 * (n - 1) / n * size / bw + 2.0 * (n - 1) * alpha


def ring_all_gather(size: float, n: int, bw: float, alpha: float) -> float:
    """Ring all-gather of a ``S``-byte output: ``(n-1)/n · S/bw + (n-1)·α``."""
    if trivial(size, n):
        return 0.0
    return (n - 1) / n * size / bw + (n - 1) * alpha


def ring_reduce_scatter(size: float, n: int, bw: float, alpha: float) -> float:
    """Ring reduce-scatter of a ``S``-byte input: ``(n-1)/n · S/bw + (n-1)·α``."""
    if trivial(size, n):
        return 0.0
    return (n - 1) / n * size / bw + (n - 1) * alpha


def ring_broadcast(size: float, n: int, bw: float, alpha: float) -> float:
    """Pipelined ring (chain) broadcast: ``S/bw + (n-1)·α``."""
    if trivial(size, n):
        return 0.0
    return size / bw + (n - 1) * alpha


@register
class Ring(CollectiveAlgorithm):
    """Flat ring on any tier: all_reduce, all_gather, reduce_scatter, broadcast; its flows are
    a ring over the group's ranks in rank order."""

    name = "ring"
    flat = True
    preference = 0
    FORMULAS: ClassVar[dict[str, Formula]] = {
        "all_reduce": ring_all_reduce, "all_gather": ring_all_gather,
        "reduce_scatter": ring_reduce_scatter, "broadcast": ring_broadcast}

    def time(self, kind: str, size: float, n: int, bw: float, alpha: float) -> float:
        fn = self.FORMULAS.get(kind)
        return INF if fn is None else fn(size, n, bw, alpha)
