"""Model spec: dense or MoE transformers (MHA/GQA/MLA attention, gated or plain MLP), and
hybrid stacks of Mamba-2 mixers, attention and MLP blocks (Nemotron-H, pure Mamba-2)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from codesign.specs.base import Spec

#: bounds far beyond any published model (the largest have ~200 layers and widths under
#: 10^6): a value past them is a typo or a fuzzed input, refused before it allocates anything
MAX_LAYERS = 100_000
MAX_WIDTH = 100_000_000
#: multi-token-prediction depths beyond any published recipe (DeepSeek-V3 trains 1,
#: Nemotron 3 Super 2)
MAX_MTP_DEPTHS = 64
#: blocks in hybrid_override_pattern symbols (:data:`HYBRID_SYMBOLS`)
BLOCK_PATTERN = r"^[M*\-E]+$"


def _block_pattern(max_length: int, description: str) -> Any:
    """An optional field of blocks in hybrid_override_pattern symbols (:data:`BLOCK_PATTERN`),
    at most ``max_length`` of them."""
    return Field(default=None, pattern=BLOCK_PATTERN, max_length=max_length,
                 description=description)


class MLASpec(Spec):
    """Multi-head latent attention (DeepSeek-V2/V3): low-rank compressed queries and KV."""

    q_lora_rank: int | None = Field(default=None, ge=1, description="None = full-rank queries")
    kv_lora_rank: int = Field(ge=1)
    qk_nope_head_dim: int = Field(ge=1)
    qk_rope_head_dim: int = Field(ge=0)
    v_head_dim: int = Field(ge=1)


class MoESpec(Spec):
    """Mixture-of-experts MLP."""

    num_experts: int = Field(ge=1, description="routed experts per MoE layer")
    top_k: int = Field(ge=1, description="routed experts per token")
    expert_ffn_hidden_size: int = Field(ge=1, le=MAX_WIDTH)
    num_shared_experts: int = Field(default=0, ge=0, description="always-active experts")
    shared_expert_ffn_hidden_size: int | None = Field(
        default=None, ge=1, description="per shared expert; default expert_ffn_hidden_size"
    )
    latent_size: int | None = Field(
        default=None, ge=1, le=MAX_WIDTH,
        description="LatentMoE: the routed experts work in this width instead of the hidden "
                    "size; a down projection (hidden -> latent) before the dispatch and an up "
                    "projection (latent -> hidden) after the combine, shared by all experts, "
                    "so tokens travel and experts compute at the latent width (Nemotron 3 "
                    "Super, arXiv 2512.20856; Megatron-Core --moe-latent-size). Shared experts "
                    "and the router keep the hidden size. None = no latent projection")
    first_dense_layers: int = Field(default=0, ge=0, description="leading layers with dense MLP")
    layer_frequency: int = Field(default=1, ge=1, description="every k-th layer is MoE")
    capacity_factor: float | None = Field(
        default=None, gt=0,
        description="expert capacity as a multiple of the balanced load: capacity = tokens x "
                    "top_k / experts x capacity_factor, tokens beyond it dropped and buffers "
                    "padded to it (Switch Transformer, Fedus et al. 2022, Sec. 2.1; GShard; "
                    "Megatron-Core --moe-expert-capacity-factor with "
                    "--moe-pad-expert-input-to-capacity); None = dropless")
    router_num_groups: int | None = Field(
        default=None, ge=1,
        description="group-limited (device/node-limited) routing: the experts split into this "
                    "many groups of consecutive experts, and a token's experts are chosen from "
                    "router_group_topk of them (DeepSeek-V3: 8 groups, 4 per token, so a token "
                    "reaches at most 4 nodes; HF n_group / topk_group, Megatron-Core "
                    "--moe-router-num-groups / --moe-router-group-topk); None = any expert")
    router_group_topk: int | None = Field(
        default=None, ge=1, description="groups a token's experts are chosen from (with "
                                        "router_num_groups)")
    load_imbalance: float = Field(
        default=1.0, ge=1,
        description="tokens routed to the busiest expert rank / its balanced share, in a "
                    "dropless MoE: the synchronous all-to-all and the expert GEMMs wait for that "
                    "rank. 1.0 = balanced (benchmarks that force balance); set it from a "
                    "measurement of the router")

    @property
    def load_factor(self) -> float:
        """Expert work of the busiest rank / its balanced share: the capacity factor when
        buffers are padded to capacity, else the load imbalance."""
        return self.capacity_factor if self.capacity_factor is not None else self.load_imbalance

    @model_validator(mode="after")
    def _check(self) -> MoESpec:
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k ({self.top_k}) > num_experts ({self.num_experts})")
        g, m = self.router_num_groups, self.router_group_topk
        if (g is None) != (m is None):
            raise ValueError("router_num_groups and router_group_topk go together")
        if g is not None and m is not None:
            if self.num_experts % g:
                raise ValueError(f"router_num_groups ({g}) must divide num_experts "
                                 f"({self.num_experts})")
            if m > g:
                raise ValueError(f"router_group_topk ({m}) > router_num_groups ({g})")
            if self.top_k > m * (self.num_experts // g):
                raise ValueError(f"top_k ({self.top_k}) > the experts of router_group_topk "
                                 f"({m}) groups")
        return self


#: block types of a hybrid layer pattern (Megatron-Core ``hybrid_override_pattern``,
#: megatron/core/ssm/mamba_hybrid_layer_allocation.py; Hugging Face ``NemotronHConfig``):
#: ``M`` Mamba-2 mixer, ``*`` self-attention, ``-`` dense MLP, ``E`` MoE MLP
HYBRID_SYMBOLS: dict[str, str] = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe_mlp"}


class MambaSpec(Spec):
    """Mamba-2 mixer (Dao & Gu 2024, "Transformers are SSMs", arXiv 2405.21060, Sec. 7):
    ``in_proj`` to ``[z, x, B, C, dt]``, a depthwise causal conv1d over ``[x, B, C]``, the SSD
    scan, a gated RMSNorm and ``out_proj``. ``d_inner = num_heads × head_dim`` (Megatron-Core
    megatron/core/ssm/mamba_mixer.py sets it so when ``mamba_num_heads`` is given)."""

    num_heads: int = Field(ge=1, le=MAX_WIDTH, description="SSM heads (HF mamba_num_heads)")
    head_dim: int = Field(default=64, ge=1, le=MAX_WIDTH,
                          description="channels per SSM head P (HF mamba_head_dim)")
    d_state: int = Field(ge=1, le=MAX_WIDTH, description="SSM state size N (HF ssm_state_size)")
    n_groups: int = Field(default=1, ge=1, le=MAX_WIDTH,
                          description="B/C groups, shared by num_heads/n_groups heads each")
    d_conv: int = Field(default=4, ge=1, le=1024, description="causal conv1d kernel width")
    chunk_size: int = Field(default=256, ge=1, le=MAX_WIDTH,
                            description="SSD chunk length Q (tokens per block of the scan)")
    conv_bias: bool = Field(default=True, description="conv1d has a bias per channel")
    proj_bias: bool = Field(default=False, description="in_proj / out_proj have biases")

    @model_validator(mode="after")
    def _check(self) -> MambaSpec:
        if self.num_heads % self.n_groups:
            raise ValueError(f"num_heads ({self.num_heads}) not divisible by n_groups "
                             f"({self.n_groups})")
        return self

    @property
    def d_inner(self) -> int:
        """Inner width ``num_heads × head_dim`` (``expand × hidden_size`` in Mamba-2 configs)."""
        return self.num_heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the conv1d: ``x``, ``B`` and ``C``: ``d_inner + 2 × n_groups × d_state``."""
        return self.d_inner + 2 * self.n_groups * self.d_state


