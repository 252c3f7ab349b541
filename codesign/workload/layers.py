"""Transformer layer templates: the forward operators of one rank, symbolic in the dims.

Dimension names bound by :func:`codesign.workload.dims.bind_dims` (per rank, per micro-batch):

==========  ==================================================================================
``T``       tokens of this rank's micro-batch before TP splitting: ``b × seq / cp``
``Tsp``     tokens in sequence-parallel regions: ``T / tp`` with SP, else ``T``
``S``       key/value sequence length seen by attention (full sequence, CP gathers keys)
``b``       micro-batch size (sequences)
``h``       hidden size (``h_t``: per TP rank);  ``e`` activation bytes/element (2);
            ``eg`` GEMM input bytes
``ew``      GEMM weight bytes/element (training: ``eg``);  ``ekv`` K/V bytes/element as
            attention reads them (training: ``e``; inference: the KV-cache dtype)
``a_t``     query heads per TP rank;  ``g_t`` KV heads per TP rank (≥ 1);  ``d`` head dim
``f_t``     dense MLP inner size per TP rank;  ``gm`` 2 for gated MLPs, else 1
``V_t``     vocabulary per TP rank
``ql`` ...  MLA ranks and head dims (``ql`` q LoRA rank, ``kvl`` KV LoRA rank, ``dn`` ``dr`` ``dv``)
``E_l``     routed experts held by this rank; ``k`` top-k; ``fe_t`` expert inner size per ETP
``hx``      width of the routed experts' tokens: the LatentMoE latent size, else ``h``
``Tx``      routed token copies an expert rank computes: ``T × k × etp / tp``
``Td``      routed token copies a rank dispatches: ``Tsp_e × k`` (``Tsp_e`` = ``T/tp``)
``fs_t``    shared-expert inner size (all shared experts) per TP rank
``di_t``    Mamba-2 inner width ``d_inner / tp``;  ``mh_t`` SSM heads per TP rank
``gn_t``    B (or C) width per TP rank: ``n_groups × d_state / tp``;  ``sN`` state size
``sQ``      SSD chunk length;  ``kc`` conv1d kernel width
``aw``      fused attention FLOPs under the model's sliding windows, as a fraction of full
            causal attention (:meth:`codesign.specs.model.ModelSpec.attention_window_fraction`;
            1 without windows): a windowed layer's kernel skips the key tiles outside the window
==========  ==================================================================================

Fusion (``fused=``, used when the GPU compiles the step with XLA, ``GpuSpec.execution``): a
pointwise op (activation, RoPE) runs as the epilogue of the matmul that produces its input
and moves no HBM bytes of its own; a residual add reads the residual stream (one tensor)
while the fused matmul writes the sum instead of its output; a normalization keeps its
reduction (one read of its input) and its scaling fuses into the consuming matmul. Each XLA
"fusion" op holds at most one matmul and its related pointwise VPU ops (the scaling book,
jax-ml.github.io/scaling-book/profiling, "Op Name"). ASSUMPTION: the same holds across a
TP collective between the op and its matmul (XLA fuses collectives into matmul fusions too,
e.g. the ``all-reduce-scatter`` fusion shown there).

Eager kernels (``eager``, ``ParallelismSpec.pointwise_kernels == "eager"``): PyTorch eager
mode runs one kernel per ATen op of a module's Python, each reading its inputs from HBM and
writing its output there. The decompositions priced (``e`` the activation bytes, ``F32`` = 4
for an fp32 intermediate), per element:

* RMSNorm as torchtitan's ``RMSNorm`` and Hugging Face's ``LlamaRMSNorm`` write it,
  ``(x.float() * rsqrt(x.float().pow(2).mean(-1) + eps)).type_as(x) * weight``: upcast
  (``e + F32``), square (``2·F32``), mean (``F32``), scale (``2·F32``), downcast (``F32 + e``),
  weight (``2e``): ``4e + 7·F32`` (36 B in bf16) against ``2e`` fused. LayerNorm is one ATen
  kernel (``F.layer_norm``): the same bytes either way.
* SwiGLU ``silu(a) * b``: silu (``2e``), product (``3e``): ``5e`` per inner element against
  ``3e`` fused; a plain activation (GELU) is one kernel either way: ``(3·gm - 1)·e``.
* RoPE as torchtitan applies it (upcast, complex product with the frequencies, downcast) or
  Hugging Face's ``q * cos + rotate_half(q) * sin`` (five kernels of ``2e`` each in bf16):
  ``2e + 4·F32`` per element of Q and K (20 B in bf16) against ``2e`` fused. MLA ropes only its
  ``dr`` slice: left at its fused bytes.

Backward moves twice the forward bytes in both modes (:attr:`OpTemplate.backward_bytes`; the
autograd of the RMSNorm chain above, counted kernel by kernel, moves ``8e + 15·F32``, 76 B in
bf16, against 2 × 36). A residual add, a cross-entropy and a permutation are one kernel
either way. Not priced: the copies eager ``repeat_kv`` makes of grouped K/V heads.

A hybrid model's layers are single blocks (:attr:`LayerStructure.block`): a Mamba-2 mixer
(:func:`mamba_block`), attention alone, or an MLP / MoE alone, each with its pre-norm.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from codesign.ir import Overlap
from codesign.workload.ops import OpTemplate, comm, gemm, host_sync, memory
from codesign.workload.symbolic import Expr, Sym, lift, syms

T, Tsp, S, b, h, e, eg = syms("T Tsp S b h e eg")
a_t, g_t, d, f_t, gm, V_t = syms("a_t g_t d f_t gm V_t")
ql, kvl, dn, dr, dv = syms("ql kvl dn dr dv")
E, E_l, k, fe_t, Tx, Td, fs_t, etp = syms("E E_l k fe_t Tx Td fs_t etp")
hx = Sym("hx")  # routed experts' token width (LatentMoE latent size, else h)
h_t = Sym("h_t")  # hidden size per TP rank
ew, ekv = syms("ew ekv")  # bytes per weight element; per cached K/V element
#: executed fraction of causal attention under the model's sliding windows (1: none)
aw = Sym("aw")
di_t, mh_t, gn_t, sN, sQ, kc = syms("di_t mh_t gn_t sN sQ kc")  # Mamba-2 (see table)
#: bytes per element of the SSD chunk states, which the scan keeps in fp32 between its steps
#: (mamba_ssm/ops/triton/ssd_combined.py: ``_chunk_state_fwd`` / ``_state_passing_fwd``)
SSD_STATE_BYTES = 4.0
TOKEN_BYTES = Sym("tok_e")  # bytes per element of dispatched tokens
#: GEMMs that stay in 16 bit when the linear layers run in a low-precision format: the MoE
#: router and the LM head (inference: quantized checkpoints leave them unquantized; training
#: under FP4: see :func:`codesign.workload.training.template_precision`)
UNQUANTIZED_GEMMS = frozenset({"router", "logits"})


@dataclass(frozen=True)
class LayerStructure:
    """The discrete choices that shape a layer's operator list (numbers come later)."""

    mla: bool = False
    q_lora: bool = False
    gated: bool = True
    flash: bool = True
    sp: bool = False
    moe: bool = False
    shared_experts: bool = False
    expert_tp: bool = False  # expert weights split over the TP group (etp == tp > 1)
    dropless_sync: bool = False  # dropless all-to-all dispatch: host learns the split sizes
    #: Megatron-Core's training all-to-all dispatcher in detail: the token-count all-gather
    #: (dropless) and the routing probabilities' own all-to-all
    dispatch_detail: bool = False
    #: ... and, with more than one local expert, the received tokens re-sorted by local expert
    #: before the grouped GEMM and back after it
    sort_by_local_expert: bool = False
    #: the dispatch/combine all-to-alls run during other micro-batches' computation
    ep_overlap: bool = False
    #: LatentMoE: tokens projected to the latent width ``hx`` before the dispatch and back
    #: after the combine (:attr:`codesign.specs.model.MoESpec.latent_size`)
    moe_latent: bool = False
    tp_overlap: bool = False
    mla_absorb: bool = False  # inference: MLA attention over the compressed latent KV
    #: pointwise operators run as PyTorch eager decompositions (module docstring)
    eager: bool = False
    rmsnorm: bool = True  # the model's norm is RMSNorm (else LayerNorm)
    #: attention and MLP in parallel from one normalized input (:func:`parallel_block`)
    parallel: bool = False
    #: ... each branch with its own norm (Falcon-180B, GPT-NeoX) rather than a shared one
    parallel_two_norms: bool = False
    #: ... with the two branches' tensor-parallel reductions merged into one
    parallel_merged_tp: bool = False
    #: rotary position embedding: a ``rope`` kernel rotates Q and K before attention (MLA
    #: always ropes its decoupled dimensions). Training binds it from the model's
    #: ``position_embedding``; inference keeps the default, whose ``rope`` operator also
    #: prices the KV-cache append (:mod:`codesign.workload.inference`)
    rotary: bool = True
    #: ``transformer`` = attention + MLP; hybrid blocks: ``mamba``, ``attention``, ``mlp``
    #: (the MLP or, with ``moe``, the MoE block alone)
    block: str = "transformer"


