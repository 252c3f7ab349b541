"""Chunk-pass costs for the search estimator, from layers bound and timed once per local shape.

One layer of each kind (dense, MoE; or the blocks of a hybrid: Mamba, attention, MLP), plus
the embedding and the LM head, is bound by :class:`codesign.workload.training.ChunkBinder`
(the code that builds the engine's graph) and
its passes are timed by :func:`codesign.engine.chunk.time_chunk` (same overlap rules, same
compute and network models). The passes are the schedule's phases
(:func:`codesign.search.pipeline.phases_of`): ``F`` and ``B``, or ``F``, ``B`` and ``W`` for
split-backward schedules, whose backward is split as the engine splits it
(:func:`codesign.workload.step_program.split_backward`).

A chunk of ``k`` layers costs the sum of its parts (:func:`sum_chunk`): every layer ends with
a compute operator that waits for the layer's collectives, so nothing overlaps across layer
boundaries. Under ZeRO-3 the per-layer parameter gathers and gradient reduce-scatters do cross
layers (prefetch, async); those chunks are re-timed with the engine's task wiring
(:func:`~codesign.engine.chunk.op_tasks`) and executor, each layer one block plus its
data-parallel collectives (:func:`zero3_chunk`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from codesign.engine.chunk import ChunkTiming, op_tasks, time_chunk
from codesign.engine.executor import execute_in_order
from codesign.ir import Category, Op
from codesign.network.model import NetworkModel
from codesign.specs.run import TrainingRun
from codesign.workload.dims import high_precision_layer
from codesign.workload.step_program import pass_ops, release_order
from codesign.workload.training import ChunkBinder, ChunkGraph

#: breakdown categories of a pass, in vector order
CATS: tuple[str, ...] = ("forward", "backward", "recompute", "comm:tp", "comm:cp", "comm:ep",
                         "comm:dp", "host", "bubble")
IDX = {c: i for i, c in enumerate(CATS)}
DP = IDX["comm:dp"]

#: a chunk signature: (layer kinds (:meth:`~codesign.specs.model.ModelSpec.layer_kind`), holds
#: the embedding, holds the head)
Signature = tuple[Any, ...]


@dataclass(frozen=True)
class PassCost:
    """One pass of a chunk part (seconds): compute-stream time, its split by :data:`CATS`,
    and how long its collectives run on after its last compute operator."""

    time_s: float
    parts: tuple[float, ...]
    tail_s: float = 0.0

    @classmethod
    def of(cls, t: ChunkTiming) -> PassCost:
        parts = [0.0] * len(CATS)
        for cat, dt in t.breakdown:
            parts[IDX[cat]] += dt
        return cls(t.compute_time, tuple(parts), max((dt for _, dt in t.tail), default=0.0))

    def minus(self, other: PassCost) -> PassCost:
        """This sample minus a shorter one: the cost of the part it adds."""
        return PassCost(self.time_s - other.time_s,
                        tuple(a - b for a, b in zip(self.parts, other.parts, strict=True)),
                        self.tail_s)


@dataclass(frozen=True)
class LayerCosts:
    """Per local layer shape: per phase, one layer of each kind (``dense``, ``moe``, ...) and
    the parts the embedding and the LM head add; times in seconds, sizes in bytes, parameters
    per rank. ``emb_tail[ph]``: tail of a pass that ends with the embedding;
    ``emb_ops[ph]``/``head_ops[ph]``: whether the embedding / head has compute operators in
    phase ``ph`` (the engine releases their gradient bucket from those)."""

    phases: tuple[str, ...]
    per: dict[str, dict[str, PassCost]]
    emb: dict[str, PassCost]
    head: dict[str, PassCost]
    emb_tail: dict[str, float]
    emb_ops: dict[str, bool]
    head_ops: dict[str, bool]
    saved: dict[str, float]
    emb_saved: float
    head_saved: float
    payload: dict[str, float]  # largest collective of the layer (forward or backward)
    emb_payload: float
    head_payload: float
    params: dict[str, tuple[float, float]]  # (dense, expert) per layer
    emb_params: float
    head_params: float
    #: expert parameters beside the head: the MTP blocks' routed experts
    head_expert_params: float = 0.0


def phase_ops(ch: ChunkGraph, phases: tuple[str, ...]) -> dict[str, tuple[Op, ...]]:
    """The operators of each pass of ``ch``, as the engine splits them
    (:func:`codesign.workload.step_program.pass_ops`)."""
    split = "W" in phases
    return {ph: pass_ops(ch.forward, ch.backward, ph, split) for ph in phases}


def _sample_layer(sample: TrainingRun, kinds: tuple[str, ...], kind: str) -> int:
    """The layer that stands for every layer of ``kind``: the first of that kind, or under
    ``dtype: fp4`` the first one whose GEMMs run in FP4 (the estimate then prices the
    recipe's few high-precision layers as FP4 too; the engine confirms the best plans)."""
    of_kind = [i for i, k in enumerate(kinds) if k == kind]
    in_fp4 = [i for i in of_kind if not high_precision_layer(sample, i)]
    return (in_fp4 or of_kind)[0]


def time_layers(sample: TrainingRun, kinds: tuple[str, ...], net: NetworkModel,
                compute: Callable[[Op], float], phases: tuple[str, ...],
                host: Callable[[Op], float] | None = None) -> LayerCosts:
    """Bind and time one layer of each kind (plus embedding and head) of ``sample`` (a plan
    of the shape, without ZeRO-3 gathers); ``host``: each operator's host issue time
    (:func:`codesign.engine.chunk.op_tasks`)."""
    binder = ChunkBinder(sample)

    def comm(op: Op) -> float:
        return net.collective(op.comm or "none", op.group or "dp", op.size).time_s

    def timed(ch: ChunkGraph) -> dict[str, PassCost]:
        return {ph: PassCost.of(time_chunk(ops, compute, comm, execute_in_order, host))
                for ph, ops in phase_ops(ch, phases).items()}

    def has_ops(ch: ChunkGraph, ph: str) -> bool:
        return any(o.kind != "comm" and o.layer == -1 for o in phase_ops(ch, phases)[ph])

    last = len(kinds) - 1
    per: dict[str, dict[str, PassCost]] = {ph: {} for ph in phases}
    saved: dict[str, float] = {}
    payload: dict[str, float] = {}
    params: dict[str, tuple[float, float]] = {}
    for kind in sorted(set(kinds)):
        layer = _sample_layer(sample, kinds, kind)
        ch, _ = binder.chunk(0, (layer,), False, False)
        one = timed(ch)
        pair = None
        if any(pc.parts[IDX["host"]] > 0 for pc in one.values()):
            # the host binds: a layer after another starts with the host's backlog, so its
            # cost is what a second layer of the kind adds, not one layer timed alone
            later = [i for i, k in enumerate(kinds) if k == kind and i > layer
                     and high_precision_layer(sample, i) == high_precision_layer(sample, layer)]
            if later:
                two, _ = binder.chunk(0, (layer, later[0]), False, False)
                pair = timed(two)
        for ph, pc in one.items():
            per[ph][kind] = pc if pair is None else pair[ph].minus(pc)
        saved[kind] = ch.saved_bytes
        payload[kind] = ch.comm_peak_bytes
        params[kind] = (ch.dense_params, ch.expert_params)
    k0, kl = kinds[0], kinds[last]
    e_ch, _ = binder.chunk(0, (0,), True, False)
    h_ch, _ = binder.chunk(0, (last,), False, True)
    e, h = timed(e_ch), timed(h_ch)
    return LayerCosts(
        phases=phases, per=per,
        emb={ph: e[ph].minus(per[ph][k0]) for ph in phases},
        head={ph: h[ph].minus(per[ph][kl]) for ph in phases},
        emb_tail={ph: e[ph].tail_s for ph in phases},
        emb_ops={ph: has_ops(e_ch, ph) for ph in phases},
        head_ops={ph: has_ops(h_ch, ph) for ph in phases},
        saved=saved, emb_saved=e_ch.saved_bytes - saved[k0],
        head_saved=h_ch.saved_bytes - saved[kl], payload=payload,
        emb_payload=e_ch.comm_peak_bytes, head_payload=h_ch.comm_peak_bytes,
        params=params, emb_params=e_ch.layer_params[0][1],
        head_params=h_ch.layer_params[-1][1], head_expert_params=h_ch.layer_params[-1][2])


def _pieces(lc: LayerCosts, ph: str, sig: Signature) -> list[tuple[int, PassCost]]:
    kinds, first, last = sig
    out: list[tuple[int, PassCost]] = [(kinds.count(k), lc.per[ph][k])
                                       for k in sorted(set(kinds))]
    if first:
        out.append((1, lc.emb[ph]))
    if last:
        out.append((1, lc.head[ph]))
    return out


def sum_chunk(lc: LayerCosts, sig: Signature) -> tuple[PassCost, ...]:
    """A chunk's passes (one per phase) as the sum of their parts (no collective crosses a
    layer boundary)."""
    kinds, first, _ = sig
    out = []
    for ph in lc.phases:
        pieces = _pieces(lc, ph, sig)
        t = sum(k * pc.time_s for k, pc in pieces)
        parts = tuple(sum(k * pc.parts[j] for k, pc in pieces) for j in range(len(CATS)))
        # a backward pass ends with the embedding (first chunk) or its lowest layer
        tail = 0.0
        if ph != "F":
            # a chunk of no transformer layer (only the loss: pp×vpp may exceed the layer
            # count by the embedding's and the loss's own stages) has no tail
            tail = (lc.emb_tail[ph] if first
                    else lc.per[ph][kinds[0]].tail_s if kinds else 0.0)
        out.append(PassCost(t, parts, tail))
    return tuple(out)


def _block(name: str, layer: int, category: Category) -> Op:
    return Op(name=name, kind="memory", category=category, layer=layer)


@dataclass(frozen=True)
class Zero3Groups:
    """How ZeRO-3 chunks gather and reduce: groups, their sizes, and the overlap switches."""

    dense_grp: str
    expert_grp: str
    dense_n: int
    expert_n: int
    overlap_param_gather: bool
    overlap_grad_reduce: bool
    #: the parameters are gathered again after each layer's recompute (DeepSpeed's ZeRO-3
    #: frees them when the recompute's forward ends: ``ParallelismSpec.regather_for_recompute``
    #: under full recompute), as the engine's step program does
    regather: bool = False
    #: prefetched gathers queue on the group's stream behind its reduce-scatters
    #: (``ParallelismSpec.param_gather_queue`` "group"), as the engine's step program does
    queued: bool = False


def _zero3_ops(lc: LayerCosts, sig: Signature, g: Zero3Groups,
               dur: dict[str, float]) -> dict[str, list[Op]]:
    """Per phase: the chunk's layers as compute blocks (durations into ``dur``) with the
    engine's per-layer parameter gathers (before each layer, forward and backward; with
    ``g.regather`` once more between a layer's recompute and its backward) and gradient
    reduce-scatters (after each layer's weight gradients)."""
    kinds, first, last = sig
    pre = "prefetch" if g.overlap_param_gather else "none"
    post = "async" if g.overlap_grad_reduce else "none"
    split = "W" in lc.phases

    def block(name: str, t: float, layer: int, cat: Category) -> Op:
        dur[name] = t
        return _block(name, layer, cat)

    def gathers(d: float, e: float, layer: int, cat: Category) -> list[Op]:
        # the dense parameters on their group, the experts' on theirs (bf16, 2 B each)
        parts = (("param_gather", g.dense_grp, g.dense_n, d),
                 ("expert_param_gather", g.expert_grp, g.expert_n, e))
        return [Op(name=name, kind="comm", category=cat, layer=layer, comm="all_gather",
                   group=grp, size=params * 2.0, overlap=pre,  # type: ignore[arg-type]
                   own_stream=not g.queued)
                for name, grp, ranks, params in parts if ranks > 1 and params > 0]

    def reduces(gs: list[Op], layer: int) -> list[Op]:
        return [Op(name=o.name.replace("gather", "grad_reduce"), kind="comm",
                   category="backward", layer=layer, comm="reduce_scatter", group=o.group,
                   size=o.size, overlap=post) for o in gs]  # type: ignore[arg-type]

    layers = range(len(kinds))
    fwd: list[Op] = []
    if first:
        fwd.append(block("emb", lc.emb["F"].time_s, -1, "forward"))
    for i, k in zip(layers, kinds, strict=True):
        d, e = lc.params[k]
        fwd += gathers(d, e, i, "forward")
        fwd.append(block(f"f{i}", lc.per["F"][k].time_s, i, "forward"))
    if last:
        fwd.append(block("head", lc.head["F"].time_s, -1, "forward"))
    bwd: list[Op] = []
    wgt: list[Op] = []
    if last:
        bwd.append(block("head_b", lc.head["B"].time_s, -1, "backward"))
        if split:
            wgt.append(block("head_w", lc.head["W"].time_s, -1, "backward"))
    for i, k in zip(reversed(layers), reversed(kinds), strict=True):
        d, e = lc.params[k]
        gs = gathers(d, e, i, "backward")
        bwd += gs
        b = lc.per["B"][k]
        # the recompute replays the forward, its blocking TP collectives included
        again = (b.parts[IDX["recompute"]] + lc.per["F"][k].parts[IDX["comm:tp"]]
                 if g.regather else 0.0)
        if again > 0:  # the recompute, the second gather, then the backward proper
            bwd.append(block(f"r{i}", again, i, "recompute"))
            bwd += gathers(d, e, i, "backward")
        bwd.append(block(f"b{i}", b.time_s - again, i, "backward"))
        if split:
            wgt.append(block(f"w{i}", lc.per["W"][k].time_s, i, "backward"))
            wgt += reduces(gs, i)
        else:
            bwd += reduces(gs, i)
    if first:
        bwd.append(block("emb_b", lc.emb["B"].time_s, -1, "backward"))
        if split:
            wgt.append(block("emb_w", lc.emb["W"].time_s, -1, "backward"))
    return {"F": fwd, "B": bwd, "W": wgt}


def zero3_chunk(lc: LayerCosts, net: NetworkModel, sig: Signature,
                g: Zero3Groups) -> tuple[PassCost, ...]:
    """A ZeRO-3 chunk's passes: each layer one compute block, with the engine's per-layer
    parameter gathers and gradient reduce-scatters around it, wired by the engine's overlap
    rules."""
    kinds, first, last = sig
    dur: dict[str, float] = {}
    ops = _zero3_ops(lc, sig, g, dur)

    def comm(op: Op) -> float:
        return net.collective(op.comm or "none", op.group or "dp", op.size).time_s

    def compute(op: Op) -> float:
        return dur[op.name]

    out = []
    for ph in lc.phases:
        tasks = op_tasks(ops[ph], compute, comm)
        tl = execute_in_order(tasks)
        compute_end = max((tl.end[tk.id] for tk in tasks if tk.stream == "compute"),
                          default=0.0)
        tail = max((tl.end[tk.id] - compute_end for tk in tasks
                    if tk.stream != "compute"), default=0.0)
        parts = [0.0] * len(CATS)
        busy = 0.0
        pieces = [lc.per[ph][k] for k in kinds] + ([lc.emb[ph]] if first else []) + \
            ([lc.head[ph]] if last else [])
        for pc in pieces:
            busy += pc.time_s
            for j, val in enumerate(pc.parts):
                parts[j] += val
        parts[DP] += compute_end - busy
        out.append(PassCost(compute_end, tuple(parts), max(tail, 0.0)))
    return tuple(out)


def bucket_entries(lc: LayerCosts, sig: Signature) -> list[tuple[int, float, float]]:
    """Parameter buckets of a chunk as ``(layer, dense, expert)`` in the engine's order
    (embedding, layers, head; layers numbered within the chunk)."""
    kinds, first, last = sig
    out = [(-1, lc.emb_params, 0.0)] if first else []
    for i, k in enumerate(kinds):
        d, e = lc.params[k]
        out.append((i, d, e))
    if last:
        out.append((-1, lc.head_params, lc.head_expert_params))
    return out


def released(lc: LayerCosts, sig: Signature) -> list[tuple[float, float, float]]:
    """Gradient buckets of one chunk as ``(offset into its last gradient pass, dense,
    expert)``, in the step program's release order
    (:mod:`codesign.workload.step_program`). The gradient pass is the backward, or ``W`` in
    split schedules; a layer's bucket is released when its last compute operator in that pass
    ends (the pass's end when it has none there)."""
    kinds, first, last = sig
    ph = lc.phases[-1]
    per = lc.per[ph]
    done: dict[int, float] = {}
    head_t = lc.head[ph].time_s if last else 0.0
    t = head_t
    for i in range(len(kinds) - 1, -1, -1):
        t += per[kinds[i]].time_s
        done[i] = t
    total = t + (lc.emb[ph].time_s if first else 0.0)
    if first and lc.emb_ops[ph]:
        done[-1] = total
    elif last and lc.head_ops[ph]:
        done[-1] = head_t
    entries = bucket_entries(lc, sig)
    out = []
    for i in release_order(entries):
        layer, d, e = entries[i]
        out.append((done.get(layer, total), d, e))
    return out
