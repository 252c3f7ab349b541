"""Engine: executor semantics, schedule orders, and hand-computed pipeline timelines."""

from __future__ import annotations

import pytest
from conftest import fast_network, tiny_run

from codesign.engine.chunk import ChunkTiming, op_tasks, time_chunk
from codesign.engine.executor import ScheduleDeadlock, Task, attribute, execute
from codesign.engine.training import simulate_step
from codesign.hardware.compute import ComputeModel
from codesign.ir import Op
from codesign.network.model import NetworkModel
from codesign.workload.schedules import interleaved, max_in_flight, one_f_one_b, schedule
from codesign.workload.training import build_training_graph

# --- executor ---------------------------------------------------------------------------


def test_streams_run_in_order_and_wait_for_dependencies() -> None:
    tasks = [
        Task(0, "a", 1.0, name="a0", category="forward"),
        Task(1, "b", 2.0, name="b0", category="comm:tp"),
        Task(2, "a", 1.0, deps=(1,), name="a1", category="forward"),
        Task(3, "a", 0.5, name="a2", category="backward"),
    ]
    tl = execute(tasks)
    assert tl.start == (0.0, 0.0, 2.0, 3.0)
    assert tl.end == (1.0, 2.0, 3.0, 3.5)
    assert tl.binding[2] == 1 and tl.binding[3] == -1
    parts = attribute(tl, "a")
    assert parts == pytest.approx({"forward": 2.0, "comm:tp": 1.0, "backward": 0.5})
    assert sum(parts.values()) == pytest.approx(tl.makespan)


def test_start_after_releases_relative_to_a_task_start() -> None:
    tasks = [Task(0, "a", 10.0, name="long"),
             Task(1, "b", 1.0, start_after=((0, 4.0),), name="bucket", category="comm:dp")]
    tl = execute(tasks)
    assert tl.start[1] == 4.0 and tl.end[1] == 5.0


def test_gap_behind_other_compute_is_bubble_and_comm_is_exposed_comm() -> None:
    tasks = [Task(0, "s0", 3.0, category="forward"),
             Task(1, "s0-send", 1.0, deps=(0,), category="comm:pp"),
             Task(2, "s1", 2.0, deps=(1,), category="forward")]
    tl = execute(tasks)
    parts = attribute(tl, "s1")
    assert parts == pytest.approx({"bubble": 3.0, "comm:pp": 1.0, "forward": 2.0})


def test_cycle_is_reported() -> None:
    with pytest.raises(ScheduleDeadlock):
        execute([Task(0, "a", 1.0, deps=(1,)), Task(1, "b", 1.0, deps=(0,))])


# --- overlap rules inside a chunk ---------------------------------------------------------


def _op(name: str, kind: str = "memory", **kw: object) -> Op:
    return Op(name=name, kind=kind, category="forward", layer=0, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("overlap", "expected"), [
    ("none", 1 + 4 + 2 + 3),    # blocking: compute waits for the collective
    ("next", 1 + 4 + 3),        # runs with the next GEMM (2) and finishes before op 3
    ("prev", 4 + 2 + 3),        # starts with the previous op (1), finishes at 4
    ("prefetch", 4 + 2 + 3),    # waits for nothing, next op waits for it
    ("async", 1 + 2 + 3),       # nothing waits (only the makespan sees it)
    ("hidden", 1 + 4 + 3),      # runs 1..5 beside c2; the pass's last op (c3) waits for it
])
def test_collective_overlap_rules(overlap: str, expected: float) -> None:
    durations = {"c1": 1.0, "c2": 2.0, "c3": 3.0, "ar": 4.0}
    ops = [_op("c1"), _op("ar", "comm", group="tp", overlap=overlap), _op("c2"), _op("c3")]
    timing = time_chunk(ops, lambda o: durations[o.name], lambda o: durations[o.name])
    assert timing.compute_time == pytest.approx(expected)
    assert sum(dt for _, dt in timing.breakdown) == pytest.approx(timing.compute_time)
    if overlap == "async":  # runs 1..5 beside c2 and c3, finishing before them: no tail
        assert timing.makespan == pytest.approx(6.0)
        assert timing.tail == ()


