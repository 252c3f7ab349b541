"""Speculative decoding on a serving replica (Leviathan et al. 2023, "Fast Inference from
Transformers via Speculative Decoding", ICML; vLLM's and SGLang's draft-model and MTP modes).

One decode iteration of a replica with ``speculative`` settings runs, for every decoding
sequence at once:

1. ``k`` draft forward passes: the draft model (or the target's MTP module) decodes the
   batch ``k`` times, the ``j``-th pass over contexts ``L + j``. Prefill chunks of the same
   step are also run through the drafter (its own KV cache of the prompt; vLLM and SGLang
   prefill the drafter with the target).
2. One target verify pass over ``k + 1`` tokens per sequence (the last emitted token and the
   ``k`` drafts), priced as a prefill chunk of ``k + 1`` query tokens against the sequence's
   cached context, with ``k + 1`` rows of logits (:meth:`StepCostModel.verify_time_s`).
3. Each sequence keeps its accepted drafts and one token of the target: ``a + 1`` tokens
   where ``a`` (0..k) is the number of leading drafts accepted. Drafts are accepted
   independently with probability ``alpha`` (Leviathan et al. Sec. 3.1), so
   ``P(a = i) = alpha^i (1 - alpha)`` for ``i < k``, ``P(a = k) = alpha^k`` and the expected
   emitted tokens are ``(1 - alpha^(k+1)) / (1 - alpha)``.

``acceptance: sampled`` (default) draws ``a`` per sequence and iteration from the run's seed:
tokens per iteration vary between sequences, so TPOT has the spread (and the batch its
stragglers) that real acceptance gives. ``expected`` advances every sequence by the expected
count (fractional remainders carried per sequence) and is deterministic.

KV: each sequence holds blocks for its context plus the ``k + 1`` verify slots (vLLM's
lookahead slots; capped at the request's final length), its context grows by the emitted
tokens. The drafter's weights and its KV cache per token share the target's HBM, so the KV
capacity in tokens is ``(HBM - target weights - drafter weights - activations) × kv fraction
/ (target + drafter KV bytes per token)`` per GPU (:func:`shared_kv_capacity`).

MTP (DeepSeek-V3 technical report, arXiv:2412.19437, Sec. 2.2): the module is one transformer
block of the target (an MoE block for an MoE model), a ``2h × h`` projection and the target's
embedding and output head, which it shares (their weights are not counted twice).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import simpy

from codesign.errors import SpecError
from codesign.ir import Op
from codesign.serving.fixed_cost import AggregateCost, StepCost
from codesign.serving.replica import DECODE, Instance, Seq, blocks_for
from codesign.specs.catalog import load_model
from codesign.specs.model import ModelSpec
from codesign.specs.serving import EngineSpec, ModelEntrySpec, SpeculativeSpec
from codesign.workload import params as P
from codesign.workload.inference import ACT_BYTES, UNQUANTIZED_BYTES

#: ``expected`` acceptance: tolerance when taking whole tokens off the carried remainder
_CARRY_EPS = 1e-9


def mtp_module_model(model: ModelSpec) -> ModelSpec:
    """The target's MTP module as a one-layer model (an MoE layer for an MoE target: the
    DeepSeek-V3 MTP block is an MoE block, so the leading dense layers do not apply)."""
    update: dict[str, Any] = {"num_layers": 1, "name": f"{model.name}-mtp",
                              "mtp_num_layers": 0, "mtp_block_pattern": None}
    if model.moe is not None:
        update["moe"] = model.moe.model_copy(update={"first_dense_layers": 0})
    return model.model_copy(update=update)


class MtpModuleCost:
    """Step cost of an MTP module: the one-layer model's step (embedding, the block, final
    norm and head) plus the ``2h × h`` projection of ``[norm(h); norm(emb)]`` (DeepSeek-V3
    Sec. 2.2, Eq. 21). ASSUMPTION: the projection is split over the TP ranks like the
    block's column-parallel GEMMs and fused ahead of it (no collective of its own).

    Memory per GPU: the block and the projection; the embedding and head are the target's."""

    def __init__(self, module: Any) -> None:
        self.module = module
        w = module.workload
        m, p = w.model, w.plan
        self._h = float(m.hidden_size)
        self._tp = float(p.tp)
        self._ep = float(p.ep)
        self._wb = p.weight_bytes
        self._dtype = w.gemm_dtype
        shared = (P.embedding_params(m) + P.output_params(m)) / p.tp * UNQUANTIZED_BYTES
        proj = 2.0 * self._h * self._h / self._tp * self._wb
        self.weight_bytes_per_gpu = float(module.weight_bytes_per_gpu) - shared + proj
        self.activation_bytes = float(module.activation_bytes)
        self.kv_bytes_per_token = float(module.kv_bytes_per_token)
        self.kv_capacity_tokens = int(module.kv_capacity_tokens)
        self._proj_cache: dict[float, float] = {}

    def projection_s(self, tokens: float) -> float:
        """Seconds of the projection GEMM for ``tokens`` new tokens of the engine."""
        if tokens <= 0:
            return 0.0
        hit = self._proj_cache.get(tokens)
        if hit is None:
            t, h, n = tokens / self._ep, self._h, self._h / self._tp
            op = Op(name="mtp_projection", kind="gemm", category="forward", layer=0,
                    flops=2.0 * t * n * 2.0 * h,
                    bytes=t * 2.0 * h * ACT_BYTES + 2.0 * h * n * self._wb + t * n * ACT_BYTES,
                    mnk=(t, n, 2.0 * h), precision=self._dtype)
            hit = float(self.module.compute.time(op))
            self._proj_cache[tokens] = hit
        return hit

    def step_time_s(self, prefill: Sequence[tuple[int, int]], decode: Sequence[int]) -> float:
        """Seconds of one MTP pass over the batch (see the class docstring)."""
        tokens = sum(n for n, _ in prefill) + len(decode)
        return float(self.module.step_time_s(prefill, decode)) + self.projection_s(tokens)

    def step_time_agg_s(self, prefill: Sequence[tuple[int, int]], decode: int,
                        context_sum: float) -> float:
        """:meth:`step_time_s` from aggregates."""
        tokens = sum(n for n, _ in prefill) + decode
        return (float(self.module.step_time_agg_s(prefill, decode, context_sum))
                + self.projection_s(tokens))

    def kv_transfer_bytes(self, tokens: int) -> float:
        """KV bytes of ``tokens`` tokens in the module's one layer."""
        return float(self.module.kv_transfer_bytes(tokens))


