"""Per-rank runs of one training step: the perturbations a user asks for (stragglers, degraded or
failed links, a second GPU type, contention), checked and turned into engine input, and the
per-rank engine (:mod:`codesign.engine.expanded`) run once per kind of perturbation so that what
each kind costs on top of the previous ones is known.

>>> from codesign.api import build_models, build_run
>>> from codesign.engine.training import simulate_step
>>> run = build_run(model="llama3-8b", gpu="h100", num_gpus=16, tp=2, pp=2,
...                 global_batch_size=16)
>>> graph, compute, network = build_models(run)
>>> sym = simulate_step(graph, compute, network).step_time_s
>>> inputs = per_rank_inputs(run, stragglers=[(3, 0.5)])
>>> steps = simulate_per_rank(graph, [compute], network, inputs.perturbations,
...                           symmetric_step_time_s=sym)
>>> steps.straggler_cost_s > 0 and steps.link_fault_cost_s == 0.0
True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from codesign.engine.expanded import ExpandedResult, Perturbations, simulate_expanded
from codesign.errors import SpecError
from codesign.hardware.compute import ComputeModel
from codesign.network.faults import parse_degraded, parse_failed
from codesign.network.flows import LinkFault, LinkGraph
from codesign.network.model import NetworkModel
from codesign.specs.catalog import load_gpu
from codesign.specs.gpu import GpuSpec
from codesign.specs.run import TrainingRun
from codesign.specs.topology import TwoTierTopology
from codesign.workload.training import TrainingGraph


@dataclass(frozen=True)
class PerRankInputs:
    """Checked perturbations of a run: the engine's :class:`Perturbations` and the second GPU
    type that ``perturbations.mix_ranks`` run on (``None`` without a mix)."""

    perturbations: Perturbations
    mix_gpu: GpuSpec | None = None


def per_rank_inputs(run: TrainingRun, *, stragglers: Sequence[tuple[int, float]] = (),
                    degraded_links: Sequence[str | LinkFault] = (),
                    failed_links: Sequence[str | LinkFault] = (),
                    mix: tuple[str | GpuSpec, float | tuple[int, int]] | None = None
                    ) -> PerRankInputs:
    """Check and resolve per-rank perturbations of ``run`` (arguments as in
    :func:`codesign.api.simulate_expanded`). Raises :class:`SpecError` for bad input."""
    n = run.num_gpus
    strag = check_stragglers(stragglers, n)
    faults = tuple(f if isinstance(f, LinkFault) else parse_degraded(f) for f in degraded_links)
    faults += tuple(f if isinstance(f, LinkFault) else parse_failed(f) for f in failed_links)
    LinkGraph(run.topology, n, faults)  # validates every link (SpecError)
    gpu2, mix_ranks = resolve_mix(run, mix) if mix is not None else (None, None)
    return PerRankInputs(Perturbations(stragglers=strag, link_faults=faults,
                                       mix_ranks=mix_ranks), gpu2)


#: slowest straggler speed accepted: a rank at under 1/1000 of its speed has failed
MIN_SPEED = 1e-3


def check_stragglers(stragglers: Sequence[tuple[int, float]],
                     n: int) -> tuple[tuple[int, float], ...]:
    """``(rank, speed fraction)`` pairs checked against ``n`` ranks, sorted by rank (a rank
    given twice keeps its last fraction)."""
    out: dict[int, float] = {}
    for rank, frac in stragglers:
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < n:
            raise SpecError(f"straggler rank must be a whole number in 0..{n - 1}, got {rank!r}")
        f = float(frac)
        if not MIN_SPEED <= f <= 1.0:
            raise SpecError(f"straggler {rank}: speed fraction must be in [{MIN_SPEED:g}, 1] "
                            f"(a rank slower than that has failed, not straggled), got {frac!r}")
        out[rank] = f
    return tuple(sorted(out.items()))


def resolve_mix(run: TrainingRun, mix: tuple[str | GpuSpec, float | tuple[int, int]]
                ) -> tuple[GpuSpec, tuple[int, int]]:
    """The second GPU type and the ranks ``[start, end)`` it holds: a fraction of the ranks
    is the last whole scale-up domains, a ``(start, end)`` pair is taken as given."""
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


@dataclass(frozen=True)
class PerRankSteps:
    """One step simulated rank by rank, with what each kind of perturbation costs.

    ``compute``: stragglers and the mixed-in GPUs only; ``perturbed``: plus link faults (the
    same result when there are none); ``final``: plus contention (``perturbed`` without it).
    Each cost is the step time over the previous run's, 0 where the difference is float
    rounding, so ``symmetric + straggler + link fault + contention = final`` step time."""

    symmetric_step_time_s: float
    compute: ExpandedResult
    perturbed: ExpandedResult
    final: ExpandedResult
    contention: bool

    @property
    def step_time_s(self) -> float:
        return self.final.step_time_s

    @property
    def perturbed_step_time_s(self) -> float:
        return self.perturbed.step_time_s

    @property
    def straggler_cost_s(self) -> float:
        return step_cost(self.compute.step_time_s, self.symmetric_step_time_s)

    @property
    def link_fault_cost_s(self) -> float:
        return step_cost(self.perturbed.step_time_s, self.compute.step_time_s)

    @property
    def contention_cost_s(self) -> float:
        return step_cost(self.final.step_time_s, self.perturbed.step_time_s)


def step_cost(t: float, base: float) -> float:
    """``t - base``, 0 where the difference is float rounding (1e-12 relative)."""
    d = t - base
    return 0.0 if abs(d) <= 1e-12 * max(abs(t), abs(base)) else d


def simulate_per_rank(graph: TrainingGraph, computes: Sequence[ComputeModel],
                      network: NetworkModel, perturbations: Perturbations, *,
                      symmetric_step_time_s: float, contention: bool = False) -> PerRankSteps:
    """Run the per-rank engine with the compute perturbations (stragglers, mix), then with the
    link faults added (only when there are any), then with contention (only when asked);
    ``computes`` as in :func:`~codesign.engine.expanded.simulate_expanded`."""
    compute_part = Perturbations(stragglers=perturbations.stragglers,
                                 mix_ranks=perturbations.mix_ranks)
    res_compute = simulate_expanded(graph, computes, network, compute_part)
    res_full = simulate_expanded(graph, computes, network, perturbations) \
        if perturbations.link_faults else res_compute
    res = simulate_expanded(graph, computes, network, perturbations, contention=True) \
        if contention else res_full
    return PerRankSteps(symmetric_step_time_s, res_compute, res_full, res, contention)
