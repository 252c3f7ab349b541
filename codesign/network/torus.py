"""Collectives on a torus scale-up fabric (TPU ICI): slice shapes, group geometry, costs.

A torus scale-up domain (``ScaleUpSpec.torus``) connects each chip to its two neighbours
along each of ``k`` dimensions; the chip's per-direction bandwidth ``bandwidth_GBps`` is split
evenly over its ``2k`` links, so one link carries ``bandwidth_GBps / 2k`` per direction.

Slice. A job of ``n`` chips (at most the domain) gets the standard slice of its size
(:func:`slice_shape`: the smallest dimension doubled first, as Google Cloud's TPU slice
tables grow ``2x2x1 → 2x2x2 → 2x2x4 → 2x4x4 → 4x4x4 ...``); a slice dimension of at least
``wrap_from`` chips is closed into a ring (TPU v4/v5p: every slice of one 4x4x4 cube or more
is a full 3D torus), a shorter one is a line (a mesh edge).

Groups. Ranks fill the slice in row-major order, the first torus dimension fastest, so a
communication group whose ranks are ``stride`` apart occupies a sub-grid: along each torus
dimension, ``extent`` distinct coordinates ``spacing`` links apart (:func:`geometry`).

Algorithms (per spanned dimension ``j`` of extent ``e_j``, ring bandwidth ``B_j`` = two
counter-rotating rings of ``2L`` per direction when the dimension is closed and the group's
members cover it evenly, else a ring laid over the line at ``L`` (the "half ring": every link
once each way); per-step latency ``alpha × spacing``):

* ``torus_ring`` (dimension-ordered): reduce-scatter dimension after dimension, each on the
  data the previous left, ``Σ_j (e_j-1)/e_j · S_j / B_j + (e_j-1)·α_j`` with ``S_j = S /
  Π_{i<j} e_i``; all-gather the reverse (same time); all-reduce both. Broadcast: a pipelined
  ring per dimension, ``Σ_j S / B_j + (e_j-1)·α_j``.
* ``torus_multiring``: the payload split into one part per spanned dimension, each part
  running the dimension-ordered schedule from a different dimension, so that every spanned
  dimension's links work at once: the time is the busiest dimension's traffic over its
  bandwidth (the latency terms as above). This is how XLA drives all the ICI links of a
  multi-dimensional slice; ``auto`` takes the faster of the two, ``ring`` the first.
* all-to-all (dimension-ordered routing): each dimension moves the whole ``S`` a rank sends
  across its bisection, ``S·e_j / (8L)`` on a closed ring and ``S·e_j / (4L)`` on a line.
* p2p: one link, ``S / L`` plus ``α`` per hop between the two ranks.

A member set that is not a full sub-grid (irregular strides) is priced as one ring laid over
the members in rank order at one link's bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise, product
from math import prod

#: member ids enumerated at most when reading a group's geometry
MAX_MEMBERS = 1 << 16


def slice_shape(max_dims: tuple[int, ...], n: int) -> tuple[int, ...]:
    """The torus slice of ``n`` chips within a domain of shape ``max_dims`` (see module
    docstring); the whole domain when ``n`` fills it. When ``n`` is not a product of
    doublings, the last dimension is stretched to hold the remainder."""
    if n >= prod(max_dims):
        return tuple(max_dims)
    dims = [1] * len(max_dims)
    while True:
        grow = [i for i in range(len(dims)) if dims[i] * 2 <= max_dims[i]
                and prod(dims) * 2 <= n]
        if not grow:
            break
        i = min(grow, key=lambda j: (dims[j], -j))
        dims[i] *= 2
    if prod(dims) < n:
        rest = prod(dims[:-1])
        dims[-1] = -(-n // rest)
    return tuple(dims)


@dataclass(frozen=True)
class Geometry:
    """Where one group's members lie in a torus slice.

    ``extents``/``spacing``/``closed``: per spanned torus dimension, the distinct coordinates,
    the links between neighbouring members and whether the group's ring along it closes
    (the dimension wraps and the members cover it evenly). ``grid``: the members fill the
    sub-grid (else one ring over the members, ``spacing[0]`` links per step on average).
    ``p2p_hops``: links between the first two members. ``axes``: the slice dimensions the
    members span (indices into the slice shape)."""

    extents: tuple[int, ...]
    spacing: tuple[int, ...]
    closed: tuple[bool, ...]
    grid: bool
    size: int
    p2p_hops: int
    axes: tuple[int, ...] = ()


def members(generators: tuple[tuple[int, int], ...], limit: int) -> list[int]:
    """Rank ids ``< limit`` of the group of rank 0 spanned by ``(size, stride)`` generators
    (each rank id is ``Σ digit·stride``, ``digit < size``), sorted; at most
    :data:`MAX_MEMBERS`."""
    axes = [[d * s for d in range(n) if d * s < limit] for n, s in generators if n > 1]
    out = sorted({sum(c) for c in product(*axes)} if axes else {0})
    return [m for m in out if m < limit][:MAX_MEMBERS]


def _coords(rank: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    for n in shape:
        out.append(rank % n)
        rank //= n
    return tuple(out)


def _distance(a: tuple[int, ...], b: tuple[int, ...], shape: tuple[int, ...],
              wraps: tuple[bool, ...]) -> int:
    hops = 0
    for x, y, n, w in zip(a, b, shape, wraps, strict=True):
        d = abs(x - y)
        hops += min(d, n - d) if w else d
    return hops


def geometry(ids: list[int], shape: tuple[int, ...], wrap_from: int) -> Geometry:
    """The :class:`Geometry` of member ``ids`` (local ids in the slice) in a slice of
    ``shape`` whose dimensions of at least ``wrap_from`` chips are closed."""
    wraps = tuple(n >= wrap_from and n > 2 for n in shape)
    coords = [_coords(i, shape) for i in ids]
    extents, spacing, closed, axes = [], [], [], []
    grid = True
    for j, n in enumerate(shape):
        vals = sorted({c[j] for c in coords})
        if len(vals) <= 1:
            continue
        axes.append(j)
        gaps = {b - a for a, b in pairwise(vals)}
        step = min(gaps)
        grid = grid and len(gaps) == 1
        extents.append(len(vals))
        spacing.append(step)
        closed.append(wraps[j] and len(gaps) == 1 and len(vals) * step == n)
    hops = _distance(coords[0], coords[1], shape, wraps) if len(coords) > 1 else 0
    size = len(ids)
    if not grid or prod(extents) != size:
        per_step = max(1, round(sum(_distance(coords[i], coords[i + 1], shape, wraps)
                                    for i in range(size - 1)) / max(size - 1, 1)))
        return Geometry((size,), (per_step,), (False,), False, size, hops, tuple(axes))
    return Geometry(tuple(extents), tuple(spacing), tuple(closed), True, size, hops,
                    tuple(axes))


def _ring_bw(g: Geometry, link_bw: float) -> list[float]:
    return [2 * link_bw if c else link_bw for c in g.closed]


def _latency(g: Geometry, alpha: float) -> float:
    return sum((e - 1) * s * alpha for e, s in zip(g.extents, g.spacing, strict=True))


def _rs_traffic(g: Geometry, size: float, order: list[int]) -> dict[int, float]:
    """Bytes each dimension's ring moves in a dimension-ordered reduce-scatter of ``size``
    bytes visiting dimensions in ``order``."""
    out: dict[int, float] = {}
    data = size
    for j in order:
        e = g.extents[j]
        out[j] = out.get(j, 0.0) + (e - 1) / e * data
        data /= e
    return out


def reduce_scatter_time(g: Geometry, size: float, link_bw: float, alpha: float,
                        concurrent: bool) -> float:
    """Seconds of a reduce-scatter (or all-gather of output ``size``) on the group."""
    bws = _ring_bw(g, link_bw)
    dims = list(range(len(g.extents)))
    if not concurrent or len(dims) == 1:
        traffic = _rs_traffic(g, size, dims)
        return sum(traffic[j] / bws[j] for j in dims) + _latency(g, alpha)
    part = size / len(dims)
    load = dict.fromkeys(dims, 0.0)
    for r in dims:
        for j, t in _rs_traffic(g, part, dims[r:] + dims[:r]).items():
            load[j] += t
    return max(load[j] / bws[j] for j in dims) + _latency(g, alpha)


def collective_time(kind: str, g: Geometry, size: float, link_bw: float, alpha: float,
                    concurrent: bool) -> float:
    """Seconds of one ``kind`` collective of ``size`` bytes (conventions of
    :mod:`codesign.network.collectives`) on a group of geometry ``g``; ``link_bw`` bytes/s
    per link per direction (after the message-size efficiency), ``alpha`` seconds per hop."""
    if g.size <= 1 or size <= 0:
        return 0.0
    if kind == "p2p":
        return size / link_bw + max(g.p2p_hops, 1) * alpha
    if kind in ("reduce_scatter", "all_gather"):
        return reduce_scatter_time(g, size, link_bw, alpha, concurrent)
    if kind == "all_reduce":
        return 2 * reduce_scatter_time(g, size, link_bw, alpha, concurrent)
    if kind == "broadcast":
        bws = _ring_bw(g, link_bw)
        return sum(size / b for b in bws) + _latency(g, alpha)
    if kind == "all_to_all":
        t = sum(size * e / ((8 if c else 4) * link_bw)
                for e, c in zip(g.extents, g.closed, strict=True))
        return t + _latency(g, alpha)
    raise ValueError(f"unknown collective kind '{kind}'")


__all__ = [
    "MAX_MEMBERS",
    "Geometry",
    "collective_time",
    "geometry",
    "members",
    "reduce_scatter_time",
    "slice_shape",
]
