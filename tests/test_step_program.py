"""The step program (issue 11): one unpriced program of a training step, priced and run by the
engine; ZB-H1 against the paper's closed form; the periodic extension of identical
micro-batches against the exact simulation; the SimPy executor as the reference oracle."""

from __future__ import annotations

import pytest
from conftest import fast_network, tiny_model, tiny_run

from codesign.engine.chunk import ChunkTiming
from codesign.engine.executor import execute
from codesign.engine.training import simulate_step, step_shape
from codesign.hardware.compute import ComputeModel
from codesign.network.model import NetworkModel
from codesign.specs.run import TrainingRun
from codesign.workload.memory import memory_per_gpu
from codesign.workload.schedules import max_in_flight, zb_h1
from codesign.workload.step_program import build_step_program, split_backward
from codesign.workload.training import build_training_graph


def _fixed(duration: float, phase: str) -> ChunkTiming:
    cat = "forward" if phase == "F" else "backward"
    return ChunkTiming(compute_time=duration, makespan=duration, breakdown=((cat, duration),),
                       layer_done=(), tail=(), timeline=execute([]))


def _models(run: TrainingRun):  # type: ignore[no-untyped-def]
    graph = build_training_graph(run)
    net = NetworkModel.from_parallelism(run.topology, run.parallel, dp=run.dp)
    return graph, ComputeModel(run.gpu), net


def _pass_times(result, stage: int) -> dict[tuple[str, int], tuple[float, float]]:  # type: ignore[no-untyped-def]
    tl = result.timeline
    out = {}
    for t in tl.tasks:
        node = dict(t.meta)["node"]
        if node.kind == "pass" and node.stage == stage and "tail" not in dict(t.meta):
            out[(node.phase, node.mb)] = (tl.start[t.id], tl.end[t.id])
    return out


# --- ZB-H1 -----------------------------------------------------------------------------------


