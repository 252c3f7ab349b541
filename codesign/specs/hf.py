"""Build a :class:`ModelSpec` from a Hugging Face ``config.json``.

Supported ``model_type`` values (see :data:`SUPPORTED_MODEL_TYPES`): Llama, Mistral, Mixtral,
Qwen2, Qwen2-MoE, Qwen3, Qwen3-MoE, DeepSeek-V2/V3 (MLA + fine-grained MoE), gpt-oss and
Nemotron-H (hybrid Mamba-2 / attention / MLP blocks from ``hybrid_override_pattern`` or
``layers_block_type``; MoE blocks with routed and shared experts). When ``model_type`` is
absent it is inferred from ``architectures``.

What a ``ModelSpec`` cannot express is approximated and said here: Qwen3's per-head q/k norms,
Qwen2-MoE's shared-expert gate (one ``h``-vector per layer), gpt-oss attention sinks (one
scalar per head) and DeepSeek-V3's router score-correction bias are left out, and Qwen2's
bias-free ``o_proj`` is counted with a bias (each well under 0.01% of the parameters);
DeepSeek's multi-token-prediction modules (``num_nextn_predict_layers``) become
``mtp_num_layers``, which training prices and serving leaves out. Nemotron-H's
squared-ReLU MLP is a plain (two-matrix) MLP; a latent MoE (``moe_latent_size``) is refused.
The default sequence length is ``min(max_position_embeddings, 8192)``. Sliding-window
attention is read for Mistral, Mixtral and gpt-oss (``sliding_window``, ``layer_types``).
"""

from __future__ import annotations

from typing import Any

from codesign.errors import SpecError
from codesign.specs.model import ModelSpec

SUPPORTED_MODEL_TYPES: tuple[str, ...] = (
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "deepseek_v2",
    "deepseek_v3",
    "gpt_oss",
    "nemotron_h",
)

_ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "MixtralForCausalLM": "mixtral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "GptOssForCausalLM": "gpt_oss",
    "NemotronHForCausalLM": "nemotron_h",
}

MAX_DEFAULT_SEQ_LEN = 8192
"""Cap on the default training sequence length taken from ``max_position_embeddings``."""


