"""Discrete-event execution of task graphs on in-order streams (SimPy).

A :class:`Task` runs on one stream (a rank's compute stream, a communication stream ...);
streams execute their tasks in the given order, one at a time; a task starts when its stream
is free, every dependency has finished, and every ``start_after`` (task, offset) pair is met
(``offset`` seconds after that task *started*, used for gradient buckets released during a
backward pass). The result is an immutable :class:`Timeline`; nothing here does I/O.
"""

from __future__ import annotations

import itertools
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

import simpy

COMM_PREFIX = "comm:"


@dataclass(frozen=True)
class Task:
    """One unit of work. ``duration`` in seconds; ``breakdown`` optionally splits it by
    category (values sum to ``duration``) for composite tasks such as a whole chunk."""

    id: int
    stream: str
    duration: float
    deps: tuple[int, ...] = ()
    name: str = ""
    category: str = ""
    start_after: tuple[tuple[int, float], ...] = ()
    breakdown: tuple[tuple[str, float], ...] = ()
    meta: tuple[tuple[str, Any], ...] = field(default=(), compare=False)

    @property
    def is_comm(self) -> bool:
        return self.category.startswith(COMM_PREFIX)


@dataclass(frozen=True)
class Timeline:
    """Start/end (seconds) of every task, by task id, and what released each task last."""

    tasks: tuple[Task, ...]
    start: tuple[float, ...]
    end: tuple[float, ...]
    binding: tuple[int, ...]  # id of the dependency that released the task; -1: its stream
    stream_prev: tuple[int, ...]  # previous task on the same stream; -1 for the first

    @property
    def makespan(self) -> float:
        return max(self.end, default=0.0)

    def stream_tasks(self, stream: str) -> list[Task]:
        return [t for t in self.tasks if t.stream == stream]


class ScheduleDeadlock(RuntimeError):
    """The task graph has a cycle or a dependency that can never run."""


def execute(tasks: Sequence[Task]) -> Timeline:
    """Run ``tasks`` (ids ``0..n-1``; each stream's tasks in program order) to completion."""
    n = len(tasks)
    for i, t in enumerate(tasks):
        if t.id != i:
            raise ValueError(f"task ids must be 0..n-1 in order; task {i} has id {t.id}")
    env = simpy.Environment()
    done = [env.event() for _ in range(n)]
    # start events only for tasks that another task is released from
    watched = {d for t in tasks for d, _ in t.start_after}
    started = {i: env.event() for i in watched}
    start = [float("nan")] * n
    end = [float("nan")] * n
    binding = [-1] * n
    streams: dict[str, list[Task]] = {}
    for t in tasks:
        streams.setdefault(t.stream, []).append(t)

    def run_stream(queue: list[Task]) -> Generator[Any, Any, None]:
        for t in queue:
            for d in t.deps:
                if not done[d].triggered:
                    yield done[d]
            for d, _ in t.start_after:
                if not started[d].triggered:
                    yield started[d]
            ready = env.now
            if t.start_after:
                release = max(start[d] + off for d, off in t.start_after)
                if release > ready:
                    yield env.timeout(release - ready)
            # which dependency released this task (for breakdown attribution)
            best, best_t = -1, -1.0
            for d in t.deps:
                if end[d] > best_t:
                    best, best_t = d, end[d]
            for d, off in t.start_after:
                if start[d] + off > best_t:
                    best, best_t = d, start[d] + off
            prev_end = end[queue_prev[t.id]] if queue_prev[t.id] >= 0 else 0.0
            binding[t.id] = best if best_t > prev_end else -1
            start[t.id] = env.now
            if t.id in started:
                started[t.id].succeed()
            if t.duration > 0:
                yield env.timeout(t.duration)
            end[t.id] = env.now
            done[t.id].succeed()

    queue_prev = [-1] * n
    for queue in streams.values():
        for a, b in itertools.pairwise(queue):
            queue_prev[b.id] = a.id
    for queue in streams.values():
        env.process(run_stream(queue))
    env.run()
    missing = [t.name or str(t.id) for t in tasks if end[t.id] != end[t.id]]
    if missing:
        raise ScheduleDeadlock(f"{len(missing)} tasks never ran (first: {missing[0]})")
    return Timeline(tuple(tasks), tuple(start), tuple(end), tuple(binding), tuple(queue_prev))


