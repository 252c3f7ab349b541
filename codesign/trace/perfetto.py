"""Chrome / Perfetto timeline of a simulated training step (``codesign simulate --trace``).

The engine simulates one representative rank per pipeline stage: the stage's compute stream
runs chunk passes (one virtual stage, one micro-batch, forward or backward; split schedules
such as ZB-H1 run the backward as an input-gradient and a weight-gradient pass) and the optimizer;
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
  ``F3.v5`` (forward of micro-batch 3 on virtual stage 5; ``B``, and ``W`` for weight
  gradients) with its kernels nested inside,
  collectives named ``<op> F3.v5``; ``args`` carry micro-batch, virtual stage, layer, FLOPs,
  bytes, collective kind and group, and the breakdown category.

What each slice is comes from the step-program node of its engine task
(:class:`~codesign.workload.step_program.Node` in the task's ``meta``), not from its name. The
timeline holds every micro-batch: when the engine extended a periodic steady state instead of
running it, the step is run in full for the trace (same step time).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from codesign import __version__
from codesign.api import simulate_detailed
from codesign.engine.executor import Task
from codesign.engine.training import StepResult
from codesign.ir import Op
from codesign.network.model import NetworkModel
from codesign.report.training import TrainingReport
from codesign.specs.run import TrainingRun
from codesign.workload.schedules import SPLIT_BACKWARD
from codesign.workload.step_program import Node, pass_ops
from codesign.workload.training import TrainingGraph

#: engine stream -> track name, in display order
_TRACKS = {"compute": "compute", "tp": "tp comm", "cp": "cp comm", "ep": "ep comm",
           "dp": "dp comm", "pass:dp": "dp comm (in pass)", "send_fwd": "pp send fwd",
           "send_bwd": "pp send bwd"}
_EPS_US = 1e-6


def simulate_with_step(run: TrainingRun) -> tuple[TrainingReport, StepResult | None,
                                                     TrainingGraph | None, NetworkModel | None]:
    """The report of :func:`codesign.api.simulate_run` and, for a feasible plan, the engine's
    :class:`StepResult` of every micro-batch (an extended steady state is run in full) with
    the graph and network it ran on (None when infeasible)."""
    sim = simulate_detailed(run, exact=True)
    if sim.step is None or sim.graph is None or sim.network is None:
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


#: a progress display: made with the number of items, called with the count just done
Progress = Callable[[int, str], Callable[[int], None]]


def _no_progress(total: int, what: str) -> Callable[[int], None]:
    return lambda k: None


def chrome_trace(graph: TrainingGraph, step: StepResult, network: NetworkModel,
                 progress: Progress = _no_progress) -> dict[str, Any]:
    """The Chrome trace (``{"traceEvents": [...], ...}``) of one simulated step;
    ``progress(thousands of tasks, "tracing")`` is told of every thousand tasks drawn."""
    run = graph.run
    pp = run.parallel.pp
    tl = step.timeline
    by_v = {c.virtual_stage: c for c in graph.chunks}
    split = run.parallel.pipeline_schedule in SPLIT_BACKWARD
    stride = network.layout.stride("pp")
    tracks = _Tracks()
    events: list[dict[str, Any]] = []

    def slice_(stage: int, track: str, name: str, start_s: float, end_s: float,
               args: dict[str, Any], lanes: bool = False) -> None:
        ts, end = _us(start_s), _us(end_s)
        tid = tracks.tid(stage, track, ts, end, lanes)
        events.append({"name": name, "cat": str(args.get("category", "")), "ph": "X",
                       "ts": ts, "dur": round(end - ts, 3), "pid": stage, "tid": tid,
                       "args": args})

    tick = progress(len(tl.tasks) // 1000, "tracing")  # in thousands of tasks
    for n, task in enumerate(tl.tasks):
        if n % 1000 == 999:
            tick(1)
        info = dict(task.meta)
        if "tail" in info:
            continue  # a pass's collectives running past it: drawn with the pass below
        node: Node = info["node"]
        start, end = tl.start[task.id], tl.end[task.id]
        if node.kind == "pass":
            _pass_events(slice_, task, node, start, end, by_v, step, split)
            continue
        stream = task.stream.partition("/")[2]
        slice_(node.stage, _TRACKS.get(stream, stream), task.name, start, end,
               {"category": task.category, **_node_args(node)}, lanes=stream != "compute")

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


#: pass phase -> the ``phase`` a slice names
_PHASES = {"F": "forward", "B": "backward", "W": "weight_gradient"}


def _node_args(node: Node) -> dict[str, Any]:
    """What a slice of a node outside the passes says: collective, group, bytes, layer."""
    if node.kind in ("grad_reduce", "param_gather"):
        dense = node.comms[0]
        args: dict[str, Any] = {"kind": dense.kind, "group": dense.group,
                                "bytes": dense.bytes, "layer": node.layer}
        if len(node.comms) > 1:
            args.update(expert_group=node.comms[1].group, expert_bytes=node.comms[1].bytes)
        return args
    if node.kind == "send":
        c = node.comms[0]
        return {"kind": c.kind, "group": c.group, "bytes": c.bytes, "micro_batch": node.mb}
    if node.kind == "optimizer":
        return {"flops": 0.0, "bytes": node.hbm_bytes}
    return {}


def _pass_events(slice_: Any, task: Task, node: Node, start: float, end: float,
                 by_v: dict[int, Any], step: StepResult, split: bool) -> None:
    """A chunk pass slice with its operators (kernels nested, collectives on their tracks)."""
    stage, ph, v = node.stage, node.phase, node.v
    timing = step.chunk_timings.get((v, ph))
    ops = pass_ops(by_v[v].forward, by_v[v].backward, ph, split)
    label = node.name
    base = {"micro_batch": node.mb, "virtual_stage": v, "phase": _PHASES[ph]}
    slice_(stage, "compute", label, start, end,
           {**base, "category": task.category,
            "flops": sum(o.flops for o in ops if o.kind != "comm"),
            "bytes": sum(o.bytes for o in ops if o.kind != "comm")})
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


#: events encoded per call of the C JSON encoder when writing a trace
_EVENTS_PER_CHUNK = 20_000


def write_chrome_trace(path: str | Path, trace: dict[str, Any],
                       progress: Progress = _no_progress) -> None:
    """Write a Chrome trace as compact JSON. The events are encoded in chunks with
    ``json.dumps`` (the C encoder; ``json.dump`` to a file streams through the pure-Python
    one, about ten times slower), so memory holds one chunk's text at a time."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    events = trace.get("traceEvents", [])
    rest = {k: v for k, v in trace.items() if k != "traceEvents"}
    sep = (",", ":")
    tick = progress(-(-len(events) // _EVENTS_PER_CHUNK), "writing")
    with open(path, "w", encoding="utf-8") as f:
        f.write('{"traceEvents":[')
        for i in range(0, len(events), _EVENTS_PER_CHUNK):
            tick(1)
            if i:
                f.write(",")
            f.write(json.dumps(events[i:i + _EVENTS_PER_CHUNK], separators=sep)[1:-1])
        f.write("]")
        for k, v in rest.items():
            f.write(f",{json.dumps(k)}:{json.dumps(v, separators=sep)}")
        f.write("}")


def simulate_with_trace(run: TrainingRun, path: str | Path,
                        progress: Progress = _no_progress) -> TrainingReport:
    """Simulate ``run`` and write its timeline to ``path`` (only for a feasible plan);
    ``progress`` shows the drawing and the writing."""
    report, step, graph, network = simulate_with_step(run)
    if step is not None and graph is not None and network is not None:
        write_chrome_trace(path, chrome_trace(graph, step, network, progress), progress)
    return report


def slices(trace: dict[str, Any]) -> Iterable[dict[str, Any]]:
    """The complete (``ph: "X"``) events of a Chrome trace."""
    return (e for e in trace["traceEvents"] if e.get("ph") == "X")
