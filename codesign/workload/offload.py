"""Offload to the GPU's host tier: what moves, when, and how much HBM it frees.

Three opt-in plan fields (:class:`~codesign.specs.parallel.ParallelismSpec`) move training
state to the tier of :attr:`GpuSpec.host_tier <codesign.specs.gpu.GpuSpec.host_tier>` (host
DRAM over PCIe, Grace LPDDR5X over NVLink-C2C, a CXL pool):

* ``offload_optimizer`` (ZeRO-Offload, Ren et al. 2021, USENIX ATC, Sec. 4; Megatron-Core
  ``--optimizer-cpu-offload``, ``megatron/core/optimizer/cpu_offloading``): the fp32 master
  weights and Adam moments (12 B per local parameter) live in the tier and the Adam step runs on
  the CPU. After the last backward the fp32 main gradients of the rank's shard (4 B/param) are
  copied device-to-host, the CPU streams the update's 30 B/param
  (:func:`~codesign.workload.training.adam_bytes_per_param`) through host memory, and the
  updated bf16 parameters (2 B/param) are copied back host-to-device. The three run one after
  the other on the optimizer's slot, not overlapped with compute (Megatron-Core's default,
  ``overlap_cpu_optimizer_d2h_h2d=False``).
* ``offload_params`` (ZeRO-Infinity, Rajbhandari et al. 2021, SC'21, Sec. 5-6; needs ZeRO-3
  and ``offload_optimizer``): the rank's bf16 parameter shard lives in the tier; every
  forward and backward fetches each layer's shard host-to-device ahead of its use (a
  ``prefetch`` copy on the host-to-device stream, before the layer's ZeRO-3 all-gather); each
  layer's bf16 gradient shard (2 B/param) is copied device-to-host right after the layer's
  weight gradients, every micro-batch, and accumulated in the tier in fp32 (the CPU's
  accumulation is not priced: ASSUMPTION, a few bytes per parameter and micro-batch of host
  bandwidth). The CPU optimizer reads the gradients and writes the updated shard in place: no
  copy at the optimizer step. HBM keeps two layers' bf16 weights (the gathered layers in
  flight that ZeRO-3 already counts) and two layers' gradients.
* ``offload_activations`` (Megatron-Core / Transformer Engine CPU offloading,
  ``transformer_engine.pytorch.cpu_offload``): each transformer layer's saved activations,
  except the chunk's last layer (whose backward starts right after its forward), are copied
  device-to-host right after the layer's forward (``async``: nothing waits for it) and back
  before the layer's backward (``prefetch``). ASSUMPTION (HBM): two offloaded layers stay
  resident as staging (the one being copied out or reloaded and the one computing, as ZeRO-3
  keeps two gathered layers), i.e. the copies keep up with compute; where they do not, the
  step time shows it (the copies' exposed time) but the memory does not grow with the backlog.

Copies are collectives of two pseudo-groups, :data:`HOST_H2D` and :data:`HOST_D2H`, each on a
stream of its own (the link is full duplex: the tier's ``bandwidth_GBps`` is per direction);
the engine prices them on the host link (:mod:`codesign.hardware.offload`) and their exposed
time appears as ``offload_comm`` in the step breakdown. The copies are added to the passes
the engine times (:func:`host_copies`); the graph's operators (and what the Chakra exporter
reads) are unchanged. Copies still running when a forward's compute ends run on as its
tails, and the micro-batch's backward waits for them
(:func:`codesign.engine.step_run.run_program`: its first reload is the forward's last copy
out). ASSUMPTION: a layer's ZeRO-3 all-gather does not wait for its host-to-device fetch
(both are prefetched, the layer's first compute op waits for both).
"""

from __future__ import annotations

from collections.abc import Sequence

from codesign.groups import HOST_COPY_STREAMS
from codesign.ir import Op
from codesign.specs.parallel import ParallelismSpec
from codesign.workload.schedules import SPLIT_BACKWARD
from codesign.workload.step_program import PARAM_BYTES
from codesign.workload.training import ChunkGraph

#: pseudo-group of host-to-device copies (its stream: ``h2d``)
HOST_H2D = "host_h2d"
#: pseudo-group of device-to-host copies (its stream: ``d2h``)
HOST_D2H = "host_d2h"
HOST_GROUPS = frozenset(HOST_COPY_STREAMS)
#: the plan fields that offload
OFFLOAD_FIELDS = ("offload_optimizer", "offload_params", "offload_activations")