#: bytes per element of an fp32 intermediate of an eager decomposition
F32 = 4.0


def _norm(name: str, st: LayerStructure, n: Expr) -> OpTemplate:
    """A normalization over ``n`` elements: reads its input, writes its output; eager RMSNorm
    moves ``4e + 7·F32`` per element (module docstring). Saves its input; XLA fuses its
    scaling into the consuming matmul and keeps its reduction (one read)."""
    nbytes = (4 * e + 7 * F32) * n if st.eager and st.rmsnorm else 2 * n * e
    return memory(name, nbytes, saved=n * e, fused=n * e)


def _act(name: str, st: LayerStructure, n: Expr) -> OpTemplate:
    """The MLP activation over ``n`` inner elements (gated: ``gm`` = 2 inputs per output);
    eager SwiGLU is two kernels, ``(3·gm - 1)·e`` per element (module docstring)."""
    nbytes = (3 * gm - 1) * n * e if st.eager else (gm + 1) * n * e
    return memory(name, nbytes, saved=gm * n * e, fused=0)


def _tp_in(name: str, st: LayerStructure, size: object) -> OpTemplate:
    """Entering a tensor-parallel region: SP all-gather, or Megatron's *f* (AR in backward)."""
    if st.sp:
        return comm(name, "all_gather", "reduce_scatter", "tp", size,  # type: ignore[arg-type]
                    overlap="next" if st.tp_overlap else "none")
    return comm(name, None, "all_reduce", "tp", size,  # type: ignore[arg-type]
                overlap="next" if st.tp_overlap else "none")