def test_a_hidden_collective_shorter_than_the_computation_costs_nothing() -> None:
    # MoE all-to-all overlap: dispatch (1 s) after c1 runs 1..2 beside c2, combine (1 s)
    # after c2 runs 3..4 beside c3; only c4, the pass's last op, waits for them (at 6)
    durations = {"c1": 1.0, "dispatch": 1.0, "c2": 2.0, "combine": 1.0, "c3": 3.0, "c4": 0.5}
    ops = [_op("c1"), _op("dispatch", "comm", group="ep", overlap="hidden"), _op("c2"),
           _op("combine", "comm", group="ep", overlap="hidden"), _op("c3"), _op("c4")]
    timing = time_chunk(ops, lambda o: durations[o.name], lambda o: durations[o.name])
    assert timing.compute_time == pytest.approx(6.5) and timing.tail == ()
    assert dict(timing.breakdown) == pytest.approx({"forward": 6.5})
    # 4 s all-to-alls: the ep stream runs 1..5 and 5..9, c4 starts at 9: the pass takes its
    # EP link's time plus the last op, not computation plus collectives (1+4+2+4+3+0.5)
    durations.update(dispatch=4.0, combine=4.0)
    timing = time_chunk(ops, lambda o: durations[o.name], lambda o: durations[o.name])
    assert timing.compute_time == pytest.approx(1 + 4 + 4 + 0.5)
    assert dict(timing.breakdown) == pytest.approx({"forward": 6.5, "comm:ep": 3.0})


def test_back_to_back_blocking_collectives_are_serialized() -> None:
    # EP dispatch (ep stream) feeds the expert-TP all-gather (tp stream): 1 + 2 + 3 + 1
    ops = [_op("c1"), _op("dispatch", "comm", group="ep"), _op("gather", "comm", group="tp"),
           _op("c2")]
    durations = {"c1": 1.0, "dispatch": 2.0, "gather": 3.0, "c2": 1.0}
    timing = time_chunk(ops, lambda o: durations[o.name], lambda o: durations[o.name])
    assert timing.compute_time == pytest.approx(7.0)
    assert dict(timing.breakdown) == pytest.approx({"forward": 2.0, "comm:ep": 2.0,
                                                    "comm:tp": 3.0})


def test_op_tasks_put_collectives_on_their_group_stream() -> None:
    ops = [_op("a"), _op("x", "comm", group="dp_cp"), _op("y", "comm", group="ep")]
    streams = [t.stream for t in op_tasks(ops, lambda o: 1.0, lambda o: 1.0)]
    assert streams == ["compute", "dp", "ep"]


# --- schedules -----------------------------------------------------------------------------


def test_1f1b_order_two_stages() -> None:
    s0, s1 = one_f_one_b(2, 4)
    assert s0 == [("F", 0, 0), ("F", 1, 0), ("B", 0, 0), ("F", 2, 0), ("B", 1, 0),
                  ("F", 3, 0), ("B", 2, 0), ("B", 3, 0)]
    assert s1 == [("F", 0, 0), ("B", 0, 0), ("F", 1, 0), ("B", 1, 0), ("F", 2, 0),
                  ("B", 2, 0), ("F", 3, 0), ("B", 3, 0)]


def test_interleaved_order_matches_megatron() -> None:
    # pp=2, vpp=2, 4 micro-batches; stage 0 warm-up = 2*(2-0-1) + (2-1)*2 = 4 forwards
    s0 = interleaved(2, 2, 4)[0]
    assert s0[:4] == [("F", 0, 0), ("F", 1, 0), ("F", 0, 1), ("F", 1, 1)]
    assert s0[4:6] == [("F", 2, 0), ("B", 0, 1)]
    assert sorted(s0) == sorted([(ph, m, c) for ph in "FB" for m in range(4) for c in range(2)])
    with pytest.raises(ValueError):
        interleaved(2, 2, 3)


