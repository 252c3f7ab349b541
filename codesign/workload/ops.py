"""Operator templates (symbolic) and bound operators (numbers).

An :class:`OpTemplate` describes one forward kernel or collective of a layer with its FLOPs,
HBM bytes, GEMM shape, saved-activation bytes and collective as expressions of named
dimensions; :func:`bind` turns it into an :class:`Op` for one plan. Backward operators are
derived from forward ones by rules in :mod:`codesign.workload.training`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from codesign.ir import OpKind, Overlap
from codesign.workload.symbolic import Expr, ExprLike, lift


@dataclass(frozen=True)
class OpTemplate:
    """One forward operator of a layer template, symbolic in the plan's dimensions.

    Units: ``flops`` in FLOP, ``bytes`` (HBM traffic), ``saved`` (activation bytes kept for
    backward) and ``size`` (collective payload, per :mod:`codesign.network` conventions) in
    bytes. ``comm``/``comm_bwd`` name the collective run in forward/backward (``None``: none),
    so Megatron's *f* operator is ``comm=None, comm_bwd="all_reduce"``.
    """

    name: str
    kind: OpKind
    flops: Expr  # numbers are lifted to constants in __post_init__
    bytes: Expr
    saved: Expr
    mnk: tuple[Expr, Expr, Expr] | None = None
    comm: str | None = None
    comm_bwd: str | None = None
    group: str | None = None
    size: Expr | None = None
    overlap: Overlap = "none"
    attn_core: bool = False  # recomputed by selective recompute
    causal: bool = False
    weight_grad: bool = True  # GEMM has a weight-gradient GEMM in backward
    precision: Literal["gemm", "bf16"] = "gemm"  # 'gemm' = the plan's GEMM dtype
    count: Expr | None = None  # identical kernels (grouped expert GEMMs); None = 1
    attn: tuple[Expr, Expr, Expr] | None = None  # (batch·heads, key length, head dim)
    #: fused attention: mean of its query-key and value head dims (``Op.head_dim``)
    head_dim: Expr | None = None
    has_backward: bool = True  # False: forward-only (a host synchronization, not a kernel)
    #: the host waits for this op to finish before it issues the next kernel
    #: (``cudaStreamSynchronize`` after a device-to-host copy, :func:`host_sync`)
    host_sync: bool = False
    #: backward HBM bytes of a memory kernel as a multiple of its forward bytes: 2 for an
    #: elementwise kernel (reads the output gradient and the saved input, writes the input
    #: gradient); 1 for a pure permutation, whose backward applies the inverse permutation
    #: to the gradient (one read, one write)
    backward_bytes: float = 2.0
    #: HBM bytes left when a compiler fuses this memory op into its neighbouring matmul
    #: fusions (``GpuSpec.execution == "xla"``, see :mod:`codesign.hardware.compute`);
    #: ``None``: not fusible, priced on ``bytes`` as its own kernel
    fused_bytes: Expr | None = None

    def __post_init__(self) -> None:
        for name in ("flops", "bytes", "saved"):  # numbers are accepted as constants
            object.__setattr__(self, name, lift(getattr(self, name)))
        for name in ("size", "count", "fused_bytes", "head_dim"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, lift(getattr(self, name)))


def gemm(name: str, m: ExprLike, n: ExprLike, k: ExprLike, saved: ExprLike, e_in: ExprLike,
         e_out: ExprLike, weight_grad: bool = True, count: ExprLike = 1,
         e_w: ExprLike | None = None) -> OpTemplate:
    """``count`` GEMMs C[m,n] = A[m,k] B[k,n]: 2mnk FLOPs each, each reads A and B, writes C
    (``count`` > 1: a grouped GEMM, one kernel per expert). A (activations) is read at ``e_in``
    bytes per element, B (the weight) at ``e_w`` (default ``e_in``), C written at ``e_out``."""
    m_, n_, k_, c_ = lift(m), lift(n), lift(k), lift(count)
    if e_w is None:
        nbytes = ((m_ * k_ + k_ * n_) * e_in + m_ * n_ * e_out) * c_
    else:
        nbytes = (m_ * k_ * e_in + k_ * n_ * e_w + m_ * n_ * e_out) * c_
    return OpTemplate(
        name=name, kind="gemm", flops=2 * m_ * n_ * k_ * c_,
        bytes=nbytes, saved=lift(saved),
        mnk=(m_, n_, k_), weight_grad=weight_grad, count=None if count == 1 else c_,
    )


def memory(name: str, nbytes: ExprLike, saved: ExprLike = 0,
           attn_core: bool = False, backward_bytes: float = 2.0,
           fused: ExprLike | None = None) -> OpTemplate:
    """A memory-bound (elementwise, normalization, permutation) kernel moving ``nbytes``;
    its backward moves ``backward_bytes × nbytes`` (see :attr:`OpTemplate.backward_bytes`);
    ``fused``: the bytes it still moves when fused into its neighbouring matmul fusions
    (:attr:`OpTemplate.fused_bytes`; ``None``: not fusible)."""
    return OpTemplate(name=name, kind="memory", flops=lift(0), bytes=lift(nbytes),
                      saved=lift(saved), precision="bf16", attn_core=attn_core,
                      backward_bytes=backward_bytes,
                      fused_bytes=None if fused is None else lift(fused))


def host_sync(name: str, nbytes: ExprLike) -> OpTemplate:
    """A device-to-host copy of ``nbytes`` the host waits for (``cudaStreamSynchronize``),
    forward only. The compute stream drains and then idles until the host launches the next
    kernel: priced as a memory kernel of ``nbytes`` (one kernel overhead: the launch the idle
    GPU waits for). Backward replays the split sizes the host already holds: no sync there."""
    return OpTemplate(name=name, kind="memory", flops=lift(0), bytes=lift(nbytes),
                      saved=lift(0), precision="bf16", has_backward=False, host_sync=True)


def comm(name: str, fwd: str | None, bwd: str | None, group: str, size: ExprLike,
         overlap: Overlap = "none") -> OpTemplate:
    """A collective on ``group`` (``fwd``/``bwd`` are the kinds run in each pass)."""
    return OpTemplate(name=name, kind="comm", flops=lift(0), bytes=lift(0), saved=lift(0),
                      comm=fwd, comm_bwd=bwd, group=group, size=lift(size), overlap=overlap)


def evaluate(expr: Expr | None, env: Mapping[str, float]) -> float:
    """Value of an optional expression (``None`` is 0)."""
    return 0.0 if expr is None else expr.evaluate(env)


def evaluate_optional(expr: Expr | None, env: Mapping[str, float]) -> float | None:
    """Value of an optional expression, ``None`` staying ``None`` (a field the operator lacks)."""
    return None if expr is None else expr.evaluate(env)
