"""MoE all-to-all overlap across micro-batches (``ep_comm_overlap``; Megatron-Core
``--overlap-moe-expert-parallel-comm``, DeepSeek-V3's DualPipe): the dispatch/combine
all-to-alls leave the compute stream's path, so a pass takes the longer of its computation
and its EP link instead of their sum; rows that say so are read that way."""

from __future__ import annotations

import statistics

import pytest

from codesign.api import build_run, simulate_run
from codesign.search import SearchSpace, enumerate_plans
from codesign.search.estimate import Estimator
from codesign.search.space import plan_run
from codesign.validation.training_cases import map_row

#: Qwen3-30B-A3B with EP 32 over four 8-GPU nodes (TP 1): dispatch/combine on the NICs
MOE = dict(model="qwen3-30b-a3b", gpu="h100", num_gpus=64, tp=1, pp=2, ep=32,
           global_batch_size=256, recompute="full")
COMPUTE = ("forward", "backward", "recompute")


def _step(**kw: object) -> tuple[float, dict[str, float]]:
    rep = simulate_run(build_run(**{**MOE, **kw}))  # type: ignore[arg-type]
    assert rep.feasible and rep.step_time_s is not None, rep.reason
    return rep.step_time_s, rep.breakdown_s


def test_overlap_hides_all_to_alls_behind_computation_and_no_more() -> None:
    base, parts = _step()
    hidden, hparts = _step(ep_comm_overlap=True)
    ep = parts.get("ep_comm", 0.0)
    assert ep > 0.05 * base  # the all-to-alls matter in this plan
    assert hidden < base
    # no more than the exposed all-to-alls is saved (the pipeline's idle time aside)
    assert base - hidden <= ep + parts.get("pipeline_bubble", 0.0) + 1e-9
    assert hparts.get("ep_comm", 0.0) < ep
    # the computation itself is the same work
    for k in COMPUTE:
        assert hparts.get(k, 0.0) == pytest.approx(parts.get(k, 0.0), rel=1e-9)


def test_a_dense_model_is_unchanged_by_the_switch() -> None:
    kw = dict(model="llama3-8b", gpu="h100", num_gpus=16, tp=2, pp=2, global_batch_size=64,
              recompute="selective")
    a = simulate_run(build_run(**kw))  # type: ignore[arg-type]
    b = simulate_run(build_run(**kw, ep_comm_overlap=True))  # type: ignore[arg-type]
    assert a.step_time_s == b.step_time_s


def test_the_search_estimate_agrees_with_the_engine_under_overlap() -> None:
    # as tests/test_search.py's agreement test (median 1 %, max 5 %), with the switch pinned
    run = build_run(**{**MOE, "ep_comm_overlap": True})  # type: ignore[arg-type]
    space = SearchSpace(tp=[1, 2], pp=[1, 2], ep=[8, 32], vpp=[1], micro_batch_size=[1],
                        recompute=["full"], zero_stage=[1], sequence_parallel=[True])
    en = enumerate_plans(run, space)
    est = Estimator(en.base)
    errors = []
    for point in en.plans:
        e = est.estimate(point)
        r = simulate_run(plan_run(en.base, point))
        assert e.feasible == r.feasible
        assert plan_run(en.base, point).parallel.ep_comm_overlap
        if r.feasible:
            errors.append(abs(e.step_time_s - r.step_time_s) / r.step_time_s)
    assert len(errors) >= 4
    assert statistics.median(errors) < 0.01 and max(errors) < 0.05


ROW = {"case_id": "E1", "source": "test", "model": "Qwen3-30B-A3B", "gpu_type": "H100",
       "num_gpus": "64", "tp": "1", "pp": "2", "ep": "32", "global_batch_size": "256",
       "micro_batch_size": "1", "activation_recompute": "full", "tokens_per_s_per_gpu": "1000"}


@pytest.mark.parametrize(("notes", "overlap"), [
    ("DualPipe; all-to-all fully overlapped with computation", True),
    ("moe_a2a_overlap=True", True),
    ("moe_a2a_overlap=False", False),
    ("dropless, force-balanced", False),
])
def test_a_row_that_says_so_overlaps_its_all_to_alls(notes: str, overlap: bool) -> None:
    case = map_row({**ROW, "notes": notes})
    runs = [r for group in case.candidates for r in group]
    assert runs and all(r.parallel.ep_comm_overlap is overlap for r in runs)
    said = any("all-to-alls overlapped" in n for n in case.assumptions)
    assert said is overlap


def test_a_dense_row_ignores_the_phrase() -> None:
    row = {**ROW, "model": "Llama-3-8B", "ep": "1", "num_gpus": "16", "tp": "2", "pp": "2",
           "global_batch_size": "64", "notes": "DualPipe"}
    case = map_row(row)
    assert all(not r.parallel.ep_comm_overlap for g in case.candidates for r in g)
