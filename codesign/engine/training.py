"""Simulate one training step: price the step program and run it.

The step's structure (passes in schedule order, sends, gradient buckets, optimizer, parameter
gathers) is the unpriced :class:`~codesign.workload.step_program.StepProgram`; this module
prices its nodes (chunk passes by :func:`time_chunks`, collectives by the network model, the
optimizer by the compute model) and runs them with the one-pass in-order executor
(:func:`~codesign.engine.executor.execute_in_order`; the SimPy executor
:func:`~codesign.engine.executor.execute` gives the same timeline and serves as the
reference in tests).

Symmetry: every rank of a stage (across TP, CP, EP and DP) runs the same operators on the same
amount of data, so one representative per stage is simulated and each collective is priced from
its group's placement on the topology: the cost does not grow with the GPU count.

Identical micro-batches: the schedule's steady state repeats every period (``pp`` micro-batches).
A step of ``n`` micro-batches is run at two shorter counts ``n_a`` (past the warm-up) and
``n_a`` + one period with the same remainder
(:func:`~codesign.workload.step_program.sample_counts`); when every task of the trailing
in-flight micro-batches (the state entering the cool-down), the cool-down itself, gradient
buckets and optimizer of the longer run is the shorter run's shifted by one common ``Δ``, the
step is
periodic from there (the schedule's extra period maps a shifted state to a shifted state), so
``n`` micro-batches take ``t(n_a + period) + (k - 1)·Δ`` exactly, with the breakdown and busy times
extended the same way. Otherwise ``n_a`` grows until they are, or the full count is run. The
cost is independent of the micro-batch count. Pipelines of at least
:data:`~codesign.engine.vector_run.VECTOR_MIN_STAGES` stages run the two samples side by side
from arrays (:mod:`codesign.engine.vector_run`, a numpy wavefront over the streams), with the
fused runner's numbers bit for bit; a sample's timeline is then made by the fused runner when
someone reads it.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from operator import attrgetter
from typing import Any, cast

import numpy as np

from codesign.engine.chunk import ChunkTiming, time_chunk
from codesign.engine.executor import (
    DeferredTimeline,
    Task,
    Timeline,
    attribute_stream,
    execute_in_order,
)
from codesign.engine.steady import extend_breakdown, extend_steady_state, relative_drift
from codesign.engine.step_run import FlatRun, LazyTasks, run_program, timeline_of
from codesign.engine.vector_run import VectorRun, run_vectors, vector_eligible
from codesign.hardware.compute import ComputeModel
from codesign.hardware.offload import HostLink
from codesign.ir import Op
from codesign.network.model import NetworkModel
from codesign.runtime import no_cyclic_gc
from codesign.specs.run import TrainingRun
from codesign.workload.dims import pipeline_message
from codesign.workload.offload import HOST_GROUPS, host_copies
from codesign.workload.schedules import SPLIT_BACKWARD, inflight_window, period, tail_phases
from codesign.workload.step_program import PARAM_BYTES as PARAM_BYTES
from codesign.workload.step_program import (
    Node,
    StepProgram,
    StepShape,
    build_step_program,
    optimizer_op,
    pass_ops,
)
from codesign.workload.training import (
    ChunkGraph,
    TrainingGraph,
    adam_bytes_per_param,
    state_groups,
)


@dataclass(frozen=True)
class StepResult:
    """Outcome of one simulated training step (seconds)."""

    step_time_s: float
    breakdown_s: dict[str, float]  # critical stage; sums to step_time_s
    critical_stage: int
    stage_busy_s: tuple[float, ...]  # compute-stream busy time per stage
    timeline: Timeline = field(repr=False)  # of the simulated micro-batches
    chunk_timings: dict[tuple[int, str], ChunkTiming] = field(repr=False)
    num_microbatches: int = 0  # of the step
    simulated_microbatches: int = 0  # in ``timeline`` (fewer when a steady state was extended)
    #: ``exact`` (every micro-batch run), ``periodic`` (extended from a steady state checked
    #: to repeat), ``bounded`` (repeating to within :data:`codesign.engine.steady.DRIFT_BOUND`
    #: of the step time) or ``unverified`` (extended linearly; the steady state did not
    #: repeat within the tries of :mod:`codesign.engine.steady` and the count exceeds
    #: :data:`codesign.engine.steady.EXACT_CAP`)
    extension: str = "exact"
    flat: FlatRun | None = field(default=None, repr=False, compare=False)  # the run's lists
    #: the run's arrays when the sample ran on the vector path (:mod:`.vector_run`)
    vector: VectorRun | None = field(default=None, repr=False, compare=False)



def pipeline_send_seconds(network: NetworkModel,
                          message: tuple[float, float]) -> tuple[float, float]:
    """``(seconds of one pipeline send, seconds of the receiver's TP all-gather)`` for a
    message ``(bytes per sending rank, bytes all-gathered over TP at the receiver)``
    (:func:`codesign.workload.dims.pipeline_message`); the gather is 0 when there is none.
    The receiver runs the gather on its compute stream before the pass that needs it."""
    send, gathered = message
    gather = network.collective("all_gather", "tp", gathered).time_s if gathered else 0.0
    return network.collective("p2p", "pp", send).time_s, gather

#: what makes two chunk passes time the same (their layer indices aside)
_OP_TIMING = attrgetter("name", "category", "flops", "bytes", "size", "group", "mnk")


def _ops_key(ops: tuple[Op, ...]) -> Hashable:
    return tuple(map(_OP_TIMING, ops))


def time_chunks(graph: TrainingGraph, compute: ComputeModel,
                network: NetworkModel) -> dict[tuple[int, str], ChunkTiming]:
    """Timing of every (virtual stage, phase); identical chunk passes are simulated once, by
    the one-pass executor (:func:`~codesign.engine.executor.execute_in_order`: the SimPy
    executor's timeline, as the search's pass costs use it).
    Phases are ``F`` and ``B``; schedules that split the backward time ``B`` (input
    gradients) and ``W`` (weight gradients) separately
    (:func:`~codesign.workload.step_program.split_backward`). A plan that offloads gets
    its host copies in the passes (:func:`codesign.workload.offload.host_copies`), priced on
    the GPU's host link."""

    p = graph.run.parallel
    host = host_link(graph.run)
    sharded = [network.group_size(g) for g in state_groups(p)] if host else [1, 1]

    def comm_time(op: Op) -> float:
        if host is not None and op.group in HOST_GROUPS:  # a copy to or from the host tier
            return host.copy_s(op.size)
        return network.collective(op.comm or "none", op.group or "dp", op.size).time_s

    split = p.pipeline_schedule in SPLIT_BACKWARD
    memo: dict[Hashable, tuple[ChunkTiming, tuple[int, ...]]] = {}
    out: dict[tuple[int, str], ChunkTiming] = {}
    for c in graph.chunks:
        for phase in ("F", "B", "W") if split else ("F", "B"):
            if c.same_ops_as >= 0 and host is None:  # an earlier chunk's operators
                source = graph.chunks[c.same_ops_as]
                out[(c.virtual_stage, phase)] = _on_layers(
                    out[(source.virtual_stage, phase)], source.layers, c.layers)
                continue
            ops = pass_ops(c.forward, c.backward, phase, split)
            if host is not None:
                ops = host_copies(ops, phase, c, p, *sharded)
            key = _ops_key(ops)
            if key not in memo:
                memo[key] = (time_chunk(ops, compute.time, comm_time, execute_in_order,
                                        compute.host_time), c.layers)
            timing, layers = memo[key]
            out[(c.virtual_stage, phase)] = _on_layers(timing, layers, c.layers)
    return out


def _on_layers(timing: ChunkTiming, layers: tuple[int, ...],
               own: tuple[int, ...]) -> ChunkTiming:
    """``timing`` of a pass on ``layers`` as the same operators' on ``own`` layers."""
    if layers == own:
        return timing
    rename = dict(zip(layers, own, strict=True))
    return replace(timing, layer_done=tuple((rename.get(layer, layer), t)
                                            for layer, t in timing.layer_done))


class TaskBuilder:
    """Collects tasks with symbolic keys, then numbers them for the executor. A key names one
    task: adding it twice is a bug (a dependency on it would silently bind to one of them)."""

    def __init__(self) -> None:
        self.rows: list[tuple[Hashable, str, float, tuple[Hashable, ...], str, str,
                              tuple[tuple[Hashable, float], ...],
                              tuple[tuple[str, float], ...]]] = []
        self._keys: set[Hashable] = set()

    def add(self, key: Hashable, stream: str, duration: float, deps: tuple[Hashable, ...] = (),
            name: str = "", category: str = "",
            start_after: tuple[tuple[Hashable, float], ...] = (),
            breakdown: tuple[tuple[str, float], ...] = ()) -> Hashable:
        if key in self._keys:
            raise ValueError(f"task key {key!r} added twice")
        self._keys.add(key)
        self.rows.append((key, stream, duration, deps, name, category, start_after, breakdown))
        return key

    def tasks(self) -> tuple[list[Task], dict[Hashable, int]]:
        ids = {row[0]: i for i, row in enumerate(self.rows)}
        tasks = [Task(i, stream, dur, tuple(ids[d] for d in deps), name, cat,
                      tuple((ids[d], off) for d, off in after), bd)
                 for i, (_, stream, dur, deps, name, cat, after, bd) in enumerate(self.rows)]
        return tasks, ids


def step_shape(graph: TrainingGraph, network: NetworkModel) -> StepShape:
    """The unpriced shape of ``graph``'s step (what :func:`build_step_program` needs)."""
    run = graph.run
    p = run.parallel
    zero = p.sharding_stage
    dense_grp, expert_grp = state_groups(p)
    dense_n, expert_n = network.group_size(dense_grp), network.group_size(expert_grp)
    opt = []
    for stage in range(p.pp):
        chunks = [c for c in graph.chunks if c.stage == stage]
        opt.append(sum(_local_params(ch, zero, dense_n, expert_n) for ch in chunks)
                   * adam_bytes_per_param(p.grad_bytes))
    by_v = sorted(graph.chunks, key=lambda c: c.virtual_stage)
    return StepShape(
        schedule=p.pipeline_schedule, pp=p.pp, vpp=p.vpp,
        num_microbatches=graph.num_microbatches,
        buckets=tuple(c.layer_params for c in by_v), zero=zero, dense_grp=dense_grp,
        expert_grp=expert_grp, dense_n=dense_n, expert_n=expert_n,
        overlap_grad_reduce=p.overlap_grad_reduce,
        overlap_param_gather=p.overlap_param_gather, overlap_p2p=p.overlap_p2p,
        message=pipeline_message(run) if p.pp > 1 else (0.0, 0.0), opt_bytes=tuple(opt),
        optimizer_on_host=p.offload_optimizer, params_on_host=p.offload_params,
        grad_bytes=p.grad_bytes)


def price_program(program: StepProgram, timings: dict[tuple[int, str], ChunkTiming],
                  compute: ComputeModel, network: NetworkModel) -> list[Task]:
    """The executor tasks of ``program``: each node priced, in program order, with the
    collectives a pass leaves running after its compute (its *tails*) as tasks of their own
    right after it. Streams are ``s<stage>/<stream>``; each task's ``meta`` holds its node
    (and, for a tail, its category), so consumers need not parse names. (The tasks of the
    fused runner, :func:`~codesign.engine.step_run.run_program`: one pricing for both.)"""
    return list(LazyTasks(_flat_run(program, timings, compute, network)))


def _comm_pricer(network: NetworkModel) -> Callable[[Node], float]:
    costs: dict[tuple[str, str, float], float] = {}

    def comm_s(node: Node) -> float:
        total = 0.0
        for c in node.comms:
            key = (c.kind, c.group, c.bytes)
            if key not in costs:
                costs[key] = network.collective(c.kind, c.group, c.bytes).time_s
            total += costs[key]
        return total

    return comm_s


def host_link(run: TrainingRun) -> HostLink | None:
    """The GPU's link to its host tier when ``run``'s plan offloads (else ``None``)."""
    tier = run.gpu.host_tier
    return HostLink(tier) if run.parallel.offloads and tier is not None else None


def offloaded_optimizer_s(host: HostLink, update_bytes: float, params_on_host: bool,
                          grad_bytes: float) -> float:
    """Seconds of the optimizer step on the host CPU (:mod:`codesign.workload.offload`):
    ``update_bytes`` are :func:`~codesign.workload.training.adam_bytes_per_param` per local
    parameter; the gradients (``grad_bytes`` per parameter) go device-to-host, the CPU
    streams ``update_bytes`` of host memory, and the updated bf16 parameters
    (``PARAM_BYTES``/param) come back host-to-device, one after the other. With the
    parameters in the tier (``params_on_host``, ZeRO-Infinity) the gradients are there
    already and the parameters stay: only the CPU step."""
    if params_on_host:
        return host.cpu_adam_s(update_bytes)
    params = update_bytes / adam_bytes_per_param(grad_bytes)
    return host.copy_s(params * grad_bytes) + host.cpu_adam_s(update_bytes) + \
        host.copy_s(params * PARAM_BYTES)


def _optimizer_pricer(shape: StepShape, compute: ComputeModel) -> Callable[[float], float]:
    """Seconds of a stage's optimizer node from its update bytes: on the GPU (HBM-bound
    memory operator) or, offloaded, on the host (:func:`offloaded_optimizer_s`)."""
    tier = compute.gpu.host_tier
    if shape.optimizer_on_host and tier is not None:
        host = HostLink(tier)
        return lambda b: offloaded_optimizer_s(host, b, shape.params_on_host, shape.grad_bytes)
    return lambda b: compute.time(optimizer_op(b))


def _flat_run(program: StepProgram, timings: dict[tuple[int, str], ChunkTiming],
              compute: ComputeModel, network: NetworkModel) -> FlatRun:
    return run_program(program, timings, _comm_pricer(network),
                       _optimizer_pricer(program.shape, compute))


def _run(program: StepProgram, timings: dict[tuple[int, str], ChunkTiming],
         compute: ComputeModel, network: NetworkModel,
         executor: Callable[[Sequence[Task]], Timeline]) -> StepResult:
    n = program.shape.num_microbatches
    flat: FlatRun | None = None
    if executor is execute_in_order:  # the fused one-pass runner: same timeline, no tasks
        flat = _flat_run(program, timings, compute, network)
        tl = timeline_of(flat)
        names, stream, dur = flat.stream_names, flat.stream, flat.duration
        category, breakdown = flat.category, flat.breakdown
    else:
        tasks = price_program(program, timings, compute, network)
        tl = executor(tasks)
        names = sorted({t.stream for t in tasks})
        ids = {x: i for i, x in enumerate(names)}
        stream = [ids[t.stream] for t in tasks]
        dur = [t.duration for t in tasks]
        category = [t.category for t in tasks]
        breakdown = {t.id: t.breakdown for t in tasks if t.breakdown}
    step, parts, crit, busy = _summarize(
        program.shape.pp, names, stream, dur, (tl.start, tl.end, tl.binding, tl.stream_prev),
        category.__getitem__, lambda i: breakdown.get(i, ()))
    return StepResult(step_time_s=step, breakdown_s=parts, critical_stage=crit,
                      stage_busy_s=busy, timeline=tl, chunk_timings=timings,
                      num_microbatches=n, simulated_microbatches=n, flat=flat)


def _run_vectors(shapes: Sequence[StepShape], timings: dict[tuple[int, str], ChunkTiming],
                 compute: ComputeModel, network: NetworkModel) -> list[StepResult]:
    """:func:`_run` of each of ``shapes``' programs on the vector path, side by side (same
    numbers); a timeline is made by the fused runner if someone reads it."""
    out = []
    runs = run_vectors(shapes, timings, _comm_pricer(network),
                       _optimizer_pricer(shapes[0], compute))
    for shape, v in zip(shapes, runs, strict=True):
        step, parts, crit, busy = _summarize(
            shape.pp, v.names, v.stream, v.duration,
            (v.start, v.end, v.binding, v.stream_prev), v.category, v.breakdown)
        n = shape.num_microbatches
        tl = _timeline_later(shape, timings, compute, network)
        out.append(StepResult(step_time_s=step, breakdown_s=parts, critical_stage=crit,
                              stage_busy_s=busy, timeline=tl, chunk_timings=timings,
                              num_microbatches=n, simulated_microbatches=n, vector=v))
    return out


#: one value per task: a list, a tuple (the fused runner) or an array (the vector path)
_Column = Sequence[float] | np.ndarray


def _timeline_later(shape: StepShape, timings: dict[tuple[int, str], ChunkTiming],
                    compute: ComputeModel, network: NetworkModel) -> Timeline:
    """The fused runner's timeline of ``shape``'s program, run when first read."""
    return DeferredTimeline(lambda: _run(build_step_program(shape), timings, compute, network,
                                         execute_in_order).timeline)


def _summarize(pp: int, names: Sequence[str], stream: _Column, dur: _Column,
               times: tuple[_Column, _Column, _Column, _Column],
               category: Callable[[int], str],
               breakdown: Callable[[int], tuple[tuple[str, float], ...]]
               ) -> tuple[float, dict[str, float], int, tuple[float, ...]]:
    """Step time, the critical stage's breakdown, the critical stage (the one that ends
    last) and each stage's compute-stream busy time (summed in task order), from per-task
    lists (``stream[i]`` indexes ``names``, ``s<stage>/<stream>``; ``times``: start, end,
    binding and stream predecessor of each task)."""
    starts, ends = times[0], times[1]
    sid = np.asarray(stream, dtype=np.int64)
    end = np.asarray(ends, dtype=float)
    stage = np.array([int(x[1:].split("/", 1)[0]) for x in names], dtype=np.int64)[sid]
    step = float(end.max()) if len(end) else 0.0
    stage_end = np.zeros(pp)
    np.maximum.at(stage_end, stage, end)
    compute = np.flatnonzero(np.array([x.endswith("/compute") for x in names])[sid])
    by_stage = compute[np.argsort(stage[compute], kind="stable")]
    cuts = np.searchsorted(stage[by_stage], np.arange(pp + 1))
    d = np.asarray(dur, dtype=float)[by_stage]
    busy = tuple(float(np.cumsum(d[a:b])[-1]) if b > a else 0.0
                 for a, b in itertools.pairwise(cuts.tolist()))
    crit = int(np.flatnonzero(stage_end == stage_end.max())[-1])
    crit_id = list(names).index(f"s{crit}/compute")
    own = np.flatnonzero(sid == crit_id)
    own = own[np.argsort(np.asarray(starts, dtype=float)[own], kind="stable")]
    others = np.flatnonzero(sid != crit_id)
    last = int(others[np.argmax(end[others])]) if len(others) else -1
    columns = cast(tuple[Sequence[Any], Sequence[Any], Sequence[Any], Sequence[Any]], times)
    parts = attribute_stream(own.tolist(), last, step, *columns, category=category,
                             breakdown=lambda i: (float(dur[i]), breakdown(i)))
    return step, {k: float(v) for k, v in parts.items()}, crit, busy


def _tail_tasks(r: StepResult, first: int, shift: int, phases: frozenset[str]
                ) -> dict[Hashable, int]:
    """Task ids of ``r``'s tasks from micro-batch ``first`` on (in ``phases``) and of every
    task after the passes, by a key with micro-batches shifted by ``shift``; gathers that
    precede the step are left out."""
    if r.flat is not None:
        nodes = r.flat.program.nodes
        pairs: Iterable[tuple[Node, str]] = (
            (nodes[k], tail) for k, tail in zip(r.flat.node, r.flat.tail, strict=True))
    else:
        pairs = ((dict(t.meta)["node"], dict(t.meta).get("tail", ""))
                 for t in r.timeline.tasks)
    out: dict[Hashable, int] = {}
    for i, (node, tail) in enumerate(pairs):
        mb = node.mb
        if mb >= 0:
            if mb < first or node.phase not in phases:
                continue
            mb += shift
        elif node.kind == "param_gather" and not node.deps:
            continue
        out[(node.kind, node.stage, node.phase, mb, node.v, node.layer, node.bucket,
             tail)] = i
    return out


def _drift(a: StepResult, b: StepResult, per: int, schedule_kind: str, pp: int) -> float:
    """How far ``b`` (``per`` more micro-batches) is from ``a`` with one more steady period
    (:func:`~codesign.engine.steady.extend_steady_state`): the largest deviation from ``Δ =
    step(b) - step(a)`` of the shift of every task of ``a``'s trailing in-flight window of
    micro-batches (the state entering the last period) and of everything after the passes,
    over ``Δ``; 0 within rounding, ``inf`` when the tasks differ."""
    delta = b.step_time_s - a.step_time_s
    first = a.num_microbatches - inflight_window(schedule_kind, pp)
    phases = tail_phases(schedule_kind)
    if a.vector is not None and b.vector is not None:  # the same check on arrays
        keys_a, core_a, rest_a = a.vector.window(first, per, phases)
        keys_b, core_b, rest_b = b.vector.window(first + per, 0, phases)
        if not np.array_equal(keys_a, keys_b) or rest_a.keys() != rest_b.keys():
            return math.inf
        gaps = [float(np.max(np.abs(core_b - core_a - delta), initial=0.0))]
        gaps += [abs(rest_b[k] - x - delta) for k, x in rest_a.items()]
    else:
        in_a = _tail_tasks(a, first, per, phases)
        in_b = _tail_tasks(b, first + per, 0, phases)
        if in_a.keys() != in_b.keys():
            return math.inf
        ends_a, ends_b = a.timeline.end, b.timeline.end
        gaps = [abs(ends_b[in_b[k]] - ends_a[i] - delta) for k, i in in_a.items()]
    return relative_drift(max(gaps, default=0.0), delta, b.step_time_s)


def _extend(a: StepResult, b: StepResult, n: int, per: int) -> StepResult:
    """``b`` extended to ``n`` micro-batches by repeating its last period."""
    k = (n - b.num_microbatches) // per
    busy = tuple(y + k * (y - x) for x, y in zip(a.stage_busy_s, b.stage_busy_s, strict=True))
    return replace(b, step_time_s=b.step_time_s + k * (b.step_time_s - a.step_time_s),
                   breakdown_s=extend_breakdown(a.breakdown_s, b.breakdown_s, k),
                   stage_busy_s=busy, num_microbatches=n, extension="periodic")


def simulate_step(graph: TrainingGraph, compute: ComputeModel, network: NetworkModel,
                  timings: dict[tuple[int, str], ChunkTiming] | None = None, *,
                  exact: bool = False,
                  executor: Callable[[Sequence[Task]], Timeline] = execute_in_order
                  ) -> StepResult:
    """Run one training step of ``graph`` and attribute the critical stage's time.

    ``timings`` (per virtual stage and phase ``"F"``/``"B"`` (/``"W"``)) replaces the
    simulated chunk passes, e.g. to check schedules against hand-computed timelines.
    ``exact``: run every micro-batch (for full timelines) instead of extending a periodic
    steady state (same step time). ``executor``: the task runner (the SimPy
    :func:`~codesign.engine.executor.execute` gives the same result, slower).
    """
    with no_cyclic_gc():
        return _simulate_step(graph, compute, network, timings, exact, executor)


def _simulate_step(graph: TrainingGraph, compute: ComputeModel, network: NetworkModel,
                   timings: dict[tuple[int, str], ChunkTiming] | None, exact: bool,
                   executor: Callable[[Sequence[Task]], Timeline]) -> StepResult:
    if timings is None:
        timings = time_chunks(graph, compute, network)
    shape = step_shape(graph, network)
    n, per = shape.num_microbatches, period(shape.schedule, shape.pp)

    def run(count: int) -> StepResult:
        return _run(build_step_program(shape.with_microbatches(count)), timings, compute,
                    network, executor)

    pairs: dict[int, StepResult] = {}

    def sample(count: int) -> StepResult:  # with the next period's, side by side
        if count not in pairs:
            counts = (count, count + per)
            pairs.update(zip(counts, _run_vectors([shape.with_microbatches(k) for k in counts],
                                                  timings, compute, network), strict=True))
        return pairs[count]

    if not exact:
        vector = executor is execute_in_order and vector_eligible(shape, timings)
        extended = extend_steady_state(
            shape, sample if vector else run,
            lambda a, b: _drift(a, b, per, shape.schedule, shape.pp),
            lambda a, b, count: _extend(a, b, count, per),
            lambda r, how: replace(r, extension=how))
        if extended is not None:
            return extended
        if vector:  # fewer micro-batches than two samples: run them all, on arrays too
            return _run_vectors([shape], timings, compute, network)[0]
    return run(n)


def _local_params(ch: ChunkGraph, zero: int, dense_n: int, expert_n: int) -> float:
    """Parameters whose optimizer update this rank performs."""
    if zero == 0:
        return ch.dense_params + ch.expert_params
    return ch.dense_params / dense_n + ch.expert_params / expert_n


def _gather_time(comm: Callable[[str, str, float], float], dense_grp: str, dense: float,
                 expert_grp: str, expert: float) -> float:
    """All-gather of one bucket of bf16 parameters (dense and expert parts), seconds."""
    t = comm("all_gather", dense_grp, dense * PARAM_BYTES)
    if expert:
        t += comm("all_gather", expert_grp, expert * PARAM_BYTES)
    return t
