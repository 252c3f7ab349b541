"""Bound operators: the interface between the workload generator and the cost models.

A :class:`Op` is one kernel or collective of one rank for one micro-batch, with plain numbers
(FLOPs, bytes, GEMM shape, collective payload). The workload generator produces them; the
compute model, the network model and the engine consume them. Nothing here imports those.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, Literal, overload

from codesign.groups import GROUP_STREAM, stream_of
from codesign.specs.parallel import Fp8Recipe

OpKind = Literal["gemm", "attention", "memory", "comm"]
#: suffix of the stream of prefetched parameter all-gathers (``dp`` -> ``dp_gather``)
GATHER_STREAM_SUFFIX = "_gather"
#: how a collective overlaps compute on the same rank:
#: ``none`` blocking (waits for the previous compute op, the next one waits for it);
#: ``next`` runs with the next compute op (chunked/pipelined, e.g. TP all-gather + GEMM);
#: ``prev`` runs with the previous compute op (e.g. GEMM + reduce-scatter);
#: ``prefetch`` waits for nothing but its stream, the next compute op waits for it;
#: ``async`` starts after the previous compute op and nothing waits for it;
#: ``hidden`` starts after the previous compute op and only the pass's last compute op waits
#: for it: it runs during other micro-batches' computation (MoE all-to-all overlap), so the
#: pass takes the longer of its computation and its collectives on that stream.
Overlap = Literal["none", "next", "prev", "prefetch", "async", "hidden"]
Category = Literal["forward", "backward", "recompute", "optimizer"]

# GROUP_STREAM: codesign.groups
__all__ = ["GROUP_STREAM", "Category", "Op", "OpKind", "Overlap", "RelabeledOps", "at_layer",
           "gemm_backward", "replace_op"]


@dataclass(frozen=True)
class Op:
    """A bound operator: plain numbers for one plan, one rank, one micro-batch.

    ``flops`` are the FLOPs as counted by convention (full attention matrix); the compute
    model decides what the kernel executes (e.g. causal flash attention skips half).
    """

    name: str
    kind: OpKind
    category: Category
    layer: int  # layer index within the model; -1 for embedding/head/optimizer
    flops: float = 0.0
    bytes: float = 0.0
    mnk: tuple[float, float, float] | None = None
    comm: str | None = None
    group: str | None = None
    size: float = 0.0
    overlap: Overlap = "none"
    causal: bool = False
    backward: bool = False
    precision: str = "bf16"
    count: float = 1.0  # identical kernels (mnk is per kernel; flops and bytes are totals)
    role: Literal["fwd", "dgrad", "wgrad", ""] = ""  # GEMM pass (fp8 casts depend on it)
    #: how an FP8 GEMM's operands are scaled (the plan's ``fp8_recipe``): "delayed",
    #: "current" (amax pass + scale + cast per tensor) or "rowwise" (see
    #: :mod:`codesign.hardware.compute`)
    fp8_scaling: Fp8Recipe = "delayed"
    # fused self-attention shape (batch × heads on this rank, sequence, head dim), for
    # measured attention tables; None when queries and keys differ in length (CP)
    attn_shape: tuple[float, float, float] | None = None
    # fused attention: mean of the query-key and value head dims (its tensor-core FLOPs per
    # query-key pair are 4× this forward); None = not stated (no head-dim effect)
    head_dim: float | None = None
    # HBM bytes of a memory op fused into its neighbouring matmul fusions (XLA execution,
    # codesign.hardware.compute); None: not fusible
    fused_bytes: float | None = None
    # the host waits for this op to finish before it issues the next kernel (a device-to-host
    # copy the host reads, e.g. dropless MoE split sizes); see codesign.engine.chunk.op_tasks
    host_sync: bool = False
    # a prefetched parameter all-gather on its own stream beside its group's (False: queued
    # in issue order on the group's stream; ParallelismSpec.param_gather_queue)
    own_stream: bool = True

    @property
    def stream(self) -> str:
        """Stream the op runs on: ``compute`` or the communication stream of its group; a
        prefetched parameter all-gather has a stream of its own beside its group's, so it is
        not queued behind that group's gradient reduce-scatters (PyTorch FSDP's unshard /
        all-gather stream beside its reduce-scatter stream, torch.distributed.fsdp
        ``_runtime_utils`` / FSDP2 ``FSDPCommContext``; Megatron-FSDP likewise) unless it is
        queued on the group's stream (``own_stream`` False: DeepSpeed ZeRO-3)."""
        if self.kind != "comm":
            return "compute"
        if self.overlap == "prefetch" and self.comm == "all_gather" and self.own_stream:
            return stream_of(self.group) + GATHER_STREAM_SUFFIX
        return stream_of(self.group)


