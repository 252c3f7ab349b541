"""Chrome / Perfetto trace (JSON) of a serving simulation.

Open the file in https://ui.perfetto.dev or chrome://tracing. Layout:

* one process per engine, one thread (track) per model replica, one slice per step
  (``prefill N`` / ``decode N`` / ``mixed P+D``, with token counts and KV blocks in ``args``);
* one process (track group) per request: the pre-generation stages (route, RAG embedding and
  search, KV retrieval, reasoning gaps) and, per generate call, ``queue`` → ``prefill`` →
  ``decode`` slices on track 0, KV transfers of disaggregated serving on track 1.

Times are microseconds (``ts``/``dur``), as the format requires.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from codesign.serving.sim import ServingResult

_US = 1e6
REQUEST_PID_BASE = 1000


def _meta(pid: int, name: str, tid: int | None = None, sort: int | None = None
          ) -> list[dict[str, Any]]:
    if tid is None:
        ev = [{"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}}]
        if sort is not None:
            ev.append({"ph": "M", "name": "process_sort_index", "pid": pid,
                       "args": {"sort_index": sort}})
        return ev
    return [{"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}]


def _slice(name: str, pid: int, tid: int, t0: float, t1: float, cat: str,
           args: dict[str, Any] | None = None) -> dict[str, Any]:
    ev: dict[str, Any] = {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid,
                          "ts": t0 * _US, "dur": max(t1 - t0, 0.0) * _US}
    if args:
        ev["args"] = args
    return ev


def chrome_trace(result: ServingResult, max_requests: int | None = None) -> dict[str, Any]:
    """The trace as a dict (``{"traceEvents": [...]}``); at most ``max_requests`` request
    track groups (the first ones by id), every engine step."""
    events: list[dict[str, Any]] = []
    engine_pid: dict[str, int] = {}
    tid_of: dict[str, int] = {}
    for inst in result.instances:
        if inst.engine not in engine_pid:
            engine_pid[inst.engine] = len(engine_pid) + 1
            events += _meta(engine_pid[inst.engine], f"engine {inst.engine}",
                            sort=engine_pid[inst.engine])
        pid = engine_pid[inst.engine]
        tid = sum(1 for n in tid_of if n.startswith(f"{inst.engine}/"))
        tid_of[inst.name] = tid
        events += _meta(pid, f"{inst.model} replica {inst.index} ({inst.gpus} GPU)", tid)
        for t0, t1, ptok, pseq, dseq, used in inst.steps:
            if pseq and dseq:
                name = f"mixed {pseq}+{dseq}"
            elif pseq:
                name = f"prefill {pseq}"
            else:
                name = f"decode {dseq}"
            events.append(_slice(name, pid, tid, t0, t1, "step", {
                "prefill_tokens": ptok, "prefill_seqs": pseq, "decode_seqs": dseq,
                "kv_blocks_used": used, "kv_blocks_total": inst.total_blocks}))
    reqs = result.requests if max_requests is None else result.requests[:max_requests]
    for r in reqs:
        pid = REQUEST_PID_BASE + r.id
        events += _meta(pid, f"request {r.id} ({r.client}/{r.request_type})",
                        sort=REQUEST_PID_BASE + r.id)
        events += _meta(pid, "stages", 0)
        for name, a, b in r.stages:
            events.append(_slice(name, pid, 0, a, b, "stage"))
        kv_track = False
        for s in r.seqs:
            if s.label.endswith(".embed"):
                continue  # shown as the RAG embed stage
            where = s.inst.name if s.inst is not None else "?"
            if s.admit_s is not None:
                events.append(_slice(f"queue ({s.label})", pid, 0, s.enqueue_s, s.admit_s,
                                     "queue", {"engine": where}))
            end_pf = s.first_token_s if s.first_token_s is not None else s.finish_s
            if s.admit_s is not None and end_pf is not None:
                events.append(_slice(f"prefill ({s.label})", pid, 0, s.admit_s, end_pf,
                                     "prefill", {"prompt_tokens": s.prompt,
                                                 "cached_tokens": s.cached}))
            if s.first_token_s is not None and s.finish_s is not None:
                events.append(_slice(f"decode ({s.label})", pid, 0, s.first_token_s,
                                     s.finish_s, "decode", {"tokens": s.gen,
                                                            "engine": where,
                                                            "preemptions": s.preemptions}))
            if s.transfer is not None:
                if not kv_track:
                    events += _meta(pid, "kv transfer", 1)
                    kv_track = True
                t0, t1, nbytes = s.transfer
                events.append(_slice("kv transfer", pid, 1, t0, t1, "kv_transfer",
                                     {"bytes": nbytes}))
        if r.rejected:
            events.append({"ph": "i", "name": "rejected", "pid": pid, "tid": 0, "s": "t",
                           "ts": (r.finish_s or r.arrival_s) * _US,
                           "args": {"reason": r.rejected}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"spec": result.spec.name}}


def write_chrome_trace(result: ServingResult, path: Path | str,
                       max_requests: int | None = None) -> Path:
    """Write :func:`chrome_trace` to ``path`` (JSON)."""
    path = Path(path)
    path.write_text(json.dumps(chrome_trace(result, max_requests)))
    return path
