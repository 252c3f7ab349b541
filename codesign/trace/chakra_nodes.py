"""The Chakra nodes of one pipeline stage, from the training step's program.

The step is :func:`codesign.workload.step_program.build_step_program` of the graph's exact
micro-batch count (a trace lists every micro-batch). One rank of a stage runs that stage's
program nodes, which become Chakra nodes as follows:

* a pass (phase ``F``, ``B`` or ``W`` in split schedules) is its chunk's operators: kernels as
  ``COMP_NODE`` (``num_ops`` = FLOPs, ``tensor_size`` = HBM bytes, durations from
  :class:`~codesign.hardware.compute.ComputeModel`), collectives as ``COMM_COLL_NODE`` on the
  rank's group, wired by :func:`~codesign.workload.step_program.wire_pass` (the overlap rule
  of each collective), plus the previous collective of the same stream in the pass. The pass's
  first operators wait for its *entry*: the previous node of the rank's compute stream and the
  nodes the program's dependencies stand for;
* a dependency on another stage's send is a ``COMM_RECV_NODE`` on this stage (after the
  previous node of the compute stream), and for scatter/gathered sends the program's receive
  gather is a TP all-gather after it; a send is a ``COMM_SEND_NODE`` after its pass, in order
  on its stream (on the compute stream when sends block). Tags are unique per (micro-batch,
  sending virtual stage, direction);
* a gradient bucket or parameter gather is its collectives (dense part, then expert part, each
  only on a group of more than one rank) in order on the stage's data-parallel stream; an
  overlapped gradient bucket waits for the last kernel of its layer in the pass that releases
  it and is listed right after that pass (and its send);
* the optimizer is a ``COMP_NODE`` waiting for every node nothing waits for yet (sends,
  asynchronous collectives, gradient buckets).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from codesign.errors import InfeasiblePlan
from codesign.hardware.compute import ComputeModel
from codesign.ir import Op
from codesign.network.model import NetworkModel
from codesign.trace.schema import enum_values
from codesign.workload.step_program import (
    Node,
    StepProgram,
    build_step_program,
    pass_ops,
    wire_pass,
)
from codesign.workload.training import TrainingGraph

NODE_TYPE = enum_values("NodeType")
COMP = NODE_TYPE["COMP_NODE"]
COLL = NODE_TYPE["COMM_COLL_NODE"]
SEND = NODE_TYPE["COMM_SEND_NODE"]
RECV = NODE_TYPE["COMM_RECV_NODE"]
_FWD, _BWD = 0, 1


@dataclass
class ChakraNode:
    """One node of a stage's trace; ``peer`` is ``next``/``prev`` for send/receive."""

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
class NodeList:
    """A stage's nodes (ids are list indices; dependencies point backwards)."""

    nodes: list[ChakraNode] = field(default_factory=list)
    stream_last: dict[str, int] = field(default_factory=dict)  # stage-level stream -> node
    _has_child: set[int] = field(default_factory=set)

    def add(self, node: ChakraNode) -> int:
        deps = node.deps
        if len(deps) > 1 or (deps and deps[0] < 0):
            node.deps = deps = list(dict.fromkeys(d for d in deps if d >= 0))
        self.nodes.append(node)
        self._has_child.update(deps)
        return len(self.nodes) - 1

    def on_stream(self, stream: str, node: ChakraNode) -> int:
        """Add ``node`` after the previous node of ``stream``."""
        if stream in self.stream_last:
            node.deps = [*node.deps, self.stream_last[stream]]
        self.stream_last[stream] = nid = self.add(node)
        return nid

    def dangling(self) -> list[int]:
        """Nodes nothing depends on yet."""
        return [i for i in range(len(self.nodes)) if i not in self._has_child]


class OpStep(NamedTuple):
    """One operator of a pass, wired once for every micro-batch: its node waits for the pass's
    entry (``lead`` -2), or the operator ``lead`` before it on the compute stream (-1: none),
    then the operators ``wired`` (:func:`~codesign.workload.step_program.wire_pass`), then
    ``after``, the previous collective of its stream in the pass (-1: none). ``node``: the
    :class:`ChakraNode` fields after its dependencies (duration, FLOPs, bytes, collective)."""

    suffix: str  # node name after the pass label
    type: int
    lead: int
    wired: tuple[int, ...]
    after: int
    layer: int
    node: tuple[float, float, float, str, float, str]


