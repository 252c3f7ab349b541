"""Analytical estimate of one plan's step time, breakdown and memory, from the engine's own
cost models, fast enough to rank thousands of plans.

What is shared with the engine, not re-derived:

* **The plan**: a searched plan is a :class:`~codesign.specs.parallel.ParallelismSpec` (the
  base run's with the searched values, :meth:`PlanPoint.spec
  <codesign.search.fields.PlanPoint.spec>`), so the effective schedule, ZeRO stage,
  data-parallel size, micro-batch count, state groups and pipeline message are the spec's and
  the workload's own (:func:`~codesign.workload.dims.num_microbatches`,
  :func:`~codesign.workload.training.state_groups`,
  :func:`~codesign.workload.dims.pipeline_message`).
* **Operators and chunk passes**: layers bound by the engine's graph builder and timed by its
  chunk timer once per local layer shape (:mod:`codesign.search.costs`), per phase of the
  schedule (``F``, ``B``, and ``W`` for split-backward schedules such as ZB-H1).
* **Pipeline**: the step program's schedule and dependency rules, evaluated without an event
  queue (:mod:`codesign.search.pipeline`), with the first-bucket parameter-gather gates of
  ZeRO-1/2.
* **Data parallelism and optimizer**: gradient buckets released as each layer's gradients are
  done in its chunk's last gradient pass (``B``, or ``W``), or after the last pass, reduced in
  order on one stream after the parameter gathers, then the Adam update priced by the compute
  model, as in :func:`codesign.engine.training.simulate_step`.
* **Memory**: :mod:`codesign.search.plan_memory`, the formulas of
  :mod:`codesign.workload.memory` on every stage at once.

What is approximate: a chunk's time is the sum of its parts (exact when the above holds), very
long schedules are extrapolated from two shorter ones, the tails of collectives after the last
backward are not queued behind earlier tails, and the breakdown splits idle time into pipeline
sends, parameter-gather waits and bubble by what each pass waited for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from codesign.engine.training import PARAM_BYTES, pipeline_send_seconds
from codesign.hardware.compute import ComputeModel
from codesign.ir import Op
from codesign.network.model import NetworkModel
from codesign.report.training import BREAKDOWN_KEYS, breakdown_from_categories
from codesign.search.costs import (
    CATS,
    DP,
    IDX,
    LayerCosts,
    PassCost,
    Signature,
    Zero3Groups,
    bucket_entries,
    released,
    sum_chunk,
    time_layers,
    zero3_chunk,
)
from codesign.search.fields import LAYER_SHAPE_EXCLUDED, PlanPoint
from codesign.search.pipeline import (
    PipelineTimes,
    compile_program,
    phases_of,
    pipeline_times,
)
from codesign.search.plan_memory import Assignment, PlanMemory, plan_memory
from codesign.specs.parallel import ParallelismSpec
from codesign.specs.run import TrainingRun
from codesign.units import GiB
from codesign.workload.dims import num_microbatches, pipeline_message
from codesign.workload.training import (
    adam_bytes_per_param,
    layer_assignment,
    loss_layer_slots,
    model_flops_per_sequence_fwd,
    state_groups,
)


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


@dataclass(frozen=True)
class PricedPlan:
    """A plan that fits in memory, with its chunk-pass costs before ZeRO-3 gathers (per
    virtual stage, one :class:`PassCost` per phase, :meth:`Estimator.compute_costs`): enough
    for a lower bound on its step time (:attr:`lower_bound_s`); :meth:`Estimator.complete`
    finishes the estimate."""

    plan: _Plan
    memory: PlanMemory
    costs: list[tuple[PassCost, ...]]

    @property
    def lower_bound_s(self) -> float:
        """Seconds the step cannot be shorter than: every micro-batch runs each of its
        stage's chunks' passes on that stage's one compute stream, back to back at best, so
        the busiest stage's pass time × the micro-batch count bounds the step from below
        (the pipeline's bubbles, waits, tails, ZeRO-3 gathers and the optimizer only add to
        it)."""
        p = self.plan
        busiest = max(sum(cost.time_s for c in range(p.vpp) for cost in self.costs[c * p.pp + s])
                      for s in range(p.pp))
        return p.n * busiest


@dataclass
class _Plan:
    """One plan as the estimator prices it: its spec and run, and what follows from them."""

    point: PlanPoint
    par: ParallelismSpec
    run: TrainingRun
    kind: str
    phases: tuple[str, ...]
    pp: int
    vpp: int
    n: int
    zero: int
    net: NetworkModel
    dense_grp: str
    expert_grp: str
    dense_n: int
    expert_n: int
    lc: LayerCosts
    sigs: list[Signature]


@dataclass
class _Gathers:
    """ZeRO-1/2 parameter gathers: when each chunk's first forward may start (None: no gate)
    and each stage's total gather time."""

    gates: list[float] | None
    total: list[float]


