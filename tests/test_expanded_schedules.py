"""The per-rank engine runs the step program (issue 11): any schedule the program knows runs
rank by rank. ZB-H1 against the symmetric engine and against a hand-computed straggler
timeline; stragglers, link faults and contention on a zero-bubble pipeline."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import fast_network, tiny_model, tiny_run

from codesign.api import build_models, build_run
from codesign.cli import main
from codesign.engine.expanded import Perturbations
from codesign.engine.expanded import simulate_expanded as engine_expanded
from codesign.engine.training import pipeline_send_seconds, simulate_step, step_shape, time_chunks
from codesign.network.faults import parse_degraded, parse_failed

ZB_HEALTHY = [
    dict(model="gpt3-175b", gpu="h100", num_gpus=256, tp=8, pp=8, global_batch_size=64,
         sequence_parallel=True),
    dict(model="llama3-8b", gpu="h100", num_gpus=32, tp=2, pp=4, global_batch_size=32,
         zero_stage=1, overlap_grad_reduce=True, overlap_param_gather=True),
    # ZeRO-3: the W passes carry the gradient reduce-scatters
    dict(model="llama3-8b", gpu="h100", num_gpus=32, tp=2, pp=2, global_batch_size=32,
         zero_stage=3),
    # scatter/gathered, blocking sends, buckets after the last pass
    dict(model="llama3-8b", gpu="a100", num_gpus=32, tp=4, pp=4, global_batch_size=32,
         zero_stage=0, overlap_grad_reduce=False, pipeline_scatter_gather=True,
         overlap_p2p=False),
]


@pytest.mark.parametrize("case", ZB_HEALTHY, ids=lambda c: f"{c['model']}-{c['num_gpus']}")
def test_zb_h1_expanded_equals_symmetric_on_a_healthy_cluster(case: dict[str, object]) -> None:
    run = build_run(schedule="zb-h1", **case)  # type: ignore[arg-type]
    graph, compute, network = build_models(run)
    sym = simulate_step(graph, compute, network, exact=True)
    exp = engine_expanded(graph, [compute], network)
    assert exp.step_time_s == sym.step_time_s
    assert exp.breakdown_s == sym.breakdown_s
    assert exp.critical_stage == sym.critical_stage
    assert exp.replica_classes == 1 and exp.perturbed_clusters == 0


def test_zb_h1_straggler_on_the_last_stage_as_computed_by_hand() -> None:
    """pp = 2, dp = tp = 1, ZB-H1, m micro-batches; rank 1 (stage 1) at half speed.

    Orders (:func:`codesign.workload.schedules.zb_h1`): stage 0 runs F0 F1 B0 W0 F2 B1 W1 ...
    B(m-1) W(m-1); stage 1 runs F0 B0 F1 B1 W0 F2 B2 W1 ... F(m-1) B(m-1) W(m-2) W(m-1). Stage
    1's passes take twice their healthy time (F1', B1', W1' below are healthy), so once
    forward 0 has arrived (F0 + send) stage 1 never idles: stage 0 returns each forward
    within ``2·send + B0 + W0 + F0``, less than the stage-1 work between two of them
    (``2·(W1 + F1 + B1 + W1)``; asserted below). Hence
      step = F0 + send + 2·m·(F1 + B1 + W1) + 2·OPT1,
    and stage 0's last backward waits for stage 1's B(m-1), which ends 2·2·W1 before stage
    1's passes do: stage 0 finishes at that end + send + B0 + W0 + OPT0.
    """
    run = tiny_run(num_gpus=2, pp=2, schedule="zb-h1", global_batch_size=16, zero_stage=0)
    run = run.model_copy(update={"topology": fast_network(bandwidth_GBps=50, latency_us=5)})
    graph, compute, network = build_models(run)
    m = graph.num_microbatches
    t = {key: x.compute_time for key, x in time_chunks(graph, compute, network).items()}
    assert all(not x.tail for x in time_chunks(graph, compute, network).values())
    f0, b0, w0 = t[(0, "F")], t[(0, "B")], t[(0, "W")]
    f1, b1, w1 = t[(1, "F")], t[(1, "B")], t[(1, "W")]
    send, _ = pipeline_send_seconds(network, step_shape(graph, network).message)
    sym = simulate_step(graph, compute, network, exact=True)
    opt0, opt1 = (x.duration for x in sym.timeline.tasks if x.name == "optimizer")
    assert 2 * send + b0 + w0 + f0 < 2 * (w1 + f1 + b1 + w1)  # stage 1 never waits

    res = engine_expanded(graph, [compute], network, Perturbations(stragglers=((1, 0.5),)))
    passes_end = f0 + send + 2 * m * (f1 + b1 + w1)
    assert res.step_time_s == pytest.approx(passes_end + 2 * opt1, rel=1e-12)
    assert res.critical_stage == 1 and res.slowest_rank == 1
    assert res.rank_finish_s[0] == pytest.approx(
        passes_end - 4 * w1 + send + b0 + w0 + opt0, rel=1e-12)
    assert res.rank_busy_s[0] == pytest.approx(m * (f0 + b0 + w0) + opt0, rel=1e-12)
    assert res.rank_busy_s[1] == pytest.approx(2 * (m * (f1 + b1 + w1) + opt1), rel=1e-12)
    assert sym.step_time_s < res.step_time_s


def test_zb_h1_with_stragglers_link_faults_and_contention() -> None:
    run = build_run(model="llama3-8b", gpu="h100", num_gpus=32, tp=2, pp=4,
                    global_batch_size=32, zero_stage=1, overlap_grad_reduce=True,
                    schedule="zb-h1")
    graph, compute, network = build_models(run)
    sym = simulate_step(graph, compute, network, exact=True).step_time_s
    pert = Perturbations(stragglers=((5, 0.6),), link_faults=(parse_failed("nic:3"),))
    faulted = engine_expanded(graph, [compute], network, pert)
    contended = engine_expanded(graph, [compute], network, pert, contention=True)
    assert sym < faulted.step_time_s <= contended.step_time_s * (1 + 1e-12)
    assert faulted.replica_classes == 3 and faulted.perturbed_clusters == 1
    assert faulted.slowed and faulted.slowest_rank == 5


def test_cli_expand_runs_zb_h1(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["simulate", "--model", "llama3-8b", "--gpus", "64", "--tp", "4", "--pp", "4",
            "--global-batch", "64", "--schedule", "zb-h1", "--format", "json"]
    assert main([*args, "--straggler", "9:0.5", "--failed-link", "nic:3", "--contention"]) == 0
    e = json.loads(capsys.readouterr().out)["expanded"]
    assert e["slowest_rank"] == 9 and e["straggler_cost_s"] > 0


# --- identical micro-batches ------------------------------------------------------------------

EXTEND_CASES = [
    # a straggler on the slowest stage (the LM head's) of one replica: the two replica
    # classes drift apart by a different amount per period until the gradient barriers
    (dict(schedule="1f1b"), ((13, 0.5),), (), False),
    (dict(schedule="interleaved", vpp=2, zero_stage=0, overlap_grad_reduce=False),
     ((13, 0.5),), (), False),
    (dict(schedule="zb-h1"), ((13, 0.5), (2, 0.7)), ("port:5:0.5",), False),
    (dict(schedule="gpipe"), ((13, 0.5),), (), False),
    # the same straggler in both replicas (one class), with contention
    (dict(schedule="zb-h1"), ((12, 0.5), (14, 0.5)), (), True),
]


def _extend_run(plan: dict[str, object], gbs: int):  # type: ignore[no-untyped-def]
    plan = {"zero_stage": 1, "overlap_grad_reduce": True, **plan}
    run = tiny_run(num_gpus=16, tp=2, pp=4, global_batch_size=gbs,
                   model=tiny_model(num_layers=8, vocab_size=32000), **plan)
    run = run.model_copy(update={"topology": fast_network(bandwidth_GBps=50, latency_us=5)})
    return build_models(run)


@pytest.mark.parametrize(("plan", "stragglers", "degraded", "contention"), EXTEND_CASES,
                         ids=lambda x: x.get("schedule") if isinstance(x, dict) else None)
def test_expanded_extended_steady_state_equals_exact_simulation(
        plan: dict[str, object], stragglers: tuple[tuple[int, float], ...],
        degraded: tuple[str, ...], contention: bool) -> None:
    """96 micro-batches, extended from two short runs, equal the step run micro-batch by
    micro-batch: time, breakdown, critical stage, per-rank finish and busy times."""
    graph, compute, network = _extend_run(plan, 96 * 2)
    pert = Perturbations(stragglers=stragglers,
                         link_faults=tuple(parse_degraded(f) for f in degraded))
    fast = engine_expanded(graph, [compute], network, pert, contention=contention)
    exact = engine_expanded(graph, [compute], network, pert, contention=contention,
                            exact=True)
    assert fast.num_microbatches == exact.num_microbatches == 96
    assert fast.extension == "periodic" and fast.simulated_microbatches < 40
    assert exact.extension == "exact" and exact.simulated_microbatches == 96
    assert fast.replica_classes == exact.replica_classes
    assert fast.step_time_s == pytest.approx(exact.step_time_s, rel=1e-9)
    assert fast.critical_stage == exact.critical_stage
    assert set(fast.breakdown_s) <= set(exact.breakdown_s)
    for cat, t in exact.breakdown_s.items():
        assert fast.breakdown_s.get(cat, 0.0) == pytest.approx(t, rel=1e-9, abs=1e-12), cat
    scale = exact.step_time_s
    assert np.abs(fast.rank_finish_s - exact.rank_finish_s).max() <= 1e-9 * scale
    assert np.abs(fast.rank_busy_s - exact.rank_busy_s).max() <= 1e-9 * scale
    assert fast.slowed == exact.slowed


def test_contended_classes_drifting_apart_are_run_in_full() -> None:
    # under contention only a common shift of every class is extended (the fluid executor
    # is not max-plus): a straggler in one replica runs every micro-batch
    graph, compute, network = _extend_run(dict(schedule="1f1b"), 24 * 2)
    pert = Perturbations(stragglers=((13, 0.5),))
    res = engine_expanded(graph, [compute], network, pert, contention=True)
    assert res.extension == "exact" and res.simulated_microbatches == 24
    assert res.replica_classes == 2


def test_expanded_cost_does_not_grow_with_the_micro_batch_count() -> None:
    counts = []
    for gbs in (64, 65536):
        graph, compute, network = _extend_run(dict(schedule="1f1b"), gbs)
        res = engine_expanded(graph, [compute], network,
                              Perturbations(stragglers=((13, 0.5),)))
        assert res.num_microbatches == gbs // 2 and res.extension == "periodic"
        counts.append(res.tasks)
    assert counts[1] == counts[0]


def test_interleaved_wrap_around_sends_see_link_faults() -> None:
    """Interleaved schedules send from the last stage back to stage 0 (forward, chunk c to
    chunk c + 1) and from stage 0 to the last stage (backward). A degraded NIC of a stage-0
    rank slows those sends as it slows stage 0's sends to stage 1 (both cross that NIC); they
    were priced as healthy before."""
    from codesign.api import build_models, build_run
    from codesign.engine.expanded.clusters import price_clusters
    from codesign.engine.expanded.values import Perturbations
    from codesign.network.faults import parse_degraded

    run = build_run(model="gpt3-175b", gpu="h100", num_gpus=64, tp=8, pp=4, vpp=2,
                    global_batch_size=16)
    graph, compute, network = build_models(run)
    healthy = price_clusters(graph, [compute], network, Perturbations(), False)
    cl = price_clusters(graph, [compute], network,
                        Perturbations(link_faults=(parse_degraded("nic:0:0.25"),)), False)
    slow = next(row for row in cl.units if row[0].send_fwd > healthy.units[0][0].send_fwd)
    last = len(slow) - 1
    assert slow[last].send_fwd == pytest.approx(slow[0].send_fwd)  # last -> 0 crosses it
    assert slow[0].send_bwd == pytest.approx(slow[0].send_fwd)  # 0 -> last crosses it
    assert slow[last].send_fwd > healthy.units[0][last].send_fwd