def test_in_flight_micro_batches() -> None:
    # 1F1B stage 0 holds pp micro-batches; GPipe holds all of them
    assert max_in_flight(one_f_one_b(4, 8)[0], {0: 1.0}) == 4
    assert max_in_flight(schedule("gpipe", 4, 1, 8)[0], {0: 1.0}) == 8
    assert max_in_flight(one_f_one_b(4, 8)[3], {0: 1.0}) == 1


# --- hand-computed pipeline timelines --------------------------------------------------------

F, B = 1.0, 2.0
# (start, end) of each pass on each stage, 2 stages, 4 micro-batches, no communication time
GPIPE = {
    0: {("F", 0): (0, 1), ("F", 1): (1, 2), ("F", 2): (2, 3), ("F", 3): (3, 4),
        ("B", 0): (7, 9), ("B", 1): (9, 11), ("B", 2): (11, 13), ("B", 3): (13, 15)},
    1: {("F", 0): (1, 2), ("F", 1): (2, 3), ("F", 2): (3, 4), ("F", 3): (4, 5),
        ("B", 0): (5, 7), ("B", 1): (7, 9), ("B", 2): (9, 11), ("B", 3): (11, 13)},
}
ONE_F_ONE_B = {
    0: {("F", 0): (0, 1), ("F", 1): (1, 2), ("B", 0): (4, 6), ("F", 2): (6, 7),
        ("B", 1): (7, 9), ("F", 3): (9, 10), ("B", 2): (10, 12), ("B", 3): (13, 15)},
    1: {("F", 0): (1, 2), ("B", 0): (2, 4), ("F", 1): (4, 5), ("B", 1): (5, 7),
        ("F", 2): (7, 8), ("B", 2): (8, 10), ("F", 3): (10, 11), ("B", 3): (11, 13)},
}


def _fixed(duration: float, phase: str) -> ChunkTiming:
    cat = "forward" if phase == "F" else "backward"
    return ChunkTiming(compute_time=duration, makespan=duration, breakdown=((cat, duration),),
                       layer_done=(), tail=(), timeline=execute([]))


@pytest.mark.parametrize(("kind", "expected"), [("gpipe", GPIPE), ("1f1b", ONE_F_ONE_B)])
def test_pipeline_timeline_matches_hand_computation(kind: str, expected: dict) -> None:
    run = tiny_run(num_gpus=2, pp=2, schedule=kind, global_batch_size=4, zero_stage=0)
    graph = build_training_graph(run)
    assert graph.num_microbatches == 4
    timings = {(v, ph): _fixed(F if ph == "F" else B, ph) for v in range(2) for ph in "FB"}
    net = NetworkModel.from_parallelism(run.topology, run.parallel, dp=run.dp)
    result = simulate_step(graph, ComputeModel(run.gpu), net, timings=timings)
    tl = result.timeline
    got: dict[int, dict[tuple[str, int], tuple[float, float]]] = {0: {}, 1: {}}
    for t in tl.tasks:
        if t.name[0] in "FB" and t.stream.endswith("/compute"):
            stage = int(t.stream[1])
            got[stage][(t.name[0], int(t.name[1:].split(".")[0]))] = (tl.start[t.id],
                                                                      tl.end[t.id])
    for stage in (0, 1):
        assert set(got[stage]) == set(expected[stage])
        for key, (s, e) in expected[stage].items():
            assert got[stage][key] == pytest.approx((s, e), abs=1e-9), (stage, key)
    # makespan: (m + p - 1)(F + B) for both schedules, plus stage 0's optimizer
    opt = next(t for t in tl.tasks if t.name == "optimizer" and t.stream == "s0/compute")
    assert tl.start[opt.id] == pytest.approx(15.0)
    assert result.step_time_s == pytest.approx(15.0 + opt.duration)
    bd = result.breakdown_s
    assert sum(bd.values()) == pytest.approx(result.step_time_s)
    assert bd["forward"] == pytest.approx(4 * F) and bd["backward"] == pytest.approx(4 * B)
    assert bd["bubble"] == pytest.approx(15.0 - 12.0, abs=1e-6)


