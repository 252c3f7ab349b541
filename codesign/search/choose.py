"""The fastest feasible plan for a run whose plan is only partly stated.

Used where a user (``simulate`` without plan flags) or a published row (``validate``) names the
model, the system, the GPU count and the global batch but not all of TP, PP, CP, EP, VPP,
micro-batch and recompute: a tuned run uses the fastest plan that fits, so that is the one
simulated, and the choice is reported as an assumption.
"""

from __future__ import annotations

from typing import Any

from codesign.errors import InfeasiblePlan
from codesign.search.search import search
from codesign.search.space import base_run, plan_run
from codesign.specs.run import TrainingRun

#: engine confirmations of the best estimates (the engine's ranking decides among them)
CONFIRM = 3


def choose_plan(run: TrainingRun, fixed: dict[str, Any] | None = None, *, jobs: int = 1,
                confirm: int = CONFIRM) -> tuple[TrainingRun, tuple[str, ...]]:
    """``run`` with the fastest feasible plan (highest MFU, which at a fixed model, batch and
    GPU count is the shortest step) among the plans :func:`codesign.search.search` enumerates
    with the settings of ``fixed`` pinned; every setting of ``run`` that the search does not
    vary (global batch, sequence length, dtype, ...) is kept.

    Returns the chosen run and notes describing the choice. Raises :class:`InfeasiblePlan`
    with the most common reasons when no plan fits.
    """
    fixed = dict(fixed or {})
    result = search(run, fixed=fixed, objective="mfu", top_n=max(confirm, 1),
                    confirm=confirm, jobs=jobs)
    best = next((c for c in result.candidates
                 if c.report is not None and c.report is result.best), None)
    if best is None or best.point is None:
        reasons = "; ".join(f"{n} x {r}" for r, n in list(result.infeasible.items())[:3])
        raise InfeasiblePlan(f"infeasible: no plan fits among "
                             f"{result.evaluated + result.rejected:,} "
                             f"(with {_settings(fixed) or 'nothing'} pinned): {reasons}")
    chosen = plan_run(base_run(run, fixed), best.point)
    par = chosen.parallel
    free = [k for k in best.point.fields if k not in fixed]
    summary = " ".join(f"{k}={_value(getattr(par, k))}" for k in free)
    note = (f"plan not stated ({', '.join(free)}): {summary}, the fastest feasible of "
            f"{result.feasible:,} plans that fit (search, engine-confirmed)")
    return chosen, (note,)


def _value(v: Any) -> str:
    return {True: "on", False: "off"}.get(v, str(v)) if isinstance(v, bool) else str(v)


def _settings(fixed: dict[str, Any]) -> str:
    return ", ".join(f"{k}={_value(v)}" for k, v in fixed.items())


__all__ = ["CONFIRM", "choose_plan"]
