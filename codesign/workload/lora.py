"""LoRA fine-tuning (Hu et al. 2021, arXiv 2106.09685): frozen base weights, trained adapters.

With ``ParallelismSpec.lora_rank`` r, every adapted linear layer ``Y = X·W`` (``W`` k×n,
frozen) gets ``Y += (X·A)·B`` with ``A`` k×r and ``B`` r×n trained. The adapted layers are
the attention projections, as in the MLPerf Training Llama 2 70B LoRA reference
(mlcommons/training ``llama2_70b_lora/run_llama_70B_scrolls_r16.sh``: ``--lora_r 16
--lora_target_modules "qkv_proj,o_proj"``): :data:`LORA_TARGETS` (for MLA models every
projection of the attention block). MLP, expert, Mamba, embedding and LM-head weights are
frozen without adapters.

Per adapted linear of local forward shape ``(m, n, k)`` (this rank's slice under TP):

* forward: the two adapter GEMMs ``m×r×k`` (X·A) and ``m×n×r`` ((XA)·B), in BF16
  (ASSUMPTION: adapters are kept out of the FP8/FP4 recipe, as PEFT and NeMo build them as
  plain linear layers beside the base layer);
* backward: the frozen GEMM's input gradient (dgrad) stays, its weight gradient (wgrad) is
  dropped; each adapter GEMM has its dgrad and wgrad;
* parameters per rank: ``r·(k + n)`` (under TP one of ``A``/``B`` is replicated, the other
  split, so the local ``k``/``n`` are exactly what the rank holds); they are the only trained
  parameters: gradients, optimizer states and the DP gradient reduction cover them alone;
* saved activations: the ``m×r`` adapter intermediate (BF16) besides what the layer saves.

The small all-reduce of the row-parallel adapter's ``m×r`` partial sums under TP is not
priced (ASSUMPTION: ``r/n`` of the layer's own TP traffic, 16/8192 for Llama 2 70B).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from codesign.ir import Op, gemm_backward

#: linear layers that get adapters (the attention projections; MLA's too)
LORA_TARGETS: frozenset[str] = frozenset({"qkv_proj", "out_proj", "q_proj", "q_down", "q_up",
                                          "kv_down", "kv_up"})
ADAPTER_BYTES = 2.0  # BF16 adapter operands and outputs, bytes per element


def adapted(op: Op) -> bool:
    """Whether forward operator ``op`` is a linear layer that gets an adapter."""
    return op.kind == "gemm" and op.name in LORA_TARGETS and op.mnk is not None


def adapter_ops(op: Op, rank: int) -> list[Op]:
    """The forward GEMMs of the adapter of linear layer ``op``: ``X·A`` then ``(XA)·B``."""
    assert op.mnk is not None
    m, n, k = op.mnk
    e = ADAPTER_BYTES
    out = []
    for name, (mm, nn, kk) in ((f"{op.name}.lora_a", (m, rank, k)),
                               (f"{op.name}.lora_b", (m, n, float(rank)))):
        out.append(replace(op, name=name, mnk=(mm, nn, kk), flops=2.0 * mm * nn * kk,
                           bytes=(mm * kk + kk * nn + mm * nn) * e, precision="bf16",
                           count=1.0, fp8_scaling="delayed", attn_shape=None,
                           fused_bytes=None))
    return out


def adapter_backward(ops: Sequence[Op]) -> list[Op]:
    """Backward of adapter GEMMs (given in forward order): for each, in reverse order, its
    input gradient ``(m, k, n)`` and its weight gradient ``(k, n, m)``."""
    return [b for o in reversed(ops) for b in gemm_backward(o)]


def adapter_params(op: Op, rank: int) -> float:
    """Adapter parameters of linear layer ``op`` on this rank: ``r·(k + n)``."""
    assert op.mnk is not None
    _, n, k = op.mnk
    return rank * (k + n)


def adapter_saved(op: Op, rank: int) -> float:
    """Activation bytes an adapter saves for backward: its ``m×r`` intermediate."""
    assert op.mnk is not None
    return op.mnk[0] * rank * ADAPTER_BYTES


@dataclass(frozen=True)
class LoraLayer:
    """One layer's operators under LoRA (see :func:`lora_layer`)."""

    forward: list[Op]
    backward: list[list[Op]]  # backward operators of each forward operator
    origin: list[int]  # index of the template each forward operator comes from
    saved: float  # extra activation bytes (adapter intermediates)
    params: float  # adapter parameters on this rank


def lora_layer(fwd: Sequence[Op], bwd: Sequence[Sequence[Op]], rank: int) -> LoraLayer:
    """One layer's operators under LoRA: the forward with each adapted linear followed by its
    adapter GEMMs (``X·A``, ``(XA)·B``), the backward of each forward operator (frozen GEMMs
    keep only their dgrad; each adapter GEMM has dgrad and wgrad), the extra saved bytes and
    the layer's adapter parameters.

    ``fwd``/``bwd``: the layer's forward operators and each one's full-training backward."""
    out_f: list[Op] = []
    out_b: list[list[Op]] = []
    origin: list[int] = []
    saved = params = 0.0
    for i, (o, b) in enumerate(zip(fwd, bwd, strict=True)):
        out_f.append(o)
        out_b.append(frozen_only(b))
        origin.append(i)
        if adapted(o):
            a, b_ = adapter_ops(o, rank)
            out_f += [a, b_]
            out_b += [adapter_backward([a]), adapter_backward([b_])]
            origin += [i, i]
            saved += adapter_saved(o, rank)
            params += adapter_params(o, rank)
    return LoraLayer(out_f, out_b, origin, saved, params)


def frozen_only(ops: Sequence[Op]) -> list[Op]:
    """Backward operators of frozen (embedding, LM head) layers: every weight gradient
    dropped."""
    return [o for o in ops if o.role != "wgrad"]
