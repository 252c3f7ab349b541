"""Sweep expansion: the blocks of an :class:`ExperimentSpec` to points, a point to a run.

A point is the set of axis values (path -> value) of one combination; its id is a stable hash
of those values, so the same point has the same id in every run of the same study (which is
how a re-run skips finished points). A point that several blocks produce is kept once, in the
first block that produces it.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass, field
from typing import Any

from codesign.api import build_run
from codesign.errors import SpecError
from codesign.experiments.spec import ENTRY_KINDS, ExperimentSpec, load_entry
from codesign.specs.base import evolve
from codesign.specs.run import TrainingRun


@dataclass(frozen=True)
class Point:
    """One point of a sweep: its id, expansion order, block and axis values."""

    point_id: str
    index: int
    block: int
    overrides: dict[str, Any] = field(default_factory=dict)


def point_id(overrides: dict[str, Any]) -> str:
    """Stable id of a point: a hash of its axis values (order-independent)."""
    text = json.dumps(overrides, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


#: studies with more points than this are refused unless the caller raises the cap
#: (``--max-points``): a sweep of millions of points is usually an axis typo
MAX_POINTS = 1_000_000


def expand_points(spec: ExperimentSpec, max_points: int = MAX_POINTS) -> list[Point]:
    """Every point of the study in order: blocks in turn, each a product (first axis outermost)
    or a zip of its axes. A study with no sweep has one point, the base run. Raises
    :class:`SpecError` with the count when the study has more than ``max_points`` points
    (counted without enumerating them)."""
    if spec.num_points > max_points:
        raise SpecError(f"study '{spec.name}' has {spec.num_points:,} points, more than the "
                        f"cap of {max_points:,}; narrow its axes or raise the cap "
                        "(--max-points)")
    combos: list[tuple[int, dict[str, Any]]] = []
    for b, block in enumerate(spec.sweep):
        paths = list(block.axes)
        values = [block.axes[p] for p in paths]
        rows = zip(*values, strict=True) if block.mode == "zip" else itertools.product(*values)
        combos += [(b, dict(zip(paths, row, strict=True))) for row in rows]
    if not spec.sweep:
        combos = [(0, {})]
    points: list[Point] = []
    seen: set[str] = set()
    for b, overrides in combos:
        pid = point_id(overrides)
        if pid in seen:
            continue
        seen.add(pid)
        points.append(Point(pid, len(points), b, overrides))
    return points


def plan_settings(spec: ExperimentSpec, overrides: dict[str, Any]) -> dict[str, Any]:
    """The plan settings of a point: the base plan with the point's ``plan.<field>`` values."""
    plan = {k: v for k, v in spec.base.plan.items() if v is not None}
    plan.update({p.removeprefix("plan."): v for p, v in overrides.items()
                 if p.startswith("plan.")})
    return plan


def resolve_point(spec: ExperimentSpec, overrides: dict[str, Any]) -> TrainingRun:
    """The run of one point: whole-entry values (``model``, ``gpu``, ``topology``) and
    ``num_gpus`` replace the base's, ``plan.<field>`` values update its plan, then the field
    paths (``base.overrides`` first, then the point's) are applied with :func:`evolve`.
    Setting ``gpu.hbm_capacity_GB`` clears ``gpu.hbm_total_MiB`` (unless that is set too), so
    the capacity swept is the capacity used.

    Raises :class:`~codesign.errors.SpecError` for a value a field does not accept.
    """
    base = spec.base
    refs = {k: overrides.get(k, getattr(base, k)) for k in ENTRY_KINDS}
    model = load_entry("model", refs["model"])
    gpu = load_entry("gpu", refs["gpu"])
    topology = load_entry("topology", refs["topology"]) if refs["topology"] is not None else None
    num_gpus = overrides.get("num_gpus", base.num_gpus)
    run = build_run(model=model, gpu=gpu, topology=topology, num_gpus=num_gpus,  # type: ignore[arg-type]
                    **plan_settings(spec, overrides))
    fields = dict(base.overrides)
    fields.update({p: v for p, v in overrides.items()
                   if "." in p and p.split(".", 1)[0] in ENTRY_KINDS})
    if "gpu.hbm_capacity_GB" in fields and "gpu.hbm_total_MiB" not in fields:
        # a design point's capacity is the datasheet figure, not the measured device total
        fields["gpu.hbm_total_MiB"] = None
    return evolve(run, fields) if fields else run


__all__ = ["Point", "expand_points", "plan_settings", "point_id", "resolve_point"]
