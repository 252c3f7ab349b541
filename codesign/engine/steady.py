"""Identical micro-batches, counted instead of simulated: the one driver both engines use.

A step of ``n`` micro-batches is run at two shorter counts with the same remainder modulo the
schedule's period (:func:`~codesign.workload.step_program.sample_counts`). When the longer run
is the shorter one with one more steady period inserted (each engine's ``periodic`` check,
task by task over the trailing in-flight window), the step of ``n`` micro-batches is the longer
run extended by the remaining periods (each engine's ``extend``). Otherwise the check is tried
one period further, then twice as far each time; a long transient costs about twice its
length. When the two samples would cost more than the step itself, or no period is found
within :data:`MAX_TRIES` tries and the step is short enough (:data:`EXACT_CAP`), the caller
runs every micro-batch; a longer step is extended anyway and marked unverified.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from codesign.workload.schedules import period
from codesign.workload.step_program import StepShape, sample_counts

#: tries (one period further, then twice as far each time) before giving up on a verified
#: extension
MAX_TRIES = 8
#: micro-batches still run in full when the steady state was not found periodic
EXACT_CAP = 4096


class _Sample(Protocol):
    @property
    def num_microbatches(self) -> int: ...


S = TypeVar("S", bound=_Sample)
R = TypeVar("R")


def extend_steady_state(shape: StepShape, run: Callable[[int], S],
                        periodic: Callable[[S, S], bool], extend: Callable[[S, S, int], R],
                        unverified: Callable[[R], R]) -> R | None:
    """The step of ``shape.num_microbatches`` micro-batches from shorter ``run`` s (see the
    module docstring), or ``None`` when the caller should run every micro-batch."""
    n, per = shape.num_microbatches, period(shape.schedule, shape.pp)
    counts = sample_counts(shape.schedule, shape.pp, n)
    if counts is None:
        return None
    a = run(counts[0])
    for attempt in range(MAX_TRIES):
        if 2 * a.num_microbatches + per >= n:
            return None  # running the rest is cheaper than another try
        b = run(a.num_microbatches + per)
        if periodic(a, b):
            return extend(a, b, n)
        a = b if attempt == 0 else run(2 * a.num_microbatches - n % per)
    if n > EXACT_CAP:  # not periodic yet and too long to run: extend unverified
        return unverified(extend(a, run(a.num_microbatches + per), n))
    return None


def extend_breakdown(a: dict[str, float], b: dict[str, float], k: int) -> dict[str, float]:
    """Breakdown ``b`` with ``k`` more periods, each adding ``b - a`` per category (``a``
    one period shorter); categories that end at zero are left out."""
    out = {c: b.get(c, 0.0) + k * (b.get(c, 0.0) - a.get(c, 0.0)) for c in set(a) | set(b)}
    return {c: v for c, v in out.items() if v > 0}


__all__ = ["EXACT_CAP", "MAX_TRIES", "extend_breakdown", "extend_steady_state"]
