"""Per-rank (expanded) simulation: max-min fair flows, failed and degraded links, stragglers,
heterogeneous clusters, contention, and equality with the symmetric engine when healthy."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from conftest import ideal_gpu, tiny_model

from codesign.api import build_models, build_run, simulate_detailed, simulate_expanded
from codesign.cli import main
from codesign.engine.executor import Task, execute
from codesign.engine.expanded import (
    Flow,
    Perturbations,
    execute_exact,
    execute_fluid,
)
from codesign.engine.expanded import simulate_expanded as engine_expanded
from codesign.engine.training import simulate_step
from codesign.errors import SpecError
from codesign.hardware.compute import ComputeModel
from codesign.network.collectives import ring_all_reduce
from codesign.network.faults import ScaledCosts, parse_degraded, parse_failed
from codesign.network.flows import (
    LinkFault,
    LinkGraph,
    collective_entities,
    group_instances,
    max_min_rates,
    tier_factors,
)
from codesign.network.model import NetworkModel
from codesign.specs import FullFlatTopology, ParallelismSpec, TrainingRun
from codesign.specs.topology import ScaleOutSpec, ScaleUpSpec, TwoTierTopology
from codesign.workload.training import build_training_graph

NIC_BW = 100e9 / 8  # bytes/s of a 100 Gb/s NIC
OUT_ALPHA = 2e-6 + 0.5e-6 * 3  # NIC latency + hop latency × (2·2 - 1)


def two_tier(domain: int = 2, nic_gbps: float = 100.0, **out: object) -> TwoTierTopology:
    """Ideal two-tier network: efficiency 1 everywhere, round numbers."""
    return TwoTierTopology(
        name="tt", scale_up=ScaleUpSpec(domain_size=domain, bandwidth_GBps=400.0, latency_us=1.0),
        scale_out=ScaleOutSpec.model_validate({"nic_bandwidth_Gbps": nic_gbps, "latency_us": 2.0,
                                               **out}))


def make_run(num_gpus: int, topology: TwoTierTopology | FullFlatTopology | None = None,
             gpu: object = None, **plan: object) -> TrainingRun:
    return TrainingRun(model=tiny_model(), gpu=gpu or ideal_gpu(),
                       topology=topology or FullFlatTopology(name="flat", bandwidth_GBps=100.0,
                                                             latency_us=1.0),
                       parallel=ParallelismSpec.model_validate(plan), num_gpus=num_gpus)


# --- max-min fairness ------------------------------------------------------------------------


def test_max_min_three_flows_on_two_links() -> None:
    # link A (10) carries flows 1 and 2, link B (6) flows 2 and 3. Filling: both links'
    # flows rise together; B fills first at 3 each (2 × 3 = 6): flows 2 and 3 freeze at 3;
    # flow 1 alone on A takes the remaining 10 - 3 = 7.
    rates = max_min_rates([{"A": 1}, {"A": 1, "B": 1}, {"B": 1}], {"A": 10.0, "B": 6.0})
    assert rates == pytest.approx([7.0, 3.0, 3.0], rel=1e-12)


def test_max_min_weights_and_demands() -> None:
    # a coflow with 2 flows on L (weight 2) and a single flow share L (capacity 9): the level
    # rises to r with 2r + r = 9 -> 3 each; with the single flow capped at 1, the coflow takes
    # (9 - 1) / 2 = 4
    assert max_min_rates([{"L": 2}, {"L": 1}], {"L": 9.0}) == pytest.approx([3.0, 3.0])
    assert max_min_rates([{"L": 2}, {"L": 1}], {"L": 9.0}, [np.inf, 1.0]) == pytest.approx(
        [4.0, 1.0])
    # nothing on any link and no demand: unbounded
    assert max_min_rates([{}], {}) == [np.inf]


# --- link graph, rerouting -------------------------------------------------------------------


def test_routes_of_a_two_tier_fabric() -> None:
    g = LinkGraph(two_tier(domain=2), 4)
    assert g.route(0, 1) == [("up_tx", 0), ("up_rx", 1)]
    assert g.route(0, 2) == [("nic_tx", 0), ("leaf_up", 0), ("leaf_down", 1), ("nic_rx", 2)]
    assert g.capacity(("nic_tx", 0)) == NIC_BW
    assert g.capacity(("leaf_up", 0)) == 2 * NIC_BW
    failed = LinkGraph(two_tier(domain=2), 4, [LinkFault("nic", 0, 0.0)])
    # rank 0's scale-out traffic crosses the scale-up port to rank 1 and leaves by its NIC
    assert failed.route(0, 2) == [("up_tx", 0), ("up_rx", 1), ("nic_tx", 1), ("leaf_up", 0),
                                  ("leaf_down", 1), ("nic_rx", 2)]
    assert failed.route(2, 0)[-3:] == [("nic_rx", 1), ("up_tx", 1), ("up_rx", 0)]
    no_up = LinkGraph(two_tier(domain=2), 4, [LinkFault("scaleup", 1, 0.0)])
    assert no_up.route(0, 1) == [("nic_tx", 0), ("nic_rx", 1)]


def test_failed_nic_halves_both_groups_that_now_share_a_nic() -> None:
    topo = two_tier(domain=2)
    healthy = LinkGraph(topo, 4)
    # data-parallel rings {0, 2} and {1, 3} across the two domains, running together
    insts = [collective_entities("all_reduce", "ring", [0, 2], 2),
             collective_entities("all_reduce", "ring", [1, 3], 2)]
    failed = LinkGraph(topo, 4, [parse_failed("nic:0")])
    # both rings now cross rank 1's NIC: max-min gives each half of it
    assert tier_factors(healthy, failed, insts) == [{"up": 1.0, "out": 0.5},
                                                    {"up": 1.0, "out": 0.5}]
    degraded = LinkGraph(topo, 4, [parse_degraded("nic:2:0.25")])
    assert tier_factors(healthy, degraded, insts) == [{"up": 1.0, "out": 0.25},
                                                      {"up": 1.0, "out": 1.0}]
    # a failed leaf uplink leaves (domain - 1) / domain of the leaf's uplinks
    leaf = LinkGraph(topo, 4, [parse_failed("leaf:1")])
    assert tier_factors(healthy, leaf, insts) == [{"up": 1.0, "out": 0.5},
                                                  {"up": 1.0, "out": 0.5}]


def test_scaled_costs_follow_the_alpha_beta_model() -> None:
    run = make_run(4, two_tier(domain=2), tp=2, dp=2, global_batch_size=4)
    net = NetworkModel.from_parallelism(run.topology, run.parallel, dp=run.dp)
    costs = ScaledCosts(net)
    size = 8e6
    assert costs.cost("all_reduce", "dp", size) == net.collective("all_reduce", "dp", size).time_s
    # dp groups: one rank per domain, n = 2: ring all-reduce on the NIC at half bandwidth
    assert costs.cost("all_reduce", "dp", size, 1.0, 0.5) == pytest.approx(
        ring_all_reduce(size, 2, NIC_BW * 0.5, OUT_ALPHA), rel=1e-12)


def test_group_instances_enumerate_the_layout() -> None:
    run = make_run(8, two_tier(domain=2), tp=2, pp=2, dp=2, global_batch_size=4)
    net = NetworkModel.from_parallelism(run.topology, run.parallel, dp=run.dp)
    # layout tp (stride 1), dp (stride 2), pp (stride 4)
    assert group_instances(net.layout, "dp", {"pp": 1}).tolist() == [[4, 6], [5, 7]]
    assert group_instances(net.layout, "tp").tolist() == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_bad_link_specs_name_the_problem() -> None:
    with pytest.raises(SpecError, match="KIND:INDEX:FACTOR"):
        parse_degraded("nic:3")
    with pytest.raises(SpecError, match="one of nic, scaleup"):
        parse_failed("spine:1")
    with pytest.raises(SpecError, match="out of range"):
        LinkGraph(two_tier(domain=2), 4, [parse_failed("nic:4")])
    with pytest.raises(SpecError, match="no oversubscribed pods"):
        LinkGraph(two_tier(domain=2), 4, [parse_degraded("pod:0:0.5")])


# --- executors -------------------------------------------------------------------------------


def test_exact_executor_matches_simpy_on_a_pipeline() -> None:
    run = build_run(model="gpt3-175b", gpu="h100", num_gpus=256, tp=8, pp=8, vpp=3,
                    global_batch_size=64, sequence_parallel=True, zero_stage=1,
                    overlap_grad_reduce=True)
    graph, compute, network = build_models(run)
    tl = simulate_step(graph, compute, network, exact=True).timeline
    again = execute_exact(tl.tasks)
    ref = execute(tl.tasks)
    assert again.start == ref.start and again.end == ref.end
    assert again.binding == ref.binding and again.stream_prev == ref.stream_prev


def test_fluid_transfers_share_a_link() -> None:
    tasks = [Task(0, "a", 2.0), Task(1, "b", 4.0), Task(2, "c", 1.0, deps=(0, 1))]
    flows = {0: Flow(0.0, 2.0, (("L", 1.0),)), 1: Flow(0.5, 4.0, (("L", 1.0),))}
    tl = execute_fluid(tasks, flows)
    # both at half speed until task 0 has moved its 2 s of data (t = 4); task 1 has then
    # moved 2 of its 4 s and finishes the rest alone (t = 6), then its latency (t = 6.5)
    assert tl.end[0] == pytest.approx(4.0)
    assert tl.end[1] == pytest.approx(6.5)
    assert (tl.start[2], tl.end[2]) == pytest.approx((6.5, 7.5))
    # links loaded to half each do not slow each other; a background load of 0.75 on L
    # leaves a max-min fair half to a transfer (both want more than half)
    half = {0: Flow(0.0, 2.0, (("L", 0.5),)), 1: Flow(0.0, 4.0, (("L", 0.5),))}
    assert execute_fluid(tasks[:2], half).end == pytest.approx((2.0, 4.0))
    bg = [Task(0, "x", 10.0), Task(1, "y", 1.0)]
    tl = execute_fluid(bg, {1: Flow(0.0, 1.0, (("L", 1.0),))}, {0: (("L", 0.75),)})
    assert tl.end[1] == pytest.approx(2.0)


# --- expanded == symmetric -------------------------------------------------------------------

HEALTHY = [
    dict(model="gpt3-175b", gpu="h100", num_gpus=1024, tp=8, pp=8, vpp=3,
         global_batch_size=256, sequence_parallel=True),
    dict(model="gpt3-175b", gpu="h100", num_gpus=2048, tp=8, pp=8, vpp=3,
         global_batch_size=256, sequence_parallel=True, zero_stage=1,
         overlap_grad_reduce=True, overlap_param_gather=True),
    dict(model="mixtral-8x7b", gpu="h100", num_gpus=256, tp=2, pp=4, ep=8,
         global_batch_size=128),
    dict(model="llama3-70b", gpu="h100", num_gpus=256, tp=8, pp=4, cp=2,
         global_batch_size=64, sequence_parallel=True, zero_stage=1),
    dict(model="llama3-70b", gpu="h100", num_gpus=64, tp=8, pp=1, global_batch_size=64,
         zero_stage=3, recompute="full"),
    dict(model="llama3-8b", gpu="h100", topology="fullflat-h100", num_gpus=64, tp=4, pp=2,
         global_batch_size=64, placement_order=("tp", "dp", "pp", "cp", "ep")),
    dict(model="llama3-8b", gpu="h100", num_gpus=16, tp=2, pp=1, global_batch_size=16,
         zero_stage=1, overlap_grad_reduce=True, overlap_param_gather=True),
    # Megatron-LM 2021-22 pipeline: scatter/gathered, blocking sends, interleaved
    dict(model="gpt3-175b", gpu="a100", num_gpus=512, tp=8, pp=8, vpp=3,
         global_batch_size=128, zero_stage=0, recompute="full", flash_attention=False,
         overlap_grad_reduce=False, pipeline_scatter_gather=True, overlap_p2p=False),
]


@pytest.mark.parametrize("case", HEALTHY, ids=lambda c: f"{c['model']}-{c['num_gpus']}")
def test_expanded_equals_symmetric_on_a_healthy_cluster(case: dict[str, object]) -> None:
    run = build_run(**case)  # type: ignore[arg-type]
    graph, compute, network = build_models(run)
    sym = simulate_step(graph, compute, network, exact=True)
    exp = engine_expanded(graph, [compute], network, exact=True)
    assert exp.step_time_s == sym.step_time_s
    assert exp.breakdown_s == sym.breakdown_s
    assert exp.critical_stage == sym.critical_stage
    assert exp.replica_classes == 1 and exp.perturbed_clusters == 0
    # a straggler at full speed and a link at full bandwidth are no perturbation either
    same = engine_expanded(graph, [compute], network, Perturbations(
        stragglers=((3, 1.0),), link_faults=(LinkFault("nic" if "flat" not in str(
            case.get("topology", "")) else "port", 5, 1.0),)), exact=True)
    assert same.step_time_s == sym.step_time_s
    # extending a periodic steady state (the default) agrees to rounding
    fast = engine_expanded(graph, [compute], network)
    assert fast.step_time_s == pytest.approx(sym.step_time_s, rel=1e-12)


# --- stragglers ------------------------------------------------------------------------------


def test_straggler_slows_a_synchronous_step_as_computed_by_hand() -> None:
    # pp = 1, dp = 2, tp = 1, no overlap: each rank runs F0 B0 F1 B1 (no collective inside a
    # chunk), then the per-layer gradient all-reduces one after the other, then the optimizer.
    # Rank 1 at half speed doubles its kernels; the all-reduce waits for it (barrier), so
    #   step = n_mb·(F + B)/0.5 + Σ_buckets AR(4·params) + OPT/0.5
    run = make_run(2, dp=2, global_batch_size=4, micro_batch_size=1, zero_stage=0,
                   overlap_grad_reduce=False)
    graph = build_training_graph(run)
    compute = ComputeModel(run.gpu)
    network = NetworkModel.from_parallelism(run.topology, run.parallel, dp=run.dp)
    (chunk,) = graph.chunks
    assert all(op.kind != "comm" for op in (*chunk.forward, *chunk.backward))
    f = sum(compute.time(op) for op in chunk.forward)
    b = sum(compute.time(op) for op in chunk.backward)
    bw, alpha = 100e9, 1e-6  # FullFlat, efficiency 1: ring = tree for two ranks
    ar = sum(ring_all_reduce(4.0 * (dense + expert), 2, bw, alpha)
             for _, dense, expert in chunk.layer_params)
    opt = (chunk.dense_params + chunk.expert_params) * 30.0 / 1e12  # Adam bytes / HBM B/s
    n_mb = graph.num_microbatches
    assert n_mb == 2
    symmetric = n_mb * (f + b) + ar + opt
    exact = simulate_step(graph, compute, network, exact=True)
    assert exact.step_time_s == pytest.approx(symmetric, rel=1e-12)
    res = engine_expanded(graph, [compute], network, Perturbations(stragglers=((1, 0.5),)))
    expected = n_mb * (f + b) / 0.5 + ar + opt / 0.5
    assert res.step_time_s == pytest.approx(expected, rel=1e-12)
    assert res.slowest_rank == 1
    assert res.rank_busy_s[1] == pytest.approx(2 * res.rank_busy_s[0], rel=1e-12)
    # both ranks finish their optimizer after the same all-reduce: the healthy one earlier
    assert res.rank_finish_s[0] == pytest.approx(expected - opt, rel=1e-12)


def test_stragglers_in_several_replicas_with_zero1_overlap() -> None:
    # several replica classes meet at every gradient bucket and parameter gather (barriers);
    # the step is the slowest replica's, and two identical stragglers form one class
    run = build_run(model="llama3-8b", gpu="h100", num_gpus=32, tp=2, pp=2,
                    global_batch_size=32, zero_stage=1, overlap_grad_reduce=True,
                    overlap_param_gather=True)
    graph, compute, network = build_models(run)
    sym = simulate_step(graph, compute, network, exact=True).step_time_s
    one = engine_expanded(graph, [compute], network, Perturbations(stragglers=((2, 0.8),)))
    two = engine_expanded(graph, [compute], network,
                          Perturbations(stragglers=((2, 0.8), (4, 0.8), (7, 0.9))))
    assert sym < one.step_time_s <= two.step_time_s
    # ranks 2 and 4: same stage, same place in their TP pair; rank 7 is another class
    assert one.replica_classes == 2 and two.replica_classes == 3
    assert two.slowest_rank in (2, 4)


def test_straggler_in_a_tensor_parallel_group_paces_the_group() -> None:
    # blocking TP all-reduces (no SP, no overlap): at every collective the healthy rank waits
    # for the half-speed one, so the step equals a symmetric run on a GPU half as fast
    plan: dict[str, Any] = dict(tp=2, dp=1, global_batch_size=2, zero_stage=0)
    run = make_run(2, **plan)
    graph, compute, network = build_models(run)
    res = engine_expanded(graph, [compute], network, Perturbations(stragglers=((0, 0.5),)))
    slow = make_run(2, gpu=ideal_gpu(peak_tflops={"bf16": 50.0, "fp8": 100.0},
                                     hbm_bandwidth_TBps=0.5), **plan)
    sg, sc, sn = build_models(slow)
    sym = simulate_step(sg, sc, sn, exact=True).step_time_s
    assert res.step_time_s == pytest.approx(sym, rel=1e-12)
    assert res.perturbed_clusters == 1


# --- heterogeneous cluster -------------------------------------------------------------------


def test_mix_of_every_rank_equals_the_other_gpu() -> None:
    base = dict(model="llama3-8b", topology="dgx-h100", num_gpus=64, tp=4, pp=2,
                global_batch_size=64)
    run = build_run(gpu="h100", **base)  # type: ignore[arg-type]
    all_a100 = simulate_expanded(run, mix=("a100", 1.0))
    other = simulate_detailed(build_run(gpu="a100", **base))  # type: ignore[arg-type]
    assert all_a100.report.step_time_s == pytest.approx(other.report.step_time_s, rel=1e-12)
    assert all_a100.expanded["mix"]["ranks"] == [0, 64]
    assert all_a100.report.mfu == pytest.approx(other.report.mfu, rel=1e-12)


def test_half_mixed_cluster_runs_at_the_slower_gpus_pace() -> None:
    base = dict(model="llama3-8b", topology="dgx-h100", num_gpus=64, tp=4, pp=2,
                global_batch_size=64)
    h100 = simulate_detailed(build_run(gpu="h100", **base)).report  # type: ignore[arg-type]
    a100 = simulate_detailed(build_run(gpu="a100", **base)).report  # type: ignore[arg-type]
    mixed = simulate_expanded(build_run(gpu="h100", **base),  # type: ignore[arg-type]
                              mix=("a100", (0, 16)))
    assert h100.step_time_s is not None and a100.step_time_s is not None
    t = mixed.report.step_time_s
    assert t is not None and h100.step_time_s < t <= a100.step_time_s * (1 + 1e-9)
    e = mixed.expanded
    assert e["slowest_rank"] < 16  # an A100 rank
    assert e["straggler_cost_s"] == pytest.approx(t - h100.step_time_s, rel=1e-12)


def test_mixing_in_a_gpu_too_small_is_infeasible() -> None:
    run = build_run(model="llama3-8b", gpu="h200", topology="dgx-h100", num_gpus=8, tp=1,
                    pp=1, global_batch_size=8, micro_batch_size=1)
    small = ideal_gpu(hbm_capacity_GB=10.0)
    sim = simulate_expanded(run, mix=(small, 0.5))
    assert not sim.report.feasible and "mixed-in ideal" in sim.report.reason


# --- failed and degraded links in the step ---------------------------------------------------


def _dp_run() -> TrainingRun:
    # tp = 2 inside each 2-GPU domain, dp = 2 across domains: dp groups {0, 2} and {1, 3}
    return make_run(4, two_tier(domain=2), tp=2, dp=2, global_batch_size=4, zero_stage=0,
                    overlap_grad_reduce=False)


def test_failed_nic_slows_the_step_by_the_rerouted_all_reduces() -> None:
    run = _dp_run()
    graph, compute, network = build_models(run)
    sym = simulate_step(graph, compute, network, exact=True).step_time_s
    (chunk,) = graph.chunks
    sizes = [4.0 * (dense + expert) for _, dense, expert in chunk.layer_params]
    # both dp rings share rank 1's NIC: ring all-reduce of two ranks at half the NIC rate;
    # nothing overlaps the blocking all-reduces, so the step grows by their difference
    extra = sum(ring_all_reduce(s, 2, NIC_BW / 2, OUT_ALPHA) - ring_all_reduce(
        s, 2, NIC_BW, OUT_ALPHA) for s in sizes)
    failed = engine_expanded(graph, [compute], network,
                             Perturbations(link_faults=(parse_failed("nic:0"),)))
    assert failed.step_time_s == pytest.approx(sym + extra, rel=1e-12)
    assert ("dp", 0, "scale_out", 0.5) in failed.slowed
    # a NIC at a quarter of its rate slows one ring; the barrier waits for it
    extra4 = sum(ring_all_reduce(s, 2, NIC_BW / 4, OUT_ALPHA) - ring_all_reduce(
        s, 2, NIC_BW, OUT_ALPHA) for s in sizes)
    slow = engine_expanded(graph, [compute], network,
                           Perturbations(link_faults=(parse_degraded("nic:2:0.25"),)))
    assert slow.step_time_s == pytest.approx(sym + extra4, rel=1e-12)


def test_failed_nic_in_a_later_stage_slows_the_pipeline_sends() -> None:
    # stage 0 = ranks {0, 1}, stage 1 = {2, 3} (one domain each): with rank 2's NIC down,
    # both sends into stage 1 arrive through rank 3's NIC and get half of it each
    run = make_run(4, two_tier(domain=2), tp=2, pp=2, global_batch_size=4, zero_stage=0)
    graph, compute, network = build_models(run)
    sym = simulate_step(graph, compute, network, exact=True).step_time_s
    res = engine_expanded(graph, [compute], network,
                          Perturbations(link_faults=(parse_failed("nic:2"),)))
    # the TP all-reduces stay on the scale-up ports: only the sends are slowed
    assert res.slowed == (("pp", 0, "scale_out", 0.5),)
    assert res.step_time_s > sym


def test_api_reports_costs_against_the_symmetric_run() -> None:
    run = _dp_run()
    sim = simulate_expanded(run, stragglers=[(3, 0.5)], failed_links=["nic:0"])
    e = sim.expanded
    assert e["symmetric_step_time_s"] < e["step_time_s"]
    assert e["step_time_s"] == pytest.approx(
        e["symmetric_step_time_s"] + e["straggler_cost_s"] + e["link_fault_cost_s"]
        + e["contention_cost_s"], rel=1e-12)
    assert e["straggler_cost_s"] > 0 and e["link_fault_cost_s"] > 0
    assert e["slowest_rank"] == 3 and e["contention_cost_s"] == 0.0
    assert sim.report.step_time_s == e["step_time_s"]
    assert sum(sim.report.breakdown_s.values()) == pytest.approx(e["step_time_s"], rel=1e-9)
    with pytest.raises(SpecError, match="straggler rank"):
        simulate_expanded(run, stragglers=[(4, 0.5)])


# --- contention ------------------------------------------------------------------------------


def test_contention_changes_nothing_when_transfers_do_not_overlap() -> None:
    run = _dp_run()
    sim = simulate_expanded(run, contention=True)
    assert sim.expanded["step_time_s"] == pytest.approx(
        sim.expanded["symmetric_step_time_s"], rel=1e-9)


def test_contention_slows_overlapping_gradient_reduction_and_pipeline_sends() -> None:
    # pp = 2 across domains: pipeline sends and overlapped gradient buckets share the NICs
    run = make_run(8, two_tier(domain=2, nic_gbps=10.0), tp=2, pp=2, dp=2,
                   global_batch_size=16, overlap_grad_reduce=True, zero_stage=0)
    sim = simulate_expanded(run, contention=True)
    e = sim.expanded
    assert e["contention_cost_s"] > 0
    # bounded by serializing every pipeline send behind the gradient traffic
    graph, compute, network = build_models(run)
    tl = simulate_step(graph, compute, network, exact=True).timeline
    comm = sum(t.duration for t in tl.tasks if t.category in ("comm:pp", "comm:dp"))
    assert e["contention_cost_s"] < comm


# --- command line ----------------------------------------------------------------------------


def test_cli_expand_json(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["simulate", "--model", "llama3-8b", "--gpus", "64", "--tp", "4", "--pp", "2",
            "--global-batch", "64", "--format", "json"]
    assert main([*args, "--expand"]) == 0
    out = json.loads(capsys.readouterr().out)
    # the symmetric step extends a periodic steady state: equal up to float rounding
    assert out["expanded"]["step_time_s"] == pytest.approx(
        out["expanded"]["symmetric_step_time_s"], rel=1e-12)
    assert out["step_time_s"] == out["expanded"]["step_time_s"]
    assert main([*args, "--straggler", "9:0.5", "--failed-link", "nic:3", "--contention"]) == 0
    e = json.loads(capsys.readouterr().out)["expanded"]
    assert e["slowest_rank"] == 9 and e["failed_links"] == ["nic:3"]
    assert e["straggler_cost_s"] > 0


def test_cli_expand_table_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["simulate", "--model", "llama3-8b", "--gpus", "64", "--tp", "4", "--pp", "2",
            "--global-batch", "64"]
    assert main([*args, "--mix", "a100:0.5", "--degraded-link", "leaf:1:0.5"]) == 0
    out = capsys.readouterr().out
    assert "per-rank simulation: 64 ranks" in out and "symmetric step time" in out
    for bad, msg in ((["--straggler", "64:0.5"], "straggler rank"),
                     (["--degraded-link", "nic:1:1.5"], "FACTOR must be in (0, 1]"),
                     (["--failed-link", "port:1"], "FullFlat"),
                     (["--mix", "a100"], "GPU:FRACTION")):
        assert main([*args, *bad]) == 2
        err = capsys.readouterr().err
        assert msg in err and err.count("\n") == 1
