"""Serving engine specs: the models an engine serves (plan, engine settings, optional fixed
step costs), its batching scheduler, the KV link of a disaggregated engine, CPU pools and
memory tiers. Part of :mod:`codesign.specs.serving`, which re-exports every name."""

from __future__ import annotations

import functools
import re
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from codesign.specs.base import Spec
from codesign.specs.gpu import GpuSpec
from codesign.specs.inference import InferencePlan
from codesign.specs.model import ModelSpec
from codesign.specs.tiers import MemoryTierSpec as MemoryTierSpec  # shared with training
from codesign.specs.topology import TopologySpec

#: share of the HBM left after weights and activations given to the KV cache when not stated
#: (TensorRT-LLM ``kv_cache_free_gpu_mem_fraction`` default 0.9; vLLM's
#: ``gpu_memory_utilization`` is 0.9)
DEFAULT_KV_FRACTION = 0.9
#: tokens per step the activation workspace is sized for (TensorRT-LLM ``max_num_tokens``
#: default 8192)
DEFAULT_MAX_NUM_TOKENS = 8192
#: sequences in flight per replica unless the scheduler says otherwise (vLLM's max_num_seqs)
DEFAULT_MAX_NUM_SEQS = 256

def model_key(ref: str | ModelSpec) -> str:
    """The name a model is matched by across engines, clients and routes (normalized)."""
    return _normalized(ref if isinstance(ref, str) else ref.name)


@functools.lru_cache(maxsize=4096)
def _normalized(name: str) -> str:
    return re.sub(r"[\s_]+", "-", name.strip().lower())


# --- inference plan and step cost override ------------------------------------------------


class FixedStepCostSpec(Spec):
    """Constant step costs instead of the analytical model (hand-computable what-ifs, tests).

    A step with ``p`` new prefill tokens and ``d`` decoding sequences takes
    ``prefill_s_per_token·p + (decode_step_s + decode_s_per_seq·d if d > 0 else 0)``.
    """

    kind: Literal["fixed"] = "fixed"
    prefill_s_per_token: float = Field(ge=0, description="seconds per prefill token")
    decode_step_s: float = Field(ge=0, description="seconds per step that decodes anything")
    decode_s_per_seq: float = Field(default=0.0, ge=0, description="seconds per decoding seq")
    kv_capacity_tokens: int = Field(ge=1, description="KV-cache capacity of one replica")
    kv_bytes_per_token: float = Field(
        default=0.0, ge=0, description="KV bytes of one token, whole model (all layers, GPUs)")


class SpeculativeSpec(Spec):
    """Speculative decoding of a model (Leviathan et al. 2023, "Fast Inference from
    Transformers via Speculative Decoding", ICML; Chen et al. 2023, "Accelerating Large
    Language Model Decoding with Speculative Sampling"): every decode iteration a drafter
    proposes ``num_speculative_tokens`` tokens per sequence in that many forward passes, the
    target verifies them in one forward over ``k + 1`` tokens per sequence, and each sequence
    keeps its accepted drafts plus one token of the target. Drafts are accepted
    independently with probability ``acceptance_rate`` (Leviathan et al. Sec. 3.1), so a
    verify step emits ``(1 - a^(k+1)) / (1 - a)`` tokens per sequence on average.

    ``draft``: a smaller model (``draft_model``) on the same GPUs; ``mtp``: a multi-token
    prediction module of the target (DeepSeek-V3 report Sec. 2.2: one transformer block, a
    2h x h projection and the target's shared embedding and output head) run once per draft.
    """

    method: Literal["draft", "mtp"] = Field(
        description="draft: a separate draft model; mtp: the target's MTP module")
    draft_model: str | ModelSpec | None = Field(
        default=None, description="catalog name, file path or inline draft model (draft only)")
    draft_plan: InferencePlan | None = Field(
        default=None, description="plan of the draft model or MTP module; None = the "
                                  "target's plan with pp = 1")
    draft_step_cost: FixedStepCostSpec | None = Field(
        default=None, description="fixed draft/MTP step costs; required (and only allowed) "
                                  "when the target has fixed step_cost")
    num_speculative_tokens: int = Field(
        ge=1, le=16, description="draft tokens proposed per sequence per decode iteration (k)")
    acceptance_rate: float = Field(
        ge=0, le=1, description="probability that each draft token is accepted (i.i.d., "
                                "Leviathan et al. 2023 Sec. 3.1)")
    acceptance: Literal["sampled", "expected"] = Field(
        default="sampled",
        description="sampled: each sequence's accepted count per iteration is drawn with the "
                    "run's seed (tails of TPOT); expected: every sequence advances by the "
                    "expected tokens per iteration (fractional carry, deterministic)")
    draft_placement: Literal["same_engine"] = Field(
        default="same_engine", description="the drafter runs on the target's GPUs")

    @model_validator(mode="after")
    def _check_method(self) -> SpeculativeSpec:
        if self.method == "draft" and self.draft_model is None:
            raise ValueError("draft_model: required with method 'draft'")
        if self.method == "mtp" and self.draft_model is not None:
            raise ValueError("draft_model: not used with method 'mtp' (the module is the "
                             "target's)")
        return self

    @property
    def expected_tokens(self) -> float:
        """Expected tokens emitted per sequence per verify step:
        ``(1 - a^(k+1)) / (1 - a)``, ``k + 1`` at ``a = 1`` (Leviathan et al. Eq. 1)."""
        a, k = self.acceptance_rate, self.num_speculative_tokens
        if a >= 1.0:
            return float(k + 1)
        return (1.0 - a ** (k + 1)) / (1.0 - a)