def _tp_out(name: str, st: LayerStructure, size: object) -> OpTemplate:
    """Leaving a tensor-parallel region: SP reduce-scatter, or Megatron's *g* (AR forward)."""
    if st.sp:
        return comm(name, "reduce_scatter", "all_gather", "tp", size,  # type: ignore[arg-type]
                    overlap="prev" if st.tp_overlap else "none")
    return comm(name, "all_reduce", None, "tp", size,  # type: ignore[arg-type]
                overlap="prev" if st.tp_overlap else "none")


def attention_block(st: LayerStructure) -> list[OpTemplate]:
    """Norm, QKV (or MLA) projections, attention core, output projection, residual."""
    ops = [_norm("attn_norm", st, Tsp * h),
           _tp_in("attn_tp_in", st, T * h * e)]
    if st.mla:
        dqk = dn + dr
        if st.q_lora:
            ops += [gemm("q_down", T, ql, h, saved=Tsp * h * e, e_in=eg, e_out=e, e_w=ew),
                    _norm("q_norm", st, T * ql),
                    gemm("q_up", T, a_t * dqk, ql, saved=T * ql * e, e_in=eg, e_out=e, e_w=ew)]
        else:
            ops.append(gemm("q_proj", T, a_t * dqk, h, saved=Tsp * h * e, e_in=eg, e_out=e,
                            e_w=ew))
        ops += [gemm("kv_down", T, kvl + dr, h, saved=0, e_in=eg, e_out=e, e_w=ew),
                _norm("kv_norm", st, T * kvl),
                gemm("kv_up", T, a_t * (dn + dv), kvl, saved=T * kvl * e, e_in=eg, e_out=e,
                     e_w=ew),
                ]
        if st.mla_absorb:
            # weight-absorbed MLA (DeepSeek-V2 Sec. 2.1.2; FlashMLA): queries are projected into
            # the latent space (the kv_up GEMM stands for the absorbed W_UK / W_UV products:
            # same weights, same FLOPs), attention reads the compressed latent (kvl + dr) per
            # key like MQA with one KV head and computes scores over kvl + dr, values over kvl
            head_k = kvl + dr
            q_bytes, kv_bytes, o_dim = T * a_t * head_k * e, b * S * head_k * ekv, a_t * dv
            attn_flops = 2 * T * S * a_t * (head_k + kvl)
            mean_dim = (head_k + kvl) / 2
        else:
            q_bytes, kv_bytes, o_dim = (T * a_t * dqk * e, b * S * a_t * (dqk + dv) * ekv,
                                        a_t * dv)
            attn_flops = 2 * T * S * a_t * (dqk + dv)
            mean_dim = (dqk + dv) / 2
        kv_size = b * S * (kvl + dr) * e  # CP exchanges the compressed latent KV
    else:
        ops += [gemm("qkv_proj", T, (a_t + 2 * g_t) * d, h, saved=Tsp * h * e,
                     e_in=eg, e_out=e, e_w=ew),
                ]
        q_bytes, kv_bytes, o_dim = T * a_t * d * e, b * S * 2 * g_t * d * ekv, a_t * d
        attn_flops = 4 * T * S * a_t * d
        mean_dim = d
        kv_size = b * S * 2 * g_t * d * e
    # Q, K, V as attention reads them (after RoPE) are saved for backward, also under
    # selective recompute, which recomputes only the attention core from them.
    local_kv = kv_bytes * T / (b * S)
    if not (st.rotary or st.mla):
        # no rotation kernel (learned, ALiBi or no position embedding): the operator keeps
        # only the Q, K, V it saves, and the step drops it as doing nothing
        rope_bytes = lift(0)
    elif st.eager and not st.mla:  # upcast, rotate, downcast Q and K (module docstring)
        rope_bytes = T * (a_t + g_t) * d * (2 * e + 4 * F32)
    else:
        rope_bytes = 2 * (q_bytes + local_kv)
    ops.append(memory("rope", rope_bytes, saved=q_bytes + local_kv, fused=0))
    ops.append(comm("cp_kv_gather", "all_gather", "reduce_scatter", "cp", kv_size,
                    overlap="next"))
    if st.flash:
        ops.append(OpTemplate(
            name="attention", kind="attention", flops=attn_flops * aw,
            bytes=q_bytes + kv_bytes + T * o_dim * e, saved=b * a_t * (T / b) * 4,
            attn_core=True, causal=True, precision="bf16", head_dim=mean_dim,
            attn=(b * a_t, S, ((kvl + dr) if st.mla_absorb else (dn + dr)) if st.mla else d)))
    else:  # unfused: score matrix materialized (Korthikanti et al. 2022: 5·a·s²·b bytes)
        scores = b * a_t * (T / b) * S
        half = attn_flops / 2
        ops += [
            OpTemplate(name="attn_scores", kind="attention", flops=half,
                       bytes=q_bytes + kv_bytes / 2 + scores * e, saved=lift(0),
                       attn_core=True, precision="bf16"),
            # softmax output (2 B), dropout mask (1 B) and dropout output (2 B) per score
            memory("softmax_dropout", 4 * scores * e, saved=5 * scores * e / 2,
                   attn_core=True),
            OpTemplate(name="attn_values", kind="attention", flops=half,
                       bytes=scores * e + kv_bytes / 2 + T * o_dim * e, saved=lift(0),
                       attn_core=True, precision="bf16"),
        ]
    ops += [gemm("out_proj", T, h, o_dim, saved=T * o_dim * e, e_in=eg, e_out=e, e_w=ew),
            _tp_out("attn_tp_out", st, T * h * e),
            memory("attn_residual", 3 * Tsp * h * e, saved=Tsp * h * e / 2,
                   fused=Tsp * h * e)]
    return ops


