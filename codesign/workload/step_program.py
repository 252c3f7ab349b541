"""The training step as an ordered, *unpriced* program: one source of truth for the schedule.

A step is a list of :class:`Node` s over every pipeline stage: chunk passes (forward ``F``,
backward ``B``, weight-gradient ``W`` in split schedules), pipeline sends and the receiver's
all-gather of scatter/gathered sends, data-parallel gradient buckets, the optimizer, and
ZeRO-1/2 parameter gathers. Each node has typed dependencies (earlier node ids), the
stage-local stream that carries it, and semantic metadata (phase, micro-batch, virtual stage,
layer, collective, group, bytes) but no time: the symmetric engine
(:mod:`codesign.engine.training`), the per-rank engine, the Chakra exporter, the Perfetto writer
and the search estimator each *price* the nodes their way and *run* them. A new schedule is
written once, in :mod:`codesign.workload.schedules`, and reaches all of them through here.

**Rules the program states** (Megatron-LM's step):

* a forward waits for the previous virtual stage's forward of the same micro-batch, a
  backward for the next virtual stage's backward (on another stage: for that stage's send,
  and, with scatter/gathered sends, for the all-gather of its pieces on the receiver's
  compute stream); a ``W`` pass waits for its own ``B`` pass (same stream, earlier);
* a send follows the pass that produced it, on its own stream (``send_fwd``/``send_bwd``),
  or on the compute stream when sends block (``overlap_p2p`` off);
* ZeRO-1/2 with ``overlap_param_gather``: per-bucket parameter all-gathers run first on the
  ``dp`` stream and each chunk's first forward waits for its first bucket; without overlap
  the gathers follow the optimizer;
* gradient buckets (all-reduce for ZeRO-0, reduce-scatter for ZeRO-1/2) enter the ``dp``
  stream in the order the last backward (``W`` pass in split schedules) of each chunk
  releases them; overlapped, a bucket starts when its layer's gradients are done inside
  that pass (``release``); otherwise after the stage's last pass;
* the optimizer runs on the compute stream after the last pass, every gradient bucket, and
  every collective the stage's passes left running (``after_tails``).

Inside a pass, :func:`wire_pass` states the overlap rule of each collective (see
:data:`codesign.ir.Overlap`) once for every consumer.

**Identical micro-batches.** Every schedule's steady state repeats every
:func:`~codesign.workload.schedules.period` micro-batches. :func:`sample_counts` gives the
shorter micro-batch counts at which a consumer runs the program to extend it exactly to any
count (see :mod:`codesign.engine.training`); warm-up and cool-down are always run in full.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Literal, NamedTuple

from codesign.ir import Op
from codesign.workload.schedules import (
    SPLIT_BACKWARD,
    Step,
    inflight_window,
    period,
    warmup_microbatches,
)
from codesign.workload.schedules import (
    orders as schedule_orders,
)

NodeKind = Literal["pass", "send", "recv_gather", "param_gather", "grad_reduce", "optimizer"]
Phase = Literal["F", "B", "W", ""]

#: bytes per parameter of a reduced gradient: Megatron reduces fp32 main gradients (ZeRO 0-2)
#: by default (``ParallelismSpec.grad_bytes`` gives the plan's)
GRAD_REDUCE_BYTES = 4.0
#: bytes per parameter of a gathered bf16 working weight
PARAM_BYTES = 2.0


class Collective(NamedTuple):
    """One collective of a node: ``kind`` (``p2p``, ``all_gather``, ``reduce_scatter``,
    ``all_reduce``) over ``group``, ``bytes`` per rank as the network model reads them."""

    kind: str
    group: str
    bytes: float


class Node(NamedTuple):
    """One unpriced unit of a training step on one (representative) rank of ``stage``.

    ``stream`` is stage-local: ``compute``, ``send_fwd``, ``send_bwd`` or ``dp``. ``deps`` are
    ids of earlier nodes. ``release``: ``(pass node id, layer)``: the node may start once that
    pass has finished the layer's gradients (an offset into the pass that the pricer knows).
    ``peer``: for sends, the stage that receives; for ``recv_gather``, the stage that sent.
    ``bucket``: index into the chunk's ``layer_params`` for gradient and parameter buckets.
    A named tuple: programs of deep pipelines hold tens of thousands of nodes.
    """

    id: int
    kind: NodeKind
    stage: int
    stream: str
    deps: tuple[int, ...] = ()
    phase: Phase = ""
    mb: int = -1
    v: int = -1
    chunk: int = -1
    layer: int = -1
    bucket: int = -1
    peer: int = -1
    comms: tuple[Collective, ...] = ()
    release: tuple[int, int] | None = None
    after_tails: bool = False
    hbm_bytes: float = 0.0  # optimizer: HBM traffic of the update

    @property
    def name(self) -> str:
        """A short human-readable label (trace slices, task names)."""
        if self.kind == "pass":
            return f"{self.phase}{self.mb}.v{self.v}"
        if self.kind == "send":
            return f"send_{'fwd' if self.phase == 'F' else 'bwd'}{self.mb}"
        if self.kind == "recv_gather":
            return f"gather_{'PF' if self.phase == 'F' else 'PB'}{self.mb}"
        if self.kind == "param_gather":
            return f"param_gather.l{self.layer}"
        if self.kind == "grad_reduce":
            return f"grad_reduce.l{self.layer}"
        return "optimizer"


@dataclass(frozen=True)
class StepShape:
    """Everything the program depends on, as plain hashable numbers (no times).

    ``buckets[v]``: ``(layer, dense params, expert params)`` per bucket of virtual stage
    ``v`` (the chunk's ``layer_params``); ``dense_n``/``expert_n``: ranks over which dense and
    expert states are replicated (``dense_grp``/``expert_grp``); ``message``: bytes per sending
    rank of a pipeline send and bytes all-gathered over TP at the receiver (0: none);
    ``opt_bytes[s]``: HBM bytes of stage ``s``'s optimizer update (host memory bytes when the
    update runs on the CPU, ``optimizer_on_host``).
    """

    schedule: str
    pp: int
    vpp: int
    num_microbatches: int
    buckets: tuple[tuple[tuple[int, float, float], ...], ...]
    zero: int
    dense_grp: str
    expert_grp: str
    dense_n: int
    expert_n: int
    overlap_grad_reduce: bool
    overlap_param_gather: bool
    overlap_p2p: bool
    message: tuple[float, float]
    opt_bytes: tuple[float, ...]
    #: the optimizer step runs on the host CPU (``offload_optimizer``), and the parameters
    #: live there too (``offload_params``): priced by the host link, not HBM
    optimizer_on_host: bool = False
    params_on_host: bool = False
    #: bytes per gradient reduced (``ParallelismSpec.grad_bytes``)
    grad_bytes: float = GRAD_REDUCE_BYTES

    def with_microbatches(self, n: int) -> StepShape:
        return replace(self, num_microbatches=n)

    @property
    def gathers_params(self) -> bool:  # ZeRO-1/2 with states sharded over several ranks
        return self.zero in (1, 2) and (self.dense_n > 1 or self.expert_n > 1)


@dataclass(frozen=True)
class StepProgram:
    """The nodes of one step in an order where every dependency and every predecessor on
    the same stream comes first (so one pass in list order runs it)."""

    shape: StepShape
    nodes: tuple[Node, ...]

    @property
    def phases(self) -> tuple[str, ...]:
        """Pass phases this program uses (``F``, ``B``, and ``W`` for split schedules)."""
        return ("F", "B", "W") if self.shape.schedule in SPLIT_BACKWARD else ("F", "B")

    def stage_nodes(self, stage: int) -> list[Node]:
        return [n for n in self.nodes if n.stage == stage]


class Emitter:
    """Appends nodes with consecutive ids from ``first``."""

    def __init__(self, first: int = 0) -> None:
        self.nodes: list[Node] = []
        self.first = first

    def add(self, kind: NodeKind, stage: int, stream: str, deps: tuple[int, ...] = (),
            phase: str = "", mb: int = -1, v: int = -1, chunk: int = -1, layer: int = -1,
            bucket: int = -1, peer: int = -1, comms: tuple[Collective, ...] = (),
            release: tuple[int, int] | None = None, after_tails: bool = False,
            hbm_bytes: float = 0.0) -> int:
        nid = self.first + len(self.nodes)
        # tuple.__new__ with every field in order: a deep pipeline's program has tens of
        # thousands of nodes, and the named tuple's keyword constructor is the slow part
        self.nodes.append(tuple.__new__(Node, (
            nid, kind, stage, stream, deps, phase, mb, v, chunk, layer, bucket, peer, comms,
            release, after_tails, hbm_bytes)))
        return nid

    def pass_node(self, stage: int, deps: tuple[int, ...], phase: str, mb: int, v: int,
                  chunk: int) -> int:
        """:meth:`add` of a pass, positionally (the hot path of deep pipelines)."""
        nid = self.first + len(self.nodes)
        self.nodes.append(tuple.__new__(Node, (
            nid, "pass", stage, "compute", deps, phase, mb, v, chunk, -1, -1, -1, (), None,
            False, 0.0)))
        return nid

    def send_node(self, stage: int, stream: str, dep: int, phase: str, mb: int, v: int,
                  chunk: int, peer: int, comms: tuple[Collective, ...]) -> int:
        """:meth:`add` of a pipeline send, positionally."""
        nid = self.first + len(self.nodes)
        self.nodes.append(tuple.__new__(Node, (
            nid, "send", stage, stream, (dep,), phase, mb, v, chunk, -1, -1, peer, comms, None,
            False, 0.0)))
        return nid


def _bucket_comms(kind: str, dense_grp: str, dense: float, expert_grp: str, expert: float,
                  bytes_per_param: float) -> tuple[Collective, ...]:
    out: tuple[Collective, ...] = (Collective(kind, dense_grp, dense * bytes_per_param),)
    if expert:
        out += (Collective(kind, expert_grp, expert * bytes_per_param),)
    return out


def release_order(buckets: Sequence[tuple[int, float, float]]) -> list[int]:
    """Bucket indices of one chunk in the order its last backward finishes them: the LM head
    first, then layers from the last to the first, then the embedding. Layer -1 names both the
    embedding and the LM head, so when a chunk holds both, the head's gradients are taken as
    finished with the embedding's (the engine's long-standing bucket key; kept unchanged)."""
    n = len(buckets)
    body = sorted((i for i in range(n) if buckets[i][0] >= 0), key=lambda i: -buckets[i][0])
    emb = [0] if n and buckets[0][0] == -1 else []
    head = [n - 1] if n > 1 and buckets[-1][0] == -1 else []
    if emb and head:
        return [*body, *emb, *head]
    return [*head, *body, *emb]


@lru_cache(maxsize=256)
def build_step_program(shape: StepShape) -> StepProgram:
    """The step program of ``shape`` (cached: identical plans share one program)."""
    pp, vpp, n = shape.pp, shape.vpp, shape.num_microbatches
    orders = schedule_orders(shape.schedule, pp, vpp, n)
    em = Emitter()
    passes = _Passes(em, shape, orders, first_param_gathers(em, shape))
    passes.emit()
    last = [passes.ids[(o[-1][0], o[-1][1], o[-1][2] * pp + s)] for s, o in enumerate(orders)]
    step_end(em, shape, last, passes.last_b, passes.last_pos)
    return StepProgram(shape, tuple(em.nodes))


def first_param_gathers(em: Emitter, shape: StepShape) -> dict[tuple[int, int], int]:
    """ZeRO-1/2 overlapped parameter gathers, first on each stage's dp stream; returns the
    first bucket's node of each ``(stage, chunk)`` (its first forward waits for it)."""
    first_bucket: dict[tuple[int, int], int] = {}
    if shape.gathers_params and shape.overlap_param_gather:
        for s in range(shape.pp):
            for c in range(shape.vpp):
                for k in _param_gathers(em, shape, s, c, ()):
                    first_bucket.setdefault((s, c), k)
    return first_bucket