def shared_kv_capacity(target: Any, drafter: Any) -> int:
    """KV tokens of a replica whose HBM holds the target and the drafter (weights, KV per
    token, the larger activation workspace); see the module docstring. Fixed step costs:
    the target's capacity in bytes split over both KV sizes (whole-model bytes per token;
    the drafter's weights are not known there)."""
    if hasattr(target, "compute") and hasattr(drafter, "weight_bytes_per_gpu"):
        free = (target.compute.gpu.memory_bytes - target.weight_bytes_per_gpu
                - drafter.weight_bytes_per_gpu
                - max(target.activation_bytes, drafter.activation_bytes))
        per_gpu = max(free, 0.0) * target.kv_fraction / (target.kv_bytes_per_token
                                                           + drafter.kv_bytes_per_token)
        return int(per_gpu) * target.plan.ep
    kv_t = float(target.kv_transfer_bytes(1))
    kv_d = float(drafter.kv_transfer_bytes(1))
    if kv_t <= 0:
        return int(target.kv_capacity_tokens)
    return int(target.kv_capacity_tokens * kv_t / (kv_t + kv_d))


def _aggregate(cost: Any) -> AggregateCost:
    fast = getattr(cost, "step_time_agg_s", None)
    if fast is not None:
        return fast

    def slow(prefill: Sequence[tuple[int, int]], n: int, ctx_sum: float) -> float:
        return float(cost.step_time_s(prefill, [ctx_sum / n] * n if n else []))

    return slow


