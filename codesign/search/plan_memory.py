"""Memory per GPU of one searched plan, every stage at once, with the workload's own formulas.

The state bytes (weights, gradients, optimizer states under ZeRO) and the communication
buffers are :func:`codesign.workload.memory.state_bytes` and
:func:`~codesign.workload.memory.comm_buffer_bytes`, the functions the engine's memory report
uses, applied to ``[stage]`` arrays; the activations are the saved bytes of each chunk times
the schedule's in-flight micro-batches (:func:`codesign.search.pipeline.live_vectors`, equal to
:func:`~codesign.workload.schedules.max_in_flight`). The per-chunk parameters, saved bytes
and payloads come from the layers bound once per local shape (:class:`~.costs.LayerCosts`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from codesign.report.training import MEMORY_KEYS
from codesign.search.costs import LayerCosts
from codesign.search.pipeline import live_vectors
from codesign.units import GiB
from codesign.workload.memory import comm_buffer_bytes, state_bytes

#: ``[stage, chunk]`` arrays: layers of each kind (sorted by kind), holds the embedding, holds
#: the head
Assignment = tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]


@dataclass(frozen=True)
class PlanMemory:
    """Memory of the most loaded stage (GiB by category and ``total``), its total in bytes,
    and per stage the parameters whose optimizer update the stage's ranks perform without
    ZeRO (``plain``) and with it (``shard``)."""

    gib: dict[str, float]
    total: float
    plain: np.ndarray
    shard: np.ndarray


def plan_memory(lc: LayerCosts, asg: Assignment, zero: int, dense_n: int, expert_n: int,
                kind: str, pp: int, vpp: int, n: int, grad_bytes: float,
                lp_grad_bytes: float = 0.0) -> PlanMemory:
    """Memory of every stage of a plan (``asg``: its chunks' layers by stage and chunk;
    ``grad_bytes`` / ``lp_grad_bytes``: bytes per gradient, ``ParallelismSpec.grad_bytes`` /
    ``lp_grad_bytes``)."""
    counts, first_a, last_a = asg
    kinds = list(counts)
    par = {k: lc.params[k] for k in kinds}
    has = {k: counts[k] > 0 for k in kinds}

    def summed(values: dict[str, float]) -> np.ndarray:
        return sum((counts[k] * values[k] for k in kinds), np.zeros_like(first_a))

    def largest_of(values: dict[str, float]) -> np.ndarray:
        return np.maximum.reduce([has[k] * values[k] for k in kinds])

    dense = summed({k: p[0] for k, p in par.items()}) + first_a * lc.emb_params \
        + last_a * lc.head_params
    expert = summed({k: p[1] for k, p in par.items()}) + last_a * lc.head_expert_params
    saved = summed(lc.saved) + first_a * lc.emb_saved + last_a * lc.head_saved
    payload = largest_of(lc.payload)
    payload = np.maximum(payload, np.maximum(first_a * lc.emb_payload,
                                             last_a * lc.head_payload))
    largest = np.zeros(pp)
    if zero == 3:  # gathers of whole layers are collectives of the chunk too
        if dense_n > 1:
            payload = np.maximum(payload, largest_of({k: p[0] for k, p in par.items()}) * 2.0)
        if expert_n > 1:
            payload = np.maximum(payload, largest_of({k: p[1] for k, p in par.items()}) * 2.0)
        largest = np.maximum(largest_of({k: p[0] + p[1] for k, p in par.items()}),
                             np.maximum(first_a * lc.emb_params,
                                        last_a * (lc.head_params + lc.head_expert_params))
                             ).max(axis=1)
    dense_s, expert_s = dense.sum(axis=1), expert.sum(axis=1)
    weights, gradients, optimizer = state_bytes(dense_s, expert_s, zero, dense_n, expert_n,
                                                largest, grad_bytes, lp_grad_bytes)
    acts = np.einsum("skc,sc->sk", live_vectors(kind, pp, vpp, n), saved).max(axis=1)
    stage_mem = np.stack([weights, gradients, optimizer, acts,
                          comm_buffer_bytes(payload.max(axis=1))])
    totals = stage_mem.sum(axis=0)
    worst = int(np.argmax(totals))
    total = float(totals[worst])
    gib = {k: float(stage_mem[j, worst]) / GiB for j, k in enumerate(MEMORY_KEYS)}
    gib["total"] = total / GiB
    return PlanMemory(gib, total, dense_s + expert_s, dense_s / dense_n + expert_s / expert_n)
