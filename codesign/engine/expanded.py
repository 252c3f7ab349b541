"""Per-rank ("expanded") simulation of one training step: stragglers, a second GPU type,
degraded or failed links, and flow-level contention between concurrent collectives.

Every rank has its own speed (a straggler runs its kernels at a fraction of its speed), GPU
type and links; a collective starts when the last member of its group arrives (a
synchronization barrier) and lasts as long as its slowest group instance. Ranks are grouped
so that only what a perturbation touches is simulated separately:

* **Clusters.** The ranks of one pipeline stage that a chunk pass's collectives couple (TP,
  CP, EP, and DP under ZeRO-3) form a cluster. A chunk pass of a cluster is simulated
  operator by operator for all its members at once (vectorized over members and over every
  perturbed cluster of the stage): each member's compute stream and communication streams,
  each collective a barrier across its group's members. A cluster whose members and links
  are all healthy takes the symmetric engine's chunk timing unchanged. Members of a cluster
  start each chunk pass together (its first collective follows within a kernel or two).
* **Replica classes.** A pipeline replica (one cluster per stage, joined by point-to-point
  sends) whose clusters and pipeline links are healthy behaves exactly like every other
  healthy replica, so replicas with identical perturbations form one class, simulated once.
  Data-parallel gradient reductions and parameter gathers of a stage are barriers across all
  classes, priced at the slowest group instance of the stage.

With no perturbation there is a single class of healthy clusters and the task graph is the
symmetric engine's, so the step time is identical (a test checks it).

Link faults are turned into per-group bandwidth factors by the flow model
(:mod:`codesign.network.flows`): the flows of every group instance that runs concurrently are
routed over the faulted link graph and given max-min fair rates; an instance keeps the
fraction of its healthy rate its slowest flow keeps, per tier, and its collective is priced by
the alpha-beta model with those tiers slowed (:class:`~codesign.network.faults.ScaledCosts`).

Contention (``contention=True``): collectives that overlap in time share links max-min fairly
(a fluid simulation: rates are recomputed whenever a transfer starts or ends). Resources are a
rank's (or, at the pipeline level, a cluster's) scale-up and scale-out ports, each direction
with capacity 1; a transfer at full speed loads a port with the fraction of the wire rate it
achieves. Inside a chunk pass, overlapping TP/CP/EP/ZeRO-3 collectives share the ports of a
representative healthy rank (their stretched durations are reused by perturbed clusters).
At the pipeline level, point-to-point sends, gradient-reduction buckets and parameter gathers
share the ports of the clusters they touch, with the average traffic of the chunk passes
running there as a competing demand (chunk passes themselves are not slowed by it); a bucket
spanning several replica classes advances on each class's ports at that class's fair share and
ends with the slowest part.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from math import prod

import numpy as np

from codesign.engine.chunk import ChunkTiming, comm_category, op_tasks
from codesign.engine.executor import (
    ScheduleDeadlock,
    Task,
    Timeline,
    attribute,
    binding_of,
    execute_exact,
    stream_links,
)
from codesign.engine.training import (
    GRAD_REDUCE_BYTES,
    PARAM_BYTES,
    TaskBuilder,
    _local_params,
    time_chunks,
)
from codesign.hardware.compute import ComputeModel
from codesign.ir import Op
from codesign.network.faults import CommProfile, ScaledCosts, combine
from codesign.network.flows import (
    LinkFault,
    LinkGraph,
    collective_entities,
    group_instances,
    max_min_rates,
    rank_grid,
    tier_factors,
)
from codesign.network.model import NetworkModel
from codesign.network.placement import group_dims
from codesign.workload.dims import pipeline_message
from codesign.workload.schedules import schedule
from codesign.workload.training import (
    ADAM_BYTES_PER_PARAM,
    ChunkGraph,
    TrainingGraph,
    state_groups,
)

Resource = Hashable


@dataclass(frozen=True)
class Perturbations:
    """What makes ranks differ.

    Attributes:
        stragglers: ``(rank, fraction)``: the rank runs every kernel at ``fraction`` of its
            speed (0 < fraction <= 1; kernel times divide by it).
        link_faults: degraded (factor in (0, 1)) and failed (factor 0) links.
        mix_ranks: ``(start, end)``: ranks ``start <= r < end`` are GPUs of the second type
            (the second compute model given to :func:`simulate_expanded`).
    """

    stragglers: tuple[tuple[int, float], ...] = ()
    link_faults: tuple[LinkFault, ...] = ()
    mix_ranks: tuple[int, int] | None = None

    @property
    def any(self) -> bool:
        return bool(self.stragglers or self.link_faults or self.mix_ranks)


@dataclass(frozen=True)
class ExpandedResult:
    """One expanded step. Times in seconds; per-rank arrays indexed by rank id."""

    step_time_s: float
    breakdown_s: dict[str, float]  # of the critical cluster's compute stream; sums to step
    critical_stage: int
    rank_finish_s: np.ndarray = field(repr=False)  # when each rank's last work ends
    rank_busy_s: np.ndarray = field(repr=False)  # each rank's kernel time in the step
    replica_classes: int  # pipeline replicas simulated (one per class of identical ones)
    perturbed_clusters: int  # distinct perturbed clusters simulated member by member
    clusters: int  # clusters in the job (stages × replicas)
    tasks: int  # pipeline-level tasks executed
    slowed: tuple[tuple[str, int, str, float], ...]  # (group, stage, tier, bandwidth factor)
    timeline: Timeline = field(repr=False)

    @property
    def slowest_rank(self) -> int:
        """The rank with the most kernel time (the one its groups wait for); among equals,
        the one that finishes last, then the lowest id."""
        finish, busy = self.rank_finish_s, self.rank_busy_s
        top = busy.max()
        cands = np.flatnonzero(busy >= top - 1e-12 * max(top, 1e-30))
        return int(cands[np.argmax(finish[cands])])


# --- rank geometry ---------------------------------------------------------------------------


class _Geometry:
    """Ranks arranged as ``table[stage, replica, *member]`` (member axes: the cluster dims,
    outermost first)."""

    def __init__(self, graph: TrainingGraph, network: NetworkModel) -> None:
        layout = network.layout
        self.layout = layout
        self.pp = graph.run.parallel.pp
        grid, dims = rank_grid(layout)
        groups = {o.group or "dp" for c in graph.chunks for o in (*c.forward, *c.backward)
                  if o.kind == "comm"}
        cd = {d for g in groups for d in group_dims(g) if d != "pp" and layout.size(d) > 1}
        self.cdims = [d for d in dims if d in cd]
        odims = [d for d in dims if d not in cd and d != "pp"]
        axes = [dims.index("pp")] + [dims.index(d) for d in odims] + \
            [dims.index(d) for d in self.cdims]
        self.c_shape = tuple(layout.size(d) for d in self.cdims)
        self.members = prod(self.c_shape)
        self.world = layout.world
        self.n_rep = self.world // (self.pp * self.members)
        self.table = grid.transpose(axes).reshape(self.pp, self.n_rep, *self.c_shape)

    def group_axes(self, group: str) -> tuple[int, ...]:
        """Axes of a ``(batch, *member)`` array that ``group`` spans."""
        gd = set(group_dims(group))
        return tuple(1 + i for i, d in enumerate(self.cdims) if d in gd)

    def instances(self, stage: int, group: str) -> tuple[np.ndarray, tuple[int, ...]]:
        """Instances of chunk group ``group`` at ``stage``: ranks shaped (replica, instance,
        member of the instance), and the shape of a per-instance array (replica, *member with
        the group's axes of size 1)."""
        axes = self.group_axes(group)
        t = self.table[stage]
        keep = [a for a in range(1, t.ndim) if a not in axes]
        moved = t.transpose([0, *keep, *axes])
        gsize = prod(t.shape[a] for a in axes)
        red = tuple(1 if a in axes else t.shape[a] for a in range(t.ndim))
        return moved.reshape(self.n_rep, -1, gsize), red


# --- link faults -----------------------------------------------------------------------------


def _decomposition(kind: str, algorithm: str) -> str:
    if kind == "all_to_all":
        return "a2a"
    if kind == "p2p":
        return "p2p"
    return algorithm if algorithm in ("in_network", "hierarchical") else "ring"


class _LinkFactors:
    """Bandwidth factors of group instances on the faulted link graph, as ids into
    ``pairs`` (``(f_up, f_out)``; id 0 is healthy)."""

    def __init__(self, geo: _Geometry, network: NetworkModel,
                 faults: Sequence[LinkFault]) -> None:
        self.geo = geo
        self.network = network
        self.scaled = ScaledCosts(network)
        topo, world = network.topology, geo.world
        self.healthy = LinkGraph(topo, world)
        self.faulted = LinkGraph(topo, world, faults)
        self.active = self.faulted.faulty
        # ranks whose flows can cross a faulted link: a failed NIC's or port's traffic stays
        # in its scale-up domain until it leaves by a peer's NIC, a leaf carries its domain's
        # flows, a pod's uplinks its pod's
        self.touched = np.zeros(world, dtype=bool)
        d = self.faulted.domain_size
        for f in faults:
            if f.kind == "port":
                self.touched[f.index] = True
            elif f.kind in ("nic", "scaleup"):
                self.touched[f.index - f.index % d:f.index - f.index % d + d] = True
            elif f.kind == "leaf":
                self.touched[f.index * d:(f.index + 1) * d] = True
            elif f.kind == "pod":
                size = self.faulted.pod_size
                self.touched[f.index * size:(f.index + 1) * size] = True
        self.pairs: list[tuple[float, float]] = [(1.0, 1.0)]
        self._ids: dict[tuple[float, float], int] = {(1.0, 1.0): 0}
        self._chunk: dict[tuple[int, str, str], np.ndarray] = {}
        self._barrier: dict[tuple[int, str, str], list[int]] = {}
        self._p2p: dict[tuple[int, int], np.ndarray] = {}
        self.slowed: dict[tuple[str, int, str], float] = {}

    def pid(self, f_up: float, f_out: float) -> int:
        key = (f_up, f_out)
        i = self._ids.get(key)
        if i is None:
            i = self._ids[key] = len(self.pairs)
            self.pairs.append(key)
        return i

    def _touches(self, *stages: int) -> bool:
        """True when a rank of these pipeline stages may route over a faulted link."""
        return self.active and any(bool(self.touched[self.geo.table[s]].any())
                                   for s in stages)

    def dec(self, kind: str, group: str, size: float) -> str:
        return _decomposition(kind, self.network.collective(kind, group, size).algorithm)

    def _factor_ids(self, rows: np.ndarray, dec: str, label: tuple[str, int]) -> np.ndarray:
        """Ids of the factors of each instance (row of rank ids), all running together."""
        ds = self.faulted.domain_size
        kind = {"a2a": "all_to_all", "p2p": "p2p"}.get(dec, "all_reduce")
        insts = [collective_entities(kind, dec, [int(r) for r in row], ds) for row in rows]
        fs = tier_factors(self.healthy, self.faulted, insts)
        ids = np.zeros(len(rows), dtype=np.int64)
        for i, f in enumerate(fs):
            ids[i] = self.pid(f["up"], f["out"])
            for tier in ("up", "out"):
                if f[tier] < 1.0:
                    name = ("fullflat" if self.faulted.flat else
                            "scale_out" if tier == "out" else "scale_up")
                    key = (label[0], label[1], name)
                    self.slowed[key] = min(self.slowed.get(key, 1.0), f[tier])
        return ids

    def chunk(self, stage: int, group: str, dec: str) -> np.ndarray:
        """Factor ids of ``group``'s instances inside every cluster of ``stage``, shaped
        (replica, *member with the group's axes of size 1)."""
        key = (stage, group, dec)
        hit = self._chunk.get(key)
        if hit is None:
            inst, red = self.geo.instances(stage, group)
            if not self._touches(stage):
                hit = np.zeros(red, dtype=np.int64)
            else:
                ids = self._factor_ids(inst.reshape(-1, inst.shape[-1]), dec, (group, stage))
                hit = ids.reshape(red)
            self._chunk[key] = hit
        return hit

    def barrier(self, stage: int, group: str, dec: str) -> list[int]:
        """Distinct factor ids over every instance of ``group`` at ``stage``."""
        key = (stage, group, dec)
        hit = self._barrier.get(key)
        if hit is None:
            if not self._touches(stage):
                hit = [0]
            else:
                rows = group_instances(self.geo.layout, group, {"pp": stage})
                hit = sorted({int(i) for i in self._factor_ids(rows, dec, (group, stage))})
            self._barrier[key] = hit
        return hit

    def p2p(self, stage: int, direction: int) -> np.ndarray:
        """Factor id per replica of the sends from ``stage`` to ``stage + direction``."""
        key = (stage, direction)
        hit = self._p2p.get(key)
        if hit is None:
            n_rep = self.geo.n_rep
            if not self._touches(stage, stage + direction):
                hit = np.zeros(n_rep, dtype=np.int64)
            else:
                src = self.geo.table[stage].reshape(n_rep, -1)
                dst = self.geo.table[stage + direction].reshape(n_rep, -1)
                ds = self.faulted.domain_size
                insts = [collective_entities("p2p", "direct", [int(a), int(b)], ds)
                         for rs, rd in zip(src, dst, strict=True)
                         for a, b in zip(rs, rd, strict=True)]
                fs = tier_factors(self.healthy, self.faulted, insts)
                worst = [min(f["up"], f["out"]) for f in fs]
                per_rep = np.asarray(worst).reshape(n_rep, -1).min(axis=1)
                hit = np.array([self.pid(float(f), float(f)) for f in per_rep], dtype=np.int64)
                low = float(per_rep.min())
                if low < 1.0:
                    tier = self.network.collective("p2p", "pp", 1.0).tier
                    k = ("pp", min(stage, stage + direction), tier)
                    self.slowed[k] = min(self.slowed.get(k, 1.0), low)
            self._p2p[key] = hit
        return hit

    def cost(self, kind: str, group: str, size: float, pid: int) -> float:
        f_up, f_out = self.pairs[pid]
        return self.scaled.cost(kind, group, size, f_up, f_out)

    def profile(self, kind: str, group: str, size: float, pid: int) -> CommProfile:
        f_up, f_out = self.pairs[pid]
        return self.scaled.profile(kind, group, size, f_up, f_out)


# --- chunk passes ----------------------------------------------------------------------------


@dataclass(frozen=True)
class PassTiming:
    """One chunk pass of a cluster (seconds from the pass's start), as the pipeline uses it."""

    compute_time: float  # when the cluster's last member is done computing
    breakdown: tuple[tuple[str, float], ...]  # slowest member's; sums to compute_time
    layer_done: tuple[tuple[int, float], ...]  # layer -> its last compute op, any member
    tail: tuple[tuple[str, float], ...]  # comm category -> still running after compute_time
    busy: np.ndarray | float  # kernel time per member (scalar: all members alike)
    background: tuple[tuple[Resource, float], ...] = ()  # average port load


def _from_chunk_timing(t: ChunkTiming) -> PassTiming:
    busy = sum(x.duration for x in t.timeline.tasks if x.stream == "compute")
    return PassTiming(t.compute_time, t.breakdown, t.layer_done, t.tail, busy)


def batch_pass(ops: Sequence[Op], speed: np.ndarray, gtype: np.ndarray,
               compute_time: Callable[[Op], np.ndarray],
               comm_time: Callable[[int, Op], np.ndarray],
               group_axes: Callable[[str], tuple[int, ...]]) -> list[PassTiming]:
    """Simulate one chunk pass for a batch of clusters, every member at once.

    ``speed`` and ``gtype`` have shape ``(batch, *member)``; ``compute_time(op)`` gives the
    op's seconds per GPU type (array); ``comm_time(i, op)`` the duration of the ``i``-th op
    per group instance (shape ``(batch, *member)`` with the group's axes of size 1). Streams
    and overlap rules follow :func:`~codesign.engine.chunk.op_tasks`; a collective starts
    when every member of its instance is ready on its stream and its dependencies are done.
    Idle compute time goes to the category of the collective that released the op.
    """
    shape = speed.shape
    batch = shape[0]
    compute_free = np.zeros(shape)
    stream_free: dict[str, np.ndarray] = {}
    end: list[np.ndarray] = [compute_free] * len(ops)
    busy = np.zeros(shape)
    cats: list[str] = []
    cat_id: dict[str, int] = {}
    op_cat = [-1] * len(ops)
    parts: dict[str, np.ndarray] = {}
    gaps: dict[int, np.ndarray] = {}
    layer_done: dict[int, np.ndarray] = {}
    comm_end: dict[str, np.ndarray] = {}
    any_compute = False
    prev = prev2 = -1
    pending: list[int] = []
    deferred: list[int] = []
    for i, op in enumerate(ops):
        if op.kind != "comm":
            deps = pending
            pending, deferred = deferred, []
            ready = compute_free
            if deps:
                best_t = np.full(shape, -1.0)
                best_c = np.full(shape, -1, dtype=np.int64)
                for d in deps:
                    e = end[d]
                    upd = e > best_t
                    best_t = np.where(upd, e, best_t)
                    best_c = np.where(upd, op_cat[d], best_c)
                    ready = np.maximum(ready, e)
                gap = ready - compute_free
                for c in np.unique(best_c[gap > 0]):
                    g = np.where((best_c == c) & (gap > 0), gap, 0.0)
                    gaps[int(c)] = gaps[int(c)] + g if int(c) in gaps else g
            base = compute_time(op)
            dur = (base[gtype] if base.size > 1 else base[0]) / speed
            e = ready + dur
            busy += dur
            parts[op.category] = parts[op.category] + dur if op.category in parts else dur
            prev_layer = layer_done.get(op.layer)
            layer_done[op.layer] = e if prev_layer is None else np.maximum(prev_layer, e)
            compute_free = e
            end[i] = e
            any_compute = True
            prev2, prev = prev, i
            continue
        cat = comm_category(op.group)
        if cat not in cat_id:
            cat_id[cat] = len(cats)
            cats.append(cat)
        op_cat[i] = cat_id[cat]
        if op.overlap == "prev":
            deps = [prev2] if prev2 >= 0 else []
            pending.append(i)
        elif op.overlap == "next":
            deps = [prev] if prev >= 0 else []
            deferred.append(i)
        elif op.overlap == "prefetch":
            deps = []
            pending.append(i)
        elif op.overlap == "async":
            deps = [prev] if prev >= 0 else []
        else:
            deps = ([prev] if prev >= 0 else []) + pending
            pending.append(i)
        stream = op.stream
        ready = stream_free.get(stream, np.zeros(shape))
        for d in deps:
            ready = np.maximum(ready, end[d])
        axes = group_axes(op.group or "dp")
        start = ready.max(axis=axes, keepdims=True) if axes else ready
        e = np.broadcast_to(start + comm_time(i, op), shape)
        stream_free[stream] = e
        end[i] = e
        comm_end[cat] = np.maximum(comm_end[cat], e) if cat in comm_end else e
    flat = (batch, -1)
    cend = compute_free.reshape(flat) if any_compute else np.zeros((batch, 1))
    ctime = cend.max(axis=1)
    slow = cend.argmax(axis=1)
    out: list[PassTiming] = []
    busy_f = busy.reshape(flat)
    parts_f = {k: v.reshape(flat) for k, v in parts.items()}
    gaps_f = {cats[c]: v.reshape(flat) for c, v in gaps.items()}
    layers_f = {k: v.reshape(flat).max(axis=1) for k, v in layer_done.items()}
    comm_f = {k: v.reshape(flat).max(axis=1) for k, v in comm_end.items()}
    for b in range(batch):
        j = int(slow[b])
        bd: dict[str, float] = {}
        for k, v in parts_f.items():
            if v[b, j] > 0:
                bd[k] = bd.get(k, 0.0) + float(v[b, j])
        for k, v in gaps_f.items():
            if v[b, j] > 0:
                bd[k] = bd.get(k, 0.0) + float(v[b, j])
        ct = float(ctime[b])
        tail = tuple(sorted((k, float(v[b]) - ct) for k, v in comm_f.items() if v[b] > ct))
        out.append(PassTiming(
            compute_time=ct, breakdown=tuple(sorted(bd.items())),
            layer_done=tuple(sorted((k, float(v[b])) for k, v in layers_f.items())),
            tail=tail, busy=busy_f[b].copy()))
    return out


# --- executors -------------------------------------------------------------------------------


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
    bg = background or {}
    n = len(tasks)
    stream_prev, stream_next = stream_links(tasks)
    waits = [0] * n
    on_end: list[list[int]] = [[] for _ in range(n)]
    on_start: list[list[int]] = [[] for _ in range(n)]
    for t in tasks:
        deps = set(t.deps)
        after = {d for d, _ in t.start_after}
        waits[t.id] = len(deps) + len(after) + (1 if stream_prev[t.id] >= 0 else 0)
        for d in deps:
            on_end[d].append(t.id)
        for d in after:
            on_start[d].append(t.id)
    start = [math.nan] * n
    end = [math.nan] * n
    binding = [-1] * n
    heap: list[tuple[float, int, int, int, int]] = []  # time, seq, kind, task, version
    seq = itertools.count()
    BEGIN, END, DONE = 0, 1, 2
    remaining: dict[int, float] = {}
    rate: dict[int, float] = {}
    stamp: dict[int, float] = {}
    version: dict[int, int] = {}
    users: dict[Resource, set[int]] = defaultdict(set)
    load: dict[Resource, float] = defaultdict(float)

    def push(time: float, kind: int, i: int, ver: int = 0) -> None:
        heapq.heappush(heap, (time, next(seq), kind, i, ver))

    def reschedule(resources: Sequence[Resource], now: float) -> None:
        seen_r: set[Resource] = set()
        seen_t: set[int] = set()
        stack = list(resources)
        while stack:
            r = stack.pop()
            if r in seen_r:
                continue
            seen_r.add(r)
            for i in users.get(r, ()):
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
            if load[r] > 0:
                paths.append({r: 1.0})
                demands.append(min(load[r], 1.0))
        rates = max_min_rates(paths, lambda _r: 1.0, demands)
        for i, x in zip(ids, rates, strict=False):
            rate[i] = x
            version[i] = version.get(i, 0) + 1
            push(now + remaining[i] / x if x > 0 else math.inf, DONE, i, version[i])

    def release(i: int, now: float) -> None:
        t = tasks[i]
        if t.start_after:
            rel = max(start[d] + off for d, off in t.start_after)
            if rel > now:
                push(now + (rel - now), BEGIN, i)
                return
        begin(i, now)

    def satisfy(i: int, now: float) -> None:
        waits[i] -= 1
        if waits[i] == 0:
            release(i, now)

    def begin(i: int, now: float) -> None:
        t = tasks[i]
        p = stream_prev[i]
        prev_end = end[p] if p >= 0 else 0.0
        binding[i] = binding_of(t, start, end, prev_end)
        start[i] = now
        for j in on_start[i]:
            satisfy(j, now)
        f = flows.get(i)
        if bg.get(i):
            for r, u in bg[i]:
                load[r] += u
            reschedule([r for r, _ in bg[i]], now)
        if f is not None and f.transfer_s > 0 and f.usage:
            remaining[i] = f.transfer_s
            rate[i] = 0.0
            stamp[i] = now
            for r, _ in f.usage:
                users[r].add(i)
            reschedule([r for r, _ in f.usage], now)
        elif f is not None:
            total = f.latency_s + f.transfer_s
            push(now + total if total > 0 else now, END, i)
        else:
            push(now + t.duration if t.duration > 0 else now, END, i)

    for i in range(n):
        if waits[i] == 0:
            release(i, 0.0)
    while heap:
        now, _, kind, i, ver = heapq.heappop(heap)
        if kind == BEGIN:
            begin(i, now)
        elif kind == DONE:
            if ver != version.get(i):
                continue
            f = flows[i]
            for r, _ in f.usage:
                users[r].discard(i)
            del remaining[i], rate[i], stamp[i]
            version[i] = -1
            reschedule([r for r, _ in f.usage], now)
            push(now + f.latency_s if f.latency_s > 0 else now, END, i)
        else:
            end[i] = now
            if bg.get(i):
                for r, u in bg[i]:
                    load[r] -= u
                    if load[r] < 1e-12:
                        load[r] = 0.0
                reschedule([r for r, _ in bg[i]], now)
            for j in on_end[i]:
                satisfy(j, now)
            if stream_next[i] >= 0:
                satisfy(stream_next[i], now)
    missing = [t.name or str(t.id) for t in tasks if end[t.id] != end[t.id]]
    if missing:
        raise ScheduleDeadlock(f"{len(missing)} tasks never ran (first: {missing[0]})")
    return Timeline(tuple(tasks), tuple(start), tuple(end), tuple(binding), tuple(stream_prev))


# --- contention inside a chunk pass ----------------------------------------------------------


def _rank_flow(profile: CommProfile) -> Flow:
    return Flow(profile.latency_s, profile.transfer_s, profile.usage)


def fluid_pass(ops: Sequence[Op], compute: ComputeModel, faults: _LinkFactors
               ) -> tuple[PassTiming, dict[int, float]]:
    """A healthy rank's chunk pass with its overlapping collectives sharing its ports, and
    the stretch (contended / nominal duration) of each collective, by op index."""
    tasks = op_tasks(ops, compute.time,
                     lambda op: faults.cost(op.comm or "none", op.group or "dp", op.size, 0))
    flows = {t.id: _rank_flow(faults.profile(ops[t.id].comm or "none", ops[t.id].group or "dp",
                                             ops[t.id].size, 0))
             for t in tasks if t.stream != "compute"}
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
        if tl.end[t.id] > compute_end:
            tail[t.category] = max(tail.get(t.category, 0.0), tl.end[t.id] - compute_end)
        if t.duration > 0:
            stretch[t.id] = (tl.end[t.id] - tl.start[t.id]) / t.duration
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


# --- the pipeline ----------------------------------------------------------------------------


class _Builder(TaskBuilder):
    """Tasks with symbolic keys (:class:`~codesign.engine.training.TaskBuilder`), plus the unit
    each task belongs to and its network flow or background load for contention."""

    def __init__(self) -> None:
        super().__init__()
        self.unit: list[tuple[int, int] | None] = []
        self.flows: dict[Hashable, Flow] = {}
        self.background: dict[Hashable, tuple[tuple[Resource, float], ...]] = {}

    def add(self, key: Hashable, stream: str, duration: float, deps: tuple[Hashable, ...] = (),
            name: str = "", category: str = "",
            start_after: tuple[tuple[Hashable, float], ...] = (),
            breakdown: tuple[tuple[str, float], ...] = (),
            unit: tuple[int, int] | None = None) -> Hashable:
        self.unit.append(unit)
        return super().add(key, stream, duration, deps, name, category, start_after, breakdown)


@dataclass
class _Unit:
    """One simulated cluster: a replica class's cluster at one stage."""

    passes: dict[tuple[int, str], PassTiming]
    member_opt: np.ndarray | float  # optimizer seconds per member
    opt_time: float
    send_fwd: float  # to the next stage
    send_bwd: float  # to the previous stage
    send_fwd_pid: int = 0
    send_bwd_pid: int = 0


def _perturbed_clusters(geo: _Geometry, faults: _LinkFactors, speed_t: np.ndarray,
                        gtype_t: np.ndarray, by_v: Mapping[int, ChunkGraph]
                        ) -> tuple[np.ndarray, dict[int, list[int]]]:
    """Which clusters differ from a healthy one: ``cluster_id[stage, replica]`` (-1:
    healthy, else an index into the stage's distinct perturbed clusters) and, per stage, a
    replica holding each distinct one."""
    pp = geo.pp
    vpp = len(by_v) // pp
    member_axes = tuple(range(1, 1 + len(geo.c_shape)))
    cluster_id = np.full((pp, geo.n_rep), -1, dtype=np.int64)
    batches: dict[int, list[int]] = {}
    for s in range(pp):
        keys: set[tuple[str, str]] = set()
        for c in range(vpp):
            ch = by_v[c * pp + s]
            for op in (*ch.forward, *ch.backward):
                if op.kind == "comm":
                    g = op.group or "dp"
                    keys.add((g, faults.dec(op.comm or "none", g, op.size)))
        chunk_keys = sorted(keys)
        fids = {k: faults.chunk(s, *k) for k in chunk_keys}
        bad = (speed_t[s] != 1.0).any(axis=member_axes) | (gtype_t[s] != 0).any(
            axis=member_axes)
        for arr in fids.values():
            bad = bad | (arr != 0).reshape(geo.n_rep, -1).any(axis=1)
        seen: dict[tuple[bytes, ...], int] = {}
        reps: list[int] = []
        for r in (int(x) for x in np.flatnonzero(bad)):
            key = (speed_t[s, r].tobytes(), gtype_t[s, r].tobytes(),
                   *(fids[k][r].tobytes() for k in chunk_keys))
            if key not in seen:
                seen[key] = len(reps)
                reps.append(r)
            cluster_id[s, r] = seen[key]
        batches[s] = reps
    return cluster_id, batches


def _rank_outputs(geo: _Geometry, tl: Timeline, bld: _Builder, ids: Mapping[Hashable, int],
                  classes: Sequence[Sequence[int]], units: Sequence[Sequence[_Unit]],
                  orders: Sequence[Sequence[tuple[str, int, int]]]
                  ) -> tuple[np.ndarray, np.ndarray]:
    """When each rank's last work ends and its kernel seconds (optimizer included)."""
    pp = geo.pp
    finish = np.zeros(geo.world)
    busy = np.zeros(geo.world)
    rest_end: dict[tuple[int, int], float] = defaultdict(float)
    for task, un in zip(tl.tasks, bld.unit, strict=True):
        if un is not None and task.name != "optimizer":
            rest_end[un] = max(rest_end[un], tl.end[task.id])
    for k, reps in enumerate(classes):
        for s in range(pp):
            u = units[k][s]
            opt_start = tl.start[ids[(k, "OPT", s)]]
            mem_finish = np.maximum(rest_end[(k, s)], opt_start + np.asarray(u.member_opt))
            mem_busy = np.asarray(u.member_opt, dtype=float).copy()
            for ph, _mb, c in orders[s]:
                mem_busy = mem_busy + np.asarray(u.passes[(c * pp + s, ph)].busy)
            ranks = geo.table[s][np.asarray(reps)].reshape(len(reps), -1)
            finish[ranks] = np.broadcast_to(mem_finish.reshape(-1), (len(reps), geo.members))
            busy[ranks] = np.broadcast_to(mem_busy.reshape(-1), (len(reps), geo.members))
    return finish, busy


def simulate_expanded(graph: TrainingGraph, computes: Sequence[ComputeModel],
                      network: NetworkModel, perturbations: Perturbations = Perturbations(),
                      *, contention: bool = False) -> ExpandedResult:
    """Simulate one training step rank by rank (see module docstring).

    ``computes[0]`` prices the run's GPU, ``computes[1]`` the second GPU type of
    ``perturbations.mix_ranks``.
    """
    run = graph.run
    p = run.parallel
    pp, vpp = p.pp, p.vpp
    n_v = pp * vpp
    geo = _Geometry(graph, network)
    world = geo.world
    faults = _LinkFactors(geo, network, perturbations.link_faults)
    compute = computes[0]

    speed = np.ones(world)
    gtype = np.zeros(world, dtype=np.int64)
    for rank, frac in perturbations.stragglers:
        speed[rank] = frac
    if perturbations.mix_ranks is not None:
        lo, hi = perturbations.mix_ranks
        gtype[lo:hi] = 1
    speed_t = speed[geo.table]
    gtype_t = gtype[geo.table]

    # chunk passes of healthy clusters: the symmetric engine's, or contended ones
    sym = time_chunks(graph, compute, network)
    by_v = {c.virtual_stage: c for c in graph.chunks}
    healthy_pass: dict[tuple[int, str], PassTiming] = {}
    stretch: dict[tuple[int, str], dict[int, float]] = {}
    for (v, ph), t in sym.items():
        if contention:
            ops = by_v[v].forward if ph == "F" else by_v[v].backward
            healthy_pass[(v, ph)], stretch[(v, ph)] = fluid_pass(ops, compute, faults)
        else:
            healthy_pass[(v, ph)] = _from_chunk_timing(t)

    cluster_id, batches = _perturbed_clusters(geo, faults, speed_t, gtype_t, by_v)

    # member-by-member chunk passes of the perturbed clusters
    n_types = 2 if perturbations.mix_ranks is not None else 1
    models = list(computes[:n_types])
    perturbed: dict[int, list[dict[tuple[int, str], PassTiming]]] = {}
    for s, reps in batches.items():
        if not reps:
            continue
        idx = np.asarray(reps)
        out: list[dict[tuple[int, str], PassTiming]] = [{} for _ in reps]
        for c in range(vpp):
            v = c * pp + s
            for ph in "FB":
                ops = by_v[v].forward if ph == "F" else by_v[v].backward
                prices = _BatchPrices(models, faults, s, idx, stretch.get((v, ph), {}))
                results = batch_pass(ops, speed_t[s][idx], gtype_t[s][idx], prices.compute,
                                 prices.comm, geo.group_axes)
                hp = healthy_pass[(v, ph)]
                for j, pr in enumerate(results):
                    out[j][(v, ph)] = PassTiming(pr.compute_time, pr.breakdown, pr.layer_done,
                                                 pr.tail, pr.busy, hp.background)
        perturbed[s] = out

    # optimizer per stage and member
    zero = p.sharding_stage
    dense_grp, expert_grp = state_groups(p)
    dense_n = network.group_size(dense_grp)
    expert_n = network.group_size(expert_grp)
    opt_op: dict[int, Op] = {}
    for s in range(pp):
        chunks = [by_v[c * pp + s] for c in range(vpp)]
        opt_params = sum(_local_params(ch, zero, dense_n, expert_n) for ch in chunks)
        opt_op[s] = Op(name="optimizer", kind="memory", category="optimizer", layer=-1,
                       bytes=opt_params * ADAM_BYTES_PER_PARAM)

    # per sending rank; a scatter/gathered send ends with a TP all-gather at the receiver
    # (priced on the healthy network: link faults are modelled on the pipeline links)
    act_bytes, gathered = pipeline_message(run)
    gather_s = network.collective("all_gather", "tp", gathered).time_s if gathered else 0.0
    # a blocking send holds the sending stage's compute stream (overlap_p2p off)
    blocking = not p.overlap_p2p

    # replica classes
    rep_keys: dict[tuple[int, ...], list[int]] = defaultdict(list)
    fwd_ids = [faults.p2p(s, 1) for s in range(pp - 1)]
    bwd_ids = [faults.p2p(s, -1) for s in range(1, pp)]
    for rep in range(geo.n_rep):
        rkey = (*(int(cluster_id[s, rep]) for s in range(pp)),
                *(int(a[rep]) for a in fwd_ids), *(int(a[rep]) for a in bwd_ids))
        rep_keys[rkey].append(rep)
    classes = list(rep_keys.values())
    units: list[list[_Unit]] = []
    for reps in classes:
        rep = reps[0]
        row: list[_Unit] = []
        for s in range(pp):
            cid = int(cluster_id[s, rep])
            if cid < 0:
                passes = healthy_pass
                t_opt = compute.time(opt_op[s])
                member_opt: np.ndarray | float = t_opt
            else:
                passes = perturbed[s][cid]
                base = np.array([m.time(opt_op[s]) for m in models])
                mo = (base[gtype_t[s, rep]] / speed_t[s, rep]).reshape(-1)
                member_opt = mo
                t_opt = float(mo.max())
            fpid = int(fwd_ids[s][rep]) if s < pp - 1 else 0
            bpid = int(bwd_ids[s - 1][rep]) if s > 0 else 0
            fwd = faults.cost("p2p", "pp", act_bytes, fpid) if pp > 1 else 0.0
            bwd = faults.cost("p2p", "pp", act_bytes, bpid) if pp > 1 else 0.0
            row.append(_Unit(passes, member_opt, t_opt, fwd, bwd, fpid, bpid))
        units.append(row)

    bld = _Builder()
    orders = schedule(p.pipeline_schedule, pp, vpp, graph.num_microbatches)
    sync_grads = zero < 3 and (dense_n > 1 or expert_n > 1)
    gather_params = zero in (1, 2) and (dense_n > 1 or expert_n > 1)
    n_cls = len(classes)

    def resource(k: int, s: int, tier: str, d: str) -> Resource:
        return (k, s, tier, d)

    def unit_flow(k: int, s: int, prof: CommProfile) -> Flow:
        """A collective's part on the ports of class ``k``'s cluster at stage ``s``."""
        usage = tuple((resource(k, s, tier, d), u) for (tier, d), u in prof.usage)
        return Flow(prof.latency_s, prof.transfer_s, usage)

    def barrier_cost(s: int, kind: str, dense: float, expert: float,
                     nbytes: float) -> tuple[float, list[CommProfile]]:
        """Slowest instance of a dense (+ expert) collective over the stage's groups."""
        total = 0.0
        profs: list[CommProfile] = []
        for i, (grp, n_params) in enumerate(((dense_grp, dense), (expert_grp, expert))):
            if i == 1 and not expert:
                continue
            size = n_params * nbytes
            ids = faults.barrier(s, grp, faults.dec(kind, grp, size))
            worst = max(ids, key=lambda pid: faults.cost(kind, grp, size, pid))
            total += faults.cost(kind, grp, size, worst)
            if contention:
                profs.append(faults.profile(kind, grp, size, worst))
        return total, profs

    def sym_total(kind: str, dense: float, expert: float, nbytes: float) -> float:
        # the symmetric engine's arithmetic, for bit-identical healthy durations
        t = network.collective(kind, dense_grp, dense * nbytes).time_s
        if expert:
            t += network.collective(kind, expert_grp, expert * nbytes).time_s
        return t

    def sync_task(key: Hashable, s: int, k: int, stream: str, dur: float,
                  prof: CommProfile | None, deps: tuple[Hashable, ...],
                  after: tuple[tuple[Hashable, float], ...], name: str) -> Hashable:
        """A DP collective of stage ``s``: one task for one class; otherwise every class
        arrives, the collective runs from the last arrival, and every class holds its stream
        until it ends. Under contention each class's part of it shares that class's ports
        and the collective ends with the slowest part."""
        cat = comm_category("dp")
        if n_cls == 1:
            bld.add((k, key), stream, dur, deps, name=name, category=cat, start_after=after,
                    unit=(k, s))
            if prof is not None:
                bld.flows[(k, key)] = unit_flow(k, s, prof)
            return (k, key)
        bld.add(("ARR", k, key), stream, 0.0, deps, name=f"{name}.arrive", category=cat,
                start_after=after, unit=(k, s))
        arrived = tuple(("ARR", j, key) for j in range(n_cls))
        if prof is None:
            if k == 0:
                bld.add(("SYNC", key), f"s{s}/sync", dur, arrived, name=name, category=cat)
        else:
            if k == 0:
                bld.add(("GO", key), f"s{s}/sync.go", 0.0, arrived, name=f"{name}.start",
                        category=cat)
            bld.add(("PART", k, key), f"{stream}.sync", dur, (("GO", key),), name=name,
                    category=cat)
            bld.flows[("PART", k, key)] = unit_flow(k, s, prof)
            if k == n_cls - 1:
                bld.add(("SYNC", key), f"s{s}/sync", 0.0,
                        tuple(("PART", j, key) for j in range(n_cls)), name=f"{name}.join",
                        category=cat)
        return bld.add(("HOLD", k, key), stream, 0.0, (("SYNC", key),), name=f"{name}.hold",
                       category=cat, unit=(k, s))

    def sync_ref(k: int, key: Hashable) -> Hashable:
        """The key a class's stream waits on for DP collective ``key``."""
        return (k, key) if n_cls == 1 else ("HOLD", k, key)

    # bucket order of the symmetric engine (from the healthy timings)
    position = [{key: i for i, key in enumerate(orders[s])} for s in range(pp)]
    bucket_order: dict[int, list[tuple[int, int, float, float]]] = {}
    for s in range(pp):
        lb: dict[int, tuple[str, int, int]] = {}
        for ph, mb, c in orders[s]:
            if ph == "B":
                lb[c] = (ph, mb, c * pp + s)
        rows = []
        for c in range(vpp):
            ch = by_v[c * pp + s]
            done_at = dict(healthy_pass[(ch.virtual_stage, "B")].layer_done)
            for i, (layer, dense, expert) in enumerate(ch.layer_params):
                at = done_at.get(layer, healthy_pass[(ch.virtual_stage, "B")].compute_time)
                ph, mb, _ = lb[c]
                rows.append((position[s][(ph, mb, c)], at, c, i, layer, dense, expert))
        bucket_order[s] = [(c, layer, dense, expert)
                           for _, _, c, _, layer, dense, expert in sorted(rows)]

    healthy_faults = not faults.active
    grad_kind = "all_reduce" if zero == 0 else "reduce_scatter"
    for stage in range(pp):
        # buckets are numbered (the embedding and the LM head both have layer -1)
        grad_dur: list[tuple[float, CommProfile | None]] = []
        for _c, _layer, dense, expert in bucket_order[stage]:
            if sync_grads:
                if healthy_faults:
                    d = sym_total(grad_kind, dense, expert, GRAD_REDUCE_BYTES)
                    profs = [] if not contention else barrier_cost(
                        stage, grad_kind, dense, expert, GRAD_REDUCE_BYTES)[1]
                else:
                    d, profs = barrier_cost(stage, grad_kind, dense, expert, GRAD_REDUCE_BYTES)
                grad_dur.append((d, combine(profs) if contention else None))
        gather_dur: dict[tuple[int, int], tuple[float, CommProfile | None]] = {}
        if gather_params:
            for c in range(vpp):
                lp = by_v[c * pp + stage].layer_params
                for i, (_, dense, expert) in enumerate(lp):
                    if healthy_faults:
                        d = sym_total("all_gather", dense, expert, PARAM_BYTES)
                        profs = [] if not contention else barrier_cost(
                            stage, "all_gather", dense, expert, PARAM_BYTES)[1]
                    else:
                        d, profs = barrier_cost(stage, "all_gather", dense, expert, PARAM_BYTES)
                    gather_dur[(c, i)] = (d, combine(profs) if contention else None)
        for k in range(n_cls):
            u = units[k][stage]
            pre = f"k{k}/s{stage}"
            cs, dps = f"{pre}/compute", f"{pre}/dp"
            send_f, send_b = (cs, cs) if blocking else (f"{pre}/send_fwd", f"{pre}/send_bwd")

            def received(ph: str, mb: int, v: int, k: int = k, cs: str = cs,
                         stage: int = stage) -> Hashable:
                """The neighbour's send of pass (ph, mb, v), or the all-gather of its pieces
                on this stage's compute stream (scatter/gathered sends)."""
                send = (k, "PF" if ph == "F" else "PB", mb, v)
                if not gather_s:
                    return send
                return bld.add((k, "PG", *send[1:]), cs, gather_s, (send,),
                               name=f"gather_{send[1]}{mb}", category=comm_category("pp"),
                               unit=(k, stage))
            chunks = [by_v[c * pp + stage] for c in range(vpp)]
            first_bucket: dict[int, Hashable] = {}
            if gather_params and p.overlap_param_gather:
                for c, ch in enumerate(chunks):
                    for i, (layer, _, _) in enumerate(ch.layer_params):
                        d, fl = gather_dur[(c, i)]
                        sync_task(("AG", stage, c, i), stage, k, dps, d, fl, (), (),
                                  f"param_gather.l{layer}")
                    first_bucket[c] = sync_ref(k, ("AG", stage, c, 0))
            first_f: set[int] = set()
            tails: list[Hashable] = []
            last_b: dict[int, Hashable] = {}
            for ph, mb, c in orders[stage]:
                v = c * pp + stage
                key = (k, ph, mb, v)
                pt = u.passes[(v, ph)]
                deps: list[Hashable] = []
                if ph == "F":
                    if v > 0:
                        deps.append((k, "F", mb, v - 1) if (v - 1) % pp == stage
                                    else received("F", mb, v - 1))
                    if c not in first_f:
                        first_f.add(c)
                        if c in first_bucket:
                            deps.append(first_bucket[c])
                else:
                    if v < n_v - 1:
                        deps.append((k, "B", mb, v + 1) if (v + 1) % pp == stage
                                    else received("B", mb, v + 1))
                    last_b[c] = key
                bld.add(key, cs, pt.compute_time, tuple(deps), name=f"{ph}{mb}.v{v}",
                      category="forward" if ph == "F" else "backward", breakdown=pt.breakdown,
                      unit=(k, stage))
                if contention and pt.background:
                    bld.background[key] = tuple(((k, stage, *r), x)  # type: ignore[misc]
                                                for r, x in pt.background)
                for cat, dt in pt.tail:
                    tails.append(bld.add((k, "TAIL", key, cat), f"{pre}/{cat}", dt, (key,),
                                       name=f"tail.{ph}{mb}.v{v}", category=cat,
                                       unit=(k, stage)))
                if ph == "F" and v < n_v - 1 and (v + 1) % pp != stage:
                    kk = bld.add((k, "PF", mb, v), send_f, u.send_fwd, (key,),
                               name=f"send_fwd{mb}", category=comm_category("pp"),
                               unit=(k, stage))
                    if contention:
                        bld.flows[kk] = _send_flow(faults, act_bytes, u.send_fwd_pid,
                                                 resource, k, stage, stage + 1)
                if ph == "B" and v > 0 and (v - 1) % pp != stage:
                    kk = bld.add((k, "PB", mb, v), send_b, u.send_bwd, (key,),
                               name=f"send_bwd{mb}", category=comm_category("pp"),
                               unit=(k, stage))
                    if contention:
                        bld.flows[kk] = _send_flow(faults, act_bytes, u.send_bwd_pid,
                                                 resource, k, stage, stage - 1)
            last_compute = orders[stage][-1]
            last_key = (k, last_compute[0], last_compute[1], last_compute[2] * pp + stage)
            grad_keys: list[Hashable] = []
            if sync_grads:
                for j, (c, layer, _, _) in enumerate(bucket_order[stage]):
                    d, fl = grad_dur[j]
                    ch = chunks[c]
                    done_at = dict(u.passes[(ch.virtual_stage, "B")].layer_done)
                    at = done_at.get(layer, u.passes[(ch.virtual_stage, "B")].compute_time)
                    if p.overlap_grad_reduce:
                        sync_task(("GR", stage, j), stage, k, dps, d, fl, (),
                                  ((last_b[c], at),), f"grad_reduce.l{layer}")
                    else:
                        sync_task(("GR", stage, j), stage, k, dps, d, fl, (last_key,), (),
                                  f"grad_reduce.l{layer}")
                    grad_keys.append(sync_ref(k, ("GR", stage, j)))
            bld.add((k, "OPT", stage), cs, u.opt_time, (last_key, *grad_keys, *tails),
                  name="optimizer", category="optimizer", unit=(k, stage))
            if gather_params and not p.overlap_param_gather:
                for c, ch in enumerate(chunks):
                    for i, (layer, _, _) in enumerate(ch.layer_params):
                        d, fl = gather_dur[(c, i)]
                        sync_task(("AG", stage, c, i), stage, k, dps, d, fl,
                                  ((k, "OPT", stage),), (), f"param_gather.l{layer}")

    tasks, ids = bld.tasks()
    if contention:
        flows = {ids[key]: f for key, f in bld.flows.items()}
        background = {ids[key]: v for key, v in bld.background.items()}
        tl = execute_fluid(tasks, flows, background)
    else:
        tl = execute_exact(tasks)
    step = tl.makespan

    unit_end: dict[tuple[int, int], float] = defaultdict(float)
    for task, un in zip(tasks, bld.unit, strict=True):
        if un is not None:
            unit_end[un] = max(unit_end[un], tl.end[task.id])
    crit = max(unit_end, key=lambda un: (unit_end[un], un[1], -un[0]))
    parts = attribute(tl, f"k{crit[0]}/s{crit[1]}/compute", step)

    finish, busy = _rank_outputs(geo, tl, bld, ids, classes, units, orders)
    slowed = tuple(sorted((g, s, tier, f) for (g, s, tier), f in faults.slowed.items()))
    return ExpandedResult(
        step_time_s=step, breakdown_s=parts, critical_stage=crit[1], rank_finish_s=finish,
        rank_busy_s=busy, replica_classes=n_cls,
        perturbed_clusters=sum(len(r) for r in batches.values()), clusters=pp * geo.n_rep,
        tasks=len(tasks), slowed=slowed, timeline=tl)


class _BatchPrices:
    """Kernel and collective prices of one chunk pass for a batch of perturbed clusters."""

    def __init__(self, models: Sequence[ComputeModel], faults: _LinkFactors, stage: int,
                 idx: np.ndarray, stretch: Mapping[int, float]) -> None:
        self.models, self.faults, self.stage = models, faults, stage
        self.idx, self.stretch = idx, stretch

    def compute(self, op: Op) -> np.ndarray:
        """Seconds of ``op`` on each GPU type."""
        return np.array([m.time(op) for m in self.models])

    def comm(self, i: int, op: Op) -> np.ndarray:
        """Seconds of the ``i``-th op on each group instance of the batch's clusters."""
        f = self.faults
        g, kind = op.group or "dp", op.comm or "none"
        fid = f.chunk(self.stage, g, f.dec(kind, g, op.size))[self.idx]
        table = np.array([f.cost(kind, g, op.size, k) for k in range(len(f.pairs))])
        return table[fid] * self.stretch.get(i, 1.0)


def _send_flow(faults: _LinkFactors, size: float, pid: int,
               res: Callable[[int, int, str, str], Resource], k: int, src: int,
               dst: int) -> Flow:
    prof = faults.profile("p2p", "pp", size, pid)
    usage: list[tuple[Resource, float]] = []
    for (tier, _), u in prof.usage:
        usage += [(res(k, src, tier, "tx"), u), (res(k, dst, tier, "rx"), u)]
    return Flow(prof.latency_s, prof.transfer_s, tuple(usage))
