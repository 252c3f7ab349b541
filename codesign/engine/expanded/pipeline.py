"""The pipeline level of the per-rank engine: the step program's tasks over replica classes
(:mod:`~.wiring`: chunk passes of each class's cluster at each stage, pipeline sends,
data-parallel gradient buckets and parameter gathers as barriers across classes, the
optimizer), executed exactly or, under contention, by the fluid executor; then the step time,
the critical cluster's breakdown and per-rank outputs. Steps of many micro-batches are run at
two shorter counts and extended (:mod:`~.extend`), so the cost does not grow with the
micro-batch count."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from codesign.engine.executor import Timeline, attribute, execute_exact
from codesign.engine.expanded.clusters import Clusters, ClusterUnit, price_clusters
from codesign.engine.expanded.extend import PipelineRun, drift, extend
from codesign.engine.expanded.fluid import execute_fluid
from codesign.engine.expanded.geometry import RankGeometry
from codesign.engine.expanded.values import ExpandedResult, Perturbations
from codesign.engine.expanded.wiring import Builder, ProgramWiring
from codesign.engine.steady import extend_steady_state
from codesign.engine.training import step_shape
from codesign.hardware.compute import ComputeModel
from codesign.network.model import NetworkModel
from codesign.runtime import no_cyclic_gc
from codesign.workload.schedules import period
from codesign.workload.step_program import Node, StepProgram, build_step_program
from codesign.workload.training import TrainingGraph

_HEALTHY = Perturbations()


def simulate_expanded(graph: TrainingGraph, computes: Sequence[ComputeModel],
                      network: NetworkModel, perturbations: Perturbations = _HEALTHY,
                      *, contention: bool = False, exact: bool = False) -> ExpandedResult:
    """Simulate one training step rank by rank (see :mod:`codesign.engine.expanded`).

    ``computes[0]`` prices the run's GPU, ``computes[1]`` the second GPU type of
    ``perturbations.mix_ranks``. ``exact``: run every micro-batch instead of extending a
    periodic steady state (:mod:`~.extend`; same step time to rounding), as
    :func:`~codesign.engine.training.simulate_step` does.
    """
    with no_cyclic_gc():
        return _simulate(graph, computes, network, perturbations, contention, exact)


def _simulate(graph: TrainingGraph, computes: Sequence[ComputeModel], network: NetworkModel,
              perturbations: Perturbations, contention: bool, exact: bool) -> ExpandedResult:
    cl = price_clusters(graph, computes, network, perturbations, contention)
    shape = step_shape(graph, network)
    per = period(shape.schedule, shape.pp)

    def run(count: int) -> PipelineRun:
        return _run(build_step_program(shape.with_microbatches(count)), cl, network,
                    contention)

    if not exact:
        extended = extend_steady_state(
            shape, run, lambda a, b: drift(a, b, per), lambda a, b, count: extend(
                a, b, count, per), lambda r, how: replace(r, extension=how))
        if extended is not None:
            return extended
    return run(shape.num_microbatches).result


def _run(program: StepProgram, cl: Clusters, network: NetworkModel,
         contention: bool) -> PipelineRun:
    """The step of ``program`` over the priced clusters ``cl``."""
    wiring = ProgramWiring(program, network, cl, contention)
    bld = wiring.wire()
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
    passes = [[n for n in wiring.by_stage[s] if n.kind == "pass"] for s in range(geo.pp)]
    opt_start = {un: tl.start[ids[key]] for un, key in wiring.optimizer.items()}
    finish, busy = _rank_outputs(geo, tl, bld, opt_start, cl.classes, cl.units, passes)
    slowed = tuple(sorted((g, s, tier, f) for (g, s, tier), f in faults.slowed.items()))
    n = program.shape.num_microbatches
    res = ExpandedResult(
        step_time_s=step, breakdown_s=parts, critical_stage=crit[1], rank_finish_s=finish,
        rank_busy_s=busy, replica_classes=wiring.n_cls,
        perturbed_clusters=sum(len(r) for r in cl.batches.values()),
        clusters=wiring.pp * geo.n_rep, tasks=len(tasks), slowed=slowed, timeline=tl,
        num_microbatches=n, simulated_microbatches=n)
    class_ranks = [geo.table[:, np.asarray(reps)].reshape(-1) for reps in cl.classes]
    return PipelineRun(res, program, [row[0] for row in bld.rows], class_ranks, contention)


def _rank_outputs(geo: RankGeometry, tl: Timeline, bld: Builder,
                  opt_start: Mapping[tuple[int, int], float],
                  classes: Sequence[Sequence[int]], units: Sequence[Sequence[ClusterUnit]],
                  passes: Sequence[Sequence[Node]]) -> tuple[np.ndarray, np.ndarray]:
    """When each rank's last work ends and its kernel seconds (optimizer included);
    ``passes[s]``: the chunk-pass nodes of stage ``s``."""
    finish = np.zeros(geo.world)
    busy = np.zeros(geo.world)
    rest_end: dict[tuple[int, int], float] = defaultdict(float)
    for task, un in zip(tl.tasks, bld.unit, strict=True):
        if un is not None and task.name != "optimizer":
            rest_end[un] = max(rest_end[un], tl.end[task.id])
    for k, reps in enumerate(classes):
        for s in range(geo.pp):
            u = units[k][s]
            mem_finish = np.maximum(rest_end[(k, s)], opt_start[(k, s)]
                                    + np.asarray(u.member_opt))
            mem_busy = np.asarray(u.member_opt, dtype=float).copy()
            for node in passes[s]:
                mem_busy = mem_busy + np.asarray(u.passes[(node.v, node.phase)].busy)
            ranks = geo.table[s][np.asarray(reps)].reshape(len(reps), -1)
            finish[ranks] = np.broadcast_to(mem_finish.reshape(-1), (len(reps), geo.members))
            busy[ranks] = np.broadcast_to(mem_busy.reshape(-1), (len(reps), geo.members))
    return finish, busy


__all__ = ["simulate_expanded"]
