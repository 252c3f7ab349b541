"""Evaluating one point of a sweep into one flat result row.

:func:`evaluate_point` is a top-level function of plain picklable arguments, so a process pool
or a Dask cluster can run it. It never raises: an infeasible plan gives a row with status
``infeasible`` and the reason, any exception a row with status ``failed`` and
``"ExcType: message"``; both carry NaN metrics.
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any

from codesign.api import simulate_run
from codesign.errors import InfeasiblePlan
from codesign.experiments.axes import Point, plan_settings, resolve_point
from codesign.experiments.spec import COST_METRICS, ENTRY_KINDS, ExperimentSpec, load_entry
from codesign.report.training import BREAKDOWN_KEYS, MEMORY_KEYS, TrainingReport
from codesign.specs.parallel import ParallelismSpec
from codesign.specs.run import TrainingRun
from codesign.units import GiB


def plan_columns(spec: type[ParallelismSpec] = ParallelismSpec) -> tuple[str, ...]:
    """Plan columns of a row (``plan.<name>``, the plan actually simulated): every field of
    ``spec`` in its order, except those marked ``json_schema_extra={"column": False}``."""
    out = []
    for name, info in spec.model_fields.items():
        extra = info.json_schema_extra
        if not (isinstance(extra, dict) and extra.get("column") is False):
            out.append(name)
    return tuple(out)


#: plan columns of a row (``plan.<name>``): the plan actually simulated
PLAN_COLUMNS = plan_columns()
#: metric columns (NaN unless the point is ok)
METRIC_COLUMNS = ("step_time_s", "mfu", "hfu", "tokens_per_s", "tflops_per_gpu",
                  "hardware_tflops_per_gpu", "memory_GiB",
                  *(f"memory_GiB.{k}" for k in MEMORY_KEYS),
                  *(f"breakdown_s.{k}" for k in BREAKDOWN_KEYS), *COST_METRICS)
#: statuses of a row
STATUSES = ("ok", "infeasible", "failed")

NAN = math.nan


def row_columns(spec: ExperimentSpec) -> list[str]:
    """Every column of a row of ``spec``, in order."""
    if spec.kind == "serving":
        from codesign.experiments.serving_point import serving_row_columns

        return serving_row_columns(spec)
    cols = ["point_id", "index", "block"]
    cols += [p for p in spec.axis_paths if p not in cols]
    cols += [c for c in ("status", "reason", "model", "gpu", "topology", "num_gpus")
             if c not in cols]
    cols += [f"plan.{k}" for k in PLAN_COLUMNS if f"plan.{k}" not in cols]
    cols += ["memory_capacity_GiB", "num_microbatches", *METRIC_COLUMNS]
    if spec.search is not None:
        cols += ["search.evaluated", "search.feasible"]
    cols.append("sim_wall_s")
    return cols


def empty_row(spec: ExperimentSpec, point: Point) -> dict[str, Any]:
    """A row of ``point`` with its axis values, status ``failed`` and no results yet."""
    if spec.kind == "serving":
        from codesign.experiments.serving_point import serving_empty_row

        return serving_empty_row(spec, point)
    row: dict[str, Any] = dict.fromkeys(row_columns(spec))
    row.update(point_id=point.point_id, index=point.index, block=point.block,
               status="failed", reason="")
    row["num_gpus"] = point.overrides.get("num_gpus", spec.base.num_gpus)
    row.update(point.overrides)
    for c in METRIC_COLUMNS:
        row[c] = NAN
    return row


def _fill_run(row: dict[str, Any], run: TrainingRun, point: Point) -> None:
    for kind in ENTRY_KINDS:  # an axis value (as written in the spec) names its column
        if kind not in point.overrides:
            row[kind] = getattr(run, kind).name
    row["num_gpus"] = run.num_gpus
    p = run.parallel
    plan = p.model_dump()
    plan.update(dp=run.dp, seq_len=run.seq_len, zero_stage=p.sharding_stage,
                schedule=p.pipeline_schedule)
    for k in plan_columns(type(p)):
        if f"plan.{k}" not in point.overrides:
            row[f"plan.{k}"] = plan[k]
    row["memory_capacity_GiB"] = run.gpu.memory_bytes / GiB


def _fill_requested(row: dict[str, Any], spec: ExperimentSpec, point: Point) -> None:
    """Best effort, for a row that failed before its run was built: the entry names and the
    plan the point asks for (so its columns have the types of the other rows)."""
    for kind in ENTRY_KINDS:
        if row.get(kind) is None:
            ref = point.overrides.get(kind, getattr(spec.base, kind))
            with contextlib.suppress(Exception):
                if ref is None and kind == "topology":
                    gpu = load_entry("gpu", point.overrides.get("gpu", spec.base.gpu))
                    ref = getattr(gpu, "default_topology", None)
                if ref is not None:
                    row[kind] = load_entry(kind, ref).name
    settings = plan_settings(spec, point.overrides)
    try:
        p = ParallelismSpec.model_validate(settings)
    except Exception:
        plan = settings
    else:
        plan = p.model_dump()
        plan.update(zero_stage=p.sharding_stage, schedule=p.pipeline_schedule)
        n = row.get("num_gpus")
        if p.dp is None and isinstance(n, int) and n % (p.tp * p.pp * p.cp) == 0:
            plan["dp"] = n // (p.tp * p.pp * p.cp)
    for k in PLAN_COLUMNS:
        if row.get(f"plan.{k}") is None and plan.get(k) is not None:
            row[f"plan.{k}"] = plan[k]


def _fill_report(row: dict[str, Any], report: TrainingReport, point: Point) -> None:
    """Plan, memory and (for a feasible report) metrics of ``report``."""
    for k in PLAN_COLUMNS:
        if k in report.plan and f"plan.{k}" not in point.overrides:
            row[f"plan.{k}"] = report.plan[k]
    row["memory_capacity_GiB"] = report.memory_capacity_gib
    if report.memory_gib:  # known for out-of-memory plans too: how much they would need
        row["memory_GiB"] = report.memory_gib.get("total", NAN)
        for k in MEMORY_KEYS:
            row[f"memory_GiB.{k}"] = report.memory_gib.get(k, NAN)
    if not report.feasible:
        row.update(status="infeasible", reason=report.reason or "infeasible")
        return
    row.update(status="ok", reason="", step_time_s=report.step_time_s, mfu=report.mfu,
               hfu=report.hfu, tokens_per_s=report.tokens_per_s,
               tflops_per_gpu=report.tflops_per_gpu,
               hardware_tflops_per_gpu=report.hardware_tflops_per_gpu,
               num_microbatches=report.num_microbatches)
    for k in BREAKDOWN_KEYS:
        row[f"breakdown_s.{k}"] = report.breakdown_s.get(k, 0.0)
    for col, key in COST_METRICS.items():
        value = report.cost.get(key)
        row[col] = NAN if value is None else value


def _search_point(row: dict[str, Any], spec: ExperimentSpec, run: TrainingRun,
                  point: Point) -> None:
    from codesign.search.search import search
    from codesign.search.space import SearchSpace

    settings = spec.search
    assert settings is not None
    space = SearchSpace.parse(settings.space, "search.space")
    searched = set(settings.space)
    fixed = {k: v for k, v in plan_settings(spec, point.overrides).items()
             if k in SearchSpace.model_fields and k not in searched}
    result = search(run, space, fixed=fixed, objective=settings.objective,
                    top_n=settings.top_n, confirm=settings.confirm, jobs=settings.jobs)
    row["search.evaluated"] = int(result.evaluated)
    row["search.feasible"] = int(result.feasible)
    if result.best is None:
        counts = ", ".join(f"{why}: {n}" for why, n in
                           sorted(result.infeasible.items(), key=lambda kv: -kv[1]))
        row.update(status="infeasible",
                   reason=f"no feasible plan among {result.evaluated} searched"
                          + (f" ({counts})" if counts else ""))
        return
    # the searched winner is the plan simulated: its settings replace those of the base plan
    for k in PLAN_COLUMNS:
        if k in result.best.plan:
            row[f"plan.{k}"] = result.best.plan[k]
    _fill_report(row, result.best, Point(point.point_id, point.index, point.block, {}))


def evaluate_point(spec: ExperimentSpec, point: Point) -> dict[str, Any]:
    """Simulate one point (or search its best plan when ``spec.search`` is set) into a row.

    Never raises (``KeyboardInterrupt`` aside): see the module docstring. A serving study's
    point is simulated by :func:`~codesign.experiments.serving_point.evaluate_serving_point`.
    """
    if spec.kind == "serving":
        from codesign.experiments.serving_point import evaluate_serving_point

        return evaluate_serving_point(spec, point)
    t0 = time.perf_counter()
    row = empty_row(spec, point)
    try:
        run = resolve_point(spec, point.overrides)
        _fill_run(row, run, point)
        if spec.search is None:
            _fill_report(row, simulate_run(run), point)
        else:
            _search_point(row, spec, run, point)
    except InfeasiblePlan as exc:
        row.update(status="infeasible", reason=str(exc) or "infeasible plan")
    except Exception as exc:
        text = str(exc).strip().splitlines()
        row.update(status="failed", reason=f"{type(exc).__name__}: {text[0] if text else ''}"
                   .rstrip(": "))
        _fill_requested(row, spec, point)
    if row["status"] != "ok":
        for c in METRIC_COLUMNS:
            if not c.startswith("memory_GiB") or row["status"] == "failed":
                row[c] = NAN
    row["sim_wall_s"] = time.perf_counter() - t0
    return row


def failed_row(spec: ExperimentSpec, point: Point, exc: BaseException) -> dict[str, Any]:
    """The row of a point whose evaluation never returned (its worker died, or the cluster
    lost it)."""
    if spec.kind == "serving":
        from codesign.experiments.serving_point import failed_serving_row

        return failed_serving_row(spec, point, exc)
    row = empty_row(spec, point)
    text = str(exc).strip().splitlines()
    row.update(status="failed", reason=f"{type(exc).__name__}: {text[0] if text else ''}"
               .rstrip(": "), sim_wall_s=NAN)
    _fill_requested(row, spec, point)
    return row


__all__ = ["METRIC_COLUMNS", "PLAN_COLUMNS", "STATUSES", "empty_row", "evaluate_point",
           "failed_row", "row_columns"]
