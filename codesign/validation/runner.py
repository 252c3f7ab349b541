"""Run validation cases and compute per-case errors and the summary (pure: no I/O)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from codesign.api import simulate_run
from codesign.errors import InfeasiblePlan
from codesign.report.training import MEMORY_KEYS, TrainingReport
from codesign.runtime import progress_bar
from codesign.specs.run import TrainingRun
from codesign.units import TFLOPS, GiB
from codesign.validation import inference_cases as inf
from codesign.validation.inference_serving import predict as predict_inference
from codesign.validation.training_cases import (
    MEMORY_DOUBT_FACTORS,
    MappedCase,
    Measurement,
    Unsupported,
    iter_cases,
)
from codesign.validation.training_cases import read_rows as read_training_rows


@dataclass(frozen=True)
class CaseResult:
    """One validation case: measured vs predicted, signed error in percent."""

    case_id: str
    source: str
    metric: str
    measured: float | None
    predicted: float | None
    error_pct: float | None
    status: str  # ok | infeasible | unsupported
    reason: str = ""
    assumptions: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def short_source(source: str) -> str:
    """'Narayanan et al. 2021, ...' -> 'Narayanan et al. 2021'."""
    return source.split(",")[0].strip().strip("'\"")[:60]


def source_flops(run: TrainingRun, formula: str) -> float:
    """FLOPs per step as the source counts them."""
    if formula == "megatron-recompute":
        # Narayanan et al. 2021, eq. (3): 96·B·s·l·h²(1 + s/6h + V/16lh) with recompute; as
        # Megatron-DeepSpeed logs it (megatron/utils.py throughput_calculator), 24 × 4 passes
        # with activation recompute (full or selective), 24 × 3 without
        m = run.model
        b, s, layers, h, v = (run.parallel.global_batch_size, run.seq_len, m.num_layers,
                              m.hidden_size, m.vocab_size)
        passes = 3 if run.parallel.recompute == "none" else 4
        return 24 * passes * b * s * layers * h * h * (1 + s / (6 * h) + v / (16 * layers * h))
    raise ValueError(f"unknown FLOP formula {formula!r}")


def predicted_metric(report: TrainingReport, run: TrainingRun, m: Measurement) -> float:
    """The simulator's value of the row's metric, converted with the source's FLOP formula."""
    t = report.step_time_s
    assert t is not None and report.tokens_per_s is not None
    if m.metric == "iteration_time_s":
        return t
    if m.metric == "tokens_per_s":
        return report.tokens_per_s
    if m.flop_formula in ("model", "hardware"):
        flops = (report.model_flops_per_step if m.flop_formula == "model"
                 else report.hardware_flops_per_step)
        assert flops is not None
    else:
        flops = source_flops(run, m.flop_formula)
    tflops = flops / t / run.num_gpus / TFLOPS
    if m.metric == "tflops_per_gpu":
        return tflops
    return 100 * tflops * TFLOPS / run.gpu.peak_flops(run.parallel.dtype)


#: the memory parts that are exact arithmetic of the plan (bytes per parameter and sharding):
#: the report's memory keys before the activations
MODEL_STATES = MEMORY_KEYS[:MEMORY_KEYS.index("activations")]


def _unchecked(run: TrainingRun) -> TrainingReport:
    return simulate_run(run, memory_check=False)


#: how far over HBM a run's memory estimate may be, through its activations alone, and still
#: be taken as fitting before a row whose recompute is not stated is given more recompute:
#: the measured run fitted, and the activation estimate is the part in doubt (Transformer
#: Engine keeps FP8 copies of GEMM inputs, gradient buffers may be bf16, allocators differ),
#: the first of :data:`~codesign.validation.training_cases.MEMORY_DOUBT_FACTORS`
RECOMPUTE_MEMORY_DOUBT = MEMORY_DOUBT_FACTORS[0]


def _activation_overflow(report: TrainingReport, run: TrainingRun) -> float | None:
    """The memory estimate (GiB) of an out-of-memory ``report`` whose model states (weights,
    gradients, optimizer) fit in HBM, so that only its activations overflow; ``None`` for any
    other infeasibility."""
    mem = report.memory_gib or {}
    need = mem.get("total")
    states = sum(mem.get(k, 0.0) for k in MODEL_STATES) * GiB
    if (need is None or not report.reason.startswith("out of memory")
            or states >= run.gpu.memory_bytes):
        return None
    return need


@dataclass(frozen=True)
class ChosenRun:
    """The run a case is timed with: its report, the run, what was assumed to pick it, and
    whether it was timed with the HBM check (``checked``; False: the estimate is in doubt)."""

    report: TrainingReport
    run: TrainingRun
    notes: tuple[str, ...]
    checked: bool


