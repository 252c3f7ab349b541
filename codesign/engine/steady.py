"""Identical micro-batches, counted instead of simulated: the one driver both engines use.

A step of ``n`` micro-batches is run at two shorter counts with the same remainder modulo the
schedule's period (:func:`~codesign.workload.step_program.sample_counts`). When the longer run
is the shorter one with one more steady period inserted (each engine's ``drift`` check,
task by task over the trailing in-flight window), the step of ``n`` micro-batches is the longer
run extended by the remaining periods (each engine's ``extend``).

A pipeline of unequal stages can approach its steady state slowly: a path through a faster
stage catches up with the critical one by a few microseconds per period, so the trailing
window repeats only to within a small ``ε`` for hundreds of periods (DeepSeek-V3 on 61
stages: ``ε`` = 22 µs per 1.18 s period without the host's issue cost, 0.59 ms per 3.2 s period
with it). The step is a max-plus system of the window's end
times, monotone and shifting with its inputs, so when every window task of ``b`` ends within
``ε`` of its ``a`` end plus ``Δ`` each further period adds ``Δ ± ε`` to every task: ``k`` more
periods are off by at most ``k·ε`` in a step of at least ``k·(Δ - ε)``. A drift
``ε/Δ <=`` :data:`DRIFT_BOUND` is extended (``bounded``: the step time is then within that
fraction of the exact simulation's).

Otherwise the check is tried one period further, then twice as far each time while the
samples stay within :data:`EXACT_CAP` micro-batches. When the two samples would cost more
than the step itself, or no period is found and the step is short enough
(:data:`EXACT_CAP`), the caller runs every micro-batch; a longer step is extended anyway
and marked unverified.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol, TypeVar

from codesign.workload.schedules import period
from codesign.workload.step_program import StepShape, sample_counts

#: tries (one period further, then twice as far each time) before giving up on a verified
#: extension
MAX_TRIES = 8
#: micro-batches still run in full when the steady state was not found periodic; samples
#: are not doubled past it
EXACT_CAP = 4096
#: largest relative drift ``ε/Δ`` of a steady period extended as ``bounded`` (the step
#: time's relative error is at most this): 0.1%, an order of magnitude below the model's own
#: validation error; the bound is loose (DeepSeek-V3 on 61 stages drifts by 1.8e-4 and its
#: extension is within 1e-5 of running all 3,904 micro-batches)
DRIFT_BOUND = 1e-3


class _Sample(Protocol):
    @property
    def num_microbatches(self) -> int: ...


S = TypeVar("S", bound=_Sample)
R = TypeVar("R")


def extend_steady_state(shape: StepShape, run: Callable[[int], S],
                        drift: Callable[[S, S], float], extend: Callable[[S, S, int], R],
                        mark: Callable[[R, str], R]) -> R | None:
    """The step of ``shape.num_microbatches`` micro-batches from shorter ``run`` s (see the
    module docstring), or ``None`` when the caller should run every micro-batch.

    ``drift(a, b)``: ``ε/Δ`` of ``b`` against ``a`` one period shorter (0 when ``b`` is
    ``a`` with one more period to rounding, ``inf`` when their tasks differ); ``mark(r,
    how)`` labels an extension ``bounded`` or ``unverified``."""
    n, per = shape.num_microbatches, period(shape.schedule, shape.pp)
    counts = sample_counts(shape.schedule, shape.pp, n)
    if counts is None:
        return None
    a = run(counts[0])
    for attempt in range(MAX_TRIES):
        if 2 * a.num_microbatches + per >= n:
            return None  # running the rest is cheaper than another try
        b = run(a.num_microbatches + per)
        d = drift(a, b)
        if d == 0.0:
            return extend(a, b, n)
        if d <= DRIFT_BOUND:
            return mark(extend(a, b, n), "bounded")
        if n > EXACT_CAP and 2 * a.num_microbatches + per > EXACT_CAP:
            break  # samples past the cap: extend this pair
        if attempt < MAX_TRIES - 1:
            a = b if attempt == 0 else run(2 * a.num_microbatches - n % per)
    if n > EXACT_CAP:  # not periodic yet and too long to run: extend the last pair unverified
        return mark(extend(a, b, n), "unverified")
    return None


def relative_drift(gap_s: float, delta_s: float, step_s: float) -> float:
    """``ε/Δ`` for the largest shift deviation ``gap_s`` of a period adding ``delta_s`` to a
    step of ``step_s`` seconds: 0 within rounding (``1e-9`` of the step), ``inf`` when the
    period adds no time."""
    if gap_s <= 1e-9 * max(step_s, 1e-30):
        return 0.0
    return gap_s / delta_s if delta_s > 0 else math.inf


def extend_breakdown(a: dict[str, float], b: dict[str, float], k: int) -> dict[str, float]:
    """Breakdown ``b`` with ``k`` more periods, each adding ``b - a`` per category (``a``
    one period shorter); categories that end at zero are left out."""
    out = {c: b.get(c, 0.0) + k * (b.get(c, 0.0) - a.get(c, 0.0)) for c in set(a) | set(b)}
    return {c: v for c, v in out.items() if v > 0}


__all__ = ["DRIFT_BOUND", "EXACT_CAP", "MAX_TRIES", "extend_breakdown", "extend_steady_state",
           "relative_drift"]