def test_zb_h1_order_lags_weight_gradients_by_stage() -> None:
    orders = zb_h1(4, 6)
    last = [(ph, m) for ph, m, _ in orders[3]]
    # the last stage defers its W passes by 3: W0 comes after B3
    assert last[:9] == [("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2), ("F", 3),
                        ("B", 3), ("W", 0)]
    first = [(ph, m) for ph, m, _ in orders[0]]
    assert first[:6] == [("F", 0), ("F", 1), ("F", 2), ("F", 3), ("B", 0), ("W", 0)]
    for order in orders:  # every micro-batch has exactly one F, B and W, W after its B
        for m in range(6):
            idx = {ph: order.index((ph, m, 0)) for ph in "FBW"}
            assert idx["F"] < idx["B"] < idx["W"]
    # activations are released by W: 1F1B's in-flight count on the first stage, and the
    # last stage holds pp (its W lag) instead of 1
    assert max_in_flight(orders[0], {0: 1.0}) == 4
    assert max_in_flight(orders[3], {0: 1.0}) == 4


@pytest.mark.parametrize(("pp", "m"), [(4, 8), (4, 12), (2, 6), (8, 16)])
def test_zb_h1_bubble_is_a_third_of_1f1b(pp: int, m: int) -> None:
    """Qi et al. 2023, Sec. 2.1: with T_F = T_B = T_W = 1 (1F1B's fused backward is B + W =
    2), 1F1B takes 3m + 3(p - 1) and ZB-H1 3m + (p - 1) pass times."""
    results = {}
    for kind in ("1f1b", "zb-h1"):
        run = tiny_run(num_gpus=pp, pp=pp, schedule=kind, global_batch_size=m, zero_stage=0,
                       model=tiny_model(num_layers=pp))
        graph, compute, net = _models(run)
        timings = {}
        for v in range(pp):
            timings[(v, "F")] = _fixed(1.0, "F")
            if kind == "zb-h1":
                timings[(v, "B")] = _fixed(1.0, "B")
                timings[(v, "W")] = _fixed(1.0, "W")
            else:
                timings[(v, "B")] = _fixed(2.0, "B")
        res = simulate_step(graph, compute, net, timings=timings, exact=True)
        results[kind] = max(e for s in range(pp) for _, e in _pass_times(res, s).values())
        assert res.breakdown_s["forward"] == pytest.approx(m)
        assert res.breakdown_s["backward"] == pytest.approx(2 * m)
    assert results["1f1b"] == pytest.approx(3 * m + 3 * (pp - 1))
    assert results["zb-h1"] == pytest.approx(3 * m + (pp - 1))


def test_zb_h1_backward_chain_runs_without_weight_gradients() -> None:
    """4 stages, unit passes: forward 0 reaches the last stage at t = 3; its B passes then
    run back one stage per unit (4-5 on stage 3 ... 7-8 on stage 0), not waiting for W."""
    run = tiny_run(num_gpus=4, pp=4, schedule="zb-h1", global_batch_size=8, zero_stage=0)
    graph, compute, net = _models(run)
    timings = {(v, ph): _fixed(1.0, ph) for v in range(4) for ph in "FBW"}
    res = simulate_step(graph, compute, net, timings=timings, exact=True)
    for stage in range(4):
        times = _pass_times(res, stage)
        assert times[("F", 0)] == pytest.approx((stage, stage + 1))
        assert times[("B", 0)] == pytest.approx((7 - stage, 8 - stage))


def test_split_backward_keeps_every_operator_once() -> None:
    run = tiny_run(num_gpus=4, tp=2, pp=2, schedule="zb-h1", global_batch_size=8,
                   sequence_parallel=True, zero_stage=3)
    graph = build_training_graph(run)
    for chunk in graph.chunks:
        b, w = split_backward(chunk.backward)
        assert sorted(map(id, b + w)) == sorted(map(id, chunk.backward))
        assert w and all(o.role == "wgrad" or o.name.endswith("grad_reduce") for o in w)
        assert not any(o.role == "wgrad" for o in b)
        # backward FLOPs are split, not lost: dgrad in B and wgrad in W, equal per GEMM
        gemm_b = sum(o.flops for o in b if o.kind == "gemm")
        gemm_w = sum(o.flops for o in w if o.kind == "gemm")
        assert gemm_b == pytest.approx(gemm_w)


def test_zb_h1_beats_1f1b_on_a_real_model_and_fits_like_it() -> None:
    from codesign.api import build_run, simulate

    base = dict(model="gpt3-175b", gpu="h100", num_gpus=128, tp=8, pp=8,
                global_batch_size=64, sequence_parallel=True)
    one = simulate(build_run(**base, schedule="1f1b"))  # type: ignore[arg-type]
    zb = simulate(build_run(**base, schedule="zb-h1"))  # type: ignore[arg-type]
    assert one.feasible and zb.feasible
    assert zb.step_time_s < one.step_time_s
    # the bubble shrinks; the work does not change
    assert zb.breakdown_s["pipeline_bubble"] < one.breakdown_s["pipeline_bubble"]
    assert zb.hardware_flops_per_step == one.hardware_flops_per_step


# --- the program ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["gpipe", "1f1b", "interleaved", "zb-h1"])
def test_program_is_in_dependency_and_stream_order(kind: str) -> None:
    vpp = 2 if kind == "interleaved" else 1
    run = tiny_run(num_gpus=16, tp=2, pp=4, vpp=vpp, schedule=kind, global_batch_size=16,
                   zero_stage=1, overlap_grad_reduce=True, overlap_param_gather=True,
                   model=tiny_model(num_layers=8))
    graph, _, net = _models(run)
    prog = build_step_program(step_shape(graph, net))
    n, pp = graph.num_microbatches, 4
    passes = [x for x in prog.nodes if x.kind == "pass"]
    assert len(passes) == pp * vpp * n * (3 if kind == "zb-h1" else 2)
    sends = [x for x in prog.nodes if x.kind == "send"]
    assert len(sends) == 2 * (pp * vpp - 1) * n  # every stage boundary, both directions
    for node in prog.nodes:
        assert all(d < node.id for d in node.deps)
        if node.release is not None:
            assert node.release[0] < node.id
    assert sum(x.kind == "optimizer" for x in prog.nodes) == pp


# --- identical micro-batches --------------------------------------------------------------------

CASES = [
    dict(schedule="1f1b"),
    dict(schedule="gpipe"),
    dict(schedule="interleaved", vpp=2),
    dict(schedule="zb-h1"),
    dict(schedule="1f1b", overlap_p2p=False),
    dict(schedule="interleaved", vpp=2, pipeline_scatter_gather=True, overlap_p2p=False),
    dict(schedule="1f1b", zero_stage=0, overlap_grad_reduce=False),
    dict(schedule="interleaved", vpp=2, zero_stage=1, overlap_param_gather=False),
    dict(schedule="zb-h1", zero_stage=3),
]


@pytest.mark.parametrize("plan", CASES, ids=lambda p: "-".join(f"{k}={v}" for k, v in p.items()))
def test_extended_steady_state_equals_exact_simulation(plan: dict[str, object]) -> None:
    """The step of 96 micro-batches, extended from two short runs, equals the step run
    micro-batch by micro-batch (time and breakdown), on stages with different costs (the
    first and last stages hold the embedding and the LM head) and real communication."""
    run = tiny_run(num_gpus=16, tp=2, pp=4, global_batch_size=96 * 2,
                   model=tiny_model(num_layers=8, vocab_size=32000), **plan)
    run = run.model_copy(update={"topology": fast_network(bandwidth_GBps=50, latency_us=5)})
    graph, compute, net = _models(run)
    fast = simulate_step(graph, compute, net)
    exact = simulate_step(graph, compute, net, exact=True)
    assert fast.num_microbatches == exact.num_microbatches == 96
    assert fast.simulated_microbatches < 40  # really extended
    assert fast.step_time_s == pytest.approx(exact.step_time_s, rel=1e-9)
    assert fast.critical_stage == exact.critical_stage
    assert set(fast.breakdown_s) <= set(exact.breakdown_s)
    for cat, t in exact.breakdown_s.items():
        assert fast.breakdown_s.get(cat, 0.0) == pytest.approx(t, rel=1e-9, abs=1e-12), cat
    for a, b in zip(fast.stage_busy_s, exact.stage_busy_s, strict=True):
        assert a == pytest.approx(b, rel=1e-9)


def test_cost_does_not_grow_with_the_micro_batch_count() -> None:
    counts = []
    for gbs in (64, 65536):
        run = tiny_run(num_gpus=8, pp=4, global_batch_size=gbs)
        graph, compute, net = _models(run)
        res = simulate_step(graph, compute, net)
        counts.append(len(res.timeline.tasks))
        assert res.num_microbatches == gbs // 2
    assert counts[1] == counts[0]


def test_memory_of_a_billion_micro_batches_is_computed_without_the_full_schedule() -> None:
    run = tiny_run(num_gpus=8, pp=4, global_batch_size=2_000_000_000)
    graph = build_training_graph(run)
    small = build_training_graph(tiny_run(num_gpus=8, pp=4, global_batch_size=64))
    assert memory_per_gpu(graph, 2, 1).total == memory_per_gpu(small, 2, 1).total


@pytest.mark.parametrize("plan", CASES[:4], ids=lambda p: p["schedule"])
def test_in_order_executor_equals_the_simpy_oracle(plan: dict[str, object]) -> None:
    run = tiny_run(num_gpus=16, tp=2, pp=4, global_batch_size=16,
                   model=tiny_model(num_layers=8), **plan)
    graph, compute, net = _models(run)
    fast = simulate_step(graph, compute, net, exact=True)
    oracle = simulate_step(graph, compute, net, exact=True, executor=execute)
    assert fast.timeline.start == oracle.timeline.start
    assert fast.timeline.end == oracle.timeline.end
    assert fast.breakdown_s == oracle.breakdown_s


def test_extension_on_a_real_plan_whose_increments_cycle_with_period_pp() -> None:
    """GPT-3 175B, TP8 PP8, 1F1B: the per-micro-batch increment of the step cycles with
    period pp (checking only the last micro-batch once accepted a wrong extension)."""
    from codesign.api import build_models, build_run

    run = build_run(model="gpt3-175b", gpu="h100", num_gpus=64, tp=8, pp=8,
                    global_batch_size=64)
    graph, compute, network = build_models(run)
    fast = simulate_step(graph, compute, network)
    exact = simulate_step(graph, compute, network, exact=True)
    assert fast.extension == "periodic" and fast.simulated_microbatches < 64
    assert fast.step_time_s == pytest.approx(exact.step_time_s, rel=1e-9)


def test_gpipe_activation_peak_grows_with_every_micro_batch() -> None:
    """GPipe runs every forward before its first backward: the activation peak is the whole
    batch's, however many micro-batches (the bounded schedule used for other schedules'
    peaks must not cap it)."""
    peaks = []
    for gbs in (16, 256, 2_000_000):
        run = tiny_run(num_gpus=8, pp=4, schedule="gpipe", global_batch_size=gbs)
        graph = build_training_graph(run)
        mem = memory_per_gpu(graph, 2, 1)
        saved = max(c.saved_bytes for c in graph.chunks if c.stage == mem.stage)
        assert mem.activations == pytest.approx(graph.num_microbatches * saved)
        peaks.append(mem.activations)
    assert peaks[1] == pytest.approx(16 * peaks[0])
