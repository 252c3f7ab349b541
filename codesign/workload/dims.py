"""Bind a training run to the named dimensions of the layer templates (per rank, per
micro-batch), and check that the plan is feasible for the model and cluster."""

from __future__ import annotations

from codesign.specs.inference import DTYPE_BYTES
from codesign.specs.model import ModelSpec
from codesign.specs.run import TrainingRun
from codesign.workload.layers import LayerStructure


def plan_problems(run: TrainingRun) -> list[str]:
    """Every reason the plan cannot run (empty when feasible). No memory check here."""
    m, p = run.model, run.parallel
    dp, seq = run.dp, run.seq_len
    out: list[str] = []
    model_par = p.tp * p.pp * p.cp
    if p.dp is None and run.num_gpus % model_par:
        out.append(f"num_gpus {run.num_gpus} is not divisible by tp×pp×cp = {model_par}")
    elif model_par * dp != run.num_gpus:
        out.append(f"tp×pp×cp×dp = {model_par * dp} != num_gpus {run.num_gpus}")
    if dp < 1:
        out.append(f"tp×pp×cp = {model_par} exceeds num_gpus {run.num_gpus}")
        return out
    out += tp_problems(m, p.tp)
    if p.cp > 1 and m.mamba is not None:
        out.append(f"cp {p.cp} > 1 is not modelled for Mamba layers ({m.name}): the SSD scan "
                   "carries its state along the whole sequence (Megatron-Core's "
                   "MambaContextParallel all-to-all is not priced); use cp 1")
    if seq % p.cp:
        out.append(f"cp {p.cp} does not divide seq_len {seq}")
    if p.pp * p.vpp > m.num_layers + 2:
        # the embedding and the loss may each take a virtual stage of their own
        # (:func:`~codesign.workload.training.layer_assignment`), no more
        out.append(f"pp×vpp = {p.pp * p.vpp} exceeds num_layers + 2 = {m.num_layers + 2} "
                   "(one virtual stage per transformer layer, plus one for the embedding and "
                   "one for the loss)")
    elif p.recompute_num_layers is not None:
        most = largest_chunk_layers(run)
        if p.recompute_num_layers > most:
            out.append(f"recompute_num_layers {p.recompute_num_layers} exceeds the {most} "
                       f"layers of the largest pipeline chunk (num_layers {m.num_layers} over "
                       f"pp×vpp = {p.pp * p.vpp})")
    per_step = p.micro_batch_size * dp
    if out:  # batch arithmetic on a wrong dp would only add noise
        return out
    if p.global_batch_size % per_step:
        out.append(f"global_batch_size {p.global_batch_size} is not a multiple of "
                   f"micro_batch_size×dp = {per_step}")
    else:
        n_mb = p.global_batch_size // per_step
        if p.pipeline_schedule == "interleaved" and n_mb % p.pp:
            out.append(f"interleaved schedule needs micro-batches ({n_mb}) divisible by pp {p.pp}")
    if m.moe is not None:
        if m.moe.num_experts % p.ep:
            out.append(f"ep {p.ep} does not divide num_experts {m.moe.num_experts}")
        if dp % p.ep and (p.tp * p.cp * dp) % (p.ep * p.expert_tp):
            # Megatron-Core folds EP over TP×CP×DP (parallel_state: the expert grid
            # etp × ep × edp must tile the tp × cp × dp ranks of a stage)
            out.append(f"ep {p.ep} does not divide dp {dp}, and ep×etp = "
                       f"{p.ep * p.expert_tp} does not divide tp×cp×dp = {p.tp * p.cp * dp} "
                       "(MoE parallel folding)")
        if p.expert_tp not in (1, p.tp):
            out.append(f"etp must be 1 or tp ({p.tp}), got {p.expert_tp}")
        if m.moe.expert_ffn_hidden_size % p.expert_tp:
            out.append(f"etp {p.expert_tp} does not divide expert_ffn_hidden_size")
    elif p.ep > 1:
        out.append(f"ep {p.ep} > 1 needs an MoE model; {m.name} is dense")
    have = run.gpu.peak_tflops
    if p.dtype in ("fp8", "fp4") and p.dtype not in have:
        out.append(f"dtype {p.dtype} is not supported by {run.gpu.name} "
                   f"(has {', '.join(sorted(have))})")
    elif (p.dtype == "fp4" and p.fp4_high_precision_dtype not in have
          and any(high_precision_layer(run, i) for i in range(m.num_layers))):
        out.append(f"fp4_high_precision_dtype {p.fp4_high_precision_dtype} is not supported "
                   f"by {run.gpu.name} (has {', '.join(sorted(have))})")
    if p.offloads and run.gpu.host_tier is None:
        out.append(f"offload needs a host tier: {run.gpu.name} has no host_tier")
    return out


