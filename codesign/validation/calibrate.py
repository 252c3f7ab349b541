"""Calibration: fit each GPU's ``sustained_fraction`` once across all validation cases.

Procedure (reproducible: ``codesign calibrate PATH.csv``):

1. Every row is mapped to runs as in ``codesign validate``; the settings chosen for a row
   (recompute, interleaving depth) are fixed from the uncalibrated simulation.
2. For each GPU type, ``sustained_fraction`` — the fraction of the microbenchmark GEMM and
   attention efficiencies sustained in end-to-end training — is the value in [0.4, 1.0] that
   minimizes the mean squared log error over that GPU's rows (least squares in log space,
   golden-section search; unlike the mean absolute log error it has one minimum when a GPU
   has an even number of rows, e.g. two). It is one physically meaningful number per die,
   never per model, case or source: parts that share a die and say so in the catalog (an
   ``efficiency_from`` chain to the part that states the fraction, e.g. GB200 -> B200, the
   same Blackwell GPU in a Grace superchip) are fitted together on their pooled rows
   (:func:`codesign.specs.catalog.fraction_owner`); rows of other GPUs do not move it, and
   network parameters stay at their microbenchmark values.
3. Generalization is measured by splitting the cases by source into two halves: fit on one
   half, report the error on the other, both ways. A GPU with no row in the fitting half
   takes the fraction of its closest fitted sibling, as a part nobody measured does in the
   catalog (:func:`codesign.specs.catalog.derive_efficiency`): up its ``efficiency_from``
   chain, else the fitted GPU of the same vendor nearest in dense peak (the nearest
   generation), else the fitted GPU of any vendor nearest in peak (:func:`sibling_fraction`).
   So a held-out row sees what a published run on a GPU without validation rows sees.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from codesign.api import simulate_run
from codesign.specs.base import SpecError, evolve
from codesign.specs.catalog import fraction_owner, load_gpu, nearest_part
from codesign.specs.gpu import GpuSpec
from codesign.specs.run import TrainingRun
from codesign.validation.runner import CaseResult, choose_run, predicted_metric, short_source
from codesign.validation.training_cases import MappedCase

BOUNDS = (0.4, 1.0)  # sustained cannot exceed what a microbenchmark reaches
GOLDEN = (math.sqrt(5) - 1) / 2


@dataclass(frozen=True)
class FixedCase:
    """A case with its run settled: calibration changes only the GPU's sustained fraction.
    ``checked``: whether the run is timed with the HBM check (False when its memory estimate
    is in doubt, :func:`codesign.validation.runner.choose_run`)."""

    case: MappedCase
    run: TrainingRun
    checked: bool = True

    @property
    def gpu(self) -> str:
        return self.run.gpu.name

    @property
    def source(self) -> str:
        return short_source(self.case.source)


def settle(cases: Sequence[MappedCase]) -> list[FixedCase]:
    """The run each case uses, picked as ``codesign validate`` picks it
    (:func:`~codesign.validation.runner.choose_run`); infeasible cases are left out."""
    out = []
    for case in cases:
        chosen = choose_run(case)
        if not isinstance(chosen, str):
            out.append(FixedCase(case, chosen.run, chosen.checked))
    return out


def with_fraction(run: TrainingRun, fraction: float) -> TrainingRun:
    return evolve(run, {"gpu.efficiency.sustained_fraction": fraction})


def log_error(fc: FixedCase, fraction: float) -> float:
    """|log(predicted / measured)| of one case at ``fraction``."""
    run = with_fraction(fc.run, fraction)
    report = simulate_run(run, memory_check=fc.checked)
    if not report.feasible:
        return math.inf
    pred = predicted_metric(report, run, fc.case.measurement)
    return abs(math.log(pred / fc.case.measurement.value))


def fit_fraction(cases: Sequence[FixedCase], tol: float = 0.002) -> float:
    """Golden-section minimum of the mean squared log error over ``cases``."""

    def f(x: float) -> float:
        return sum(log_error(c, x) ** 2 for c in cases) / len(cases)

    return golden_min(f, tol)


def golden_min(f: Callable[[float], float], tol: float = 0.002) -> float:
    """The minimizer of ``f`` over :data:`BOUNDS` by golden-section search to width ``tol``,
    rounded to 3 decimals (``f`` unimodal there)."""
    lo, hi = BOUNDS
    a, b = lo + (1 - GOLDEN) * (hi - lo), lo + GOLDEN * (hi - lo)
    fa, fb = f(a), f(b)
    while hi - lo > tol:
        if fa <= fb:
            hi, b, fb = b, a, fa
            a = lo + (1 - GOLDEN) * (hi - lo)
            fa = f(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + GOLDEN * (hi - lo)
            fb = f(b)
    return round((lo + hi) / 2, 3)


def sibling_fraction(gpu: GpuSpec, fractions: dict[str, float]) -> float:
    """``gpu``'s fitted fraction, else its closest fitted sibling's (the catalog's sibling
    rule, module docstring step 3): the first fitted part up its ``efficiency_from`` chain,
    else the fitted part of the same vendor nearest in dense BF16 peak (log distance), else
    of any vendor (:func:`codesign.specs.catalog.nearest_part`); 1.0 (uncalibrated) when
    nothing is fitted."""
    seen: set[str] = set()
    part: GpuSpec | None = gpu
    while part is not None and part.name not in seen:
        if part.name in fractions:
            return fractions[part.name]
        seen.add(part.name)
        part = _catalog_gpu(part.efficiency_from) if part.efficiency_from else None
    fitted = [g for g in map(_catalog_gpu, sorted(fractions)) if g is not None]
    name = nearest_part(gpu.vendor, _peak(gpu), ((g.name, g.vendor, _peak(g)) for g in fitted))
    return 1.0 if name is None else fractions[name]


def _catalog_gpu(name: str) -> GpuSpec | None:
    """Catalog GPU ``name`` (``None`` for a part outside the catalog, e.g. a spec file)."""
    try:
        return load_gpu(name)
    except SpecError:
        return None


def _peak(gpu: GpuSpec) -> float:
    """Dense BF16 (else FP16) peak, TFLOP/s."""
    return gpu.peak_tflops.get("bf16") or gpu.peak_tflops["fp16"]


def owner(fc: FixedCase) -> str:
    """The part whose fitted fraction ``fc``'s row calibrates (its die's, see module doc)."""
    return fraction_owner(fc.gpu)


def evaluate(cases: Sequence[FixedCase], fractions: dict[str, float]) -> list[CaseResult]:
    """Per-case results with each GPU's fraction applied (a GPU without its own: its closest
    fitted sibling's, :func:`sibling_fraction`)."""
    out = []
    for fc in cases:
        run = with_fraction(fc.run, sibling_fraction(fc.run.gpu, fractions))
        report = simulate_run(run, memory_check=fc.checked)
        m = fc.case.measurement
        if not report.feasible:
            out.append(CaseResult(fc.case.case_id, fc.source, m.metric, m.value, None, None,
                                  "infeasible", reason=report.reason))
            continue
        pred = predicted_metric(report, run, m)
        out.append(CaseResult(fc.case.case_id, fc.source, m.metric, m.value, pred,
                              100 * (pred - m.value) / m.value, "ok"))
    return out