def dense_mlp_block(st: LayerStructure, inner: Sym = f_t, prefix: str = "mlp") -> list[OpTemplate]:
    """Norm, up (gated: gate+up) projection, activation, down projection, residual."""
    return [
        _norm(f"{prefix}_norm", st, Tsp * h),
        _tp_in(f"{prefix}_tp_in", st, T * h * e),
        gemm(f"{prefix}_up", T, gm * inner, h, saved=Tsp * h * e, e_in=eg, e_out=e, e_w=ew),
        _act(f"{prefix}_act", st, T * inner),
        gemm(f"{prefix}_down", T, h, inner, saved=T * inner * e, e_in=eg, e_out=e, e_w=ew),
        _tp_out(f"{prefix}_tp_out", st, T * h * e),
        memory(f"{prefix}_residual", 3 * Tsp * h * e, saved=Tsp * h * e / 2,
               fused=Tsp * h * e),
    ]


def moe_block(st: LayerStructure) -> list[OpTemplate]:
    """Router, token dispatch (all-to-all), experts, combine; plus shared experts."""
    ops = [_norm("moe_norm", st, Tsp * h),
           # the gate is a plain torch linear outside Transformer Engine's FP8 autocast:
           # BF16 even in FP8 runs (Megatron-Core moe/router.py, TopKRouter.gating)
           replace(gemm("router", Tsp, E, h, saved=Tsp * h * e, e_in=e, e_out=4),
                   precision="bf16"),
           # score function and top-k over the fp32 logits (Megatron-Core moe/moe_utils.py,
           # topk_softmax_with_capacity): read the logits, write the scores, read them for
           # top-k; the scores are kept for the softmax backward
           memory("router_topk", 3 * Tsp * E * 4, saved=Tsp * E * 4)]
    if st.moe_latent:
        # LatentMoE: one projection to the latent width for all routed experts, before the
        # tokens are permuted and dispatched (Megatron-Core MoELayer fc1_latent_proj)
        ops.append(gemm("latent_down", Tsp, hx, h, saved=Tsp * h * e, e_in=eg, e_out=e,
                        e_w=ew))
    ops.append(memory("permute", 2 * Td * hx * e + Tsp * E * 4, saved=0))
    if st.dropless_sync:
        # dropless dispatch: the all-to-all-v split sizes must be on the host, so the token
        # counts per expert (E int64 of this rank, ep × E_l gathered) are copied to the host
        # and the stream synchronized (Megatron-Core moe/token_dispatcher.py,
        # MoEAlltoAllTokenDispatcher.preprocess: cuda_sync_point "before_ep_alltoall").
        # In detail: before that, every rank's counts (E int64) are all-gathered over the
        # expert group so each rank knows what it receives (preprocess:
        # gather_from_sequence_parallel_region(num_local_tokens_per_expert, group=tp_ep_group));
        # output ep × E int64 (ep = E / E_l), a latency-bound collective on the critical path
        if st.dispatch_detail:
            ops.append(comm("tokens_per_expert_gather", "all_gather", None, "ep",
                            E * (E / E_l) * 8))
        ops.append(host_sync("tokens_per_expert_sync", 2 * E * 8))
    # with EP overlap (Megatron-Core --overlap-moe-expert-parallel-comm: one micro-batch's
    # forward merged with another's backward so each one's all-to-alls run during the other's
    # computation; DeepSeek-V3's DualPipe, arXiv 2412.19437 Sec. 3.2.1) the all-to-alls leave
    # the compute stream's path: a pass takes the longer of its computation and its EP link
    a2a: Overlap = "hidden" if st.ep_overlap else "none"
    ops.append(comm("dispatch", "all_to_all", "all_to_all", "ep", Td * hx * TOKEN_BYTES,
                    overlap=a2a))
    if st.dispatch_detail:
        # each routed copy's probability (fp32) follows its token in its own all-to-all, and
        # its gradient returns the same way in backward (MoEAlltoAllTokenDispatcher.
        # dispatch_all_to_all: all_to_all(ep_group, permuted_probs, ...)); latency-bound
        ops.append(comm("dispatch_probs", "all_to_all", "all_to_all", "ep", Td * 4,
                        overlap=a2a))
    if st.sort_by_local_expert:
        # "permutation 2": the all-to-all output arrives ordered by source rank, then expert;
        # the grouped GEMM needs each local expert's tokens contiguous, so the received rows
        # are re-sorted (read and written once, in the activation dtype) and sorted back
        # before the combine (Megatron-Core moe/token_dispatcher.py,
        # MoEAlltoAllTokenDispatcher.dispatch_postprocess / combine_preprocess:
        # sort_chunks_by_idxs when num_local_experts > 1; moe/moe_utils.py). A pure
        # permutation: its backward applies the inverse one (backward_bytes 1).
        ops.append(memory("sort_by_expert", 2 * Td * hx * e, backward_bytes=1.0))
    if st.expert_tp:
        ops.append(comm("expert_tp_in", "all_gather", "reduce_scatter", "tp", Tx * hx * e))
    ops += [
        # grouped GEMM: one kernel per local expert over its Tx / E_l routed tokens
        gemm("expert_up", Tx / E_l, gm * fe_t, hx, saved=Tx * hx * e, e_in=eg, e_out=e, e_w=ew,
             count=E_l),
        _act("expert_act", st, Tx * fe_t),
        gemm("expert_down", Tx / E_l, hx, fe_t, saved=Tx * fe_t * e, e_in=eg, e_out=e, e_w=ew,
             count=E_l),
    ]
    if st.expert_tp:
        ops.append(comm("expert_tp_out", "reduce_scatter", "all_gather", "tp", Tx * hx * e))
    if st.sort_by_local_expert:
        ops.append(memory("unsort_by_expert", 2 * Td * hx * e, backward_bytes=1.0))
    ops += [comm("combine", "all_to_all", "all_to_all", "ep", Td * hx * TOKEN_BYTES,
                 overlap=a2a),
            memory("unpermute", 2 * Td * hx * e + Tsp * hx * e, saved=Td * 4)]
    if st.moe_latent:  # back to the hidden width (fc2_latent_proj)
        ops.append(gemm("latent_up", Tsp, h, hx, saved=Tsp * hx * e, e_in=eg, e_out=e,
                        e_w=ew))
    if st.shared_experts:
        ops += [
            _tp_in("shared_tp_in", st, T * h * e),
            gemm("shared_up", T, gm * fs_t, h, saved=0, e_in=eg, e_out=e, e_w=ew),
            _act("shared_act", st, T * fs_t),
            gemm("shared_down", T, h, fs_t, saved=T * fs_t * e, e_in=eg, e_out=e, e_w=ew),
            _tp_out("shared_tp_out", st, T * h * e),
        ]
    ops.append(memory("moe_residual", 3 * Tsp * h * e, saved=0, fused=Tsp * h * e))
    return ops