class _Reader:
    """Typed access to config keys with one-line :class:`SpecError` messages."""

    def __init__(self, config: dict[str, Any], model_type: str, origin: str) -> None:
        self.config = config
        self.model_type = model_type
        self.where = f"{origin}: " if origin else ""

    def error(self, msg: str) -> SpecError:
        supported = ", ".join(SUPPORTED_MODEL_TYPES)
        return SpecError(f"{self.where}HF config (model_type '{self.model_type}'): {msg} "
                         f"(supported model_type values: {supported})")

    def _int(self, key: str, value: Any, minimum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(f"key '{key}' must be an integer >= {minimum}, got {value!r}")
        return value

    def req(self, key: str, minimum: int = 1) -> int:
        """A required integer key."""
        if self.config.get(key) is None:
            raise self.error(f"missing required key '{key}'")
        return self._int(key, self.config[key], minimum)

    def opt(self, key: str, minimum: int = 1) -> int | None:
        """An optional integer key; ``None`` when absent (or ``null`` in the file)."""
        value = self.config.get(key)
        if value is None:
            return None
        return self._int(key, value, minimum)

    def get(self, key: str, default: int, minimum: int = 1) -> int:
        """An optional integer key with a default."""
        value = self.opt(key, minimum)
        return default if value is None else value

    def flag(self, key: str, default: bool) -> bool:
        """An optional boolean key."""
        value = self.config.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(f"key '{key}' must be true or false, got {value!r}")
        return value

    def int_list(self, key: str) -> list[int]:
        """An optional list of integers (empty when absent)."""
        value = self.config.get(key) or []
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise self.error(f"key '{key}' must be a list of integers, got {value!r}")
        return list(value)


def _model_type(config: dict[str, Any], origin: str) -> str:
    model_type = config.get("model_type")
    if model_type is None:
        for arch in config.get("architectures") or []:
            if arch in _ARCHITECTURES:
                return _ARCHITECTURES[arch]
        raise _Reader(config, "?", origin).error(
            "missing required key 'model_type' (and no known 'architectures' entry)")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise _Reader(config, str(model_type), origin).error("unsupported model_type")
    return str(model_type)


def _qwen_moe_layout(r: _Reader) -> tuple[int, int]:
    """(first_dense_layers, layer_frequency) for Qwen-MoE's ``decoder_sparse_step``.

    Qwen puts an MoE MLP on layer ``i`` iff ``(i + 1) % step == 0`` and ``i`` is not in
    ``mlp_only_layers``; representable when ``mlp_only_layers`` is a leading run of layers
    (with ``step == 1``) or empty.
    """
    step = r.get("decoder_sparse_step", 1)
    dense_only = sorted(set(r.int_list("mlp_only_layers")))
    if not dense_only:
        return step - 1, step
    if step == 1 and dense_only == list(range(len(dense_only))):
        return len(dense_only), 1
    raise r.error(f"key 'mlp_only_layers' = {dense_only} with decoder_sparse_step {step} is "
                  "not a layout ModelSpec can express (leading dense layers, then every k-th)")


def _dense(r: _Reader, config: dict[str, Any]) -> dict[str, Any]:
    """Llama, Mistral, Qwen2/3: a gated MLP of ``intermediate_size``."""
    return {"ffn_hidden_size": r.req("intermediate_size")}


def _mixtral(r: _Reader, config: dict[str, Any]) -> dict[str, Any]:
    ffn = r.req("intermediate_size")
    return {"ffn_hidden_size": ffn,
            "moe": {"num_experts": r.req("num_local_experts"),
                    "top_k": r.req("num_experts_per_tok"), "expert_ffn_hidden_size": ffn}}


def _qwen_moe(r: _Reader, config: dict[str, Any]) -> dict[str, Any]:
    expert_ffn = r.req("moe_intermediate_size")
    first_dense, freq = _qwen_moe_layout(r)
    moe: dict[str, Any] = {
        "num_experts": r.req("num_experts"),
        "top_k": r.req("num_experts_per_tok"),
        "expert_ffn_hidden_size": expert_ffn,
        "first_dense_layers": first_dense,
        "layer_frequency": freq,
    }
    shared = r.get("shared_expert_intermediate_size", 0, minimum=0)
    if r.model_type == "qwen2_moe" and shared:
        moe["num_shared_experts"] = 1
        moe["shared_expert_ffn_hidden_size"] = shared
    return {"ffn_hidden_size": r.get("intermediate_size", expert_ffn), "moe": moe}


def _deepseek(r: _Reader, config: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "num_kv_heads": None,  # MLA: K/V heads equal query heads
        "ffn_hidden_size": r.req("intermediate_size"),
        "mla": {
            "q_lora_rank": r.opt("q_lora_rank"),
            "kv_lora_rank": r.req("kv_lora_rank"),
            "qk_nope_head_dim": r.req("qk_nope_head_dim"),
            "qk_rope_head_dim": r.req("qk_rope_head_dim", minimum=0),
            "v_head_dim": r.req("v_head_dim"),
        },
    }
    if config.get("n_routed_experts") is not None:
        first_k = r.get("first_k_dense_replace", 0, minimum=0)
        freq = r.get("moe_layer_freq", 1)
        # HF: MoE iff layer >= first_k_dense_replace and layer % moe_layer_freq == 0.
        first_moe = -(-first_k // freq) * freq
        out["moe"] = {
            "num_experts": r.req("n_routed_experts"),
            "top_k": r.req("num_experts_per_tok"),
            "expert_ffn_hidden_size": r.req("moe_intermediate_size"),
            "num_shared_experts": r.get("n_shared_experts", 0, minimum=0),
            "first_dense_layers": first_moe,
            "layer_frequency": freq,
        }
        # group-limited routing (DeepSeek-V2/V3: n_group, topk_group); one group = none
        groups, per_token = r.opt("n_group"), r.opt("topk_group")
        if groups and per_token and groups > 1 and per_token < groups:
            out["moe"].update(router_num_groups=groups, router_group_topk=per_token)
    return out


def _gpt_oss(r: _Reader, config: dict[str, Any]) -> dict[str, Any]:
    expert_ffn = r.req("intermediate_size")
    top_k = r.opt("num_experts_per_tok") or r.opt("experts_per_token")
    if top_k is None:
        raise r.error("missing required key 'num_experts_per_tok'")
    return {
        "ffn_hidden_size": expert_ffn,
        "head_dim": r.req("head_dim"),
        "attention_bias": r.flag("attention_bias", True),
        "mlp_bias": True,  # expert and router linears carry biases
        "moe": {"num_experts": r.req("num_local_experts"), "top_k": top_k,
                "expert_ffn_hidden_size": expert_ffn},
    }


#: model types whose ``sliding_window`` key applies to attention (Qwen2/3 configs carry one
#: that ``use_sliding_window: false`` switches off, and ``max_window_layers`` splits it:
#: not read)
_WINDOWED_TYPES = ("mistral", "mixtral", "gpt_oss")


def _windows(r: _Reader, config: dict[str, Any]) -> dict[str, Any]:
    """``sliding_window`` and ``full_attention_interval`` from ``sliding_window`` and
    ``layer_types`` (``sliding_attention`` / ``full_attention`` per layer); without
    ``layer_types`` gpt-oss alternates windowed and full layers (model card Sec. 2.1) and
    Mistral/Mixtral window every layer."""
    window = r.opt("sliding_window")
    if r.model_type not in _WINDOWED_TYPES or window is None:
        return {}
    types = config.get("layer_types")
    if types is None:
        return {"sliding_window": window,
                "full_attention_interval": 2 if r.model_type == "gpt_oss" else None}
    if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
        raise r.error(f"key 'layer_types' must be a list of strings, got {types!r}")
    full = [i for i, t in enumerate(types) if t == "full_attention"]
    if len(full) == len(types):
        return {}
    if not full:
        return {"sliding_window": window}
    k = full[0] + 1
    if full != list(range(k - 1, len(types), k)):
        raise r.error("key 'layer_types': full_attention layers must be every k-th layer "
                      f"(layers {k - 1}, {2 * k - 1}, ...), got layers {full}")
    return {"sliding_window": window, "full_attention_interval": k}


#: Nemotron-H ``layers_block_type`` names -> ``hybrid_override_pattern`` symbols
_BLOCK_SYMBOLS = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}


def _hybrid_pattern(r: _Reader, config: dict[str, Any]) -> str:
    """The block pattern: ``hybrid_override_pattern``, else ``layers_block_type`` (a list of
    ``mamba`` / ``attention`` / ``mlp`` / ``moe``)."""
    pattern = config.get("hybrid_override_pattern")
    if pattern is None and isinstance(config.get("layers_block_type"), list):
        blocks = config["layers_block_type"]
        if not all(b in _BLOCK_SYMBOLS for b in blocks):
            raise r.error(f"key 'layers_block_type' must list {sorted(_BLOCK_SYMBOLS)}, "
                          f"got {blocks!r}")
        pattern = "".join(_BLOCK_SYMBOLS[b] for b in blocks)
    if not isinstance(pattern, str) or not pattern:
        raise r.error("missing required key 'hybrid_override_pattern' (a string of M, *, -, E)")
    return pattern


def _nemotron_h(r: _Reader, config: dict[str, Any]) -> dict[str, Any]:
    """Nemotron-H (Hugging Face ``NemotronHConfig``): one block per layer."""
    pattern = _hybrid_pattern(r, config)
    out: dict[str, Any] = {
        "hybrid_override_pattern": pattern,
        "ffn_hidden_size": r.req("intermediate_size") if "-" in pattern
        else r.get("intermediate_size", 1),
        "mlp": "plain",  # mlp_hidden_act relu2: up and down projections only
        "mlp_bias": r.flag("mlp_bias", False),
        "mamba": {
            "num_heads": r.req("mamba_num_heads"),
            "head_dim": r.req("mamba_head_dim"),
            "d_state": r.req("ssm_state_size"),
            "n_groups": r.get("n_groups", 1),
            "d_conv": r.get("conv_kernel", 4),
            "chunk_size": r.get("chunk_size", 256),
            "conv_bias": r.flag("use_conv_bias", True),
            "proj_bias": r.flag("mamba_proj_bias", False),
        },
    }
    head_dim = r.opt("attention_head_dim")
    if head_dim is not None:
        out["head_dim"] = head_dim
    if "E" in pattern:
        if config.get("moe_latent_size") is not None:
            raise r.error("key 'moe_latent_size': latent MoE projections are not supported")
        shared = r.get("moe_shared_expert_intermediate_size", 0, minimum=0)
        out["moe"] = {
            "num_experts": r.req("n_routed_experts"),
            "top_k": r.req("num_experts_per_tok"),
            "expert_ffn_hidden_size": r.req("moe_intermediate_size"),
            "num_shared_experts": r.get("n_shared_experts", 1 if shared else 0, minimum=0),
            "shared_expert_ffn_hidden_size": shared or None,
        }
    return out


#: per supported ``model_type``, the fields that differ between architectures
_ARCHITECTURE = {
    "llama": _dense, "mistral": _dense, "qwen2": _dense, "qwen3": _dense,
    "mixtral": _mixtral, "qwen2_moe": _qwen_moe, "qwen3_moe": _qwen_moe,
    "deepseek_v2": _deepseek, "deepseek_v3": _deepseek, "gpt_oss": _gpt_oss,
    "nemotron_h": _nemotron_h,
}


def model_from_hf_config(config: dict[str, Any], name: str, origin: str = "") -> ModelSpec:
    """A :class:`ModelSpec` from a Hugging Face ``config.json`` dict.

    Raises :class:`SpecError` naming the key when a required key is missing or malformed, or
    when the ``model_type`` is not one of :data:`SUPPORTED_MODEL_TYPES`.
    """
    if not isinstance(config, dict):
        where = f"{origin}: " if origin else ""
        raise SpecError(f"{where}HF config must be a JSON object, got {type(config).__name__}")
    model_type = _model_type(config, origin)
    r = _Reader(config, model_type, origin)

    num_layers = r.req("num_hidden_layers")
    hidden = r.req("hidden_size")
    heads = r.req("num_attention_heads")
    data: dict[str, Any] = {
        "kind": "model",
        "name": name,
        "num_layers": num_layers,
        "hidden_size": hidden,
        "num_heads": heads,
        "num_kv_heads": r.opt("num_key_value_heads"),
        "vocab_size": r.req("vocab_size"),
        "mlp": "gated",
        "norm": "rmsnorm",
        "position_embedding": "rope",
        "tied_embeddings": r.flag("tie_word_embeddings", False),
        "attention_bias": r.flag("attention_bias", False),
        "mlp_bias": r.flag("mlp_bias", False) if model_type == "llama" else False,
        "sources": {"architecture": f"Hugging Face config.json ({origin or 'dict'}), "
                                    f"model_type {model_type}"},
    }
    if model_type in ("deepseek_v2", "deepseek_v3"):
        data["mtp_num_layers"] = r.get("num_nextn_predict_layers", 0, minimum=0)
    max_pos = r.opt("max_position_embeddings")
    if max_pos is not None:
        data["seq_len"] = min(max_pos, MAX_DEFAULT_SEQ_LEN)
    head_dim = r.opt("head_dim")
    if head_dim is not None:
        data["head_dim"] = head_dim

    if model_type in ("qwen2", "qwen2_moe"):
        data["attention_bias"] = True  # Qwen2 has q/k/v biases (no o_proj bias)
    data.update(_ARCHITECTURE[model_type](r, config))
    data.update(_windows(r, config))
    return ModelSpec.parse(data, origin)
