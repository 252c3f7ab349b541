"""Chakra execution-trace (ET) export for ASTRA-sim.

``export_chakra(run, prefix)`` writes, for a training run:

* ``PREFIX.<rank>.et`` for every rank: a ``GlobalMetadata`` record (Chakra schema version,
  codesign version, the run spec as JSON and its SHA-256, the rank's pipeline stage), then
  the ``Node`` records of one training step;
* ``PREFIX.groups.json``: ``{"<group id>": [ranks]}`` for every communicator group a
  collective names (ASTRA-sim's ``--comm-group-configuration``);
* ``PREFIX.network.yml``: ASTRA-sim's analytical network for the run's topology (a scale-up
  ``Switch`` of the domain size, then a scale-out ``Switch`` over the domains; one ``Switch``
  for FullFlat), ``PREFIX.system.json`` (system layer: replay the trace's compute durations,
  ring collectives per dimension) and ``PREFIX.memory.json`` (no remote memory).

Node stream of a rank (its pipeline stage's schedule from
:func:`codesign.workload.schedules.schedule`, as the engine runs it): for every
(phase, micro-batch, chunk) step, a ``COMM_RECV_NODE`` for the activation (forward) or
gradient (backward) from the neighbouring stage, the chunk's operators — kernels as
``COMP_NODE`` (``num_ops`` = FLOPs, ``tensor_size`` = HBM bytes, ``duration_micros`` from
:class:`~codesign.hardware.compute.ComputeModel`), collectives as ``COMM_COLL_NODE``
(``comm_type``, ``comm_size`` in bytes as :mod:`codesign.network.collectives` counts them,
``pg_name`` = the id of this rank's group, ``involved_dim``) — and a ``COMM_SEND_NODE`` to the
next stage; data-parallel gradient reduction buckets (released by the last backward of each
layer when overlapped), the optimizer and ZeRO parameter all-gathers as the engine places them.
Send/receive tags are unique per (micro-batch, sending virtual stage, direction).

Dependencies (``data_deps``) follow the engine (:func:`codesign.engine.chunk.op_tasks`):
kernels run in program order; a collective waits for what its overlap rule says (blocking:
the previous kernel and the collectives it consumes; ``prev``/``next``: runs beside the
previous/next kernel; ``prefetch``/``async``) and for the previous collective of its stream
in the same pass; a kernel waits for the collectives it consumes. A pass starts after the
previous kernel of the rank and its receive. The optimizer waits for everything still
outstanding (sends, asynchronous collectives, gradient buckets).

Durations are integer microseconds (the field's unit; ASTRA-sim multiplies by 1,000 and
costs a zero as 1 ns); kernel durations are rounded so that every running sum along the rank's
compute stream stays within 0.5 us of codesign's own. Communication nodes carry codesign's
network estimate too (used only by ASTRA-sim's replay-only mode; otherwise it simulates them).

Speed: every rank of a pipeline stage has the same node stream except the ``pg_name`` values
and the send/receive peers. Each stage's stream is serialized once with the ``protobuf``
runtime, with every per-rank field last in its node and of fixed width (group ids are
zero-padded to one number of digits; ranks of one varint width share a template), and each
rank's file is that buffer with those bytes overwritten in place (numpy), written with one
buffered write.
"""

from __future__ import annotations

import glob
import hashlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from codesign import __version__
from codesign.api import build_models
from codesign.engine.training import GRAD_REDUCE_BYTES, PARAM_BYTES
from codesign.errors import InfeasiblePlan, SpecError
from codesign.groups import GROUP_NAMES, group_dims
from codesign.hardware.compute import ComputeModel
from codesign.ir import Op
from codesign.network.model import NetworkModel
from codesign.specs.run import TrainingRun
from codesign.specs.topology import FullFlatTopology
from codesign.trace.schema import (
    ET_SCHEMA,
    ET_VERSION,
    enum_values,
    message_class,
    record,
    varint,
)
from codesign.units import GB, TFLOPS, US
from codesign.workload.dims import pipeline_message
from codesign.workload.schedules import schedule
from codesign.workload.training import (
    ADAM_BYTES_PER_PARAM,
    ChunkGraph,
    TrainingGraph,
    state_groups,
)

NODE_TYPE = enum_values("NodeType")
COMM_TYPE = enum_values("CollectiveCommType")
#: codesign collective kind -> Chakra CollectiveCommType
COMM_KINDS: dict[str, int] = {
    "all_reduce": COMM_TYPE["ALL_REDUCE"], "all_gather": COMM_TYPE["ALL_GATHER"],
    "reduce_scatter": COMM_TYPE["REDUCE_SCATTER"], "all_to_all": COMM_TYPE["ALL_TO_ALL"],
    "broadcast": COMM_TYPE["BROADCAST"],
}
#: order in which group kinds get their ids: the group table's
_GROUP_ORDER = GROUP_NAMES
_FWD, _BWD = 0, 1

