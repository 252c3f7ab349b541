"""Contention in the per-rank engine: a fluid executor whose transfers share resources max-min
fairly (rates are recomputed whenever a transfer or a background load starts or ends), and a
healthy rank's chunk pass with its overlapping collectives sharing its ports."""

from __future__ import annotations

import heapq
import itertools
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from codesign.engine.chunk import op_tasks
from codesign.engine.executor import (
    HOST,
    ScheduleDeadlock,
    Task,
    Timeline,
    attribute,
    binding_of,
    stream_links,
)
from codesign.engine.expanded.link_factors import LinkFactors
from codesign.engine.expanded.values import PassTiming, Resource
from codesign.hardware.compute import ComputeModel
from codesign.ir import Op
from codesign.network.faults import CommProfile
from codesign.network.flows import max_min_rates


@dataclass(frozen=True)
class Flow:
    """The network part of a task for :func:`execute_fluid`: ``transfer_s`` seconds of
    transfer at full speed on the resources of ``usage`` (resource -> load at full speed,
    capacity 1 each), then ``latency_s`` seconds."""

    latency_s: float
    transfer_s: float
    usage: tuple[tuple[Resource, float], ...]


def execute_fluid(tasks: Sequence[Task], flows: Mapping[int, Flow],
                  background: Mapping[int, tuple[tuple[Resource, float], ...]] | None = None,
                  ) -> Timeline:
    """Execute ``tasks`` like :func:`~codesign.engine.executor.execute`, except that the
    tasks in ``flows`` share their resources max-min fairly while they transfer (their speed
    ``x <= 1`` is recomputed whenever a transfer or a background load starts or ends; a
    transfer of ``w`` seconds at full speed ends when ``∫x dt = w``). A task in
    ``background`` loads resources while it runs (demand, capped, in the same max-min
    sharing) without being slowed itself."""
    return _FluidRun(tasks, flows, background or {}).run()


_BEGIN, _END, _DONE = 0, 1, 2  # events: a delayed start, a task's end, a transfer's end


class _FluidRun:
    """The state of one :func:`execute_fluid` call (an event loop over a heap)."""

    def __init__(self, tasks: Sequence[Task], flows: Mapping[int, Flow],
                 bg: Mapping[int, tuple[tuple[Resource, float], ...]]) -> None:
        self.tasks, self.flows, self.bg = tasks, flows, bg
        n = len(tasks)
        self.stream_prev, self.stream_next = stream_links(tasks)
        self.waits = [0] * n
        self.on_end: list[list[int]] = [[] for _ in range(n)]
        self.on_start: list[list[int]] = [[] for _ in range(n)]
        for t in tasks:
            deps = set(t.deps)
            after = {d for d, _ in t.start_after}
            self.waits[t.id] = len(deps) + len(after) + (1 if self.stream_prev[t.id] >= 0
                                                         else 0)
            for d in deps:
                self.on_end[d].append(t.id)
            for d in after:
                self.on_start[d].append(t.id)
        self.start = [math.nan] * n
        self.end = [math.nan] * n
        self.binding = [-1] * n
        self.heap: list[tuple[float, int, int, int, int]] = []  # time, seq, kind, task, version
        self.seq = itertools.count()
        self.remaining: dict[int, float] = {}
        self.rate: dict[int, float] = {}
        self.stamp: dict[int, float] = {}
        self.version: dict[int, int] = {}
        self.users: dict[Resource, set[int]] = defaultdict(set)
        self.load: dict[Resource, float] = defaultdict(float)

    def push(self, time: float, kind: int, i: int, ver: int = 0) -> None:
        heapq.heappush(self.heap, (time, next(self.seq), kind, i, ver))

    def reschedule(self, resources: Sequence[Resource], now: float) -> None:
        """New max-min rates for every transfer connected to ``resources``."""
        flows, remaining, rate, stamp = self.flows, self.remaining, self.rate, self.stamp
        seen_r: set[Resource] = set()
        seen_t: set[int] = set()
        stack = list(resources)
        while stack:
            r = stack.pop()
            if r in seen_r:
                continue
            seen_r.add(r)
            for i in self.users.get(r, ()):
                if i not in seen_t:
                    seen_t.add(i)
                    stack.extend(k for k, _ in flows[i].usage)
        if not seen_t:
            return
        ids = sorted(seen_t)
        for i in ids:
            remaining[i] = max(remaining[i] - rate[i] * (now - stamp[i]), 0.0)
            stamp[i] = now
        paths: list[dict[Resource, float]] = [dict(flows[i].usage) for i in ids]
        demands = [1.0] * len(ids)
        for r in sorted(seen_r, key=repr):
            if self.load[r] > 0:
                paths.append({r: 1.0})
                demands.append(min(self.load[r], 1.0))
        rates = max_min_rates(paths, lambda _r: 1.0, demands)
        for i, x in zip(ids, rates, strict=False):
            rate[i] = x
            self.version[i] = self.version.get(i, 0) + 1
            self.push(now + remaining[i] / x if x > 0 else math.inf, _DONE, i, self.version[i])

    def release(self, i: int, now: float) -> None:
        t = self.tasks[i]
        if t.start_after:
            rel = max(self.start[d] + off for d, off in t.start_after)
            if rel > now:
                self.push(now + (rel - now), _BEGIN, i)
                return
        self.begin(i, now)

    def satisfy(self, i: int, now: float) -> None:
        self.waits[i] -= 1
        if self.waits[i] == 0:
            self.release(i, now)

    def begin(self, i: int, now: float) -> None:
        t = self.tasks[i]
        p = self.stream_prev[i]
        prev_end = self.end[p] if p >= 0 else 0.0
        self.binding[i] = binding_of(t, self.start, self.end, prev_end)
        self.start[i] = now
        for j in self.on_start[i]:
            self.satisfy(j, now)
        f = self.flows.get(i)
        bg = self.bg
        if bg.get(i):
            for r, u in bg[i]:
                self.load[r] += u
            self.reschedule([r for r, _ in bg[i]], now)
        if f is not None and f.transfer_s > 0 and f.usage:
            self.remaining[i] = f.transfer_s
            self.rate[i] = 0.0
            self.stamp[i] = now
            for r, _ in f.usage:
                self.users[r].add(i)
            self.reschedule([r for r, _ in f.usage], now)
        elif f is not None:
            total = f.latency_s + f.transfer_s
            self.push(now + total if total > 0 else now, _END, i)
        else:
            self.push(now + t.duration if t.duration > 0 else now, _END, i)

    def finish(self, i: int, now: float) -> None:
        """Task ``i`` ends: its background load goes, its dependants may start."""
        self.end[i] = now
        bg = self.bg
        if bg.get(i):
            for r, u in bg[i]:
                self.load[r] -= u
                if self.load[r] < 1e-12:
                    self.load[r] = 0.0
            self.reschedule([r for r, _ in bg[i]], now)
        for j in self.on_end[i]:
            self.satisfy(j, now)
        if self.stream_next[i] >= 0:
            self.satisfy(self.stream_next[i], now)

    def run(self) -> Timeline:
        tasks = self.tasks
        for i in range(len(tasks)):
            if self.waits[i] == 0:
                self.release(i, 0.0)
        while self.heap:
            now, _, kind, i, ver = heapq.heappop(self.heap)
            if kind == _BEGIN:
                self.begin(i, now)
            elif kind == _DONE:
                if ver != self.version.get(i):
                    continue
                f = self.flows[i]
                for r, _ in f.usage:
                    self.users[r].discard(i)
                del self.remaining[i], self.rate[i], self.stamp[i]
                self.version[i] = -1
                self.reschedule([r for r, _ in f.usage], now)
                self.push(now + f.latency_s if f.latency_s > 0 else now, _END, i)
            else:
                self.finish(i, now)
        end = self.end
        missing = [t.name or str(t.id) for t in tasks if end[t.id] != end[t.id]]
        if missing:
            raise ScheduleDeadlock(f"{len(missing)} tasks never ran (first: {missing[0]})")
        return Timeline(tuple(tasks), tuple(self.start), tuple(end), tuple(self.binding),
                        tuple(self.stream_prev))


