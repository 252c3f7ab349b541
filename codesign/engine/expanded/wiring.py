"""The pipeline level of the per-rank engine as tasks: the step program
(:func:`~codesign.workload.step_program.build_step_program`) walked node by node, each node
priced for every replica class's cluster at its stage.

The schedule is not restated here: every dependency, stream, release offset and the order of
gradient buckets and parameter gathers come from the program's nodes, so any schedule the
program knows (``zb-h1`` included) runs per rank. What is per rank:

* a chunk pass, send or receive gather becomes one task per class (its cluster's pass
  timing, its pipeline links' send price and, under contention, its flow on the class's
  ports; a pass's collectives still running after its compute become *tail* tasks);
* a data-parallel collective (gradient bucket, parameter gather) spans every class: with one
  class it is one task; otherwise every class arrives, the collective runs from the last
  arrival at the price of the stage's slowest group instance, and every class holds its
  stream until it ends (under contention each class's part advances on that class's ports
  and the collective ends with the slowest part);
* the optimizer waits for its dependencies and the tails of the stage's passes.
"""

from __future__ import annotations

from collections.abc import Hashable

from codesign.engine.chunk import comm_category
from codesign.engine.expanded.clusters import Clusters, ClusterUnit
from codesign.engine.expanded.fluid import Flow
from codesign.engine.expanded.values import Resource
from codesign.engine.training import TaskBuilder
from codesign.network.faults import CommProfile, combine
from codesign.network.model import NetworkModel
from codesign.workload.step_program import Node, StepProgram

#: node kinds that are data-parallel collectives across replica classes
_DP_KINDS = frozenset({"param_gather", "grad_reduce"})


class Builder(TaskBuilder):
    """Tasks with symbolic keys (:class:`~codesign.engine.training.TaskBuilder`), plus the unit
    each task belongs to and its network flow or background load for contention."""

    def __init__(self) -> None:
        super().__init__()
        self.unit: list[tuple[int, int] | None] = []
        self.flows: dict[Hashable, Flow] = {}
        self.background: dict[Hashable, tuple[tuple[Resource, float], ...]] = {}

    def add(self, key: Hashable, stream: str, duration: float, deps: tuple[Hashable, ...] = (),
            name: str = "", category: str = "",
            start_after: tuple[tuple[Hashable, float], ...] = (),
            breakdown: tuple[tuple[str, float], ...] = (),
            unit: tuple[int, int] | None = None) -> Hashable:
        self.unit.append(unit)
        return super().add(key, stream, duration, deps, name, category, start_after, breakdown)


def resource(k: int, s: int, tier: str, d: str) -> Resource:
    """Port ``tier``/``d`` (``tx``, ``rx``) of class ``k``'s cluster at stage ``s``."""
    return (k, s, tier, d)