def offloaded_layers(chunk: ChunkGraph) -> dict[int, float]:
    """Layer -> activation bytes it moves to the tier per micro-batch: every transformer
    layer of the chunk but its last."""
    return dict(chunk.layer_saved[:-1])


def offload_states(p: ParallelismSpec, weights: float, gradients: float, optimizer: float,
                   largest_layer: float) -> tuple[float, float, float, float]:
    """``(weights, gradients, optimizer, bytes in the tier)`` in HBM after the plan's state
    offload, from the ZeRO state bytes of :func:`codesign.workload.memory.state_bytes`
    (``largest_layer``: parameters of the largest layer; under ``offload_params`` two layers'
    bf16 weights, the one computing and the one prefetched, and two layers' gradients,
    the one computed and the one being copied out, stay in HBM)."""
    host = 0.0
    if p.offload_optimizer:
        host += optimizer
        optimizer = 0.0
    if p.offload_params:  # the shards move; the layers in flight stay
        kept_w = 2 * largest_layer * PARAM_BYTES
        kept_g = 2 * largest_layer * p.grad_bytes
        host += weights - kept_w + gradients  # the shard of each; ZeRO-3 counts kept_w
        weights, gradients = kept_w, kept_g
    return weights, gradients, optimizer, host


def _copy(name: str, group: str, layer: int, size: float, category: str,
          overlap: str) -> Op:
    return Op(name=name, kind="comm", category=category,  # type: ignore[arg-type]
              layer=layer, comm="copy", group=group, size=size,
              overlap=overlap, backward=category == "backward")  # type: ignore[arg-type]


def host_copies(ops: Sequence[Op], phase: str, chunk: ChunkGraph, p: ParallelismSpec,
                dense_n: int, expert_n: int) -> tuple[Op, ...]:
    """The operators of one pass of ``chunk`` with the plan's host copies inserted
    (``phase``: ``F``, ``B`` or ``W``). Parameter shards are fetched ahead of each layer in
    ``F`` and ``B`` passes, activations copied out after each layer in ``F`` and reloaded
    ahead of it in ``B``; gradient shards leave after each layer in the pass that computes
    the weight gradients (``W`` in split schedules, else ``B``). ``dense_n``/``expert_n``:
    ranks sharding the parameters under ZeRO-3. Sizes in bytes per rank and micro-batch."""
    if not (p.offload_params or p.offload_activations):
        return tuple(ops)
    acts = offloaded_layers(chunk) if p.offload_activations else {}
    shard = {layer: PARAM_BYTES * (d / dense_n + e / expert_n)
             for layer, d, e in chunk.layer_params if layer >= 0} if p.offload_params else {}
    grad_phase = "W" if p.pipeline_schedule in SPLIT_BACKWARD else "B"
    before: dict[int, list[tuple[str, str, float]]] = {}  # layer -> (name, group, bytes)
    after: dict[int, list[tuple[str, str, float]]] = {}
    for layer, size in shard.items():
        if phase in ("F", "B"):
            before.setdefault(layer, []).append(("param_fetch", HOST_H2D, size))
        if phase == grad_phase:
            after.setdefault(layer, []).append(("grad_offload", HOST_D2H, size))
    for layer, size in acts.items():
        if phase == "F":
            after.setdefault(layer, []).append(("activation_offload", HOST_D2H, size))
        elif phase == "B":
            before.setdefault(layer, []).append(("activation_reload", HOST_H2D, size))
    category = "forward" if phase == "F" else "backward"
    last_compute = {o.layer: i for i, o in enumerate(ops) if o.kind != "comm"}
    out: list[Op] = []
    for i, op in enumerate(ops):
        # the layer's first operator: fetch ahead (prefetch); its last compute op: copy out
        out += [_copy(n, g, op.layer, b, category, "prefetch")
                for n, g, b in before.pop(op.layer, ())]
        out.append(op)
        if last_compute.get(op.layer) == i:
            out += [_copy(n, g, op.layer, b, category, "async")
                    for n, g, b in after.get(op.layer, ())]
    return tuple(out)


__all__ = ["HOST_D2H", "HOST_GROUPS", "HOST_H2D", "OFFLOAD_FIELDS", "host_copies",
           "offload_states", "offloaded_layers"]