def _rank_flow(profile: CommProfile) -> Flow:
    return Flow(profile.latency_s, profile.transfer_s, profile.usage)


def fluid_pass(ops: Sequence[Op], compute: ComputeModel, faults: LinkFactors
               ) -> tuple[PassTiming, dict[int, float]]:
    """A healthy rank's chunk pass with its overlapping collectives sharing its ports, and
    the stretch (contended / nominal duration) of each collective, by op index."""
    tasks = op_tasks(ops, compute.time,
                     lambda op: faults.cost(op.comm or "none", op.group or "dp", op.size, 0),
                     compute.host_time)
    op_of = {t.id: dict(t.meta)["op"] for t in tasks}
    comms = [(t.id, ops[op_of[t.id]]) for t in tasks if t.stream not in ("compute", HOST)]
    flows = {tid: _rank_flow(faults.profile(op.comm or "none", op.group or "dp", op.size, 0))
             for tid, op in comms}
    tl = execute_fluid(tasks, flows)
    compute_end = max((tl.end[t.id] for t in tasks if t.stream == "compute"), default=0.0)
    parts = attribute(tl, "compute", compute_end)
    layer_done: dict[int, float] = {}
    tail: dict[str, float] = {}
    stretch: dict[int, float] = {}
    load: dict[Resource, float] = defaultdict(float)
    for t in tasks:
        if t.stream == "compute":
            layer = dict(t.meta).get("layer", -1)
            layer_done[layer] = max(layer_done.get(layer, 0.0), tl.end[t.id])
            continue
        if t.stream == HOST:
            continue
        if tl.end[t.id] > compute_end:
            tail[t.category] = max(tail.get(t.category, 0.0), tl.end[t.id] - compute_end)
        if t.duration > 0:
            stretch[op_of[t.id]] = (tl.end[t.id] - tl.start[t.id]) / t.duration
        f = flows[t.id]
        for key, u in f.usage:
            load[key] += u * f.transfer_s
    background = tuple(sorted(((k, min(v / compute_end, 1.0)) for k, v in load.items()
                               if compute_end > 0 and v > 0), key=repr))
    busy = sum(t.duration for t in tasks if t.stream == "compute")
    timing = PassTiming(compute_end, tuple(sorted(parts.items())),
                        tuple(sorted(layer_done.items())), tuple(sorted(tail.items())), busy,
                        background)
    return timing, stretch