def largest_chunk_layers(run: TrainingRun) -> int:
    """Transformer layers of the plan's largest pipeline chunk (virtual stage): the layers
    split over pp × vpp chunks as evenly as possible
    (:func:`codesign.workload.training.layer_assignment`)."""
    p = run.parallel
    return -(-run.model.num_layers // (p.pp * p.vpp))


def high_precision_layer(run: TrainingRun, layer: int) -> bool:
    """Whether transformer layer ``layer`` keeps its GEMMs out of FP4 under ``dtype: fp4``
    (the first ``fp4_high_precision_first`` and last ``fp4_high_precision_last`` layers, as
    Megatron-LM's ``--first-last-layers-bf16``); always False for other dtypes."""
    p = run.parallel
    if p.dtype != "fp4":
        return False
    return (layer < p.fp4_high_precision_first
            or layer >= run.model.num_layers - p.fp4_high_precision_last)


def layer_gemm_dtype(run: TrainingRun, layer: int) -> str:
    """GEMM precision of the linear layers of transformer layer ``layer``."""
    p = run.parallel
    return p.fp4_high_precision_dtype if high_precision_layer(run, layer) else p.dtype


def tp_problems(m: ModelSpec, tp: int) -> list[str]:
    """Reasons tensor parallelism ``tp`` cannot split ``m``'s layers (training and inference).

    Attention heads and the dense MLP are checked where the model has them; Mamba-2 mixers
    split heads and B/C groups over TP, so ``tp`` must divide both (Megatron-Core
    megatron/core/ssm/mamba_mixer.py asserts ``nheads % tp == 0`` and ``ngroups % tp == 0``).
    """
    out: list[str] = []
    if m.attention_layers:
        if m.num_heads % tp:
            out.append(f"tp {tp} does not divide num_heads {m.num_heads}")
        kv = m.kv_heads
        if m.mla is None and kv % tp and tp % kv:
            out.append(f"tp {tp} and num_kv_heads {kv}: one must divide the other")
    if (not m.is_hybrid or m.count_kind("mlp")) and m.ffn_hidden_size % tp:
        out.append(f"tp {tp} does not divide ffn_hidden_size {m.ffn_hidden_size}")
    mb = m.mamba
    if mb is not None:
        if mb.num_heads % tp:
            out.append(f"tp {tp} does not divide the Mamba heads {mb.num_heads}")
        if mb.n_groups % tp:
            out.append(f"tp {tp} does not divide the Mamba n_groups {mb.n_groups} (each TP "
                       "rank needs whole B/C groups)")
    return out


def num_microbatches(run: TrainingRun) -> int:
    """Micro-batches per pipeline per step."""
    p = run.parallel
    return max(1, p.global_batch_size // (p.micro_batch_size * run.dp))


#: per layer kind (:meth:`ModelSpec.layer_kind`): the template block and whether it is MoE
KIND_BLOCKS: dict[str, tuple[str, bool]] = {
    "dense": ("transformer", False), "moe": ("transformer", True), "mamba": ("mamba", False),
    "attention": ("attention", False), "mlp": ("mlp", False), "moe_mlp": ("mlp", True),
}


#: layer kinds with a self-attention block
ATTENTION_KINDS = frozenset({"dense", "moe", "attention"})


def kind_of(kind: str | bool) -> str:
    """A layer kind; a bool is the kind of a transformer layer (``True``: ``moe``)."""
    if isinstance(kind, bool):
        return "moe" if kind else "dense"
    return kind


def layer_structure(run: TrainingRun, kind: str) -> LayerStructure:
    """The discrete template choices of one layer of ``kind`` under this plan."""
    m, p = run.model, run.parallel
    block, moe_layer = KIND_BLOCKS[kind]
    shared = m.moe is not None and m.moe.num_shared_experts > 0
    return LayerStructure(
        mla=m.mla is not None,
        q_lora=m.mla is not None and m.mla.q_lora_rank is not None,
        gated=m.mlp == "gated",
        flash=p.flash_attention,
        sp=p.sequence_parallel and p.tp > 1,
        moe=moe_layer,
        shared_experts=moe_layer and shared,
        expert_tp=moe_layer and p.expert_tp > 1,
        # buffers padded to capacity have static split sizes; dropless dispatch over more
        # than one expert (or expert rank) needs the per-expert counts on the host
        dropless_sync=(moe_layer and m.moe is not None and m.moe.capacity_factor is None
                       and (p.ep > 1 or m.moe.num_experts > 1)),
        dispatch_detail=p.moe_dispatch_detail and moe_layer,
        sort_by_local_expert=(p.moe_dispatch_detail and moe_layer and m.moe is not None
                              and m.moe.num_experts > p.ep),
        ep_overlap=p.ep_comm_overlap and moe_layer,
        moe_latent=moe_layer and m.latent_moe,
        tp_overlap=p.tp_comm_overlap,
        eager=p.pointwise_kernels == "eager",
        rmsnorm=m.norm == "rmsnorm",
        rotary=m.position_embedding == "rope",
        parallel=m.parallel_block,
        parallel_two_norms=m.parallel_block_norms == 2,
        # training frameworks with parallel blocks sum both branches before one TP reduction
        # (GPT-NeoX gpt_j_residual; XLA SPMD reduces the summed partial outputs)
        parallel_merged_tp=m.parallel_block,
        block=block,
    )


def pipeline_message(run: TrainingRun) -> tuple[float, float]:
    """One pipeline send per micro-batch (activations forward, their gradient backward):
    ``(bytes each sending rank puts on the wire, bytes the receiving TP group all-gathers
    afterwards)``; the second is 0 unless the send is scatter/gathered.

    The message is one micro-batch's hidden states in bf16, split by CP. With sequence
    parallelism every TP rank already holds ``1/tp`` of it; with
    ``pipeline_scatter_gather`` (no SP) each TP rank sends ``1/tp`` of the replicated tensor
    over its own link and the receivers all-gather it over the scale-up domain (Narayanan et
    al. 2021, Sec. 4.1); otherwise every TP rank sends the whole tensor.
    """
    p = run.parallel
    return pipeline_message_of(p.micro_batch_size, run.seq_len, p.cp, run.model.hidden_size,
                               p.tp, p.sequence_parallel, p.pipeline_scatter_gather)


def pipeline_message_of(micro_batch_size: int, seq_len: int, cp: int, hidden_size: int,
                        tp: int, sequence_parallel: bool,
                        scatter_gather: bool) -> tuple[float, float]:
    """:func:`pipeline_message` from the plan's numbers (bytes, bytes)."""
    full = micro_batch_size * seq_len / cp * hidden_size * 2.0
    if tp > 1 and sequence_parallel:
        return full / tp, 0.0
    if tp > 1 and scatter_gather:
        return full / tp, full
    return full, 0.0


def mamba_dims(m: ModelSpec, tp: int) -> dict[str, float]:
    """The Mamba-2 template dimensions of ``m`` per TP rank (heads and groups split)."""
    mb = m.mamba
    if mb is None:
        return {}
    return {"di_t": mb.d_inner / tp, "mh_t": mb.num_heads / tp,
            "gn_t": mb.n_groups * mb.d_state / tp, "sN": float(mb.d_state),
            "sQ": float(mb.chunk_size), "kc": float(mb.d_conv)}


def bind_dims(run: TrainingRun, unsharded: bool = False) -> dict[str, float]:
    """Numbers for every template dimension (see :mod:`codesign.workload.layers`).

    ``unsharded=True`` binds one sequence on one device (tp = cp = ep = 1): the per-sequence
    model FLOPs come from that binding.
    """
    m, p = run.model, run.parallel
    seq = float(run.seq_len)
    tp = 1 if unsharded else p.tp
    cp = 1 if unsharded else p.cp
    ep = 1 if unsharded else p.ep
    etp = 1 if unsharded else p.expert_tp
    mbs = 1 if unsharded else p.micro_batch_size
    sp = p.sequence_parallel and tp > 1
    tokens = mbs * seq / cp
    e_gemm = DTYPE_BYTES[p.dtype]  # bf16/fp16 2, fp8 1, fp4 (NVFP4 with block scales) 0.5625
    env: dict[str, float] = {
        "b": mbs, "T": tokens, "Tsp": tokens / tp if sp else tokens, "S": seq,
        # tokens are dispatched in the activation dtype (BF16) even under FP8 training:
        # Transformer Engine's FP8 autocast quantizes inside its GEMM modules (the experts'
        # GroupedLinear), after Megatron-Core's all-to-all token dispatcher has moved the
        # BF16 hidden states (megatron/core/transformer/moe/token_dispatcher.py)
        "h": m.hidden_size, "h_t": m.hidden_size / tp, "hx": float(m.moe_token_width),
        "e": 2.0, "eg": e_gemm,
        "tok_e": 2.0, "ew": e_gemm, "ekv": 2.0,
        "a_t": m.num_heads / tp, "g_t": max(m.kv_heads / tp, 1.0), "d": m.dim_per_head,
        "f_t": m.ffn_hidden_size / tp, "gm": 2.0 if m.mlp == "gated" else 1.0,
        "V_t": m.vocab_size / tp,
        "ql": 0.0, "kvl": 0.0, "dn": 0.0, "dr": 0.0, "dv": 0.0,
        "E": 1.0, "E_l": 1.0, "k": 0.0, "fe_t": 0.0, "Tx": 0.0, "Td": 0.0, "fs_t": 0.0,
        "etp": float(etp),
        "aw": m.attention_window_fraction(seq, p.document_tokens),
    }
    if m.mla is not None:
        env.update(ql=float(m.mla.q_lora_rank or 0), kvl=m.mla.kv_lora_rank,
                   dn=m.mla.qk_nope_head_dim, dr=m.mla.qk_rope_head_dim, dv=m.mla.v_head_dim)
    if m.mamba is not None:
        env.update(mamba_dims(m, tp))
    if m.moe is not None:
        moe = m.moe
        shared_inner = (moe.shared_expert_ffn_hidden_size or moe.expert_ffn_hidden_size)
        env.update(
            E=moe.num_experts, E_l=moe.num_experts / ep, k=moe.top_k,
            fe_t=moe.expert_ffn_hidden_size / etp,
            # the busiest rank's share (capacity padding or load imbalance); one sequence on
            # one device (the model-FLOP binding) is balanced by definition
            Tx=tokens * moe.top_k * etp / tp * (1.0 if unsharded else moe.load_factor),
            Td=tokens / tp * moe.top_k * (1.0 if unsharded else moe.load_factor),
            fs_t=moe.num_shared_experts * shared_inner / tp,
        )
    return env