_OP_FIELDS = frozenset(f.name for f in fields(Op))


def replace_op(op: Op, **changes: Any) -> Op:
    """``dataclasses.replace(op, **changes)`` without calling ``__init__`` (the operator's
    fields are copied, then ``changes`` set; ``Op`` derives nothing from them): graphs of
    deep models copy thousands of operators layer by layer."""
    d = op.__dict__.copy()
    d.update(changes)
    if len(d) != len(_OP_FIELDS):  # a name that is not a field added a key
        raise TypeError(f"Op has no field(s) {sorted(changes.keys() - _OP_FIELDS)}")
    out = object.__new__(Op)
    object.__setattr__(out, "__dict__", d)
    return out


def at_layer(ops: Iterable[Op], layer: int, category: Category | None = None) -> list[Op]:
    """``[replace_op(o, layer=layer) for o in ops]`` (and ``category`` when given), in one
    loop without keyword arguments: the graph of a deep model copies every layer's
    operators this way."""
    return _copies(ops, layer, None, category)


def _copies(ops: Iterable[Op], layer: int, rename: Mapping[int, int] | None,
            category: Category | None) -> list[Op]:
    """Copies of ``ops`` on ``layer``, or with each one's layer renamed by ``rename`` when
    given (a layer not in it kept), and ``category`` when given (:func:`at_layer`,
    :class:`RelabeledOps`)."""
    new, set_attr = object.__new__, object.__setattr__
    get = rename.get if rename is not None else None
    out = []
    for o in ops:
        d = o.__dict__.copy()
        d["layer"] = layer if get is None else get(o.layer, o.layer)
        if category is not None:
            d["category"] = category
        op = new(Op)
        set_attr(op, "__dict__", d)
        out.append(op)
    return out


class RelabeledOps(Sequence[Op]):
    """The operators ``source`` with each one's layer renamed by ``rename`` (a layer not in it,
    such as the embedding's -1, kept), copied on first use. A deep model's chunks that repeat
    an earlier chunk's operators on other layers hold them this way: the engine and the memory
    model read the earlier chunk's operators instead, so most chunks are never copied."""

    __slots__ = ("_ops", "rename", "source")

    def __init__(self, source: Sequence[Op], rename: Mapping[int, int]) -> None:
        self.source = source
        self.rename = rename
        self._ops: tuple[Op, ...] | None = None

    def ops(self) -> tuple[Op, ...]:
        """The renamed operators (copied once)."""
        if self._ops is None:
            self._ops = tuple(_copies(self.source, -1, self.rename, None))
        return self._ops

    def __len__(self) -> int:
        return len(self.source)

    @overload
    def __getitem__(self, i: int) -> Op: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[Op, ...]: ...

    def __getitem__(self, i: int | slice) -> Op | tuple[Op, ...]:
        return self.ops()[i]

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and self.ops() == tuple(other)

    def __hash__(self) -> int:
        return hash(self.ops())

    def __repr__(self) -> str:
        return f"RelabeledOps({len(self)} operators, layers {dict(self.rename)})"


def gemm_backward(op: Op, weight_grad: bool = True) -> list[Op]:
    """The backward GEMMs of forward GEMM ``op`` of shape ``(m, n, k)``: its input gradient
    ``(m, k, n)`` and, with ``weight_grad``, its weight gradient ``(k, n, m)``."""
    assert op.mnk is not None
    m, n, k = op.mnk
    dgrad = replace(op, name=f"{op.name}.dgrad", category="backward", backward=True,
                    mnk=(m, k, n), role="dgrad")
    if not weight_grad:
        return [dgrad]
    return [dgrad, replace(op, name=f"{op.name}.wgrad", category="backward", backward=True,
                           mnk=(k, n, m), role="wgrad")]

