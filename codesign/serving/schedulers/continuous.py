"""Continuous batching (vLLM v0 style, Kwon et al. 2023, "Efficient Memory Management for
Large Language Model Serving with PagedAttention").

Each step either prefills newly admitted requests or decodes every running one. Admission is
first-come first-served while whole prompts fit in free KV blocks beyond a watermark
(``watermark_fraction`` of the pool), up to ``max_num_seqs`` in flight and
``max_num_batched_tokens`` prefill tokens per step; prefill has priority over decode. A decode
step that needs a block with none free preempts the most recently admitted sequence
(recompute: its KV is dropped and its prompt plus generated tokens are prefilled again when it
is readmitted). The pool is never exceeded.
With ``capacity_policy: guaranteed_no_evict`` (TensorRT-LLM's default) a request is admitted
only while the blocks of its whole prompt and output fit beside those promised to the
admitted requests, so decode never runs short and nothing is preempted.
"""

from __future__ import annotations

from codesign.serving.replica import Instance, StepPlan
from codesign.serving.schedulers.base import Scheduler
from codesign.specs.serving import ContinuousSchedulerSpec


class ContinuousScheduler(Scheduler):
    """vLLM-style continuous batching with a KV-block budget and recompute preemption."""

    name = "continuous"

    def __init__(self, inst: Instance, settings: ContinuousSchedulerSpec) -> None:
        super().__init__(inst, settings)
        self.max_tokens = settings.max_num_batched_tokens

    def schedule(self) -> StepPlan | None:
        """Prefill admitted prompts if any can be admitted, else decode."""
        if self.inst.waiting:
            plan = self.admit_whole_prompts(self.max_tokens)
            if plan is not None:
                return plan
        return self.decode_step()
