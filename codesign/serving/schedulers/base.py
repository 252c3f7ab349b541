"""What every batching scheduler provides, and the admission helpers they share.

A scheduler owns the policy of one replica (:class:`~codesign.serving.replica.Instance`):
which waiting sequences to admit, how many prefill tokens each step carries, whether running
sequences decode, and whom to preempt. The replica owns the mechanism: the queue, the KV-block
pool, decode bookkeeping and the step loop. ``schedule`` is called whenever the replica is
free and returns a :class:`~codesign.serving.replica.StepPlan`, or ``None`` to sleep until a
sequence arrives (or :meth:`Scheduler.idle_wait_s` passes).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from codesign.serving.replica import RECEIVING, Instance, Seq, StepPlan, blocks_for


class Scheduler(ABC):
    """Base class: subclasses set ``name`` and implement :meth:`schedule`."""

    name: ClassVar[str] = "base"

    def __init__(self, inst: Instance, settings: Any) -> None:
        self.inst = inst
        self.settings = settings
        inst.scheduler = self
        frac = float(getattr(settings, "watermark_fraction", 0.0))
        self.watermark = int(frac * inst.total_blocks)
        inst.max_seq_blocks = inst.total_blocks - self.watermark
        #: guaranteed_no_evict: blocks promised to each admitted sequence (its whole prompt
        #: and output) and their sum; admission keeps the sum within the pool, so the blocks
        #: a sequence takes as it grows are always free and decode never preempts
        self.no_evict = getattr(settings, "capacity_policy", "") == "guaranteed_no_evict"
        self.promised: dict[Seq, int] = {}
        self.committed = 0
        if self.no_evict:
            inst.on_finish = self.forget

    @abstractmethod
    def schedule(self) -> StepPlan | None:
        """The next step, or ``None`` when there is nothing to run."""

    def after_prefill(self, seq: Seq) -> None:
        """``seq`` produced its first token and has more to generate: decode it here."""
        self.inst.join_decode(seq)

    def after_step(self, plan: StepPlan) -> None:  # noqa: B027 - optional hook
        """Hook after a step has been applied (default: nothing to do)."""

    def idle_wait_s(self) -> float | None:
        """While idle with work queued, wake after this many seconds (``None``: on arrival)."""
        return None

    # --- shared helpers ------------------------------------------------------------------

    def room_for(self, seq: Seq) -> bool:
        """Under guaranteed_no_evict, whether the whole of ``seq`` (prompt and remaining
        output) fits beside the blocks promised to the admitted sequences (else: True)."""
        if not self.no_evict:
            return True
        inst = self.inst
        need = blocks_for(seq.pf_total + max(seq.out - seq.gen, 1), inst.B)
        return self.committed + need <= inst.total_blocks - self.watermark

    def promise(self, seq: Seq) -> None:
        """Record the blocks promised to ``seq`` as it is admitted (guaranteed_no_evict)."""
        if self.no_evict:
            need = blocks_for(seq.pf_total + max(seq.out - seq.gen, 1), self.inst.B)
            self.committed += need - self.promised.get(seq, 0)
            self.promised[seq] = need

    def forget(self, seq: Seq) -> None:
        """``seq`` finished: its promised blocks are free for admission again."""
        self.committed -= self.promised.pop(seq, 0)

    def admit_remote(self, seq: Seq) -> bool:
        """Admit a handed-off sequence (KV arriving from a prefill engine): reserve its
        blocks and start the transfer. ``False`` when the blocks are not free."""
        inst = self.inst
        need = blocks_for(seq.pf_total, inst.B)
        if inst.free_blocks - need < self.watermark or not self.room_for(seq):
            return False
        inst.waiting.popleft()
        inst.admit(seq, RECEIVING)
        self.promise(seq)
        inst.alloc(need)
        seq.blocks = need
        if inst.receiver is None:
            raise RuntimeError(f"{inst.name}: received a handed-off sequence but has no "
                               "KV receiver")
        inst.receiver(seq, inst)
        return True

    def start_prefill(self, seq: Seq, blocks: int, tokens: int,
                      chunks: list[tuple[Seq, int]], args: list[tuple[int, int]]) -> None:
        """Take the head of the waiting queue (``seq``) into the running set with ``blocks``
        KV blocks, and add a prefill chunk of ``tokens`` new tokens to the step."""
        self.inst.waiting.popleft()
        self.inst.admit(seq)
        self.promise(seq)
        self.inst.alloc(blocks)
        seq.blocks = blocks
        chunks.append((seq, tokens))
        args.append((tokens, seq.cached))

    def admit_whole_prompts(self, max_tokens: int) -> StepPlan | None:
        """vLLM-style prefill admission: whole prompts in arrival order while their KV
        blocks (plus the watermark) are free and the step stays within ``max_tokens``
        (one longer prompt is allowed alone)."""
        inst = self.inst
        waiting = inst.waiting
        chunks: list[tuple[Seq, int]] = []
        args: list[tuple[int, int]] = []
        tokens = 0
        while waiting and len(inst.admitted) < inst.max_num_seqs:
            seq = waiting[0]
            if seq.remote_kv:
                if not self.admit_remote(seq):
                    break
                continue
            n = seq.pf_total - seq.cached
            if chunks and tokens + n > max_tokens:
                break
            need = blocks_for(seq.pf_total, inst.B)
            if inst.free_blocks - need < self.watermark or not self.room_for(seq):
                break
            self.start_prefill(seq, need, n, chunks, args)
            tokens += n
        if chunks:
            return StepPlan(chunks, args, False)
        return None

    def decode_step(self) -> StepPlan | None:
        """Decode every running sequence, preempting the latest admitted for KV blocks."""
        inst = self.inst
        if not inst.decoding:
            return None
        need = inst.decode_blocks_needed()
        if need > inst.free_blocks:
            need = inst.preempt_for(need)
        inst.alloc(need)
        if not inst.decoding:
            return None
        return StepPlan([], [], True)
