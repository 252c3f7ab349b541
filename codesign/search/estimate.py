"""Analytical estimate of one plan's step time, breakdown and memory, from the engine's own
cost models, fast enough to rank thousands of plans.

What is shared with the engine, not re-derived:

* **Operators**: one layer of each kind (dense, MoE), plus the embedding and the LM head, is
  bound by :class:`codesign.workload.training.ChunkBinder` (the code that builds the engine's
  graph), once per *local layer shape* (tp, cp, ep, etp, sp, micro-batch, recompute, TP overlap
  and the placement of the tp/cp/ep groups on the topology).
* **Chunk passes**: those sample chunks are timed by :func:`codesign.engine.chunk.time_chunk`
  (same overlap rules, same :class:`~codesign.hardware.compute.ComputeModel` and
  :class:`~codesign.network.model.NetworkModel`). A chunk of ``k`` layers costs the sum of its
  parts: every layer ends with a compute operator that waits for the layer's collectives, so
  nothing overlaps across layer boundaries. Under ZeRO-3 the per-layer parameter gathers and
  gradient reduce-scatters do cross layers (prefetch, async); those chunks are re-timed with the
  engine's task wiring (:func:`~codesign.engine.chunk.op_tasks`) and executor, each layer one
  block plus its data-parallel collectives.
* **Pipeline**: the engine's schedule and dependency rules, evaluated without an event queue
  (:mod:`codesign.search.pipeline`), with the first-bucket parameter-gather gates of ZeRO-1/2.
* **Data parallelism and optimizer**: gradient buckets released as each layer's last backward
  ends (or after backward), reduced in order on one stream after the parameter gathers, then the
  Adam update priced by the compute model, as in :func:`codesign.engine.training.simulate_step`.
* **Memory**: the formulas of :mod:`codesign.workload.memory` on the same per-chunk parameter,
  activation and buffer sizes, with the schedule's in-flight micro-batches
  (:func:`codesign.search.pipeline.live_vectors`).

What is approximate: a chunk's time is the sum of its parts (exact when the above holds), very
long schedules are extrapolated from two shorter ones, the tails of collectives after the last
backward are not queued behind earlier tails, and the breakdown splits idle time into pipeline
sends, parameter-gather waits and bubble by what each pass waited for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from codesign.engine.chunk import ChunkTiming, op_tasks, time_chunk
from codesign.engine.executor import execute_in_order
from codesign.engine.training import GRAD_REDUCE_BYTES, PARAM_BYTES, pipeline_send_seconds
from codesign.hardware.compute import ComputeModel
from codesign.ir import Category, Op
from codesign.network.model import NetworkModel
from codesign.network.placement import layout_for
from codesign.report.training import BREAKDOWN_KEYS, MEMORY_KEYS, breakdown_from_categories
from codesign.search.pipeline import compile_program, live_vectors, pipeline_times
from codesign.search.space import PlanPoint, plan_run
from codesign.specs.run import TrainingRun
from codesign.units import GiB
from codesign.workload.dims import pipeline_message_of
from codesign.workload.memory import GRAD_BYTES, WEIGHT_BYTES
from codesign.workload.training import (
    ADAM_BYTES_PER_PARAM,
    OPT_BYTES_PER_PARAM,
    ChunkBinder,
    ChunkGraph,
    layer_assignment,
    model_flops_per_sequence_fwd,
)

#: breakdown categories of a pass, in vector order
CATS: tuple[str, ...] = ("forward", "backward", "recompute", "comm:tp", "comm:cp", "comm:ep",
                         "comm:dp", "bubble")
_IDX = {c: i for i, c in enumerate(CATS)}
_DP = _IDX["comm:dp"]
_ZERO = (0.0,) * len(CATS)


@dataclass(frozen=True)
class PassCost:
    """One pass of a chunk part (seconds): compute-stream time, its split by :data:`CATS`,
    and how long its collectives run on after its last compute operator."""

    time_s: float
    parts: tuple[float, ...]
    tail_s: float = 0.0

    @classmethod
    def of(cls, t: ChunkTiming) -> PassCost:
        parts = [0.0] * len(CATS)
        for cat, dt in t.breakdown:
            parts[_IDX[cat]] += dt
        return cls(t.compute_time, tuple(parts), max((dt for _, dt in t.tail), default=0.0))

    def minus(self, other: PassCost) -> PassCost:
        """This sample minus a shorter one: the cost of the part it adds."""
        return PassCost(self.time_s - other.time_s,
                        tuple(a - b for a, b in zip(self.parts, other.parts, strict=True)),
                        self.tail_s)


@dataclass(frozen=True)
class LayerCosts:
    """Per local layer shape: one layer of each kind (False dense, True MoE) and the parts the
    embedding and the LM head add; times in seconds, sizes in bytes, parameters per rank."""

    f: dict[bool, PassCost]
    b: dict[bool, PassCost]
    emb_f: PassCost
    emb_b: PassCost
    head_f: PassCost
    head_b: PassCost
    b_tail_emb: float  # tail of a backward pass that ends with the embedding
    saved: dict[bool, float]
    emb_saved: float
    head_saved: float
    payload: dict[bool, float]  # largest collective of the layer (forward or backward)
    emb_payload: float
    head_payload: float
    params: dict[bool, tuple[float, float]]  # (dense, expert) per layer
    emb_params: float
    head_params: float


@dataclass(frozen=True)
class Estimate:
    """Estimated outcome of one plan. Infeasible plans carry ``reason`` and, when the memory
    check rejected them, their memory."""

    point: PlanPoint
    feasible: bool
    reason: str = ""
    step_time_s: float | None = None
    mfu: float | None = None
    tokens_per_s: float | None = None
    num_microbatches: int | None = None
    critical_stage: int | None = None
    memory_GiB: dict[str, float] = field(default_factory=dict)
    breakdown_s: dict[str, float] = field(default_factory=dict)


def _max_payload(ops: tuple[Op, ...]) -> float:
    return max((o.size for o in ops if o.kind == "comm"), default=0.0)


def _block(name: str, layer: int, category: Category) -> Op:
    return Op(name=name, kind="memory", category=category, layer=layer)


class Estimator:
    """Estimates plans of one base run (model, system and non-searched settings).

    Caches per local layer shape, per rank layout and per pipeline input, so plans that share
    them cost little. Not thread-safe; each worker process builds its own.
    """

    def __init__(self, base: TrainingRun) -> None:
        self.base = base
        self.model = base.model
        self.compute = ComputeModel.from_gpu(base.gpu)
        self.measured = (self.compute.tables.collectives
                         if self.compute.tables is not None else None)
        self.capacity = base.gpu.memory_bytes
        self.model_flops = (3.0 * model_flops_per_sequence_fwd(base)
                            * base.parallel.global_batch_size)
        self.tokens = float(base.parallel.global_batch_size * base.seq_len)
        self.peak = base.gpu.peak_flops(base.parallel.dtype) * base.num_gpus
        m = self.model
        self.kinds = tuple(m.is_moe_layer(i) for i in range(m.num_layers))
        self._nets: dict[tuple[int, ...], NetworkModel] = {}
        self._layers: dict[tuple[Any, ...], LayerCosts] = {}
        self._assign: dict[int, list[tuple[tuple[int, ...], int, int]]] = {}
        self._assign_np: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray,
                                                      np.ndarray]] = {}
        self._sigs: dict[int, list[tuple[Any, ...]]] = {}
        self._sums: dict[tuple[Any, ...], tuple[PassCost, PassCost]] = {}
        self._z3: dict[tuple[Any, ...], tuple[PassCost, PassCost]] = {}
        self._pipes: dict[tuple[Any, ...], Any] = {}

    # --- shared pieces ----------------------------------------------------------------------

    def network(self, tp: int, cp: int, ep: int, dp: int, pp: int) -> NetworkModel:
        key = (tp, cp, ep, dp, pp)
        net = self._nets.get(key)
        if net is None:
            par = self.base.parallel
            layout = layout_for(tp=tp, cp=cp, ep=ep, dp=dp, pp=pp,
                                order=tuple(par.placement_order))
            net = NetworkModel(self.base.topology, layout, par.collective_algorithm,
                               measured=self.measured)
            self._nets[key] = net
        return net

    def assignment(self, nv: int) -> list[tuple[tuple[int, ...], int, int]]:
        """Per virtual stage: its layers, and how many are dense / MoE."""
        out = self._assign.get(nv)
        if out is None:
            out = []
            for layers in layer_assignment(self.model.num_layers, nv):
                moe = sum(self.kinds[i] for i in layers)
                out.append((layers, len(layers) - moe, moe))
            self._assign[nv] = out
        return out

    def signatures(self, nv: int) -> list[tuple[Any, ...]]:
        """Per virtual stage: ``(layer kinds, first, last)``, what its passes depend on."""
        out = self._sigs.get(nv)
        if out is None:
            out = [(tuple(self.kinds[i] for i in layers), v == 0, v == nv - 1)
                   for v, (layers, _, _) in enumerate(self.assignment(nv))]
            self._sigs[nv] = out
        return out

    def assignment_arrays(self, pp: int, vpp: int
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Dense layers, MoE layers, first-chunk and last-chunk flags as ``[stage, chunk]``
        arrays (virtual stage ``c·pp + s``)."""
        key = (pp, vpp)
        out = self._assign_np.get(key)
        if out is None:
            nv = pp * vpp
            asg = self.assignment(nv)
            nd = np.array([a[1] for a in asg], dtype=float).reshape(vpp, pp).T.copy()
            nm = np.array([a[2] for a in asg], dtype=float).reshape(vpp, pp).T.copy()
            first = np.zeros((pp, vpp))
            first[0, 0] = 1.0
            last = np.zeros((pp, vpp))
            last[pp - 1, vpp - 1] = 1.0
            out = (nd, nm, first, last)
            self._assign_np[key] = out
        return out

    def layer_costs(self, point: PlanPoint, net: NetworkModel) -> LayerCosts:
        """Bind and time one layer of each kind (plus embedding and head) for this shape."""
        par = self.base.parallel
        tp = point.tp
        key = (tp, point.cp, point.ep, par.etp, point.sequence_parallel and tp > 1,
               point.micro_batch_size, point.recompute, point.tp_comm_overlap and tp > 1,
               net.placement("tp"), net.placement("cp"), net.placement("ep"))
        lc = self._layers.get(key)
        if lc is None:
            lc = self._time_layers(point, net)
            self._layers[key] = lc
        return lc

    def _time_layers(self, point: PlanPoint, net: NetworkModel) -> LayerCosts:
        sample = PlanPoint(**{**point.settings(), "zero_stage": 1})  # no ZeRO-3 gathers
        run = plan_run(self.base, sample)
        if run.parallel.fsdp:
            run = run.model_copy(update={"parallel": run.parallel.model_copy(
                update={"fsdp": False})})
        binder = ChunkBinder(run)
        compute = self.compute.time

        def comm(op: Op) -> float:
            return net.collective(op.comm or "none", op.group or "dp", op.size).time_s

        def timed(ch: ChunkGraph) -> tuple[PassCost, PassCost]:
            f = PassCost.of(time_chunk(ch.forward, compute, comm, execute_in_order))
            b = PassCost.of(time_chunk(ch.backward, compute, comm, execute_in_order))
            return f, b

        last = self.model.num_layers - 1
        f: dict[bool, PassCost] = {}
        b: dict[bool, PassCost] = {}
        saved: dict[bool, float] = {}
        payload: dict[bool, float] = {}
        params: dict[bool, tuple[float, float]] = {}
        for kind in sorted(set(self.kinds)):
            i = self.kinds.index(kind)
            ch, _ = binder.chunk(0, (i,), False, False)
            f[kind], b[kind] = timed(ch)
            saved[kind] = ch.saved_bytes
            payload[kind] = max(_max_payload(ch.forward), _max_payload(ch.backward))
            params[kind] = (ch.dense_params, ch.expert_params)
        k0, kl = self.kinds[0], self.kinds[last]
        e_ch, _ = binder.chunk(0, (0,), True, False)
        h_ch, _ = binder.chunk(0, (last,), False, True)
        ef, eb = timed(e_ch)
        hf, hb = timed(h_ch)
        return LayerCosts(
            f=f, b=b, emb_f=ef.minus(f[k0]), emb_b=eb.minus(b[k0]),
            head_f=hf.minus(f[kl]), head_b=hb.minus(b[kl]), b_tail_emb=eb.tail_s,
            saved=saved, emb_saved=e_ch.saved_bytes - saved[k0],
            head_saved=h_ch.saved_bytes - saved[kl],
            payload=payload,
            emb_payload=max(_max_payload(e_ch.forward), _max_payload(e_ch.backward)),
            head_payload=max(_max_payload(h_ch.forward), _max_payload(h_ch.backward)),
            params=params, emb_params=e_ch.layer_params[0][1],
            head_params=h_ch.layer_params[-1][1])

    # --- one plan ---------------------------------------------------------------------------

    def estimate(self, point: PlanPoint) -> Estimate:
        """Estimate one valid plan (see :func:`codesign.search.space.enumerate_plans`)."""
        base = self.base
        par = base.parallel
        tp, pp, cp, ep, vpp = point.tp, point.pp, point.cp, point.ep, point.vpp
        dp = base.num_gpus // (tp * pp * cp)
        mbs = point.micro_batch_size
        n = max(1, par.global_batch_size // (mbs * dp))
        kind = par.schedule or ("interleaved" if vpp > 1 else "1f1b")
        zero = 3 if par.fsdp else point.zero_stage
        net = self.network(tp, cp, ep, dp, pp)
        dense_grp, expert_grp = ("dp_cp", "edp_cp") if cp > 1 else ("dp", "edp")
        dense_n, expert_n = net.group_size(dense_grp), net.group_size(expert_grp)
        lc = self.layer_costs(point, net)
        nv = pp * vpp

        # memory of every stage (arrays [stage, chunk]); the largest decides feasibility
        nd_a, nm_a, first_a, last_a = self.assignment_arrays(pp, vpp)
        pd = lc.params.get(False, (0.0, 0.0))
        pm = lc.params.get(True, (0.0, 0.0))
        has_d, has_m = nd_a > 0, nm_a > 0
        dense = nd_a * pd[0] + nm_a * pm[0] + first_a * lc.emb_params + last_a * lc.head_params
        expert = nd_a * pd[1] + nm_a * pm[1]
        saved = (nd_a * lc.saved.get(False, 0.0) + nm_a * lc.saved.get(True, 0.0)
                 + first_a * lc.emb_saved + last_a * lc.head_saved)
        payload = np.maximum(has_d * lc.payload.get(False, 0.0),
                             has_m * lc.payload.get(True, 0.0))
        payload = np.maximum(payload, np.maximum(first_a * lc.emb_payload,
                                                 last_a * lc.head_payload))
        if zero == 3:
            if dense_n > 1:
                payload = np.maximum(payload, np.maximum(has_d * pd[0], has_m * pm[0]) * 2.0)
            if expert_n > 1:
                payload = np.maximum(payload, has_m * pm[1] * 2.0)
        dense_s, expert_s = dense.sum(axis=1), expert.sum(axis=1)
        shard = dense_s / dense_n + expert_s / expert_n
        plain = dense_s + expert_s
        weights = (shard if zero >= 3 else plain) * WEIGHT_BYTES
        if zero >= 3:
            largest = np.maximum(np.maximum(has_d * (pd[0] + pd[1]), has_m * (pm[0] + pm[1])),
                                 np.maximum(first_a * lc.emb_params,
                                            last_a * lc.head_params))
            weights = weights + 2 * largest.max(axis=1) * WEIGHT_BYTES
        acts = np.einsum("skc,sc->sk", live_vectors(kind, pp, vpp, n), saved).max(axis=1)
        stage_mem = np.stack([weights, (shard if zero >= 2 else plain) * GRAD_BYTES,
                              (shard if zero >= 1 else plain) * OPT_BYTES_PER_PARAM, acts,
                              2.0 * payload.max(axis=1)])
        totals = stage_mem.sum(axis=0)
        worst = int(np.argmax(totals))
        total = float(totals[worst])
        mem_gib = {k: float(stage_mem[j, worst]) / GiB for j, k in enumerate(MEMORY_KEYS)}
        mem_gib["total"] = total / GiB
        if total > self.capacity:
            return Estimate(point, False,
                            reason=(f"out of memory: needs {total / GiB:.1f} GiB per GPU > "
                                    f"{self.capacity / GiB:.1f} GiB HBM"),
                            num_microbatches=n, memory_GiB=mem_gib)

        # chunk passes, per distinct chunk shape (layer kinds, embedding, head)
        sigs = self.signatures(nv)
        z3 = zero == 3 and dense_n > 1
        costs: dict[tuple[Any, ...], tuple[PassCost, PassCost]] = {}
        f_cost: list[PassCost] = []
        b_cost: list[PassCost] = []
        for sig in sigs:
            fb = costs.get(sig)
            if fb is None:
                if z3:
                    fb = self._zero3_chunk(lc, net, point, sig, dense_grp, expert_grp)
                else:
                    fb = self._sum_chunk(lc, sig)
                costs[sig] = fb
            f_cost.append(fb[0])
            b_cost.append(fb[1])

        # pipeline (with ZeRO-1/2 first-bucket gates), gradient buckets, optimizer
        message = pipeline_message_of(mbs, base.seq_len, cp, self.model.hidden_size, tp,
                                      point.sequence_parallel, par.pipeline_scatter_gather)
        x, xg = pipeline_send_seconds(net, message) if pp > 1 else (0.0, 0.0)
        blocking = not par.overlap_p2p
        sync = zero < 3 and (dense_n > 1 or expert_n > 1)
        gather = zero in (1, 2) and (dense_n > 1 or expert_n > 1)
        coll = net.collective

        gates: list[float] | None = None
        ag_total = [0.0] * pp
        if gather:
            ag_sig: dict[tuple[Any, ...], tuple[float, float]] = {}
            ag_pair: dict[tuple[float, float], float] = {}
            gates = [0.0] * (pp * vpp)
            for s in range(pp):
                t = 0.0
                for c in range(vpp):
                    sig = sigs[c * pp + s]
                    hit = ag_sig.get(sig)
                    if hit is None:
                        # a chunk's first forward waits for its first bucket
                        entries = self._entries(lc, sig)
                        acc, gate_at = 0.0, 0.0
                        for i, (_layer, d, e) in enumerate(entries):
                            g = ag_pair.get((d, e))
                            if g is None:
                                g = coll("all_gather", dense_grp, d * PARAM_BYTES).time_s
                                if e:
                                    g += coll("all_gather", expert_grp,
                                              e * PARAM_BYTES).time_s
                                ag_pair[(d, e)] = g
                            acc += g
                            if i == 0:
                                gate_at = acc
                        hit = (gate_at, acc)
                        ag_sig[sig] = hit
                    gates[s * vpp + c] = t + hit[0]
                    t += hit[1]
                ag_total[s] = t
            if not point.overlap_param_gather:
                gates = None

        durations = [0.0] * (pp * vpp * 2)
        for s in range(pp):
            for c in range(vpp):
                v = c * pp + s
                durations[(s * vpp + c) * 2] = f_cost[v].time_s
                durations[(s * vpp + c) * 2 + 1] = b_cost[v].time_s
        pkey = (kind, pp, vpp, n, x, xg, blocking, tuple(durations),
                tuple(gates) if gates else None)
        pipe = self._pipes.get(pkey)
        if pipe is None:
            if len(self._pipes) > 4096:
                self._pipes.clear()
            pipe = pipeline_times(kind, pp, vpp, n, durations, x, gates, blocking=blocking,
                                  gather=xg)
            self._pipes[pkey] = pipe

        stage_end: list[float] = []
        opt_starts: list[float] = []
        opt_times: list[float] = []
        release: tuple[tuple[int, ...], ...] | None = None
        bucket_sig: dict[tuple[Any, ...], list[tuple[float, float]]] = {}
        if sync:
            gr_kind = "all_reduce" if zero == 0 else "reduce_scatter"
            gr_pair: dict[tuple[float, float], float] = {}

            def buckets(sig: tuple[Any, ...]) -> list[tuple[float, float]]:
                """(release offset into the chunk's last backward, reduce time) in order."""
                out = []
                for at, d, e in self._released(lc, sig):
                    g = gr_pair.get((d, e))
                    if g is None:
                        g = coll(gr_kind, dense_grp, d * GRAD_REDUCE_BYTES).time_s
                        if e:
                            g += coll(gr_kind, expert_grp, e * GRAD_REDUCE_BYTES).time_s
                        gr_pair[(d, e)] = g
                    out.append((at, g))
                return out

            release = (compile_program(kind, pp, vpp, min(n, 3 * pp)).release_order
                       if point.overlap_grad_reduce else None)
        for s in range(pp):
            c_end = pipe.end[s]
            start_opt = c_end + b_cost[s].tail_s  # last pass: backward of chunk 0
            if sync:
                e_dp = ag_total[s] if (gather and point.overlap_param_gather) else 0.0
                if release is not None:
                    for c in release[s]:
                        sig = sigs[c * pp + s]
                        bl = bucket_sig.get(sig)
                        if bl is None:
                            bl = bucket_sig[sig] = buckets(sig)
                        t0 = pipe.last_b_start[s][c]
                        for at, g in bl:
                            r = t0 + at
                            if r > e_dp:
                                e_dp = r
                            e_dp += g
                else:
                    if c_end > e_dp:
                        e_dp = c_end
                    for c in range(vpp):
                        sig = sigs[c * pp + s]
                        bl = bucket_sig.get(sig)
                        if bl is None:
                            bl = bucket_sig[sig] = buckets(sig)
                        for _, g in bl:
                            e_dp += g
                if e_dp > start_opt:
                    start_opt = e_dp
            params = float(plain[s] if zero == 0 else shard[s])
            opt = self.compute.time(Op(name="optimizer", kind="memory", category="optimizer",
                                       layer=-1, bytes=params * ADAM_BYTES_PER_PARAM))
            end = start_opt + opt
            if gather and not point.overlap_param_gather:
                end += ag_total[s]
            stage_end.append(end)
            opt_starts.append(start_opt)
            opt_times.append(opt)
        step = max(stage_end)
        crit = max(range(pp), key=lambda s: (stage_end[s], s))

        # breakdown of the critical stage
        parts = [0.0] * len(CATS)
        busy = 0.0
        for c in range(vpp):
            v = c * pp + crit
            for pc in (f_cost[v], b_cost[v]):
                busy += pc.time_s
                for j, val in enumerate(pc.parts):
                    parts[j] += val
        parts = [p * n for p in parts]
        busy *= n
        idle = max(pipe.end[crit] - busy, 0.0)
        pp_wait = min(pipe.wait_pp[crit], idle)
        gate_wait = min(pipe.wait_gate[crit], idle - pp_wait)
        parts[_DP] += gate_wait + (opt_starts[crit] - pipe.end[crit])
        if gather and not point.overlap_param_gather:
            parts[_DP] += ag_total[crit]
        parts[_IDX["bubble"]] += idle - pp_wait - gate_wait
        cats = dict(zip(CATS, parts, strict=True))
        cats["comm:pp"] = pp_wait
        cats["optimizer"] = opt_times[crit]
        breakdown = breakdown_from_categories(cats)
        return Estimate(
            point, True, step_time_s=step, mfu=self.model_flops / (step * self.peak),
            tokens_per_s=self.tokens / step, num_microbatches=n, critical_stage=crit,
            memory_GiB=mem_gib, breakdown_s={k: breakdown[k] for k in BREAKDOWN_KEYS})

    # --- chunk passes -----------------------------------------------------------------------

    def _sum_chunk(self, lc: LayerCosts, sig: tuple[Any, ...]) -> tuple[PassCost, PassCost]:
        """A chunk as the sum of its parts (no collective crosses a layer boundary)."""
        key = (id(lc), sig)
        hit = self._sums.get(key)
        if hit is not None:
            return hit
        kinds, first, last = sig
        nm = sum(kinds)
        nd = len(kinds) - nm
        out = []
        for per, emb, head in ((lc.f, lc.emb_f, lc.head_f), (lc.b, lc.emb_b, lc.head_b)):
            pieces: list[tuple[float, PassCost]] = []
            if nd:
                pieces.append((nd, per[False]))
            if nm:
                pieces.append((nm, per[True]))
            if first:
                pieces.append((1, emb))
            if last:
                pieces.append((1, head))
            t = sum(k * pc.time_s for k, pc in pieces)
            parts = tuple(sum(k * pc.parts[j] for k, pc in pieces) for j in range(len(CATS)))
            out.append((t, parts))
        # the backward pass ends with the embedding (first chunk) or its lowest layer
        tail = lc.b_tail_emb if first else lc.b[kinds[0]].tail_s
        res = (PassCost(out[0][0], out[0][1]), PassCost(out[1][0], out[1][1], tail))
        self._sums[key] = res
        return res

    def _zero3_chunk(self, lc: LayerCosts, net: NetworkModel, point: PlanPoint,
                     sig: tuple[Any, ...], dense_grp: str,
                     expert_grp: str) -> tuple[PassCost, PassCost]:
        """A ZeRO-3 chunk: each layer one compute block, with the engine's per-layer parameter
        gathers and gradient reduce-scatters around it, wired by the engine's overlap rules."""
        key = (id(lc), net.placement(dense_grp), net.placement(expert_grp), sig,
               point.overlap_param_gather, point.overlap_grad_reduce)
        hit = self._z3.get(key)
        if hit is not None:
            return hit
        kinds, first, last = sig
        dense_n, expert_n = net.group_size(dense_grp), net.group_size(expert_grp)
        pre = "prefetch" if point.overlap_param_gather else "none"
        post = "async" if point.overlap_grad_reduce else "none"
        dur: dict[str, float] = {}

        def block(name: str, t: float, layer: int, cat: Category) -> Op:
            dur[name] = t
            return _block(name, layer, cat)

        def gathers(d: float, e: float, layer: int, cat: Category) -> list[Op]:
            out = []
            if dense_n > 1 and d > 0:
                out.append(Op(name="param_gather", kind="comm", category=cat, layer=layer,
                              comm="all_gather", group=dense_grp, size=d * 2.0,
                              overlap=pre))  # type: ignore[arg-type]
            if expert_n > 1 and e > 0:
                out.append(Op(name="expert_param_gather", kind="comm", category=cat,
                              layer=layer, comm="all_gather", group=expert_grp, size=e * 2.0,
                              overlap=pre))  # type: ignore[arg-type]
            return out

        layers = range(len(kinds))
        fwd: list[Op] = []
        if first:
            fwd.append(block("emb", lc.emb_f.time_s, -1, "forward"))
        for i, k in zip(layers, kinds, strict=True):
            d, e = lc.params[k]
            fwd += gathers(d, e, i, "forward")
            fwd.append(block(f"f{i}", lc.f[k].time_s, i, "forward"))
        if last:
            fwd.append(block("head", lc.head_f.time_s, -1, "forward"))
        bwd: list[Op] = []
        if last:
            bwd.append(block("head_b", lc.head_b.time_s, -1, "backward"))
        for i, k in zip(reversed(layers), reversed(kinds), strict=True):
            d, e = lc.params[k]
            g = gathers(d, e, i, "backward")
            bwd += g
            bwd.append(block(f"b{i}", lc.b[k].time_s, i, "backward"))
            bwd += [Op(name=o.name.replace("gather", "grad_reduce"), kind="comm",
                       category="backward", layer=i, comm="reduce_scatter", group=o.group,
                       size=o.size, overlap=post) for o in g]  # type: ignore[arg-type]
        if first:
            bwd.append(block("emb_b", lc.emb_b.time_s, -1, "backward"))

        def comm(op: Op) -> float:
            return net.collective(op.comm or "none", op.group or "dp", op.size).time_s

        def compute(op: Op) -> float:
            return dur[op.name]

        out = []
        for ops, per, emb, head in ((fwd, lc.f, lc.emb_f, lc.head_f),
                                    (bwd, lc.b, lc.emb_b, lc.head_b)):
            tasks = op_tasks(ops, compute, comm)
            tl = execute_in_order(tasks)
            compute_end = max(tl.end[tk.id] for tk in tasks if tk.stream == "compute")
            tail = max((tl.end[tk.id] - compute_end for tk in tasks
                        if tk.stream != "compute"), default=0.0)
            parts = [0.0] * len(CATS)
            busy = 0.0
            pieces = [per[k] for k in kinds] + ([emb] if first else []) + \
                ([head] if last else [])
            for pc in pieces:
                busy += pc.time_s
                for j, val in enumerate(pc.parts):
                    parts[j] += val
            parts[_DP] += compute_end - busy
            out.append(PassCost(compute_end, tuple(parts), max(tail, 0.0)))
        res = (out[0], out[1])
        self._z3[key] = res
        return res

    def _entries(self, lc: LayerCosts, sig: tuple[Any, ...]) -> list[tuple[int, float, float]]:
        """Parameter buckets of a chunk as ``(layer, dense, expert)`` in the engine's order
        (embedding, layers, head; layers numbered within the chunk)."""
        kinds, first, last = sig
        out = [(-1, lc.emb_params, 0.0)] if first else []
        for i, k in enumerate(kinds):
            d, e = lc.params[k]
            out.append((i, d, e))
        if last:
            out.append((-1, lc.head_params, 0.0))
        return out

    def _released(self, lc: LayerCosts, sig: tuple[Any, ...]) -> list[tuple[float, float, float]]:
        """Gradient buckets of one chunk as ``(offset into its last backward, dense, expert)``,
        in the engine's release order (by offset, then layer)."""
        kinds, first, last = sig
        done: dict[int, float] = {}
        t = lc.head_b.time_s if last else 0.0
        for i in range(len(kinds) - 1, -1, -1):
            t += lc.b[kinds[i]].time_s
            done[i] = t
        b_time = t + (lc.emb_b.time_s if first else 0.0)
        if first:
            done[-1] = b_time
        elif last:
            done[-1] = lc.head_b.time_s
        ordered = sorted((done.get(layer, b_time), layer, d, e)
                         for layer, d, e in self._entries(lc, sig))
        return [(at, d, e) for at, _, d, e in ordered]
