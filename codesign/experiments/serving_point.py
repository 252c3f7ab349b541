"""Evaluating one point of a serving study into one flat result row.

A row has ``point_id``, ``index``, ``block``, one column per axis path, ``status``, ``reason``,
``serving`` (the serving system's name, or the ``serving`` axis value), ``num_gpus`` (devices
of every engine) and the metrics of :func:`codesign.serving.metrics.compute_metrics`
flattened with their units in the names (:data:`SERVING_METRIC_COLUMNS`):

* ``<ttft|tpot|e2e|queue>_<mean|p50|p90|p99|max>_s``: latency summaries over the completed
  requests, seconds (TPOT over requests with at least two generated tokens);
* ``requests_per_s``, ``output_tokens_per_s`` (all generated tokens, thinking included),
  ``answer_tokens_per_s``, ``input_tokens_per_s`` over the window from the first arrival to
  the last finish, and per GPU (``_per_gpu``);
* ``goodput_rps`` (completed requests meeting every SLO, per second of the window) and
  ``goodput_fraction`` (their share of all requests);
* ``gpu_utilization`` (busy step time / simulated time, averaged over the replicas weighted by
  their GPUs), ``kv_occupancy_mean`` (the same average of the time-weighted KV-block
  occupancy), ``kv_occupancy_peak`` (the largest replica peak); fractions;
* ``requests_completed``, ``requests_rejected``, ``requests_unfinished`` (still running at
  ``horizon_s``), ``requests_preempted``, ``kv_hits`` (counts);
* ``kv_transfer_GB`` and ``kv_transfer_mean_s`` (disaggregated prefill → decode hand-offs),
  ``tier_read_GB`` (KV read from memory tiers), decimal GB;
* ``cost_usd`` (rental and energy over the simulated time), ``cost_usd_per_mtok`` (per
  million generated tokens), ``cost_usd_per_mtok_all`` (per million input + generated tokens),
  ``energy_kWh``; ``window_s``, ``simulated_s``; ``sim_wall_s`` (seconds the point took).

Status: ``ok`` when at least one request completed; ``infeasible`` when a model does not fit
its devices (no room for weights or KV cache, a plan the model cannot take) or every request
was rejected; ``failed`` (``"ExcType: message"``) for anything else, such as a value a field
does not accept. Rows that are not ok carry NaN metrics. :func:`evaluate_serving_point` never
raises (``KeyboardInterrupt`` aside).
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import TYPE_CHECKING, Any

from codesign.errors import InfeasiblePlan, SpecError
from codesign.experiments.serving_axes import (
    LATENCY_KEYS,
    LATENCY_STATS,
    SERVING_ENTRY,
    SERVING_METRIC_COLUMNS,
    load_serving_data,
    resolve_serving,
    start_ref,
)
from codesign.units import GB

if TYPE_CHECKING:
    from codesign.experiments.axes import Point
    from codesign.experiments.spec import ExperimentSpec
    from codesign.serving.sim import ServingResult
    from codesign.specs.serving import EngineSpec, ModelEntrySpec

NAN = math.nan
#: build errors that mean "this model does not fit these devices", not a bad spec
_INFEASIBLE_MARKERS = ("no room for the KV cache", "leave no HBM for the KV cache")


def serving_row_columns(spec: ExperimentSpec) -> list[str]:
    """Every column of a serving row of ``spec``, in order."""
    cols = ["point_id", "index", "block"]
    cols += [p for p in spec.axis_paths if p not in cols]
    cols += [c for c in ("status", "reason", "serving", "num_gpus") if c not in cols]
    cols += [c for c in SERVING_METRIC_COLUMNS if c not in cols]
    cols.append("sim_wall_s")
    return cols


def serving_empty_row(spec: ExperimentSpec, point: Point) -> dict[str, Any]:
    """A row of ``point`` with its axis values, status ``failed`` and no results yet."""
    row: dict[str, Any] = dict.fromkeys(serving_row_columns(spec))
    row.update(point_id=point.point_id, index=point.index, block=point.block,
               status="failed", reason="")
    row.update(point.overrides)
    for c in SERVING_METRIC_COLUMNS:
        row[c] = NAN
    return row


def _cost_factory() -> Any:
    """The simulator's step-cost factory, with "the model does not fit" raised as
    :class:`InfeasiblePlan` (the simulator reports it as a SpecError naming the engine)."""
    from codesign.serving.sim import default_cost

    def factory(engine: EngineSpec, entry: ModelEntrySpec, where: str) -> Any:
        try:
            return default_cost(engine, entry, where)
        except SpecError as exc:
            if isinstance(exc.__context__, InfeasiblePlan):
                raise InfeasiblePlan(str(exc)) from None
            raise

    return factory


def _num(v: Any) -> float:
    return NAN if v is None else float(v)


def fill_metrics(row: dict[str, Any], metrics: dict[str, Any]) -> None:
    """The metric columns of ``row`` from :func:`compute_metrics` output (see module doc)."""
    lat = metrics["latency_s"]
    for k in LATENCY_KEYS:
        for s in LATENCY_STATS:
            row[f"{k}_{s}_s"] = _num(lat[k][s])
    t = metrics["throughput"]
    for k in ("requests_per_s", "output_tokens_per_s", "answer_tokens_per_s",
              "input_tokens_per_s", "requests_per_s_per_gpu", "output_tokens_per_s_per_gpu"):
        row[k] = _num(t[k])
    row["window_s"] = _num(t["window_s"])
    g = metrics["goodput"]
    row["goodput_rps"] = _num(g["requests_per_s"])
    row["goodput_fraction"] = _num(g["fraction"])
    reps = metrics["replicas"]
    gpus = sum(r["gpus"] for r in reps)
    row["gpu_utilization"] = sum(r["utilization"] * r["gpus"] for r in reps) / gpus \
        if gpus else NAN
    row["kv_occupancy_mean"] = sum(r["kv_occupancy_mean"] * r["gpus"] for r in reps) / gpus \
        if gpus else NAN
    row["kv_occupancy_peak"] = max((r["kv_occupancy_peak"] for r in reps), default=NAN)
    req = metrics["requests"]
    row.update(requests_completed=int(req["completed"]), requests_rejected=int(req["rejected"]),
               requests_unfinished=int(req["unfinished"]),
               requests_preempted=int(req["preempted"]), kv_hits=int(req["kv_hits"]))
    kv = metrics["kv_transfers"]
    row["kv_transfer_GB"] = float(kv["bytes"]) / GB
    row["kv_transfer_mean_s"] = _num(kv["time_s"]["mean"])
    row["tier_read_GB"] = sum(float(t["bytes"]) for t in metrics["memory_tiers"].values()) / GB
    c = metrics["cost"]
    row.update(cost_usd=_num(c["total_usd"]),
               cost_usd_per_mtok=_num(c["usd_per_million_output_tokens"]),
               cost_usd_per_mtok_all=_num(c["usd_per_million_tokens"]),
               energy_kWh=_num(c["energy_kWh"]), simulated_s=_num(metrics["simulated_s"]))


def _status(row: dict[str, Any], result: ServingResult) -> None:
    done = row["requests_completed"]
    total = len(result.requests)
    if done > 0:
        row.update(status="ok", reason="")
        return
    rejected = [r.rejected for r in result.requests if r.rejected is not None]
    if rejected:
        reason = f"all {total} requests rejected ({rejected[0]})" \
            if len(rejected) == total else \
            f"no request completed ({len(rejected)} of {total} rejected: {rejected[0]})"
    else:
        reason = f"no request completed within horizon_s (of {total})" if total \
            else "no requests"
    row.update(status="infeasible", reason=reason)


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def evaluate_serving_point(spec: ExperimentSpec, point: Point) -> dict[str, Any]:
    """Simulate the serving system of one point into a row (never raises; module doc)."""
    from codesign.serving.metrics import compute_metrics
    from codesign.serving.sim import simulate_serving

    t0 = time.perf_counter()
    row = serving_empty_row(spec, point)
    try:
        serving, base_dir = resolve_serving(spec, point.overrides)
        if SERVING_ENTRY not in point.overrides:
            row["serving"] = serving.name
        row["num_gpus"] = sum(e.count for e in serving.engines)
        result = simulate_serving(serving, base_dir=base_dir, cost_factory=_cost_factory())
        fill_metrics(row, compute_metrics(result, series=False))
        _status(row, result)
    except InfeasiblePlan as exc:
        row.update(status="infeasible", reason=str(exc) or "infeasible plan")
    except SpecError as exc:
        msg = str(exc)
        if any(m in msg for m in _INFEASIBLE_MARKERS):
            row.update(status="infeasible", reason=msg)
        else:
            row.update(status="failed", reason=_describe(exc))
    except Exception as exc:
        row.update(status="failed", reason=_describe(exc))
    if row["status"] != "ok":
        for c in SERVING_METRIC_COLUMNS:
            row[c] = NAN
    if row.get("serving") is None:  # failed before the system was built: its start's name
        with contextlib.suppress(Exception):
            row["serving"] = str(load_serving_data(start_ref(spec, point.overrides))[0]["name"])
    row["sim_wall_s"] = time.perf_counter() - t0
    return row


def failed_serving_row(spec: ExperimentSpec, point: Point, exc: BaseException) -> dict[str, Any]:
    """The row of a point whose evaluation never returned (its worker died)."""
    row = serving_empty_row(spec, point)
    row.update(status="failed", reason=_describe(exc), sim_wall_s=NAN)
    return row


__all__ = ["evaluate_serving_point", "failed_serving_row", "fill_metrics",
           "serving_empty_row", "serving_row_columns"]
