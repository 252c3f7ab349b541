"""Text of numbers for ticks, annotations and legends (``1.2M``, ``35.1``, ``32K``)."""

from __future__ import annotations

import math
from typing import Any


def is_missing(v: Any) -> bool:
    """Whether a cell holds no value (``None`` or a float NaN)."""
    if v is None:
        return True
    try:
        return bool(isinstance(v, float) and math.isnan(v))
    except TypeError:
        return False


def compact_number(v: float) -> str:
    """Short text of a number for ticks and annotations: ``1.2M``, ``35.1``, ``0.42``,
    ``32K`` (powers-of-two multiples of 1,024 as K). The number is shown in its own unit
    (no conversion); ``n/a`` for a missing value."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if float(v).is_integer():
        iv = int(v)
        if abs(iv) >= 1024 and iv % 1024 == 0 and (iv // 1024) & (iv // 1024 - 1) == 0:
            return f"{iv // 1024}K"
        if abs(iv) < 10_000:
            return str(iv)
    a = abs(v)
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e4, "k")):
        if a >= scale:
            scale = 1e3 if scale == 1e4 else scale
            x = v / scale
            return f"{x:.3g}{suffix}"
    if a >= 100:  # also 1,000-9,999: "1979" reads better than "1.98k"
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}".rstrip("0").rstrip(".")
    return f"{v:.2g}"


__all__ = ["compact_number", "is_missing"]