Slot = tuple[str, tuple[str, ...]]  # ("group", layout dims) | ("self"|"next"|"prev", ())


# --- models --------------------------------------------------------------------------------


def optimizer_params(chunk: ChunkGraph, zero: int, dense_n: int, expert_n: int) -> float:
    """Parameters whose Adam update a rank performs for ``chunk`` (as the engine counts)."""
    if zero == 0:
        return chunk.dense_params + chunk.expert_params
    return chunk.dense_params / dense_n + chunk.expert_params / expert_n


# --- a stage's node program ----------------------------------------------------------------


@dataclass
class _Node:
    """One node of a stage's program; ``peer`` is ``next``/``prev`` for send/receive."""

    name: str
    type: int
    deps: list[int]
    duration_s: float
    flops: float = 0.0
    nbytes: float = 0.0
    comm: str = ""
    size: float = 0.0
    group: str = ""
    peer: str = ""
    tag: int = 0


@dataclass
class _Program:
    nodes: list[_Node] = field(default_factory=list)
    stream_last: dict[str, int] = field(default_factory=dict)  # stage-level stream -> node
    _has_child: set[int] = field(default_factory=set)

    def add(self, node: _Node) -> int:
        deps = node.deps
        if len(deps) > 1 or (deps and deps[0] < 0):
            node.deps = deps = list(dict.fromkeys(d for d in deps if d >= 0))
        self.nodes.append(node)
        self._has_child.update(deps)
        return len(self.nodes) - 1

    def dangling(self) -> list[int]:
        """Nodes nothing depends on yet."""
        return [i for i in range(len(self.nodes)) if i not in self._has_child]


