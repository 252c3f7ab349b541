"""Simulate one training step: representative ranks (one per pipeline stage), their compute,
pipeline send, and data-parallel streams, under the plan's pipeline schedule.

Symmetry: every rank of a stage (across TP, CP, EP and DP) runs the same operators on the same
amount of data, so one representative per stage is simulated and each collective is priced from
its group's placement on the topology. Simulation cost grows with pipeline depth and
micro-batches, not with the GPU count.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace

from codesign.engine.chunk import ChunkTiming, comm_category, time_chunk
from codesign.engine.executor import Task, Timeline, attribute, execute
from codesign.hardware.compute import ComputeModel
from codesign.ir import Op
from codesign.network.model import NetworkModel
from codesign.workload.dims import pipeline_message
from codesign.workload.schedules import schedule
from codesign.workload.training import (
    ADAM_BYTES_PER_PARAM,
    ChunkGraph,
    TrainingGraph,
    state_groups,
)

GRAD_REDUCE_BYTES = 4.0  # Megatron reduces fp32 main gradients (ZeRO 0-2)
PARAM_BYTES = 2.0  # bf16 working weights are gathered


@dataclass(frozen=True)
class StepResult:
    """Outcome of one simulated training step (seconds)."""

    step_time_s: float
    breakdown_s: dict[str, float]  # critical stage; sums to step_time_s
    critical_stage: int
    stage_busy_s: tuple[float, ...]  # compute-stream busy time per stage
    timeline: Timeline = field(repr=False)
    chunk_timings: dict[tuple[int, str], ChunkTiming] = field(repr=False)



def pipeline_send_seconds(network: NetworkModel,
                          message: tuple[float, float]) -> tuple[float, float]:
    """``(seconds of one pipeline send, seconds of the receiver's TP all-gather)`` for a
    message ``(bytes per sending rank, bytes all-gathered over TP at the receiver)``
    (:func:`codesign.workload.dims.pipeline_message`); the gather is 0 when there is none.
    The receiver runs the gather on its compute stream before the pass that needs it."""
    send, gathered = message
    gather = network.collective("all_gather", "tp", gathered).time_s if gathered else 0.0
    return network.collective("p2p", "pp", send).time_s, gather

def _ops_key(ops: tuple[Op, ...]) -> Hashable:
    return tuple((o.name, o.category, o.flops, o.bytes, o.size, o.group, o.mnk) for o in ops)


def time_chunks(graph: TrainingGraph, compute: ComputeModel,
                network: NetworkModel) -> dict[tuple[int, str], ChunkTiming]:
    """Timing of every (virtual stage, phase); identical chunk passes are simulated once."""

    def comm_time(op: Op) -> float:
        return network.collective(op.comm or "none", op.group or "dp", op.size).time_s

    memo: dict[Hashable, tuple[ChunkTiming, tuple[int, ...]]] = {}
    out: dict[tuple[int, str], ChunkTiming] = {}
    for c in graph.chunks:
        for phase, ops in (("F", c.forward), ("B", c.backward)):
            key = _ops_key(ops)
            if key not in memo:
                memo[key] = (time_chunk(ops, compute.time, comm_time), c.layers)
            timing, layers = memo[key]
            if layers != c.layers:  # same operators on other layers: rename the layers
                rename = dict(zip(layers, c.layers, strict=True))
                timing = replace(timing, layer_done=tuple(
                    (rename.get(layer, layer), t) for layer, t in timing.layer_done))
            out[(c.virtual_stage, phase)] = timing
    return out


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


def simulate_step(graph: TrainingGraph, compute: ComputeModel, network: NetworkModel,
                  timings: dict[tuple[int, str], ChunkTiming] | None = None) -> StepResult:
    """Run one training step of ``graph`` and attribute the critical stage's time.

    ``timings`` (per virtual stage and phase ``"F"``/``"B"``) replaces the simulated chunk
    passes, e.g. to check schedules against hand-computed timelines.
    """
    run = graph.run
    p = run.parallel
    pp, vpp = p.pp, p.vpp
    n_v = pp * vpp
    if timings is None:
        timings = time_chunks(graph, compute, network)
    by_v = {c.virtual_stage: c for c in graph.chunks}
    zero = p.sharding_stage
    dense_grp, expert_grp = state_groups(p)
    dense_n = network.group_size(dense_grp)
    expert_n = network.group_size(expert_grp)

    p2p, gather = pipeline_send_seconds(network, pipeline_message(run)) if pp > 1 else (0., 0.)

    def comm(kind: str, group: str, size: float) -> float:
        return network.collective(kind, group, size).time_s

    b = TaskBuilder()
    def received(ph: str, mb: int, v: int, stream: str) -> Hashable:
        """What a pass waits for from the neighbouring stage's send of pass (ph, mb, v): the
        send, or the all-gather of its pieces on the receiver's ``stream``."""
        send = ("PF" if ph == "F" else "PB", mb, v)
        if not gather:
            return send
        return b.add(("PG", *send), stream, gather, (send,), name=f"gather_{send[0]}{mb}",
                     category=comm_category("pp"))

    orders = schedule(p.pipeline_schedule, pp, vpp, graph.num_microbatches)
    sync_grads = zero < 3 and (dense_n > 1 or expert_n > 1)
    gather_params = zero in (1, 2) and (dense_n > 1 or expert_n > 1)

    for stage in range(pp):
        cs, dps = f"s{stage}/compute", f"s{stage}/dp"
        # a blocking send holds the sending stage's compute stream (Megatron-LM 2021-22)
        send_f, send_b = (cs, cs) if not p.overlap_p2p else (f"s{stage}/send_fwd",
                                                             f"s{stage}/send_bwd")
        chunks = [by_v[c * pp + stage] for c in range(vpp)]
        # ZeRO-1/2: this step's parameters were all-gathered after the last optimizer step;
        # overlapped (Megatron --overlap-param-gather), the gather runs in per-layer buckets at
        # the start and each chunk's first forward waits for its first bucket
        first_bucket: dict[int, Hashable] = {}
        if gather_params and p.overlap_param_gather:
            for c, ch in enumerate(chunks):
                # keyed by position: the embedding and the LM head both have layer -1
                for i, (layer, dense, expert) in enumerate(ch.layer_params):
                    k = b.add(("AG", stage, c, i), dps,
                              _gather_time(comm, dense_grp, dense, expert_grp, expert),
                              name=f"param_gather.l{layer}", category=comm_category("dp"))
                    first_bucket.setdefault(c, k)
        first_f: set[int] = set()
        tails: list[Hashable] = []
        last_b: dict[int, tuple[str, int, int]] = {}
        for ph, mb, c in orders[stage]:
            v = c * pp + stage
            key = (ph, mb, v)
            t = timings[(v, ph)]
            deps: list[Hashable] = []
            if ph == "F":
                if v > 0:
                    deps.append(("F", mb, v - 1) if (v - 1) % pp == stage
                                else received("F", mb, v - 1, cs))
                if c not in first_f:
                    first_f.add(c)
                    if c in first_bucket:
                        deps.append(first_bucket[c])
            else:
                if v < n_v - 1:
                    deps.append(("B", mb, v + 1) if (v + 1) % pp == stage
                                else received("B", mb, v + 1, cs))
                last_b[c] = key
            b.add(key, cs, t.compute_time, tuple(deps), name=f"{ph}{mb}.v{v}",
                  category="forward" if ph == "F" else "backward", breakdown=t.breakdown)
            for cat, dt in t.tail:  # collectives still running when compute is done
                tails.append(b.add(("TAIL", key, cat), f"s{stage}/{cat}", dt, (key,),
                                   name=f"tail.{ph}{mb}.v{v}", category=cat))
            if ph == "F" and v < n_v - 1 and (v + 1) % pp != stage:
                b.add(("PF", mb, v), send_f, p2p, (key,), name=f"send_fwd{mb}",
                      category=comm_category("pp"))
            if ph == "B" and v > 0 and (v - 1) % pp != stage:
                b.add(("PB", mb, v), send_b, p2p, (key,), name=f"send_bwd{mb}",
                      category=comm_category("pp"))
        last_compute = orders[stage][-1]
        last_key = (last_compute[0], last_compute[1], last_compute[2] * pp + stage)
        grad_keys: list[Hashable] = []
        if sync_grads:
            kind = "all_reduce" if zero == 0 else "reduce_scatter"
            position = {key: i for i, key in enumerate(orders[stage])}
            buckets = []
            for c, ch in enumerate(chunks):
                t_b = timings[(ch.virtual_stage, "B")]
                done_at = dict(t_b.layer_done)
                for i, (layer, dense, expert) in enumerate(ch.layer_params):
                    at = done_at.get(layer, t_b.compute_time)
                    ph, mb, v = last_b[c]
                    buckets.append((position[(ph, mb, c)], at, c, i, layer, dense, expert))
            # buckets enter the stream in the order backward releases them
            for _, at, c, i, layer, dense, expert in sorted(buckets):
                dur = (comm(kind, dense_grp, dense * GRAD_REDUCE_BYTES)
                       + (comm(kind, expert_grp, expert * GRAD_REDUCE_BYTES) if expert else 0.0))
                k = ("GR", stage, c, i)
                if p.overlap_grad_reduce:
                    b.add(k, dps, dur, (), name=f"grad_reduce.l{layer}",
                          category=comm_category("dp"), start_after=((last_b[c], at),))
                else:
                    b.add(k, dps, dur, (last_key,), name=f"grad_reduce.l{layer}",
                          category=comm_category("dp"))
                grad_keys.append(k)
        opt_params = sum(_local_params(ch, zero, dense_n, expert_n) for ch in chunks)
        opt_time = compute.time(Op(name="optimizer", kind="memory", category="optimizer",
                                   layer=-1, bytes=opt_params * ADAM_BYTES_PER_PARAM))
        b.add(("OPT", stage), cs, opt_time, (last_key, *grad_keys, *tails), name="optimizer",
              category="optimizer")
        if gather_params and not p.overlap_param_gather:
            for c, ch in enumerate(chunks):
                for i, (layer, dense, expert) in enumerate(ch.layer_params):
                    b.add(("AG", stage, c, i), dps,
                          _gather_time(comm, dense_grp, dense, expert_grp, expert),
                          (("OPT", stage),), name=f"param_gather.l{layer}",
                          category=comm_category("dp"))

    tasks, _ = b.tasks()
    tl = execute(tasks)
    step = tl.makespan
    stage_end = [0.0] * pp
    busy = [0.0] * pp
    for task in tasks:
        s = int(task.stream[1:].split("/")[0])
        stage_end[s] = max(stage_end[s], tl.end[task.id])
        if task.stream.endswith("/compute"):
            busy[s] += task.duration
    crit = max(range(pp), key=lambda s: (stage_end[s], s))
    parts = attribute(tl, f"s{crit}/compute", step)
    return StepResult(step_time_s=step, breakdown_s=parts, critical_stage=crit,
                      stage_busy_s=tuple(busy), timeline=tl, chunk_timings=timings)


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