def ssd_scan_flops(tokens: Expr) -> Expr:
    """FLOPs of the SSD chunked scan over ``tokens`` tokens of one rank (Dao & Gu 2024,
    Sec. 6, "Hardware-Efficient Algorithms for SSD": per chunk of length Q, per group the
    ``C·Bᵀ`` block ``2Q²N``; per head the diagonal-block output ``2Q²P``, the chunk state
    ``2QNP``, the state-to-output product ``2QNP``, and passing the ``N×P`` state between
    chunks ``2NP``): ``2·tokens·(Q·G·N + Q·d_inner + 2·N·d_inner + N·d_inner/Q)`` per rank.
    The diagonal blocks are counted in full (the matrix form of the paper)."""
    return 2 * tokens * (sQ * gn_t + sQ * di_t + 2 * sN * di_t + sN * di_t / sQ)


def mamba_block(st: LayerStructure) -> list[OpTemplate]:
    """Pre-norm, Mamba-2 mixer, residual, as Megatron-Core's ``MambaMixer`` runs it
    (megatron/core/ssm/mamba_mixer.py): ``in_proj`` column-parallel (its input all-gathered
    under SP, Megatron's *f* otherwise) to ``[z, x, B, C, dt]`` with heads and groups split
    over TP, the depthwise causal conv1d over ``x, B, C`` (``2·kc`` FLOPs per channel per
    token), the SSD chunked scan (:func:`ssd_scan_flops`), the gated RMSNorm
    ``norm(y)·silu(z)``, and ``out_proj`` row-parallel with its all-reduce (SP:
    reduce-scatter).

    Activations saved for backward follow the memory-efficient path Megatron trains with
    (``mamba_split_conv1d_scan_combined``, mamba_ssm/ops/triton/ssd_combined.py): the
    ``in_proj`` output ``zxBCdt`` and the scan output are saved, the conv1d and the norm are
    recomputed in backward; ``out_proj`` saves its input. ASSUMPTION: the scan is priced as a
    fused attention-like kernel (tensor-core batched matmuls over chunks, no measured SSD
    kernel efficiency in the catalogs); its HBM bytes are its inputs and output plus the fp32
    chunk states written by one step and read by the next two (``3 · 4 · N · d_inner / Q`` per
    token).
    """
    conv_ch = di_t + 2 * gn_t  # x, B, C
    proj = 2 * di_t + 2 * gn_t + mh_t  # z, x, B, C, dt
    return [
        _norm("mamba_norm", st, Tsp * h),
        _tp_in("mamba_tp_in", st, T * h * e),
        gemm("in_proj", T, proj, h, saved=Tsp * h * e, e_in=eg, e_out=e, e_w=ew),
        OpTemplate(name="conv1d", kind="memory", flops=2 * kc * T * conv_ch,
                   bytes=2 * T * conv_ch * e, saved=T * proj * e, precision="bf16"),
        OpTemplate(name="ssd_scan", kind="attention", flops=ssd_scan_flops(T),
                   bytes=T * (conv_ch + mh_t + di_t) * e
                   + 3 * SSD_STATE_BYTES * T * sN * di_t / sQ,
                   saved=T * di_t * e, precision="bf16"),
        memory("gated_norm", 3 * T * di_t * e),
        gemm("mamba_out_proj", T, h, di_t, saved=T * di_t * e, e_in=eg, e_out=e, e_w=ew),
        _tp_out("mamba_tp_out", st, T * h * e),
        memory("mamba_residual", 3 * Tsp * h * e, saved=Tsp * h * e / 2,
               fused=Tsp * h * e),
    ]


