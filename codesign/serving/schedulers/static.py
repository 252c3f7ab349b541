"""Static batching (FasterTransformer-style request-level batching).

When the replica is idle and requests wait, a batch of up to ``max_batch_size`` is formed in
arrival order (after waiting up to ``batch_timeout_s`` for a full one); its KV is reserved up
front for the longest prompt plus the longest output of the batch (``pad_to_longest``) or
each request's own length. The batch prefills in one step and decodes until its longest
request has finished; nobody joins a running batch. With padding every member is computed
at the longest prompt and through the longest output, as padded tensors are.
"""

from __future__ import annotations

from codesign.serving.replica import Instance, Seq, StepPlan, blocks_for
from codesign.serving.schedulers.base import Scheduler
from codesign.specs.serving import StaticSchedulerSpec


class StaticScheduler(Scheduler):
    """Request-level batching: form, prefill, decode to the end, repeat."""

    name = "static"

    def __init__(self, inst: Instance, settings: StaticSchedulerSpec) -> None:
        super().__init__(inst, settings)
        inst.paged = False  # KV is reserved per batch, not grown per step
        self.max_batch = min(settings.max_batch_size, settings.max_num_seqs)
        self.timeout_s = settings.batch_timeout_s
        self.pad = settings.pad_to_longest
        self.batch: list[Seq] = []
        self.reserved = 0
        self.max_prompt = 0
        self.k = 0  # decode steps run by the current batch
        self._wait: float | None = None

    def idle_wait_s(self) -> float | None:
        """Remaining batch timeout while a partial batch waits."""
        return self._wait

    def _form(self) -> StepPlan | None:
        inst = self.inst
        waiting = inst.waiting
        self._wait = None
        if len(waiting) < self.max_batch and self.timeout_s > 0:
            deadline = waiting[0].waiting_since + self.timeout_s
            if inst.env.now < deadline:
                self._wait = deadline - inst.env.now
                return None
        batch: list[Seq] = []
        lmax = nmax = reserve = 0
        for seq in waiting:
            if len(batch) >= self.max_batch:
                break
            lm, nm = max(lmax, seq.pf_total), max(nmax, seq.out)
            if self.pad:
                need = (len(batch) + 1) * blocks_for(lm + nm, inst.B)
            else:
                need = reserve + blocks_for(seq.pf_total + seq.out, inst.B)
            if need > inst.free_blocks:
                break
            batch.append(seq)
            lmax, nmax, reserve = lm, nm, need
        if not batch:
            return None
        for _ in batch:
            waiting.popleft()
        inst.alloc(reserve)
        self.reserved = reserve
        self.batch = batch
        self.max_prompt = lmax
        self.k = 0
        chunks: list[tuple[Seq, int]] = []
        args: list[tuple[int, int]] = []
        for seq in batch:
            inst.admit(seq)
            n = seq.pf_total - seq.pf_done
            chunks.append((seq, n))
            args.append((lmax if self.pad else seq.pf_total, 0))
        return StepPlan(chunks, args, False)

    def schedule(self) -> StepPlan | None:
        """Continue the running batch, or end it and form the next."""
        inst = self.inst
        if self.batch:
            if inst.decoding:
                self.k += 1
                if self.pad:  # every member at the longest prompt, k-1 tokens generated
                    return StepPlan([], [], True, [self.max_prompt + self.k - 1] * len(self.batch))
                return StepPlan([], [], True)
            inst.release(self.reserved)
            self.reserved = 0
            self.batch = []
        if not inst.waiting:
            self._wait = None
            return None
        return self._form()
