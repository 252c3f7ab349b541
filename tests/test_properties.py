"""Property-based checks of the training-step simulator over random valid plans.

Invariants: utilisation is at most 1 and HFU >= MFU; the step-time breakdown sums to the step
time and the memory categories to the total; better hardware (more peak FLOP/s, more HBM
bandwidth, more scale-up / NIC / FullFlat bandwidth) never makes a step slower; a bigger global
batch never lowers throughput.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from codesign.api import build_run, simulate_run
from codesign.report.training import BREAKDOWN_KEYS, MEMORY_KEYS, TrainingReport
from codesign.specs.base import evolve
from codesign.specs.run import TrainingRun

REL = 1e-9

PROPERTY_SETTINGS = settings(
    max_examples=40, deadline=None,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])

MODELS = ("llama3-8b", "gpt3-175b", "mixtral-8x7b")
GPUS = ("h100", "h200", "b200", "mi300x", "a100-80gb")
#: topologies per kind, to exercise both network models
TOPOLOGIES = (None, None, "fullflat-h100", "gb200-nvl72")


@st.composite
def plans(draw: st.DrawFn) -> dict[str, Any]:
    """Keyword arguments of :func:`codesign.api.build_run` for a structurally valid plan."""
    model = draw(st.sampled_from(MODELS))
    num_gpus = draw(st.sampled_from([8, 16, 32, 64, 128, 256, 512]))
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    pp = draw(st.sampled_from([1, 2, 4]))
    assume(tp * pp <= num_gpus)
    dp = num_gpus // (tp * pp)
    mbs = draw(st.integers(1, 2))
    n_mb = draw(st.sampled_from([1, 2, 4, 8]))
    vpp = draw(st.sampled_from([1, 2])) if pp > 1 and n_mb % pp == 0 else 1
    ep = 1
    if model == "mixtral-8x7b":
        ep = draw(st.sampled_from([e for e in (1, 2, 4, 8) if dp % e == 0]))
    kw: dict[str, Any] = {
        "model": model, "gpu": draw(st.sampled_from(GPUS)), "num_gpus": num_gpus,
        "tp": tp, "pp": pp, "vpp": vpp, "ep": ep, "micro_batch_size": mbs,
        "global_batch_size": mbs * dp * n_mb,
        "recompute": draw(st.sampled_from(["none", "selective", "full"])),
        "zero_stage": draw(st.integers(0, 3)),
        "sequence_parallel": draw(st.booleans()),
        "overlap_grad_reduce": draw(st.booleans()),
        "tp_comm_overlap": draw(st.booleans()),
    }
    topology = draw(st.sampled_from(TOPOLOGIES))
    if topology is not None:
        kw["topology"] = topology
    return kw


def feasible(kw: dict[str, Any]) -> tuple[TrainingRun, TrainingReport]:
    """The run and its report; discards the example when the plan does not fit."""
    run = build_run(**kw)
    report = simulate_run(run)
    assume(report.feasible)
    return run, report


def step_time(run: TrainingRun) -> float:
    report = simulate_run(run)
    assert report.feasible, report.reason
    assert report.step_time_s is not None
    return report.step_time_s


def assert_not_slower(run: TrainingRun, base: TrainingReport, updates: dict[str, Any]) -> None:
    assert base.step_time_s is not None
    faster = step_time(evolve(run, updates))
    assert faster <= base.step_time_s * (1 + REL), (updates, base.step_time_s, faster)


factors = st.sampled_from([1.0, 1.001, 1.1, 1.5, 2.0, 4.0, 10.0]) | st.floats(1.0, 16.0)


@PROPERTY_SETTINGS
@given(plans())
def test_report_invariants(kw: dict[str, Any]) -> None:
    run, r = feasible(kw)
    assert r.step_time_s is not None and r.mfu is not None and r.hfu is not None
    assert r.step_time_s > 0
    assert 0 < r.mfu <= 1
    assert r.hfu <= 1
    assert r.hfu >= r.mfu - 1e-12
    assert set(r.breakdown_s) == set(BREAKDOWN_KEYS)
    assert all(v >= 0 for v in r.breakdown_s.values()), r.breakdown_s
    assert sum(r.breakdown_s.values()) == pytest.approx(r.step_time_s, rel=REL, abs=0)
    if kw["recompute"] == "none":
        assert r.breakdown_s["recompute"] == 0
    mem = r.memory_gib
    assert sum(mem[k] for k in MEMORY_KEYS) == pytest.approx(mem["total"], rel=REL, abs=0)
    assert r.memory_capacity_gib is not None
    assert mem["total"] <= r.memory_capacity_gib
    assert r.tokens_per_step == kw["global_batch_size"] * run.seq_len
    assert r.tokens_per_s == pytest.approx(r.tokens_per_step / r.step_time_s, rel=REL)


@PROPERTY_SETTINGS
@given(plans(), factors)
def test_more_peak_flops_never_slower(kw: dict[str, Any], f: float) -> None:
    run, base = feasible(kw)
    peaks = {dtype: v * f for dtype, v in run.gpu.peak_tflops.items()}
    assert_not_slower(run, base, {"gpu.peak_tflops": peaks})


@PROPERTY_SETTINGS
@given(plans(), factors)
def test_more_hbm_bandwidth_never_slower(kw: dict[str, Any], f: float) -> None:
    run, base = feasible(kw)
    assert_not_slower(run, base, {"gpu.hbm_bandwidth_TBps": run.gpu.hbm_bandwidth_TBps * f})


@PROPERTY_SETTINGS
@given(plans(), factors, st.sampled_from(["scale_up", "scale_out", "both"]))
def test_more_network_bandwidth_never_slower(kw: dict[str, Any], f: float, which: str) -> None:
    run, base = feasible(kw)
    topo = run.topology
    updates: dict[str, Any] = {}
    if topo.kind == "fullflat":
        updates["topology.bandwidth_GBps"] = topo.bandwidth_GBps * f
    else:
        if which in ("scale_up", "both"):
            updates["topology.scale_up.bandwidth_GBps"] = topo.scale_up.bandwidth_GBps * f
        if which in ("scale_out", "both"):
            updates["topology.scale_out.nic_bandwidth_Gbps"] = (
                topo.scale_out.nic_bandwidth_Gbps * f)
    assert_not_slower(run, base, updates)


@PROPERTY_SETTINGS
@given(plans(), factors, factors, factors)
def test_better_everything_never_slower(kw: dict[str, Any], f_compute: float, f_hbm: float,
                                        f_net: float) -> None:
    run, base = feasible(kw)
    g, topo = run.gpu, run.topology
    updates: dict[str, Any] = {
        "gpu.peak_tflops": {dtype: v * f_compute for dtype, v in g.peak_tflops.items()},
        "gpu.hbm_bandwidth_TBps": g.hbm_bandwidth_TBps * f_hbm,
    }
    if topo.kind == "fullflat":
        updates["topology.bandwidth_GBps"] = topo.bandwidth_GBps * f_net
    else:
        updates["topology.scale_up.bandwidth_GBps"] = topo.scale_up.bandwidth_GBps * f_net
        updates["topology.scale_out.nic_bandwidth_Gbps"] = topo.scale_out.nic_bandwidth_Gbps * f_net
    assert_not_slower(run, base, updates)


@PROPERTY_SETTINGS
@given(plans())
def test_doubling_global_batch_keeps_throughput(kw: dict[str, Any]) -> None:
    """More micro-batches amortise the pipeline bubble and the per-step DP/optimizer work.

    The doubled batch can legitimately run out of memory (more micro-batches in flight in the
    pipeline warm-up); those examples are discarded.
    """
    _, base = feasible(kw)
    bigger = simulate_run(build_run(**{**kw, "global_batch_size": 2 * kw["global_batch_size"]}))
    assume(bigger.feasible)
    assert base.tokens_per_s is not None and bigger.tokens_per_s is not None
    assert bigger.tokens_per_s >= base.tokens_per_s * (1 - REL), (
        base.tokens_per_s, bigger.tokens_per_s)
    assert bigger.mfu is not None and base.mfu is not None
    assert bigger.mfu >= base.mfu * (1 - REL)