#: operators a parallel block with one shared norm drops: the MLP's (or MoE's) norm
PARALLEL_NORM_DROPS = frozenset({"mlp_norm", "moe_norm"})
#: ... and with merged TP reductions: the attention's exit from the TP region, the MLP's entry
PARALLEL_TP_DROPS = frozenset({"attn_tp_out", "mlp_tp_in"})


def parallel_block(st: LayerStructure, attention: list[OpTemplate],
                   mlp: list[OpTemplate]) -> list[OpTemplate]:
    """Attention and MLP computed from the same normalized input, outputs summed:
    ``y = x + attn(norm(x)) + mlp(norm(x))`` (GPT-J, Wang & Komatsuzaki 2021; PaLM,
    Chowdhery et al. 2022 Sec. 2 "Parallel Layers"; GPT-NeoX ``use_parallel_residual``;
    Falcon ``parallel_attn``): the same operators as the sequential block, less the MLP's
    norm where the branches share one (GPT-J, PaLM; not ``st.parallel_two_norms``, Falcon-180B
    ``new_decoder_architecture`` and GPT-NeoX). The two adds stay (branch sum, then residual:
    TensorRT-LLM's Falcon layer writes them as two). With ``st.parallel_merged_tp`` the shared
    input enters the tensor-parallel
    region once (Megatron's *f*, or the SP all-gather) and the summed output leaves it once
    (*g*, or the SP reduce-scatter): one collective each way per layer instead of two, as
    GPT-NeoX does it ("we can do a single allreduce after we sum the outputs",
    EleutherAI/gpt-neox ``ParallelTransformerLayer``, ``gpt_j_residual``) and vLLM's Falcon
    (``reduce_row_parallel_results`` off under ``parallel_attn``); TensorRT-LLM 0.9's Falcon
    reduces each branch in its own row-parallel linear (``models/falcon/model.py``)."""
    drops = ((frozenset() if st.parallel_two_norms else PARALLEL_NORM_DROPS)
             | (PARALLEL_TP_DROPS if st.parallel_merged_tp else frozenset()))
    return [t for t in attention + mlp if t.name not in drops]