def source_halves(cases: Sequence[FixedCase]) -> tuple[set[str], set[str]]:
    """Sources sorted by name and dealt alternately into two halves (deterministic)."""
    sources = sorted({c.source for c in cases})
    return set(sources[0::2]), set(sources[1::2])


def fit(cases: Sequence[FixedCase], jobs: int = 1,
        done: Callable[[int], None] = lambda k: None) -> dict[str, float]:
    """``sustained_fraction`` per fitted part (a die's rows pooled, :func:`owner`) present in
    ``cases``; with ``jobs`` > 1, one process per part (the fits are independent).
    ``done(1)`` after each part."""
    by_owner: dict[str, list[FixedCase]] = {}
    for c in cases:
        by_owner.setdefault(owner(c), []).append(c)
    gpus = sorted(by_owner)
    groups = [by_owner[g] for g in gpus]
    if jobs <= 1 or len(groups) <= 1:
        out = {}
        for g, grp in zip(gpus, groups, strict=True):
            out[g] = fit_fraction(grp)
            done(1)
        return out
    from concurrent.futures import ProcessPoolExecutor

    from codesign.runtime import pool_init

    with ProcessPoolExecutor(max_workers=min(jobs, len(groups)), **pool_init()) as pool:
        res = {}
        for g, f in zip(gpus, pool.map(fit_fraction, groups), strict=True):
            res[g] = f
            done(1)
        return res


@dataclass(frozen=True)
class CalibrationReport:
    """Fitted fractions, in-sample results, and the two cross-validation directions."""

    fractions: dict[str, float]
    in_sample: list[CaseResult]
    folds: list[tuple[list[str], dict[str, float], list[CaseResult]]]  # (fit sources, fit,
    # held-out results)


def calibrate(cases: Sequence[MappedCase], jobs: int = 1,
              progress: Callable[[int], Callable[[int], None]] | None = None
              ) -> CalibrationReport:
    """The whole procedure of the module docstring. ``progress(total)``: a callback made
    once the fits are counted, called with 1 after each per-GPU fit (a progress bar)."""
    fixed = settle(cases)
    half_a, half_b = source_halves(fixed)
    total = sum(len({owner(c) for c in grp}) for grp in (
        fixed, [c for c in fixed if c.source in half_a], [c for c in fixed if c.source in half_b]))
    done = progress(total) if progress is not None else (lambda k: None)
    fractions = fit(fixed, jobs, done)
    folds = []
    for train, test in ((half_a, half_b), (half_b, half_a)):
        fitted = fit([c for c in fixed if c.source in train], jobs, done)
        held = evaluate([c for c in fixed if c.source in test], fitted)
        folds.append((sorted(train), fitted, held))
    return CalibrationReport(fractions, evaluate(fixed, fractions), folds)
