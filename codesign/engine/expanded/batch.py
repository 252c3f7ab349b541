"""The vectorized chunk pass of the per-rank engine: one chunk pass simulated operator by
operator for every member of a batch of perturbed clusters at once (each member's compute
stream and communication streams, each collective a barrier across its group instance), and
the kernel and collective prices of such a batch."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from codesign.engine.chunk import comm_category, lead
from codesign.engine.executor import HOST
from codesign.engine.expanded.link_factors import LinkFactors
from codesign.engine.expanded.values import PassTiming
from codesign.hardware.compute import ComputeModel
from codesign.ir import Op
from codesign.workload.step_program import wire_pass


def batch_pass(ops: Sequence[Op], speed: np.ndarray, gtype: np.ndarray,
               compute_time: Callable[[Op], np.ndarray],
               comm_time: Callable[[int, Op], np.ndarray],
               group_axes: Callable[[str], tuple[int, ...]],
               host_time: Callable[[Op], float] | None = None) -> list[PassTiming]:
    """Simulate one chunk pass for a batch of clusters, every member at once.

    ``speed`` and ``gtype`` have shape ``(batch, *member)``; ``compute_time(op)`` gives the
    op's seconds per GPU type (array); ``comm_time(i, op)`` the duration of the ``i``-th op
    per group instance (shape ``(batch, *member)`` with the group's axes of size 1). Each
    collective runs on its stream with the dependencies of the overlap rule
    (:func:`~codesign.workload.step_program.wire_pass`, as in the symmetric engine); it starts
    when every member of its instance is ready on its stream and its dependencies are done.
    Idle compute time goes to the category of the collective that released the op.
    ``host_time``: the host issues each operator first, as in
    :func:`codesign.engine.chunk.op_tasks` (the host's speed is every member's).
    """
    shape = speed.shape
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
    wiring = wire_pass(ops)
    durs = [None if op.kind == "comm" else _member_time(compute_time(op), gtype, speed)
            for op in ops]
    issued = np.zeros(shape)  # when the host has issued the op (host_time given)
    synced: np.ndarray | None = None  # end of the last host-synchronizing op
    host_cat, stop = -1, 0
    ahead: Any = False
    issue_s = [0.0] * len(ops)
    if host_time is not None:
        host_cat = len(cats)
        cat_id[HOST] = host_cat
        cats.append(HOST)
        issue_s = [0.0 if op.kind == "comm" else host_time(op) for op in ops]
        # op_tasks' host_ahead, member by member
        stop, ahead = lead(ops, [0.0 if d is None else d for d in durs], issue_s)
    for i, op in enumerate(ops):
        deps = wiring[i]
        gate: list[tuple[int, np.ndarray]] = []
        if host_time is not None and op.kind != "comm":
            if synced is not None:
                issued = np.maximum(issued, synced)
            if any_compute:  # the first kernel was issued during the previous pass (op_tasks)
                issued = issued + issue_s[i]
            gate = [(-1, np.where(ahead, -np.inf, issued) if i < stop else issued)]
        if op.kind != "comm":
            ready = compute_free
            if deps or gate:
                best_t = np.full(shape, -1.0)
                best_c = np.full(shape, -1, dtype=np.int64)
                for d, e in [*((d, end[d]) for d in deps), *gate]:
                    upd = e > best_t
                    best_t = np.where(upd, e, best_t)
                    best_c = np.where(upd, op_cat[d] if d >= 0 else host_cat, best_c)
                    ready = np.maximum(ready, e)
                gap = ready - compute_free
                for c in np.unique(best_c[gap > 0]):
                    g = np.where((best_c == c) & (gap > 0), gap, 0.0)
                    gaps[int(c)] = gaps[int(c)] + g if int(c) in gaps else g
            dur = durs[i]
            assert dur is not None
            e = ready + dur
            busy += dur
            parts[op.category] = parts[op.category] + dur if op.category in parts else dur
            prev_layer = layer_done.get(op.layer)
            layer_done[op.layer] = e if prev_layer is None else np.maximum(prev_layer, e)
            compute_free = e
            end[i] = e
            if op.host_sync:
                synced = e
            any_compute = True
            continue
        cat = comm_category(op.group)
        if cat not in cat_id:
            cat_id[cat] = len(cats)
            cats.append(cat)
        op_cat[i] = cat_id[cat]
        stream = op.stream
        ready = stream_free.get(stream, np.zeros(shape))
        for d in deps:
            ready = np.maximum(ready, end[d])
        axes = group_axes(op.group or "dp")
        start = ready.max(axis=axes, keepdims=True) if axes else ready
        e = np.broadcast_to(start + comm_time(i, op), shape)
        stream_free[stream] = e
        end[i] = e
        if op.host_sync:
            synced = e
        comm_end[cat] = np.maximum(comm_end[cat], e) if cat in comm_end else e
    return _timings(compute_free if any_compute else None, busy, parts,
                    {cats[c]: v for c, v in gaps.items()}, layer_done, comm_end)


def _member_time(base: np.ndarray, gtype: np.ndarray, speed: np.ndarray) -> np.ndarray:
    """Seconds of one kernel on each member: its GPU type's price over the member's speed."""
    return (base[gtype] if base.size > 1 else base[0]) / speed


def _timings(compute_free: np.ndarray | None, busy: np.ndarray,
             parts: Mapping[str, np.ndarray], gaps: Mapping[str, np.ndarray],
             layer_done: Mapping[int, np.ndarray], comm_end: Mapping[str, np.ndarray]
             ) -> list[PassTiming]:
    """One :class:`PassTiming` per cluster of the batch from the per-member arrays of
    :func:`batch_pass` (``compute_free`` is ``None`` when the pass has no compute op)."""
    batch = busy.shape[0]
    flat = (batch, -1)
    cend = compute_free.reshape(flat) if compute_free is not None else np.zeros((batch, 1))
    ctime = cend.max(axis=1)
    slow = cend.argmax(axis=1)
    out: list[PassTiming] = []
    busy_f = busy.reshape(flat)
    parts_f = {k: v.reshape(flat) for k, v in parts.items()}
    gaps_f = {k: v.reshape(flat) for k, v in gaps.items()}
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



class BatchPrices:
    """Kernel and collective prices of one chunk pass for a batch of perturbed clusters."""

    def __init__(self, models: Sequence[ComputeModel], faults: LinkFactors, stage: int,
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


