"""Value types of the per-rank engine: what makes ranks differ (:class:`Perturbations`), the
timing of one chunk pass of a cluster (:class:`PassTiming`) and one expanded step
(:class:`ExpandedResult`)."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

import numpy as np

from codesign.engine.chunk import ChunkTiming
from codesign.engine.executor import Timeline
from codesign.network.flows import LinkFault

#: a port (or other shared capacity) that contended transfers share
Resource = Hashable


@dataclass(frozen=True)
class Perturbations:
    """What makes ranks differ.

    Attributes:
        stragglers: ``(rank, fraction)``: the rank runs every kernel at ``fraction`` of its
            speed (0 < fraction <= 1; kernel times divide by it).
        link_faults: degraded (factor in (0, 1)) and failed (factor 0) links.
        mix_ranks: ``(start, end)``: ranks ``start <= r < end`` are GPUs of the second type
            (the second compute model given to :func:`simulate_expanded`).
    """

    stragglers: tuple[tuple[int, float], ...] = ()
    link_faults: tuple[LinkFault, ...] = ()
    mix_ranks: tuple[int, int] | None = None

    @property
    def any(self) -> bool:
        return bool(self.stragglers or self.link_faults or self.mix_ranks)


@dataclass(frozen=True)
class ExpandedResult:
    """One expanded step. Times in seconds; per-rank arrays indexed by rank id."""

    step_time_s: float
    breakdown_s: dict[str, float]  # of the critical cluster's compute stream; sums to step
    critical_stage: int
    rank_finish_s: np.ndarray = field(repr=False)  # when each rank's last work ends
    rank_busy_s: np.ndarray = field(repr=False)  # each rank's kernel time in the step
    replica_classes: int  # pipeline replicas simulated (one per class of identical ones)
    perturbed_clusters: int  # distinct perturbed clusters simulated member by member
    clusters: int  # clusters in the job (stages × replicas)
    tasks: int  # pipeline-level tasks executed
    slowed: tuple[tuple[str, int, str, float], ...]  # (group, stage, tier, bandwidth factor)
    timeline: Timeline = field(repr=False)  # of the simulated micro-batches
    num_microbatches: int = 0  # of the step
    simulated_microbatches: int = 0  # in ``timeline`` (fewer when a steady state was extended)
    #: ``exact``, ``periodic``, ``bounded`` or ``unverified``, as
    #: :attr:`codesign.engine.training.StepResult.extension`
    extension: str = "exact"

    @property
    def slowest_rank(self) -> int:
        """The rank with the most kernel time (the one its groups wait for); among equals,
        the one that finishes last, then the lowest id."""
        finish, busy = self.rank_finish_s, self.rank_busy_s
        top = busy.max()
        cands = np.flatnonzero(busy >= top - 1e-12 * max(top, 1e-30))
        return int(cands[np.argmax(finish[cands])])



@dataclass(frozen=True)
class PassTiming:
    """One chunk pass of a cluster (seconds from the pass's start), as the pipeline uses it."""

    compute_time: float  # when the cluster's last member is done computing
    breakdown: tuple[tuple[str, float], ...]  # slowest member's; sums to compute_time
    layer_done: tuple[tuple[int, float], ...]  # layer -> its last compute op, any member
    tail: tuple[tuple[str, float], ...]  # comm category -> still running after compute_time
    busy: np.ndarray | float  # kernel time per member (scalar: all members alike)
    background: tuple[tuple[Resource, float], ...] = ()  # average port load


def from_chunk_timing(t: ChunkTiming) -> PassTiming:
    """The symmetric engine's timing of a chunk pass, as a healthy cluster's."""
    busy = sum(x.duration for x in t.timeline.tasks if x.stream == "compute")
    return PassTiming(t.compute_time, t.breakdown, t.layer_done, t.tail, busy)
