"""The per-rank engine runs the step program (issue 11): any schedule the program knows runs
rank by rank. ZB-H1 against the symmetric engine and against a hand-computed straggler
timeline; stragglers, link faults and contention on a zero-bubble pipeline."""

from __future__ import annotations

import json

import pytest
from conftest import fast_network, tiny_run

from codesign.api import build_models, build_run
from codesign.cli import main
from codesign.engine.expanded import Perturbations
from codesign.engine.expanded import simulate_expanded as engine_expanded
from codesign.engine.training import pipeline_send_seconds, simulate_step, step_shape, time_chunks
from codesign.network.faults import parse_failed

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