def execute_in_order(tasks: Sequence[Task]) -> Timeline:
    """Same result as :func:`execute` for task lists whose dependencies (``deps`` and
    ``start_after``) all point to earlier tasks, as :func:`codesign.engine.chunk.op_tasks`
    produces: one pass in list order, no event queue. Other lists go to :func:`execute`.

    Start times follow the engine's arithmetic exactly (``ready + (release - ready)`` for a
    ``start_after`` release, ``start + duration`` for the end), so timelines are bit-identical.
    """
    for i, t in enumerate(tasks):
        if t.id != i or any(d >= i for d in t.deps) or any(d >= i for d, _ in t.start_after):
            return execute(tasks)
    n = len(tasks)
    start = [0.0] * n
    end = [0.0] * n
    binding = [-1] * n
    stream_prev = [-1] * n
    last: dict[str, int] = {}
    for t in tasks:
        i = t.id
        p = last.get(t.stream, -1)
        last[t.stream] = i
        stream_prev[i] = p
        prev_end = end[p] if p >= 0 else 0.0
        now = prev_end
        best, best_t = -1, -1.0
        for d in t.deps:
            e = end[d]
            if e > now:
                now = e
            if e > best_t:
                best, best_t = d, e
        if t.start_after:
            release = -1.0
            for d, off in t.start_after:
                s = start[d]
                if s > now:
                    now = s
                r = s + off
                if r > release:
                    release = r
                if r > best_t:
                    best, best_t = d, r
            if release > now:
                now = now + (release - now)
        binding[i] = best if best_t > prev_end else -1
        start[i] = now
        end[i] = now + t.duration if t.duration > 0 else now
    return Timeline(tuple(tasks), tuple(start), tuple(end), tuple(binding), tuple(stream_prev))


def attribute(tl: Timeline, stream: str, until: float | None = None) -> dict[str, float]:
    """Split ``[0, until]`` of one stream into categories; the values sum to ``until``.

    Busy time goes to each task's category (or its ``breakdown``). An idle gap goes to the
    communication that the stream was waiting for while it ran (``comm:<kind>``), and the
    rest of the gap to ``bubble`` (waiting for compute elsewhere, e.g. other pipeline stages).
    """
    horizon = tl.makespan if until is None else until
    out: dict[str, float] = {}

    def add(cat: str, dt: float) -> None:
        if dt > 0:
            out[cat] = out.get(cat, 0.0) + dt

    def explain(lo: float, hi: float, tid: int) -> None:
        while hi > lo:
            if tid < 0:
                add("bubble", hi - lo)
                return
            t = tl.tasks[tid]
            if not t.is_comm:
                add("bubble", hi - lo)
                return
            s, e = tl.start[tid], tl.end[tid]
            if hi > e:
                add("bubble", hi - max(e, lo))
                hi = max(e, lo)
            add(t.category, hi - max(s, lo))
            hi = min(hi, s)
            # a comm that waited for its own stream was queued behind the previous one
            tid = tl.binding[tid] if tl.binding[tid] >= 0 else tl.stream_prev[tid]

    cursor = 0.0
    own = sorted(tl.stream_tasks(stream), key=lambda t: tl.start[t.id])
    for t in own:
        s, e = tl.start[t.id], min(tl.end[t.id], horizon)
        if s >= horizon:
            break
        explain(cursor, s, tl.binding[t.id])
        if t.breakdown:
            scale = (e - s) / t.duration if t.duration > 0 else 0.0
            for cat, dt in t.breakdown:
                add(cat, dt * scale)
        else:
            add(t.category, e - s)
        cursor = e
    if horizon > cursor:
        last = max((i for i in range(len(tl.tasks)) if tl.tasks[i].stream != stream),
                   key=lambda i: tl.end[i], default=-1)
        explain(cursor, horizon, last)
    return out
