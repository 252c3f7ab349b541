"""Interpolators of measured tables, in log space: achieved throughput over shapes (GEMM and
attention) and piecewise-linear curves over one size (memory, collectives).

Shape tables are covered when each dimension lies within the rows' [min, max]; a full grid of
rows is interpolated multilinearly in log coordinates, scattered rows by inverse-distance
weighting of the :data:`K_NEAREST` nearest rows, so that the rate is always a convex
combination of measured rates. Outside the coverage a lookup returns ``None``.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence

#: rows averaged by the GEMM and attention interpolators
K_NEAREST = 4
#: inverse-distance weight exponent
IDW_POWER = 2.0
#: log-space distance below which a query is an exact match of a row
_EXACT = 1e-9


def average(rows: Iterable[tuple[tuple[float, ...], float]]) -> list[tuple[tuple[float, ...],
                                                                            float]]:
    """Average the values of rows sharing a key, keeping first-seen order."""
    acc: dict[tuple[float, ...], list[float]] = {}
    for key, value in rows:
        acc.setdefault(key, []).append(value)
    return [(key, sum(v) / len(v)) for key, v in acc.items()]


class ShapeTable:
    """Achieved throughput interpolated in log-shape space (GEMM and attention tables).

    ``points`` are (shape, time in seconds); ``work(shape)`` is the quantity whose rate is
    interpolated (FLOPs for a GEMM). A query outside the per-dimension [min, max] is uncovered.
    Rows forming a full grid are interpolated multilinearly, scattered rows by inverse-distance
    weighting of the :data:`K_NEAREST` nearest rows.
    """

    def __init__(self, points: Sequence[tuple[tuple[float, ...], float]],
                 work: Callable[[tuple[float, ...]], float]) -> None:
        self.work = work
        pts = average(points)
        self.exact = dict(pts)
        self.shapes = [s for s, _ in pts]
        self.logs = [tuple(math.log(x) for x in s) for s in self.shapes]
        self.rates = [work(s) / t for s, t in pts]
        dims = len(self.shapes[0])
        self.axes = [sorted({s[i] for s in self.shapes}) for i in range(dims)]
        self.lo = tuple(a[0] for a in self.axes)
        self.hi = tuple(a[-1] for a in self.axes)
        self.grid = len(pts) == math.prod(len(a) for a in self.axes)
        self._rate = dict(zip(self.shapes, self.rates, strict=True))
        self._memo: dict[tuple[float, ...], float | None] = {}

    def covers(self, shape: tuple[float, ...]) -> bool:
        return all(lo <= x <= hi for x, lo, hi in zip(shape, self.lo, self.hi, strict=True))

    def lookup(self, shape: tuple[float, ...]) -> float | None:
        if shape in self._memo:
            return self._memo[shape]
        out = self._lookup(shape)
        if len(self._memo) < 1 << 16:
            self._memo[shape] = out
        return out

    def _lookup(self, shape: tuple[float, ...]) -> float | None:
        if not self.covers(shape):
            return None
        hit = self.exact.get(shape)
        if hit is not None:
            return hit
        rate = self._grid_rate(shape) if self.grid else self._idw_rate(shape)
        return self.work(shape) / rate

    def _grid_rate(self, shape: tuple[float, ...]) -> float:
        """Multilinear interpolation in log coordinates between the surrounding grid rows."""
        corners: list[tuple[tuple[float, ...], float]] = [((), 1.0)]
        for x, axis in zip(shape, self.axes, strict=True):
            i = bisect_left(axis, x)
            if axis[i] == x:
                corners = [((*c, x), w) for c, w in corners]
                continue
            x0, x1 = axis[i - 1], axis[i]
            t = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
            corners = [((*c, v), w * f) for c, w in corners
                       for v, f in ((x0, 1 - t), (x1, t))]
        return sum(w * self._rate[c] for c, w in corners)

    def _idw_rate(self, shape: tuple[float, ...]) -> float:
        """Inverse-distance-weighted rate of the nearest rows (Euclidean in log coordinates)."""
        q = tuple(math.log(x) for x in shape)
        dist = sorted((math.dist(q, p), i) for i, p in enumerate(self.logs))
        if dist[0][0] < _EXACT:
            return self.rates[dist[0][1]]
        near = dist[:K_NEAREST]
        weights = [d ** -IDW_POWER for d, _ in near]
        rate = sum(w * self.rates[i] for w, (_, i) in zip(weights, near, strict=True))
        return rate / sum(weights)


class LogLinear:
    """Piecewise-linear interpolation of ``value`` in log(x), exact at the rows' x."""

    def __init__(self, points: Iterable[tuple[float, float]]) -> None:
        merged = sorted((key[0], v) for key, v in average(((x,), v) for x, v in points))
        self.xs = [x for x, _ in merged]
        self.logs = [math.log(x) for x in self.xs]
        self.values = [v for _, v in merged]

    def __call__(self, x: float) -> tuple[float, bool] | None:
        """(value, exact) at ``x``, or ``None`` outside [min, max]."""
        if not self.xs or x <= 0 or x < self.xs[0] or x > self.xs[-1]:
            return None
        i = bisect_left(self.xs, x)
        if self.xs[i] == x:
            return self.values[i], True
        lx = math.log(x)
        x0, x1 = self.logs[i - 1], self.logs[i]
        t = (lx - x0) / (x1 - x0)
        return self.values[i - 1] + t * (self.values[i] - self.values[i - 1]), False


__all__ = ["IDW_POWER", "K_NEAREST", "LogLinear", "ShapeTable", "average"]