class _StageBuilder:
    """Builds the node program of one pipeline stage (see the module docstring)."""

    def __init__(self, graph: TrainingGraph, compute: ComputeModel,
                 network: NetworkModel) -> None:
        self.graph, self.compute, self.network = graph, compute, network
        run = graph.run
        self.p = p = run.parallel
        self.pp, self.n_v = p.pp, p.pp * p.vpp
        self.n_mb = graph.num_microbatches
        if self.n_mb * self.n_v * 2 >= 2**31:
            raise InfeasiblePlan("too many micro-batches × virtual stages for int32 tags")
        self.orders = schedule(p.pipeline_schedule, p.pp, p.vpp, self.n_mb)
        self.by_v = {c.virtual_stage: c for c in graph.chunks}
        self.zero = p.sharding_stage
        self.dense_grp, self.expert_grp = state_groups(p)
        self.dense_n = network.group_size(self.dense_grp)
        self.expert_n = network.group_size(self.expert_grp)
        # per sending rank; scatter/gathered sends add a TP all-gather at the receiver
        self.p2p_bytes, self.p2p_gather_bytes = pipeline_message(run)
        self.p2p_s = network.collective("p2p", "pp", self.p2p_bytes).time_s if p.pp > 1 else 0.0
        self._op_time: dict[int, float] = {}  # id(op) -> seconds; the graph keeps ops alive

    def op_time(self, op: Op) -> float:
        """Compute time of a kernel, seconds (cached: micro-batches repeat the operators)."""
        t = self._op_time.get(id(op))
        if t is None:
            t = self._op_time[id(op)] = self.compute.time(op)
        return t

    def comm_s(self, kind: str, group: str, size: float) -> float:
        return self.network.collective(kind, group, size).time_s

    def _coll(self, prog: _Program, name: str, kind: str, group: str, size: float,
              deps: list[int]) -> int:
        return prog.add(_Node(name, NODE_TYPE["COMM_COLL_NODE"], deps,
                              self.comm_s(kind, group, size), comm=kind, size=size, group=group))

    def _bucket(self, prog: _Program, name: str, kind: str, dense: float, expert: float,
                nbytes: float, deps: list[int]) -> list[int]:
        """Collectives of one parameter bucket (dense part, then expert part) on the state
        groups, in order on the stage's data-parallel stream as the engine runs them."""
        deps = [*deps, prog.stream_last["dp"]] if "dp" in prog.stream_last else list(deps)
        out = []
        if dense > 0 and self.dense_n > 1:
            out.append(self._coll(prog, name, kind, self.dense_grp, dense * nbytes, deps))
            deps = out[-1:]
        if expert > 0 and self.expert_n > 1:
            out.append(self._coll(prog, f"expert_{name}", kind, self.expert_grp,
                                  expert * nbytes, deps))
        if out:
            prog.stream_last["dp"] = out[-1]
        return out

    def _send(self, prog: _Program, name: str, peer: str, tag: int, end: int) -> int:
        """A pipeline send after the pass ending at ``end``, in order on its stream (on the
        compute stream when sends block). Returns what the stage's next pass waits for:
        ``end``, or the send when sends block."""
        if not self.p.overlap_p2p:
            return prog.add(_Node(name, NODE_TYPE["COMM_SEND_NODE"], [end], self.p2p_s,
                                  size=self.p2p_bytes, peer=peer, tag=tag))
        stream = f"send_{peer}"
        deps = [end, prog.stream_last[stream]] if stream in prog.stream_last else [end]
        prog.stream_last[stream] = prog.add(_Node(
            name, NODE_TYPE["COMM_SEND_NODE"], deps, self.p2p_s, size=self.p2p_bytes,
            peer=peer, tag=tag))
        return end

    def _recv(self, prog: _Program, name: str, peer: str, tag: int, last: int) -> int:
        """A pipeline receive, then (scatter/gathered sends) the TP all-gather of the pieces;
        returns the node the next pass waits for."""
        recv = prog.add(_Node(name, NODE_TYPE["COMM_RECV_NODE"], [last], self.p2p_s,
                              size=self.p2p_bytes, peer=peer, tag=tag))
        if not self.p2p_gather_bytes:
            return recv
        return self._coll(prog, name.replace("recv", "gather"), "all_gather", "tp",
                          self.p2p_gather_bytes, [recv])

    def _pass(self, prog: _Program, ops: tuple[Op, ...], label: str,
              entry: list[int]) -> tuple[int, dict[int, int]]:
        """Nodes of one chunk pass; returns (its last kernel, layer -> its last kernel)."""
        prev = prev2 = -1
        pending: list[int] = []
        deferred: list[int] = []
        stream_last: dict[str, int] = {}
        layer_last: dict[int, int] = {}
        for op in ops:
            name = f"{label}.{op.name}" + (f".l{op.layer}" if op.layer >= 0 else "")
            if op.kind != "comm":
                deps = ([prev] if prev >= 0 else list(entry)) + pending
                pending, deferred = deferred, []
                nid = prog.add(_Node(name, NODE_TYPE["COMP_NODE"], deps, self.op_time(op),
                                     flops=op.flops, nbytes=op.bytes))
                prev2, prev = prev, nid
                layer_last[op.layer] = nid
                continue
            nid = len(prog.nodes)
            after_prev = [prev] if prev >= 0 else list(entry)
            if op.overlap == "prev":
                deps = [prev2] if prev2 >= 0 else list(entry)
                pending.append(nid)
            elif op.overlap == "next":
                deps = after_prev
                deferred.append(nid)
            elif op.overlap == "prefetch":
                deps = list(entry)
                pending.append(nid)
            elif op.overlap == "async":
                deps = after_prev
            else:  # blocking, after the blocking collectives it consumes
                deps = after_prev + pending
                pending.append(nid)
            if op.stream in stream_last:
                deps.append(stream_last[op.stream])
            stream_last[op.stream] = self._coll(prog, name, op.comm or "all_reduce",
                                                op.group or "dp", op.size, deps)
        return (prev if prev >= 0 else len(prog.nodes) - 1), layer_last

    def program(self, stage: int) -> list[_Node]:
        """The node program of ``stage`` (node ids are list indices, deps point backwards)."""
        p, pp, n_v = self.p, self.pp, self.n_v
        prog = _Program()
        chunks = [self.by_v[c * pp + stage] for c in range(p.vpp)]
        gather = self.zero in (1, 2) and (self.dense_n > 1 or self.expert_n > 1)
        first_bucket: dict[int, list[int]] = {}
        if gather and p.overlap_param_gather:
            for c, ch in enumerate(chunks):
                for layer, dense, expert in ch.layer_params:
                    ids = self._bucket(prog, f"param_gather.l{layer}", "all_gather", dense,
                                       expert, PARAM_BYTES, [])
                    first_bucket.setdefault(c, ids)
        order = self.orders[stage]
        last_b = {c: i for i, (ph, _, c) in enumerate(order) if ph == "B"}
        sync = self.zero < 3 and (self.dense_n > 1 or self.expert_n > 1)
        kind = "all_reduce" if self.zero == 0 else "reduce_scatter"
        last = -1
        first_f: set[int] = set()
        pass_end: dict[tuple[str, int, int], int] = {}
        late_buckets: list[tuple[int, int, int, float, float]] = []
        for i, (ph, mb, c) in enumerate(order):
            v = c * pp + stage
            label = f"{ph}{mb}.v{v}" if p.vpp > 1 else f"{ph}{mb}"  # v = stage without vpp
            entry = [last]
            if ph == "F":
                if v > 0:
                    if (v - 1) % pp == stage:
                        entry.append(pass_end[("F", mb, v - 1)])
                    else:
                        entry.append(self._recv(prog, f"recv_fwd.{label}", "prev",
                                                self.tag(mb, v - 1, _FWD), last))
                if c not in first_f:
                    first_f.add(c)
                    entry += first_bucket.get(c, [])
                ops = self.by_v[v].forward
            else:
                if v < n_v - 1:
                    if (v + 1) % pp == stage:
                        entry.append(pass_end[("B", mb, v + 1)])
                    else:
                        entry.append(self._recv(prog, f"recv_bwd.{label}", "next",
                                                self.tag(mb, v + 1, _BWD), last))
                ops = self.by_v[v].backward
            end, layer_last = self._pass(prog, ops, label, entry)
            pass_end[(ph, mb, v)] = last = end
            if ph == "F" and v < n_v - 1 and (v + 1) % pp != stage:
                last = self._send(prog, f"send_fwd.{label}", "next", self.tag(mb, v, _FWD), end)
            if ph == "B" and v > 0 and (v - 1) % pp != stage:
                last = self._send(prog, f"send_bwd.{label}", "prev", self.tag(mb, v, _BWD), end)
            if sync and ph == "B" and last_b[c] == i:
                # buckets in the order backward releases them (the engine's order)
                buckets = sorted(((layer_last.get(layer, end), layer, dense, expert)
                                  for layer, dense, expert in chunks[c].layer_params),
                                 key=lambda b: b[0])
                for done, layer, dense, expert in buckets:
                    if p.overlap_grad_reduce:
                        self._bucket(prog, f"grad_reduce.l{layer}", kind, dense, expert,
                                     GRAD_REDUCE_BYTES, [done])
                    else:
                        late_buckets.append((i, done, layer, dense, expert))
        for _, _, layer, dense, expert in sorted(late_buckets, key=lambda b: b[:2]):
            self._bucket(prog, f"grad_reduce.l{layer}", kind, dense, expert,
                         GRAD_REDUCE_BYTES, [last])
        opt_params = sum(optimizer_params(ch, self.zero, self.dense_n, self.expert_n)
                         for ch in chunks)
        opt_op = Op(name="optimizer", kind="memory", category="optimizer", layer=-1,
                    bytes=opt_params * ADAM_BYTES_PER_PARAM)
        opt = prog.add(_Node("optimizer", NODE_TYPE["COMP_NODE"], prog.dangling(),
                             self.compute.time(opt_op), nbytes=opt_op.bytes))
        if gather and not p.overlap_param_gather:
            for ch in chunks:
                for layer, dense, expert in ch.layer_params:
                    self._bucket(prog, f"param_gather.l{layer}", "all_gather", dense, expert,
                                 PARAM_BYTES, [opt])
        return prog.nodes

    def tag(self, mb: int, v: int, direction: int) -> int:
        """Send/receive tag of micro-batch ``mb`` leaving virtual stage ``v``."""
        return (mb * self.n_v + v) * 2 + direction


