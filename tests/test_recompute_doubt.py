"""A row's recompute read from its utilizations, and recompute not added to a plan whose
memory estimate is over HBM by less than the doubt factor."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from conftest import tiny_run

from codesign.api import simulate_run
from codesign.report.training import TrainingReport
from codesign.specs.run import TrainingRun
from codesign.units import GiB
from codesign.validation.calibrate import log_error, settle
from codesign.validation.recompute import (
    FULL_RECOMPUTE_HFU_RATIO,
    recompute_choices,
    recompute_from_utilization,
)
from codesign.validation.runner import RECOMPUTE_MEMORY_DOUBT, run_case
from codesign.validation.training_cases import MappedCase, Measurement, map_row, read_rows

SHARED = Path(__file__).resolve().parents[1] / "experiments" / "validation" / "training_cases.csv"


# --- recompute from HFU / MFU ----------------------------------------------------------------

def test_full_recompute_is_read_from_a_hardware_to_model_flops_ratio_of_eight_sixths() -> None:
    # GLM-130B (Zeng et al. 2022): HFU 43.3%, MFU 32.5% -> 1.332 = 8/6, every layer recomputed
    assert recompute_from_utilization("32.5", "43.3") == "full"
    assert recompute_from_utilization("0.325", "0.433") == "full"  # fractions, same ratio
    # PaLM 540B: 57.8 / 46.2 = 1.251 (rematerialization), just above the cut-off
    assert FULL_RECOMPUTE_HFU_RATIO <= 57.8 / 46.2
    assert recompute_from_utilization("46.2%", "57.8%") == "full"
    # selective recompute re-runs the attention core only: 42 / 40 = 1.05
    assert recompute_from_utilization("40", "42") is None
    assert recompute_from_utilization("", "43.3") is None
    assert recompute_from_utilization("32.5", "") is None


def test_a_utilization_ratio_states_full_recompute_unless_the_row_states_its_own() -> None:
    notes: list[str] = []
    choices = recompute_choices("", "", notes, ("32.5", "43.3"))
    assert [(c.kind, c.least, c.layers) for c in choices] == [("full", False, None)]
    assert any("HFU 43.3 / MFU 32.5" in n for n in notes)
    # a stated recompute wins over the ratio
    notes = []
    choices = recompute_choices("selective", "", notes, ("32.5", "43.3"))
    assert [c.kind for c in choices] == ["selective"]
    # no ratio: the least recompute that fits, tried in order
    choices = recompute_choices("", "", [], ("40", "42"))
    assert [c.kind for c in choices] == ["none", "selective", "full", "full"]


# --- the memory doubt before more recompute ----------------------------------------------

def _oom(run: TrainingRun, states_gib: float, activations_gib: float) -> TrainingReport:
    total = states_gib + activations_gib
    return TrainingReport(
        model="tiny", gpu="ideal", topology="fast", num_gpus=run.num_gpus, plan={},
        feasible=False, reason=f"out of memory: stage 0 needs {total:.1f} GiB",
        memory_gib={"weights": states_gib / 2, "gradients": states_gib / 4,
                    "optimizer": states_gib / 4, "activations": activations_gib,
                    "total": total})


def _done(run: TrainingRun, step_s: float) -> TrainingReport:
    return TrainingReport(model="tiny", gpu="ideal", topology="fast", num_gpus=run.num_gpus,
                          plan={}, feasible=True, step_time_s=step_s, tokens_per_s=1.0)


def _two_groups(hbm_over: float, states_frac: float = 0.5) -> tuple[float, list[str]]:
    """run_case on a two-group case (no recompute, then full recompute) whose first run needs
    ``hbm_over`` times HBM (``states_frac`` of HBM in model states): (predicted step time,
    assumptions). The no-recompute run takes 1.0 s, the recomputing one 1.3 s."""
    bare = tiny_run(2, global_batch_size=4)
    full = tiny_run(2, global_batch_size=4, recompute="full")
    hbm = bare.gpu.memory_bytes / GiB
    case = MappedCase(case_id="X", source="test", framework="megatron-core",
                      candidates=((bare,), (full,)), candidate_notes=(("none",), ("full",)),
                      measurement=Measurement("iteration_time_s", 1.0))

    def simulate(run: TrainingRun) -> TrainingReport:
        if run.parallel.recompute == "none":
            return _oom(run, states_frac * hbm, (hbm_over - states_frac) * hbm)
        return _done(run, 1.3)

    def unchecked(run: TrainingRun) -> TrainingReport:
        return _done(run, 1.0 if run.parallel.recompute == "none" else 1.3)

    result = run_case(case, simulate=simulate, unchecked=unchecked)
    assert result.status == "ok" and result.predicted is not None
    return result.predicted, result.assumptions


def test_recompute_is_not_added_to_a_plan_over_hbm_by_less_than_the_doubt_factor() -> None:
    assert RECOMPUTE_MEMORY_DOUBT == 1.25
    step, notes = _two_groups(1.2)
    assert step == 1.0  # the no-recompute run, timed without the HBM check
    assert notes[0] == "none" and "doubt factor 1.25" in notes[-1]


def test_recompute_is_added_past_the_doubt_factor_or_when_model_states_overflow() -> None:
    step, notes = _two_groups(1.3)
    assert step == 1.3 and notes == ["full"]
    step, notes = _two_groups(1.2, states_frac=1.05)  # weights+grads+optimizer alone too big
    assert step == 1.3 and notes == ["full"]


def test_llama3_405b_runs_without_recompute_within_the_doubt() -> None:
    # T064 (Llama 3 405B on 8,192 H100, recompute not stated): no recompute exceeds
    # codesign's estimate by less than 25%, through activations only, so it is timed as such
    (row,) = [r for r in read_rows(SHARED) if r["case_id"] == "T064"]
    case = map_row(row)
    result = run_case(case)
    assert result.status == "ok"
    (kept,) = [a for a in result.assumptions if "doubt factor" in a]
    need = float(kept.split("needs ")[1].split(" GiB")[0])
    hbm = case.candidates[0][0].gpu.memory_bytes / GiB
    assert hbm < need <= RECOMPUTE_MEMORY_DOUBT * hbm
    assert not any("Megatron block method" in a for a in result.assumptions)


def test_calibration_times_a_row_in_doubt_as_validate_does() -> None:
    # calibrate settles T064 on validate's own run (no recompute, timed without the HBM
    # check); with the check it would be infeasible and drop out of the fit
    (row,) = [r for r in read_rows(SHARED) if r["case_id"] == "T064"]
    case = map_row(row)
    (fc,) = settle([case])
    assert not fc.checked and fc.run.parallel.recompute == "none"
    assert not simulate_run(fc.run).feasible
    fraction = fc.run.gpu.efficiency.sustained_fraction
    expected = run_case(case)
    assert expected.predicted is not None
    assert log_error(fc, fraction) == pytest.approx(
        abs(math.log(expected.predicted / expected.measured)), rel=1e-9)
    assert math.isfinite(log_error(fc, 0.6))
