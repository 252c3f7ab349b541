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
import math
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from codesign import __version__
from codesign.api import simulate_detailed
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
    """Seconds -> microseconds on the nanosecond grid of :func:`_ns`, so that slices placed by
    either function nest or follow each other exactly."""
    return _ns(t_s) / 1000


class _Tracks:
    """Thread ids per (stage, track); overlapping slices on one track spill to extra lanes."""

    def __init__(self) -> None:
        self.tids: dict[tuple[int, str], int] = {}
        self.count: dict[int, int] = {}

    def tid(self, stage: int, name: str) -> int:
        key = (stage, name)
        t = self.tids.get(key)
        if t is None:
            t = self.tids[key] = self.count.get(stage, 0)
            self.count[stage] = t + 1
        return t

    def lanes(self, stage: int, track: str, spans: list[tuple[int, int, int]]
              ) -> dict[int, int]:
        """Thread id of each slice (by its key) of ``spans`` ``(start, end, key)``
        (integer nanoseconds) on ``track``: in start order, each takes the first lane free by
        then."""
        ends: list[int] = []
        out: dict[int, int] = {}
        for ts, end, key in sorted(spans):
            for i, e in enumerate(ends):
                if ts >= e:
                    ends[i] = end
                    break
            else:
                ends.append(end)
                i = len(ends) - 1
            out[key] = self.tid(stage, track if i == 0 else f"{track} #{i + 1}")
        return out


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


_SEP = (",", ":")


def _enc(x: Any) -> str:
    return json.dumps(x, separators=_SEP)