def _rounded_us(durations_s: list[float]) -> list[int]:
    """Integer microseconds whose running sums stay within 0.5 us of the exact ones."""
    out = []
    exact = 0.0
    done = 0
    for d in durations_s:
        exact += d / US
        step = max(0, round(exact) - done)
        done += step
        out.append(step)
    return out


# --- groups and ranks ----------------------------------------------------------------------


class _Ranks:
    """Rank coordinates of a layout and the ids of the communicator groups in use."""

    def __init__(self, network: NetworkModel) -> None:
        layout = network.layout
        self.network = network
        self.layout = layout
        self.world = layout.world
        ranks = np.arange(self.world, dtype=np.int64)
        self.coord = {d: (ranks // layout.stride(d)) % layout.size(d) for d in layout.order}
        self.keys: dict[tuple[str, ...], str] = {}  # group dims -> first group name using it
        self.base: dict[tuple[str, ...], int] = {}
        self.index: dict[tuple[str, ...], np.ndarray] = {}
        self.width = 1
        self.num_groups = 0

    def key(self, group: str) -> tuple[str, ...]:
        """The layout dims (size > 1) a group varies over: equal keys = the same groups."""
        dims = group_dims(group)
        return tuple(d for d in self.layout.order if d in dims and self.layout.size(d) > 1)

    def use(self, group: str) -> tuple[str, ...]:
        k = self.key(group)
        if not k:
            raise ValueError(f"collective on a group of one rank ({group})")
        self.keys.setdefault(k, group)
        return k

    def assign_ids(self) -> None:
        """Number every group of every key in use, from 1, kind by kind."""
        rank_of = {g: i for i, g in enumerate(_GROUP_ORDER)}
        keys = sorted(self.keys, key=lambda k: (rank_of.get(self.keys[k], 99), k))
        total = 0
        counts = {}
        for k in keys:
            idx = np.zeros(self.world, dtype=np.int64)
            mult = 1
            for d in self.layout.order:
                if d not in k:
                    idx += self.coord[d] * mult
                    mult *= self.layout.size(d)
            self.index[k] = idx
            counts[k] = mult
            total += mult
        # ids 1..total, zero-padded to one width so a rank's bytes can be patched in place;
        # ASTRA-sim reads them with std::stoi (group ids must be > 0), so "0042" is group 42
        self.width = len(str(total))
        self.num_groups = total
        start = 1
        for k in keys:
            self.base[k] = start
            start += counts[k]

    def label(self, gid: int) -> bytes:
        """A group id as written in ``pg_name`` and the groups file."""
        return b"%0*d" % (self.width, gid)

    def group_id(self, k: tuple[str, ...]) -> np.ndarray:
        """Group id of every rank for key ``k``."""
        return self.base[k] + self.index[k]

    def groups(self) -> Iterator[tuple[int, np.ndarray]]:
        """(group id, member ranks ascending) for every group in use."""
        for k in sorted(self.base, key=self.base.__getitem__):
            idx = self.index[k]
            size = int(np.prod([self.layout.size(d) for d in k]))
            members = np.argsort(idx, kind="stable").reshape(-1, size)
            for j, row in enumerate(members):
                yield self.base[k] + j, row

    def stage_ranks(self, stage: int) -> np.ndarray:
        return np.nonzero(self.coord["pp"] == stage)[0]

    def peer(self, ranks: np.ndarray, stage: int, step: int) -> np.ndarray:
        pp = self.layout.size("pp")
        return ranks + ((stage + step) % pp - stage) * self.layout.stride("pp")

    def involved_dims(self, group: str) -> list[bool]:
        """Which dimensions of the exported network file a group's collectives use."""
        if network_dims(self.network.topology, self.world) == 1:
            return [True]
        place = self.network.placement(group)
        return [place.ranks_per_domain > 1, place.num_domains > 1]


# --- serialization -------------------------------------------------------------------------


def _attr(name: str, **value: Any) -> Any:
    return message_class("AttributeProto")(name=name, **value)


def _varint_width(value: int) -> int:
    return len(varint(value))


def _placeholder(width: int) -> int:
    """The smallest number whose varint takes ``width`` bytes."""
    return 0 if width == 1 else 1 << (7 * (width - 1))


@dataclass
class _Template:
    """A stage's serialized trace for one width signature, and where each slot's bytes go."""

    buf: bytearray
    holes: list[tuple[Slot, np.ndarray]]  # slot -> positions, shape (count, width)
    view: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.view = np.frombuffer(self.buf, dtype=np.uint8)  # writable: patches buf in place


class _StageSerializer:
    """Serializes one stage's program with the protobuf runtime.

    A node's bytes are the serialization of its head fields (id .. duration) followed by
    that of its attributes: protobuf encodes fields in number order and ``attr`` (10) is the
    last, so the concatenation is exactly the serialization of the whole node. Attribute
    encodings are cached (micro-batches repeat the same operators), and per-rank attributes
    come last, each encoded on its own, so their value bytes end where their encoding ends.
    """

    def __init__(self, nodes: list[_Node], ranks: _Ranks, metadata: bytes) -> None:
        self.ranks = ranks
        self.metadata = metadata
        node_cls = message_class("Node")
        is_gpu = _attr("is_cpu_op", bool_val=False)
        comp = NODE_TYPE["COMP_NODE"]
        durations = iter(_rounded_us([n.duration_s for n in nodes if n.type == comp]))
        cache: dict[tuple[Any, ...], bytes] = {}
        self.fixed: list[bytes] = []  # serialized nodes without per-rank fields
        self.varying: list[tuple[bytes, list[Slot]]] = []  # fixed part, per-rank slots
        self.order: list[int] = []  # program order: index into fixed, or -1 - varying index
        self.slots: list[Slot] = []
        for i, n in enumerate(nodes):
            dur = next(durations) if n.type == comp else max(0, round(n.duration_s / US))
            head = node_cls(id=i, name=n.name, type=n.type, data_deps=n.deps,
                            duration_micros=dur).SerializeToString()
            if n.type == comp:
                key: tuple[Any, ...] = ("comp", round(n.flops), round(n.nbytes))
                if key not in cache:
                    cache[key] = node_cls(attr=[
                        _attr("num_ops", int64_val=key[1]),
                        _attr("tensor_size", uint64_val=key[2]), is_gpu]).SerializeToString()
                self.order.append(len(self.fixed))
                self.fixed.append(head + cache[key])
                continue
            if n.type == NODE_TYPE["COMM_COLL_NODE"]:
                k = ranks.use(n.group)
                key = ("coll", n.comm, n.group, round(n.size))
                if key not in cache:
                    cache[key] = node_cls(attr=[
                        is_gpu, _attr("comm_size", int64_val=key[3]),
                        _attr("comm_type", int64_val=COMM_KINDS[n.comm]),
                        _attr("involved_dim", bool_list=message_class("BoolList")(
                            values=ranks.involved_dims(n.group)))]).SerializeToString()
                slots: list[Slot] = [("group", k)]
            else:
                key = ("p2p", round(n.size), n.tag)
                cache[key] = node_cls(attr=[
                    is_gpu, _attr("comm_size", int64_val=key[1]),
                    _attr("comm_tag", int32_val=n.tag)]).SerializeToString()
                peer: Slot = (n.peer, ())
                slots = ([("self", ()), peer] if n.type == NODE_TYPE["COMM_SEND_NODE"]
                         else [peer, ("self", ())])
            self.order.append(-1 - len(self.varying))
            self.varying.append((head + cache[key], slots))
            for slot in slots:
                if slot not in self.slots:
                    self.slots.append(slot)
        self.templates: dict[tuple[int, ...], _Template] = {}

    @property
    def rank_slots(self) -> list[Slot]:
        """Slots holding a rank (varint); the others hold a group id (fixed-width string)."""
        return [s for s in self.slots if s[0] != "group"]

    def template(self, widths: tuple[int, ...]) -> _Template:
        """The serialized stage for rank slots of the given varint widths (cached)."""
        hit = self.templates.get(widths)
        if hit is not None:
            return hit
        node_cls = message_class("Node")
        width = dict(zip(self.rank_slots, widths, strict=True))
        tails: dict[tuple[Slot, bool], bytes] = {}

        def tail(slot: Slot, src: bool) -> bytes:
            """Encoding of one per-rank attribute holding a placeholder of the right width."""
            if (slot, src) not in tails:
                if slot[0] == "group":
                    attr = _attr("pg_name", string_val="1" * self.ranks.width)
                else:
                    attr = _attr("comm_src" if src else "comm_dst",
                                 int32_val=_placeholder(width[slot]))
                tails[(slot, src)] = node_cls(attr=[attr]).SerializeToString()
            return tails[(slot, src)]

        buf = bytearray(self.metadata)
        positions: dict[Slot, list[int]] = {s: [] for s in self.slots}
        for idx in self.order:
            if idx >= 0:
                buf += record(self.fixed[idx])
                continue
            fixed, slots = self.varying[-1 - idx]
            parts = [tail(slot, j == 0) for j, slot in enumerate(slots)]
            payload = fixed + b"".join(parts)
            buf += varint(len(payload))
            pos = len(buf) + len(fixed)
            buf += payload
            for slot, part in zip(slots, parts, strict=True):
                pos += len(part)
                positions[slot].append(pos - self.width(slot, width))
        holes = []
        for slot, ends in positions.items():
            if ends:
                w = self.width(slot, width)
                holes.append((slot, np.asarray(ends, dtype=np.int64)[:, None]
                              + np.arange(w, dtype=np.int64)[None, :]))
        tpl = _Template(buf, holes)
        self.templates[widths] = tpl
        return tpl

    def width(self, slot: Slot, rank_widths: dict[Slot, int]) -> int:
        """Bytes of a slot's value: the group id digits, or the rank's varint width."""
        return self.ranks.width if slot[0] == "group" else rank_widths[slot]


# --- files ---------------------------------------------------------------------------------


def network_dims(topology: Any, world: int) -> int:
    """Dimensions of the exported ASTRA-sim network (1: one switch; 2: scale-up + out)."""
    if isinstance(topology, FullFlatTopology) or world <= topology.scale_up.domain_size:
        return 1
    return 2


def network_yaml(run: TrainingRun, world: int) -> str:
    """ASTRA-sim analytical network file (YAML) for the run's topology."""
    topo = run.topology
    lines = [f"# ASTRA-sim analytical network for codesign topology '{topo.name}', "
             f"{world} GPUs (written by codesign {__version__})"]
    if isinstance(topo, FullFlatTopology):
        lines += ["# FullFlat: one switch, the same bandwidth between every pair of GPUs",
                  "topology: [ Switch ]", f"npus_count: [ {world} ]",
                  f"bandwidth: [ {topo.bandwidth_GBps:g} ]  # GB/s per GPU per direction",
                  f"latency: [ {topo.latency_us * 1e3:g} ]  # ns"]
        return "\n".join(lines) + "\n"
    up, out = topo.scale_up, topo.scale_out
    if network_dims(topo, world) == 1:
        lines += ["# every GPU in one scale-up domain",
                  "topology: [ Switch ]", f"npus_count: [ {world} ]",
                  f"bandwidth: [ {up.bandwidth_GBps:g} ]  # GB/s per GPU per direction",
                  f"latency: [ {up.latency_us * 1e3:g} ]  # ns"]
        return "\n".join(lines) + "\n"
    d = up.domain_size
    out_bw = out.nic_bandwidth_Gbps / 8.0
    out_lat_ns = (out.latency_us + out.hop_latency_us * (2 * out.switch_tiers - 1)) * 1e3
    lines += [f"# dim 0: scale-up domain of {d} GPUs; dim 1: scale-out fat-tree, one "
              f"{out.nic_bandwidth_Gbps:g} Gb/s NIC per GPU",
              "# (ASTRA-sim has no oversubscription or message-size efficiency: "
              "codesign's are left out)",
              "topology: [ Switch, Switch ]", f"npus_count: [ {d}, {world // d} ]",
              f"bandwidth: [ {up.bandwidth_GBps:g}, {out_bw:g} ]  # GB/s per GPU per direction",
              f"latency: [ {up.latency_us * 1e3:g}, {out_lat_ns:g} ]  # ns"]
    return "\n".join(lines) + "\n"


def system_json(run: TrainingRun, world: int) -> dict[str, Any]:
    """ASTRA-sim system-layer config: replay the trace's compute durations (roofline off;
    ``peak-perf``/``local-mem-bw`` are the GPU's, for those who switch it on)."""
    dims = network_dims(run.topology, world)
    impl = ["ring"] * dims
    return {
        "scheduling-policy": "LIFO", "endpoint-delay": 10, "active-chunks-per-dimension": 1,
        "preferred-dataset-splits": 4, "all-reduce-implementation": impl,
        "all-gather-implementation": impl, "reduce-scatter-implementation": impl,
        "all-to-all-implementation": impl, "collective-optimization": "localBWAware",
        "local-mem-bw": run.gpu.hbm_bytes_per_s / GB, "boost-mode": 0, "roofline-enabled": 0,
        "peak-perf": run.gpu.peak_flops(run.parallel.dtype) / TFLOPS,
    }


def _check_network(run: TrainingRun, world: int) -> None:
    topo = run.topology
    if network_dims(topo, world) == 2:
        d = topo.scale_up.domain_size  # type: ignore[union-attr]
        if world % d:
            raise SpecError(f"num_gpus: ASTRA-sim's network file needs the GPU count ({world}) "
                            f"to be a multiple of the scale-up domain size ({d}) of topology "
                            f"'{topo.name}'")


@dataclass(frozen=True)
class ChakraExport:
    """What :func:`export_chakra` wrote. Sizes in bytes, times in seconds."""

    prefix: str
    num_ranks: int
    nodes_per_stage: tuple[int, ...]
    num_groups: int
    bytes_written: int
    elapsed_s: float  # the whole export
    write_s: float  # of which opening, writing and closing the trace files
    files: dict[str, str]

    @property
    def ranks_per_s(self) -> float:
        return self.num_ranks / self.elapsed_s if self.elapsed_s > 0 else float("inf")

    def to_dict(self) -> dict[str, Any]:
        return {"prefix": self.prefix, "num_ranks": self.num_ranks,
                "nodes_per_stage": list(self.nodes_per_stage), "num_groups": self.num_groups,
                "bytes_written": self.bytes_written, "elapsed_s": self.elapsed_s,
                "write_s": self.write_s, "ranks_per_s": self.ranks_per_s,
                "files": dict(self.files)}


def _metadata(run: TrainingRun, stage: int, world: int) -> bytes:
    spec = json.dumps(run.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    meta = message_class("GlobalMetadata")(version=ET_VERSION)
    meta.attr.extend([
        _attr("schema", string_val=ET_SCHEMA),
        _attr("codesign_version", string_val=__version__),
        _attr("codesign_spec", string_val=spec),
        _attr("codesign_spec_sha256", string_val=hashlib.sha256(spec.encode()).hexdigest()),
        _attr("pipeline_stage", int64_val=stage),
        _attr("num_ranks", int64_val=world),
        _attr("duration_source", string_val="codesign compute and network models, microseconds"),
    ])
    return record(meta.SerializeToString())


def export_chakra(run: TrainingRun, prefix: str | Path,
                  progress: Callable[[int, int], None] | None = None) -> ChakraExport:
    """Write the Chakra ET of one training step of ``run`` for every rank (see module doc).

    ``progress(done_ranks, total_ranks)`` is called after each pipeline stage. Trace files of
    higher ranks left at the same prefix by an earlier export are deleted. Raises
    :class:`InfeasiblePlan` for a plan that cannot run, :class:`SpecError` when the topology
    has no ASTRA-sim network file for this GPU count.
    """
    t0 = time.perf_counter()
    graph, compute, network = build_models(run)
    ranks = _Ranks(network)
    world = ranks.world
    _check_network(run, world)
    prefix = Path(prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    builder = _StageBuilder(graph, compute, network)
    pp = run.parallel.pp
    programs = [builder.program(s) for s in range(pp)]
    serializers = [_StageSerializer(nodes, ranks, _metadata(run, s, world))
                   for s, nodes in enumerate(programs)]
    ranks.assign_ids()
    written = 0
    write_s = 0.0
    done = 0
    for s, ser in enumerate(serializers):
        members = ranks.stage_ranks(s)
        values: dict[Slot, np.ndarray] = {("self", ()): members,
                                          ("next", ()): ranks.peer(members, s, 1),
                                          ("prev", ()): ranks.peer(members, s, -1)}
        group_ids = {slot: ranks.group_id(slot[1])[members]
                     for slot in ser.slots if slot[0] == "group"}
        rank_slots = ser.rank_slots
        for i, r in enumerate(members.tolist()):
            vals = [int(values[slot][i]) for slot in rank_slots]
            tpl = ser.template(tuple(_varint_width(x) for x in vals))
            rank_val = dict(zip(rank_slots, vals, strict=True))
            for slot, pos in tpl.holes:
                if slot[0] == "group":
                    raw = ranks.label(int(group_ids[slot][i]))
                else:
                    raw = varint(rank_val[slot])
                tpl.view[pos] = np.frombuffer(raw, dtype=np.uint8)
            t_write = time.perf_counter()
            with open(f"{prefix}.{r}.et", "wb") as f:  # one buffered write of the whole file
                f.write(tpl.buf)
            write_s += time.perf_counter() - t_write
            written += len(tpl.buf)
        done += len(members)
        if progress is not None:
            progress(done, world)
    _remove_stale(prefix, world)
    files = _write_side_files(run, prefix, ranks)
    return ChakraExport(
        prefix=str(prefix), num_ranks=world, nodes_per_stage=tuple(len(p) for p in programs),
        num_groups=ranks.num_groups,
        bytes_written=written, elapsed_s=time.perf_counter() - t0, write_s=write_s,
        files=files)


def _remove_stale(prefix: Path, world: int) -> None:
    """Delete ``PREFIX.<rank>.et`` files of ranks >= ``world`` left by an earlier, larger
    export to the same prefix (they would be read as part of this trace)."""
    for path in prefix.parent.glob(f"{glob.escape(prefix.name)}.*.et"):
        rank = path.name[len(prefix.name) + 1:-3]
        if rank.isdigit() and int(rank) >= world:
            path.unlink()


def _write_side_files(run: TrainingRun, prefix: Path, ranks: _Ranks) -> dict[str, str]:
    world = ranks.world
    paths = {"traces": f"{prefix}.<rank>.et", "groups": f"{prefix}.groups.json",
             "network": f"{prefix}.network.yml", "system": f"{prefix}.system.json",
             "memory": f"{prefix}.memory.json"}
    parts = [f'"{ranks.label(gid).decode()}":[{",".join(map(str, row.tolist()))}]'
             for gid, row in ranks.groups()]
    Path(paths["groups"]).write_text("{" + ",\n".join(parts) + "}\n", encoding="utf-8")
    Path(paths["network"]).write_text(network_yaml(run, world), encoding="utf-8")
    Path(paths["system"]).write_text(json.dumps(system_json(run, world), indent=2) + "\n",
                                     encoding="utf-8")
    Path(paths["memory"]).write_text(
        json.dumps({"memory-type": "NO_MEMORY_EXPANSION"}, indent=2) + "\n", encoding="utf-8")
    return paths
