"""Memory per GPU: weights, gradients, optimizer states, activations, communication buffers.

Conventions (Megatron-LM mixed precision with Adam): bf16 working weights (2 B/param), fp32
main gradients (4 B/param; bf16, 2 B, without ``grad_reduce_in_fp32``), fp32 master weights +
Adam m + v (12 B/param). ZeRO-1 shards the optimizer states over the data-parallel group,
ZeRO-2 also the gradients, ZeRO-3/FSDP also the weights (plus gathered buffers for two layers
in flight). Activations: the bytes each layer saves for backward (from the layer templates:
Korthikanti et al. 2022's 34·sbh + 5·as²b for an unfused GPT layer) times the micro-batches in
flight under the pipeline schedule.
Offload (:mod:`codesign.workload.offload`) moves states and activations to the GPU's host
tier: ``offloaded`` counts those bytes, outside the HBM ``total``.
LoRA (:mod:`codesign.workload.lora`): the frozen base weights take their 2 B/param working copy
only; gradients, optimizer states and ZeRO sharding cover the adapters alone.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from codesign.workload.offload import OFFLOAD_FIELDS, offload_states, offloaded_layers
from codesign.workload.schedules import peak_in_flight, peaks_in_flight
from codesign.workload.training import OPT_BYTES_PER_PARAM, TrainingGraph

WEIGHT_BYTES = 2.0


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per GPU on the most loaded pipeline stage."""

    stage: int
    weights: float
    gradients: float
    optimizer: float
    activations: float
    comm_buffers: float
    offloaded: float = 0.0  # in the GPU's host tier (offload), not in HBM
    without_offload: float = 0.0  # HBM total of the same plan without offload (when it offloads)

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations + \
            self.comm_buffers

    def by_category(self) -> dict[str, float]:
        """Bytes by category; ``offloaded`` only when the plan offloads."""
        out = {"weights": self.weights, "gradients": self.gradients,
               "optimizer": self.optimizer, "activations": self.activations,
               "comm_buffers": self.comm_buffers}
        if self.offloaded:
            out["offloaded"] = self.offloaded
            out["hbm_without_offload"] = self.without_offload
        return out


def stage_memory(graph: TrainingGraph, stage: int, dense_n: int, expert_n: int,
                 in_flight: float | None = None) -> MemoryEstimate:
    """Memory of one pipeline stage's ranks. ``dense_n``/``expert_n``: sizes of the groups that
    shard dense and expert states under ZeRO. ``in_flight``: the stage's peak saved
    activation bytes (:func:`_stage_peaks`) when the caller has them."""
    p = graph.run.parallel
    zero = p.sharding_stage
    chunks = graph.stage_chunks(stage)
    dense = sum(c.dense_params for c in chunks)
    expert = sum(c.expert_params for c in chunks)
    largest = 0.0
    if zero >= 3:
        largest = max((d + e for c in chunks for _, d, e in c.layer_params), default=0.0)
    weights, gradients, optimizer = state_bytes(dense, expert, zero, dense_n, expert_n,
                                                largest, p.grad_bytes, p.lp_grad_bytes)
    # LoRA: the frozen base weights, working copy only (no gradients or optimizer states)
    weights += sum(c.frozen_params for c in chunks) * WEIGHT_BYTES
    saved = {c.chunk: c.saved_bytes for c in chunks}
    activations = (peak_in_flight(p.pipeline_schedule, p.pp, p.vpp, graph.num_microbatches,
                                  stage, saved) if in_flight is None else in_flight)
    comm_buffers = comm_buffer_bytes(max((c.comm_peak_bytes for c in chunks), default=0.0))
    offloaded = 0.0
    if p.offloads:
        weights, gradients, optimizer, offloaded = offload_states(p, weights, gradients,
                                                                  optimizer, largest)
    if p.offload_activations:  # resident layers in flight + two layers being copied
        moved = {c.chunk: sum(offloaded_layers(c).values()) for c in chunks}
        kept = {c: saved[c] - moved[c] for c in saved}
        args = (p.pipeline_schedule, p.pp, p.vpp, graph.num_microbatches, stage)
        staging = 2 * max((b for c in chunks for b in offloaded_layers(c).values()),
                          default=0.0)
        activations = peak_in_flight(*args, kept) + staging
        offloaded += peak_in_flight(*args, moved)
    return MemoryEstimate(stage, weights, gradients, optimizer, activations, comm_buffers,
                          offloaded)


def state_bytes(dense: Any, expert: Any, zero: int, dense_n: int, expert_n: int,
                largest_layer: Any, grad_bytes: float,
                lp_grad_bytes: float = 0.0) -> tuple[Any, Any, Any]:
    """``(weights, gradients, optimizer states)`` bytes of a stage's ranks holding ``dense``
    and ``expert`` parameters, sharded over ``dense_n``/``expert_n`` ranks from ZeRO stage 3 /
    2 / 1 on; under ZeRO-3 two gathered layers (the current one and the prefetched one, the
    largest layer ``largest_layer``) are in flight. Elementwise: the arguments may be numbers
    or numpy arrays (the search prices every stage of a plan in one call). ``grad_bytes``:
    bytes per gradient (:attr:`~codesign.specs.parallel.ParallelismSpec.grad_bytes`);
    ``lp_grad_bytes``: the unsharded low-precision gradients an accumulation pass keeps beside
    them (:attr:`~codesign.specs.parallel.ParallelismSpec.lp_grad_bytes`)."""
    shard = dense / dense_n + expert / expert_n
    plain = dense + expert
    weights = (shard if zero >= 3 else plain) * WEIGHT_BYTES
    if zero >= 3:  # gathered layers in flight: the current one and the prefetched one
        weights = weights + 2 * largest_layer * WEIGHT_BYTES
    gradients = (shard if zero >= 2 else plain) * grad_bytes + plain * lp_grad_bytes
    optimizer = (shard if zero >= 1 else plain) * OPT_BYTES_PER_PARAM
    return weights, gradients, optimizer


def comm_buffer_bytes(largest_payload: Any) -> Any:
    """Communication buffers: two of the largest collective payload (double buffering)."""
    return 2.0 * largest_payload


def memory_per_gpu(graph: TrainingGraph, dense_n: int, expert_n: int) -> MemoryEstimate:
    """The stage with the largest footprint (it decides whether the plan fits)."""
    p = graph.run.parallel
    peaks = _stage_peaks(graph)
    stages = [stage_memory(graph, s, dense_n, expert_n, peaks[s]) for s in range(p.pp)]
    worst = max(stages, key=lambda m: (m.total, -m.stage))
    if not p.offloads:
        return worst
    plain = replace(graph, run=graph.run.model_copy(update={"parallel": p.model_copy(
        update=dict.fromkeys(OFFLOAD_FIELDS, False))}))
    without = max(stage_memory(plain, s, dense_n, expert_n).total for s in range(p.pp))
    return replace(worst, without_offload=without)


def _stage_peaks(graph: TrainingGraph) -> list[float]:
    """Each stage's peak bytes of saved activations in flight (:func:`peak_in_flight` of
    its chunks' ``saved_bytes``), all stages in one pass."""
    p = graph.run.parallel
    saved = {s: {c.chunk: c.saved_bytes for c in graph.stage_chunks(s)} for s in range(p.pp)}
    return peaks_in_flight(p.pipeline_schedule, p.pp, p.vpp, graph.num_microbatches, saved)

