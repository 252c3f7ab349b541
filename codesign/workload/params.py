"""Parameter counts of a :class:`~codesign.specs.model.ModelSpec`, exact to the weight.

Every count is an integer number of parameters (not bytes). Conventions:

* Linear layers are ``in x out`` weight matrices plus, where the model has biases
  (``attention_bias`` / ``mlp_bias``), an ``out``-sized bias vector. Biases are counted in the
  bucket of the module they belong to (attention, dense MLP, routed/shared experts, router),
  so the per-layer helpers and the totals agree and routed-expert biases scale with top-k.
* Norms have ``h`` parameters (RMSNorm) or ``2h`` (LayerNorm: weight + bias); each layer has
  two (pre-attention and pre-MLP) and the model has one final norm. MLA's internal norms on the
  compressed query/KV latents are part of attention.
* ``active`` is the number of parameters a token touches: everything except the routed experts
  it is not sent to (routed experts contribute ``top_k / num_experts`` of their weights). It
  includes the input embedding table; some publishers (DeepSeek, OpenAI gpt-oss) leave the
  input embedding out of their "activated parameters" figure.
* Hybrid models (``hybrid_override_pattern``) have one norm per block (per layer) instead of
  two, attention only in ``*`` blocks, dense MLPs only in ``-`` blocks, and Mamba-2 mixers
  (:func:`mamba_params_per_layer`) in ``M`` blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

from codesign.specs.model import ModelSpec


@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts by module, summed over all layers."""

    embedding: int
    """Input token embedding (+ learned position embedding)."""
    output: int
    """LM head; 0 when tied to the input embedding."""
    attention: int
    """All attention blocks (projections, their biases, MLA latent norms)."""
    mlp_dense: int
    """Dense-MLP layers (every layer of a dense model; the dense layers of an MoE model)."""
    moe_routed: int
    """All routed experts of all MoE layers."""
    moe_shared: int
    """All shared (always-active) experts of all MoE layers."""
    router: int
    """MoE router (gate) weights of all MoE layers."""
    norms: int
    """Per-layer norms and the final norm."""
    total: int
    """Sum of all of the above."""
    active: int
    """Parameters touched per token: ``total`` minus the routed experts not selected."""
    mamba: int = 0
    """All Mamba-2 mixers (in ``total``; their pre-norms are in ``norms``)."""

    @property
    def total_B(self) -> float:
        """Total parameters in billions."""
        return self.total / 1e9

    @property
    def active_B(self) -> float:
        """Active parameters per token in billions."""
        return self.active / 1e9

    @property
    def non_embedding(self) -> int:
        """Total without the input embedding and the (untied) LM head."""
        return self.total - self.embedding - self.output


def _linear(n_in: int, n_out: int, bias: bool) -> int:
    """Weights (+ bias) of one ``n_in -> n_out`` linear layer."""
    return n_in * n_out + (n_out if bias else 0)


def norm_params(model: ModelSpec, size: int | None = None) -> int:
    """Parameters of one norm over ``size`` features (default ``hidden_size``)."""
    width = model.hidden_size if size is None else size
    return 2 * width if model.norm == "layernorm" else width


def attention_params_per_layer(model: ModelSpec) -> int:
    """Parameters of one attention block (weights, biases, MLA latent norms; not the pre-norm).

    MHA/GQA: ``h*(a*d)`` [Q] + ``2*h*(kv*d)`` [K, V] + ``(a*d)*h`` [O].
    MLA: query path ``h*q_lora + norm(q_lora) + q_lora*a*(nope+rope)`` (or ``h*a*(nope+rope)``
    without ``q_lora_rank``); KV path ``h*(kv_lora+rope) + norm(kv_lora) + kv_lora*a*(nope+v)``;
    output ``a*v*h``.
    """
    h = model.hidden_size
    a = model.num_heads
    bias = model.attention_bias
    mla = model.mla
    if mla is None:
        d = model.dim_per_head
        q = _linear(h, a * d, bias)
        kv = 2 * _linear(h, model.kv_heads * d, bias)
        o = _linear(a * d, h, bias)
        return q + kv + o
    qk_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    if mla.q_lora_rank is not None:
        q = (
            _linear(h, mla.q_lora_rank, bias)
            + norm_params(model, mla.q_lora_rank)
            + _linear(mla.q_lora_rank, a * qk_dim, bias)
        )
    else:
        q = _linear(h, a * qk_dim, bias)
    kv = (
        _linear(h, mla.kv_lora_rank + mla.qk_rope_head_dim, bias)
        + norm_params(model, mla.kv_lora_rank)
        + _linear(mla.kv_lora_rank, a * (mla.qk_nope_head_dim + mla.v_head_dim), bias)
    )
    o = _linear(a * mla.v_head_dim, h, bias)
    return q + kv + o