class ModelEntrySpec(Spec):
    """A model an engine serves, with its plan and number of replicas."""

    model: str | ModelSpec = Field(description="catalog name, file path or inline model")
    plan: InferencePlan = Field(default_factory=InferencePlan)
    replicas: int | None = Field(
        default=None, ge=1,
        description="model replicas; None = the engine's devices / (tp·pp·ep) (one model only)")
    step_cost: FixedStepCostSpec | None = Field(
        default=None, description="fixed step costs instead of the analytical model")
    kv_cache_fraction: float = Field(
        default=DEFAULT_KV_FRACTION, gt=0, le=1,
        description="share of the HBM left after weights and activations given to the KV "
                    "cache (TensorRT-LLM kv_cache_free_gpu_mem_fraction, default 0.9)")
    max_num_tokens: int = Field(
        default=DEFAULT_MAX_NUM_TOKENS, ge=1,
        description="tokens per step the activation workspace is sized for (TensorRT-LLM "
                    "max_num_tokens, default 8192)")
    custom_allreduce: bool = Field(
        default=True, description="intra-node TP all-reduces may use custom NVLink kernels "
                                  "(False: NCCL only)")
    sustained_fraction: float | None = Field(
        default=None, gt=0.0, le=1.0,
        description="share of the GPU's microbenchmark GEMM/attention efficiency sustained in "
                    "serving steps (what 'codesign calibrate' fits on inference rows); None: "
                    "1.0, the microbenchmark figures (INFERENCE_SUSTAINED_FRACTION)")
    fused_allreduce_norm: bool = Field(
        default=False,
        description="TP all-reduces on the custom NVLink kernel also add the residual and "
                    "apply the next RMSNorm, one kernel (TensorRT-LLM AllReduceFusionOp."
                    "RESIDUAL_RMS_NORM; vLLM pass_config.enable_fi_allreduce_fusion; SGLang "
                    "--enable-flashinfer-allreduce-fusion); False: separate kernels")
    host_step_overhead_us: float = Field(
        default=0.0, ge=0.0, le=1e6,
        description="host time per engine step that the GPU waits for (scheduling, input "
                    "preparation, reading back the sampled tokens), microseconds; 0 = hidden "
                    "behind the GPU, as with TensorRT-LLM's overlap scheduler, SGLang's "
                    "overlap scheduler and vLLM --async-scheduling; frameworks that run the "
                    "host between steps pay it (measure it: it grows with the batch)")
    cuda_graph_batch_sizes: list[int] = Field(
        default_factory=list,
        description="decode-only steps with this many sequences per replica replay a "
                    "captured CUDA graph (kernels skip the host enqueue); empty = every step "
                    "eager. Framework defaults: vLLM captures up to 512 with padding "
                    "(enforce_eager off), SGLang up to cuda_graph_max_bs with padding, "
                    "TensorRT-LLM's PyTorch backend 1..32, 64, 128 without padding")
    cuda_graph_padding: bool = Field(
        default=False,
        description="a decode batch between captured sizes runs the next larger graph "
                    "(vLLM, SGLang; TensorRT-LLM cuda_graph_config.enable_padding)")

    deepep_low_latency: bool = Field(
        default=False,
        description="decode steps run the MoE dispatch/combine of an EP group that spans "
                    "nodes as DeepEP low-latency kernels (RDMA straight to each remote "
                    "rank; SGLang --enable-deepep-moe, DeepSeek's inference system); False: "
                    "the network model's all-to-all")

    speculative: SpeculativeSpec | None = Field(
        default=None, description="speculative decoding (draft model or MTP module); None = "
                                  "one token per sequence per decode step")

    @field_validator("cuda_graph_batch_sizes")
    @classmethod
    def _positive_sizes(cls, value: list[int]) -> list[int]:
        if any(v < 1 for v in value):
            raise ValueError("captured batch sizes must be >= 1")
        return value

    @model_validator(mode="after")
    def _check_speculative(self) -> ModelEntrySpec:
        sp = self.speculative
        if sp is None:
            return self
        if self.step_cost is not None and sp.draft_step_cost is None:
            raise ValueError("speculative.draft_step_cost: required when the model has a "
                             "fixed step_cost")
        if self.step_cost is None and sp.draft_step_cost is not None:
            raise ValueError("speculative.draft_step_cost: only with a fixed step_cost of "
                             "the model")
        if sp.draft_plan is not None and sp.draft_plan.ep != self.plan.ep:
            raise ValueError(f"speculative.draft_plan.ep: must equal the model's ep "
                             f"({self.plan.ep})")
        if sp.draft_plan is not None and sp.draft_plan.num_gpus > self.plan.num_gpus:
            raise ValueError(f"speculative.draft_plan: tp·pp·ep = {sp.draft_plan.num_gpus} "
                             f"exceeds the model's {self.plan.num_gpus} GPUs (same engine)")
        return self

    @property
    def key(self) -> str:
        """Normalized model name clients and routes refer to."""
        return model_key(self.model)