class SpeculativeCost:
    """Step cost of a speculative replica: a step with decoding sequences is one iteration
    (``k`` drafter passes + the target's verify pass); a prefill-only step runs the chunks
    through the target and the drafter. Seconds."""

    def __init__(self, target: Any, drafter: Any, spec: SpeculativeSpec) -> None:
        if not hasattr(target, "verify_time_s"):
            raise SpecError("speculative: the model's step-cost model cannot price a verify "
                            "step (it has no verify_time_s)")
        self.target = target
        self.drafter = drafter
        self.k = spec.num_speculative_tokens
        self._draft = _aggregate(drafter)
        self.kv_capacity_tokens = shared_kv_capacity(target, drafter)

    def draft_time_s(self, prefill: Sequence[tuple[int, int]], decode: int,
                     context_sum: float) -> float:
        """Seconds of the ``k`` drafter passes (the first one with the prefill chunks)."""
        if decode == 0:
            return self._draft(prefill, 0, 0.0) if prefill else 0.0
        t = self._draft(prefill, decode, context_sum)
        for j in range(1, self.k):
            t += self._draft((), decode, context_sum + j * decode)
        return t

    def step_time_agg_s(self, prefill: Sequence[tuple[int, int]], decode: int,
                        context_sum: float) -> float:
        """Seconds of one step: drafter passes + target verify (or prefill) pass."""
        verify = self.target.verify_time_s(prefill, decode, context_sum, self.k)
        return float(verify) + self.draft_time_s(prefill, decode, context_sum)

    def step_time_s(self, prefill: Sequence[tuple[int, int]], decode: Sequence[int]) -> float:
        """:meth:`step_time_agg_s` of the listed contexts."""
        return self.step_time_agg_s(prefill, len(decode), float(sum(decode)))

    def kv_transfer_bytes(self, tokens: int) -> float:
        """The target's KV bytes of ``tokens`` tokens."""
        return float(self.target.kv_transfer_bytes(tokens))


def build_speculative_cost(engine: EngineSpec, entry: ModelEntrySpec, target: StepCost,
                           cost_factory: Callable[[EngineSpec, ModelEntrySpec, str],
                                                  StepCost],
                           where: str) -> SpeculativeCost:
    """The drafter's cost model (draft model or MTP module, via ``cost_factory``) and the
    speculative step cost of ``entry``'s replicas."""
    sp = entry.speculative
    assert sp is not None
    plan = sp.draft_plan or entry.plan.model_copy(update={"pp": 1})
    draft = sp.method == "draft"
    w = f"{where}.speculative.draft_model" if draft else f"{where}.speculative"
    ref = sp.draft_model if draft else entry.model
    assert ref is not None
    try:
        model = ref if isinstance(ref, ModelSpec) else load_model(ref)
    except SpecError as exc:
        raise SpecError(f"{w if draft else where + '.model'}: {exc}") from None
    if not draft:
        model = mtp_module_model(model)
    draft_entry = ModelEntrySpec(
        model=model, plan=plan, step_cost=sp.draft_step_cost,
        kv_cache_fraction=entry.kv_cache_fraction, max_num_tokens=entry.max_num_tokens,
        custom_allreduce=entry.custom_allreduce)
    drafter: Any = cost_factory(engine, draft_entry, w)
    if sp.method == "mtp" and hasattr(drafter, "workload"):
        drafter = MtpModuleCost(drafter)
    cost = SpeculativeCost(target, drafter, sp)
    if cost.kv_capacity_tokens <= 0:
        raise SpecError(f"{where}.speculative: the target's and the drafter's weights leave "
                        "no HBM for the KV cache")
    return cost


