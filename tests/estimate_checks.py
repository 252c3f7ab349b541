"""Shared check of the search estimate against the engine (imported by the test modules)."""

from __future__ import annotations

from typing import Any

import pytest

from codesign.api import simulate_run
from codesign.search.estimate import Estimator
from codesign.search.space import enumerate_plans, plan_run
from codesign.specs.run import TrainingRun


def estimates_agree(run: TrainingRun, space: Any, key: str, abs_s: float) -> int:
    """Estimate and simulate every plan of ``space`` around ``run``: the same feasibility,
    step times within 1 %, the ``key`` breakdown share within 5 % (or ``abs_s`` seconds).
    Returns how many feasible plans were compared."""
    en = enumerate_plans(run, space)
    est = Estimator(en.base)
    checked = 0
    for point in en.plans:
        e = est.estimate(point)
        r = simulate_run(plan_run(en.base, point))
        assert e.feasible == r.feasible
        if r.feasible:
            assert e.step_time_s == pytest.approx(r.step_time_s, rel=0.01)
            assert e.breakdown_s[key] == pytest.approx(r.breakdown_s[key], rel=0.05, abs=abs_s)
            checked += 1
    return checked
