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
from typing import Any

from codesign.engine.executor import COMM_PREFIX, HOST, Task, Timeline, attribute, execute
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
             comm_time: Callable[[Op], float],
             host_time: Callable[[Op], float] | None = None) -> list[Task]:
    """Tasks for a chunk's operators, wired by each collective's overlap rule
    (:func:`codesign.workload.step_program.wire_pass`).

    With ``host_time`` each compute operator is issued first by a task on the :data:`HOST`
    stream (in program order, ``host_time(op)`` seconds) and starts no earlier than its
    issue: a pass is host-bound when its kernels run faster than the host launches them.
    After an operator marked ``host_sync`` the host issues nothing until it has finished (the
    host reads a device-to-host copy), so the queue of work issued ahead drains there. Up to
    its first synchronization a pass whose host keeps up with it does not wait at all: the
    host ran ahead during the earlier passes (:func:`host_ahead`); otherwise its first
    kernel was issued while the previous pass ran and the rest as the host issues them.
    Collectives keep the overlap rule's timing (a prefetch is issued ahead, as the
    frameworks' hooks issue it); they follow their compute dependencies, which the host
    issued. Each task's ``meta`` holds its operator's index (``op``)."""
    wiring = wire_pass(ops)
    tasks: list[Task] = []
    busy = [compute_time(op) if op.kind != "comm" else 0.0 for op in ops]
    if host_time is None:  # no host tasks: task ids are operator indices
        issue_s, ahead = busy, len(ops)
    else:
        issue_s = [host_time(op) if op.kind != "comm" else 0.0 for op in ops]
        ahead = host_ahead(ops, busy, issue_s)
    task_of: list[int] = []
    wait = -1  # the task of the last host-synchronizing operator
    first = next((i for i, op in enumerate(ops) if op.kind != "comm"), -1)
    for i, (op, deps) in enumerate(zip(ops, wiring, strict=True)):
        mine = tuple(task_of[d] for d in deps)
        if op.kind != "comm" and i >= ahead:
            issue = len(tasks)
            # the first kernel was issued while the previous pass ran
            tasks.append(Task(issue, HOST, 0.0 if i == first else issue_s[i],
                              (wait,) if wait >= 0 else (), "issue " + op.name, HOST,
                              meta=(("layer", op.layer), ("op", i))))
            mine = (*mine, issue)
        task_of.append(len(tasks))
        tasks.append(_op_task(len(tasks), i, op, mine, busy[i], comm_time))
        if op.host_sync:
            wait = task_of[-1]
    return tasks


def host_ahead(ops: Sequence[Op], busy: Sequence[float], issue_s: Sequence[float]) -> int:
    """How many leading operators of a pass run without waiting for their issue: up to and
    including its first host synchronization when the host issues that stretch faster than
    the GPU runs it (then the host ran ahead during earlier passes, and kept the lead), else
    none. ``busy``/``issue_s``: each operator's GPU and host seconds."""
    stop, ahead = lead(ops, busy, issue_s)
    return stop if ahead else 0


def lead(ops: Sequence[Op], busy: Sequence[Any], issue_s: Sequence[float]) -> tuple[int, Any]:
    """The stretch the host may have issued ahead (:func:`lead_end`) and whether it did:
    whether the host issues it no slower than the GPU runs it. ``busy`` entries may be arrays
    (one value per rank of a batch): the answer is then one per rank."""
    stop = lead_end(ops)
    return stop, sum(issue_s[:stop]) <= sum(busy[:stop])


def lead_end(ops: Sequence[Op]) -> int:
    """Index after a pass's first host synchronization (its length when it has none): the
    stretch the host may have issued ahead (:func:`host_ahead`)."""
    return next((i + 1 for i, op in enumerate(ops) if op.host_sync), len(ops))


def _op_task(tid: int, i: int, op: Op, deps: Sequence[int], busy_s: float,
             comm_time: Callable[[Op], float]) -> Task:
    meta = (("layer", op.layer), ("op", i))
    if op.kind != "comm":
        return Task(tid, "compute", busy_s, tuple(deps), op.name, op.category, meta=meta)
    return Task(tid, op.stream, comm_time(op), tuple(deps), op.name,
                comm_category(op.group), meta=meta)


def time_chunk(ops: Sequence[Op], compute_time: Callable[[Op], float],
               comm_time: Callable[[Op], float],
               executor: Callable[[Sequence[Task]], Timeline] = execute,
               host_time: Callable[[Op], float] | None = None) -> ChunkTiming:
    """Simulate one chunk pass and summarize it. ``executor`` runs the tasks:
    :func:`~codesign.engine.executor.execute` (SimPy) or the equivalent one-pass
    :func:`~codesign.engine.executor.execute_in_order` (same timeline, faster);
    ``host_time``: the host's issue of each operator (:func:`op_tasks`)."""
    tasks = op_tasks(ops, compute_time, comm_time, host_time)
    tl = executor(tasks)
    compute_end = max((tl.end[t.id] for t in tasks if t.stream == "compute"), default=0.0)
    parts = attribute(tl, "compute", compute_end)
    layer_done: dict[int, float] = {}
    tail: dict[str, float] = {}
    for t in tasks:
        layer = dict(t.meta).get("layer", -1)
        if t.stream == "compute":
            layer_done[layer] = max(layer_done.get(layer, 0.0), tl.end[t.id])
        elif t.stream != HOST and tl.end[t.id] > compute_end:
            tail[t.category] = max(tail.get(t.category, 0.0), tl.end[t.id] - compute_end)
    return ChunkTiming(
        compute_time=compute_end, makespan=tl.makespan,
        breakdown=tuple(sorted(parts.items())), layer_done=tuple(sorted(layer_done.items())),
        tail=tuple(sorted(tail.items())), timeline=tl)
