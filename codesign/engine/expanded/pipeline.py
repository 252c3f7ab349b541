"""The pipeline level of the per-rank engine: the step's task graph over replica classes (chunk
passes of each class's cluster at each stage, pipeline sends, data-parallel gradient buckets
and parameter gathers as barriers across classes, the optimizer), executed exactly or, under
contention, by the fluid executor; then the step time, the critical cluster's breakdown and
per-rank outputs.

The schedule wiring here mirrors the symmetric engine's (:mod:`codesign.engine.training`)
per replica class; it is kept as it was when the per-rank engine was split into modules.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence

import numpy as np

from codesign.engine.chunk import comm_category
from codesign.engine.executor import Timeline, attribute, execute_exact
from codesign.engine.expanded.clusters import Clusters, ClusterUnit, price_clusters
from codesign.engine.expanded.fluid import Flow, execute_fluid
from codesign.engine.expanded.geometry import RankGeometry
from codesign.engine.expanded.link_factors import LinkFactors
from codesign.engine.expanded.values import ExpandedResult, Perturbations, Resource
from codesign.engine.training import GRAD_REDUCE_BYTES, PARAM_BYTES, TaskBuilder
from codesign.hardware.compute import ComputeModel
from codesign.network.faults import CommProfile, combine
from codesign.network.model import NetworkModel
from codesign.workload.schedules import schedule
from codesign.workload.training import TrainingGraph, state_groups


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



_HEALTHY = Perturbations()


def simulate_expanded(graph: TrainingGraph, computes: Sequence[ComputeModel],
                      network: NetworkModel, perturbations: Perturbations = _HEALTHY,
                      *, contention: bool = False) -> ExpandedResult:
    """Simulate one training step rank by rank (see :mod:`codesign.engine.expanded`).

    ``computes[0]`` prices the run's GPU, ``computes[1]`` the second GPU type of
    ``perturbations.mix_ranks``.
    """
    cl = price_clusters(graph, computes, network, perturbations, contention)
    wiring = _Wiring(graph, network, cl, contention)
    for stage in range(wiring.pp):
        wiring.wire_stage(stage)
    bld = wiring.bld
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

    geo, faults = cl.geo, cl.faults
    finish, busy = _rank_outputs(geo, tl, bld, ids, cl.classes, cl.units, wiring.orders)
    slowed = tuple(sorted((g, s, tier, f) for (g, s, tier), f in faults.slowed.items()))
    return ExpandedResult(
        step_time_s=step, breakdown_s=parts, critical_stage=crit[1], rank_finish_s=finish,
        rank_busy_s=busy, replica_classes=wiring.n_cls,
        perturbed_clusters=sum(len(r) for r in cl.batches.values()),
        clusters=wiring.pp * geo.n_rep, tasks=len(tasks), slowed=slowed, timeline=tl)


def _resource(k: int, s: int, tier: str, d: str) -> Resource:
    return (k, s, tier, d)


class _Wiring:
    """The pipeline-level tasks of one step, added to :attr:`bld` stage by stage."""

    def __init__(self, graph: TrainingGraph, network: NetworkModel, cl: Clusters,
                 contention: bool) -> None:
        p = graph.run.parallel
        self.p = p
        self.pp, self.vpp = p.pp, p.vpp
        self.n_v = self.pp * self.vpp
        self.network, self.cl, self.faults = network, cl, cl.faults
        self.contention = contention
        self.bld = _Builder()
        self.orders = schedule(p.pipeline_schedule, self.pp, self.vpp, graph.num_microbatches)
        zero = p.sharding_stage
        self.zero = zero
        self.dense_grp, self.expert_grp = state_groups(p)
        dense_n = network.group_size(self.dense_grp)
        expert_n = network.group_size(self.expert_grp)
        self.sync_grads = zero < 3 and (dense_n > 1 or expert_n > 1)
        self.gather_params = zero in (1, 2) and (dense_n > 1 or expert_n > 1)
        self.n_cls = len(cl.classes)
        self.bucket_order = self._bucket_order()

    def unit_flow(self, k: int, s: int, prof: CommProfile) -> Flow:
        """A collective's part on the ports of class ``k``'s cluster at stage ``s``."""
        usage = tuple((_resource(k, s, tier, d), u) for (tier, d), u in prof.usage)
        return Flow(prof.latency_s, prof.transfer_s, usage)

    def barrier_cost(self, s: int, kind: str, dense: float, expert: float,
                     nbytes: float) -> tuple[float, list[CommProfile]]:
        """Slowest instance of a dense (+ expert) collective over the stage's groups."""
        faults = self.faults
        total = 0.0
        profs: list[CommProfile] = []
        for i, (grp, n_params) in enumerate(((self.dense_grp, dense),
                                             (self.expert_grp, expert))):
            if i == 1 and not expert:
                continue
            size = n_params * nbytes
            ids = faults.barrier(s, grp, faults.dec(kind, grp, size))
            worst = max(ids, key=lambda pid: faults.cost(kind, grp, size, pid))
            total += faults.cost(kind, grp, size, worst)
            if self.contention:
                profs.append(faults.profile(kind, grp, size, worst))
        return total, profs

    def sym_total(self, kind: str, dense: float, expert: float, nbytes: float) -> float:
        # the symmetric engine's arithmetic, for bit-identical healthy durations
        t = self.network.collective(kind, self.dense_grp, dense * nbytes).time_s
        if expert:
            t += self.network.collective(kind, self.expert_grp, expert * nbytes).time_s
        return t

    def sync_task(self, key: Hashable, s: int, k: int, stream: str, dur: float,
                  prof: CommProfile | None, deps: tuple[Hashable, ...],
                  after: tuple[tuple[Hashable, float], ...], name: str) -> Hashable:
        """A DP collective of stage ``s``: one task for one class; otherwise every class
        arrives, the collective runs from the last arrival, and every class holds its stream
        until it ends. Under contention each class's part of it shares that class's ports
        and the collective ends with the slowest part."""
        bld, n_cls = self.bld, self.n_cls
        cat = comm_category("dp")
        if n_cls == 1:
            bld.add((k, key), stream, dur, deps, name=name, category=cat, start_after=after,
                    unit=(k, s))
            if prof is not None:
                bld.flows[(k, key)] = self.unit_flow(k, s, prof)
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
            bld.flows[("PART", k, key)] = self.unit_flow(k, s, prof)
            if k == n_cls - 1:
                bld.add(("SYNC", key), f"s{s}/sync", 0.0,
                        tuple(("PART", j, key) for j in range(n_cls)), name=f"{name}.join",
                        category=cat)
        return bld.add(("HOLD", k, key), stream, 0.0, (("SYNC", key),), name=f"{name}.hold",
                       category=cat, unit=(k, s))

    def sync_ref(self, k: int, key: Hashable) -> Hashable:
        """The key a class's stream waits on for DP collective ``key``."""
        return (k, key) if self.n_cls == 1 else ("HOLD", k, key)

    def _bucket_order(self) -> dict[int, list[tuple[int, int, float, float]]]:
        """Bucket order of the symmetric engine (from the healthy timings), per stage."""
        pp, vpp, orders = self.pp, self.vpp, self.orders
        by_v, healthy_pass = self.cl.by_v, self.cl.healthy_pass
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
        return bucket_order

    def _durations(self, stage: int
                   ) -> tuple[list[tuple[float, CommProfile | None]],
                              dict[tuple[int, int], tuple[float, CommProfile | None]]]:
        """Gradient buckets (numbered; the embedding and the LM head both have layer -1) and
        parameter gathers of ``stage``: seconds and, under contention, network profile."""
        contention = self.contention
        healthy_faults = not self.faults.active
        grad_kind = "all_reduce" if self.zero == 0 else "reduce_scatter"
        grad_dur: list[tuple[float, CommProfile | None]] = []
        for _c, _layer, dense, expert in self.bucket_order[stage]:
            if self.sync_grads:
                if healthy_faults:
                    d = self.sym_total(grad_kind, dense, expert, GRAD_REDUCE_BYTES)
                    profs = [] if not contention else self.barrier_cost(
                        stage, grad_kind, dense, expert, GRAD_REDUCE_BYTES)[1]
                else:
                    d, profs = self.barrier_cost(stage, grad_kind, dense, expert,
                                                 GRAD_REDUCE_BYTES)
                grad_dur.append((d, combine(profs) if contention else None))
        gather_dur: dict[tuple[int, int], tuple[float, CommProfile | None]] = {}
        if self.gather_params:
            for c in range(self.vpp):
                lp = self.cl.by_v[c * self.pp + stage].layer_params
                for i, (_, dense, expert) in enumerate(lp):
                    if healthy_faults:
                        d = self.sym_total("all_gather", dense, expert, PARAM_BYTES)
                        profs = [] if not contention else self.barrier_cost(
                            stage, "all_gather", dense, expert, PARAM_BYTES)[1]
                    else:
                        d, profs = self.barrier_cost(stage, "all_gather", dense, expert,
                                                     PARAM_BYTES)
                    gather_dur[(c, i)] = (d, combine(profs) if contention else None)
        return grad_dur, gather_dur

    def wire_stage(self, stage: int) -> None:
        """Every class's tasks at ``stage``."""
        grad_dur, gather_dur = self._durations(stage)
        for k in range(self.n_cls):
            self._wire_unit(k, stage, grad_dur, gather_dur)

    def received(self, ph: str, mb: int, v: int, k: int, cs: str, stage: int) -> Hashable:
        """The neighbour's send of pass (ph, mb, v), or the all-gather of its pieces on this
        stage's compute stream (scatter/gathered sends)."""
        send = (k, "PF" if ph == "F" else "PB", mb, v)
        if not self.cl.gather_s:
            return send
        return self.bld.add((k, "PG", *send[1:]), cs, self.cl.gather_s, (send,),
                            name=f"gather_{send[1]}{mb}", category=comm_category("pp"),
                            unit=(k, stage))

    def _wire_unit(self, k: int, stage: int,
                   grad_dur: Sequence[tuple[float, CommProfile | None]],
                   gather_dur: Mapping[tuple[int, int], tuple[float, CommProfile | None]]
                   ) -> None:
        """Class ``k``'s cluster at ``stage``: parameter gathers (overlapped), chunk passes
        and sends, gradient buckets, optimizer, parameter gathers (after it)."""
        bld, p, pp = self.bld, self.p, self.pp
        pre = f"k{k}/s{stage}"
        cs, dps = f"{pre}/compute", f"{pre}/dp"
        chunks = [self.cl.by_v[c * pp + stage] for c in range(self.vpp)]
        first_bucket: dict[int, Hashable] = {}
        if self.gather_params and p.overlap_param_gather:
            for c, ch in enumerate(chunks):
                for i, (layer, _, _) in enumerate(ch.layer_params):
                    d, fl = gather_dur[(c, i)]
                    self.sync_task(("AG", stage, c, i), stage, k, dps, d, fl, (), (),
                                   f"param_gather.l{layer}")
                first_bucket[c] = self.sync_ref(k, ("AG", stage, c, 0))
        tails, last_b = self._wire_passes(k, stage, first_bucket)
        u = self.cl.units[k][stage]
        orders = self.orders
        last_compute = orders[stage][-1]
        last_key = (k, last_compute[0], last_compute[1], last_compute[2] * pp + stage)
        grad_keys: list[Hashable] = []
        if self.sync_grads:
            for j, (c, layer, _, _) in enumerate(self.bucket_order[stage]):
                d, fl = grad_dur[j]
                ch = chunks[c]
                done_at = dict(u.passes[(ch.virtual_stage, "B")].layer_done)
                at = done_at.get(layer, u.passes[(ch.virtual_stage, "B")].compute_time)
                if p.overlap_grad_reduce:
                    self.sync_task(("GR", stage, j), stage, k, dps, d, fl, (),
                                   ((last_b[c], at),), f"grad_reduce.l{layer}")
                else:
                    self.sync_task(("GR", stage, j), stage, k, dps, d, fl, (last_key,), (),
                                   f"grad_reduce.l{layer}")
                grad_keys.append(self.sync_ref(k, ("GR", stage, j)))
        bld.add((k, "OPT", stage), cs, u.opt_time, (last_key, *grad_keys, *tails),
                name="optimizer", category="optimizer", unit=(k, stage))
        if self.gather_params and not p.overlap_param_gather:
            for c, ch in enumerate(chunks):
                for i, (layer, _, _) in enumerate(ch.layer_params):
                    d, fl = gather_dur[(c, i)]
                    self.sync_task(("AG", stage, c, i), stage, k, dps, d, fl,
                                   ((k, "OPT", stage),), (), f"param_gather.l{layer}")

    def _wire_passes(self, k: int, stage: int, first_bucket: Mapping[int, Hashable]
                     ) -> tuple[list[Hashable], dict[int, Hashable]]:
        """Class ``k``'s chunk passes at ``stage`` in schedule order, with their sends and
        the collectives still running after them; returns those tails and the last backward
        pass of each chunk."""
        bld, pp, n_v, cl = self.bld, self.pp, self.n_v, self.cl
        contention, faults, act_bytes = self.contention, self.faults, cl.act_bytes
        u = cl.units[k][stage]
        pre = f"k{k}/s{stage}"
        cs = f"{pre}/compute"
        send_f, send_b = (cs, cs) if cl.blocking else (f"{pre}/send_fwd", f"{pre}/send_bwd")
        first_f: set[int] = set()
        tails: list[Hashable] = []
        last_b: dict[int, Hashable] = {}
        for ph, mb, c in self.orders[stage]:
            v = c * pp + stage
            key = (k, ph, mb, v)
            pt = u.passes[(v, ph)]
            deps: list[Hashable] = []
            if ph == "F":
                if v > 0:
                    deps.append((k, "F", mb, v - 1) if (v - 1) % pp == stage
                                else self.received("F", mb, v - 1, k, cs, stage))
                if c not in first_f:
                    first_f.add(c)
                    if c in first_bucket:
                        deps.append(first_bucket[c])
            else:
                if v < n_v - 1:
                    deps.append((k, "B", mb, v + 1) if (v + 1) % pp == stage
                                else self.received("B", mb, v + 1, k, cs, stage))
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
                                               _resource, k, stage, stage + 1)
            if ph == "B" and v > 0 and (v - 1) % pp != stage:
                kk = bld.add((k, "PB", mb, v), send_b, u.send_bwd, (key,),
                             name=f"send_bwd{mb}", category=comm_category("pp"),
                             unit=(k, stage))
                if contention:
                    bld.flows[kk] = _send_flow(faults, act_bytes, u.send_bwd_pid,
                                               _resource, k, stage, stage - 1)
        return tails, last_b


def _rank_outputs(geo: RankGeometry, tl: Timeline, bld: _Builder, ids: Mapping[Hashable, int],
                  classes: Sequence[Sequence[int]], units: Sequence[Sequence[ClusterUnit]],
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



def _send_flow(faults: LinkFactors, size: float, pid: int,
               res: Callable[[int, int, str, str], Resource], k: int, src: int,
               dst: int) -> Flow:
    prof = faults.profile("p2p", "pp", size, pid)
    usage: list[tuple[Resource, float]] = []
    for (tier, _), u in prof.usage:
        usage += [(res(k, src, tier, "tx"), u), (res(k, dst, tier, "rx"), u)]
    return Flow(prof.latency_s, prof.transfer_s, tuple(usage))
