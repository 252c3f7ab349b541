"""Python API: build a run from catalog names and overrides, simulate it, get a report.

>>> from codesign.api import simulate
>>> r = simulate(model="gpt3-175b", gpu="h100", num_gpus=64, tp=8, pp=8, global_batch_size=64)
>>> r.feasible
True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from codesign.engine.training import StepResult, simulate_step
from codesign.errors import InfeasiblePlan, SpecError
from codesign.hardware.compute import ComputeModel
from codesign.network.model import NetworkModel
from codesign.report.metrics import (
    infeasible_report,
    measured_ops,
    memory_gib,
    out_of_memory_report,
    training_report,
)
from codesign.report.training import TrainingReport
from codesign.specs.catalog import load_gpu, load_model, load_topology
from codesign.specs.gpu import GpuSpec
from codesign.specs.model import ModelSpec
from codesign.specs.parallel import ParallelismSpec
from codesign.specs.run import TrainingRun
from codesign.specs.topology import FullFlatTopology, TwoTierTopology
from codesign.units import GB
from codesign.workload.memory import MemoryEstimate, memory_per_gpu
from codesign.workload.training import TrainingGraph, build_training_graph, state_groups

if TYPE_CHECKING:
    from codesign.network.flows import LinkFault

#: the built-in default run: GPT-3 175B on 1,024 H100s in DGX-H100 nodes on a fat-tree
DEFAULT_RUN: dict[str, Any] = {
    "model": "gpt3-175b", "gpu": "h100", "num_gpus": 1024, "tp": 8, "pp": 8, "vpp": 3,
    "micro_batch_size": 1, "global_batch_size": 1024, "sequence_parallel": True,
}


def build_run(model: str | ModelSpec = "gpt3-175b", gpu: str | GpuSpec = "h100",
              topology: str | TwoTierTopology | FullFlatTopology | None = None,
              num_gpus: int | None = None, **plan: Any) -> TrainingRun:
    """A :class:`TrainingRun` from catalog names (or specs) and plan settings.

    ``topology`` defaults to the GPU's usual system; ``num_gpus`` defaults to
    ``tp × pp × cp × dp`` when ``dp`` is given, else to one pipeline replica.
    """
    for name, value, kinds, what in (
            ("model", model, (str, ModelSpec), "a catalog name, a file path or a ModelSpec"),
            ("gpu", gpu, (str, GpuSpec), "a catalog name, a file path or a GpuSpec"),
            ("topology", topology, (str, TwoTierTopology, FullFlatTopology, type(None)),
             "a catalog name, a file path, a topology spec or None (the GPU's system)")):
        if not isinstance(value, kinds):
            raise SpecError(f"{name} must be {what}, got {type(value).__name__} {value!r}")
    m = load_model(model) if isinstance(model, str) else model
    g = load_gpu(gpu) if isinstance(gpu, str) else gpu
    if isinstance(topology, (TwoTierTopology, FullFlatTopology)):
        t = topology
    else:
        t = load_topology(topology or g.default_topology)
    settings = {k: v for k, v in plan.items() if v is not None}
    par = ParallelismSpec.parse(settings, "plan")
    if num_gpus is None:
        num_gpus = par.tp * par.pp * par.cp * (par.dp or 1)
    if isinstance(num_gpus, bool) or not isinstance(num_gpus, int) or num_gpus < 1:
        raise SpecError(f"num_gpus must be a whole number >= 1, got {num_gpus!r}")
    return TrainingRun.parse({"model": m, "gpu": g, "topology": t, "parallel": par,
                              "num_gpus": num_gpus}, "run")




def build_models(run: TrainingRun) -> tuple[TrainingGraph, ComputeModel, NetworkModel]:
    """The bound training graph of ``run`` and the cost models it runs on.

    Raises :class:`InfeasiblePlan` (with every reason found) for a plan that cannot be built.
    """
    graph = build_training_graph(run)
    compute = ComputeModel.from_gpu(run.gpu, attention_kernel=run.parallel.attention_kernel)
    tables = compute.tables.collectives if compute.tables is not None else None
    try:
        network = NetworkModel.from_parallelism(run.topology, run.parallel, dp=run.dp,
                                                measured=tables, moe=run.model.moe)
    except ValueError as exc:
        raise InfeasiblePlan(str(exc)) from None
    return graph, compute, network


def check_memory(run: TrainingRun, graph: TrainingGraph,
                 network: NetworkModel) -> tuple[MemoryEstimate, TrainingReport | None]:
    """Memory per GPU of ``run``'s most loaded stage, and the out-of-memory report when it does
    not fit in HBM (else ``None``): the check :func:`simulate_detailed` and the trace
    exporter share."""
    dense_grp, expert_grp = state_groups(run.parallel)
    mem = memory_per_gpu(graph, network.group_size(dense_grp), network.group_size(expert_grp))
    tier = run.gpu.host_tier
    too_big = mem.total > run.gpu.memory_bytes or (
        tier is not None and mem.offloaded > tier.capacity_GB * GB)
    return mem, out_of_memory_report(run, mem) if too_big else None


@dataclass(frozen=True)
class Simulation:
    """A report together with what produced it (graph, models and the engine's step result;
    ``None`` where the plan was infeasible before the engine ran)."""

    report: TrainingReport
    graph: TrainingGraph | None = None
    compute: ComputeModel | None = None
    network: NetworkModel | None = None
    step: StepResult | None = None


def simulate_run(run: TrainingRun, *, memory_check: bool = True) -> TrainingReport:
    """Simulate one training step of ``run``. An infeasible plan gives ``feasible=False``
    with the reason (never an exception). ``memory_check=False`` times a plan whose
    estimated memory exceeds HBM (a run that was measured, so did fit; the report still
    carries the estimate)."""
    return simulate_detailed(run, memory_check=memory_check).report


def simulate_detailed(run: TrainingRun, *, exact: bool = False,
                      memory_check: bool = True) -> Simulation:
    """:func:`simulate_run`, also returning the graph, the models and the engine's step (for
    timelines and traces). ``exact``: run every micro-batch, so the step's timeline holds
    them all (same step time; see :func:`codesign.engine.training.simulate_step`)."""
    try:
        graph, compute, network = build_models(run)
    except (InfeasiblePlan, ValueError) as exc:
        return Simulation(infeasible_report(run, str(exc)))
    mem, oom = check_memory(run, graph, network)
    if oom is not None and memory_check:
        return Simulation(oom, graph, compute, network)
    step = simulate_step(graph, compute, network, exact=exact)
    report = training_report(
        run, graph, step_time_s=step.step_time_s, breakdown_s=step.breakdown_s,
        critical_stage=step.critical_stage, memory_gib=memory_gib(mem),
        measured_ops=measured_ops(graph, compute, network) if compute.tables else [])
    return Simulation(report, graph, compute, network, step)


def simulate(run: TrainingRun | None = None, **kwargs: Any) -> TrainingReport:
    """Simulate ``run``, or a run built by :func:`build_run` from ``kwargs``.

    With no arguments at all, simulates :data:`DEFAULT_RUN`.
    """
    if run is None:
        run = build_run(**(kwargs or DEFAULT_RUN))
    elif kwargs:
        raise TypeError("pass either a TrainingRun or keyword settings, not both")
    return simulate_run(run)


@dataclass(frozen=True)
class ExpandedSimulation:
    """An expanded (per-rank) simulation: the report (step time, MFU, breakdown of the
    perturbed step), the ``expanded`` section (symmetric vs perturbed step, slowest rank,
    what stragglers, link faults and contention cost; ``{}`` when the plan is infeasible) and
    the engine's result."""

    report: TrainingReport
    expanded: dict[str, Any]
    result: Any = None  # codesign.engine.expanded.ExpandedResult


