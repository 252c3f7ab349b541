"""Chrome / Perfetto timeline of a simulated training step (``codesign simulate --trace``).

The engine simulates one representative rank per pipeline stage: the stage's compute stream
runs chunk passes (one virtual stage, one micro-batch, forward or backward) and the optimizer;
its data-parallel stream runs gradient buckets and parameter all-gathers; pipeline sends have
their own streams. Each chunk pass was itself simulated operator by operator (compute stream
and one stream per communication group). This module lays both levels out as a Chrome trace
(the JSON object format with a ``traceEvents`` list, which https://ui.perfetto.dev and
``chrome://tracing`` load):

* one process per pipeline stage, named after its representative rank;
* one thread (track) per stream: ``compute``, ``tp comm``, ``cp comm``, ``ep comm``,
  ``dp comm``, ``pp send fwd``, ``pp send bwd`` (and ``dp comm (in pass)`` for ZeRO-3
  collectives inside passes); a collective that overlaps the previous one on its stream (the
  engine lets a pass's collective run past the pass) goes to a numbered extra track;
* complete events (``ph: "X"``, ``ts``/``dur`` in microseconds): a chunk pass named
  ``F3.v5`` (forward of micro-batch 3 on virtual stage 5) with its kernels nested inside,
  collectives named ``<op> F3.v5``; ``args`` carry micro-batch, virtual stage, layer, FLOPs,
  bytes, collective kind and group, and the breakdown category.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from codesign import __version__
from codesign.api import simulate_detailed
from codesign.engine.executor import Task
from codesign.engine.training import GRAD_REDUCE_BYTES, PARAM_BYTES, StepResult
from codesign.ir import Op
from codesign.network.model import NetworkModel
from codesign.report.training import TrainingReport
from codesign.specs.run import TrainingRun
from codesign.trace.chakra import optimizer_params
from codesign.workload.dims import pipeline_message
from codesign.workload.training import ADAM_BYTES_PER_PARAM, TrainingGraph, state_groups

_PASS = re.compile(r"^(?P<ph>[FB])(?P<mb>\d+)\.v(?P<v>\d+)$")
_BUCKET = re.compile(r"^(?P<what>grad_reduce|param_gather)\.l(?P<layer>-?\d+)$")
_SEND = re.compile(r"^send_(?P<dir>fwd|bwd)(?P<mb>\d+)$")
#: engine stream -> track name, in display order
_TRACKS = {"compute": "compute", "tp": "tp comm", "cp": "cp comm", "ep": "ep comm",
           "dp": "dp comm", "pass:dp": "dp comm (in pass)", "send_fwd": "pp send fwd",
           "send_bwd": "pp send bwd"}
_EPS_US = 1e-6


def simulate_with_step(run: TrainingRun) -> tuple[TrainingReport, StepResult | None,
                                                     TrainingGraph | None, NetworkModel | None]:
    """The report of :func:`codesign.api.simulate_run` and, for a feasible plan, the engine's
    :class:`StepResult` with the graph and network it ran on (None when infeasible)."""
    sim = simulate_detailed(run)
    if sim.step is None:
        return sim.report, None, None, None
    return sim.report, sim.step, sim.graph, sim.network


def _us(t_s: float) -> float:
    """Seconds -> microseconds, rounded to the nanosecond so nested slices stay nested."""
    return round(t_s * 1e6, 3)


class _Tracks:
    """Thread ids per (stage, track); overlapping slices on one track spill to extra lanes."""

    def __init__(self) -> None:
        self.tids: dict[tuple[int, str], int] = {}
        self.lane_end: dict[tuple[int, str], list[float]] = {}

    def tid(self, stage: int, track: str, start: float, end: float, lanes: bool) -> int:
        if not lanes:
            return self._tid(stage, track)
        ends = self.lane_end.setdefault((stage, track), [])
        for i, e in enumerate(ends):
            if start >= e - _EPS_US:
                ends[i] = end
                return self._tid(stage, track if i == 0 else f"{track} #{i + 1}")
        ends.append(end)
        i = len(ends) - 1
        return self._tid(stage, track if i == 0 else f"{track} #{i + 1}")

    def _tid(self, stage: int, name: str) -> int:
        key = (stage, name)
        if key not in self.tids:
            self.tids[key] = len([k for k in self.tids if k[0] == stage])
        return self.tids[key]


def _op_args(op: Op) -> dict[str, Any]:
    if op.kind == "comm":
        return {"kind": op.comm, "group": op.group, "bytes": op.size, "flops": 0.0,
                "category": f"comm:{op.stream}", "layer": op.layer, "overlap": op.overlap}
    return {"kind": op.kind, "flops": op.flops, "bytes": op.bytes, "group": None,
            "category": op.category, "layer": op.layer}


def chrome_trace(graph: TrainingGraph, step: StepResult,
                 network: NetworkModel) -> dict[str, Any]:
    """The Chrome trace (``{"traceEvents": [...], ...}``) of one simulated step."""
    run = graph.run
    p = run.parallel
    pp = p.pp
    tl = step.timeline
    by_v = {c.virtual_stage: c for c in graph.chunks}
    dense_grp, expert_grp = state_groups(p)
    dense_n, expert_n = network.group_size(dense_grp), network.group_size(expert_grp)
    stride = network.layout.stride("pp")
    layer_params: dict[tuple[int, int], tuple[float, float]] = {}
    opt_bytes = [0.0] * pp
    for ch in graph.chunks:
        opt_bytes[ch.stage] += (optimizer_params(ch, p.sharding_stage, dense_n, expert_n)
                                * ADAM_BYTES_PER_PARAM)
        for layer, dense, expert in ch.layer_params:
            layer_params.setdefault((ch.stage, layer), (dense, expert))
    p2p_bytes = pipeline_message(run)[0]
    tracks = _Tracks()
    events: list[dict[str, Any]] = []

    def slice_(stage: int, track: str, name: str, start_s: float, end_s: float,
               args: dict[str, Any], lanes: bool = False) -> None:
        ts, end = _us(start_s), _us(end_s)
        tid = tracks.tid(stage, track, ts, end, lanes)
        events.append({"name": name, "cat": str(args.get("category", "")), "ph": "X",
                       "ts": ts, "dur": round(end - ts, 3), "pid": stage, "tid": tid,
                       "args": args})

    for task in tl.tasks:
        stage_s, _, stream = task.stream.partition("/")
        stage = int(stage_s[1:])
        start, end = tl.start[task.id], tl.end[task.id]
        if stream.startswith("comm:"):
            continue  # a pass's collectives running past it: drawn with the pass below
        m = _PASS.match(task.name)
        if stream == "compute" and m is not None:
            ph, mb, v = m["ph"], int(m["mb"]), int(m["v"])
            _pass_events(slice_, task, start, end, ph, mb, v, by_v, step)
            continue
        args: dict[str, Any] = {"category": task.category}
        bucket = _BUCKET.match(task.name)
        send = _SEND.match(task.name)
        if bucket is not None:
            dense, expert = layer_params.get((stage, int(bucket["layer"])), (0.0, 0.0))
            per = GRAD_REDUCE_BYTES if bucket["what"] == "grad_reduce" else PARAM_BYTES
            kind = ("all_gather" if bucket["what"] == "param_gather" else
                    "all_reduce" if p.sharding_stage == 0 else "reduce_scatter")
            args.update(kind=kind, group=dense_grp, bytes=dense * per,
                        layer=int(bucket["layer"]))
            if expert:
                args.update(expert_group=expert_grp, expert_bytes=expert * per)
        elif send is not None:
            args.update(kind="p2p", group="pp", bytes=p2p_bytes, micro_batch=int(send["mb"]))
        elif task.name == "optimizer":
            args.update(flops=0.0, bytes=opt_bytes[stage])
        slice_(stage, _TRACKS.get(stream, stream), task.name, start, end, args,
               lanes=stream != "compute")

    meta: list[dict[str, Any]] = []
    for s in range(pp):
        meta.append({"name": "process_name", "ph": "M", "pid": s,
                     "args": {"name": f"stage {s} (rank {s * stride})"}})
        meta.append({"name": "process_sort_index", "ph": "M", "pid": s,
                     "args": {"sort_index": s}})
    order = list(_TRACKS.values())
    for (s, name), tid in tracks.tids.items():
        base = name.split(" #")[0]
        rank = order.index(base) if base in order else len(order)
        meta.append({"name": "thread_name", "ph": "M", "pid": s, "tid": tid,
                     "args": {"name": name}})
        meta.append({"name": "thread_sort_index", "ph": "M", "pid": s, "tid": tid,
                     "args": {"sort_index": rank * 100 + tid}})
    return {"traceEvents": meta + events, "displayTimeUnit": "ms",
            "otherData": {"codesign_version": __version__, "model": run.model.name,
                          "gpu": run.gpu.name, "topology": run.topology.name,
                          "num_gpus": run.num_gpus, "step_time_s": step.step_time_s,
                          "micro_batches": graph.num_microbatches}}


def _pass_events(slice_: Any, task: Task, start: float, end: float, ph: str, mb: int, v: int,
                 by_v: dict[int, Any], step: StepResult) -> None:
    """A chunk pass slice with its operators (kernels nested, collectives on their tracks)."""
    stage = int(task.stream.split("/")[0][1:])
    ops: tuple[Op, ...] = by_v[v].forward if ph == "F" else by_v[v].backward
    label = f"{ph}{mb}.v{v}"
    base = {"micro_batch": mb, "virtual_stage": v, "phase": "forward" if ph == "F" else
            "backward"}
    slice_(stage, "compute", label, start, end,
           {**base, "category": task.category,
            "flops": sum(o.flops for o in ops if o.kind != "comm"),
            "bytes": sum(o.bytes for o in ops if o.kind != "comm")})
    timing = step.chunk_timings.get((v, ph))
    if timing is None or len(timing.timeline.tasks) != len(ops):
        return  # no operator-level timeline for this pass
    inner = timing.timeline
    for t, op in zip(inner.tasks, ops, strict=True):
        s, e = start + inner.start[t.id], start + inner.end[t.id]
        if op.kind == "comm":
            track = "pass:dp" if op.stream == "dp" else op.stream
            slice_(stage, _TRACKS.get(track, f"{track} comm"), f"{op.name} {label}", s, e,
                   {**base, **_op_args(op)}, lanes=True)
        else:
            slice_(stage, "compute", f"{op.name} {label}", s, min(e, end),
                   {**base, **_op_args(op)})


def write_chrome_trace(path: str | Path, trace: dict[str, Any]) -> None:
    """Write a Chrome trace as compact JSON."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(trace, f, separators=(",", ":"))


def simulate_with_trace(run: TrainingRun, path: str | Path) -> TrainingReport:
    """Simulate ``run`` and write its timeline to ``path`` (only for a feasible plan)."""
    report, step, graph, network = simulate_with_step(run)
    if step is not None and graph is not None and network is not None:
        write_chrome_trace(path, chrome_trace(graph, step, network))
    return report


def slices(trace: dict[str, Any]) -> Iterable[dict[str, Any]]:
    """The complete (``ph: "X"``) events of a Chrome trace."""
    return (e for e in trace["traceEvents"] if e.get("ph") == "X")
