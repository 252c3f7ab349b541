"""Python API: build a run from catalog names and overrides, simulate it, get a report.

>>> from codesign.api import simulate
>>> r = simulate(model="gpt3-175b", gpu="h100", num_gpus=64, tp=8, pp=8, global_batch_size=64)
>>> r.feasible
True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

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
    import numpy as np

    from codesign.engine.expanded import Perturbations
    from codesign.engine.expanded import simulate_expanded as run_expanded
    from codesign.network.faults import parse_degraded, parse_failed
    from codesign.network.flows import LinkFault, LinkGraph

    n = run.num_gpus
    strag = _check_stragglers(stragglers, n)
    faults = tuple(f if isinstance(f, LinkFault) else parse_degraded(f) for f in degraded_links)
    faults += tuple(f if isinstance(f, LinkFault) else parse_failed(f) for f in failed_links)
    LinkGraph(run.topology, n, faults)  # validates every link (SpecError)
    gpu2, mix_ranks = _mix(run, mix) if mix is not None else (None, None)
    sim = simulate_detailed(run)
    rep = sim.report
    if not rep.feasible or sim.graph is None or sim.compute is None or sim.network is None \
            or sim.step is None:
        return ExpandedSimulation(rep, {})
    computes = [sim.compute]
    if gpu2 is not None and mix_ranks is not None:
        need = rep.memory_gib.get("total", 0.0)
        if need > gib(gpu2.memory_bytes):
            reason = (f"out of memory on the mixed-in {gpu2.name}: the plan needs {need:.1f} "
                      f"GiB per GPU > {gib(gpu2.memory_bytes):.1f} GiB HBM")
            return ExpandedSimulation(replace(rep, feasible=False, reason=reason,
                                              step_time_s=None, mfu=None, hfu=None,
                                              tokens_per_s=None, tflops_per_gpu=None,
                                              hardware_tflops_per_gpu=None, breakdown_s={}),
                                      {})
        computes.append(ComputeModel.from_gpu(gpu2))
    graph, network = sim.graph, sim.network
    symmetric = sim.step.step_time_s
    compute_part = Perturbations(stragglers=strag, mix_ranks=mix_ranks)
    full = Perturbations(stragglers=strag, link_faults=faults, mix_ranks=mix_ranks)
    res_compute = run_expanded(graph, computes, network, compute_part)
    res_full = run_expanded(graph, computes, network, full) if faults else res_compute
    res = run_expanded(graph, computes, network, full, contention=True) if contention \
        else res_full
    t = res.step_time_s
    p = run.parallel
    n2 = (mix_ranks[1] - mix_ranks[0]) if mix_ranks is not None else 0
    peak = run.gpu.peak_flops(p.dtype) * (n - n2)
    if gpu2 is not None:
        peak += gpu2.peak_flops(p.dtype) * n2
    report = replace(
        rep, step_time_s=t, mfu=graph.model_flops_per_step / (t * peak),
        hfu=graph.hardware_flops_per_step / (t * peak), tokens_per_s=graph.tokens_per_step / t,
        tflops_per_gpu=graph.model_flops_per_step / t / n / TFLOPS,
        hardware_tflops_per_gpu=graph.hardware_flops_per_step / t / n / TFLOPS,
        critical_stage=res.critical_stage, breakdown_s=breakdown_from_categories(res.breakdown_s))
    slow = res.slowest_rank
    layout = network.layout
    summary: dict[str, Any] = {
        "ranks": n,
        "step_time_s": t,
        "symmetric_step_time_s": symmetric,
        "perturbed_step_time_s": res_full.step_time_s,
        "slowest_rank": slow,
        "slowest_rank_stage": (slow // layout.stride("pp")) % p.pp,
        "slowest_rank_finish_s": float(res.rank_finish_s[slow]),
        "slowest_rank_busy_s": float(res.rank_busy_s[slow]),
        "median_rank_busy_s": float(np.median(res.rank_busy_s)),
        "straggler_cost_s": _cost(res_compute.step_time_s, symmetric),
        "link_fault_cost_s": _cost(res_full.step_time_s, res_compute.step_time_s),
        "contention_cost_s": _cost(t, res_full.step_time_s),
        "contention": contention,
        "stragglers": [{"rank": r, "fraction": f} for r, f in strag],
        "degraded_links": [{"link": f.label(), "factor": f.factor} for f in faults
                           if not f.failed],
        "failed_links": [f.label() for f in faults if f.failed],
        "mix": ({"gpu": gpu2.name, "ranks": list(mix_ranks)} if gpu2 is not None
                and mix_ranks is not None else None),
        "slowed_collectives": [{"group": g, "stage": s, "tier": tier, "bandwidth_factor": f}
                               for g, s, tier, f in res.slowed],
        "replica_classes": res.replica_classes,
        "perturbed_clusters": res.perturbed_clusters,
        "clusters": res.clusters,
    }
    return ExpandedSimulation(report, summary, res)


def _cost(t: float, base: float) -> float:
    """``t - base``, 0 where the difference is float rounding (1e-12 relative)."""
    d = t - base
    return 0.0 if abs(d) <= 1e-12 * max(abs(t), abs(base)) else d


def _check_stragglers(stragglers: Sequence[tuple[int, float]],
                      n: int) -> tuple[tuple[int, float], ...]:
    out: dict[int, float] = {}
    for rank, frac in stragglers:
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < n:
            raise SpecError(f"straggler rank must be a whole number in 0..{n - 1}, got {rank!r}")
        f = float(frac)
        if not 0.0 < f <= 1.0:
            raise SpecError(f"straggler {rank}: speed fraction must be in (0, 1], got {frac!r}")
        out[rank] = f
    return tuple(sorted(out.items()))


def _mix(run: TrainingRun, mix: tuple[str | GpuSpec, float | tuple[int, int]]
         ) -> tuple[GpuSpec, tuple[int, int]]:
    """The second GPU type and the ranks ``[start, end)`` it holds."""
    gpu, ranks = mix
    g = load_gpu(gpu) if isinstance(gpu, str) else gpu
    try:
        g.peak_flops(run.parallel.dtype)
    except KeyError as exc:
        raise SpecError(f"mix: {exc.args[0]}") from None
    n = run.num_gpus
    if isinstance(ranks, tuple):
        start, end = ranks
        if not 0 <= start < end <= n:
            raise SpecError(f"mix: rank range must satisfy 0 <= START < END <= {n}, got "
                            f"{start}-{end}")
        return g, (start, end)
    frac = float(ranks)
    if not 0.0 < frac <= 1.0:
        raise SpecError(f"mix: fraction of ranks must be in (0, 1], got {ranks!r}")
    topo = run.topology
    unit = topo.scale_up.domain_size if isinstance(topo, TwoTierTopology) else 1
    unit = unit if n % unit == 0 else 1
    count = max(1, round(frac * n / unit)) * unit
    return g, (n - min(count, n), n)


__all__ = ["DEFAULT_RUN", "ExpandedSimulation", "Simulation", "build_models", "build_run",
           "measured_ops", "simulate", "simulate_detailed", "simulate_expanded", "simulate_run"]