def step_end(em: Emitter, shape: StepShape, last: Sequence[int],
             last_b: dict[tuple[int, int], int], last_pos: dict[tuple[int, int], int]) -> None:
    """Per stage, the gradient buckets, the optimizer and (not overlapped) the parameter
    gathers after it; ``last[s]``: stage ``s``'s last pass, ``last_b``/``last_pos``: node
    and position in its order of each ``(stage, chunk)``'s last gradient pass."""
    multi = shape.dense_n > 1 or shape.expert_n > 1
    for s in range(shape.pp):
        grads = _grad_buckets(em, shape, s, last[s], last_b, last_pos) \
            if shape.zero < 3 and multi else []
        opt = em.add("optimizer", s, "compute", deps=(last[s], *grads), after_tails=True,
                     hbm_bytes=shape.opt_bytes[s])
        if shape.gathers_params and not shape.overlap_param_gather:
            for c in range(shape.vpp):
                _param_gathers(em, shape, s, c, (opt,))


def _param_gathers(em: Emitter, shape: StepShape, s: int, c: int,
                   deps: tuple[int, ...]) -> list[int]:
    """One parameter all-gather per bucket of chunk ``c`` of stage ``s`` on its dp stream."""
    v = c * shape.pp + s
    return [em.add("param_gather", s, "dp", deps=deps, v=v, chunk=c, layer=layer, bucket=i,
                   comms=_bucket_comms("all_gather", shape.dense_grp, dense, shape.expert_grp,
                                       expert, PARAM_BYTES))
            for i, (layer, dense, expert) in enumerate(shape.buckets[v])]