class Estimator:
    """Estimates plans of one base run (model, system and non-searched settings).

    Caches per local layer shape, per rank layout and per pipeline input, so plans that share
    them cost little. Not thread-safe; each worker process builds its own.
    """

    def __init__(self, base: TrainingRun) -> None:
        self.base = base
        self.model = base.model
        self.loss_slots = loss_layer_slots(base)
        self.compute = ComputeModel.from_gpu(
            base.gpu, attention_kernel=base.parallel.attention_kernel)
        self.measured = (self.compute.tables.collectives
                         if self.compute.tables is not None else None)
        self.capacity = base.gpu.memory_bytes
        self.model_flops = (3.0 * model_flops_per_sequence_fwd(base)
                            * base.parallel.global_batch_size)
        self.tokens = float(base.parallel.global_batch_size * base.seq_len)
        self.peak = base.gpu.peak_flops(base.parallel.dtype) * base.num_gpus
        m = self.model
        self.kinds = tuple(m.layer_kind(i) for i in range(m.num_layers))
        self._shape_idx: dict[tuple[str, ...], tuple[int, ...]] = {}
        self._nets: dict[tuple[int, ...], NetworkModel] = {}
        self._layers: dict[tuple[Any, ...], LayerCosts] = {}
        self._assign: dict[int, list[tuple[tuple[int, ...], dict[str, int]]]] = {}
        self._assign_np: dict[tuple[int, int], Assignment] = {}
        self._sigs: dict[int, list[Signature]] = {}
        self._sums: dict[tuple[Any, ...], tuple[PassCost, ...]] = {}
        self._z3: dict[tuple[Any, ...], tuple[PassCost, ...]] = {}
        self._pipes: dict[tuple[Any, ...], PipelineTimes] = {}

    # --- shared pieces ----------------------------------------------------------------------

    def network(self, tp: int, cp: int, ep: int, dp: int, pp: int) -> NetworkModel:
        key = (tp, cp, ep, dp, pp)
        net = self._nets.get(key)
        if net is None:
            par = self.base.parallel.model_copy(update={"tp": tp, "cp": cp, "ep": ep,
                                                        "pp": pp})
            net = NetworkModel.from_parallelism(self.base.topology, par, dp=dp,
                                                measured=self.measured, moe=self.base.model.moe)
            self._nets[key] = net
        return net

    def assignment(self, nv: int) -> list[tuple[tuple[int, ...], dict[str, int]]]:
        """Per virtual stage: its layers, and how many there are of each layer kind
        (:meth:`~codesign.specs.model.ModelSpec.layer_kind`) of the model."""
        out = self._assign.get(nv)
        if out is None:
            out = []
            for layers in layer_assignment(self.model.num_layers, nv,
                                           self.model.mtp_blocks, self.loss_slots):
                counts = dict.fromkeys(sorted(set(self.kinds)), 0)
                for i in layers:
                    counts[self.kinds[i]] += 1
                out.append((layers, counts))
            self._assign[nv] = out
        return out

    def signatures(self, nv: int) -> list[Signature]:
        """Per virtual stage: ``(layer kinds, first, last)``, what its passes depend on."""
        out = self._sigs.get(nv)
        if out is None:
            out = [(tuple(self.kinds[i] for i in layers), v == 0, v == nv - 1)
                   for v, (layers, _) in enumerate(self.assignment(nv))]
            self._sigs[nv] = out
        return out

    def assignment_arrays(self, pp: int, vpp: int) -> Assignment:
        """Layers of each kind, first-chunk and last-chunk flags as ``[stage, chunk]`` arrays
        (virtual stage ``c·pp + s``)."""
        key = (pp, vpp)
        out = self._assign_np.get(key)
        if out is None:
            nv = pp * vpp
            asg = self.assignment(nv)
            counts = {k: np.array([a[1][k] for a in asg], dtype=float).reshape(vpp, pp).T.copy()
                      for k in asg[0][1]}
            first = np.zeros((pp, vpp))
            first[0, 0] = 1.0
            last = np.zeros((pp, vpp))
            last[pp - 1, vpp - 1] = 1.0
            out = (counts, first, last)
            self._assign_np[key] = out
        return out

    def layer_costs(self, par: ParallelismSpec, net: NetworkModel, phases: tuple[str, ...],
                    shape: tuple[Any, ...]) -> LayerCosts:
        """Bind and time one layer of each kind (plus embedding and head) for the local
        shape of ``par``: ``shape``, the values of every plan field that can change a layer
        (:meth:`shape_key`), and the placement of the tp/cp/ep groups."""
        key = (shape, phases, net.placement("tp"), net.placement("cp"), net.placement("ep"))
        lc = self._layers.get(key)
        if lc is None:
            sample = par.model_copy(update={"zero_stage": 1, "fsdp": False})  # no gathers
            run = self.base.model_copy(update={"parallel": sample})
            lc = time_layers(run, self.kinds, net, self.compute.time, phases,
                             self.compute.host_time)
            self._layers[key] = lc
        return lc

    def shape_key(self, point: PlanPoint) -> tuple[Any, ...]:
        """The values of ``point`` that can change one layer (the base run's other fields
        are the same for every plan of this estimator)."""
        idx = self._shape_idx.get(point.fields)
        if idx is None:
            idx = self._shape_idx[point.fields] = tuple(
                i for i, k in enumerate(point.fields) if k not in LAYER_SHAPE_EXCLUDED)
        values = point.values
        return tuple([values[i] for i in idx])

    # --- one plan ---------------------------------------------------------------------------

    def plan(self, point: PlanPoint) -> _Plan:
        """The spec, run, groups and layer costs of ``point``."""
        par = point.spec(self.base.parallel)
        run = self.base.model_copy(update={"parallel": par})
        pp, vpp = par.pp, par.vpp
        net = self.network(par.tp, par.cp, par.ep, run.dp, pp)
        dense_grp, expert_grp = state_groups(par)
        kind = par.pipeline_schedule
        phases = phases_of(kind)
        return _Plan(point=point, par=par, run=run, kind=kind, phases=phases, pp=pp, vpp=vpp,
                     n=num_microbatches(run), zero=par.sharding_stage, net=net,
                     dense_grp=dense_grp, expert_grp=expert_grp,
                     dense_n=net.group_size(dense_grp), expert_n=net.group_size(expert_grp),
                     lc=self.layer_costs(par, net, phases, self.shape_key(point)),
                     sigs=self.signatures(pp * vpp))

    def estimate(self, point: PlanPoint) -> Estimate:
        """Estimate one valid plan (see :func:`codesign.search.space.enumerate_plans`)."""
        fitted = self._fit(point)
        return fitted if isinstance(fitted, Estimate) else self._estimate(*fitted)

    def price(self, point: PlanPoint) -> Estimate | PricedPlan:
        """The first half of :meth:`estimate` with a lower bound to prune on: the memory check
        (an infeasible :class:`Estimate` when the plan does not fit) and the chunk-pass costs
        before ZeRO-3 gathers."""
        fitted = self._fit(point)
        if isinstance(fitted, Estimate):
            return fitted
        p, mem = fitted
        return PricedPlan(p, mem, self.compute_costs(p))

    def complete(self, priced: PricedPlan) -> Estimate:
        """The second half of :meth:`estimate`: chunk costs with their ZeRO-3 gathers,
        pipeline, data parallelism and optimizer."""
        return self._estimate(priced.plan, priced.memory)

    def _fit(self, point: PlanPoint) -> Estimate | tuple[_Plan, PlanMemory]:
        """The plan and its memory, or an infeasible :class:`Estimate` when it does not fit."""
        p = self.plan(point)
        mem = plan_memory(p.lc, self.assignment_arrays(p.pp, p.vpp), p.zero, p.dense_n,
                          p.expert_n, p.kind, p.pp, p.vpp, p.n, p.par.grad_bytes,
                          p.par.lp_grad_bytes)
        if mem.total > self.capacity:
            return Estimate(point, False,
                            reason=(f"out of memory: needs {mem.total / GiB:.1f} GiB per GPU "
                                    f"> {self.capacity / GiB:.1f} GiB HBM"),
                            num_microbatches=p.n, memory_GiB=mem.gib)
        return p, mem

    def _estimate(self, p: _Plan, mem: PlanMemory) -> Estimate:
        point = p.point
        costs = self.chunk_costs(p)
        gathers = self.param_gathers(p)
        pipe = self.pipeline(p, costs, gathers)
        stage_end, opt_starts, opt_times = self.finish(p, costs, gathers, pipe, mem)
        step = max(stage_end)
        crit = max(range(p.pp), key=lambda s: (stage_end[s], s))
        breakdown = self.breakdown(p, costs, gathers, pipe, crit, opt_starts[crit],
                                   opt_times[crit])
        return Estimate(
            point, True, step_time_s=step, mfu=self.model_flops / (step * self.peak),
            tokens_per_s=self.tokens / step, num_microbatches=p.n, critical_stage=crit,
            memory_GiB=mem.gib, breakdown_s=breakdown)

    def compute_costs(self, p: _Plan) -> list[tuple[PassCost, ...]]:
        """Per virtual stage: its passes' costs without ZeRO-3's per-layer gathers (equal to
        :meth:`chunk_costs` for other plans, never longer: a ZeRO-3 pass runs the same
        layers and waits for gathers)."""
        out = []
        for sig in p.sigs:
            key = (id(p.lc), sig)
            c = self._sums.get(key)
            if c is None:
                c = self._sums[key] = sum_chunk(p.lc, sig)
            out.append(c)
        return out

    def chunk_costs(self, p: _Plan) -> list[tuple[PassCost, ...]]:
        """Per virtual stage: its passes' costs (one per phase), per distinct chunk shape."""
        if not (p.zero == 3 and p.dense_n > 1):
            return self.compute_costs(p)
        groups = Zero3Groups(p.dense_grp, p.expert_grp, p.dense_n, p.expert_n,
                             p.par.overlap_param_gather, p.par.overlap_grad_reduce,
                             p.par.regather_for_recompute and p.par.recompute == "full",
                             p.par.param_gather_queue == "group")
        place = (p.net.placement(p.dense_grp), p.net.placement(p.expert_grp))
        out = []
        for sig in p.sigs:
            key = (id(p.lc), *place, sig, groups)
            c = self._z3.get(key)
            if c is None:
                c = self._z3[key] = zero3_chunk(p.lc, p.net, sig, groups)
            out.append(c)
        return out

    def param_gathers(self, p: _Plan) -> _Gathers:
        """ZeRO-1/2 parameter gathers: each chunk's first forward waits for its first bucket
        (with overlapped gathers); each stage gathers every bucket of its chunks in turn."""
        gather = p.zero in (1, 2) and (p.dense_n > 1 or p.expert_n > 1)
        if not gather:
            return _Gathers(None, [0.0] * p.pp)
        coll = p.net.collective
        ag_sig: dict[Signature, tuple[float, float]] = {}
        ag_pair: dict[tuple[float, float], float] = {}
        gates = [0.0] * (p.pp * p.vpp)
        total = [0.0] * p.pp
        for s in range(p.pp):
            t = 0.0
            for c in range(p.vpp):
                sig = p.sigs[c * p.pp + s]
                hit = ag_sig.get(sig)
                if hit is None:
                    acc, gate_at = 0.0, 0.0
                    for i, (_layer, d, e) in enumerate(bucket_entries(p.lc, sig)):
                        g = ag_pair.get((d, e))
                        if g is None:
                            g = coll("all_gather", p.dense_grp, d * PARAM_BYTES).time_s
                            if e:
                                g += coll("all_gather", p.expert_grp,
                                          e * PARAM_BYTES).time_s
                            ag_pair[(d, e)] = g
                        acc += g
                        if i == 0:
                            gate_at = acc
                    hit = ag_sig[sig] = (gate_at, acc)
                gates[s * p.vpp + c] = t + hit[0]
                t += hit[1]
            total[s] = t
        return _Gathers(gates if p.par.overlap_param_gather else None, total)

    def pipeline(self, p: _Plan, costs: list[tuple[PassCost, ...]],
                 gathers: _Gathers) -> PipelineTimes:
        """The schedule run on the chunk-pass costs (cached per distinct input)."""
        x, xg = pipeline_send_seconds(p.net, pipeline_message(p.run)) if p.pp > 1 \
            else (0.0, 0.0)
        blocking = not p.par.overlap_p2p
        nph = len(p.phases)
        durations = [0.0] * (p.pp * p.vpp * nph)
        for s in range(p.pp):
            for c in range(p.vpp):
                cost = costs[c * p.pp + s]
                for j in range(nph):
                    durations[(s * p.vpp + c) * nph + j] = cost[j].time_s
        gates = gathers.gates
        pkey = (p.kind, p.pp, p.vpp, p.n, x, xg, blocking, tuple(durations),
                tuple(gates) if gates else None)
        pipe = self._pipes.get(pkey)
        if pipe is None:
            if len(self._pipes) > 4096:
                self._pipes.clear()
            pipe = pipeline_times(p.kind, p.pp, p.vpp, p.n, durations, x, gates,
                                  blocking=blocking, gather=xg)
            self._pipes[pkey] = pipe
        return pipe

    def finish(self, p: _Plan, costs: list[tuple[PassCost, ...]], gathers: _Gathers,
               pipe: PipelineTimes, mem: PlanMemory
               ) -> tuple[list[float], list[float], list[float]]:
        """Per stage: step end, optimizer start and optimizer time, after the gradient
        buckets (released in order from each chunk's last gradient pass when overlapped,
        else after the last pass) and, without overlap, the parameter gathers."""
        par, pp, vpp = p.par, p.pp, p.vpp
        sync = p.zero < 3 and (p.dense_n > 1 or p.expert_n > 1)
        gather_after = gathers.gates is None and p.zero in (1, 2) and \
            (p.dense_n > 1 or p.expert_n > 1)
        buckets = self._bucket_times(p) if sync else None
        release = (compile_program(p.kind, pp, vpp, min(p.n, 3 * pp)).release_order
                   if sync and par.overlap_grad_reduce else None)
        split = len(p.phases) == 3
        stage_end, opt_starts, opt_times = [], [], []
        for s in range(pp):
            c_end = pipe.end[s]
            start_opt = c_end + costs[s][-1].tail_s  # last pass: gradients of chunk 0
            if split:  # the last input-gradient pass may leave collectives running longer
                start_opt = max(start_opt, pipe.b_end[s] + costs[s][1].tail_s)
            if buckets is not None:
                e_dp = gathers.total[s] if gathers.gates is not None else 0.0
                if release is not None:
                    for c in release[s]:
                        t0 = pipe.last_b_start[s][c]
                        for at, g in buckets(p.sigs[c * pp + s]):
                            r = t0 + at
                            if r > e_dp:
                                e_dp = r
                            e_dp += g
                else:
                    if c_end > e_dp:
                        e_dp = c_end
                    for c in range(vpp):
                        for _, g in buckets(p.sigs[c * pp + s]):
                            e_dp += g
                if e_dp > start_opt:
                    start_opt = e_dp
            params = float(mem.plain[s] if p.zero == 0 else mem.shard[s])
            opt = self.compute.time(Op(name="optimizer", kind="memory", category="optimizer",
                                       layer=-1, bytes=params * adam_bytes_per_param(
                                           p.par.grad_bytes)))
            end = start_opt + opt
            if gather_after:
                end += gathers.total[s]
            stage_end.append(end)
            opt_starts.append(start_opt)
            opt_times.append(opt)
        return stage_end, opt_starts, opt_times

    def _bucket_times(self, p: _Plan) -> Any:
        """A function: chunk signature -> its gradient buckets as (release offset into the
        chunk's last gradient pass, reduce time), in the engine's order."""
        kind = "all_reduce" if p.zero == 0 else "reduce_scatter"
        coll = p.net.collective
        grad_bytes = p.par.grad_bytes
        pair: dict[tuple[float, float], float] = {}
        by_sig: dict[Signature, list[tuple[float, float]]] = {}

        def buckets(sig: Signature) -> list[tuple[float, float]]:
            out = by_sig.get(sig)
            if out is None:
                out = []
                for at, d, e in released(p.lc, sig):
                    g = pair.get((d, e))
                    if g is None:
                        g = coll(kind, p.dense_grp, d * grad_bytes).time_s
                        if e:
                            g += coll(kind, p.expert_grp, e * grad_bytes).time_s
                        pair[(d, e)] = g
                    out.append((at, g))
                by_sig[sig] = out
            return out

        return buckets

    def breakdown(self, p: _Plan, costs: list[tuple[PassCost, ...]], gathers: _Gathers,
                  pipe: PipelineTimes, crit: int, opt_start: float,
                  opt_time: float) -> dict[str, float]:
        """The critical stage's time by category: its passes' parts, its idle time split
        into pipeline sends, parameter-gather waits and bubble, DP tails and optimizer."""
        parts = [0.0] * len(CATS)
        busy = 0.0
        for c in range(p.vpp):
            for pc in costs[c * p.pp + crit]:
                busy += pc.time_s
                for j, val in enumerate(pc.parts):
                    parts[j] += val
        parts = [v * p.n for v in parts]
        busy *= p.n
        idle = max(pipe.end[crit] - busy, 0.0)
        pp_wait = min(pipe.wait_pp[crit], idle)
        gate_wait = min(pipe.wait_gate[crit], idle - pp_wait)
        parts[DP] += gate_wait + (opt_start - pipe.end[crit])
        if gathers.gates is None:
            parts[DP] += gathers.total[crit]
        parts[IDX["bubble"]] += idle - pp_wait - gate_wait
        cats = dict(zip(CATS, parts, strict=True))
        cats["comm:pp"] = pp_wait
        cats["optimizer"] = opt_time
        out = breakdown_from_categories(cats)
        return {k: out[k] for k in BREAKDOWN_KEYS}