# --- schedulers -------------------------------------------------------------------------


#: how a paged scheduler admits requests against the KV pool (TensorRT-LLM's
#: ``CapacitySchedulerPolicy`` names)
CapacityPolicy = Literal["max_utilization", "guaranteed_no_evict"]
CAPACITY_POLICY_HELP = (
    "max_utilization: admit while the prompt's KV blocks are free, preempt (recompute) when "
    "decode runs out (vLLM); guaranteed_no_evict: admit only while the blocks of every "
    "admitted request's whole prompt and output fit, so nothing is ever preempted "
    "(TensorRT-LLM's default)")


class _PagedSettings(Spec):
    block_size_tokens: int = Field(default=16, ge=1, description="tokens per KV block")
    kv_capacity_tokens: int | None = Field(
        default=None, ge=1, description="KV tokens per replica; None = the step-cost model's")
    max_num_seqs: int = Field(default=DEFAULT_MAX_NUM_SEQS, ge=1,
                              description="sequences in flight per replica")


class StaticSchedulerSpec(_PagedSettings):
    """Static batching: a batch is formed when the replica is idle and runs until its longest
    request finishes; prompts are padded to the longest one and KV is reserved up front."""

    name: Literal["static"] = "static"
    max_batch_size: int = Field(default=8, ge=1, description="sequences per batch")
    batch_timeout_s: float = Field(
        default=0.0, ge=0, description="wait this long for a fuller batch once one is waiting")
    pad_to_longest: bool = Field(
        default=True, description="prefill/decode every sequence to the batch's longest")


class ContinuousSchedulerSpec(_PagedSettings):
    """vLLM-style continuous batching: admission by free KV blocks, prefill-first steps,
    preemption by recompute (latest admitted first) when decode needs a block."""

    name: Literal["continuous"] = "continuous"
    max_num_batched_tokens: int = Field(
        default=8192, ge=1, description="prefill tokens per step")
    watermark_fraction: float = Field(
        default=0.01, ge=0, lt=1, description="blocks kept free at admission (vLLM default)")
    capacity_policy: CapacityPolicy = Field(
        default="max_utilization", description=CAPACITY_POLICY_HELP)


class ChunkedPrefillSchedulerSpec(_PagedSettings):
    """Sarathi-style chunked prefill: every step decodes all running sequences and fills the
    rest of a token budget with prefill chunks."""

    name: Literal["chunked_prefill"] = "chunked_prefill"
    token_budget: int = Field(default=2048, ge=1, description="tokens per step (decode+prefill)")
    chunk_prompts: bool = Field(
        default=True,
        description="False: a prompt that fits the budget is scheduled whole (it waits for a "
                    "step with room, first come first served) and only longer prompts are "
                    "chunked (TensorRT-LLM without chunked context)")
    watermark_fraction: float = Field(default=0.01, ge=0, lt=1)
    capacity_policy: CapacityPolicy = Field(
        default="max_utilization", description=CAPACITY_POLICY_HELP)