def _grad_buckets(em: Emitter, shape: StepShape, s: int, last: int,
                  last_b: dict[tuple[int, int], int],
                  last_pos: dict[tuple[int, int], int]) -> list[int]:
    """Gradient buckets of stage ``s`` in the order its chunks' last gradient passes release
    them (overlapped: each from its layer's point in that pass; else after ``last``)."""
    kind = "all_reduce" if shape.zero == 0 else "reduce_scatter"
    out = []
    for c in sorted(range(shape.vpp), key=lambda c: last_pos[(s, c)]):
        v = c * shape.pp + s
        bl = shape.buckets[v]
        for i in release_order(bl):
            layer, dense, expert = bl[i]
            comms = _bucket_comms(kind, shape.dense_grp, dense, shape.expert_grp, expert,
                                  shape.grad_bytes)
            if shape.overlap_grad_reduce:
                out.append(em.add("grad_reduce", s, "dp", v=v, chunk=c, layer=layer, bucket=i,
                                  comms=comms, release=(last_b[(s, c)], layer)))
            else:
                out.append(em.add("grad_reduce", s, "dp", deps=(last,), v=v, chunk=c,
                                  layer=layer, bucket=i, comms=comms))
    return out


class _Passes:
    """Emits every stage's passes (with sends and receive gathers) in an order where each
    dependency comes first: stages advance in turn until they wait for another stage."""

    def __init__(self, em: Emitter, shape: StepShape,
                 orders: Sequence[Sequence[Step]],
                 first_bucket: dict[tuple[int, int], int]) -> None:
        self.em, self.shape, self.orders, self.first_bucket = em, shape, orders, first_bucket
        self.ids: dict[tuple[str, int, int], int] = {}  # (phase, mb, v) -> pass node
        self.sends: dict[tuple[str, int, int], int] = {}  # (phase, mb, sender v) -> send
        self.waiting: dict[tuple[str, int, int], list[int]] = {}
        self.seen: set[tuple[int, int]] = set()
        self.last_b: dict[tuple[int, int], int] = {}  # (stage, chunk) -> last gradient pass
        self.last_pos: dict[tuple[int, int], int] = {}
        self.grad_phase = "W" if shape.schedule in SPLIT_BACKWARD else "B"
        send_bytes, self.gathered = shape.message
        self.send_comms = (Collective("p2p", "pp", send_bytes),)
        self.gather_comms = (Collective("all_gather", "tp", self.gathered),)
        self.ready = list(range(shape.pp))
        self.pp, self.nv, self.overlap_p2p = shape.pp, shape.pp * shape.vpp, shape.overlap_p2p

    def emit(self) -> None:
        pos = [0] * self.shape.pp
        while self.ready:
            s = self.ready.pop()
            order = self.orders[s]
            i = pos[s]
            while i < len(order) and self._pass(s, i, *order[i]):
                i += 1
            pos[s] = i
        if any(pos[s] != len(self.orders[s]) for s in range(self.shape.pp)):  # pragma: no cover
            raise RuntimeError(f"schedule {self.shape.schedule} deadlocks")

    def _input(self, s: int, ph: str, mb: int, v: int) -> int | None:
        """The node pass ``(ph, mb, v)`` waits for from its neighbouring chunk: -1 none,
        None not emitted yet (the stage waits)."""
        if ph == "W":
            return self.ids[("B", mb, v)]
        pp = self.pp
        up = v - 1 if ph == "F" else v + 1
        if not 0 <= up < self.nv:
            return -1
        key = (ph, mb, up)
        local = up % pp == s
        dep = (self.ids if local else self.sends).get(key)
        if dep is None:
            self.waiting.setdefault(key, []).append(s)
            return None
        if not local and self.gathered:
            dep = self.em.add("recv_gather", s, "compute", deps=(dep,), phase=ph, mb=mb, v=up,
                              peer=up % pp, comms=self.gather_comms)
        return dep

    def _pass(self, s: int, i: int, ph: str, mb: int, c: int) -> bool:
        """Emit pass ``i`` of stage ``s`` (and its send); False when it must wait."""
        pp = self.pp
        v = c * pp + s
        dep = self._input(s, ph, mb, v)
        if dep is None:
            return False
        deps = (dep,) if dep >= 0 else ()
        if ph == "F" and (s, c) not in self.seen:
            self.seen.add((s, c))
            if (s, c) in self.first_bucket:
                deps = (*deps, self.first_bucket[(s, c)])
        nid = self.em.pass_node(s, deps, ph, mb, v, c)
        key = (ph, mb, v)
        self.ids[key] = nid
        if ph == self.grad_phase:
            self.last_b[(s, c)] = nid
            self.last_pos[(s, c)] = i
        down = v + 1 if ph == "F" else v - 1 if ph == "B" else -1
        if 0 <= down < self.nv and down % pp != s:
            stream = ("send_fwd" if ph == "F" else "send_bwd") if self.overlap_p2p \
                else "compute"
            self.sends[key] = self.em.send_node(s, stream, nid, ph, mb, v, c, down % pp,
                                                self.send_comms)
        waiters = self.waiting.pop(key, None)
        if waiters:
            self.ready.extend(waiters)
        return True