def _brace(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def _ns(t_s: float) -> int:
    """Seconds -> integer nanoseconds (the trace's resolution), rounded down: a slice drawn
    at ``floor(start)`` for ``floor(duration)`` ends at or before ``floor(start + duration)``
    (``floor(a) + floor(b) <= floor(a + b)``), so consecutive passes, each placed by its own
    start and its template's duration, never overlap by a rounding nanosecond (Perfetto
    drops a slice that neither nests nor follows)."""
    return math.floor(t_s * 1e9)


def _us_text(ns: int) -> str:
    """Integer nanoseconds as a decimal number of microseconds."""
    q, r = divmod(ns, 1000)
    return f"{q}.{r:03d}" if r else str(q)


def _slice_format(name_prefix: str, args: dict[str, Any], ts: str, dur_ns: int,
                  tid: str = "{2}") -> str:
    """``str.format`` template of one complete event named ``name_prefix`` + a pass label
    (``{0}``), on process ``{1}`` and thread ``tid``, with ``args`` ``{"micro_batch": {3},
    **args}``, starting at ``ts`` (a template of microseconds) and lasting ``dur_ns``."""
    head = '{{"name":' + _brace(_enc(name_prefix)[:-1])
    rest = _brace(_enc(args)[1:])
    cat = _brace(_enc(str(args.get("category", ""))))
    return (f'{head}{{0}}","cat":{cat},"ph":"X","ts":{ts},"dur":{_us_text(dur_ns)},'
            f'"pid":{{1}},"tid":{tid},"args":{{{{"micro_batch":{{3}},{rest}}}}}')


class _PassTemplate:
    """What every pass of one (virtual stage, phase) draws: its slice and its operators'
    (kernels nested on the compute track, collectives on their tracks), in integer
    nanoseconds after the pass's start, so that slices nest exactly. All of a pass's events
    are one ``str.format`` template: label ``{0}``, stage ``{1}``, compute thread ``{2}``,
    micro-batch ``{3}``, then the start of each kernel (µs as ``q.r``) and of each
    collective with its thread."""

    def __init__(self, node: Node, category: str, ops: list[Op], timing: Any,
                 dur_s: float) -> None:
        base = {"virtual_stage": node.v, "phase": _PHASES[node.phase]}
        dur_ns = _ns(dur_s)
        kernels = [_slice_format("", {
            **base, "category": category,
            "flops": sum(o.flops for o in ops if o.kind != "comm"),
            "bytes": sum(o.bytes for o in ops if o.kind != "comm")}, "{4}.{5:03d}", dur_ns)]
        self.kernel_ns: list[int] = [0]
        comms: list[tuple[int, int, str, Op, dict[str, Any]]] = []
        if timing is not None and len(timing.timeline.tasks) == len(ops):
            inner = timing.timeline
            for t, op in zip(inner.tasks, ops, strict=True):
                s_ns, e_ns = _ns(inner.start[t.id]), _ns(inner.end[t.id])
                args = {**base, **_op_args(op)}
                if op.kind == "comm":
                    track = "pass:dp" if op.stream == "dp" else op.stream
                    comms.append((s_ns, e_ns - s_ns, _TRACKS.get(track, f"{track} comm"), op,
                                  args))
                else:
                    k = 4 + 2 * len(self.kernel_ns)
                    kernels.append(_slice_format(f"{op.name} ", args,
                                                 f"{{{k}}}.{{{k + 1}:03d}}",
                                                 min(e_ns, dur_ns) - s_ns))
                    self.kernel_ns.append(s_ns)
        #: start and duration (ns after the pass's start) and track of each collective
        self.comms = [(s_ns, d_ns, track) for s_ns, d_ns, track, _, _ in comms]
        k0 = 4 + 2 * len(self.kernel_ns)
        self.format = ",".join(kernels + [
            _slice_format(f"{op.name} ", args, f"{{{k0 + 3 * i}}}.{{{k0 + 3 * i + 1}:03d}}",
                          d_ns, f"{{{k0 + 3 * i + 2}}}")
            for i, (_, d_ns, _, op, args) in enumerate(comms)])


class _Lanes:
    """Slices of tracks whose slices may overlap (collectives, sends, buckets), gathered as
    arrays and given a thread each: a track's slices go to its first thread unless they
    overlap, and then in start order each takes the first lane free by then."""

    def __init__(self) -> None:
        self.parts: list[tuple[Any, Any, Any, Any]] = []  # stage, track id, start, end
        self.track_ids: dict[str, int] = {}
        self.count = 0

    def add(self, stage: Any, track: str, start: Any, end: Any) -> int:
        """Add slices (arrays, integer ns); returns the offset of their first one."""
        offset = self.count
        tid = self.track_ids.setdefault(track, len(self.track_ids))
        n = len(start)
        self.count += n
        self.parts.append((np.broadcast_to(stage, n), np.full(n, tid), start, end))
        return offset

    def threads(self, tracks: _Tracks) -> Any:
        """Thread id of every slice added, in the order added."""
        if not self.parts:
            return np.zeros(0, dtype=np.int64)
        stage, track, start, end = (np.concatenate([p[i] for p in self.parts])
                                    for i in range(4))
        names = list(self.track_ids)
        out = np.zeros(len(start), dtype=np.int64)
        order = np.lexsort((end, start, track, stage))
        keys = stage[order] * len(names) + track[order]
        cuts = np.flatnonzero(np.diff(keys)) + 1
        for idx in np.split(order, cuts):
            st, name = int(stage[idx[0]]), names[int(track[idx[0]])]
            s, e = start[idx], end[idx]
            if len(idx) < 2 or (s[1:] >= np.maximum.accumulate(e)[:-1]).all():
                out[idx] = tracks.tid(st, name)  # no two overlap: one thread
                continue
            spans = list(zip(s.tolist(), e.tolist(), idx.tolist(), strict=True))
            for key, t in tracks.lanes(st, name, spans).items():
                out[key] = t
        return out


def _tasks(step: StepResult) -> Iterator[tuple[Node, str, str, str, float, float]]:
    """``(node, stream, category, name, start, end)`` of each task of ``step``'s timeline
    but the tails (a pass's collectives running past it, drawn with the pass); from the
    fused runner's lists when the step has them, else from the task objects."""
    tl, flat = step.timeline, step.flat
    if flat is not None:
        nodes, names = flat.program.nodes, flat.stream_names
        for i, (k, tail) in enumerate(zip(flat.node, flat.tail, strict=True)):
            if not tail:
                node = nodes[k]
                yield (node, names[flat.stream[i]].partition("/")[2], flat.category[i],
                       node.name, flat.start[i], flat.end[i])
        return
    for task in tl.tasks:
        info = dict(task.meta)
        if "tail" not in info:
            yield (info["node"], task.stream.partition("/")[2], task.category, task.name,
                   tl.start[task.id], tl.end[task.id])


def trace_texts(graph: TrainingGraph, step: StepResult, network: NetworkModel,
                progress: Progress = _no_progress) -> tuple[list[str], dict[str, Any]]:
    """The events of the Chrome trace of one simulated step as compact JSON texts (metadata
    events first) and the trace's other top-level fields; ``progress(thousands of tasks,
    "tracing")`` is told of every thousand tasks drawn. Every pass of one (virtual stage,
    phase) draws the same operators shifted in time, so their JSON is written once per
    (virtual stage, phase) and each pass fills in its label, times, tracks and micro-batch."""
    run = graph.run
    by_v = {c.virtual_stage: c for c in graph.chunks}
    split = run.parallel.pipeline_schedule in SPLIT_BACKWARD
    tracks = _Tracks()
    templates: dict[tuple[int, str], _PassTemplate] = {}
    passes: dict[tuple[int, str], list[tuple[float, Node]]] = {}
    others: list[tuple[Node, str, str, str, float, float]] = []
    for node, stream, category, name, start, end in _tasks(step):
        if node.kind != "pass":
            others.append((node, stream, category, name, start, end))
            continue
        key: tuple[int, str] = (node.v, node.phase)
        if key not in templates:
            c = by_v[node.v]
            templates[key] = _PassTemplate(
                node, category, list(pass_ops(c.forward, c.backward, node.phase, split)),
                step.chunk_timings.get(key), end - start)
        passes.setdefault(key, []).append((start, node))
    for s in range(run.parallel.pp):
        tracks.tid(s, "compute")
    lanes = _Lanes()
    starts: dict[tuple[int, str], tuple[Any, Any, list[int]]] = {}
    for key, rows in passes.items():
        tpl = templates[key]
        ns = np.floor(np.array([r[0] for r in rows]) * 1e9).astype(np.int64)  # as _ns
        stages = np.array([r[1].stage for r in rows], dtype=np.int64)
        offsets = [lanes.add(stages, track, ns + s_ns, ns + s_ns + d_ns)
                   for s_ns, d_ns, track in tpl.comms]
        starts[key] = (ns, stages, offsets)
    other_events: list[tuple[dict[str, Any], str, int]] = []  # event, lane track, index
    other_spans: dict[str, tuple[list[int], list[int], list[int]]] = {}
    for node, stream, category, name, start, end in others:
        track = _TRACKS.get(stream, stream)
        ts, te = _us(start), _us(end)
        event = {"name": name, "cat": category, "ph": "X", "ts": ts,
                 "dur": round(te - ts, 3), "pid": node.stage, "tid": 0,
                 "args": {"category": category, **_node_args(node)}}
        if stream == "compute":
            event["tid"] = tracks.tid(node.stage, track)
            other_events.append((event, "", -1))
            continue
        st, s0, s1 = other_spans.setdefault(track, ([], [], []))
        other_events.append((event, track, len(st)))
        st.append(node.stage)
        s0.append(_ns(start))
        s1.append(_ns(end))
    offset_of = {track: lanes.add(np.array(st), track, np.array(s0), np.array(s1))
                 for track, (st, s0, s1) in other_spans.items()}
    tid = lanes.threads(tracks)
    tick = progress((sum(map(len, passes.values())) + len(others)) // 1000, "tracing")
    texts: list[str] = []
    done = 0
    for key, rows in passes.items():
        tpl = templates[key]
        ns, stages, offsets = starts[key]
        n, nk, nc = len(rows), len(tpl.kernel_ns), len(tpl.comms)
        fields = np.empty((n, 2 * nk + 3 * nc), dtype=np.int64)
        q, r = np.divmod(ns[:, None] + np.array(tpl.kernel_ns, dtype=np.int64)[None, :], 1000)
        fields[:, 0:2 * nk:2], fields[:, 1:2 * nk:2] = q, r
        for i, ((s_ns, _, _), off) in enumerate(zip(tpl.comms, offsets, strict=True)):
            col = 2 * nk + 3 * i
            fields[:, col], fields[:, col + 1] = np.divmod(ns + s_ns, 1000)
            fields[:, col + 2] = tid[off:off + n]
        fmt = tpl.format.format
        for (_, node), row, stage in zip(rows, fields.tolist(), stages.tolist(), strict=True):
            texts.append(fmt(node.name, stage, tracks.tids[(stage, "compute")], node.mb,
                             *row))
            done += 1
            if done % 1000 == 0:
                tick(1)
    for event, track, i in other_events:
        if track:
            event["tid"] = int(tid[offset_of[track] + i])
        texts.append(_enc(event))
    return _metadata(run.parallel.pp, network.layout.stride("pp"), tracks) + texts, {
        "displayTimeUnit": "ms",
        "otherData": {"codesign_version": __version__, "model": run.model.name,
                      "gpu": run.gpu.name, "topology": run.topology.name,
                      "num_gpus": run.num_gpus, "step_time_s": step.step_time_s,
                      "micro_batches": graph.num_microbatches}}


def _metadata(pp: int, stride: int, tracks: _Tracks) -> list[str]:
    """Process (stage) and thread (track) names and sort orders, as JSON texts."""
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
    return [_enc(m) for m in meta]


def chrome_trace(graph: TrainingGraph, step: StepResult, network: NetworkModel,
                 progress: Progress = _no_progress) -> dict[str, Any]:
    """The Chrome trace (``{"traceEvents": [...], ...}``) of one simulated step (the
    objects of :func:`trace_texts`)."""
    texts, rest = trace_texts(graph, step, network, progress)
    return {"traceEvents": json.loads("[" + ",".join(texts) + "]"), **rest}


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


#: events written per chunk when writing a trace
_EVENTS_PER_CHUNK = 20_000


def _write_texts(path: str | Path, texts: list[str], rest: dict[str, Any],
                 progress: Progress = _no_progress) -> None:
    """Write a Chrome trace of JSON event ``texts`` and other fields ``rest``, a chunk of
    events at a time."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tick = progress(-(-len(texts) // _EVENTS_PER_CHUNK), "writing")
    with open(path, "w", encoding="utf-8") as f:
        f.write('{"traceEvents":[')
        for i in range(0, len(texts), _EVENTS_PER_CHUNK):
            tick(1)
            if i:
                f.write(",")
            f.write(",".join(texts[i:i + _EVENTS_PER_CHUNK]))
        f.write("]")
        for k, v in rest.items():
            f.write(f",{_enc(k)}:{_enc(v)}")
        f.write("}")


def write_chrome_trace(path: str | Path, trace: dict[str, Any],
                       progress: Progress = _no_progress) -> None:
    """Write a Chrome trace (a dict as :func:`chrome_trace` returns) as compact JSON, a chunk
    of events at a time with the C encoder."""
    events = trace.get("traceEvents", [])
    _write_texts(path, [_enc(e) for e in events],
                 {k: v for k, v in trace.items() if k != "traceEvents"}, progress)


def simulate_with_trace(run: TrainingRun, path: str | Path,
                        progress: Progress = _no_progress) -> TrainingReport:
    """Simulate ``run`` and write its timeline to ``path`` (only for a feasible plan);
    ``progress`` shows the drawing and the writing."""
    report, step, graph, network = simulate_with_step(run)
    if step is not None and graph is not None and network is not None:
        texts, rest = trace_texts(graph, step, network, progress)
        _write_texts(path, texts, rest, progress)
    return report


def slices(trace: dict[str, Any]) -> Iterable[dict[str, Any]]:
    """The complete (``ph: "X"``) events of a Chrome trace."""
    return (e for e in trace["traceEvents"] if e.get("ph") == "X")