def choose_run(case: MappedCase,
               simulate: Callable[[TrainingRun], TrainingReport] = simulate_run,
               unchecked: Callable[[TrainingRun], TrainingReport] = _unchecked,
               ) -> ChosenRun | str:
    """The run a case is timed with: the first group (e.g. least recompute) with a feasible
    run, and within it the fastest run; or the reason none is (a string).

    A group whose runs overflow HBM through their activations alone, by less than
    :data:`RECOMPUTE_MEMORY_DOUBT`, is taken before a later group that recomputes more: its
    run closest to fitting, timed without the memory check. When every candidate exceeds
    HBM only through its activations (its weights, gradients and optimizer states, exact
    arithmetic, fit), the run the row measured did fit: the activation estimate (which
    depends on recompute policies, activation precision and allocator behaviour rows rarely
    state) is the part in doubt, so the candidate closest to fitting is timed without the
    memory check (``unchecked``) and the estimate is reported as an assumption. States that
    do not fit, or any other infeasibility (a plan that does not divide), still make the row
    infeasible."""
    reason = ""
    notes_iter = iter(case.candidate_notes)
    only_memory = True
    closest: tuple[float, TrainingRun, tuple[str, ...], str] | None = None
    checked = case.memory_checked
    if not checked:  # the runs fit a memory larger than codesign's estimate allows
        simulate = unchecked
    for gi, group in enumerate(case.candidates):
        best: tuple[float, TrainingReport, TrainingRun, tuple[str, ...]] | None = None
        # the group's run closest to fitting among those only their activations overflow,
        # with what its memory estimate is made of (the out-of-memory reason's detail)
        near: tuple[float, TrainingRun, tuple[str, ...], str] | None = None
        for i, run in enumerate(group):
            notes = next(notes_iter)
            report = simulate(run)
            if not report.feasible:
                # the reason reported: the group's first run (the smallest micro-batch) of the
                # last group (the most recompute), the one closest to fitting
                reason = report.reason if i == 0 else reason
                need = _activation_overflow(report, run)
                if need is None:
                    only_memory = False
                    continue
                if near is None or need < near[0]:
                    near = (need, run, notes, report.reason.removeprefix("out of memory: "))
                continue
            t = report.step_time_s or 0.0
            if best is None or t < best[0]:
                best = (t, report, run, notes)
        if best is not None:
            return ChosenRun(best[1], best[2], best[3], checked)
        if near is not None and (closest is None or near[0] < closest[0]):
            closest = near
        # over HBM by less than the doubt factor, with a later group recomputing more
        # (recompute not stated): taken before that recompute
        if (near is not None and gi < len(case.candidates) - 1
                and near[0] * GiB <= RECOMPUTE_MEMORY_DOUBT * near[1].gpu.memory_bytes):
            _, run, notes, why = near
            report = unchecked(run)
            if report.feasible:
                kept = (f"memory estimate exceeds HBM by less than the doubt factor "
                        f"{RECOMPUTE_MEMORY_DOUBT:g} ({why}): "
                        "no more recompute added, timed without the HBM check")
                return ChosenRun(report, run, (*notes, kept), False)
    if only_memory and closest is not None:
        _, run, notes, why = closest
        report = unchecked(run)
        if report.feasible:
            over = (f"memory estimate exceeds HBM ({why}); "
                    "the measured run fitted: timed as stated")
            return ChosenRun(report, run, (*notes, over), False)
    if case.stated:
        reason = f"{reason or 'no candidate run'}; as the row states {', '.join(case.stated)}"
    return reason or "no candidate run"


def run_case(case: MappedCase,
             simulate: Callable[[TrainingRun], TrainingReport] = simulate_run,
             unchecked: Callable[[TrainingRun], TrainingReport] = _unchecked) -> CaseResult:
    """Simulate the candidates and compare the chosen run (:func:`choose_run`) with the
    measurement."""
    m = case.measurement
    chosen = choose_run(case, simulate, unchecked)
    if isinstance(chosen, str):
        return CaseResult(case.case_id, short_source(case.source), m.metric, m.value, None,
                          None, "infeasible", reason=chosen,
                          assumptions=list(case.assumptions))
    pred = predicted_metric(chosen.report, chosen.run, m)
    return CaseResult(case.case_id, short_source(case.source), m.metric, m.value, pred,
                      100.0 * (pred - m.value) / m.value, "ok",
                      assumptions=[*case.assumptions, *chosen.notes])


def unsupported(row: dict[str, str], reason: str) -> CaseResult:
    return CaseResult(row.get("case_id", "?"), short_source(row.get("source", "")), "", None,
                      None, None, "unsupported", reason=reason)


