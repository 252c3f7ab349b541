"""Identical micro-batches in the per-rank engine: the symmetric engine's approach
(:mod:`codesign.engine.training`) applied to the expanded pipeline.

A step of ``n`` micro-batches is run at two shorter counts ``n_a`` and ``n_a + period`` with
the same remainder (:func:`~codesign.workload.step_program.sample_counts`). When every task of
the shorter run from its last steady period on (the passes of that period, the cool-down,
gradient buckets, the optimizer and the gathers after it, for every replica class and every
cross-class barrier) ends one period's shift later in the longer run (its class's own shift
before the step's data-parallel barriers, ``Δ = step(b) - step(a)`` after them; see
:func:`drift`), and the critical cluster is the same, the step is periodic from there and
is extended to ``n`` micro-batches: step time, breakdown, per-rank finish and busy times grow by
their per-period growth per extra period. Task timelines are those of the longer run;
``tasks`` counts its tasks.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from codesign.engine.expanded.values import ExpandedResult
from codesign.engine.steady import extend_breakdown, relative_drift
from codesign.workload.schedules import inflight_window, tail_phases
from codesign.workload.step_program import Node, StepProgram


@dataclass(frozen=True)
class PipelineRun:
    """One run of the expanded pipeline: its result, program and the symbolic key of every
    task (as :class:`~codesign.engine.expanded.wiring.ProgramWiring` adds them, by task id)."""

    result: ExpandedResult
    program: StepProgram
    keys: Sequence[Hashable]
    class_ranks: Sequence[np.ndarray]  # the ranks of each replica class
    contention: bool

    @property
    def num_microbatches(self) -> int:
        return self.program.shape.num_microbatches


def _node_key(node: Node, shift: int) -> Hashable:
    mb = node.mb + shift if node.mb >= 0 else -1
    return (node.kind, node.stage, node.phase, mb, node.v, node.layer, node.bucket)


def _task_key(key: Hashable, nodes: Sequence[Node], shift: int) -> tuple[Hashable, Node]:
    """A task's key with its node's id replaced by what the node is (micro-batch shifted by
    ``shift``), so that tasks of runs with different micro-batch counts can be matched."""
    assert isinstance(key, tuple)
    head = key[0]
    if isinstance(head, int):
        if key[1] == "TAIL":  # (class, "TAIL", node, category)
            node = nodes[key[2]]
            return ("TAIL", head, _node_key(node, shift), key[3]), node
        node = nodes[key[1]]  # (class, node)
        return ("T", head, _node_key(node, shift)), node
    if head in ("SYNC", "GO"):  # (tag, node)
        node = nodes[key[1]]
        return (head, _node_key(node, shift)), node
    node = nodes[key[2]]  # ("ARR" | "PART" | "HOLD", class, node)
    return (head, key[1], _node_key(node, shift)), node


def _after_barrier(run: PipelineRun) -> list[bool]:
    """Per task: whether it waits (through dependencies, offsets or its stream) for a
    data-parallel barrier across replica classes, the pre-step parameter gathers apart (they
    do not depend on the micro-batch count)."""
    tl, nodes = run.result.timeline, run.program.nodes
    n = len(tl.tasks)
    refs: list[set[int]] = []
    children: list[list[int]] = [[] for _ in range(n)]
    for t in tl.tasks:
        r = {*t.deps, *(d for d, _ in t.start_after)}
        if tl.stream_prev[t.id] >= 0:
            r.add(tl.stream_prev[t.id])
        refs.append(r)
        for d in r:
            children[d].append(t.id)
    after = [False] * n
    waits = [len(r) for r in refs]
    queue = [i for i in range(n) if not waits[i]]
    while queue:  # topological order
        i = queue.pop()
        key = run.keys[i]
        assert isinstance(key, tuple)
        if key[0] in ("SYNC", "GO"):
            node = nodes[key[1]]
            after[i] = not (node.kind == "param_gather" and not node.deps)
        after[i] = after[i] or any(after[d] for d in refs[i])
        for c in children[i]:
            waits[c] -= 1
            if not waits[c]:
                queue.append(c)
    return after


def drift(a: PipelineRun, b: PipelineRun, per: int) -> float:
    """How far ``b`` (``per`` more micro-batches) is from ``a`` with one more steady period,
    relative to the period's ``Δ`` (:func:`~codesign.engine.steady.extend_steady_state`; 0
    within rounding, ``inf`` when the tasks differ).

    Replica classes run their passes independently until the data-parallel barriers at the
    step's end, so each class ``k`` may shift by its own ``Δ_k`` per period: every checked
    task (from ``a``'s trailing in-flight window of micro-batches on) that waits for no
    barrier must end ``Δ_k`` later in ``b``, and every task after a barrier, and the step,
    ``Δ = max Δ_k`` later. An end time is a maximum of sums of such terms (exact executor),
    convex in the number of extra periods with slopes among the ``Δ_k``; growing by the
    largest slope from ``a`` to ``b`` it grows by it for every further period, so the
    extension is exact. Under contention (not a max-plus system) every class must shift by
    the same ``Δ`` exactly. A rank must finish ``Δ`` later if its class waits for a barrier,
    else ``Δ_k`` later.
    """
    ra, rb = a.result, b.result
    delta = rb.step_time_s - ra.step_time_s
    if ra.critical_stage != rb.critical_stage:
        return math.inf
    nodes_b = b.program.nodes
    ends_b = {_task_key(key, nodes_b, 0)[0]: rb.timeline.end[i] for i, key in enumerate(b.keys)}
    shape = a.program.shape
    first = a.num_microbatches - inflight_window(shape.schedule, shape.pp)
    phases = tail_phases(shape.schedule)
    nodes_a = a.program.nodes
    after = _after_barrier(a)
    class_shift: dict[int, list[float]] = {}
    barrier_shift: list[float] = []
    waits = np.zeros(len(a.class_ranks), dtype=bool)  # class k waits for a barrier
    for i, key in enumerate(a.keys):
        shifted, node = _task_key(key, nodes_a, per)
        if after[i] and isinstance(shifted, tuple) and len(shifted) > 1 \
                and isinstance(shifted[1], int):
            waits[shifted[1]] = True
        if 0 <= node.mb < first or (node.kind == "param_gather" and not node.deps):
            continue  # warm-up and steady periods before the last; gathers before the step
        if node.mb >= 0 and node.phase not in phases:
            continue
        other = ends_b.get(shifted)
        if other is None:
            return math.inf
        d = other - ra.timeline.end[i]
        if after[i]:
            barrier_shift.append(d)
        else:
            assert isinstance(shifted, tuple) and isinstance(shifted[1], int)
            class_shift.setdefault(shifted[1], []).append(d)
    per_class = {k: v[0] for k, v in class_shift.items()}
    gaps = [abs(max(per_class.values(), default=delta) - delta)]
    if a.contention:
        gaps += [abs(x - delta) for x in per_class.values()]
    gaps += [abs(d - per_class[k]) for k, v in class_shift.items() for d in v]
    gaps += [abs(d - delta) for d in barrier_shift]
    for k, ranks in enumerate(a.class_ranks):
        want = delta if waits[k] or k not in per_class else per_class[k]
        gaps.append(float(np.max(np.abs(rb.rank_finish_s[ranks] - ra.rank_finish_s[ranks]
                                        - want), initial=0.0)))
    out = relative_drift(max(gaps), delta, rb.step_time_s)
    return out if out == 0.0 or not a.contention else math.inf


def extend(a: PipelineRun, b: PipelineRun, n: int, per: int) -> ExpandedResult:
    """``b`` extended to ``n`` micro-batches by repeating its last period."""
    ra, rb = a.result, b.result
    k = (n - b.num_microbatches) // per
    return replace(
        rb, step_time_s=rb.step_time_s + k * (rb.step_time_s - ra.step_time_s),
        breakdown_s=extend_breakdown(ra.breakdown_s, rb.breakdown_s, k),
        rank_finish_s=rb.rank_finish_s + k * (rb.rank_finish_s - ra.rank_finish_s),
        rank_busy_s=rb.rank_busy_s + k * (rb.rank_busy_s - ra.rank_busy_s),
        num_microbatches=n, extension="periodic")
