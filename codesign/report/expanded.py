"""The report of a per-rank (expanded) step: the training report of the perturbed step
(:func:`expanded_report`) and the ``expanded`` section (:class:`ExpandedSummary`): symmetric vs
perturbed step, the slowest rank, and what stragglers, link faults and contention cost."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from codesign.engine.expanded import Perturbations
from codesign.engine.per_rank import PerRankSteps
from codesign.network.model import NetworkModel
from codesign.report.metrics import job_peak_flops, training_report
from codesign.report.training import TrainingReport, gib
from codesign.specs.gpu import GpuSpec
from codesign.specs.run import TrainingRun
from codesign.workload.training import TrainingGraph


@dataclass(frozen=True)
class ExpandedSummary:
    """The ``expanded`` section of a per-rank report (times in seconds; ``to_dict`` gives the
    JSON shape, keys in field order)."""

    ranks: int
    step_time_s: float
    symmetric_step_time_s: float
    perturbed_step_time_s: float  # stragglers, mix and link faults, without contention
    slowest_rank: int  # most kernel time (the one its groups wait for)
    slowest_rank_stage: int
    slowest_rank_finish_s: float
    slowest_rank_busy_s: float
    median_rank_busy_s: float
    straggler_cost_s: float  # stragglers and mixed-in GPUs, over the symmetric step
    link_fault_cost_s: float  # over the step with stragglers and mix only
    contention_cost_s: float  # over the perturbed step
    contention: bool
    stragglers: list[dict[str, Any]]  # {"rank", "fraction"}
    degraded_links: list[dict[str, Any]]  # {"link", "factor"}
    failed_links: list[str]
    mix: dict[str, Any] | None  # {"gpu", "ranks": [start, end]}
    slowed_collectives: list[dict[str, Any]]  # {"group", "stage", "tier", "bandwidth_factor"}
    replica_classes: int
    perturbed_clusters: int
    clusters: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def expanded_summary(run: TrainingRun, network: NetworkModel, steps: PerRankSteps,
                     perturbations: Perturbations, mix_gpu: GpuSpec | None = None
                     ) -> ExpandedSummary:
    """The ``expanded`` section of ``steps`` (``perturbations``: what was simulated;
    ``mix_gpu``: the GPU type of ``perturbations.mix_ranks``)."""
    res = steps.final
    slow = res.slowest_rank
    faults = perturbations.link_faults
    mix_ranks = perturbations.mix_ranks
    return ExpandedSummary(
        ranks=run.num_gpus,
        step_time_s=steps.step_time_s,
        symmetric_step_time_s=steps.symmetric_step_time_s,
        perturbed_step_time_s=steps.perturbed_step_time_s,
        slowest_rank=slow,
        slowest_rank_stage=(slow // network.layout.stride("pp")) % run.parallel.pp,
        slowest_rank_finish_s=float(res.rank_finish_s[slow]),
        slowest_rank_busy_s=float(res.rank_busy_s[slow]),
        median_rank_busy_s=float(np.median(res.rank_busy_s)),
        straggler_cost_s=steps.straggler_cost_s,
        link_fault_cost_s=steps.link_fault_cost_s,
        contention_cost_s=steps.contention_cost_s,
        contention=steps.contention,
        stragglers=[{"rank": r, "fraction": f} for r, f in perturbations.stragglers],
        degraded_links=[{"link": f.label(), "factor": f.factor} for f in faults
                        if not f.failed],
        failed_links=[f.label() for f in faults if f.failed],
        mix=({"gpu": mix_gpu.name, "ranks": list(mix_ranks)} if mix_gpu is not None
             and mix_ranks is not None else None),
        slowed_collectives=[{"group": g, "stage": s, "tier": tier, "bandwidth_factor": f}
                            for g, s, tier, f in res.slowed],
        replica_classes=res.replica_classes,
        perturbed_clusters=res.perturbed_clusters,
        clusters=res.clusters)


def expanded_report(run: TrainingRun, graph: TrainingGraph, symmetric: TrainingReport,
                    steps: PerRankSteps, mix_gpu: GpuSpec | None = None,
                    mix_ranks: tuple[int, int] | None = None) -> TrainingReport:
    """The training report of the per-rank step: its step time, MFU (over the peak of every
    GPU, mixed-in ones at theirs), critical stage and breakdown; memory and measured operators
    as in the ``symmetric`` report."""
    res = steps.final
    return training_report(run, graph, step_time_s=res.step_time_s, breakdown_s=res.breakdown_s,
                           critical_stage=res.critical_stage, memory_gib=symmetric.memory_gib,
                           measured_ops=symmetric.measured_ops,
                           peak_flops=job_peak_flops(run, mix_gpu, mix_ranks))


def mixed_gpu_out_of_memory(symmetric: TrainingReport, mix_gpu: GpuSpec
                            ) -> TrainingReport | None:
    """The infeasible report when the plan does not fit in the mixed-in GPU's HBM (``None``
    when it fits)."""
    need = symmetric.memory_gib.get("total", 0.0)
    if need <= gib(mix_gpu.memory_bytes):
        return None
    reason = (f"out of memory on the mixed-in {mix_gpu.name}: the plan needs {need:.1f} "
              f"GiB per GPU > {gib(mix_gpu.memory_bytes):.1f} GiB HBM")
    return replace(symmetric, feasible=False, reason=reason, step_time_s=None, mfu=None,
                   hfu=None, tokens_per_s=None, tflops_per_gpu=None,
                   hardware_tflops_per_gpu=None, breakdown_s={})
