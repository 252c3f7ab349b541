"""Training graph: bind layer templates to a plan, per virtual pipeline stage.

Forward operators come from :mod:`codesign.workload.layers`; backward operators follow rules:
a GEMM gives an input-gradient and a weight-gradient GEMM of equal FLOPs; attention backward
counts twice the forward FLOPs; a memory-bound kernel moves twice its forward bytes; a
collective runs its conjugate (all-gather <-> reduce-scatter; Megatron's f/g all-reduces swap).
Recompute inserts forward operators (category ``recompute``) before the backward of a layer
(full; with ``recompute_num_layers`` N only the first N layers of each model chunk, the others
keep their activations), of its attention core (selective), or of every second GEMM and
the memory-bound operators (selective with ``selective_recompute`` alternate_gemms, PyTorch's
op-level checkpointing), or of every operator but the GEMMs whose outputs a dot-saving policy
keeps (``gemm_outputs``, ``mlp_input``, ``mlp``: JAX / MaxText). ZeRO-3/FSDP adds per-layer
parameter all-gathers and gradient reduce-scatters on the data-parallel group.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from codesign.errors import InfeasiblePlan
from codesign.groups import Degrees
from codesign.groups import group_sizes as sizes_of_groups
from codesign.ir import Category, Op, RelabeledOps, at_layer, gemm_backward, replace_op
from codesign.specs.inference import DTYPE_BYTES
from codesign.specs.parallel import Fp8Recipe, ParallelismSpec
from codesign.specs.run import TrainingRun
from codesign.workload import params as P
from codesign.workload.dims import (
    bind_dims,
    layer_gemm_dtype,
    layer_structure,
    num_microbatches,
    plan_problems,
)
from codesign.workload.layers import (
    UNQUANTIZED_GEMMS,
    embedding_template,
    head_template,
    layer_template,
    mtp_template,
)
from codesign.workload.lora import frozen_only, lora_layer
from codesign.workload.ops import OpTemplate, evaluate, evaluate_optional

OPT_BYTES_PER_PARAM = 4 + 4 + 4  # fp32 master weights + Adam m + Adam v


def adam_bytes_per_param(grad_bytes: float) -> float:
    """HBM traffic of one Adam update per local parameter, bytes: read+write master, m, v
    (24 B), read the gradient (``grad_bytes``: 4 fp32, 2 bf16,
    :attr:`~codesign.specs.parallel.ParallelismSpec.grad_bytes`), write the bf16 working copy
    (2 B)."""
    return 24.0 + grad_bytes + 2.0


@dataclass(frozen=True)
class ChunkGraph:
    """Bound operators of one virtual pipeline stage for one micro-batch on one rank."""

    virtual_stage: int
    stage: int
    chunk: int
    layers: tuple[int, ...]
    first: bool
    last: bool
    forward: Sequence[Op]  # a tuple, or :class:`~codesign.ir.RelabeledOps` (``same_ops_as``)
    backward: Sequence[Op]  # recompute operators included, category 'recompute'
    saved_bytes: float  # activations held per in-flight micro-batch, bytes
    dense_params: float  # non-expert parameters held by the rank (after TP), unsharded by DP
    expert_params: float  # expert parameters held by the rank (after EP and ETP)
    layer_params: tuple[tuple[int, float, float], ...] = ()  # (layer, dense, expert); -1 =
    # embedding / LM head
    #: (layer, activation bytes it saves for backward) of the chunk's transformer layers
    layer_saved: tuple[tuple[int, float], ...] = ()
    #: LoRA (:mod:`codesign.workload.lora`): frozen base parameters held by the rank (working
    #: dtype only, no gradients or optimizer states); ``dense_params`` and ``layer_params``
    #: then count the trained adapters alone
    frozen_params: float = 0.0
    #: bytes of the largest collective of the chunk's passes (its communication buffers)
    comm_peak_bytes: float = 0.0
    #: virtual stage of the earlier chunk whose operators these are on other layers (same
    #: order, layers renamed position by position; -1: none): the engine reuses that chunk's
    #: timing instead of pricing the same operators again
    same_ops_as: int = -1

    def on_layers(self, v: int, pp: int, layers: tuple[int, ...]) -> ChunkGraph:
        """This chunk's operators, parameters and activations as virtual stage ``v``'s, on
        ``layers`` (as many as this chunk's, renamed position by position, copied on use)."""
        rename = dict(zip(self.layers, layers, strict=True))
        return replace(
            self, virtual_stage=v, stage=v % pp, chunk=v // pp, layers=layers,
            forward=RelabeledOps(self.forward, rename),
            backward=RelabeledOps(self.backward, rename),
            layer_params=tuple((rename.get(x, x), d, e) for x, d, e in self.layer_params),
            layer_saved=tuple((rename.get(x, x), b) for x, b in self.layer_saved),
            same_ops_as=self.virtual_stage)


@dataclass(frozen=True)
class TrainingGraph:
    """The bound training step of one plan: chunks indexed by virtual stage."""

    run: TrainingRun
    chunks: tuple[ChunkGraph, ...]
    num_microbatches: int
    tokens_per_step: float
    model_flops_per_step: float  # forward + backward, no recompute (MFU numerator)
    hardware_flops_per_step: float  # everything executed incl. recompute, all GPUs (HFU)

    def stage_chunks(self, stage: int) -> list[ChunkGraph]:
        return [c for c in self.chunks if c.stage == stage]


def layer_assignment(num_layers: int, virtual_stages: int,
                     tail: int = 0, loss_slots: int = 0) -> list[tuple[int, ...]]:
    """Split layers over virtual stages as evenly as possible; extra layers go to the middle
    stages, which carry neither the embedding nor the LM head. ``tail``: blocks after the
    last layer that the last stage runs (multi-token prediction), balanced as layers and
    taken out of the last stage's share: Megatron-Bridge's DeepSeek-V3 layouts give the
    last stage fewer decoder layers beside its MTP layer and loss
    (recipes/deepseek/h100/deepseek_v3.py, ``_get_deepseek_v3_pipeline_layout``: PP 16 = 15
    stages of 4 layers, the last of 1 + MTP). ``loss_slots``: layers' worth of work the LM
    head and loss take on the last virtual stage (:func:`loss_layer_slots`), at most the even
    share of a stage: that stage runs that many fewer layers, which go to the middle stages."""
    if tail:
        out = layer_assignment(num_layers + tail, virtual_stages, loss_slots=loss_slots)
        return [tuple(x for x in layers if x < num_layers) for layers in out]
    slots = min(loss_slots, num_layers // virtual_stages) if virtual_stages > 1 else 0
    base, extra = divmod(num_layers + slots, virtual_stages)
    counts = [base] * virtual_stages
    order = sorted(range(virtual_stages), key=lambda v: (abs(v - (virtual_stages - 1) / 2), v))
    for v in order[:extra]:
        counts[v] += 1
    counts[-1] -= slots
    out, start = [], 0
    for c in counts:
        out.append(tuple(range(start, start + c)))
        start += c
    return out


def template_precision(t: OpTemplate, dtype: str, plan_dtype: str | None = None) -> str:
    """GEMM precision of template ``t`` in a layer whose linear layers run at ``dtype``, in a
    plan of GEMM dtype ``plan_dtype`` (default ``dtype``).

    Under FP4 the router and the LM head (``logits``) stay in BF16: frameworks keep them out
    of the low-precision recipe (Megatron-Core builds the output layer as a plain
    ``ColumnParallelLinear`` and the router as an FP32/BF16 matmul, outside Transformer
    Engine's quantized modules; the NVFP4 recipe, arXiv 2509.25149 Sec. 4, keeps embeddings
    and the output head in BF16). Under FP8 they keep the plan's dtype, as before FP4 was
    modelled (results unchanged)."""
    fp4_plan = (plan_dtype or dtype) == "fp4"
    if t.precision != "gemm" or (fp4_plan and t.name in UNQUANTIZED_GEMMS):
        return "bf16"
    return dtype


def _bind(t: OpTemplate, env: Mapping[str, float], layer: int, precision: str,
          plan_dtype: str | None = None, fp8_scaling: Fp8Recipe = "delayed") -> Op:
    mnk = None
    if t.mnk is not None:
        mnk = (t.mnk[0].evaluate(env), t.mnk[1].evaluate(env), t.mnk[2].evaluate(env))
    return Op(
        name=t.name, kind=t.kind, category="forward", layer=layer,
        flops=t.flops.evaluate(env), bytes=t.bytes.evaluate(env), mnk=mnk,
        comm=t.comm, group=t.group, size=evaluate(t.size, env), overlap=t.overlap,
        causal=t.causal, precision=template_precision(t, precision, plan_dtype),
        count=evaluate(t.count, env) if t.count is not None else 1.0,
        role="fwd" if t.kind == "gemm" else "", fp8_scaling=fp8_scaling,
        attn_shape=(tuple(x.evaluate(env) for x in t.attn)  # type: ignore[arg-type]
                    if t.attn is not None and env["T"] == env["b"] * env["S"]
                    and env["aw"] == 1.0 else None),
        fused_bytes=evaluate_optional(t.fused_bytes, env),
        host_sync=t.host_sync,
        head_dim=evaluate_optional(t.head_dim, env),
    )


_SWAP = {"next": "prev", "prev": "next"}


def backward_of(op: Op, template: OpTemplate) -> list[Op]:
    """Backward operators of one bound forward operator (see module docstring)."""
    if op.kind == "gemm":
        return gemm_backward(op, template.weight_grad)
    if op.kind == "attention":
        return [replace(op, name=f"{op.name}.bwd", category="backward", backward=True,
                        flops=2 * op.flops, bytes=2 * op.bytes)]
    if op.kind == "memory":
        if not template.has_backward:
            return []
        return [replace(op, name=f"{op.name}.bwd", category="backward", backward=True,
                        bytes=template.backward_bytes * op.bytes,
                        fused_bytes=(None if op.fused_bytes is None
                                     else template.backward_bytes * op.fused_bytes))]
    kind = template.comm_bwd
    if kind is None:
        return []
    return [replace(op, name=f"{op.name}.bwd", category="backward", backward=True, comm=kind,
                    overlap=_SWAP.get(op.overlap, op.overlap))]  # type: ignore[arg-type]


def recomputes_layer(p: ParallelismSpec, index: int) -> bool:
    """Whether full recompute applies to the transformer layer at position ``index`` (from 0)
    within its pipeline model chunk: every layer under ``recompute`` full, or with
    ``recompute_num_layers`` N only the first N of each chunk (Megatron-Core
    ``--recompute-method block``: ``TransformerBlock._checkpointed_forward`` in
    megatron/core/transformer/transformer_block.py checkpoints the input of the chunk's
    layers ``l < recompute_num_layers`` and runs the others normally; one TransformerBlock
    is built per virtual pipeline stage)."""
    n = p.recompute_num_layers
    return p.recompute == "full" and (n is None or index < n)


#: collectives whose outputs PyTorch's op-level selective checkpointing saves (torchtitan
#: ``_get_default_save_ops``: reduce_scatter_tensor, all_to_all_single); others re-run
SAC_SAVED_COMMS = ("reduce_scatter", "all_to_all")
#: bytes per element of a saved activation (bf16; an FP8 GEMM still writes bf16 outputs)
SAVED_ACTIVATION_BYTES = DTYPE_BYTES["bf16"]


#: a layer's MLP input GEMMs (gate and up, fused in codesign's templates; dense, routed and
#: shared experts): MaxText's ``mlpwi`` (``wi_0`` / ``wi_1``)
MLP_INPUT_GEMMS = ("mlp_up", "expert_up", "shared_up")
#: its MLP output GEMMs (``wo``)
MLP_OUTPUT_GEMMS = ("mlp_down", "expert_down", "shared_down")


def gemm_output_recompute(temps: Sequence[OpTemplate],
                          recomputed_gemms: Sequence[str] = ()) -> tuple[bool, ...]:
    """Which of a layer's forward operators JAX's dot-saving rematerialization policies
    recompute: every operator but the GEMMs (MaxText ``remat_policy: minimal``, JAX
    ``checkpoint_dots_with_no_batch_dims``: matmuls with weights keep their outputs; the
    attention core's batched matmuls, norms, activations and rotary embeddings re-run), and the
    GEMMs named in ``recomputed_gemms`` too (``save_dot_except_mlpwi``: the MLP input GEMMs,
    :data:`MLP_INPUT_GEMMS`; ``save_dot_except_mlp``: the whole MLP). Collectives follow the
    op-level rule of :func:`alternate_gemm_recompute` (reduce-scatters and all-to-alls kept)."""
    out: list[bool] = []
    for t in temps:
        if t.kind == "gemm":
            out.append(t.name in recomputed_gemms)
        elif t.kind == "comm":
            out.append((t.comm or t.comm_bwd) not in SAC_SAVED_COMMS)
        else:
            out.append(True)
    return tuple(out)


#: the GEMMs each dot-saving policy (``selective_recompute``) re-runs
DOT_POLICY_GEMMS: dict[str, tuple[str, ...]] = {
    "gemm_outputs": (), "mlp_input": MLP_INPUT_GEMMS,
    "mlp": MLP_INPUT_GEMMS + MLP_OUTPUT_GEMMS}


#: a MoE layer's shared-expert operators (template names): the ``shared_experts`` recompute
#: module, and part of ``moe``
_SHARED_EXPERT_OPS = frozenset({"shared_tp_in", "shared_up", "shared_act", "shared_down",
                                "shared_tp_out"})

#: the operators (template names) each Megatron-Core recompute module re-runs in backward
#: (``--recompute-modules``; Megatron-Bridge docs/training/activation-recomputation.md):
#: ``core_attn`` the attention core (with its context-parallel gather), ``mla_up_proj`` MLA's
#: Q/KV up-projections and RoPE, ``moe_act`` the experts' activation, ``layernorm`` the input
#: and pre-MLP norms, ``mlp`` the dense MLP, ``moe`` the whole MoE layer (routing, dispatch,
#: experts, combine; its shared experts too), ``shared_experts`` the shared-expert MLP
MODULE_OPS: dict[str, frozenset[str]] = {
    "core_attn": frozenset({"attention", "cp_kv_gather"}),
    "mla_up_proj": frozenset({"q_up", "kv_up", "rope"}),
    "moe_act": frozenset({"expert_act"}),
    "layernorm": frozenset({"attn_norm", "mlp_norm", "moe_norm", "mamba_norm"}),
    "mlp": frozenset({"mlp_tp_in", "mlp_up", "mlp_act", "mlp_down", "mlp_tp_out"}),
    "moe": frozenset({"router", "router_topk", "permute", "tokens_per_expert_sync", "dispatch",
                      "expert_up", "expert_act", "expert_down", "combine", "unpermute"})
    | _SHARED_EXPERT_OPS,
    "shared_experts": _SHARED_EXPERT_OPS,
}
#: modules Megatron-Core checkpoints by discarding their output (``CheckpointWithoutOutput``:
#: the output is freed after its consumer ran and recomputed before the consumer's
#: backward); the others are checkpointed whole (only the submodule's input is kept)
OUTPUT_DISCARDING = frozenset({"moe_act", "layernorm", "mla_up_proj"})


def _module_ops(temps: Sequence[OpTemplate], module: str) -> frozenset[str]:
    """:data:`MODULE_OPS` of ``module`` in a layer of ``temps``: ``mla_up_proj`` applies to
    MLA layers only (a plain attention layer's RoPE stays)."""
    if module == "mla_up_proj" and not any(t.name == "kv_up" for t in temps):
        return frozenset()
    return MODULE_OPS[module]


def module_recompute(temps: Sequence[OpTemplate],
                     modules: Sequence[str]) -> tuple[bool, ...]:
    """Which of a layer's forward operators the Megatron-Core ``recompute_modules`` re-run
    (:data:`MODULE_OPS`)."""
    names = frozenset().union(*(_module_ops(temps, m) for m in modules))
    return tuple(t.name in names for t in temps)


def module_saved(temps: Sequence[OpTemplate], env: Mapping[str, float],
                 modules: Sequence[str], layer_input: float) -> float:
    """Activation bytes one layer keeps under Megatron-Core's ``recompute_modules``: what it
    keeps without recompute (each operator's saved inputs) less what the modules free, and
    at least the layer's input.

    A module checkpointed whole frees the saved inputs of its operators but the first that
    computes (the submodule's input stays; ``core_attn`` frees the attention core's, as
    selective recompute does). An output-discarding module (:data:`OUTPUT_DISCARDING`) frees
    the output of its last operator, the one that leaves the module: what the next GEMM saves
    as its input (a norm's output, the experts' activation), else the operator's own saved
    input taken as its output (RoPE: the Q, K, V attention saves, after the MLA
    up-projections, whose outputs only RoPE and the attention read and no operator keeps).
    ASSUMPTION: an output is freed once, however many operators read it (a MoE norm's output
    feeds the router, the permutation and the shared experts)."""
    saved = [t.saved.evaluate(env) for t in temps]
    freed = 0.0
    whole: set[int] = set()
    for m in modules:
        if m in OUTPUT_DISCARDING:
            continue
        names = _module_ops(temps, m)
        idx = [i for i, t in enumerate(temps) if t.name in names]
        # the submodule's input: the saved input of its first operator that computes
        kept = [] if m == "core_attn" else [i for i in idx if temps[i].kind != "comm"][:1]
        freed += sum(saved[i] for i in idx if i not in kept and i not in whole)
        whole.update(idx)
    for m in modules:
        if m not in OUTPUT_DISCARDING:
            continue
        names = _module_ops(temps, m)
        for i, t in enumerate(temps):
            if t.name not in names or i in whole:
                continue
            if t.kind == "gemm":  # an MLA up-projection: its output is not kept (above)
                continue
            nxt = next((j for j in range(i + 1, len(temps)) if temps[j].kind != "comm"), None)
            freed += saved[nxt] if nxt is not None and temps[nxt].kind == "gemm" else saved[i]
    return max(layer_input, sum(saved) - freed)


def op_level_recompute(temps: Sequence[OpTemplate], policy: str,
                       modules: Sequence[str] = ()) -> tuple[bool, ...]:
    """The forward operators an op-level ``selective_recompute`` policy re-runs:
    ``alternate_gemms`` (:func:`alternate_gemm_recompute`), ``modules``
    (:func:`module_recompute` of ``modules``) or a dot-saving policy
    (:data:`DOT_POLICY_GEMMS`, :func:`gemm_output_recompute`)."""
    if policy == "alternate_gemms":
        return alternate_gemm_recompute(temps)
    if policy == "modules":
        return module_recompute(temps, modules)
    return gemm_output_recompute(temps, DOT_POLICY_GEMMS[policy])


def alternate_gemm_recompute(temps: Sequence[OpTemplate]) -> tuple[bool, ...]:
    """Which of a layer's forward operators PyTorch's op-level selective activation
    checkpointing recomputes (torchtitan ``SelectiveAC``, "save all compute/comm ops, except
    every second mm/linear", ``torchtitan/distributed/activation_checkpoint.py``): the 2nd,
    4th, ... GEMM of the layer, every memory-bound operator, and every collective but a
    reduce-scatter or all-to-all. Attention and the 1st, 3rd, ... GEMM keep their outputs.
    ASSUMPTION: a fused GEMM of codesign's templates (QKV, gate+up) counts as one matmul,
    where torchtitan's Llama runs wq/wk/wv and w1/w3 as separate ones."""
    out: list[bool] = []
    gemms = 0
    for t in temps:
        if t.kind == "gemm":
            gemms += 1
            out.append(gemms % 2 == 0)
        elif t.kind == "attention":
            out.append(False)
        elif t.kind == "comm":
            out.append((t.comm or t.comm_bwd) not in SAC_SAVED_COMMS)
        else:
            out.append(True)
    return tuple(out)


def op_level_saved(fwd: Sequence[Op], recomputed: Sequence[bool],
                   layer_input: float) -> float:
    """Activation bytes one layer keeps under op-level selective checkpointing: its input
    (the checkpoint's own) and the outputs of the operators it does not recompute (a
    GEMM's m×n per kernel; attention's output = the next GEMM's input, m×k)."""
    saved = layer_input
    for i, (op, again) in enumerate(zip(fwd, recomputed, strict=True)):
        if again:
            continue
        if op.kind == "gemm" and op.mnk is not None:
            saved += op.mnk[0] * op.mnk[1] * op.count * SAVED_ACTIVATION_BYTES
        elif op.kind == "attention":
            nxt = next((o for o in fwd[i + 1:] if o.kind == "gemm" and o.mnk), None)
            if nxt is not None and nxt.mnk is not None:
                saved += nxt.mnk[0] * nxt.mnk[2] * nxt.count * SAVED_ACTIVATION_BYTES
    return saved


def _as(ops: Iterable[Op], category: Category) -> list[Op]:
    return [replace_op(o, category=category) for o in ops]


def _drop_trivial(ops: Iterable[Op], group_sizes: Mapping[str, int]) -> list[Op]:
    """Drop collectives on groups of one rank and operators that do nothing."""
    size = group_sizes.get
    # a collective goes when there is none in this pass (e.g. Megatron's f operator in
    # forward), its group has one rank, or it sends nothing
    return [o for o in ops
            if (not (o.comm is None or size(o.group or "", 1) <= 1 or o.size <= 0)
                if o.kind == "comm" else not (o.flops <= 0 and o.bytes <= 0))]


def state_groups(p: ParallelismSpec) -> tuple[str, str]:
    """Groups over which dense and expert parameters are replicated (their gradients are
    reduced and ZeRO shards their states there): data parallel, times CP when CP > 1."""
    return ("dp_cp", "edp_cp") if p.cp > 1 else ("dp", "edp")


def group_sizes(run: TrainingRun) -> dict[str, int]:
    """Ranks per communication group name (the size rules of :data:`codesign.groups.GROUPS`)."""
    p = run.parallel
    return sizes_of_groups(Degrees(tp=p.tp, cp=p.cp, ep=p.ep, dp=run.dp, pp=p.pp,
                                   world=run.num_gpus, etp=p.expert_tp))


def _layer_templates(run: TrainingRun, kind: str) -> tuple[OpTemplate, ...]:
    return layer_template(layer_structure(run, kind))  # cached per structure


class ChunkBinder:
    """Binds one run's layer templates once and builds the operators of any chunk on demand.

    :func:`build_training_graph` builds every chunk of a plan with one binder; the parallelism
    search (:mod:`codesign.search.estimate`) builds short sample chunks (one layer, with or
    without the embedding or LM head) to price a layer once per local shape. No feasibility
    check here: :func:`build_training_graph` does that.
    """

    def __init__(self, run: TrainingRun) -> None:
        m, p = run.model, run.parallel
        self.run = run
        self.env = bind_dims(run)
        self.sizes = group_sizes(run)
        self.prec = p.dtype
        self.scaling: Fp8Recipe = p.fp8_recipe
        self.dense_grp, self.expert_grp = state_groups(p)
        self.zero3 = p.sharding_stage == 3
        #: bytes of one layer's input, which a recomputed layer keeps (its checkpoint)
        self.layer_input_bytes = 2.0 * self.env["Tsp"] * self.env["h"]
        self.attn_p = P.attention_params_per_layer(m) + 2 * P.norm_params(m)
        # bind each distinct (layer kind, GEMM dtype) once; layers copy it with their own
        # index
        self._bound: dict[tuple[str, str], tuple[list[Op], list[list[Op]], float]] = {}
        self.lora = p.lora_rank
        #: LoRA: (template index of each forward operator, adapter parameters) per key
        self._lora: dict[tuple[str, str], tuple[list[int], float]] = {}
        self._flat: dict[tuple[str, str], list[Op]] = {}
        self._op_level: dict[str, tuple[bool, ...]] = {}

    def layer_ops(self, kind: str,
                  dtype: str | None = None) -> tuple[list[Op], list[list[Op]], float]:
        """Forward operators of one layer of ``kind`` (:meth:`ModelSpec.layer_kind`; layer
        index 0) whose linear layers run at ``dtype`` (default: the plan's), the backward
        operators of each, and the activation bytes the layer saves for backward (no
        recompute: full)."""
        prec = self.prec if dtype is None else dtype
        key = (kind, prec)
        if key not in self._bound:
            run, env = self.run, self.env
            if prec != self.prec:  # an FP4 plan's high-precision layer: its GEMM operand bytes
                env = {**env, "eg": DTYPE_BYTES[prec], "ew": DTYPE_BYTES[prec]}
            p = run.parallel
            temps = _layer_templates(run, kind)
            fwd = [_bind(t, env, 0, prec, self.prec, self.scaling) for t in temps]
            bwd = [backward_of(o, t) for o, t in zip(fwd, temps, strict=True)]
            if p.recompute == "selective" and p.selective_recompute == "modules":
                saved = module_saved(temps, env, p.recompute_modules, self.layer_input_bytes)
            elif p.recompute == "selective" and p.selective_recompute != "attention":
                saved = op_level_saved(fwd, self.op_level_flags(kind), self.layer_input_bytes)
            else:
                saved = sum(t.saved.evaluate(env) for t in temps
                            if not (p.recompute == "selective" and t.attn_core))
            if self.lora is not None:
                ll = lora_layer(fwd, bwd, self.lora)
                fwd, bwd, saved = ll.forward, ll.backward, saved + ll.saved
                self._lora[key] = (ll.origin, ll.params)
            self._bound[key] = (fwd, bwd, saved)
        return self._bound[key]

    def op_level_flags(self, kind: str) -> tuple[bool, ...]:
        """:func:`op_level_recompute` of the layer kind's templates under the plan's
        ``selective_recompute`` (once per kind)."""
        if kind not in self._op_level:
            p = self.run.parallel
            self._op_level[kind] = op_level_recompute(_layer_templates(self.run, kind),
                                                   p.selective_recompute, p.recompute_modules)
        return self._op_level[kind]

    def _reversed_backward(self, kind: str, dtype: str | None) -> list[Op]:
        """The backward operators of :meth:`layer_ops`, the last forward operator's first
        (one list per key, copied to each layer)."""
        key = (kind, self.prec if dtype is None else dtype)
        if key not in self._flat:
            bwd = self.layer_ops(kind, dtype)[1]
            self._flat[key] = [o for ops in reversed(bwd) for o in ops]
        return self._flat[key]

    def layer_params(self, layer: int) -> tuple[float, float]:
        """(dense, expert) parameters of one layer held per rank."""
        return self.kind_params(self.run.model.layer_kind(layer))

    def kind_params(self, kind: str) -> tuple[float, float]:
        """(dense, expert) parameters per rank of one layer of ``kind`` with its norms:
        attention, Mamba mixer, dense MLP and shared experts are split over TP, the router is
        replicated, routed experts are split over EP×ETP."""
        m, p = self.run.model, self.run.parallel
        if kind in ("moe", "moe_mlp") and m.moe is not None:
            expert = m.moe.num_experts * P.routed_expert_params(m) / (p.ep * p.expert_tp)
            rest = self.attn_p if kind == "moe" else P.norm_params(m)
            return (rest + P.shared_expert_params(m)) / p.tp + P.router_params(m), expert
        return P.kind_params(m, kind) / p.tp, 0.0

    def mtp_params(self) -> tuple[float, float]:
        """(dense, expert) parameters per rank of the model's MTP modules
        (:func:`codesign.workload.params.mtp_params`): the projection is split over TP."""
        m = self.run.model
        dense = P.mtp_own_params(m) / self.run.parallel.tp
        expert = 0.0
        for kind in m.mtp_kinds:
            d, e = self.kind_params(kind)
            dense, expert = dense + d, expert + e
        return m.mtp_weight_copies * dense, m.mtp_weight_copies * expert

    def _append(self, fwd: list[Op], bwd_layers: list[list[Op]],
                temps: Sequence[OpTemplate]) -> float:
        """Append operators outside the decoder layers (layer -1: the final norm, logits and
        loss of :func:`head_template`, an MTP depth's :func:`mtp_template`) to a chunk's
        forward and, reversed, to its backward; returns the activation bytes they save."""
        ops = [_bind(t, self.env, -1, self.prec, fp8_scaling=self.scaling) for t in temps]
        fwd += ops
        bwd = [b for o, t in reversed(list(zip(ops, temps, strict=True)))
               for b in backward_of(o, t)]
        bwd_layers.append(bwd if self.lora is None else frozen_only(bwd))
        return sum(t.saved.evaluate(self.env) for t in temps)

    def chunk(self, v: int, layers: tuple[int, ...], first: bool,
              last: bool) -> tuple[ChunkGraph, float]:
        """Virtual stage ``v`` holding ``layers`` (plus the embedding when ``first``, the LM
        head when ``last``), and the FLOPs its forward and backward operators execute."""
        run, env, prec = self.run, self.env, self.prec
        m, p = run.model, run.parallel
        dense_grp, expert_grp, zero3 = self.dense_grp, self.expert_grp, self.zero3
        layer_ops = self.layer_ops
        fwd: list[Op] = []
        bwd_layers: list[list[Op]] = []
        saved = 0.0
        dense_params = expert_params = 0.0
        lparams: list[tuple[int, float, float]] = []
        lsaved_list: list[tuple[int, float]] = []
        frozen = 0.0
        selective = p.recompute == "selective"
        op_level = selective and p.selective_recompute != "attention"
        attn_level = selective and not op_level
        if first:
            temps = embedding_template(layer_structure(run, "dense"))
            e_ops = [_bind(t, env, -1, prec, fp8_scaling=self.scaling) for t in temps]
            fwd += e_ops
            e_bwd = [b for o, t in zip(e_ops, temps, strict=True) for b in backward_of(o, t)]
            bwd_layers.append(e_bwd if self.lora is None else frozen_only(e_bwd))
            saved += sum(t.saved.evaluate(env) for t in temps)
            if self.lora is None:
                dense_params += P.embedding_params(m) / p.tp
                lparams.append((-1, P.embedding_params(m) / p.tp, 0.0))
            else:
                frozen += P.embedding_params(m) / p.tp
        def add_layer(layer: int, kind: str, full: bool, dtype: str | None,
                      record: bool) -> None:
            """Append one layer (or MTP block: ``layer`` -1, ``record`` False: its
            parameters are counted with the MTP module's) to the chunk's passes."""
            nonlocal saved, frozen, dense_params, expert_params
            lf, lb, lsaved = layer_ops(kind, dtype)
            l_fwd = at_layer(lf, layer)
            base_params = self.kind_params(kind)
            dparams, eparams = base_params
            temps = _layer_templates(run, kind)
            # op-level checkpointing: which forward operators re-run (counted on the base
            # layer's GEMMs, so LoRA adapters share their base operator's flag)
            again = self.op_level_flags(kind) if op_level else ()
            if self.lora is not None:  # frozen base weights; the adapters are trained
                origin, adapters = self._lora[(kind, self.prec if dtype is None else dtype)]
                temps = tuple(temps[j] for j in origin)
                again = tuple(again[j] for j in origin) if op_level else ()
                dparams, eparams = adapters, 0.0
            pre: list[Op] = []
            post: list[Op] = []
            if zero3 and record:
                gathers = [Op(name="param_gather", kind="comm", category="forward",
                              layer=layer, comm="all_gather", group=dense_grp,
                              size=dparams * 2.0,
                              overlap="prefetch" if p.overlap_param_gather else "none",
                              own_stream=p.param_gather_queue == "own")]
                if eparams:
                    gathers.append(replace(gathers[0], name="expert_param_gather",
                                           group=expert_grp, size=eparams * 2.0))
                pre = gathers
                post = [replace(g, name=g.name.replace("gather", "grad_reduce"),
                                category="backward", backward=True, comm="reduce_scatter",
                                overlap="async" if p.overlap_grad_reduce else "none")
                        for g in gathers]
            if record:
                if self.lora is not None:
                    frozen += sum(base_params)
                dense_params += dparams
                expert_params += eparams
                lparams.append((layer, dparams, eparams))
            fwd.extend(pre + l_fwd)
            # backward of this layer, in reverse operator order, with recompute
            pre_b = [replace(g, category="backward", backward=True) for g in pre]
            body: list[Op] = []
            if full:
                body += at_layer(lf, layer, "recompute")
                if p.regather_for_recompute:  # ZeRO-3: freed after the recompute
                    body += pre_b
            elif op_level:
                body += at_layer([o for o, a in zip(lf, again, strict=True) if a], layer,
                                 "recompute")
            if not attn_level:  # every operator's backward, last first
                body += at_layer(self._reversed_backward(kind, dtype), layer)
            for i in range(len(l_fwd) - 1, -1, -1) if attn_level else ():
                if temps[i].attn_core and (i == 0 or not temps[i - 1].attn_core):
                    core = [o for o, t in zip(l_fwd, temps, strict=True) if t.attn_core]
                    body += _as(core, "recompute")
                body += at_layer(lb[i], layer)
            bwd_layers.append(pre_b + body + post)
            l_saved = self.layer_input_bytes if full else lsaved
            saved += l_saved
            if record:
                lsaved_list.append((layer, l_saved))

        for index, layer in enumerate(layers):
            add_layer(layer, m.layer_kind(layer), recomputes_layer(p, index),
                      layer_gemm_dtype(run, layer), True)
        head_temps = head_template(layer_structure(run, "dense"))
        mtp_params = (0.0, 0.0)
        if last and m.mtp_num_layers:
            # multi-token prediction (ModelSpec.mtp_num_layers): after the decoder, each
            # depth's embedding, norms and projection, its block (checkpointed under full
            # recompute, as Megatron-Core's MultiTokenPredictionLayer does), and its own
            # final norm, logits and loss through the shared LM head
            own_temps = mtp_template(layer_structure(run, "dense"))
            for _ in range(m.mtp_num_layers):
                saved += self._append(fwd, bwd_layers, own_temps)
                for kind in m.mtp_kinds:
                    add_layer(-1, kind, p.recompute == "full", None, False)
                saved += self._append(fwd, bwd_layers, head_temps)
            mtp_params = self.mtp_params()
            if self.lora is not None:
                frozen += sum(mtp_params)
                mtp_params = (0.0, 0.0)
        if last:
            saved += self._append(fwd, bwd_layers, head_temps)
            head_params = P.output_params(m) / p.tp + P.norm_params(m)
            if self.lora is None:
                # one bucket with the MTP modules' parameters, which live beside the head
                dense_params += head_params + mtp_params[0]
                expert_params += mtp_params[1]
                lparams.append((-1, head_params + mtp_params[0], mtp_params[1]))
            else:
                frozen += head_params
        bwd = [o for block in reversed(bwd_layers) for o in block]
        trained = dense_params + expert_params
        if p.grad_accum_pass_bytes and trained:  # after the backward (DeepSpeed's engine)
            bwd.append(Op(name="grad_accum_pass", kind="memory", category="backward", layer=-1,
                          flops=trained, bytes=p.grad_accum_pass_bytes * trained,
                          backward=True))
        fwd_k = _drop_trivial(fwd, self.sizes)
        bwd_k = _drop_trivial(bwd, self.sizes)
        flops = sum(o.flops for o in fwd_k) + sum(o.flops for o in bwd_k)
        peak = max((o.size for ops in (fwd_k, bwd_k) for o in ops if o.kind == "comm"),
                   default=0.0)
        return ChunkGraph(
            virtual_stage=v, stage=v % p.pp, chunk=v // p.pp, layers=layers, first=first,
            last=last, forward=tuple(fwd_k), backward=tuple(bwd_k), saved_bytes=saved,
            dense_params=dense_params, expert_params=expert_params,
            layer_params=tuple(lparams), layer_saved=tuple(lsaved_list),
            frozen_params=frozen, comm_peak_bytes=peak), flops

    def chunk_key(self, layers: tuple[int, ...], first: bool, last: bool) -> Hashable:
        """What :meth:`chunk` reads of ``layers`` besides their indices (each layer's kind,
        GEMM dtype, recompute and parameters, and the chunk's place): two chunks with one key
        have the same operators on other layers."""
        run = self.run
        m, p = run.model, run.parallel
        return first, last, tuple((m.layer_kind(x), layer_gemm_dtype(run, x),
                                   recomputes_layer(p, i), self.layer_params(x))
                                  for i, x in enumerate(layers))

    def chunks(self, assignment: Sequence[tuple[int, ...]]) -> tuple[list[ChunkGraph], float]:
        """The chunk of each virtual stage holding ``assignment[v]``, and the FLOPs of all
        their forward and backward passes. A chunk with an earlier chunk's key
        (:meth:`chunk_key`) is that chunk on its own layers (:meth:`ChunkGraph.on_layers`),
        bound once."""
        pp = self.run.parallel.pp
        seen: dict[Hashable, tuple[ChunkGraph, float]] = {}
        out: list[ChunkGraph] = []
        total = 0.0
        for v, layers in enumerate(assignment):
            first, last = v == 0, v == len(assignment) - 1
            key = self.chunk_key(layers, first, last)
            if key in seen:
                source, flops = seen[key]
                out.append(source.on_layers(v, pp, layers))
            else:
                chunk, flops = self.chunk(v, layers, first, last)
                seen[key] = (chunk, flops)
                out.append(chunk)
            total += flops
        return out, total


def build_training_graph(run: TrainingRun) -> TrainingGraph:
    """Bind the model to the plan. Raises :class:`InfeasiblePlan` with every reason found."""
    problems = plan_problems(run)
    if problems:
        raise InfeasiblePlan("; ".join(problems))
    m, p = run.model, run.parallel
    n_mb = num_microbatches(run)
    assignment = layer_assignment(m.num_layers, p.pp * p.vpp, m.mtp_blocks,
                                  loss_layer_slots(run))
    chunks, hw_flops = ChunkBinder(run).chunks(assignment)

    moe = m.moe
    if moe is not None and moe.capacity_factor is None and moe.load_imbalance != 1.0:
        # a dropless imbalance makes the busiest rank wait, but executes no extra FLOPs: the
        # hardware FLOPs are those of the balanced routing
        balanced = run.model_copy(update={"model": m.model_copy(update={
            "moe": moe.model_copy(update={"load_imbalance": 1.0})})})
        hw_flops = ChunkBinder(balanced).chunks(assignment)[1]
    tokens = float(p.global_batch_size * run.seq_len)
    ranks_per_replica = p.tp * p.cp  # ranks sharing one micro-batch within a stage
    hw_total = hw_flops * n_mb * ranks_per_replica * run.dp
    return TrainingGraph(
        run=run, chunks=tuple(chunks), num_microbatches=n_mb, tokens_per_step=tokens,
        model_flops_per_step=model_flops_per_sequence(run) * p.global_batch_size,
        hardware_flops_per_step=hw_total,
    )


def loss_layer_slots(run: TrainingRun) -> int:
    """Layers' worth of work of the LM head and loss when the plan balances the last pipeline
    stage for them (``balance_loss_stage``), else 0: the head's forward FLOPs over a
    transformer layer's (the mean over the model's layers), rounded. Llama 3 70B at 8K tokens:
    2·8192·128256 = 2.10 GFLOP per token against 1.98, one slot, as Megatron-Bridge's H100
    layout gives its last stage one layer where the others have two."""
    m = run.model
    if not run.parallel.balance_loss_stage:
        return 0
    env = bind_dims(run, unsharded=True)
    head = _flops(head_template(layer_structure(run, "dense")), env)
    per_kind = _kind_flops(run, env)
    layers = sum(per_kind[m.layer_kind(x)] for x in range(m.num_layers))
    return round(head / (layers / m.num_layers)) if layers > 0 else 0


def _all(t: OpTemplate) -> bool:
    return True


def _flops(temps: Iterable[OpTemplate], env: Mapping[str, float],
           counted: Callable[[OpTemplate], bool] = _all) -> float:
    """Forward FLOPs of the templates ``counted`` of ``temps`` under bound dims ``env``."""
    return sum(t.flops.evaluate(env) for t in temps if counted(t))


def _kind_flops(run: TrainingRun, env: Mapping[str, float],
                counted: Callable[[OpTemplate], bool] = _all) -> dict[str, float]:
    """Forward FLOPs (:func:`_flops`) of one layer of each kind the model stacks (its decoder
    layers and its multi-token-prediction blocks) under bound dims ``env``."""
    m = run.model
    kinds = {m.layer_kind(x) for x in range(m.num_layers)} | set(m.mtp_kinds)
    return {kind: _flops(_layer_templates(run, kind), env, counted) for kind in sorted(kinds)}


def model_flops_per_sequence(run: TrainingRun) -> float:
    """Training model FLOPs of one sequence (the MFU numerator per sequence), unsharded.

    Full training: three times the forward (backward = 2 × forward). LoRA
    (``lora_rank``): the forward plus a backward without the weight-gradient GEMMs of the
    frozen weights, ``3·F − W`` with ``W`` the forward FLOPs of the GEMMs that have a weight
    gradient (≈ 4·N·T for the weights: forward 2NT + dgrad 2NT; attention keeps its 2×
    backward). The adapters' GEMMs are not counted (< 1% of an adapted layer's FLOPs at
    r=16; they are in the hardware FLOPs)."""
    if run.parallel.lora_rank is None:
        return 3.0 * model_flops_per_sequence_fwd(run)
    return 3.0 * model_flops_per_sequence_fwd(run) - model_flops_per_sequence_fwd(
        run, weight_gemms_only=True)


def model_flops_per_sequence_fwd(run: TrainingRun, weight_gemms_only: bool = False) -> float:
    """Forward FLOPs of one sequence, unsharded (GEMMs + attention, full s×s matrix; with
    the multi-token-prediction depths the model trains); with ``weight_gemms_only`` only
    those of GEMMs that have a weight gradient.

    Training model FLOPs per sequence are three times this (backward = 2 × forward).
    """
    m = run.model
    env = bind_dims(run, unsharded=True)
    total = 0.0
    st_dense = layer_structure(run, "dense")

    def counted(t: OpTemplate) -> bool:
        return not weight_gemms_only or (t.kind == "gemm" and t.weight_grad)

    head = _flops(head_template(st_dense), env, counted)
    total += _flops(embedding_template(st_dense), env, counted) + head
    per_kind = _kind_flops(run, env, counted)
    for kind in [m.layer_kind(x) for x in range(m.num_layers)] + list(m.mtp_kinds) * (
            m.mtp_num_layers):
        total += per_kind[kind]
    # each MTP depth's projection and its own logits (Megatron-LM training.py
    # num_floating_point_operations counts the MTP layers, "MTP norms and proj" and
    # "(mtp_num_layers + 1)" logits)
    return total + m.mtp_num_layers * (_flops(mtp_template(st_dense), env, counted) + head)

