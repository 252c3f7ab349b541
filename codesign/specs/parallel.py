"""Parallelism and execution plan: how a model is split and run on a cluster."""

from __future__ import annotations

from typing import Any, Literal, cast, get_args

from pydantic import Field, field_validator, model_validator

from codesign.specs.base import Spec

#: Megatron-Core's selective recompute modules (``recompute_modules``)
RecomputeModule = Literal["core_attn", "mla_up_proj", "moe_act", "layernorm", "mlp", "moe",
                          "shared_experts"]
RECOMPUTE_MODULES: tuple[str, ...] = get_args(RecomputeModule)

Dim = Literal["tp", "cp", "ep", "dp", "pp"]
#: fused attention kernel families (:func:`codesign.hardware.compute.attention_fractions`)
AttentionKernel = Literal["auto", "fa2", "triton", "fa1"]
#: how an FP8 GEMM's operands are scaled (``ParallelismSpec.fp8_recipe``)
Fp8Recipe = Literal["delayed", "current", "rowwise"]
DEFAULT_PLACEMENT: tuple[Dim, ...] = ("tp", "cp", "ep", "dp", "pp")

BUILTIN_COLLECTIVE_ALGORITHMS: tuple[str, ...] = ("auto", "ring", "tree", "hierarchical",
                                                  "in_network")
"""The selectable algorithms of the network layer's built-in modules
(:mod:`codesign.network.algorithms`), stated here so that a plan validates without the network
package loaded (the spec layer may not import it); ``tests/test_algorithms.py`` checks they
are exactly the modules'."""

#: plan fields that shape the parallel layout: a run that gives none of them gets a chosen plan
#: (``codesign simulate`` / ``export chakra`` / ``codesign.simulate``)
LAYOUT_FIELDS: tuple[str, ...] = ("tp", "pp", "cp", "ep", "dp", "vpp")
COLLECTIVE_ALGORITHMS: list[str] = list(BUILTIN_COLLECTIVE_ALGORITHMS)
"""Collective algorithms a plan may request (a live list): the built-in ones, and every
selectable algorithm registered since (the registry appends it)."""