def mamba_params_per_layer(model: ModelSpec) -> int:
    """Parameters of one Mamba-2 mixer (not its pre-norm); 0 without ``mamba``.

    As Megatron-Core's ``MambaMixer`` (megatron/core/ssm/mamba_mixer.py) and Hugging Face's
    ``NemotronHMamba2Mixer`` build it: ``in_proj`` ``h × (2·d_inner + 2·G·N + H)`` (z, x, B, C,
    dt), the depthwise ``conv1d`` ``conv_dim × d_conv`` (+ ``conv_dim`` bias), ``dt_bias``,
    ``A_log`` and ``D`` (``H`` each), the gated RMSNorm weight (``d_inner``) and ``out_proj``
    ``d_inner × h``; ``G`` groups, ``N`` state size, ``H`` heads.
    """
    mb = model.mamba
    if mb is None:
        return 0
    h, di, heads = model.hidden_size, mb.d_inner, mb.num_heads
    in_proj = _linear(h, 2 * di + 2 * mb.n_groups * mb.d_state + heads, mb.proj_bias)
    conv = mb.conv_dim * mb.d_conv + (mb.conv_dim if mb.conv_bias else 0)
    return in_proj + conv + 3 * heads + di + _linear(di, h, mb.proj_bias)


def ffn_params(model: ModelSpec, inner: int, width: int | None = None) -> int:
    """One MLP (dense or one expert) with inner size ``inner`` on tokens of ``width`` (default
    the hidden size): gated ``3*h*f``, plain ``2*h*f``."""
    h = model.hidden_size if width is None else width
    n_up = 2 if model.mlp == "gated" else 1
    return n_up * _linear(h, inner, model.mlp_bias) + _linear(inner, h, model.mlp_bias)


def dense_mlp_params(model: ModelSpec) -> int:
    """One dense-MLP layer (``ffn_hidden_size``)."""
    return ffn_params(model, model.ffn_hidden_size)


def routed_expert_params(model: ModelSpec) -> int:
    """One routed expert of one MoE layer; 0 for a dense model."""
    if model.moe is None:
        return 0
    return ffn_params(model, model.moe.expert_ffn_hidden_size, model.moe_token_width)


def latent_projection_params(model: ModelSpec) -> int:
    """LatentMoE's down (hidden -> latent) and up (latent -> hidden) projections of one MoE
    layer, shared by its routed experts; 0 without ``moe.latent_size``."""
    if model.moe is None or model.moe.latent_size is None:
        return 0
    h, lat = model.hidden_size, model.moe.latent_size
    return _linear(h, lat, model.mlp_bias) + _linear(lat, h, model.mlp_bias)


def shared_expert_params(model: ModelSpec) -> int:
    """All shared experts of one MoE layer; 0 for a dense model or none shared."""
    moe = model.moe
    if moe is None or moe.num_shared_experts == 0:
        return 0
    inner = moe.shared_expert_ffn_hidden_size or moe.expert_ffn_hidden_size
    return moe.num_shared_experts * ffn_params(model, inner)


def router_params(model: ModelSpec) -> int:
    """Router (gate) of one MoE layer: ``h * num_experts`` (+ bias with ``mlp_bias``), plus
    LatentMoE's shared latent projections (:func:`latent_projection_params`), which every
    token uses as it does the router."""
    if model.moe is None:
        return 0
    return (_linear(model.hidden_size, model.moe.num_experts, model.mlp_bias)
            + latent_projection_params(model))


def num_moe_layers(model: ModelSpec) -> int:
    """How many of the layers have an MoE MLP."""
    return sum(1 for layer in range(model.num_layers) if model.is_moe_layer(layer))


def mlp_params_per_layer(model: ModelSpec, layer_index: int) -> int:
    """Parameters of the MLP of layer ``layer_index`` (0-based), not counting its pre-norm.

    A dense layer gives :func:`dense_mlp_params`; an MoE layer gives all routed experts plus
    the shared experts plus the router.
    """
    if not 0 <= layer_index < model.num_layers:
        raise ValueError(f"layer_index {layer_index} out of range 0..{model.num_layers - 1}")
    return _mlp_params(model, model.is_moe_layer(layer_index))