def listing_order(nodes: Sequence[Node]) -> list[Node]:
    """A stage's program nodes in the order its trace lists them: the program's, except that
    each overlapped gradient bucket comes right after the pass that releases it (and that
    pass's send) rather than after the stage's last pass."""
    released: dict[int, list[Node]] = {}
    rest: list[Node] = []
    for n in nodes:
        if n.release is not None:
            released.setdefault(n.release[0], []).append(n)
        else:
            rest.append(n)
    out: list[Node] = []
    held: list[Node] = []
    held_by = -1
    for n in rest:
        if held and not (n.kind == "send" and n.deps == (held_by,)):
            out += held
            held = []
        out.append(n)
        if n.kind == "pass":
            held, held_by = released.get(n.id, []), n.id
    return out + held


class StageNodes:
    """Builds the Chakra nodes of each pipeline stage of ``graph``'s step (module doc)."""

    def __init__(self, graph: TrainingGraph, compute: ComputeModel,
                 network: NetworkModel) -> None:
        from codesign.engine.training import step_shape

        p = graph.run.parallel
        self.compute, self.network = compute, network
        self.n_v = p.pp * p.vpp
        self.vpp = p.vpp
        if graph.num_microbatches * self.n_v * 2 >= 2**31:
            raise InfeasiblePlan("too many micro-batches × virtual stages for int32 tags")
        self.program: StepProgram = build_step_program(step_shape(graph, network))
        self.by_stage: dict[int, list[Node]] = {}
        for n in self.program.nodes:
            self.by_stage.setdefault(n.stage, []).append(n)
        self.by_v = {c.virtual_stage: c for c in graph.chunks}
        self._steps: dict[tuple[int, str], list[OpStep]] = {}
        self._comm_time: dict[tuple[str, str, float], float] = {}
        self._group_size: dict[str, int] = {}

    # --- prices ----------------------------------------------------------------------------

    def comm_time(self, kind: str, group: str, size: float) -> float:
        key = (kind, group, size)
        t = self._comm_time.get(key)
        if t is None:
            t = self._comm_time[key] = self.network.collective(kind, group, size).time_s
        return t

    def group_size(self, group: str) -> int:
        if group not in self._group_size:
            self._group_size[group] = self.network.group_size(group)
        return self._group_size[group]

    def pass_steps(self, v: int, phase: str) -> list[OpStep]:
        """The operators of a pass of virtual stage ``v``, priced and wired (cached)."""
        key = (v, phase)
        if key in self._steps:
            return self._steps[key]
        ch = self.by_v[v]
        ops = pass_ops(ch.forward, ch.backward, phase, "W" in self.program.phases)
        steps: list[OpStep] = []
        prev = -1  # last kernel
        stream_last: dict[str, int] = {}
        for i, (op, wired) in enumerate(zip(ops, wire_pass(ops), strict=True)):
            suffix = op.name + (f".l{op.layer}" if op.layer >= 0 else "")
            if op.kind != "comm":
                steps.append(OpStep(suffix, COMP, prev if prev >= 0 else -2, wired, -1,
                                    op.layer, (self.compute.time(op), op.flops, op.bytes,
                                               "", 0.0, "")))
                prev = i
                continue
            # nothing of the pass before it (no kernel it waits for): the pass's entry
            lead = -1 if any(ops[j].kind != "comm" for j in wired) else -2
            kind, group = op.comm or "all_reduce", op.group or "dp"
            steps.append(OpStep(suffix, COLL, lead, wired, stream_last.get(op.stream, -1),
                                op.layer, (self.comm_time(kind, group, op.size), 0.0, 0.0,
                                           kind, op.size, group)))
            stream_last[op.stream] = i
        self._steps[key] = steps
        return steps

    # --- nodes -----------------------------------------------------------------------------

    def label(self, phase: str, mb: int, v: int) -> str:
        return f"{phase}{mb}.v{v}" if self.vpp > 1 else f"{phase}{mb}"  # v = stage without vpp

    def tag(self, mb: int, v: int, direction: int) -> int:
        """Send/receive tag of micro-batch ``mb`` leaving virtual stage ``v``."""
        return (mb * self.n_v + v) * 2 + direction

    def stage(self, stage: int) -> list[ChakraNode]:
        """The Chakra nodes of one rank of ``stage``."""
        out = NodeList()
        ends: dict[int, list[int]] = {}  # program node -> the nodes that finish it
        layer_end: dict[int, tuple[int, dict[int, int]]] = {}  # pass -> (end, layer -> end)
        last = -1  # last node of the rank's compute stream
        for n in listing_order(self.by_stage.get(stage, [])):
            if n.kind == "pass":
                entry = [last]
                for d in n.deps:
                    dn = self.program.nodes[d]
                    entry += [self._recv(out, dn, last)] if dn.stage != stage else ends[d]
                layer_end[n.id] = self._pass(out, n, entry)
                last = layer_end[n.id][0]
                ends[n.id] = [last]
            elif n.kind == "send":
                send = self._send(out, n, ends[n.deps[0]])
                if n.stream == "compute":  # a blocking send: the pass ends with it
                    last = send
                    ends[n.deps[0]] = [send]
            elif n.kind == "recv_gather":
                recv = self._recv(out, self.program.nodes[n.deps[0]], last)
                c = n.comms[0]
                name = out.nodes[recv].name.replace("recv", "gather")
                ends[n.id] = [out.add(ChakraNode(
                    name, COLL, [recv], self.comm_time(c.kind, c.group, c.bytes),
                    comm=c.kind, size=c.bytes, group=c.group))]
            elif n.kind == "optimizer":
                op = Op(name="optimizer", kind="memory", category="optimizer", layer=-1,
                        bytes=n.hbm_bytes)
                ends[n.id] = [out.add(ChakraNode("optimizer", COMP, out.dangling(),
                                                 self.compute.time(op), nbytes=n.hbm_bytes))]
            else:  # gradient bucket or parameter gather
                if n.release is not None:
                    end, layers = layer_end[n.release[0]]
                    deps = [layers.get(n.release[1], end)]
                else:
                    deps = [i for d in n.deps for i in ends[d]]
                ends[n.id] = self._bucket(out, n, deps)
        return out.nodes

    def _pass(self, out: NodeList, n: Node, entry: list[int]) -> tuple[int, dict[int, int]]:
        """Nodes of one pass; returns (its last kernel, layer -> its last kernel)."""
        label = self.label(n.phase, n.mb, n.v)
        ids: list[int] = []  # operator index -> node
        prev = -1  # last kernel
        layer_last: dict[int, int] = {}
        for st in self.pass_steps(n.v, n.phase):
            deps = list(entry) if st.lead == -2 else [ids[st.lead]] if st.lead >= 0 else []
            if st.wired:
                deps += [ids[j] for j in st.wired]
            if st.after >= 0:
                deps.append(ids[st.after])
            nid = out.add(ChakraNode(f"{label}.{st.suffix}", st.type, deps, *st.node))
            ids.append(nid)
            if st.type == COMP:
                prev = layer_last[st.layer] = nid
        return (prev if prev >= 0 else len(out.nodes) - 1), layer_last

    def _send(self, out: NodeList, n: Node, deps: list[int]) -> int:
        """A pipeline send after its pass, in order on its stream."""
        fwd = n.phase == "F"
        c = n.comms[0]
        node = ChakraNode(f"send_{'fwd' if fwd else 'bwd'}.{self.label(n.phase, n.mb, n.v)}",
                          SEND, list(deps), self.comm_time(c.kind, c.group, c.bytes),
                          size=c.bytes, peer="next" if fwd else "prev",
                          tag=self.tag(n.mb, n.v, _FWD if fwd else _BWD))
        return out.add(node) if n.stream == "compute" else out.on_stream(n.stream, node)

    def _recv(self, out: NodeList, send: Node, last: int) -> int:
        """The receive of another stage's ``send``, after the compute stream's ``last``."""
        fwd = send.phase == "F"
        c = send.comms[0]
        label = self.label(send.phase, send.mb, send.v + 1 if fwd else send.v - 1)
        return out.add(ChakraNode(
            f"recv_{'fwd' if fwd else 'bwd'}.{label}", RECV, [last],
            self.comm_time(c.kind, c.group, c.bytes), size=c.bytes,
            peer="prev" if fwd else "next", tag=self.tag(send.mb, send.v, _FWD if fwd else _BWD)))

    def _bucket(self, out: NodeList, n: Node, deps: list[int]) -> list[int]:
        """Collectives of one parameter bucket (dense part, then expert part; only on groups
        of more than one rank) in order on the stage's data-parallel stream."""
        ids: list[int] = []
        for i, c in enumerate(n.comms):
            if c.bytes <= 0 or self.group_size(c.group) <= 1:
                continue
            node = ChakraNode(n.name if i == 0 else f"expert_{n.name}", COLL,
                              ids[-1:] or list(deps), self.comm_time(c.kind, c.group, c.bytes),
                              comm=c.kind, size=c.bytes, group=c.group)
            ids.append(out.on_stream("dp", node) if not ids else out.add(node))
            out.stream_last["dp"] = ids[-1]
        return ids