class ParallelismSpec(Spec):
    """A training plan. ``dp`` is derived from the GPU count when left out.

    Every field is a setting of ``codesign simulate`` (and ``export chakra``, ``search``): its
    flag is ``--<field-name>`` with dashes, or ``json_schema_extra={"flag": ...}``; its type,
    choices and help come from the field (:mod:`codesign.cli.plan_flags`), so a new field
    needs no CLI change. ``json_schema_extra`` also says whether ``codesign search`` searches
    the field (``"search"``: ``structural``, ``switch`` or ``on_request``, see
    :mod:`codesign.search.fields`) and whether study rows leave it out of their ``plan.*``
    columns (``"column": False``; :mod:`codesign.experiments.point`).

    Expert parallelism (``ep``) splits the data-parallel ranks for expert layers (Megatron-style:
    ``ep`` must divide ``dp × cp``); expert tensor parallelism is ``etp`` (default: ``tp``).
    """

    tp: int = Field(default=1, ge=1, description="tensor-parallel size",
                    json_schema_extra={"search": "structural", "order": 0})
    pp: int = Field(default=1, ge=1, description="pipeline-parallel size",
                    json_schema_extra={"search": "structural", "order": 1})
    dp: int | None = Field(default=None, ge=1,
                           description="data-parallel size; None = GPUs / (tp·pp·cp)")
    cp: int = Field(default=1, ge=1, description="context-parallel size",
                    json_schema_extra={"search": "structural", "order": 2})
    ep: int = Field(default=1, ge=1,
                    description="expert-parallel size (MoE; divides dp·cp)",
                    json_schema_extra={"search": "structural", "order": 3})
    etp: int | None = Field(default=None, ge=1,
                            description="expert tensor-parallel size (1 or tp); None = tp",
                            json_schema_extra={"column": False})
    vpp: int = Field(default=1, ge=1,
                     description="virtual pipeline stages (chunks) per rank (interleaving)",
                     json_schema_extra={"search": "structural", "order": 4})
    sequence_parallel: bool = Field(default=False, description="sequence parallelism (with tp)",
                                    json_schema_extra={"flag": "--sp", "search": "switch",
                                                       "order": 8})
    schedule: Literal["gpipe", "1f1b", "interleaved", "zb-h1"] | None = Field(
        default=None, description="pipeline schedule; None = interleaved when vpp > 1, else "
                                  "1f1b; zb-h1 = zero-bubble ZB-H1 (backward split into input "
                                  "and weight gradients, Qi et al. 2023)",
        json_schema_extra={"search": "on_request"})
    micro_batch_size: int = Field(default=1, ge=1, description="sequences per micro-batch",
                                  json_schema_extra={"flag": "--micro-batch",
                                                     "search": "structural", "order": 5})
    global_batch_size: int = Field(default=1024, ge=1, description="sequences per step",
                                   json_schema_extra={"flag": "--global-batch"})
    seq_len: int | None = Field(default=None, ge=1,
                                description="sequence length; None = the model's seq_len")
    document_tokens: int | None = Field(
        default=None, ge=1,
        description="mean tokens per document of a packed sequence whose attention is masked "
                    "per document (fine-tuning sequence packing: Transformer Engine THD "
                    "layout with cu_seqlens, FlashAttention varlen), so each document attends "
                    "only to itself; None = one document per sequence (pretraining "
                    "concatenation attends across document boundaries)",
        json_schema_extra={"column": False})
    recompute: Literal["none", "selective", "full"] = Field(default="none",
                                                            description="activation recompute",
                                                            json_schema_extra={
                                                                "search": "switch", "order": 6})
    selective_recompute: Literal["attention", "alternate_gemms", "gemm_outputs", "mlp_input",
                                 "mlp", "modules"] = Field(
        default="attention",
        description="what recompute selective recomputes: attention = the attention core "
                    "(Megatron-LM --recompute-granularity selective); alternate_gemms = "
                    "PyTorch op-level selective activation checkpointing as torchtitan's "
                    "'op' mode: every second GEMM of a layer and every non-GEMM operator, "
                    "keeping the other GEMMs' and the attention outputs; gemm_outputs = JAX's "
                    "dot-saving rematerialization (MaxText remat_policy minimal): every "
                    "GEMM output kept, every other operator (attention core included) re-run; "
                    "mlp_input = the same with the MLP's gate/up GEMMs re-run too (MaxText "
                    "save_dot_except_mlpwi); mlp = the whole MLP re-run too "
                    "(save_dot_except_mlp); modules = the Megatron-Core modules named in "
                    "recompute_modules",
        json_schema_extra={"column": False})
    recompute_modules: tuple[RecomputeModule, ...] = Field(
        default=(),
        description="with selective_recompute modules: the Megatron-Core submodules re-run in "
                    "backward (--recompute-modules; Megatron-Bridge "
                    "docs/training/activation-recomputation.md): core_attn, mla_up_proj (MLA "
                    "Q/KV up-projections and RoPE), moe_act (the experts' activation), "
                    "layernorm (input and pre-MLP norms), mlp (the dense MLP), moe (the whole "
                    "MoE layer, dispatch included), shared_experts",
        json_schema_extra={"column": False})
    recompute_num_layers: int | None = Field(
        default=None, ge=1,
        description="with recompute full: recompute only the first N transformer layers of "
                    "each pipeline model chunk (per virtual stage when interleaved) and keep "
                    "the other layers' activations (Megatron --recompute-method block "
                    "--recompute-num-layers N); None = every layer",
        json_schema_extra={"column": False})
    zero_stage: Literal[0, 1, 2, 3] = Field(
        default=1, description="ZeRO stage: 0 none, 1 optimizer states (distributed optimizer), "
                               "2 +grads, 3 +params (= FSDP)",
        json_schema_extra={"flag": "--zero", "search": "switch", "order": 7})
    fsdp: bool = Field(default=False, description="FSDP full sharding; implies zero_stage 3",
                       json_schema_extra={"column": False})
    dtype: Literal["bf16", "fp16", "fp8", "fp4"] = Field(
        default="bf16",
        description="GEMM precision of the linear layers; fp4 = NVFP4 (E2M1 values, an E4M3 "
                    "scale per 16, an FP32 scale per tensor; parts with an FP4 peak only)")
    fp8_recipe: Fp8Recipe = Field(
        default="delayed",
        description="with dtype fp8: how a GEMM's operands are scaled: 'delayed' "
                    "(Transformer Engine: scale from past amax history, the cast fused with "
                    "its transpose, one fused kernel for all experts of a grouped GEMM), "
                    "'current' (per-tensor current scaling, 'FP8-CS' or torchao "
                    "'tensorwise': an amax pass, a scale kernel and the cast, per tensor and "
                    "per expert) or 'rowwise' (torchao: a scale per row, each operand cast "
                    "along both axes, the forward GEMM a CUTLASS row-scaled kernel, the "
                    "backward GEMMs' outputs rescaled by a kernel of their own)",
        json_schema_extra={"column": False})
    fp4_high_precision_first: int = Field(
        default=2, ge=0,
        description="with dtype fp4: the first N transformer layers keep their GEMMs in "
                    "fp4_high_precision_dtype (NVFP4 recipe, arXiv 2509.25149 Sec. 4: first 2 "
                    "and last 8 of 62 blocks in BF16)",
        json_schema_extra={"column": False})
    fp4_high_precision_last: int = Field(
        default=8, ge=0,
        description="with dtype fp4: the last N transformer layers keep their GEMMs in "
                    "fp4_high_precision_dtype (NVFP4 recipe, arXiv 2509.25149 Sec. 4)",
        json_schema_extra={"column": False})
    fp4_high_precision_dtype: Literal["bf16", "fp8"] = Field(
        default="bf16",
        description="with dtype fp4: GEMM precision of the layers kept out of FP4 (the NVFP4 "
                    "recipe keeps them in BF16; fp8 needs an FP8 peak)",
        json_schema_extra={"column": False})
    flash_attention: bool = Field(default=True,
                                 description="fused (flash) attention, no s×s matrix",
                                 json_schema_extra={"column": False})
    pointwise_kernels: Literal["fused", "eager"] = Field(
        default="fused",
        description="how the memory-bound pointwise operators (norms, activations, RoPE) run: "
                    "fused = one kernel each, reading its inputs and writing its output once "
                    "(Transformer Engine / Apex fused kernels, torch.compile); eager = PyTorch "
                    "eager mode, one kernel per ATen op of the module's Python, each a full "
                    "HBM pass (an RMSNorm upcasts, squares, reduces, scales, downcasts and "
                    "multiplies: 36 B per bf16 element against 4 fused, "
                    "codesign.workload.layers)",
        json_schema_extra={"column": False})
    attention_kernel: AttentionKernel = Field(
        default="auto",
        description="fused attention kernel: auto = the part's fastest (the catalog's "
                    "attention_fwd/bwd); fa2 = FlashAttention-2; triton = the 2022-23 Triton "
                    "FlashAttention (flash_attn_triton); fa1 = FlashAttention v1 "
                    "(codesign.hardware.compute.attention_fractions); ignored without "
                    "flash_attention",
        json_schema_extra={"column": False})
    overlap_grad_reduce: bool = Field(
        default=True, description="overlap DP gradient reduction with backward",
        json_schema_extra={"search": "switch", "order": 10})
    grad_reduce_in_fp32: bool = Field(
        default=True,
        description="gradients accumulate and reduce in fp32, 4 B per parameter (Megatron-LM's "
                    "bf16 default: 'accumulate and all-reduce gradients in fp32 for bfloat16 "
                    "data type', megatron/training/arguments.py); False: in the bf16 "
                    "parameter dtype, 2 B (Megatron-Core DDPConfig grad_reduce_in_fp32=False, "
                    "as the Megatron-Bridge and NeMo 2 performance scripts set it): halves the "
                    "gradient buffer and the data-parallel reduction bytes; ZeRO-3 reduce-"
                    "scatters are priced in bf16 either way",
        json_schema_extra={"column": False})
    grad_accum_pass: bool = Field(
        default=False,
        description="bf16 pipeline-parallel plans (pp > 1) accumulate weight gradients by a "
                    "separate pass per micro-batch: the bf16 gradients are zeroed before the "
                    "backward, and after it cast to fp32 and added into an fp32 gradient "
                    "buffer, 20 B of HBM traffic per parameter, with the bf16 gradients held "
                    "beside the fp32 buffer (DeepSpeed's BF16_Optimizer: the pipeline "
                    "engine's clear_lp_grads / update_hp_grads each micro-batch, "
                    "deepspeed/runtime/pipe/engine.py, PR #1801, April 2022); off: the "
                    "weight-gradient GEMM accumulates into the gradient buffer (Megatron's "
                    "gradient_accumulation_fusion)",
        json_schema_extra={"column": False})
    overlap_param_gather: bool = Field(
        default=True, description="overlap parameter all-gathers with compute",
        json_schema_extra={"search": "switch", "order": 11})
    regather_for_recompute: bool = Field(
        default=False,
        description="ZeRO-3 with recompute: the recomputed forward gathers a layer's "
                    "parameters and frees them again, and its backward gathers them once more "
                    "(DeepSpeed: the recompute fires ZeRO-3's forward hooks, DeepSpeed issue "
                    "#4784); False: one backward gather serves both (PyTorch FSDP keeps the "
                    "unsharded parameters through the recompute)",
        json_schema_extra={"column": False})
    param_gather_queue: Literal["own", "group"] = Field(
        default="own",
        description="ZeRO-3 prefetched parameter all-gathers: own = a queue of their own beside "
                    "the group's gradient reduce-scatters, so the next layer's gather is not "
                    "held behind the current layer's reduction (PyTorch FSDP and Megatron-FSDP "
                    "issue it ahead, before the current layer's backward); group = the data-"
                    "parallel group's one queue, in issue order: a module's gather waits for the "
                    "reduce-scatters issued before it (DeepSpeed ZeRO-3 fetches a module's "
                    "parameters from the module's own pre-forward/pre-backward hook, and "
                    "PyTorch's ProcessGroupNCCL runs a group's collectives on one NCCL stream "
                    "per device)",
        json_schema_extra={"column": False})
    tp_comm_overlap: bool = Field(default=False, description="overlap TP communication with GEMMs",
                                  json_schema_extra={"search": "switch", "order": 9})
    pipeline_scatter_gather: bool = Field(
        default=False,
        description="without sequence parallelism, split each pipeline send over the TP ranks "
                    "(each sends 1/tp on its own NIC) and all-gather it over TP at the receiver "
                    "(Megatron-LM 2021-22 default; Narayanan et al. 2021 Sec. 4.1)")
    balance_loss_stage: bool = Field(
        default=False,
        description="pipeline layout that counts the LM head and loss as transformer layers: "
                    "the last virtual stage runs as many fewer layers as its head costs in "
                    "layers (forward FLOPs, rounded), and those layers go to the middle stages "
                    "(Megatron-Core pipeline_model_parallel_layout, as NVIDIA's tuned recipes "
                    "set it, e.g. Llama 3 70B on H100 'Et*2|(t*2|)*34,t*3|(t*2|)*3,tL'); "
                    "False: layers split evenly, the head on top of the last stage's share")
    overlap_p2p: bool = Field(
        default=True,
        description="pipeline sends run beside compute; False: a stage waits for its own send "
                    "before its next pass (Megatron-LM 2021-22 synchronized after each "
                    "batch_isend_irecv)")
    moe_dispatch_detail: bool = Field(
        default=False,
        description="MoE training: also price the smaller steps of Megatron-Core's all-to-all "
                    "token dispatcher: the all-gather of per-expert token counts (dropless), "
                    "the all-to-all of the routing probabilities, and with several experts per "
                    "rank the re-sort of received tokens by local expert and back "
                    "(token_dispatcher.py); off by default because it worsens the "
                    "cross-validation (docs/validation.md, MoE section)",
        json_schema_extra={"column": False})
    ep_comm_overlap: bool = Field(
        default=False,
        description="MoE training: the dispatch/combine all-to-alls of one micro-batch run "
                    "during another micro-batch's computation (Megatron-Core "
                    "--overlap-moe-expert-parallel-comm, merging one micro-batch's forward "
                    "with another's backward; DeepSeek-V3's DualPipe): a pass takes the "
                    "longer of its computation and its EP all-to-alls instead of their sum",
        json_schema_extra={"column": False})
    moe_dispatcher: Literal["alltoall", "deepep"] = Field(
        default="alltoall",
        description="MoE training token dispatcher: alltoall = NCCL all-to-all, one send per "
                    "routed copy (Megatron-Core --moe-token-dispatcher-type alltoall); deepep = "
                    "a token sent once to each remote scale-up domain holding one of its "
                    "experts and forwarded there over the scale-up links (DeepEP normal "
                    "kernels, Megatron-Core flex dispatcher with DeepEP or HybridEP; DeepSeek-V3 "
                    "report Sec. 3.2.2)",
        json_schema_extra={"column": False})
    placement_order: tuple[Dim, ...] = Field(
        default=DEFAULT_PLACEMENT, description="rank placement, innermost first",
        json_schema_extra={"flag": "--placement", "column": False})
    offload_optimizer: bool = Field(
        default=False,
        description="optimizer states and fp32 master weights in the GPU's host tier, the "
                    "Adam step on its CPU: gradients copied out after backward, updated bf16 "
                    "parameters back (ZeRO-Offload, Ren et al. 2021; Megatron-Core "
                    "--optimizer-cpu-offload)",
        json_schema_extra={"column": False})
    offload_params: bool = Field(
        default=False,
        description="parameter and gradient shards in the host tier: parameters fetched per "
                    "layer ahead of its forward and backward, gradients copied out after it "
                    "(ZeRO-Infinity, Rajbhandari et al. 2021); needs ZeRO stage 3 and "
                    "offload_optimizer",
        json_schema_extra={"column": False})
    offload_activations: bool = Field(
        default=False,
        description="saved activations of each layer but a chunk's last copied to the host "
                    "tier after its forward and back before its backward (Megatron-Core / "
                    "Transformer Engine CPU offloading)",
        json_schema_extra={"column": False})
    lora_rank: int | None = Field(
        default=None, ge=1, le=65536,
        description="LoRA fine-tuning (Hu et al. 2021): the base weights are frozen and "
                    "rank-r adapters on the attention projections are trained (MLPerf "
                    "Training Llama 2 70B LoRA: rank 16 on qkv_proj, o_proj); None = train "
                    "every weight",
        json_schema_extra={"column": False})
    collective_algorithm: str = Field(
        default="auto", description="collective algorithm (auto: the fastest available)",
        json_schema_extra={"enum": cast(Any, COLLECTIVE_ALGORITHMS),  # the live list
                           "column": False})

    @field_validator("collective_algorithm")
    @classmethod
    def _known_algorithm(cls, name: str) -> str:
        if name not in COLLECTIVE_ALGORITHMS:
            raise ValueError(f"unknown collective algorithm '{name}'; allowed: "
                             f"{', '.join(COLLECTIVE_ALGORITHMS)}")
        return name

    @model_validator(mode="after")
    def _check(self) -> ParallelismSpec:
        if sorted(self.placement_order) != sorted(DEFAULT_PLACEMENT):
            allowed = ", ".join(DEFAULT_PLACEMENT)
            raise ValueError(f"placement_order must be a permutation of {allowed}")
        if self.schedule == "interleaved" and self.vpp < 2:
            raise ValueError("schedule 'interleaved' needs vpp >= 2")
        if self.schedule in ("gpipe", "1f1b", "zb-h1") and self.vpp > 1:
            raise ValueError(f"schedule '{self.schedule}' does not take vpp > 1")
        if self.fsdp and "zero_stage" in self.model_fields_set and self.zero_stage != 3:
            raise ValueError(f"fsdp (full sharding) is ZeRO stage 3; it contradicts zero_stage "
                             f"{self.zero_stage} (give one of them)")
        if self.selective_recompute == "modules" and not self.recompute_modules:
            raise ValueError("selective_recompute 'modules' needs recompute_modules (allowed: "
                             f"{', '.join(RECOMPUTE_MODULES)})")
        if self.recompute_num_layers is not None and self.recompute != "full":
            raise ValueError(f"recompute_num_layers ({self.recompute_num_layers}) needs "
                             f"recompute full, got recompute {self.recompute}")
        if self.offload_params and (self.sharding_stage != 3 or not self.offload_optimizer):
            raise ValueError("offload_params (ZeRO-Infinity) needs zero_stage 3 (or fsdp) and "
                             "offload_optimizer")
        if self.lora_rank is not None and self.sharding_stage == 3:
            raise ValueError(f"lora_rank ({self.lora_rank}) with ZeRO stage 3 / fsdp is not "
                             "modelled (frozen weights sharded apart from the adapters); use "
                             "zero_stage 0-2")
        return self

    @property
    def offloads(self) -> bool:
        """Whether the plan moves anything to the GPU's host tier."""
        return self.offload_optimizer or self.offload_params or self.offload_activations

    @property
    def pipeline_schedule(self) -> str:
        """The effective schedule name."""
        if self.schedule is not None:
            return self.schedule
        return "interleaved" if self.vpp > 1 else "1f1b"

    @property
    def grad_accum_pass_bytes(self) -> float:
        """HBM bytes per trained parameter of the per-micro-batch gradient accumulation pass
        (:attr:`grad_accum_pass`; 0 where it does not apply): zeroing the bf16 gradients
        (write 2 B), casting them to fp32 (read 2, write 4) and adding the copy into the fp32
        buffer (read 4 + 4, write 4)."""
        return 20.0 if self.grad_accum_pass and self.pp > 1 and self.dtype == "bf16" else 0.0

    @property
    def lp_grad_bytes(self) -> float:
        """Bytes per parameter of the low-precision gradients kept beside the
        :attr:`grad_bytes` buffer by the accumulation pass (bf16, 2 B), else 0."""
        return 2.0 if self.grad_accum_pass_bytes else 0.0

    @property
    def expert_tp(self) -> int:
        return self.etp or self.tp

    @property
    def grad_bytes(self) -> float:
        """Bytes per element of the gradient buffer and its data-parallel reduction
        (``grad_reduce_in_fp32``: fp32, else bf16)."""
        return 4.0 if self.grad_reduce_in_fp32 else 2.0

    @property
    def sharding_stage(self) -> int:
        """Effective ZeRO stage (FSDP counts as 3)."""
        return 3 if self.fsdp else int(self.zero_stage)
