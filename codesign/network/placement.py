"""Rank placement: which ranks form each communication group, and how groups meet domains.

Ranks are consecutive integer ids assigned in a mixed-radix order over the placement dims
(``tp``, ``cp``, ``ep``, ``dp``, ``pp``), innermost first. The user-level data-parallel degree
``dp`` is split into ``ep`` (inner) × ``dp // ep`` (outer): in a :class:`Layout` the dim ``"ep"``
has size ``ep`` and the dim ``"dp"`` has size ``dp // ep``.

A scale-up domain of ``D`` GPUs holds ranks ``[k·D, (k+1)·D)``. Everything here is closed form
(a mixed-radix digit count), so placing a group costs O(number of dims), never O(ranks).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod
from types import MappingProxyType

from codesign.groups import GROUP_DIMS, PLACEMENT_DIMS, group_dims

__all__ = ["GROUP_DIMS", "PLACEMENT_DIMS", "GroupPlacement", "Layout", "folded_expert_groups",
           "group_dims", "layout_for", "place_group", "place_strided"]
# GROUP_DIMS, PLACEMENT_DIMS, group_dims: re-exported from codesign.groups


@dataclass(frozen=True)
class Layout:
    """A mixed-radix rank layout.

    ``order`` lists the dims innermost (fastest-varying rank id) first; ``sizes`` is a tuple of
    ``(dim, size)`` pairs in the same order (hashable). Use :func:`layout_for` to build one.
    """

    order: tuple[str, ...]
    sizes: tuple[tuple[str, int], ...]

    def __post_init__(self) -> None:
        if tuple(d for d, _ in self.sizes) != self.order:
            raise ValueError("Layout.sizes must list the dims of Layout.order in the same order")
        if sorted(self.order) != sorted(PLACEMENT_DIMS):
            raise ValueError(f"Layout.order must be a permutation of {', '.join(PLACEMENT_DIMS)}")
        for dim, n in self.sizes:
            if n < 1:
                raise ValueError(f"Layout size of '{dim}' must be >= 1, got {n}")

    @property
    def size_map(self) -> MappingProxyType[str, int]:
        """Read-only ``dim -> size`` view."""
        return MappingProxyType(dict(self.sizes))

    def size(self, dim: str) -> int:
        """Number of positions along ``dim``."""
        for d, n in self.sizes:
            if d == dim:
                return n
        raise ValueError(f"unknown layout dim '{dim}'; allowed: {', '.join(PLACEMENT_DIMS)}")

    def stride(self, dim: str) -> int:
        """Rank-id distance between neighbours along ``dim`` (product of the inner dims' sizes)."""
        s = 1
        for d, n in self.sizes:
            if d == dim:
                return s
            s *= n
        raise ValueError(f"unknown layout dim '{dim}'; allowed: {', '.join(PLACEMENT_DIMS)}")

    @property
    def world(self) -> int:
        """Total number of ranks (product of all sizes)."""
        return prod(n for _, n in self.sizes)

    def group_size(self, group: str) -> int:
        """Number of ranks in one group of kind ``group``."""
        return prod(self.size(d) for d in group_dims(group))


def layout_for(
    tp: int, cp: int, ep: int, dp: int, pp: int, order: tuple[str, ...] = PLACEMENT_DIMS
) -> Layout:
    """Build a :class:`Layout` from user-level degrees; ``ep`` must divide ``dp``.

    The layout's ``"ep"`` dim has size ``ep`` and its ``"dp"`` dim has size ``dp // ep``.
    """
    for name, value in (("tp", tp), ("cp", cp), ("ep", ep), ("dp", dp), ("pp", pp)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    if dp % ep:
        raise ValueError(f"ep ({ep}) must divide dp ({dp})")
    order = tuple(order)
    if sorted(order) != sorted(PLACEMENT_DIMS):
        raise ValueError(f"placement order must be a permutation of {', '.join(PLACEMENT_DIMS)}")
    sizes = {"tp": tp, "cp": cp, "ep": ep, "dp": dp // ep, "pp": pp}
    return Layout(order=order, sizes=tuple((d, sizes[d]) for d in order))


@dataclass(frozen=True)
class GroupPlacement:
    """How one communication group sits on the scale-up domains.

    Attributes:
        size: ranks in the group.
        ranks_per_domain: members of the group of rank 0 that lie in domain 0 (ranks ``[0, D)``),
            i.e. how many group members share a scale-up domain.
        num_domains: ``ceil(size / ranks_per_domain)``.
        span: rank-id extent of the group of rank 0, ``max rank - min rank + 1``.
        aligned: True when every group of this kind (not only rank 0's) lies inside one domain
            whenever rank 0's does, i.e. domain boundaries fall on group-block boundaries.
    """

    size: int
    ranks_per_domain: int
    num_domains: int
    span: int
    aligned: bool = True

    @property
    def crosses_domains(self) -> bool:
        """True when the group needs the scale-out tier."""
        return self.num_domains > 1


def members_below(generators: Sequence[tuple[int, int]], limit: int) -> int:
    """How many ranks of rank 0's group are ``< limit``; the group is every digit sum
    ``Σ i_j·stride_j`` (``0 <= i_j < size_j``) of ``generators`` (``(size, stride)`` pairs of a
    mixed radix: each stride at least the extent of the pairs with smaller strides)."""
    gens = sorted((g for g in generators if g[0] > 1), key=lambda g: g[1])
    return _below(gens, limit)


def _below(gens: list[tuple[int, int]], limit: int) -> int:
    """:func:`members_below` of generators sorted by stride (outermost last)."""
    if limit <= 0:
        return 0
    if not gens:
        return 1
    size, stride = gens[-1]
    inner = 1
    for n, _ in gens[:-1]:
        inner *= n
    whole = min(size, limit // stride)  # outer digits whose whole inner block lies below
    partial = _below(gens[:-1], limit - whole * stride) if whole < size else 0
    return whole * inner + partial


def place_group(layout: Layout, group_name: str, domain_size: int) -> GroupPlacement:
    """Place the ``group_name`` groups of ``layout`` on domains of ``domain_size`` ranks.

    Exact for any layout (mixed-radix counting, no enumeration). For a single-tier network pass
    ``domain_size = layout.world``: every group then lies in one domain.
    """
    if domain_size < 1:
        raise ValueError(f"domain_size must be >= 1, got {domain_size}")
    dims = frozenset(group_dims(group_name))
    size = prod(layout.size(d) for d in dims)
    span = 1 + sum((layout.size(d) - 1) * layout.stride(d) for d in dims)
    per_domain = max(1, members_below([(layout.size(d), layout.stride(d)) for d in dims],
                                      domain_size))
    num_domains = -(-size // per_domain)
    # Every group lies inside an aligned block of `block` ranks (all dims up to and including its
    # outermost dim). All groups split over domains the same way as rank 0's when the domains
    # hold whole blocks, or when a domain boundary is a digit boundary of the mixed radix.
    wide = [layout.order.index(d) for d in dims if layout.size(d) > 1]
    block = prod(n for _, n in layout.sizes[: max(wide) + 1]) if wide else 1
    prefix = 1
    digit_boundary = False
    for _, n in layout.sizes:
        prefix *= n
        digit_boundary = digit_boundary or prefix == domain_size
    aligned = domain_size >= layout.world or domain_size % block == 0 or digit_boundary
    if not aligned and wide and block % domain_size == 0:
        # Group dims contiguous at the top of the block (no wider non-group dim between them)
        # and domains a multiple of the innermost group stride: the inner offset of a group
        # never moves a member across a domain boundary.
        lo, hi = min(wide), max(wide)
        contiguous = all(
            layout.sizes[i][0] in dims or layout.sizes[i][1] == 1 for i in range(lo, hi + 1)
        )
        aligned = contiguous and domain_size % layout.stride(layout.order[lo]) == 0
    return GroupPlacement(
        size=size, ranks_per_domain=per_domain, num_domains=num_domains, span=span, aligned=aligned
    )


def place_strided(size: int, stride: int, domain_size: int) -> GroupPlacement:
    """Place groups of ``size`` ranks ``stride`` apart (``r, r + stride, ...``) tiling blocks of
    ``size × stride`` consecutive ranks, on domains of ``domain_size`` ranks (closed form)."""
    block = size * stride
    per_domain = max(1, members_below([(size, stride)], domain_size))
    aligned = domain_size % block == 0 or (block % domain_size == 0
                                           and domain_size % stride == 0)
    return GroupPlacement(size=size, ranks_per_domain=per_domain,
                          num_domains=-(-size // per_domain), span=(size - 1) * stride + 1,
                          aligned=aligned)


def folded_expert_groups(tp: int, cp: int, dp: int, ep: int, etp: int,
                         domain_size: int) -> dict[str, GroupPlacement]:
    """Placements of the expert groups under MoE parallel folding (Megatron-Core
    ``parallel_state``: the ``tp × cp × dp`` ranks of a pipeline stage, consecutive in the
    layout, are re-gridded as expert-TP (innermost) × EP × expert-DP): ``ep`` ranks ``etp``
    apart, and the expert-DP group (``edp`` and ``edp_cp``) ``ep·etp`` apart."""
    edp = max(tp * cp * dp // (ep * etp), 1)
    ep_place = place_strided(ep, etp, domain_size)
    edp_place = place_strided(edp, ep * etp, domain_size)
    return {"ep": ep_place, "edp": edp_place, "edp_cp": edp_place}