def sample_counts(kind: str, pp: int, n: int) -> tuple[int, int] | None:
    """Two micro-batch counts ``(n_a, n_a + period)``, with ``n_a ≡ n`` modulo the schedule's
    :func:`~codesign.workload.schedules.period`, past its warm-up by at least the
    :func:`~codesign.workload.schedules.inflight_window`, from which a consumer
    extends a step to ``n`` micro-batches; ``None`` when ``n`` is small enough to run as it
    is."""
    per = period(kind, pp)
    first = warmup_microbatches(kind, pp) + inflight_window(kind, pp)
    n_a = n % per + -(-first // per) * per
    if 2 * n_a + per >= n:  # running both samples would cost more than running all of them
        return None
    return n_a, n_a + per


# --- inside a pass: the overlap rule ----------------------------------------------------------


def wire_pass(ops: Sequence[Op]) -> tuple[tuple[int, ...], ...]:
    """Dependencies (indices into ``ops``) of each operator of one chunk pass.

    Compute operators run in order on the compute stream; each collective runs on its
    group's stream and is wired by its overlap rule (:data:`codesign.ir.Overlap`):
    ``prev`` starts after the compute op before the previous one and the next compute op
    waits for it (GEMM + reduce-scatter); ``next`` starts after the previous compute op and
    the compute op after next waits for it (all-gather + GEMM); ``prefetch`` waits for
    nothing and the next compute op waits for it; ``async`` starts after the previous compute
    op and nothing waits for it; ``hidden`` starts after the previous compute op and the pass's
    last compute op waits for it (a collective overlapped with other micro-batches' work:
    the pass ends when both its computation and that collective stream are done); ``none``
    (blocking) starts after the previous compute op and the collectives the next compute op
    would wait for, and the next compute op waits for it.
    """
    out: list[tuple[int, ...]] = []
    hidden: list[int] = []  # collectives the pass's last compute op waits for
    prev = prev2 = -1  # last and second-to-last compute op
    pending: list[int] = []  # collectives the next compute op waits for
    deferred: list[int] = []  # collectives the compute op after next waits for
    for i, op in enumerate(ops):
        if op.kind != "comm":
            out.append(tuple(pending))
            pending, deferred = deferred, []
            prev2, prev = prev, i
            continue
        if op.overlap == "prev":
            out.append((prev2,) if prev2 >= 0 else ())
            pending.append(i)
        elif op.overlap == "next":
            out.append((prev,) if prev >= 0 else ())
            deferred.append(i)
        elif op.overlap == "prefetch":
            out.append(())
            pending.append(i)
        elif op.overlap in ("async", "hidden"):
            out.append((prev,) if prev >= 0 else ())
            if op.overlap == "hidden":
                hidden.append(i)
        else:
            out.append(((prev,) if prev >= 0 else ()) + tuple(pending))
            pending.append(i)
    waited = [i for i in hidden if i < prev]  # one after the last compute op is a tail
    if waited:
        out[prev] = (*out[prev], *waited)
    return tuple(out)


def split_backward(ops: Sequence[Op]) -> tuple[tuple[Op, ...], tuple[Op, ...]]:
    """A backward pass as ``(B, W)`` for split schedules: ``W`` holds the weight-gradient
    GEMMs and the ZeRO-3 gradient reduce-scatters that follow them; ``B`` everything else
    (input-gradient GEMMs, attention and memory-bound backward kernels, recompute, TP/CP/EP
    collectives), in their original order."""
    b: list[Op] = []
    w: list[Op] = []
    for op in ops:
        if op.role == "wgrad" or (op.kind == "comm" and op.name.endswith("grad_reduce")):
            w.append(op)
        else:
            b.append(op)
    return tuple(b), tuple(w)


def optimizer_op(hbm_bytes: float) -> Op:
    """The optimizer update of a stage as a memory-bound operator moving ``hbm_bytes``
    (its local parameters' Adam state traffic, ``StepShape.opt_bytes``)."""
    return Op(name="optimizer", kind="memory", category="optimizer", layer=-1, bytes=hbm_bytes)


def pass_ops(forward: Sequence[Op], backward: Sequence[Op], phase: str,
             split: bool) -> tuple[Op, ...]:
    """Operators of one pass of a chunk: ``F`` its forward; ``B`` its backward, or in split
    schedules (``split``) the input-gradient part, and ``W`` the weight-gradient part
    (:func:`split_backward`)."""
    if phase == "F":
        return tuple(forward)
    if split:
        return split_backward(backward)[phase == "W"]
    return tuple(backward)


__all__ = [
    "GRAD_REDUCE_BYTES",
    "PARAM_BYTES",
    "Collective",
    "Node",
    "NodeKind",
    "Phase",
    "StepProgram",
    "StepShape",
    "build_step_program",
    "pass_ops",
    "sample_counts",
    "split_backward",
    "wire_pass",
]
