"""Timing of one chunk pass (one virtual stage, one micro-batch, forward or backward).

Operators become tasks on the rank's compute stream and one stream per communication group
kind, wired by the overlap rule of each collective (see :data:`codesign.workload.ops.Overlap`),
then run by :func:`codesign.engine.executor.execute`. Micro-batches of one chunk are identical,
so each distinct chunk pass is simulated once and reused by the pipeline.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from codesign.engine.executor import COMM_PREFIX, Task, Timeline, attribute, execute
from codesign.ir import GROUP_STREAM, Op


@dataclass(frozen=True)
class ChunkTiming:
    """Result of one chunk pass. Times in seconds from the pass's start."""

    compute_time: float  # when the compute stream is done (the pipeline's task duration)
    makespan: float  # when every stream is done
    breakdown: tuple[tuple[str, float], ...]  # of [0, compute_time]; sums to compute_time
    layer_done: tuple[tuple[int, float], ...]  # layer -> end of its last compute op
    tail: tuple[tuple[str, float], ...]  # comm category -> time still running after compute
    timeline: Timeline


def comm_category(group: str | None) -> str:
    return COMM_PREFIX + GROUP_STREAM.get(group or "", "dp")


def op_tasks(ops: Sequence[Op], compute_time: Callable[[Op], float],
             comm_time: Callable[[Op], float]) -> list[Task]:
    """Tasks for a chunk's operators, wired by each collective's overlap rule."""
    tasks: list[Task] = []
    prev = prev2 = -1  # last and second-to-last compute task
    pending: list[int] = []  # comms the next compute op waits for
    deferred: list[int] = []  # comms the compute op after next waits for
    for op in ops:
        tid = len(tasks)
        if op.kind != "comm":
            deps = tuple(pending)
            pending, deferred = deferred, []
            tasks.append(Task(tid, "compute", compute_time(op), deps, op.name, op.category,
                              meta=(("layer", op.layer),)))
            prev2, prev = prev, tid
            continue
        dur = comm_time(op)
        if op.overlap == "prev":
            deps = (prev2,) if prev2 >= 0 else ()
            pending.append(tid)
        elif op.overlap == "next":
            deps = (prev,) if prev >= 0 else ()
            deferred.append(tid)
        elif op.overlap == "prefetch":
            deps = ()
            pending.append(tid)
        elif op.overlap == "async":
            deps = (prev,) if prev >= 0 else ()
        else:  # blocking: also after blocking collectives it consumes (dispatch -> gather)
            deps = ((prev,) if prev >= 0 else ()) + tuple(pending)
            pending.append(tid)
        tasks.append(Task(tid, op.stream, dur, deps, op.name,
                          comm_category(op.group), meta=(("layer", op.layer),)))
    return tasks


def time_chunk(ops: Sequence[Op], compute_time: Callable[[Op], float],
               comm_time: Callable[[Op], float],
               executor: Callable[[Sequence[Task]], Timeline] = execute) -> ChunkTiming:
    """Simulate one chunk pass and summarize it. ``executor`` runs the tasks:
    :func:`~codesign.engine.executor.execute` (SimPy) or the equivalent one-pass
    :func:`~codesign.engine.executor.execute_in_order` (same timeline, faster)."""
    tasks = op_tasks(ops, compute_time, comm_time)
    tl = executor(tasks)
    compute_end = max((tl.end[t.id] for t in tasks if t.stream == "compute"), default=0.0)
    parts = attribute(tl, "compute", compute_end)
    layer_done: dict[int, float] = {}
    tail: dict[str, float] = {}
    for t in tasks:
        layer = dict(t.meta).get("layer", -1)
        if t.stream == "compute":
            layer_done[layer] = max(layer_done.get(layer, 0.0), tl.end[t.id])
        elif tl.end[t.id] > compute_end:
            tail[t.category] = max(tail.get(t.category, 0.0), tl.end[t.id] - compute_end)
    return ChunkTiming(
        compute_time=compute_end, makespan=tl.makespan,
        breakdown=tuple(sorted(parts.items())), layer_done=tuple(sorted(layer_done.items())),
        tail=tuple(sorted(tail.items())), timeline=tl)
