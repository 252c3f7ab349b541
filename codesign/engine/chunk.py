"""Timing of one chunk pass (one virtual stage, one micro-batch, forward or backward).

Operators become tasks on the rank's compute stream and one stream per communication group
kind, wired by the overlap rule of each collective
(:func:`codesign.workload.step_program.wire_pass`, stated once for every consumer),
then run by :func:`codesign.engine.executor.execute`. Micro-batches of one chunk are identical,
so each distinct chunk pass is simulated once and reused by the pipeline.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from codesign.engine.executor import COMM_PREFIX, Task, Timeline, attribute, execute
from codesign.ir import GROUP_STREAM, Op
from codesign.workload.step_program import wire_pass


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
    """Tasks for a chunk's operators, wired by each collective's overlap rule
    (:func:`codesign.workload.step_program.wire_pass`)."""
    tasks: list[Task] = []
    for tid, (op, deps) in enumerate(zip(ops, wire_pass(ops), strict=True)):
        if op.kind != "comm":
            tasks.append(Task(tid, "compute", compute_time(op), deps, op.name, op.category,
                              meta=(("layer", op.layer),)))
        else:
            tasks.append(Task(tid, op.stream, comm_time(op), deps, op.name,
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