class SpecInstance(Instance):
    """A replica that decodes speculatively (see the module docstring). ``decoding`` maps a
    sequence to its KV tokens; ``seq.blocks`` are the blocks it holds."""

    def __init__(self, env: simpy.Environment, engine: str, index: int, model: str,
                 cost: SpeculativeCost, gpus: int, block_size: int, kv_tokens: int,
                 max_num_seqs: int, cost_agg: AggregateCost | None, spec: SpeculativeSpec,
                 rng: np.random.Generator) -> None:
        super().__init__(env, engine, index, model, cost, gpus, block_size, kv_tokens,
                         max_num_seqs, cost_agg)
        self.k = spec.num_speculative_tokens
        self.alpha = spec.acceptance_rate
        self.sampled = spec.acceptance == "sampled"
        self.expected = spec.expected_tokens
        self.rng = rng
        self.decode_tokens_per_seq = self.k + 1
        self._emitted: dict[Seq, bytearray] = {}
        self._carry: dict[Seq, float] = {}
        #: tokens emitted by verify steps and sequence-iterations run (their ratio is the
        #: measured tokens per iteration)
        self.spec_tokens = 0
        self.spec_seq_steps = 0

    def _target_blocks(self, seq: Seq, ctx: int) -> int:
        """Blocks ``seq`` holds for a step: its context and the ``k + 1`` verify slots,
        capped at the request's final length."""
        return blocks_for(min(ctx + self.k + 1, seq.prompt + seq.out), self.B)

    def join_decode(self, seq: Seq) -> None:
        """``seq`` (prefill done, ``pf_total`` tokens in KV) decodes from the next step."""
        if self.in_step:
            self.pending_join.append(seq)
            return
        seq.s0 = self.dstep
        seq.state = DECODE
        self.decoding[seq] = seq.pf_total
        self.sum_a += seq.pf_total
        self._emitted[seq] = bytearray()
        self._carry[seq] = 0.0

    def decode_blocks_needed(self) -> int:
        """Blocks the next iteration allocates (verify slots of every decoding sequence)."""
        if not self.paged:
            return 0
        return sum(max(0, self._target_blocks(s, c) - s.blocks)
                   for s, c in self.decoding.items())

    def _blocks_freed_for_step(self, seq: Seq) -> int:
        return max(0, self._target_blocks(seq, self.decoding[seq]) - seq.blocks)

    def decode_contexts(self) -> list[int]:
        """KV tokens of every decoding sequence."""
        return list(self.decoding.values())

    def decode_context_sum(self) -> int:
        """Sum of :meth:`decode_contexts`."""
        return self.sum_a

    def _leave_decode(self, seq: Seq) -> int:
        self.sum_a -= self.decoding.pop(seq)
        self._carry.pop(seq, None)
        emitted = self._emitted.pop(seq)
        if emitted:
            seq.segments.append((self, float(seq.s0), bytes(emitted)))
        return seq.blocks

    def _stop_decoding(self, seq: Seq) -> int:
        return self._leave_decode(seq)

    def accepted(self, n: int) -> list[int]:
        """Tokens each of ``n`` sequences gets from one verify step (accepted drafts + 1),
        before the carry of ``expected`` acceptance."""
        k, a = self.k, self.alpha
        if a >= 1.0:
            return [k + 1] * n
        if a <= 0.0:
            return [1] * n
        draws = np.minimum(self.rng.geometric(1.0 - a, size=n), k + 1)
        return [int(x) for x in draws]

    def advance_decode(self, now: float) -> None:
        """An iteration ended at ``now``: every decoding sequence keeps its accepted tokens;
        finish those that are complete."""
        self.dstep += 1
        self.dstep_end.append(now)
        seqs = list(self.decoding.items())
        got = self.accepted(len(seqs)) if self.sampled else None
        done: list[Seq] = []
        for i, (seq, ctx) in enumerate(seqs):
            if self.paged:
                seq.blocks = max(seq.blocks, self._target_blocks(seq, ctx))
            if got is not None:
                m = got[i]
            else:
                carry = self._carry[seq] + self.expected
                m = int(carry + _CARRY_EPS)
                self._carry[seq] = carry - m
            m = min(m, seq.out - seq.gen)
            seq.gen += m
            self.decoding[seq] = ctx + m
            self.sum_a += m
            self._emitted[seq].append(m)
            self.spec_tokens += m
            if seq.gen >= seq.out:
                done.append(seq)
        self.spec_seq_steps += len(seqs)
        for seq in done:
            blocks = self._leave_decode(seq)
            seq.blocks = 0
            if self.paged:
                self.release(blocks)
            self.finish(seq)
