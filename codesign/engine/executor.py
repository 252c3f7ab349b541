"""Discrete-event execution of task graphs on in-order streams (SimPy).

A :class:`Task` runs on one stream (a rank's compute stream, a communication stream ...);
streams execute their tasks in the given order, one at a time; a task starts when its stream
is free, every dependency has finished, and every ``start_after`` (task, offset) pair is met
(``offset`` seconds after that task *started*, used for gradient buckets released during a
backward pass). The result is an immutable :class:`Timeline`; nothing here does I/O.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import simpy

COMM_PREFIX = "comm:"
#: stream and category of the host tasks that issue a pass's kernels
#: (:func:`codesign.engine.chunk.op_tasks`)
HOST = "host"


class Task(NamedTuple):
    """One unit of work. ``duration`` in seconds; ``breakdown`` optionally splits it by
    category (values sum to ``duration``) for composite tasks such as a whole chunk;
    ``meta`` carries what the task stands for (e.g. its step-program node) for consumers.
    A named tuple: step programs create tens of thousands per simulation."""

    id: int
    stream: str
    duration: float
    deps: tuple[int, ...] = ()
    name: str = ""
    category: str = ""
    start_after: tuple[tuple[int, float], ...] = ()
    breakdown: tuple[tuple[str, float], ...] = ()
    meta: tuple[tuple[str, Any], ...] = ()

    @property
    def is_comm(self) -> bool:
        return self.category.startswith(COMM_PREFIX)


@dataclass(frozen=True)
class Timeline:
    """Start/end (seconds) of every task, by task id, and what released each task last."""

    tasks: Sequence[Task]
    start: tuple[float, ...]
    end: tuple[float, ...]
    binding: tuple[int, ...]  # id of the dependency that released the task; -1: its stream
    stream_prev: tuple[int, ...]  # previous task on the same stream; -1 for the first

    @property
    def makespan(self) -> float:
        return max(self.end, default=0.0)

    def stream_tasks(self, stream: str) -> list[Task]:
        return [t for t in self.tasks if t.stream == stream]


class DeferredTimeline(Timeline):
    """A :class:`Timeline` made by ``make`` when one of its fields is first read (for runs
    whose numbers came another way and whose tasks are rarely looked at)."""

    def __init__(self, make: Callable[[], Timeline]) -> None:
        object.__setattr__(self, "_make", make)
        object.__setattr__(self, "_made", None)

    def __getattr__(self, name: str) -> Any:
        if name not in ("tasks", "start", "end", "binding", "stream_prev"):
            raise AttributeError(name)
        made = self.__dict__["_made"]
        if made is None:
            made = self.__dict__["_make"]()
            object.__setattr__(self, "_made", made)
        return getattr(made, name)


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
            prev_end = end[queue_prev[t.id]] if queue_prev[t.id] >= 0 else 0.0
            binding[t.id] = binding_of(t, start, end, prev_end)
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


def stream_links(tasks: Sequence[Task]) -> tuple[list[int], list[int]]:
    """Previous and next task on each task's stream (-1 at the ends); checks ids 0..n-1."""
    last: dict[str, int] = {}
    prev = [-1] * len(tasks)
    nxt = [-1] * len(tasks)
    for i, t in enumerate(tasks):
        if t.id != i:
            raise ValueError(f"task ids must be 0..n-1 in order; task {i} has id {t.id}")
        p = last.get(t.stream, -1)
        prev[i] = p
        if p >= 0:
            nxt[p] = i
        last[t.stream] = i
    return prev, nxt


def binding_of(t: Task, start: Sequence[float], end: Sequence[float], prev_end: float) -> int:
    """The task whose end (dependency) or start offset (``start_after``) released ``t`` last,
    or -1 when ``t`` only waited for its stream (``prev_end``); for breakdown attribution."""
    best, best_t = -1, -1.0
    for d in t.deps:
        if end[d] > best_t:
            best, best_t = d, end[d]
    for d, off in t.start_after:
        if start[d] + off > best_t:
            best, best_t = d, start[d] + off
    return best if best_t > prev_end else -1


def _run_in(order: Iterable[int], tasks: Sequence[Task], stream_prev: Sequence[int]) -> Timeline:
    """Start and end times of ``tasks`` visited in ``order`` (every reference of a task,
    including its stream predecessor, visited before it). The arithmetic is the SimPy
    executor's (``ready + (release - ready)`` for a ``start_after`` release, ``start +
    duration`` for the end), so timelines are bit-identical to :func:`execute`."""
    n = len(tasks)
    start = [0.0] * n
    end = [0.0] * n
    binding = [-1] * n
    for i in order:
        t = tasks[i]
        p = stream_prev[i]
        prev_end = end[p] if p >= 0 else 0.0
        now = prev_end
        for d in t.deps:
            if end[d] > now:
                now = end[d]
        if t.start_after:
            release = -1.0
            for d, off in t.start_after:
                now = max(now, start[d])
                release = max(release, start[d] + off)
            if release > now:
                now = now + (release - now)
        binding[i] = binding_of(t, start, end, prev_end)
        start[i] = now
        end[i] = now + t.duration if t.duration > 0 else now
    return Timeline(tuple(tasks), tuple(start), tuple(end), tuple(binding), tuple(stream_prev))