class ModelSpec(Spec):
    """A decoder-only transformer."""

    kind: Literal["model"] = "model"
    name: str
    aliases: tuple[str, ...] = ()
    num_layers: int = Field(ge=1, le=MAX_LAYERS)
    hidden_size: int = Field(ge=1, le=MAX_WIDTH)
    num_heads: int = Field(ge=1, le=MAX_WIDTH)
    num_kv_heads: int | None = Field(default=None, ge=1, description="None = num_heads (MHA)")
    head_dim: int | None = Field(default=None, ge=1, description="None = hidden/num_heads")
    ffn_hidden_size: int = Field(ge=1, le=MAX_WIDTH, description="dense MLP inner size")
    vocab_size: int = Field(ge=1, le=MAX_WIDTH)
    seq_len: int = Field(default=2048, ge=1, description="default training sequence length")
    mlp: Literal["gated", "plain"] = Field(
        default="gated", description="gated = SwiGLU/GeGLU (3 matrices); plain = 2 matrices"
    )
    norm: Literal["layernorm", "rmsnorm"] = "rmsnorm"
    position_embedding: Literal["rope", "learned", "alibi", "none"] = "rope"
    tied_embeddings: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    sliding_window: int | None = Field(
        default=None, ge=1,
        description="tokens each query attends to in windowed attention layers (Mistral 7B "
                    "4096, gpt-oss 128); None = full causal attention in every layer. "
                    "Priced in training steps; serving prices full attention (upper bound)")
    full_attention_interval: int | None = Field(
        default=None, ge=1,
        description="with sliding_window: every k-th attention layer keeps full attention "
                    "(gpt-oss and Gemma 2: 2, Gemma 3: 6); None = every layer is windowed")
    parallel_block: bool = Field(
        default=False,
        description="attention and MLP read the same normalized input and their outputs "
                    "are summed (GPT-J, GPT-NeoX, PaLM, Falcon): one norm, one tensor-"
                    "parallel entry and exit per layer in training")
    parallel_block_norms: Literal[1, 2] = Field(
        default=1, description="norms of a parallel block: 1 = shared by both branches "
                               "(GPT-J, PaLM), 2 = one per branch (Falcon-180B, GPT-NeoX)")
    mla: MLASpec | None = None
    moe: MoESpec | None = None
    mamba: MambaSpec | None = Field(
        default=None, description="Mamba-2 mixer of the 'M' blocks of hybrid_override_pattern")
    hybrid_override_pattern: str | None = _block_pattern(
        MAX_LAYERS, "one block per layer: M = Mamba-2 mixer, * = attention, - = dense MLP, "
                    "E = MoE MLP, each with its own pre-norm (Megatron-Core / Nemotron-H "
                    "hybrid_override_pattern); None = every layer is attention + MLP")
    mtp_num_layers: int = Field(
        default=0, ge=0, le=MAX_MTP_DEPTHS,
        description="multi-token-prediction depths trained with the model (DeepSeek-V3 "
                    "report Sec. 2.2; Megatron-Core mtp_num_layers): depth k predicts token "
                    "i+k+1 from depth k-1's hidden states through its own two norms, a "
                    "2h -> h projection, one block (mtp_block_pattern) and the shared LM head "
                    "with its loss, on the last pipeline stage. 0 = none. Training only: "
                    "serving runs the main model (MTP drafting: serving's speculative spec)")
    mtp_block_pattern: str | None = _block_pattern(
        MAX_MTP_DEPTHS, "hybrid models: the blocks of one MTP depth in hybrid_override_pattern "
                        "symbols (Megatron-Core mtp_hybrid_override_pattern; Nemotron 3 Super: "
                        "'*E', attention then MoE); None = one layer like the model's last")
    mtp_shared_weights: bool = Field(
        default=False,
        description="every MTP depth runs one shared set of MTP weights (Megatron-Core "
                    "mtp_use_repeated_layer): parameters held once, computed per depth")
    published_params_B: float | None = Field(
        default=None, description="total, billions (the main model: MTP modules not counted)")
    sources: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        kv = self.kv_heads
        if self.num_heads % kv:
            raise ValueError(f"num_heads ({self.num_heads}) not divisible by num_kv_heads ({kv})")
        if self.head_dim is None and self.mla is None and self.hidden_size % self.num_heads:
            raise ValueError("hidden_size not divisible by num_heads; set head_dim")
        pattern = self.hybrid_override_pattern
        if pattern is not None:
            if len(pattern) != self.num_layers:
                raise ValueError(f"hybrid_override_pattern has {len(pattern)} blocks, "
                                 f"num_layers is {self.num_layers}")
            self._check_blocks("hybrid_override_pattern", pattern)
        elif self.mamba is not None:
            raise ValueError("mamba needs a hybrid_override_pattern saying where its blocks go")
        if self.full_attention_interval is not None and self.sliding_window is None:
            raise ValueError("full_attention_interval needs a sliding_window")
        mtp = self.mtp_block_pattern
        if mtp is not None:
            if self.mtp_num_layers == 0:
                raise ValueError("mtp_block_pattern needs mtp_num_layers >= 1")
            if pattern is None:
                raise ValueError("mtp_block_pattern is for hybrid models (set "
                                 "hybrid_override_pattern); a transformer's MTP block is "
                                 "one layer like its last")
            self._check_blocks("mtp_block_pattern", mtp)
        return self

    def _check_blocks(self, field: str, pattern: str) -> None:
        """Mamba (M) and MoE (E) blocks of ``pattern`` need their specs."""
        if "M" in pattern and self.mamba is None:
            raise ValueError(f"{field} has Mamba blocks (M) but no mamba")
        if "E" in pattern and self.moe is None:
            raise ValueError(f"{field} has MoE blocks (E) but no moe")

    @property
    def kv_heads(self) -> int:
        """Number of key/value heads (MHA when equal to num_heads)."""
        return self.num_kv_heads or self.num_heads

    @property
    def dim_per_head(self) -> int:
        """Head dimension of the (non-MLA) attention."""
        return self.head_dim or self.hidden_size // self.num_heads

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    def layer_kind(self, layer: int) -> str:
        """What layer ``layer`` (0-based) is: ``dense`` / ``moe`` (attention + MLP) without a
        hybrid pattern, else one block: ``mamba``, ``attention``, ``mlp`` or ``moe_mlp``."""
        if self.hybrid_override_pattern is not None:
            return HYBRID_SYMBOLS[self.hybrid_override_pattern[layer]]
        return "moe" if self.is_moe_layer(layer) else "dense"

    def count_kind(self, kind: str) -> int:
        """How many layers are of ``kind`` (see :meth:`layer_kind`)."""
        return sum(1 for i in range(self.num_layers) if self.layer_kind(i) == kind)

    @property
    def attention_layers(self) -> int:
        """Layers with a self-attention block (the ones holding a KV cache)."""
        if self.hybrid_override_pattern is None:
            return self.num_layers
        return self.hybrid_override_pattern.count("*")

    @property
    def windowed_attention_layers(self) -> int:
        """Attention layers that attend within :attr:`sliding_window` (0 without one): all
        but every :attr:`full_attention_interval`-th attention layer."""
        if self.sliding_window is None:
            return 0
        n = self.attention_layers
        k = self.full_attention_interval
        return n if k is None else n - n // k

    def attention_window_fraction(self, seq_len: float,
                                  document_tokens: float | None = None) -> float:
        """Attention FLOPs a causal kernel executes over ``seq_len`` tokens with this model's
        sliding windows, and with the sequence packed from documents of ``document_tokens``
        tokens that attend only to themselves, as a fraction of those of full causal attention
        over the sequence, averaged over the attention layers (1.0 without windows or
        documents, or when neither is shorter than the sequence).

        A query at position ``i`` of its document attends to ``min(i + 1, W)`` keys, so a
        document of ``l`` tokens executes ``l²/2`` query-key pairs (``W·l − W²/2`` under a
        window ``W < l``) and the ``S/l`` documents of the sequence ``2·pairs/(S·l)`` of the
        ``S²/2`` of full causal attention: ``l/S`` without a window, ``2W/S − (W/S)²`` for one
        document with a window (mask-granularity effects of the kernel's tiles are ignored).
        ASSUMPTION: every document has the mean length (longer documents in a mix cost more,
        ``E[l²]/E[l]``), and the model-wide average stands for every layer, so a pipeline
        stage holding more windowed layers than its share is priced at the average."""
        s = float(seq_len)
        doc = s if document_tokens is None else min(float(document_tokens), s)

        def fraction(w: float | None) -> float:
            pairs = doc * doc / 2 if w is None or doc <= w else w * doc - w * w / 2
            return 2 * pairs / (s * doc)

        windowed = self.windowed_attention_layers
        w = self.sliding_window
        if not windowed or w is None:
            return fraction(None)
        n = self.attention_layers
        return ((n - windowed) * fraction(None) + windowed * fraction(w)) / n

    @property
    def is_hybrid(self) -> bool:
        """Whether the layers are single blocks of a hybrid pattern."""
        return self.hybrid_override_pattern is not None

    @property
    def latent_moe(self) -> bool:
        """Whether the MoE layers project tokens to a latent width (``moe.latent_size``)."""
        return self.moe is not None and self.moe.latent_size is not None

    @property
    def moe_token_width(self) -> int:
        """Width of the tokens the routed experts receive and compute on: the LatentMoE
        latent size, else the hidden size."""
        if self.moe is not None and self.moe.latent_size is not None:
            return self.moe.latent_size
        return self.hidden_size

    @property
    def mtp_kinds(self) -> tuple[str, ...]:
        """Layer kinds (:meth:`layer_kind`) of the blocks of one MTP depth: those of
        :attr:`mtp_block_pattern`, else the kind of the last layer (Megatron-Core builds the
        MTP layer from the decoder's last layer spec: an MoE layer in DeepSeek-V3); empty
        without MTP."""
        if not self.mtp_num_layers:
            return ()
        if self.mtp_block_pattern is not None:
            return tuple(HYBRID_SYMBOLS[c] for c in self.mtp_block_pattern)
        return (self.layer_kind(self.num_layers - 1),)

    @property
    def mtp_blocks(self) -> int:
        """Blocks the MTP depths run in all (:attr:`mtp_kinds` per depth)."""
        return self.mtp_num_layers * len(self.mtp_kinds)

    @property
    def mtp_weight_copies(self) -> int:
        """Sets of MTP weights held: one per depth, or one for all with
        :attr:`mtp_shared_weights` (0 without MTP)."""
        return min(self.mtp_num_layers, 1) if self.mtp_shared_weights else self.mtp_num_layers

    def is_moe_layer(self, layer: int) -> bool:
        """Whether layer ``layer`` (0-based) has an MoE MLP."""
        if self.hybrid_override_pattern is not None:
            return self.hybrid_override_pattern[layer] == "E"
        if self.moe is None or layer < self.moe.first_dense_layers:
            return False
        return (layer - self.moe.first_dense_layers) % self.moe.layer_frequency == 0