class ProgramWiring:
    """The tasks of ``program`` for every replica class of ``cl``, in :attr:`bld`.

    Tasks are added stage by stage, class by class, in the program's order within a stage
    (each stream's order is the program's). The task of node ``i`` for class ``k`` has key
    ``(k, i)``; a data-parallel collective's class-side tasks are keyed by the node id as
    :meth:`ref` says.
    """

    def __init__(self, program: StepProgram, network: NetworkModel, cl: Clusters,
                 contention: bool) -> None:
        self.program, self.network, self.cl = program, network, cl
        self.faults = cl.faults
        self.contention = contention
        self.pp = program.shape.pp
        self.n_cls = len(cl.classes)
        self.bld = Builder()
        self.by_stage: list[list[Node]] = [[] for _ in range(self.pp)]
        for node in program.nodes:
            self.by_stage[node.stage].append(node)
        self._dp_cost: dict[int, tuple[float, CommProfile | None]] = {}
        # nodes whose class-side task is a hold behind a barrier across classes
        self._hold = [self.n_cls > 1 and n.kind in _DP_KINDS for n in program.nodes]
        #: (class, stage) -> the optimizer's key
        self.optimizer: dict[tuple[int, int], Hashable] = {}

    def wire(self) -> Builder:
        for s in range(self.pp):
            for k in range(self.n_cls):
                tails: list[Hashable] = []
                pre = f"k{k}/s{s}"
                unit = self.cl.units[k][s]
                node_task = self._node
                for node in self.by_stage[s]:
                    node_task(k, node, tails, pre, unit)
        return self.bld

    def ref(self, k: int, nid: int) -> Hashable:
        """The key class ``k``'s tasks wait on for node ``nid``."""
        return ("HOLD", k, nid) if self._hold[nid] else (k, nid)

    def _node(self, k: int, node: Node, tails: list[Hashable], pre: str,
              u: ClusterUnit) -> None:
        s = node.stage
        hold = self._hold
        deps = tuple([("HOLD", k, d) if hold[d] else (k, d) for d in node.deps])
        key = (k, node.id)
        bld = self.bld
        kind = node.kind
        if kind == "pass":
            pt = u.passes[(node.v, node.phase)]
            bld.add(key, pre + "/compute", pt.compute_time, deps, name=node.name,
                    category="forward" if node.phase == "F" else "backward",
                    breakdown=pt.breakdown, unit=(k, s))
            if self.contention and pt.background:
                bld.background[key] = tuple(((k, s, *r), x)  # type: ignore[misc]
                                            for r, x in pt.background)
            for cat, dt in pt.tail:  # collectives still running when compute is done
                tails.append(bld.add((k, "TAIL", node.id, cat), f"{pre}/{cat}", dt, (key,),
                                     name=f"tail.{node.name}", category=cat, unit=(k, s)))
        elif kind == "send":
            fwd = node.phase == "F"
            bld.add(key, f"{pre}/{node.stream}", u.send_fwd if fwd else u.send_bwd, deps,
                    name=node.name, category=comm_category("pp"), unit=(k, s))
            if self.contention:  # the ports of the receiving stage (stage 0 for the last
                # stage's wrap-around send of an interleaved schedule)
                bld.flows[key] = self._send_flow(k, s, node.peer,
                                                 u.send_fwd_pid if fwd else u.send_bwd_pid)
        elif kind == "recv_gather":
            bld.add(key, f"{pre}/{node.stream}", self.cl.gather_s, deps, name=node.name,
                    category=comm_category("pp"), unit=(k, s))
        elif kind == "optimizer":
            extra = tuple(tails) if node.after_tails else ()
            self.optimizer[(k, s)] = bld.add(key, f"{pre}/{node.stream}", u.opt_time,
                                             deps + extra, name=node.name,
                                             category="optimizer", unit=(k, s))
        else:
            after: tuple[tuple[Hashable, float], ...] = ()
            if node.release is not None:
                src, layer = node.release
                sn = self.program.nodes[src]
                pt = u.passes[(sn.v, sn.phase)]
                after = ((self.ref(k, src), dict(pt.layer_done).get(layer, pt.compute_time)),)
            dur, prof = self._collective(node)
            self._sync_task(node, k, f"{pre}/{node.stream}", dur, prof, deps, after)

    def _collective(self, node: Node) -> tuple[float, CommProfile | None]:
        """Seconds of a data-parallel node's collectives (the slowest group instance of the
        stage when links are faulted) and, under contention, their network profile."""
        hit = self._dp_cost.get(node.id)
        if hit is not None:
            return hit
        faults, network = self.faults, self.network
        total = 0.0
        profs: list[CommProfile] = []
        for c in node.comms:
            if not faults.active:  # the symmetric engine's arithmetic: identical when healthy
                total += network.collective(c.kind, c.group, c.bytes).time_s
                if not self.contention:
                    continue
            ids = faults.barrier(node.stage, c.group, faults.dec(c.kind, c.group, c.bytes))
            worst = max(ids, key=lambda pid: faults.cost(c.kind, c.group, c.bytes, pid))
            if faults.active:
                total += faults.cost(c.kind, c.group, c.bytes, worst)
            if self.contention:
                profs.append(faults.profile(c.kind, c.group, c.bytes, worst))
        hit = self._dp_cost[node.id] = (total, combine(profs) if self.contention else None)
        return hit

    def _unit_flow(self, k: int, s: int, prof: CommProfile) -> Flow:
        """A collective's part on the ports of class ``k``'s cluster at stage ``s``."""
        usage = tuple((resource(k, s, tier, d), u) for (tier, d), u in prof.usage)
        return Flow(prof.latency_s, prof.transfer_s, usage)

    def _send_flow(self, k: int, src: int, dst: int, pid: int) -> Flow:
        prof = self.faults.profile("p2p", "pp", self.cl.act_bytes, pid)
        usage: list[tuple[Resource, float]] = []
        for (tier, _), u in prof.usage:
            usage += [(resource(k, src, tier, "tx"), u), (resource(k, dst, tier, "rx"), u)]
        return Flow(prof.latency_s, prof.transfer_s, tuple(usage))

    def _sync_task(self, node: Node, k: int, stream: str, dur: float,
                   prof: CommProfile | None, deps: tuple[Hashable, ...],
                   after: tuple[tuple[Hashable, float], ...]) -> None:
        """A data-parallel collective of node ``node`` for class ``k`` (see the module
        docstring): one task for one class, else arrive / run (or go, parts, join) / hold."""
        bld, n_cls, s, nid, name = self.bld, self.n_cls, node.stage, node.id, node.name
        cat = comm_category("dp")
        if n_cls == 1:
            bld.add((k, nid), stream, dur, deps, name=name, category=cat, start_after=after,
                    unit=(k, s))
            if prof is not None:
                bld.flows[(k, nid)] = self._unit_flow(k, s, prof)
            return
        bld.add(("ARR", k, nid), stream, 0.0, deps, name=f"{name}.arrive", category=cat,
                start_after=after, unit=(k, s))
        if prof is None:
            if k == 0:
                arrived = tuple([("ARR", j, nid) for j in range(n_cls)])
                bld.add(("SYNC", nid), f"s{s}/sync", dur, arrived, name=name, category=cat)
        else:
            if k == 0:
                arrived = tuple([("ARR", j, nid) for j in range(n_cls)])
                bld.add(("GO", nid), f"s{s}/sync.go", 0.0, arrived, name=f"{name}.start",
                        category=cat)
            bld.add(("PART", k, nid), f"{stream}.sync", dur, (("GO", nid),), name=name,
                    category=cat)
            bld.flows[("PART", k, nid)] = self._unit_flow(k, s, prof)
            if k == n_cls - 1:
                bld.add(("SYNC", nid), f"s{s}/sync", 0.0,
                        tuple(("PART", j, nid) for j in range(n_cls)), name=f"{name}.join",
                        category=cat)
        bld.add(("HOLD", k, nid), stream, 0.0, (("SYNC", nid),), name=f"{name}.hold",
                category=cat, unit=(k, s))

