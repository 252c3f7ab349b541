"""Python API: build a run from catalog names and overrides, simulate it, get a report.

>>> from codesign.api import simulate
>>> r = simulate(model="gpt3-175b", gpu="h100", num_gpus=64, tp=8, pp=8, global_batch_size=64)
>>> r.feasible
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from codesign.engine.training import StepResult, simulate_step
from codesign.errors import InfeasiblePlan, SpecError
from codesign.hardware.compute import ComputeModel
from codesign.network.model import NetworkModel
from codesign.report.training import TrainingReport, breakdown_from_categories, gib
from codesign.specs.catalog import load_gpu, load_model, load_topology
from codesign.specs.gpu import GpuSpec
from codesign.specs.model import ModelSpec
from codesign.specs.parallel import ParallelismSpec
from codesign.specs.run import TrainingRun
from codesign.specs.topology import FullFlatTopology, TwoTierTopology
from codesign.units import TFLOPS
from codesign.workload.memory import memory_per_gpu
from codesign.workload.training import TrainingGraph, build_training_graph, state_groups

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


def _plan_summary(run: TrainingRun) -> dict[str, Any]:
    p = run.parallel
    d = p.model_dump()
    d.update(dp=run.dp, seq_len=run.seq_len, schedule=p.pipeline_schedule,
             zero_stage=p.sharding_stage, etp=p.expert_tp,
             placement_order=list(p.placement_order))
    return d


def build_models(run: TrainingRun) -> tuple[TrainingGraph, ComputeModel, NetworkModel]:
    """The bound training graph of ``run`` and the cost models it runs on.

    Raises :class:`InfeasiblePlan` (with every reason found) for a plan that cannot be built.
    """
    graph = build_training_graph(run)
    compute = ComputeModel.from_gpu(run.gpu)
    tables = compute.tables.collectives if compute.tables is not None else None
    try:
        network = NetworkModel.from_parallelism(run.topology, run.parallel, dp=run.dp,
                                                measured=tables)
    except ValueError as exc:
        raise InfeasiblePlan(str(exc)) from None
    return graph, compute, network


@dataclass(frozen=True)
class Simulation:
    """A report together with what produced it (graph, models and the engine's step result;
    ``None`` where the plan was infeasible before the engine ran)."""

    report: TrainingReport
    graph: TrainingGraph | None = None
    compute: ComputeModel | None = None
    network: NetworkModel | None = None
    step: StepResult | None = None


def simulate_run(run: TrainingRun) -> TrainingReport:
    """Simulate one training step of ``run``. An infeasible plan gives ``feasible=False``
    with the reason (never an exception)."""
    return simulate_detailed(run).report


def simulate_detailed(run: TrainingRun) -> Simulation:
    """:func:`simulate_run`, also returning the graph, the models and the engine's step (for
    timelines and traces)."""
    base: dict[str, Any] = {
            "model": run.model.name, "gpu": run.gpu.name, "topology": run.topology.name,
            "num_gpus": run.num_gpus, "plan": _plan_summary(run),
            "memory_capacity_gib": gib(run.gpu.memory_bytes)}
    try:
        graph, compute, network = build_models(run)
    except (InfeasiblePlan, ValueError) as exc:
        return Simulation(TrainingReport(feasible=False, reason=str(exc), **base))
    p = run.parallel
    dense_grp, expert_grp = state_groups(p)
    dense_n, expert_n = network.group_size(dense_grp), network.group_size(expert_grp)
    mem = memory_per_gpu(graph, dense_n, expert_n)
    mem_gib = {k: gib(v) for k, v in mem.by_category().items()}
    mem_gib["total"] = gib(mem.total)
    capacity = run.gpu.memory_bytes
    if mem.total > capacity:
        return Simulation(TrainingReport(
            feasible=False, memory_gib=mem_gib,
            reason=(f"out of memory: stage {mem.stage} needs {gib(mem.total):.1f} GiB per GPU "
                    f"> {gib(capacity):.1f} GiB HBM (weights {mem_gib['weights']:.1f}, "
                    f"gradients {mem_gib['gradients']:.1f}, optimizer "
                    f"{mem_gib['optimizer']:.1f}, activations {mem_gib['activations']:.1f})"),
            **base), graph, compute, network)
    step = simulate_step(graph, compute, network)
    t = step.step_time_s
    peak = run.gpu.peak_flops(p.dtype) * run.num_gpus
    report = TrainingReport(
        feasible=True, step_time_s=t,
        mfu=graph.model_flops_per_step / (t * peak),
        hfu=graph.hardware_flops_per_step / (t * peak),
        tokens_per_s=graph.tokens_per_step / t,
        tflops_per_gpu=graph.model_flops_per_step / t / run.num_gpus / TFLOPS,
        hardware_tflops_per_gpu=graph.hardware_flops_per_step / t / run.num_gpus / TFLOPS,
        tokens_per_step=graph.tokens_per_step, num_microbatches=graph.num_microbatches,
        model_flops_per_step=graph.model_flops_per_step,
        hardware_flops_per_step=graph.hardware_flops_per_step,
        critical_stage=step.critical_stage, memory_gib=mem_gib,
        measured_ops=measured_ops(graph, compute, network) if compute.tables else [],
        breakdown_s=breakdown_from_categories(step.breakdown_s), **base)
    return Simulation(report, graph, compute, network, step)


def measured_ops(graph: TrainingGraph, compute: ComputeModel,
                 network: NetworkModel) -> list[str]:
    """Names of the operators priced from measured tables rather than the models."""
    names = set()
    for chunk in graph.chunks:
        for op in (*chunk.forward, *chunk.backward):
            if op.kind == "comm":
                cost = network.collective(op.comm or "none", op.group or "dp", op.size)
                if cost.algorithm == "measured":
                    names.add(op.name)
            elif compute.source(op) == "measured":
                names.add(op.name)
    return sorted(names)


def simulate(run: TrainingRun | None = None, **kwargs: Any) -> TrainingReport:
    """Simulate ``run``, or a run built by :func:`build_run` from ``kwargs``.

    With no arguments at all, simulates :data:`DEFAULT_RUN`.
    """
    if run is None:
        run = build_run(**(kwargs or DEFAULT_RUN))
    elif kwargs:
        raise TypeError("pass either a TrainingRun or keyword settings, not both")
    return simulate_run(run)


__all__ = ["DEFAULT_RUN", "Simulation", "build_models", "build_run", "measured_ops", "simulate",
           "simulate_detailed", "simulate_run"]