def execute_in_order(tasks: Sequence[Task]) -> Timeline:
    """Same result as :func:`execute` for task lists whose dependencies (``deps`` and
    ``start_after``) all point to earlier tasks, as :func:`codesign.engine.chunk.op_tasks`
    produces: one pass in list order, no event queue. Other lists go to :func:`execute`."""
    for i, t in enumerate(tasks):
        if t.id != i or any(d >= i for d in t.deps) or any(d >= i for d, _ in t.start_after):
            return execute(tasks)
    stream_prev, _ = stream_links(tasks)
    return _run_in(range(len(tasks)), tasks, stream_prev)


def execute_exact(tasks: Sequence[Task]) -> Timeline:
    """Same timeline as :func:`execute` (identical arithmetic), computed in a topological
    order of the dependencies, stream order and ``start_after`` references instead of by
    discrete events. Raises :class:`ScheduleDeadlock` on a cycle."""
    n = len(tasks)
    stream_prev, _ = stream_links(tasks)
    indeg = [0] * n
    children: list[list[int]] = [[] for _ in range(n)]
    for t in tasks:
        refs = {*t.deps, *(d for d, _ in t.start_after)}
        if stream_prev[t.id] >= 0:
            refs.add(stream_prev[t.id])
        indeg[t.id] = len(refs)
        for d in refs:
            children[d].append(t.id)
    queue = deque(i for i in range(n) if indeg[i] == 0)
    order: list[int] = []
    while queue:
        i = queue.popleft()
        order.append(i)
        for c in children[i]:
            indeg[c] -= 1
            if indeg[c] == 0:
                queue.append(c)
    if len(order) < n:
        left = next(t for t in tasks if indeg[t.id] > 0)
        raise ScheduleDeadlock(f"{n - len(order)} tasks never ran (first: "
                               f"{left.name or left.id})")
    return _run_in(order, tasks, stream_prev)


def attribute(tl: Timeline, stream: str, until: float | None = None) -> dict[str, float]:
    """Split ``[0, until]`` of one stream into categories; the values sum to ``until``.

    Busy time goes to each task's category (or its ``breakdown``). An idle gap goes to the
    communication that the stream was waiting for while it ran (``comm:<kind>``), to
    :data:`HOST` when it waited for the host to issue its next kernel, and the rest of the
    gap to ``bubble`` (waiting for compute elsewhere, e.g. other pipeline stages).
    """
    horizon = tl.makespan if until is None else until
    tasks = tl.tasks
    own = sorted((t.id for t in tasks if t.stream == stream), key=lambda i: tl.start[i])
    last = max((i for i in range(len(tasks)) if tasks[i].stream != stream),
               key=lambda i: tl.end[i], default=-1)
    return attribute_stream(
        own, last, horizon, tl.start, tl.end, tl.binding, tl.stream_prev,
        category=lambda i: tasks[i].category,
        breakdown=lambda i: (tasks[i].duration, tasks[i].breakdown))


def attribute_stream(own: Sequence[int], last: int, horizon: float, start: Sequence[float],
                     end: Sequence[float], binding: Sequence[int], stream_prev: Sequence[int],
                     category: Callable[[int], str],
                     breakdown: Callable[[int], tuple[float, tuple[tuple[str, float], ...]]]
                     ) -> dict[str, float]:
    """:func:`attribute` on plain lists: ``own`` are the stream's task ids by start time,
    ``last`` the task of another stream that ends last (-1: none), ``category(i)`` a task's
    category and ``breakdown(i)`` its ``(duration, breakdown)``."""
    out: dict[str, float] = {}

    def add(cat: str, dt: float) -> None:
        if dt > 0:
            out[cat] = out.get(cat, 0.0) + dt

    def explain(lo: float, hi: float, tid: int) -> None:
        while hi > lo:
            if tid < 0:
                add("bubble", hi - lo)
                return
            cat = category(tid)
            if cat == HOST:  # waiting for the host to issue the next kernel
                add(HOST, hi - lo)
                return
            if not cat.startswith(COMM_PREFIX):
                add("bubble", hi - lo)
                return
            s, e = start[tid], end[tid]
            if hi > e:
                add("bubble", hi - max(e, lo))
                hi = max(e, lo)
            add(cat, hi - max(s, lo))
            hi = min(hi, s)
            # a comm that waited for its own stream was queued behind the previous one
            tid = binding[tid] if binding[tid] >= 0 else stream_prev[tid]

    cursor = 0.0
    for i in own:
        s, e = start[i], min(end[i], horizon)
        if s >= horizon:
            break
        explain(cursor, s, binding[i])
        duration, parts = breakdown(i)
        if parts:
            scale = (e - s) / duration if duration > 0 else 0.0
            for cat, dt in parts:
                add(cat, dt * scale)
        else:
            add(category(i), e - s)
        cursor = e
    if horizon > cursor:
        explain(cursor, horizon, last)
    return out
