"""Identical micro-batches counted instead of simulated (:mod:`codesign.engine.steady`): the
driver's decisions on synthetic samples, and a real pipeline whose steady state repeats only
to within a few microseconds per period (DeepSeek-V3 on 61 unequal stages)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from codesign.api import build_models, build_run
from codesign.engine.steady import DRIFT_BOUND, EXACT_CAP, extend_steady_state, relative_drift
from codesign.engine.training import simulate_step, step_shape
from codesign.specs.base import evolve
from codesign.workload.step_program import StepShape


@dataclass(frozen=True)
class Sample:
    num_microbatches: int


def shape_with(n: int, pp: int = 4) -> StepShape:
    run = build_run(model="llama3-8b", gpu="h100", num_gpus=8 * pp, tp=8, pp=pp,
                    micro_batch_size=1, global_batch_size=pp)
    graph, _, network = build_models(run)
    return step_shape(graph, network).with_microbatches(n)


def drive(n: int, drift: float) -> tuple[tuple[str, int, int] | None, list[int]]:
    ran: list[int] = []

    def run(count: int) -> Sample:
        ran.append(count)
        return Sample(count)

    out = extend_steady_state(
        shape_with(n), run, lambda a, b: drift,
        lambda a, b, count: ("periodic", a.num_microbatches, b.num_microbatches),
        lambda r, how: (how, r[1], r[2]))
    return out, ran


def test_a_repeating_period_is_extended_from_the_first_pair() -> None:
    out, ran = drive(1000, 0.0)
    # n_a: 1000 mod 4 plus warm-up and in-flight window (8) rounded up to the period
    assert out == ("periodic", 8, 12) and ran == [8, 12]


def test_a_small_drift_is_extended_as_bounded() -> None:
    out, _ = drive(1000, DRIFT_BOUND / 2)
    assert out == ("bounded", 8, 12)


def test_no_period_runs_a_short_step_in_full_and_extends_a_long_one_from_capped_samples(
        ) -> None:
    out, ran = drive(EXACT_CAP, 1.0)
    assert out is None and max(ran) <= EXACT_CAP
    for n in (10 ** 9, 10 ** 9 + 3):
        out, ran = drive(n, 1.0)
        # extended from a pair one period apart, the longer one the last sample run
        assert out is not None and out[0] == "unverified" and out[2] == out[1] + 4
        assert out[2] == ran[-1] and max(ran) <= EXACT_CAP + 4 and len(ran) <= 16
        assert all(c % 4 == n % 4 for c in ran)


def test_no_period_within_the_tries_extends_the_last_pair(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Tries run out before the samples reach the cap: the last pair tried is extended."""
    import codesign.engine.steady as steady
    monkeypatch.setattr(steady, "MAX_TRIES", 3)
    out, ran = drive(10 ** 9, 1.0)
    # tries: (8, 12), (12, 16), then (24, 28)
    assert ran == [8, 12, 16, 24, 28] and out == ("unverified", 24, 28)


def test_relative_drift() -> None:
    assert relative_drift(1e-12, 1.0, 10.0) == 0.0  # rounding
    assert relative_drift(2e-5, 1.0, 10.0) == pytest.approx(2e-5)
    assert relative_drift(1e-3, 0.0, 10.0) == float("inf")


def test_unequal_stages_whose_window_drifts_by_microseconds_are_extended_within_the_bound(
        ) -> None:
    """DeepSeek-V3 on 61 stages (3 dense first layers, the LM head on the last; its MTP
    depth off, which would give the head a stage of its own): the trailing window repeats
    only to within ~22 µs per 1.18 s period for over a thousand micro-batches; the extension
    is bounded and agrees with running all 1,464 micro-batches."""
    pp, n = 61, 61 * 24
    # without the host's issue cost (the case of the next test)
    run = evolve(build_run(model="deepseek-v3", gpu="b200", num_gpus=32 * pp, tp=8, pp=pp,
                           ep=4, micro_batch_size=1, global_batch_size=4 * n,
                           recompute="full"), {"gpu.efficiency.host_issue_us": 0.0,
                                               "model.mtp_num_layers": 0})
    graph, compute, network = build_models(run)
    fast = simulate_step(graph, compute, network)
    exact = simulate_step(graph, compute, network, exact=True)
    assert fast.extension == "bounded" and fast.simulated_microbatches < 200
    assert exact.extension == "exact" and exact.num_microbatches == n
    assert abs(fast.step_time_s / exact.step_time_s - 1) <= DRIFT_BOUND


def test_host_bound_unequal_stages_are_extended_within_the_bound() -> None:
    """The same plan (MTP off) with the host's issue cost (64 local experts: host-bound MoE passes)
    drifts by 0.59 ms per 3.2 s period (1.8e-4): still extended from 183 simulated
    micro-batches, not run in full, and within the bound of all 1,464 (issue 11's flat cost)."""
    pp, n = 61, 61 * 24
    run = evolve(build_run(model="deepseek-v3", gpu="b200", num_gpus=32 * pp, tp=8, pp=pp,
                           ep=4, micro_batch_size=1, global_batch_size=4 * n,
                           recompute="full"), {"model.mtp_num_layers": 0})
    graph, compute, network = build_models(run)
    fast = simulate_step(graph, compute, network)
    exact = simulate_step(graph, compute, network, exact=True)
    assert fast.breakdown_s.get("host", 0.0) > 0.0  # the host binds
    assert fast.extension == "bounded" and fast.simulated_microbatches < 200
    assert abs(fast.step_time_s / exact.step_time_s - 1) <= DRIFT_BOUND