def test_symmetric_cost_does_not_grow_with_gpu_count() -> None:
    small = tiny_run(num_gpus=8, pp=2, global_batch_size=64)
    big = tiny_run(num_gpus=8 * 4096, pp=2, global_batch_size=64 * 4096)
    for run in (small, big):
        graph = build_training_graph(run)
        net = NetworkModel.from_parallelism(run.topology, run.parallel, dp=run.dp)
        res = simulate_step(graph, ComputeModel(run.gpu), net)
        assert len(res.timeline.tasks) < 200


def test_first_forward_waits_only_for_its_first_parameter_bucket() -> None:
    """pp = vpp = 1: one chunk holds the embedding and the LM head (both layer -1). With
    overlapped ZeRO-1 parameter gathers, its first forward waits for the first bucket (the
    embedding's), not for every bucket."""
    from codesign.api import simulate_detailed

    run = tiny_run(num_gpus=4, global_batch_size=8, zero_stage=1, overlap_param_gather=True)
    run = run.model_copy(update={"topology": fast_network(bandwidth_GBps=0.01, latency_us=0)})
    sim = simulate_detailed(run)
    assert sim.step is not None
    tl = sim.step.timeline
    gathers = [t for t in tl.tasks if t.name.startswith("param_gather")]
    first_f = next(t for t in tl.tasks if t.name == "F0.v0")
    assert len(gathers) == 4 + 2  # layers + embedding + head
    assert tl.start[first_f.id] == pytest.approx(tl.end[gathers[0].id])
    assert tl.start[first_f.id] < tl.end[gathers[-1].id]


@pytest.mark.parametrize("scatter_gather", [False, True])
def test_blocking_pipeline_sends_match_hand_computation(scatter_gather: bool) -> None:
    """1F1B, 2 stages, 4 micro-batches, F = 1, B = 2, sends of x seconds that hold the sender's
    compute stream (Megatron-LM 2021-22) and, scatter/gathered, a TP all-gather of g seconds
    on the receiver's compute stream before the pass that needs it.

    Hand-derived timeline: every pass of the chain F0(s0) F0(s1) B0(s1) B0(s0) F2(s0) F2(s1)
    ... B3(s0) waits for its input, and five sends (F0, B0, F2 ... in turn) and five gathers lie
    on it, so stage 0 ends at 15 + 5(x + g)."""
    from codesign.engine.training import pipeline_send_seconds
    from codesign.workload.dims import pipeline_message

    run = tiny_run(num_gpus=4, tp=2, pp=2, schedule="1f1b", global_batch_size=4,
                   zero_stage=0, pipeline_scatter_gather=scatter_gather, overlap_p2p=False)
    run = run.model_copy(update={"topology": fast_network(bandwidth_GBps=1e-4, latency_us=0)})
    graph = build_training_graph(run)
    timings = {(v, ph): _fixed(F if ph == "F" else B, ph) for v in range(2) for ph in "FB"}
    net = NetworkModel.from_parallelism(run.topology, run.parallel, dp=run.dp)
    message = pipeline_message(run)
    full = run.parallel.micro_batch_size * run.seq_len * run.model.hidden_size * 2.0
    assert message == ((full / 2, full) if scatter_gather else (full, 0.0))
    x, g = pipeline_send_seconds(net, message)
    assert x > 0.05 and (g > 0.05) == scatter_gather  # large enough to matter
    result = simulate_step(graph, ComputeModel(run.gpu), net, timings=timings)
    tl = result.timeline
    opt = next(t for t in tl.tasks if t.name == "optimizer" and t.stream == "s0/compute")
    assert tl.start[opt.id] == pytest.approx(15.0 + 5 * (x + g))
    sends = [t for t in tl.tasks if t.name.startswith("send_")]
    assert len(sends) == 8 and all(t.stream.endswith("/compute") for t in sends)
    gathers = [t for t in tl.tasks if t.name.startswith("gather_")]
    assert len(gathers) == (8 if scatter_gather else 0)
    assert all(t.stream.endswith("/compute") for t in gathers)
    bd = result.breakdown_s
    assert sum(bd.values()) == pytest.approx(result.step_time_s)
    # stage 0's compute stream carries its 4 sends and (scatter/gathered) 4 gathers
    assert bd["comm:pp"] >= 4 * (x + g) - 1e-9