@lru_cache(maxsize=128)
def layer_template(st: LayerStructure) -> tuple[OpTemplate, ...]:
    """The forward operators of one layer (or hybrid block) with structure ``st``."""
    if st.block == "mamba":
        return tuple(mamba_block(st))
    mlp = moe_block(st) if st.moe else dense_mlp_block(st)
    if st.block == "attention":
        return tuple(attention_block(st))
    if st.block == "mlp":
        return tuple(mlp)
    if st.parallel:
        return tuple(parallel_block(st, attention_block(st), mlp))
    return tuple(attention_block(st) + mlp)


@lru_cache(maxsize=16)
def embedding_template(st: LayerStructure) -> tuple[OpTemplate, ...]:
    """Vocabulary-parallel embedding lookup (first pipeline stage)."""
    out = (comm("embed_tp_out", "reduce_scatter", "all_gather", "tp", T * h * e) if st.sp
           else comm("embed_tp_out", "all_reduce", None, "tp", T * h * e))
    return (memory("embedding", 2 * T * h * e, saved=T * 8), out)


@lru_cache(maxsize=16)
def head_template(st: LayerStructure) -> tuple[OpTemplate, ...]:
    """Final norm, vocabulary-parallel logits and cross-entropy loss (last stage)."""
    return (
        _norm("final_norm", st, Tsp * h),
        _tp_in("head_tp_in", st, T * h * e),
        gemm("logits", T, V_t, h, saved=Tsp * h * e, e_in=e, e_out=4),
        memory("cross_entropy", 3 * T * V_t * 4, saved=T * V_t * 4),
        comm("loss_tp_reduce", "all_reduce", None, "tp", 3 * T * 4),
    )