def _mlp_params(model: ModelSpec, moe_layer: bool) -> int:
    """An MLP's parameters without its pre-norm: all routed experts, the shared experts and
    the router in an MoE layer, else :func:`dense_mlp_params`."""
    if not moe_layer or model.moe is None:
        return dense_mlp_params(model)
    return (model.moe.num_experts * routed_expert_params(model) + shared_expert_params(model)
            + router_params(model))


def layer_params(model: ModelSpec, layer_index: int) -> int:
    """All parameters of layer ``layer_index`` (0-based) with its norms: attention, MLP and two
    norms for a transformer layer; for a hybrid block its mixer, attention or MLP and its one
    pre-norm."""
    return kind_params(model, model.layer_kind(layer_index))


def kind_params(model: ModelSpec, kind: str) -> int:
    """All parameters of one layer of ``kind`` (:meth:`ModelSpec.layer_kind`) with its norms
    (see :func:`layer_params`)."""
    mlp = _mlp_params(model, kind in ("moe", "moe_mlp"))
    if kind in ("dense", "moe"):
        return attention_params_per_layer(model) + mlp + 2 * norm_params(model)
    body = {"mamba": mamba_params_per_layer, "attention": attention_params_per_layer}
    if kind in body:
        return body[kind](model) + norm_params(model)
    return mlp + norm_params(model)


def mtp_own_params(model: ModelSpec) -> int:
    """Parameters one MTP depth adds besides its block (DeepSeek-V3 report Sec. 2.2;
    Megatron-Core ``MultiTokenPredictionLayer``): the embedding norm and the hidden-state norm,
    the projection ``eh_proj`` (``2h -> h``, no bias) and its final norm. The embedding and
    the LM head are the main model's."""
    h = model.hidden_size
    return 3 * norm_params(model) + 2 * h * h


def mtp_params(model: ModelSpec) -> int:
    """Parameters of the multi-token-prediction modules (0 without MTP): per depth
    :func:`mtp_own_params` and its block (:attr:`ModelSpec.mtp_kinds`), once for all depths
    with ``mtp_shared_weights``. DeepSeek-V3: 14B over its 671B main model (README_WEIGHTS.md),
    11.5B of them unique (its embedding and head are shared)."""
    depth = mtp_own_params(model) + sum(kind_params(model, k) for k in model.mtp_kinds)
    return model.mtp_weight_copies * depth


def active_mlp_params_per_layer(model: ModelSpec, layer_index: int) -> int:
    """MLP parameters of layer ``layer_index`` that one token uses (top-k routed experts)."""
    if not model.is_moe_layer(layer_index):
        return mlp_params_per_layer(model, layer_index)
    assert model.moe is not None
    return (
        model.moe.top_k * routed_expert_params(model)
        + shared_expert_params(model)
        + router_params(model)
    )


def embedding_params(model: ModelSpec) -> int:
    """Input token embedding, plus ``seq_len * h`` for learned position embeddings."""
    emb = model.vocab_size * model.hidden_size
    if model.position_embedding == "learned":
        emb += model.seq_len * model.hidden_size
    return emb


def output_params(model: ModelSpec) -> int:
    """LM head ``h * vocab``; 0 when tied to the input embedding."""
    return 0 if model.tied_embeddings else model.vocab_size * model.hidden_size


def param_counts(model: ModelSpec) -> ParamCounts:
    """Parameter counts of ``model`` by module, with the total and the per-token active count."""
    n_moe = num_moe_layers(model)
    n_dense = model.count_kind("mlp") if model.is_hybrid else model.num_layers - n_moe
    embedding = embedding_params(model)
    output = output_params(model)
    attention = model.attention_layers * attention_params_per_layer(model)
    mamba = model.count_kind("mamba") * mamba_params_per_layer(model)
    mlp_dense = n_dense * dense_mlp_params(model)
    moe_routed = 0
    moe_active = 0
    if model.moe is not None:
        moe_routed = n_moe * model.moe.num_experts * routed_expert_params(model)
        moe_active = n_moe * model.moe.top_k * routed_expert_params(model)
    moe_shared = n_moe * shared_expert_params(model)
    router = n_moe * router_params(model)
    norms_per_layer = 1 if model.is_hybrid else 2
    norms = (norms_per_layer * model.num_layers + 1) * norm_params(model)
    total = (embedding + output + attention + mlp_dense + moe_routed + moe_shared + router
             + norms + mamba)
    return ParamCounts(
        embedding=embedding,
        output=output,
        attention=attention,
        mlp_dense=mlp_dense,
        moe_routed=moe_routed,
        moe_shared=moe_shared,
        router=router,
        norms=norms,
        total=total,
        active=total - moe_routed + moe_active,
        mamba=mamba,
    )
