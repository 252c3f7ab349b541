"""Measured collectives: time per (collective, group size, tier), piecewise linear in
log(size), looked up in seconds (``None`` outside the coverage: the network model prices it)."""

from __future__ import annotations

from collections.abc import Iterable

from codesign.measured.interpolate import LogLinear
from codesign.measured.rows import CollectiveRow
from codesign.units import US


class CollectiveTable:
    """Measured collectives per (collective, group size, tier): time piecewise linear in
    log(size)."""

    def __init__(self, rows: Iterable[CollectiveRow]) -> None:
        self.rows = tuple(rows)
        groups: dict[tuple[str, int, str | None], list[tuple[float, float]]] = {}
        for r in self.rows:
            groups.setdefault((r.collective, r.group_size, r.tier), []).append(
                (r.size_bytes, r.time_us * US))
        self._curves = {key: LogLinear(pts) for key, pts in groups.items()}

    def lookup(self, collective: str, group_size: int, size_bytes: float,
               tier: str | None = None) -> float | None:
        """Seconds of one ``collective`` of ``size_bytes`` on ``group_size`` ranks.

        Rows of ``tier`` are used first, then rows without a tier; ``tier`` ``"mixed"`` (a
        group spanning scale-up domains) matches ``scale_out`` rows. ``None``: not covered.
        """
        tiers: list[str | None] = []
        if tier == "mixed":
            tiers.append("scale_out")
        elif tier is not None:
            tiers.append(tier)
        tiers.append(None)
        sizes = [group_size] + ([2] if collective == "p2p" and group_size != 2 else [])
        for n in sizes:
            for t in tiers:
                curve = self._curves.get((collective, n, t))
                if curve is None:
                    continue
                hit = curve(float(size_bytes))
                if hit is not None:
                    return hit[0]
        return None


__all__ = ["CollectiveTable"]