@lru_cache(maxsize=16)
def mtp_template(st: LayerStructure) -> tuple[OpTemplate, ...]:
    """What one multi-token-prediction depth runs before its block (DeepSeek-V3 report,
    arXiv 2412.19437, Sec. 2.2; Megatron-Core ``MultiTokenPredictionLayer``,
    megatron/core/transformer/multi_token_prediction.py): the embedding of the tokens shifted
    by the depth (the main model's vocabulary-parallel lookup again), ``enorm`` of those
    embeddings and ``hnorm`` of the previous depth's hidden states, their concatenation, and
    ``eh_proj``, a column-parallel ``2h -> h`` linear without bias whose input is all-gathered
    under sequence parallelism (Megatron's *f* without). Its ``h/tp`` outputs are all-gathered
    over TP (``gather_from_tensor_model_parallel_region``, whose backward only splits) and,
    under SP, split back to the sequence-parallel region (``scatter_to_sequence_parallel_
    region``: a split forward, an all-gather backward). After it: the block, then the depth's
    final norm, logits and loss (:func:`head_template`)."""
    return (
        *(replace(t, name=f"mtp_{t.name}") for t in embedding_template(st)),
        _norm("mtp_enorm", st, Tsp * h),
        _norm("mtp_hnorm", st, Tsp * h),
        _tp_in("mtp_proj_tp_in", st, 2 * T * h * e),
        gemm("mtp_eh_proj", T, h_t, 2 * h, saved=2 * Tsp * h * e, e_in=eg, e_out=e, e_w=ew),
        comm("mtp_proj_gather", "all_gather", "all_gather" if st.sp else None, "tp",
             T * h * e),
    )