def summarize(results: Iterable[CaseResult]) -> dict[str, Any]:
    """Count, median, mean, 90th percentile and max absolute error (percent), worst case,
    and the mean absolute error per source."""
    ok = [r for r in results if r.status == "ok" and r.error_pct is not None]
    errs = np.array([abs(r.error_pct) for r in ok if r.error_pct is not None])
    if not len(errs):
        return {"n": 0, "median_abs_error_pct": None, "mean_abs_error_pct": None,
                "p90_abs_error_pct": None, "max_abs_error_pct": None, "worst_case": None,
                "by_source": {}}
    worst = max(ok, key=lambda r: abs(r.error_pct or 0.0))
    by_source: dict[str, list[float]] = {}
    for r in ok:
        by_source.setdefault(r.source, []).append(abs(r.error_pct or 0.0))
    return {
        "n": len(ok),
        "median_abs_error_pct": float(np.median(errs)),
        "mean_abs_error_pct": float(np.mean(errs)),
        "p90_abs_error_pct": float(np.percentile(errs, 90)),
        "max_abs_error_pct": float(np.max(errs)),
        "worst_case": worst.case_id,
        "by_source": {k: {"n": len(v), "mean_abs_error_pct": float(np.mean(v))}
                      for k, v in sorted(by_source.items())},
    }


def run_inference_case(case: inf.InferenceCase) -> CaseResult:
    """Predict one inference case with the serving simulator (see
    :mod:`codesign.validation.inference_serving`)."""
    src = short_source(case.source)
    try:
        pred, notes = predict_inference(case)
    except InfeasiblePlan as exc:
        return CaseResult(case.case_id, src, case.metric, case.value, None, None, "infeasible",
                          reason=str(exc), assumptions=list(case.assumptions))
    except (Unsupported, ValueError) as exc:
        return CaseResult(case.case_id, src, case.metric, case.value, None, None,
                          "unsupported", reason=str(exc), assumptions=list(case.assumptions))
    return CaseResult(case.case_id, src, case.metric, case.value, pred,
                      100.0 * (pred - case.value) / case.value, "ok",
                      assumptions=[*case.assumptions, *notes])


def run_inference_csv(path: Path, progress: bool = False) -> list[CaseResult]:
    """Every row of an inference CSV as a :class:`CaseResult` (never raises per row)."""
    results = []
    bar = progress_bar(len(inf.read_rows(path)), "validating", "row", progress)
    for row, case in inf.iter_cases(path):
        bar(1)
        if isinstance(case, str):
            results.append(unsupported(row, case))
            continue
        try:
            results.append(run_inference_case(case))
        except Exception as exc:  # a failing case is a row, never the end of the run
            results.append(CaseResult(case.case_id, short_source(case.source), case.metric,
                                      case.value, None, None, "unsupported",
                                      reason=f"{type(exc).__name__}: {exc}"))
    return results


def run_csv(path: Path,
            simulate: Callable[[TrainingRun], TrainingReport] = simulate_run, *,
            progress: bool = False) -> list[CaseResult]:
    """Every row of a measurement CSV as a :class:`CaseResult` (never raises per row);
    ``progress``: a progress bar on a terminal.

    A CSV with a ``serving_mode`` column holds inference rows (the columns of
    ``experiments/validation/inference_cases.csv``); any other, training rows."""
    if inf.is_inference_csv(path):
        return run_inference_csv(path, progress)
    results = []
    bar = progress_bar(len(read_training_rows(path)), "validating", "row", progress)
    for row, case in iter_cases(path):
        bar(1)
        if isinstance(case, str):
            results.append(unsupported(row, case))
        else:
            try:
                results.append(run_case(case, simulate))
            except Exception as exc:  # a failing case is a row, never the end of the run
                results.append(CaseResult(case.case_id, short_source(case.source),
                                          case.measurement.metric, case.measurement.value,
                                          None, None, "unsupported",
                                          reason=f"{type(exc).__name__}: {exc}"))
    return results


def format_results(results: list[CaseResult], summary: dict[str, Any],
                   assumptions: bool = False) -> str:
    """Fixed-width table of the cases and the summary."""
    lines = [f"{'case':8s} {'source':26s} {'metric':16s} {'measured':>11s} {'predicted':>11s} "
             f"{'error':>8s}  status"]
    for r in results:
        meas = f"{r.measured:11.4g}" if r.measured is not None else f"{'-':>11s}"
        pred = f"{r.predicted:11.4g}" if r.predicted is not None else f"{'-':>11s}"
        err = f"{r.error_pct:+7.1f}%" if r.error_pct is not None else f"{'-':>8s}"
        tail = f"  ({r.reason})" if r.reason else ""
        lines.append(f"{r.case_id:8s} {r.source[:26]:26s} {r.metric:16s} {meas} {pred} {err}"
                     f"  {r.status}{tail}")
        if assumptions:
            lines += [f"{'':10s}- {a}" for a in r.assumptions]
    s = summary
    if s["n"]:
        lines += ["", f"simulated {s['n']} of {len(results)} cases: |error| median "
                      f"{s['median_abs_error_pct']:.1f}%, mean {s['mean_abs_error_pct']:.1f}%, "
                      f"p90 {s['p90_abs_error_pct']:.1f}%, max {s['max_abs_error_pct']:.1f}% "
                      f"({s['worst_case']})"]
        lines += [f"  {src[:40]:40s} n={v['n']:2d}  mean |error| {v['mean_abs_error_pct']:.1f}%"
                  for src, v in s["by_source"].items()]
    else:
        lines += ["", f"no case simulated ({len(results)} rows)"]
    return "\n".join(lines)
