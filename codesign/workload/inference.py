"""Inference workload: the forward operators of a prefill / decode step, bound from the same
layer templates as training (:mod:`codesign.workload.layers`).

A step is one forward pass of an engine over a mixed batch: prefill chunks ``(n, c)`` (``n``
new prompt tokens of a request that already has ``c`` tokens cached) and decoding requests
(one new token each, attending to ``L`` cached tokens plus itself). Its shape is summarized by
a :class:`StepShape` of sums; every operator's FLOPs and bytes are exact functions of them.

Binding (per GPU of one attention replica; an engine has ``ep`` replicas of ``tp × pp`` GPUs,
each with ``1/ep`` of the requests, see :mod:`codesign.specs.inference`):

* **Token GEMMs, norms, elementwise kernels** take ``T`` = the replica's new tokens. GEMM
  bytes count activations at the GEMM dtype, the **weight at the weight dtype** (template
  dimension ``ew``), outputs at 2 B: at small batch the weight read dominates and decode is
  memory-bound. The quantization of activations is fused into the producing kernel
  (TensorRT-LLM), so no separate cast kernel is priced (``role=""``).
* **Attention** is bound per part with the template's own expressions, choosing ``b``, ``S``
  and ``T`` so that FLOPs = ``4·a·d·Σ(query·key pairs)`` and K/V bytes = ``Σ keys read ×
  2·kv_heads·d × KV dtype`` hold exactly: *decode* (one query per request over ``L + 1`` keys,
  nothing masked), *prefill self* (``n × n`` causal: the compute model executes half) and
  *prefill context* (``n`` queries over ``c`` cached keys, nothing masked). ``ekv`` is the
  KV-cache dtype, so decode attention reads ``L × 2 × kv_heads × head_dim × bytes`` per layer
  per request. MLA decode and context parts use the weight-absorbed form (latent ``kvl + dr``
  per key read once, MQA-like); MLA self-attention of new tokens the expanded form. With
  ``decode_attention="per_head"`` (a decode kernel without GQA sharing) the decode part reads
  each group's K/V once per query head: ``a/kv_heads`` times the bytes.
* **KV writes**: the template's ``rope`` kernel reads Q, K and writes Q and the new K/V, at
  ``ekv`` bytes for K/V, i.e. the KV-cache append (TensorRT-LLM fuses both).
* **MoE**: ``Tx = T·top_k`` routed copies per replica (``T·top_k/E`` tokens per expert per
  replica, balanced routing); the grouped expert GEMM runs once per *activated* local expert,
  ``E_l·(1 − (1 − top_k/E)^(T·ep))`` of the ``E_l = E/ep`` local experts (expected number hit
  by the engine's ``T·ep`` tokens under uniform routing), so decode at small batch reads only
  the weights of the experts it uses. The expert GEMMs of a layer run as one grouped-GEMM
  kernel (one launch: vLLM's fused_moe Triton kernel, TensorRT-LLM's CUTLASS MoE GEMM), so
  the operator keeps its totals with ``count = 1`` and the per-expert ``m × n × k`` that sets
  the tile efficiency. ``ep`` > 1: all-to-all dispatch and combine on the EP
  group (template). ``ep`` = 1, ``tp`` > 1 (MoE tensor parallelism): tokens are already
  replicated on the TP ranks, so the expert TP all-gather is dropped and the partial expert
  outputs are summed by one all-reduce of ``T × h``.
* **Collectives**: one TP all-reduce after attention and one after the MLP (Megatron *g*; no
  sequence parallelism in inference), the vocabulary-parallel embedding all-reduce, a
  pipeline p2p of ``T × h`` activations between stages.
* **Head**: only the last token of each request is projected to logits (``sequences`` rows,
  fp32), gathered over TP and read once by sampling. No loss.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, replace

from codesign.ir import Op
from codesign.specs.inference import DTYPE_BYTES, InferencePlan
from codesign.specs.model import ModelSpec
from codesign.workload import params as P
from codesign.workload import ssm
from codesign.workload.dims import ATTENTION_KINDS, KIND_BLOCKS, kind_of, mamba_dims, tp_problems
from codesign.workload.layers import (
    UNQUANTIZED_GEMMS,
    LayerStructure,
    embedding_template,
    head_template,
    layer_template,
)
from codesign.workload.ops import OpTemplate, comm, evaluate, evaluate_optional, memory
from codesign.workload.step_shape import StepShape
from codesign.workload.symbolic import Sym
from codesign.workload.training import layer_assignment

__all__ = ["AttentionPart", "InferenceWorkload", "StepShape", "inference_problems",
           "stage_layers"]

#: activation bytes per element (bf16) outside GEMM inputs
ACT_BYTES = 2.0
#: logits are produced and sampled in fp32
LOGIT_BYTES = 4.0
#: weights that stay in 16-bit under FP8/FP4 quantization: embeddings, LM head, norms and the
#: MoE router (NVIDIA ModelOpt checkpoints exclude ``lm_head`` from quantization)
UNQUANTIZED_BYTES = 2.0
#: GEMMs over those 16-bit weights run in bf16: :data:`codesign.workload.layers.UNQUANTIZED_GEMMS`

_T, _V = Sym("T"), Sym("V")
#: inference-only head operators: sampling reads the gathered fp32 logits once; the logits of
#: the vocabulary-parallel LM head are gathered over TP (all-gather output size T·V·4)
_SAMPLING = memory("sampling", _T * _V * LOGIT_BYTES)
_LOGITS_GATHER = comm("logits_gather", "all_gather", None, "tp", _T * _V * LOGIT_BYTES)


@dataclass(frozen=True)
class AttentionPart:
    """One attention kernel's workload on a replica: ``queries`` new tokens, ``pairs``
    query·key pairs (full, before causal masking), ``keys`` K/V rows read."""

    name: str
    queries: float
    pairs: float
    keys: float
    causal: bool
    absorbed: bool  # MLA weight-absorbed form


def inference_problems(model: ModelSpec, plan: InferencePlan,
                       peaks: Collection[str] | None = None) -> list[str]:
    """Every reason ``plan`` cannot serve ``model`` (empty when it can); no memory check.

    ``peaks``: the dtypes the GPU has a dense peak for, to check that the GEMM dtype exists.
    """
    tp = plan.tp
    out: list[str] = tp_problems(model, tp)
    if plan.pp > model.num_layers:
        out.append(f"pp {plan.pp} exceeds num_layers {model.num_layers}")
    if model.moe is not None:
        if (slots := model.moe.num_experts + plan.redundant_experts) % plan.ep:
            out.append(f"ep {plan.ep} does not divide num_experts + redundant_experts {slots}")
        if model.moe.expert_ffn_hidden_size % tp:
            out.append(f"tp {tp} does not divide expert_ffn_hidden_size "
                       f"{model.moe.expert_ffn_hidden_size}")
    elif plan.ep > 1:
        out.append(f"ep {plan.ep} > 1 needs an MoE model; {model.name} is dense")
    elif plan.redundant_experts:
        out.append(f"redundant_experts {plan.redundant_experts} needs an MoE model; "
                   f"{model.name} is dense")
    if peaks is not None:
        dtype = plan.gemm_dtype(peaks)
        sixteen = {"bf16", "fp16"}
        if dtype not in peaks and not (dtype in sixteen and sixteen & set(peaks)):
            out.append(f"compute dtype {dtype} is not supported by the GPU "
                       f"(has {', '.join(sorted(peaks))})")
    return out


def stage_layers(num_layers: int, pp: int) -> list[range]:
    """Layers of each pipeline stage, split as in training
    (:func:`codesign.workload.training.layer_assignment`)."""
    out, start = [], 0
    for layers in layer_assignment(num_layers, pp):
        out.append(range(start, start + len(layers)))
        start += len(layers)
    return out


class InferenceWorkload:
    """The bound inference operators of one model on one plan (per GPU of a replica).

    Build once per (model, plan, GEMM dtype); the ``*_ops`` methods bind the cached templates
    to a token count in microseconds. Raises ``ValueError`` listing every problem of an
    infeasible plan (see :func:`inference_problems`).
    """

    def __init__(self, model: ModelSpec, plan: InferencePlan, gemm_dtype: str = "bf16") -> None:
        problems = inference_problems(model, plan)
        if problems:
            raise ValueError("; ".join(problems))
        self.model, self.plan, self.gemm_dtype = model, plan, gemm_dtype
        m, tp, ep = model, plan.tp, plan.ep
        self.group_sizes = {"tp": tp, "ep": ep, "pp": plan.pp}
        e_gemm = DTYPE_BYTES[gemm_dtype]
        env: dict[str, float] = {
            "b": 1.0, "T": 1.0, "Tsp": 1.0, "S": 1.0, "h": m.hidden_size,
            "hx": float(m.moe_token_width), "e": ACT_BYTES,
            "eg": e_gemm, "tok_e": e_gemm, "ew": plan.weight_bytes, "ekv": plan.kv_bytes,
            "a_t": m.num_heads / tp, "g_t": max(m.kv_heads / tp, 1.0), "d": m.dim_per_head,
            "f_t": m.ffn_hidden_size / tp, "gm": 2.0 if m.mlp == "gated" else 1.0,
            "V_t": m.vocab_size / tp, "V": float(m.vocab_size),
            "ql": 0.0, "kvl": 0.0, "dn": 0.0, "dr": 0.0, "dv": 0.0,
            "E": 1.0, "E_l": 1.0, "k": 0.0, "fe_t": 0.0, "Tx": 0.0, "Td": 0.0, "fs_t": 0.0,
            "etp": float(tp),
            # ASSUMPTION (upper bound): serving prices every layer's attention over the
            # whole context; sliding windows (ModelSpec.sliding_window) shorten only the
            # training step's attention
            "aw": 1.0,
        }
        if m.mla is not None:
            env.update(ql=float(m.mla.q_lora_rank or 0), kvl=m.mla.kv_lora_rank,
                       dn=m.mla.qk_nope_head_dim, dr=m.mla.qk_rope_head_dim,
                       dv=m.mla.v_head_dim)
        if m.moe is not None:
            moe = m.moe
            shared = moe.shared_expert_ffn_hidden_size or moe.expert_ffn_hidden_size
            slots = moe.num_experts + plan.redundant_experts  # experts + their replicas
            env.update(E=moe.num_experts, E_l=slots / ep, k=moe.top_k,
                       fe_t=moe.expert_ffn_hidden_size / tp,
                       fs_t=moe.num_shared_experts * shared / tp)
        env.update(mamba_dims(m, tp))
        self._env = env
        #: layer kinds present (:meth:`ModelSpec.layer_kind`), sorted
        self.kinds = sorted({m.layer_kind(i) for i in range(m.num_layers)})
        self.stages = stage_layers(m.num_layers, plan.pp)
        #: per stage: number of layers of each kind
        self.stage_kinds: list[dict[str, int]] = [
            {kind: sum(1 for i in r if m.layer_kind(i) == kind) for kind in self.kinds}
            for r in self.stages]
        #: per stage: layers with attention (KV cache) and Mamba mixers (recurrent state)
        self.stage_attention = [sum(n for k, n in c.items() if k in ATTENTION_KINDS)
                                for c in self.stage_kinds]
        self.stage_mamba = [c.get("mamba", 0) for c in self.stage_kinds]
        self._templates = {kind: layer_template(self.structure(kind)) for kind in self.kinds}
        attn_kinds = [k for k in self.kinds if k in ATTENTION_KINDS]
        self._attn = {kind: self._attention_template(kind, absorbed=False)
                      for kind in attn_kinds}
        self._attn_absorbed = {kind: self._attention_template(kind, absorbed=True)
                               for kind in attn_kinds}
        self._coeffs: dict[bool, tuple[float, float, float]] = {}

    # --- structure --------------------------------------------------------------------------

    def structure(self, kind: str | bool, absorbed: bool = False) -> LayerStructure:
        """Template choices of one layer of ``kind`` (:meth:`ModelSpec.layer_kind`; a bool
        means ``moe`` / ``dense``): fused attention, no SP, no comm overlap."""
        m, tp = self.model, self.plan.tp
        block, moe_layer = KIND_BLOCKS[kind_of(kind)]
        return LayerStructure(
            mla=m.mla is not None, q_lora=m.mla is not None and m.mla.q_lora_rank is not None,
            gated=m.mlp == "gated", flash=True, sp=False, moe=moe_layer,
            shared_experts=moe_layer and m.moe is not None and m.moe.num_shared_experts > 0,
            moe_latent=moe_layer and m.latent_moe,
            expert_tp=moe_layer and tp > 1, tp_overlap=False,
            mla_absorb=absorbed and m.mla is not None, parallel=m.parallel_block,
            parallel_two_norms=m.parallel_block_norms == 2,
            # each branch keeps its own TP all-reduce, as TensorRT-LLM 0.9's Falcon runs it
            # (the validated engine; vLLM merges them: not modelled)
            parallel_merged_tp=False, block=block)

    def _attention_template(self, kind: str, absorbed: bool) -> OpTemplate:
        temps = layer_template(self.structure(kind, absorbed))
        return next(t for t in temps if t.kind == "attention")

    # --- environments -----------------------------------------------------------------------

    def env(self, tokens: float) -> dict[str, float]:
        """Dimensions for ``tokens`` new tokens on one replica (``b = S = 1``: only attention
        depends on them, and it is bound per part by :meth:`attention_op`)."""
        env = dict(self._env)
        env.update(T=tokens, Tsp=tokens)
        moe = self.model.moe
        if moe is not None:
            k = float(moe.top_k)
            env.update(Tx=tokens * k, Td=tokens / self.plan.tp * k,
                       E_l=self.active_local_experts(tokens * self.plan.ep))
        return env

    def active_local_experts(self, engine_tokens: float) -> float:
        """Expected expert slots of one EP rank hit by ``engine_tokens`` tokens (top-k routing
        uniform over the ``S`` = experts + redundant slots): ``S/ep·(1 − (1 − k/S)^tokens)``."""
        moe = self.model.moe
        if moe is None:
            return 1.0
        slots = moe.num_experts + self.plan.redundant_experts
        miss = (1.0 - moe.top_k / slots) ** engine_tokens if engine_tokens > 0 else 0.0
        return slots / self.plan.ep * (1.0 - miss)

    # --- binding ----------------------------------------------------------------------------

    def _bind(self, t: OpTemplate, env: dict[str, float], layer: int,
              name: str | None = None) -> Op:
        mnk = None
        if t.mnk is not None:
            mnk = (t.mnk[0].evaluate(env), t.mnk[1].evaluate(env), t.mnk[2].evaluate(env))
        return Op(
            name=name or t.name, kind=t.kind, category="forward", layer=layer,
            flops=t.flops.evaluate(env), bytes=t.bytes.evaluate(env), mnk=mnk, comm=t.comm,
            group=t.group, size=evaluate(t.size, env), causal=t.causal,
            precision=(self.gemm_dtype if t.precision == "gemm" and t.name not in
                       UNQUANTIZED_GEMMS else "bf16"),
            count=evaluate(t.count, env) if t.count is not None else 1.0,
            fused_bytes=evaluate_optional(t.fused_bytes, env),
            head_dim=evaluate_optional(t.head_dim, env))

    def _keep(self, op: Op) -> bool:
        if op.kind == "comm":
            return (op.comm is not None and self.group_sizes.get(op.group or "", 1) > 1
                    and op.size > 0)
        return op.flops > 0 or op.bytes > 0

    def layer_ops(self, kind: str | bool, tokens: float, layer: int = 0) -> list[Op]:
        """Operators of one layer of ``kind`` for ``tokens`` replica tokens, attention and the
        SSD scan excluded (they depend on the step's shape: :meth:`step_ops`)."""
        env = self.env(tokens)
        out: list[Op] = []
        kind = kind_of(kind)
        moe_tp = KIND_BLOCKS[kind][1] and self.plan.ep == 1 and self.plan.tp > 1
        for t in self._templates[kind]:
            if t.kind == "attention" or t.group == "cp":
                continue
            if moe_tp and t.name == "expert_tp_in":
                continue  # MoE TP: tokens are already replicated on the TP ranks
            op = self._bind(t, env, layer)
            if moe_tp and t.name == "expert_tp_out":
                op = replace(op, comm="all_reduce", size=tokens * env["h"] * ACT_BYTES)
            if op.kind == "gemm" and op.count != 1.0:
                op = replace(op, count=1.0)  # all local experts in one grouped-GEMM kernel
            if self._keep(op):
                out.append(op)
        return out

    def attention_parts(self, shape: StepShape) -> list[AttentionPart]:
        """The attention kernels of one layer on one replica (zero parts omitted)."""
        r = 1.0 / self.plan.ep
        mla = self.model.mla is not None
        parts = []
        if shape.decode > 0:
            # a kernel without GQA sharing reads the K/V of a group once per query head
            reread = 1.0
            if self.plan.decode_attention == "per_head" and not mla:
                reread = self._env["a_t"] / self._env["g_t"]
            parts.append(AttentionPart("attention.decode", shape.decode * r,
                                       shape.decode_keys * r, shape.decode_keys * r * reread,
                                       causal=False, absorbed=mla))
        if shape.prefill_tokens > 0:
            parts.append(AttentionPart("attention.prefill", shape.prefill_tokens * r,
                                       shape.prefill_sq * r, shape.prefill_tokens * r,
                                       causal=True, absorbed=False))
        if shape.prefill_ctx_pairs > 0:
            parts.append(AttentionPart("attention.context", shape.prefill_tokens * r,
                                       shape.prefill_ctx_pairs * r, shape.prefill_ctx_keys * r,
                                       causal=False, absorbed=mla))
        return parts

    def attention_op(self, kind: str | bool, part: AttentionPart, layer: int = 0) -> Op:
        """One attention kernel bound from the template: ``T`` = queries, ``T·S`` = pairs,
        ``b·S`` = keys (exact for FLOPs and bytes; see module docstring)."""
        t = (self._attn_absorbed if part.absorbed else self._attn)[kind_of(kind)]
        s = part.pairs / part.queries
        env = dict(self._env)
        env.update(T=part.queries, Tsp=part.queries, S=s, b=part.keys / s)
        op = self._bind(t, env, layer, name=part.name)
        return replace(op, causal=part.causal)

    def _kernel_template(self, absorbed: bool) -> OpTemplate:
        """The attention kernel's template (the same for dense and MoE layers)."""
        return (self._attn_absorbed if absorbed else self._attn)[next(iter(self._attn))]

    def attention_head_dim(self, absorbed: bool) -> float | None:
        """Mean query-key / value head dim of the attention kernel (``Op.head_dim``)."""
        return evaluate_optional(self._kernel_template(absorbed).head_dim, self._env)

    def attention_coefficients(self, absorbed: bool) -> tuple[float, float, float]:
        """``(FLOPs per query·key pair, bytes per query, bytes per key)`` of the attention
        kernel (same for dense and MoE layers), read off the template at probe points; the
        template is linear in those three sums (checked)."""
        key = absorbed
        hit = self._coeffs.get(key)
        if hit is not None:
            return hit
        t = self._kernel_template(absorbed)

        def at(queries: float, pairs: float, keys: float) -> tuple[float, float]:
            s = pairs / queries
            env = dict(self._env)
            env.update(T=queries, Tsp=queries, S=s, b=keys / s)
            return t.flops.evaluate(env), t.bytes.evaluate(env)

        f1, b1 = at(1.0, 1.0, 1.0)
        _, b2 = at(2.0, 1.0, 1.0)  # one more query
        _, b3 = at(1.0, 1.0, 2.0)  # one more key
        per_q, per_k = b2 - b1, b3 - b1
        coeffs = (f1, per_q, per_k)
        f4, b4 = at(3.0, 7.0, 5.0)
        if not (math.isclose(f4, 7.0 * f1, rel_tol=1e-9)
                and math.isclose(b4, 3.0 * per_q + 5.0 * per_k, rel_tol=1e-9)
                and math.isclose(b1, per_q + per_k, rel_tol=1e-9, abs_tol=1e-9)):
            raise AssertionError("attention template is not linear in queries, pairs, keys")
        self._coeffs[key] = coeffs
        return coeffs

    def scan_ops(self, shape: StepShape, layer: int = 0) -> list[Op]:
        """The SSD scan / recurrent-update operators of one Mamba layer on one GPU of a
        replica for the step ``shape`` (:func:`codesign.workload.ssm.scan_ops`)."""
        r = 1.0 / self.plan.ep
        temp = next(t for t in self._templates["mamba"] if t.name == "ssd_scan")
        chunks = (shape.sequences - shape.decode) * r
        return ssm.scan_ops(self.model, self.plan.tp, temp, self._env, shape.prefill_tokens * r,
                            chunks, shape.decode * r, layer)

    def embedding_ops(self, tokens: float) -> list[Op]:
        """Vocabulary-parallel embedding lookup (first stage)."""
        env = self.env(tokens)
        ops = [self._bind(t, env, -1) for t in embedding_template(self.structure("dense"))]
        return [o for o in ops if self._keep(o)]

    def head_ops(self, sequences: float) -> list[Op]:
        """Final norm, logits of the last token of each request, TP gather, sampling."""
        env = self.env(sequences)
        temps = [t for t in head_template(self.structure("dense"))
                 if t.name in ("final_norm", "head_tp_in", "logits")]
        ops = [self._bind(t, env, -1) for t in (*temps, _LOGITS_GATHER, _SAMPLING)]
        return [o for o in ops if self._keep(o)]

    def p2p_op(self, tokens: float) -> Op:
        """Activations sent to the next pipeline stage."""
        return Op(name="pp_send", kind="comm", category="forward", layer=-1, comm="p2p",
                  group="pp", size=tokens * self.model.hidden_size * ACT_BYTES)

    def step_ops(self, shape: StepShape) -> list[list[Op]]:
        """Every operator of one step, per pipeline stage, for one GPU of a replica."""
        r = 1.0 / self.plan.ep
        tokens = shape.tokens * r
        parts = self.attention_parts(shape)
        out: list[list[Op]] = []
        for s, layers in enumerate(self.stages):
            ops: list[Op] = []
            if s == 0:
                ops += self.embedding_ops(tokens)
            for i in layers:
                kind = self.model.layer_kind(i)
                body = self.layer_ops(kind, tokens, i)
                if kind == "mamba":
                    mixed = self.scan_ops(shape, i)
                    cut = next(j for j, o in enumerate(body) if o.name == "gated_norm")
                elif kind in ATTENTION_KINDS:
                    mixed = [self.attention_op(kind, p, i) for p in parts]
                    cut = next((j for j, o in enumerate(body) if o.name == "out_proj"), 0)
                else:
                    mixed, cut = [], 0
                ops += body[:cut] + mixed + body[cut:]
            if s == len(self.stages) - 1:
                ops += self.head_ops(shape.sequences * r)
            elif tokens > 0 and self.plan.pp > 1:
                ops.append(self.p2p_op(tokens))
            out.append(ops)
        return out

    # --- sizes ------------------------------------------------------------------------------

    def kv_bytes_per_token_layer(self) -> float:
        """KV-cache bytes one token adds to one layer on one GPU (after TP): GQA
        ``2·max(kv_heads/tp, 1)·head_dim·bytes``; MLA ``(kv_lora_rank + rope_dim)·bytes``
        (the latent is not split over heads, so every TP rank holds it)."""
        m = self.model
        if m.mla is not None:
            return (m.mla.kv_lora_rank + m.mla.qk_rope_head_dim) * self.plan.kv_bytes
        return 2.0 * max(m.kv_heads / self.plan.tp, 1.0) * m.dim_per_head * self.plan.kv_bytes

    def kv_bytes_per_token_model(self) -> float:
        """Unique KV-cache bytes of one token over all layers (all heads, no TP copies)."""
        m = self.model
        if m.mla is not None:
            per_layer = (m.mla.kv_lora_rank + m.mla.qk_rope_head_dim) * self.plan.kv_bytes
        else:
            per_layer = 2.0 * m.kv_heads * m.dim_per_head * self.plan.kv_bytes
        return per_layer * m.attention_layers

    def state_bytes_per_seq_gpu(self) -> float:
        """Recurrent-state bytes one sequence holds on a GPU of the stage with the most Mamba
        layers (:mod:`codesign.workload.ssm`; 0 without Mamba layers), whatever its length."""
        return ssm.state_bytes_per_layer(self.model, self.plan.tp) * max(self.stage_mamba)

    def weight_bytes_per_gpu(self) -> list[float]:
        """Weight bytes held by one GPU of each pipeline stage: linear layers at the weight
        dtype; embeddings, LM head, norms and router at 16 bit."""
        m, p = self.model, self.plan
        wb = p.weight_bytes
        attn = P.attention_params_per_layer(m) / p.tp * wb + 2 * P.norm_params(m) * 2.0
        dense = P.dense_mlp_params(m) / p.tp * wb
        moe = 0.0
        if m.moe is not None:
            moe = ((m.moe.num_experts + p.redundant_experts) * P.routed_expert_params(m)
                   / (p.ep * p.tp) * wb
                   + P.shared_expert_params(m) / p.tp * wb
                   + P.router_params(m) * UNQUANTIZED_BYTES)
        # the LM head: its own matrix, or with tied embeddings a copy on the last stage when
        # that is not the first (Megatron keeps one per end of the pipeline)
        head = P.output_params(m) or (m.vocab_size * m.hidden_size if p.pp > 1 else 0)
        norm = P.norm_params(m) * 2.0  # one hybrid block's pre-norm
        per_kind = {"dense": attn + dense, "moe": attn + moe,
                    "mamba": P.mamba_params_per_layer(m) / p.tp * wb + norm,
                    "attention": P.attention_params_per_layer(m) / p.tp * wb + norm,
                    "mlp": dense + norm, "moe_mlp": moe + norm}
        out = []
        for s, layers in enumerate(self.stages):
            total = sum(per_kind[m.layer_kind(i)] for i in layers)
            if s == 0:
                total += P.embedding_params(m) / p.tp * UNQUANTIZED_BYTES
            if s == len(self.stages) - 1:
                total += (head / p.tp + P.norm_params(m)) * UNQUANTIZED_BYTES
            out.append(total)
        return out

    def model_flops(self, shape: StepShape) -> float:
        """FLOPs of the whole engine for one step as counted by convention (attention over the
        full ``n × n`` matrix of new tokens), i.e. Σ over GPUs of the bound operators."""
        per_gpu = sum(o.flops for stage in self.step_ops(shape) for o in stage)
        # each replica's tp GPUs share its work; pp stages hold disjoint layers
        return per_gpu * self.plan.tp * self.plan.ep