class NetworkKvLink(Spec):
    """KV transfer over the topology's network model (one send per prefill GPU in parallel)."""

    via: Literal["network"] = "network"
    topology: str | None = Field(
        default=None, description="catalog topology; None = the prefill device's default")
    same_domain: bool = Field(
        default=False, description="prefill and decode replicas share a scale-up domain")


class DirectKvLink(Spec):
    """KV transfer over a dedicated link per prefill replica."""

    via: Literal["link"] = "link"
    bandwidth_GBps: float = Field(gt=0, description="link bandwidth per prefill replica, GB/s")
    latency_us: float = Field(default=0.0, ge=0, description="per transfer, us")


KvLinkSpec = Annotated[NetworkKvLink | DirectKvLink, Field(discriminator="via")]


class DisaggregatedSchedulerSpec(_PagedSettings):
    """Prefill on this engine, decode on ``decode_engine``: after prefill the request's KV is
    sent over ``kv_link`` to a decode replica that has reserved blocks for it."""

    name: Literal["disaggregated"] = "disaggregated"
    decode_engine: str = Field(description="engine that decodes (its own scheduler batches)")
    max_num_batched_tokens: int = Field(default=8192, ge=1, description="prefill tokens/step")
    kv_link: KvLinkSpec = Field(default_factory=NetworkKvLink)


SchedulerSpec = Annotated[
    StaticSchedulerSpec | ContinuousSchedulerSpec | ChunkedPrefillSchedulerSpec
    | DisaggregatedSchedulerSpec,
    Field(discriminator="name"),
]


# --- engines, CPU pools (memory tiers: codesign.specs.tiers) --------------------------------


#: devices one serving engine may hold: each replica runs its own step loop in the serving
#: simulation (about 0.2 ms and 28 kB to build per replica), so the bound keeps a spec's build
#: within seconds (65,536 one-GPU replicas took 12 s and 1.8 GB); a 1e15-device engine hung
MAX_ENGINE_DEVICES = 16_384


class EngineSpec(Spec):
    """A group of devices running one or more models, each replica with its own step loop."""

    name: str = Field(min_length=1)
    device: str | GpuSpec = Field(description="catalog GPU/accelerator name, path, or inline")
    count: int = Field(ge=1, le=MAX_ENGINE_DEVICES,
                       description="devices in the engine, at most 16,384 (every replica is "
                                   "simulated as its own step loop)")
    topology: str | TopologySpec | None = Field(
        default=None,
        description="catalog topology (name, path or inline) for TP/EP/PP traffic; None = "
                    "the device's")
    models: list[ModelEntrySpec] = Field(min_length=1)
    scheduler: SchedulerSpec = Field(default_factory=ContinuousSchedulerSpec)
    load_balance: Literal["least_loaded", "round_robin"] = Field(
        default="least_loaded", description="how requests pick a replica of a model")
    price_usd_per_hour: float | None = Field(
        default=None, ge=0, description="per device; None = the catalog's price")

    @field_validator("device", mode="before")
    @classmethod
    def _inline_device_sibling_rule(cls, value: object) -> object:
        """An inline device takes its missing efficiencies from ``efficiency_from`` (the
        sibling rule of the catalog, as an inline GPU of a training run does)."""
        if isinstance(value, dict) and value.get("efficiency_from"):
            from codesign.specs.catalog import derive_efficiency

            return derive_efficiency(value, "device")
        return value

    def replicas_of(self, entry: ModelEntrySpec) -> int:
        """Replicas of one model entry (explicit, or all devices for a single model)."""
        if entry.replicas is not None:
            return entry.replicas
        return self.count // entry.plan.num_gpus


class CpuPoolSpec(Spec):
    """CPU nodes running vector search; each node runs ``slots_per_node`` queries at once."""

    name: str = Field(min_length=1)
    nodes: int = Field(default=1, ge=1)
    slots_per_node: int = Field(default=1, ge=1, description="concurrent queries per node")
    price_usd_per_hour: float = Field(default=0.0, ge=0, description="per node")
    power_W: float = Field(default=0.0, ge=0, description="per node")

