"""Disaggregated prefill and decode (Splitwise, Patel et al. 2024; DistServe, Zhong et al.
2024; Mooncake).

The engine with this scheduler only prefills (whole prompts, admitted by free KV blocks as
in continuous batching). A prompt's first token comes from the prefill; the request is then
handed to the least-loaded replica of ``decode_engine``, whose own scheduler admits it by
reserving KV blocks for the prompt; the KV cache is then sent over the link (the network
model between the two replicas, or a dedicated link) — transfers from one prefill replica
share its bandwidth fairly — and the prefill replica frees its blocks when the transfer ends.
Every transfer is recorded with its bytes (``kv_transfer_bytes`` of the prompt).
"""

from __future__ import annotations

from collections.abc import Callable

from codesign.serving.replica import REJECTED, Instance, Seq, StepPlan
from codesign.serving.schedulers.base import Scheduler
from codesign.specs.serving import DisaggregatedSchedulerSpec


class DisaggregatedScheduler(Scheduler):
    """Prefill-only replica handing requests to a decode engine."""

    name = "disaggregated"

    def __init__(self, inst: Instance, settings: DisaggregatedSchedulerSpec) -> None:
        super().__init__(inst, settings)
        self.max_tokens = settings.max_num_batched_tokens
        #: picks the decode replica for a sequence (set by the simulation)
        self.pick_decode: Callable[[Seq], Instance] | None = None
        self.handoffs = 0

    def schedule(self) -> StepPlan | None:
        """Prefill whatever fits; this replica never decodes."""
        if not self.inst.waiting:
            return None
        return self.admit_whole_prompts(self.max_tokens)

    def after_prefill(self, seq: Seq) -> None:
        """Hand the sequence to a decode replica; keep its KV until the transfer ends."""
        inst = self.inst
        if self.pick_decode is None:
            raise RuntimeError(f"{inst.name}: no decode engine wired")
        del inst.admitted[seq]
        seq.kv_src = inst
        seq.kv_src_blocks = seq.blocks
        seq.blocks = 0
        seq.remote_kv = True
        self.handoffs += 1
        dst = self.pick_decode(seq)
        dst.submit(seq)
        if seq.state == REJECTED:  # cannot fit there: drop the KV here
            inst.release(seq.kv_src_blocks)
            seq.kv_src_blocks = 0