def simulate_expanded(run: TrainingRun, *, stragglers: Sequence[tuple[int, float]] = (),
                      degraded_links: Sequence[str | LinkFault] = (),
                      failed_links: Sequence[str | LinkFault] = (),
                      mix: tuple[str | GpuSpec, float | tuple[int, int]] | None = None,
                      contention: bool = False) -> ExpandedSimulation:
    """Simulate ``run`` rank by rank (:mod:`codesign.engine.expanded`).

    ``stragglers``: ``(rank, fraction)``, the rank runs at ``fraction`` (0 < f <= 1) of its
    speed. ``degraded_links``: ``"kind:index:factor"`` (or :class:`LinkFault`), the link keeps
    ``factor`` of its bandwidth; ``failed_links``: ``"kind:index"``, traffic is routed around
    it (kinds: nic, scaleup, leaf, pod, port). ``mix``: ``(gpu, fraction)`` puts the last
    ``fraction`` of the ranks (whole scale-up domains) on a second GPU type, or ``(gpu,
    (start, end))`` ranks ``start <= r < end``. ``contention``: overlapping collectives share
    links max-min fairly. Raises :class:`SpecError` for bad input; an infeasible plan gives
    ``feasible=False`` as :func:`simulate_run` does.
    """
    # imported on first use: the per-rank engine brings numpy and the flow model
    from codesign.engine.per_rank import per_rank_inputs, simulate_per_rank
    from codesign.report.expanded import (
        expanded_report,
        expanded_summary,
        mixed_gpu_out_of_memory,
    )

    inputs = per_rank_inputs(run, stragglers=stragglers, degraded_links=degraded_links,
                             failed_links=failed_links, mix=mix)
    sim = simulate_detailed(run)
    rep = sim.report
    if not rep.feasible or sim.graph is None or sim.compute is None or sim.network is None \
            or sim.step is None:
        return ExpandedSimulation(rep, {})
    if run.parallel.offloads:
        raise SpecError("the per-rank engine (--expand) does not model offload to the host "
                        "tier yet; simulate without --expand, or without the offload_* fields")
    if sim.network.folded:
        raise SpecError("the per-rank engine (--expand) does not run MoE parallel folding yet "
                        f"(ep {run.parallel.ep} does not divide dp {run.dp}); simulate without "
                        "--expand, or choose an ep that divides dp")
    computes = [sim.compute]
    gpu2, pert = inputs.mix_gpu, inputs.perturbations
    if gpu2 is not None:
        too_small = mixed_gpu_out_of_memory(rep, gpu2)
        if too_small is not None:
            return ExpandedSimulation(too_small, {})
        computes.append(ComputeModel.from_gpu(
            gpu2, attention_kernel=run.parallel.attention_kernel))
    steps = simulate_per_rank(sim.graph, computes, sim.network, pert,
                              symmetric_step_time_s=sim.step.step_time_s, contention=contention)
    report = expanded_report(run, sim.graph, rep, steps, gpu2, pert.mix_ranks)
    summary = expanded_summary(run, sim.network, steps, pert, gpu2)
    return ExpandedSimulation(report, summary.to_dict(), steps.final)


__all__ = ["DEFAULT_RUN", "ExpandedSimulation", "Simulation", "build_models", "build_run",
           "measured_ops", "simulate", "simulate_detailed", "simulate_expanded", "simulate_run"]
