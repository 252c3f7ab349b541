"""Per-rank ("expanded") simulation of one training step: stragglers, a second GPU type,
degraded or failed links, and flow-level contention between concurrent collectives.

Every rank has its own speed (a straggler runs its kernels at a fraction of its speed), GPU
type and links; a collective starts when the last member of its group arrives (a
synchronization barrier) and lasts as long as its slowest group instance. Ranks are grouped
so that only what a perturbation touches is simulated separately:

* **Clusters.** The ranks of one pipeline stage that a chunk pass's collectives couple (TP,
  CP, EP, and DP under ZeRO-3) form a cluster. A chunk pass of a cluster is simulated
  operator by operator for all its members at once (vectorized over members and over every
  perturbed cluster of the stage): each member's compute stream and communication streams,
  each collective a barrier across its group's members. A cluster whose members and links
  are all healthy takes the symmetric engine's chunk timing unchanged. Members of a cluster
  start each chunk pass together (its first collective follows within a kernel or two).
* **Replica classes.** A pipeline replica (one cluster per stage, joined by point-to-point
  sends) whose clusters and pipeline links are healthy behaves exactly like every other
  healthy replica, so replicas with identical perturbations form one class, simulated once.
  Data-parallel gradient reductions and parameter gathers of a stage are barriers across all
  classes, priced at the slowest group instance of the stage.

The pipeline level walks the step program
(:func:`~codesign.workload.step_program.build_step_program`) that the symmetric engine runs,
so every schedule (``zb-h1`` included) runs per rank. With no perturbation there is a single
class of healthy clusters and the task graph is the symmetric engine's, so the step time is
identical (a test checks it).

Link faults are turned into per-group bandwidth factors by the flow model
(:mod:`codesign.network.flows`): the flows of every group instance that runs concurrently are
routed over the faulted link graph and given max-min fair rates; an instance keeps the
fraction of its healthy rate its slowest flow keeps, per tier, and its collective is priced by
the alpha-beta model with those tiers slowed (:class:`~codesign.network.faults.ScaledCosts`).

Contention (``contention=True``): collectives that overlap in time share links max-min fairly
(a fluid simulation: rates are recomputed whenever a transfer starts or ends). Resources are a
rank's (or, at the pipeline level, a cluster's) scale-up and scale-out ports, each direction
with capacity 1; a transfer at full speed loads a port with the fraction of the wire rate it
achieves. Inside a chunk pass, overlapping TP/CP/EP/ZeRO-3 collectives share the ports of a
representative healthy rank (their stretched durations are reused by perturbed clusters).
At the pipeline level, point-to-point sends, gradient-reduction buckets and parameter gathers
share the ports of the clusters they touch, with the average traffic of the chunk passes
running there as a competing demand (chunk passes themselves are not slowed by it); a bucket
spanning several replica classes advances on each class's ports at that class's fair share and
ends with the slowest part.

Modules: :mod:`~.values` (perturbations, pass timings, the result), :mod:`~.geometry` (ranks by
stage, replica and cluster member), :mod:`~.link_factors` (link faults as per-instance bandwidth
factors), :mod:`~.batch` (the vectorized chunk pass of perturbed clusters), :mod:`~.fluid`
(the fluid executor and contended chunk passes), :mod:`~.clusters` (pricing every cluster,
replica classes), :mod:`~.wiring` (the step program's nodes as tasks over replica classes:
the schedule is the symmetric engine's program, not restated) and :mod:`~.pipeline` (running
it, :func:`simulate_expanded`).
"""

from codesign.engine.executor import execute_exact
from codesign.engine.expanded.batch import batch_pass
from codesign.engine.expanded.fluid import Flow, execute_fluid, fluid_pass
from codesign.engine.expanded.pipeline import simulate_expanded
from codesign.engine.expanded.values import ExpandedResult, PassTiming, Perturbations, Resource

__all__ = ["ExpandedResult", "Flow", "PassTiming", "Perturbations", "Resource", "batch_pass",
           "execute_exact", "execute_fluid", "fluid_pass", "simulate_expanded"]
